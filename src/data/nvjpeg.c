#include "data/nvjpeg.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/tuning.h"

#define SYM(name) { #name, offsetof(struct nvjpeg_api, name) }

static const struct {
	const char *name;
	size_t offset;
} nvjpeg_syms[] = {
	SYM(nvjpegCreateEx),
	SYM(nvjpegDestroy),
	SYM(nvjpegJpegStateCreate),
	SYM(nvjpegJpegStateDestroy),
	SYM(nvjpegGetImageInfo),
	SYM(nvjpegDecode),
	SYM(nvjpegDecodeBatchedInitialize),
	SYM(nvjpegDecodeBatched),
	SYM(nvjpegJpegStreamCreate),
	SYM(nvjpegJpegStreamDestroy),
	SYM(nvjpegJpegStreamParseHeader),
	SYM(nvjpegDecodeBatchedSupported),
};

/* Resolved where the library has them, else left NULL. */
static const struct {
	const char *name;
	size_t offset;
} nvjpeg_optional_syms[] = {
	SYM(nvjpegDecodeBatchedPreAllocate),
	SYM(nvjpegGetHardwareDecoderInfo),
	SYM(nvjpegDecodeBatchedEx),
	SYM(nvjpegDecodeParamsCreate),
	SYM(nvjpegDecodeParamsDestroy),
	SYM(nvjpegDecodeParamsSetROI),
};

/* The sonames of CUDA 13 and 12, then the development link. */
static const char *const nvjpeg_default_libs[] = {
	"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so",
};

static pthread_mutex_t nvjpeg_lock = PTHREAD_MUTEX_INITIALIZER;
static int nvjpeg_refs;
static void *nvjpeg_lib;
static struct nvjpeg_api nvjpeg;
static char nvjpeg_path[TUNING_PATH_MAX];
static nvjpeg_create_ex_v2_fn nvjpeg_v2; /* optional: NULL before CUDA 12.1 */

/* dlopen the tuning path alone when it is set (a test points it at a file that does
 * not exist and must not find the real library instead), else the first default
 * that loads; the message names what was tried. */
static int nvjpeg_load(void)
{
	const char *path = tuning_get()->nvjpeg_lib;
	if (*path) {
		nvjpeg_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!nvjpeg_lib)
			return gp_error(GP_ENODEV, "nvJPEG not available: %s", dlerror());
		snprintf(nvjpeg_path, sizeof(nvjpeg_path), "%s", path);
		return 0;
	}
	char why[512] = "";
	for (size_t i = 0; i < sizeof(nvjpeg_default_libs) / sizeof(nvjpeg_default_libs[0]);
	     i++) {
		nvjpeg_lib = dlopen(nvjpeg_default_libs[i], RTLD_NOW | RTLD_LOCAL);
		if (nvjpeg_lib) {
			snprintf(nvjpeg_path, sizeof(nvjpeg_path), "%s", nvjpeg_default_libs[i]);
			return 0;
		}
		if (!why[0])
			snprintf(why, sizeof(why), "%s", dlerror());
	}
	return gp_error(GP_ENODEV, "nvJPEG not available: %s (also tried libnvjpeg.so.12 "
			"and libnvjpeg.so)", why);
}

int nvjpeg_open(const struct nvjpeg_api **api)
{
	int rc = 0;
	pthread_mutex_lock(&nvjpeg_lock);
	if (nvjpeg_refs > 0) {
		nvjpeg_refs++;
		goto unlock;
	}
	rc = nvjpeg_load();
	if (rc < 0)
		goto unlock;
	memset(&nvjpeg, 0, sizeof(nvjpeg));
	for (size_t i = 0; i < sizeof(nvjpeg_syms) / sizeof(nvjpeg_syms[0]); i++) {
		void *sym = dlsym(nvjpeg_lib, nvjpeg_syms[i].name);
		if (!sym) {
			rc = gp_error(GP_ENODEV, "nvJPEG not available: %s lacks %s", nvjpeg_path,
				      nvjpeg_syms[i].name);
			dlclose(nvjpeg_lib);
			nvjpeg_lib = NULL;
			nvjpeg_path[0] = 0;
			goto unlock;
		}
		memcpy((char *)&nvjpeg + nvjpeg_syms[i].offset, &sym, sizeof(sym));
	}
	for (size_t i = 0; i < sizeof(nvjpeg_optional_syms) / sizeof(nvjpeg_optional_syms[0]);
	     i++) {
		void *sym = dlsym(nvjpeg_lib, nvjpeg_optional_syms[i].name);
		memcpy((char *)&nvjpeg + nvjpeg_optional_syms[i].offset, &sym, sizeof(sym));
	}
	void *v2 = dlsym(nvjpeg_lib, "nvjpegCreateExV2");
	memcpy(&nvjpeg_v2, &v2, sizeof(v2));
	nvjpeg_refs = 1;
unlock:
	if (rc == 0)
		*api = &nvjpeg;
	pthread_mutex_unlock(&nvjpeg_lock);
	return rc;
}

void nvjpeg_close(void)
{
	pthread_mutex_lock(&nvjpeg_lock);
	if (nvjpeg_refs > 0 && --nvjpeg_refs == 0) {
		dlclose(nvjpeg_lib);
		nvjpeg_lib = NULL;
		nvjpeg_v2 = NULL;
	}
	pthread_mutex_unlock(&nvjpeg_lock);
}

nvjpeg_create_ex_v2_fn nvjpeg_create_ex_v2(void)
{
	return nvjpeg_v2;
}

const char *nvjpeg_lib_path(void)
{
	return nvjpeg_path;
}

const char *nvjpeg_status_name(int status)
{
	static const char *const names[] = {
		"NVJPEG_STATUS_SUCCESS", "NVJPEG_STATUS_NOT_INITIALIZED",
		"NVJPEG_STATUS_INVALID_PARAMETER", "NVJPEG_STATUS_BAD_JPEG",
		"NVJPEG_STATUS_JPEG_NOT_SUPPORTED", "NVJPEG_STATUS_ALLOCATOR_FAILURE",
		"NVJPEG_STATUS_EXECUTION_FAILED", "NVJPEG_STATUS_ARCH_MISMATCH",
		"NVJPEG_STATUS_INTERNAL_ERROR", "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
		"NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
	};
	if (status >= 0 && status < (int)(sizeof(names) / sizeof(names[0])))
		return names[status];
	return "NVJPEG_STATUS_UNKNOWN";
}
