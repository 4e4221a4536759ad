/* NVML through dlopen with our own declarations of the few types and functions we
 * use (their layouts are part of NVML's stable ABI). Functions that older drivers
 * lack are optional: the counter they feed reads as 0. */
#include "gpu/nvml.h"

#include "core/sort.h"
#include "core/tuning.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/error.h"
#include "core/timeutil.h"

#define NVML_SUCCESS 0
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_FUNCTION_NOT_FOUND 13

#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_GPU_UTILIZATION_SAMPLES 1
#define NVML_VALUE_NOT_AVAILABLE_ULL 0xffffffffffffffffULL

enum nvml_value_type {
	NVML_VALUE_TYPE_DOUBLE = 0,
	NVML_VALUE_TYPE_UNSIGNED_INT,
	NVML_VALUE_TYPE_UNSIGNED_LONG,
	NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
	NVML_VALUE_TYPE_SIGNED_LONG_LONG,
	NVML_VALUE_TYPE_SIGNED_INT,
};

typedef struct nvml_device_opaque *nvml_device;

struct nvml_memory {
	unsigned long long total, free, used;
};

struct nvml_utilization {
	unsigned gpu, memory;
};

/* nvmlProcessInfo_v2_t: what both _v2 and _v3 of GetComputeRunningProcesses fill. */
struct nvml_process_info {
	unsigned pid;
	unsigned long long used_gpu_memory;
	unsigned gpu_instance_id, compute_instance_id;
};

union nvml_value {
	double d;
	int si;
	unsigned ui;
	unsigned long ul;
	unsigned long long ull;
	long long sll;
};

struct nvml_raw_sample {
	unsigned long long ts_us;
	union nvml_value v;
};

/* nvmlProcessUtilizationSample_t: one process's share of the SMs and memory
 * controller over the driver's last sampling period. */
struct nvml_process_util {
	unsigned pid;
	unsigned long long ts_us;
	unsigned sm_util, mem_util, enc_util, dec_util;
};

/* ---- GPM declarations ------------------------------------------------------------
 * Copied by hand from NVIDIA's nvml.h (NVML 12.2.140, as vendored in NVIDIA/go-nvml
 * gen/nvml/nvml.h, "GPM Enums" and "GPM Structs"): the metric ids, the version
 * constants and the layouts of nvmlGpmMetric_t, nvmlGpmMetricsGet_t and
 * nvmlGpmSupport_t. nvmlGpmSample_t is an opaque pointer. The header's
 * metrics[NVML_GPM_METRIC_MAX] array has grown between releases (98, then 210,
 * 333) while the version stayed 1; the library reads numMetrics entries, so a
 * shorter array of our own is what every release accepts. */
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRIC_SM_UTIL 2         /* % of SMs busy */
#define NVML_GPM_METRIC_SM_OCCUPANCY 3    /* % of warps active vs the maximum */
#define NVML_GPM_METRIC_ANY_TENSOR_UTIL 5 /* % of time any tensor pipe was busy */
#define NVML_GPM_METRIC_HMMA_TENSOR_UTIL 7 /* % of time the FP16/BF16/TF32 pipe was */
#define NVML_GPM_METRIC_DRAM_BW_UTIL 10   /* % of peak DRAM bandwidth */
#define NVML_GPM_OUR_METRICS 5

struct nvml_gpm_sample_opaque;

struct nvml_gpm_metric {
	unsigned metric_id;
	int nvml_return; /* nvmlReturn_t: the value is valid only when 0 */
	double value;
	struct {
		char *short_name, *long_name, *unit;
	} info;
};

struct nvml_gpm_metrics_get {
	unsigned version;
	unsigned num_metrics;
	struct nvml_gpm_sample_opaque *sample1, *sample2;
	struct nvml_gpm_metric metrics[NVML_GPM_OUR_METRICS];
};

struct nvml_gpm_support {
	unsigned version;
	unsigned is_supported_device;
};

/* Members carry the NVML symbol names so that NVML_CALL's recorded text reads as
 * the NVML call it is. */
struct nvml_api {
	int (*nvmlInit_v2)(void);
	int (*nvmlShutdown)(void);
	const char *(*nvmlErrorString)(int);
	int (*nvmlDeviceGetCount_v2)(unsigned *);
	int (*nvmlDeviceGetHandleByIndex_v2)(unsigned, nvml_device *);
	int (*nvmlDeviceGetName)(nvml_device, char *, unsigned);
	int (*nvmlDeviceGetMemoryInfo)(nvml_device, struct nvml_memory *);
	/* optional from here on */
	int (*nvmlDeviceGetUUID)(nvml_device, char *, unsigned);
	int (*nvmlSystemGetDriverVersion)(char *, unsigned);
	int (*nvmlSystemGetCudaDriverVersion_v2)(int *);
	int (*nvmlSystemGetCudaDriverVersion)(int *);
	int (*nvmlDeviceGetEnforcedPowerLimit)(nvml_device, unsigned *);
	int (*nvmlDeviceGetPowerManagementLimit)(nvml_device, unsigned *);
	int (*nvmlDeviceGetMaxClockInfo)(nvml_device, int, unsigned *);
	int (*nvmlDeviceGetClockInfo)(nvml_device, int, unsigned *);
	int (*nvmlDeviceGetUtilizationRates)(nvml_device, struct nvml_utilization *);
	int (*nvmlDeviceGetPowerUsage)(nvml_device, unsigned *);
	int (*nvmlDeviceGetTemperature)(nvml_device, int, unsigned *);
	int (*nvmlDeviceGetCurrentClocksEventReasons)(nvml_device, unsigned long long *);
	int (*nvmlDeviceGetCurrentClocksThrottleReasons)(nvml_device, unsigned long long *);
	int (*nvmlDeviceGetComputeRunningProcesses_v3)(nvml_device, unsigned *,
						       struct nvml_process_info *);
	int (*nvmlDeviceGetComputeRunningProcesses_v2)(nvml_device, unsigned *,
						       struct nvml_process_info *);
	int (*nvmlDeviceGetSamples)(nvml_device, int, unsigned long long, int *, unsigned *,
				    struct nvml_raw_sample *);
	int (*nvmlDeviceGetTotalEnergyConsumption)(nvml_device, unsigned long long *);
	int (*nvmlDeviceGetProcessUtilization)(nvml_device, struct nvml_process_util *,
					       unsigned *, unsigned long long);
	/* GPM (GPU performance monitoring, Hopper on): declared with the GPM block below */
	int (*nvmlGpmQueryDeviceSupport)(nvml_device, struct nvml_gpm_support *);
	int (*nvmlGpmSampleAlloc)(struct nvml_gpm_sample_opaque **);
	int (*nvmlGpmSampleFree)(struct nvml_gpm_sample_opaque *);
	int (*nvmlGpmSampleGet)(nvml_device, struct nvml_gpm_sample_opaque *);
	int (*nvmlGpmMetricsGet)(struct nvml_gpm_metrics_get *);
};

#define SYM(name, required) { #name, offsetof(struct nvml_api, name), required }

static const struct {
	const char *name;
	size_t offset;
	int required;
} nvml_syms[] = {
	SYM(nvmlInit_v2, 1),
	SYM(nvmlShutdown, 1),
	SYM(nvmlErrorString, 1),
	SYM(nvmlDeviceGetCount_v2, 1),
	SYM(nvmlDeviceGetHandleByIndex_v2, 1),
	SYM(nvmlDeviceGetName, 1),
	SYM(nvmlDeviceGetMemoryInfo, 1),
	SYM(nvmlDeviceGetUUID, 0),
	SYM(nvmlSystemGetDriverVersion, 0),
	SYM(nvmlSystemGetCudaDriverVersion_v2, 0),
	SYM(nvmlSystemGetCudaDriverVersion, 0),
	SYM(nvmlDeviceGetEnforcedPowerLimit, 0),
	SYM(nvmlDeviceGetPowerManagementLimit, 0),
	SYM(nvmlDeviceGetMaxClockInfo, 0),
	SYM(nvmlDeviceGetClockInfo, 0),
	SYM(nvmlDeviceGetUtilizationRates, 0),
	SYM(nvmlDeviceGetPowerUsage, 0),
	SYM(nvmlDeviceGetTemperature, 0),
	SYM(nvmlDeviceGetCurrentClocksEventReasons, 0),
	SYM(nvmlDeviceGetCurrentClocksThrottleReasons, 0),
	SYM(nvmlDeviceGetComputeRunningProcesses_v3, 0),
	SYM(nvmlDeviceGetComputeRunningProcesses_v2, 0),
	SYM(nvmlDeviceGetSamples, 0),
	SYM(nvmlDeviceGetTotalEnergyConsumption, 0),
	SYM(nvmlDeviceGetProcessUtilization, 0),
	SYM(nvmlGpmQueryDeviceSupport, 0),
	SYM(nvmlGpmSampleAlloc, 0),
	SYM(nvmlGpmSampleFree, 0),
	SYM(nvmlGpmSampleGet, 0),
	SYM(nvmlGpmMetricsGet, 0),
};

static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static int nvml_refs;
static void *nvml_lib;
static struct nvml_api nvml;

static int nvml_code(int rc)
{
	switch (rc) {
	case NVML_ERROR_NOT_SUPPORTED:
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return GP_EUNSUPPORTED;
	case NVML_ERROR_NOT_FOUND:
		return GP_ENOTFOUND;
	case NVML_ERROR_DRIVER_NOT_LOADED:
	case NVML_ERROR_LIBRARY_NOT_FOUND:
		return GP_ENODEV;
	}
	return GP_EDEVICE;
}

static int nvml_check(int rc, const char *call, const char *file, int line)
{
	if (rc == NVML_SUCCESS)
		return 0;
	return gp_error(nvml_code(rc), "%s: %s (%s:%d)", call, nvml.nvmlErrorString(rc), file,
			line);
}

#define NVML_CALL(call) nvml_check((call), #call, __FILE__, __LINE__)

/* For counters that some devices or drivers do not offer: an absent function or
 * NOT_SUPPORTED / NO_PERMISSION leaves *value at 0; other failures are errors. */
static int nvml_check_optional(int rc, const char *call, const char *file, int line)
{
	if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_NO_PERMISSION ||
	    rc == NVML_ERROR_FUNCTION_NOT_FOUND)
		return 0;
	return nvml_check(rc, call, file, line);
}

#define NVML_OPTIONAL(fn, ...)                                                          \
	(nvml.fn ? nvml_check_optional(nvml.fn(__VA_ARGS__), #fn "(" #__VA_ARGS__ ")",  \
				       __FILE__, __LINE__)                              \
		 : 0)

int nvml_open(void)
{
	int rc = 0;
	pthread_mutex_lock(&nvml_lock);
	if (nvml_refs > 0) {
		nvml_refs++;
		goto unlock;
	}
	const char *path = tuning_get()->nvml_lib;
	if (!*path)
		path = "libnvidia-ml.so.1";
	nvml_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!nvml_lib) {
		rc = gp_error(GP_ENODEV, "NVML not available: %s", dlerror());
		goto unlock;
	}
	memset(&nvml, 0, sizeof(nvml));
	for (size_t i = 0; i < sizeof(nvml_syms) / sizeof(nvml_syms[0]); i++) {
		void *sym = dlsym(nvml_lib, nvml_syms[i].name);
		if (!sym && nvml_syms[i].required) {
			rc = gp_error(GP_ENODEV, "NVML not available: %s lacks %s", path,
				      nvml_syms[i].name);
			goto close_lib;
		}
		memcpy((char *)&nvml + nvml_syms[i].offset, &sym, sizeof(sym));
	}
	rc = NVML_CALL(nvml.nvmlInit_v2());
	if (rc < 0) {
		rc = gp_error_wrap(GP_ENODEV, "NVML not available");
		goto close_lib;
	}
	nvml_refs = 1;
	goto unlock;
close_lib:
	dlclose(nvml_lib);
	nvml_lib = NULL;
unlock:
	pthread_mutex_unlock(&nvml_lock);
	return rc;
}

void nvml_close(void)
{
	pthread_mutex_lock(&nvml_lock);
	if (nvml_refs > 0 && --nvml_refs == 0) {
		nvml.nvmlShutdown();
		dlclose(nvml_lib);
		nvml_lib = NULL;
	}
	pthread_mutex_unlock(&nvml_lock);
}

static int nvml_handle(int dev, nvml_device *h)
{
	if (!nvml_lib)
		return gp_error(GP_EINVAL, "NVML used before nvml_open()");
	if (dev < 0)
		return gp_error(GP_EINVAL, "GPU index %d is negative", dev);
	return NVML_CALL(nvml.nvmlDeviceGetHandleByIndex_v2((unsigned)dev, h));
}

int nvml_device_count(int *n)
{
	unsigned count = 0;
	if (!nvml_lib)
		return gp_error(GP_EINVAL, "NVML used before nvml_open()");
	GP_TRY(NVML_CALL(nvml.nvmlDeviceGetCount_v2(&count)));
	*n = (int)count;
	return 0;
}

int nvml_static_info(int dev, struct nvml_static_info *out)
{
	nvml_device h;
	struct nvml_memory mem;
	memset(out, 0, sizeof(*out));
	GP_TRY(nvml_handle(dev, &h));
	GP_TRY(NVML_CALL(nvml.nvmlDeviceGetName(h, out->name, sizeof(out->name))));
	GP_TRY(NVML_CALL(nvml.nvmlDeviceGetMemoryInfo(h, &mem)));
	out->mem_total_bytes = (size_t)mem.total;
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetUUID, h, out->uuid, sizeof(out->uuid)));
	GP_TRY(NVML_OPTIONAL(nvmlSystemGetDriverVersion, out->driver_version,
			     sizeof(out->driver_version)));
	if (nvml.nvmlSystemGetCudaDriverVersion_v2)
		GP_TRY(NVML_OPTIONAL(nvmlSystemGetCudaDriverVersion_v2, &out->cuda_driver_version));
	else
		GP_TRY(NVML_OPTIONAL(nvmlSystemGetCudaDriverVersion, &out->cuda_driver_version));
	if (nvml.nvmlDeviceGetEnforcedPowerLimit)
		GP_TRY(NVML_OPTIONAL(nvmlDeviceGetEnforcedPowerLimit, h, &out->power_limit_mw));
	else
		GP_TRY(NVML_OPTIONAL(nvmlDeviceGetPowerManagementLimit, h, &out->power_limit_mw));
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetMaxClockInfo, h, NVML_CLOCK_SM, &out->max_sm_clock_mhz));
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetMaxClockInfo, h, NVML_CLOCK_MEM,
			     &out->max_mem_clock_mhz));
	return 0;
}

int nvml_sample(int dev, struct nvml_sample *out)
{
	nvml_device h;
	struct nvml_memory mem;
	struct nvml_utilization util = { 0, 0 };
	memset(out, 0, sizeof(*out));
	GP_TRY(nvml_handle(dev, &h));
	out->t_s = gp_now_s();
	GP_TRY(NVML_CALL(nvml.nvmlDeviceGetMemoryInfo(h, &mem)));
	out->mem_used_bytes = (size_t)mem.used;
	out->mem_total_bytes = (size_t)mem.total;
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetUtilizationRates, h, &util));
	out->util_gpu_pct = util.gpu;
	out->util_mem_pct = util.memory;
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetPowerUsage, h, &out->power_mw));
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetTemperature, h, NVML_TEMPERATURE_GPU, &out->temp_c));
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetClockInfo, h, NVML_CLOCK_SM, &out->sm_clock_mhz));
	GP_TRY(NVML_OPTIONAL(nvmlDeviceGetClockInfo, h, NVML_CLOCK_MEM, &out->mem_clock_mhz));
	/* Drivers from 535 on call throttling "clocks events"; the old name stays. */
	if (nvml.nvmlDeviceGetCurrentClocksEventReasons)
		GP_TRY(NVML_OPTIONAL(nvmlDeviceGetCurrentClocksEventReasons, h,
				     &out->throttle_reasons));
	else
		GP_TRY(NVML_OPTIONAL(nvmlDeviceGetCurrentClocksThrottleReasons, h,
				     &out->throttle_reasons));
	return 0;
}

int nvml_process_mem_bytes(int dev, unsigned pid, size_t *bytes)
{
	nvml_device h;
	int (*list)(nvml_device, unsigned *, struct nvml_process_info *) =
		nvml.nvmlDeviceGetComputeRunningProcesses_v3
			? nvml.nvmlDeviceGetComputeRunningProcesses_v3
			: nvml.nvmlDeviceGetComputeRunningProcesses_v2;
	struct nvml_process_info *procs = NULL;
	unsigned cap = 32, count;
	int rc;

	GP_TRY(nvml_handle(dev, &h));
	if (!list)
		return gp_error(GP_EUNSUPPORTED, "NVML lacks nvmlDeviceGetComputeRunningProcesses");
	/* The process list can grow between the size query and the call: retry. */
	for (;;) {
		struct nvml_process_info *grown = realloc(procs, cap * sizeof(*procs));
		if (!grown) {
			rc = gp_error(GP_ENOMEM, "no memory for %u NVML process entries", cap);
			goto free_procs;
		}
		procs = grown;
		count = cap;
		int nrc = list(h, &count, procs);
		if (nrc == NVML_ERROR_INSUFFICIENT_SIZE && cap < 65536) {
			cap = count > cap ? count + 8 : cap * 2;
			continue;
		}
		rc = NVML_CALL(nrc);
		if (rc < 0)
			goto free_procs;
		break;
	}
	rc = gp_error(GP_ENOTFOUND,
		      "process %u has no context on GPU %d (inside a container NVML reports "
		      "host process ids)", pid, dev);
	for (unsigned i = 0; i < count; i++) {
		if (procs[i].pid != pid)
			continue;
		if (procs[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE_ULL) {
			rc = gp_error(GP_EUNSUPPORTED, "NVML does not report process memory here");
			break;
		}
		*bytes = (size_t)procs[i].used_gpu_memory;
		rc = 0;
		break;
	}
free_procs:
	free(procs);
	return rc;
}

static double nvml_value_double(int type, union nvml_value v)
{
	switch (type) {
	case NVML_VALUE_TYPE_DOUBLE: return v.d;
	case NVML_VALUE_TYPE_UNSIGNED_LONG: return (double)v.ul;
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return (double)v.ull;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return (double)v.sll;
	case NVML_VALUE_TYPE_SIGNED_INT: return (double)v.si;
	default: return (double)v.ui;
	}
}

static int raw_sample_by_time(const void *a, const void *b)
{
	const struct nvml_raw_sample *x = a, *y = b;
	return (x->ts_us > y->ts_us) - (x->ts_us < y->ts_us);
}

int nvml_util_samples(int dev, unsigned long long *last_ts_us, double *pct, double *t_s,
		      int cap, int *n)
{
	nvml_device h;
	struct nvml_raw_sample *raw = NULL;
	unsigned count = 0;
	int type = 0, rc;

	*n = 0;
	GP_TRY(nvml_handle(dev, &h));
	if (!nvml.nvmlDeviceGetSamples)
		return gp_error(GP_EUNSUPPORTED, "NVML lacks nvmlDeviceGetSamples");
	/* A first call with no buffer asks how many samples the driver keeps. */
	rc = nvml.nvmlDeviceGetSamples(h, NVML_GPU_UTILIZATION_SAMPLES, *last_ts_us, &type,
				       &count, NULL);
	if (rc == NVML_ERROR_NOT_FOUND)
		return 0;
	GP_TRY(NVML_CALL(rc));
	if (count == 0)
		return 0;
	raw = calloc(count, sizeof(*raw));
	if (!raw)
		return gp_error(GP_ENOMEM, "no memory for %u NVML samples", count);
	rc = nvml.nvmlDeviceGetSamples(h, NVML_GPU_UTILIZATION_SAMPLES, *last_ts_us, &type,
				       &count, raw);
	if (rc == NVML_ERROR_NOT_FOUND) {
		rc = 0;
		goto free_raw;
	}
	rc = NVML_CALL(rc);
	if (rc < 0)
		goto free_raw;
	gp_qsort(raw, count, sizeof(*raw), raw_sample_by_time);

	/* NVML stamps samples with wall-clock microseconds; map them onto the
	 * monotonic clock that nvml_sample uses, through one pair of readings. */
	struct timeval wall;
	gettimeofday(&wall, NULL);
	double mono = gp_now_s();
	double wall_s = wall.tv_sec + wall.tv_usec * 1e-6;
	unsigned first = count > (unsigned)cap ? count - (unsigned)cap : 0;
	for (unsigned i = first; i < count; i++) {
		pct[*n] = nvml_value_double(type, raw[i].v);
		t_s[*n] = mono - (wall_s - raw[i].ts_us * 1e-6);
		(*n)++;
	}
	if (count > 0 && raw[count - 1].ts_us > *last_ts_us)
		*last_ts_us = raw[count - 1].ts_us;
free_raw:
	free(raw);
	return rc;
}

/* The energy counter: unlike an average of power samples it misses no spike between
 * samples, so energy per image is the difference of two readings. */
int nvml_energy_mj(int dev, unsigned long long *mj)
{
	nvml_device h;
	*mj = 0;
	GP_TRY(nvml_handle(dev, &h));
	if (!nvml.nvmlDeviceGetTotalEnergyConsumption)
		return gp_error(GP_EUNSUPPORTED, "NVML lacks nvmlDeviceGetTotalEnergyConsumption");
	return NVML_CALL(nvml.nvmlDeviceGetTotalEnergyConsumption(h, mj));
}

const char *nvml_throttle_reason_str(unsigned long long mask, char *buf, size_t cap)
{
	static const struct {
		unsigned long long bit;
		const char *name;
	} reasons[] = {
		{ 0x1, "gpu_idle" },        { 0x2, "applications_clocks" },
		{ 0x4, "sw_power_cap" },    { 0x8, "hw_slowdown" },
		{ 0x10, "sync_boost" },     { 0x20, "sw_thermal" },
		{ 0x40, "hw_thermal" },     { 0x80, "hw_power_brake" },
		{ 0x100, "display_clocks" },
	};
	size_t len = 0;
	unsigned long long known = 0;

	if (cap == 0)
		return buf;
	buf[0] = 0;
	if (mask == 0) {
		snprintf(buf, cap, "none");
		return buf;
	}
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
		known |= reasons[i].bit;
		if (!(mask & reasons[i].bit) || len >= cap)
			continue;
		len += snprintf(buf + len, cap - len, "%s%s", len ? "," : "", reasons[i].name);
	}
	if ((mask & ~known) && len < cap)
		snprintf(buf + len, cap - len, "%s0x%llx", len ? "," : "", mask & ~known);
	return buf;
}

struct nvml_sampler {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	int stop;
	int dev;
	double interval_s;
	struct nvml_sample *samples;
	int n, cap;
	int err;
	char errmsg[512]; /* the sampling thread's message: gp_errmsg() is per thread */
};

static void sampler_fail(struct nvml_sampler *s, int rc)
{
	s->err = rc;
	snprintf(s->errmsg, sizeof(s->errmsg), "%s", gp_errmsg());
}

/* Samples at start + k * interval (no drift from the time sampling takes) and waits
 * on a condition variable so that stop does not wait out an interval. */
static void *sampler_main(void *arg)
{
	struct nvml_sampler *s = arg;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		if (s->n == s->cap) {
			int cap = s->cap ? s->cap * 2 : 256;
			struct nvml_sample *grown = realloc(s->samples, cap * sizeof(*grown));
			if (!grown) {
				sampler_fail(s, gp_error(GP_ENOMEM, "no memory for %d NVML samples",
							 cap));
				break;
			}
			s->samples = grown;
			s->cap = cap;
		}
		int rc = nvml_sample(s->dev, &s->samples[s->n]);
		if (rc < 0) {
			sampler_fail(s, rc);
			break;
		}
		s->n++;
		long long ns = next.tv_nsec + (long long)(s->interval_s * 1e9);
		next.tv_sec += ns / 1000000000LL;
		next.tv_nsec = ns % 1000000000LL;
		while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &next) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int nvml_sampler_start(struct nvml_sampler **out, int dev, double interval_s)
{
	struct nvml_sampler *s;
	pthread_condattr_t attr;
	int rc;

	if (!(interval_s > 0))
		return gp_error(GP_EINVAL, "sampling interval must be positive, got %g", interval_s);
	s = calloc(1, sizeof(*s));
	if (!s)
		return gp_error(GP_ENOMEM, "no memory for the NVML sampler");
	s->dev = dev;
	s->interval_s = interval_s;
	rc = nvml_open();
	if (rc < 0)
		goto free_sampler;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&s->wake, &attr);
	pthread_condattr_destroy(&attr);
	if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
		rc = gp_error(GP_ENOMEM, "cannot start the NVML sampling thread");
		goto destroy_sync;
	}
	*out = s;
	return 0;
destroy_sync:
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	nvml_close();
free_sampler:
	free(s);
	return rc;
}

int nvml_sampler_stop(struct nvml_sampler *s, struct nvml_sample **samples, int *n)
{
	int rc = 0;
	pthread_mutex_lock(&s->lock);
	s->stop = 1;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);

	*samples = s->samples;
	*n = s->n;
	if (s->err < 0)
		rc = gp_error(s->err, "NVML sampler: %s", s->errmsg);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	nvml_close();
	free(s);
	return rc;
}

int nvml_process_util(int dev, unsigned pid, unsigned long long *last_ts_us,
		      unsigned *sm_pct, unsigned *mem_pct)
{
	nvml_device h;
	struct nvml_process_util *samples = NULL;
	unsigned count = 0;
	int rc;

	GP_TRY(nvml_handle(dev, &h));
	if (!nvml.nvmlDeviceGetProcessUtilization)
		return gp_error(GP_EUNSUPPORTED, "NVML lacks nvmlDeviceGetProcessUtilization");
	/* A first call with no buffer asks how many samples there are. */
	rc = nvml.nvmlDeviceGetProcessUtilization(h, NULL, &count, *last_ts_us);
	if (rc == NVML_ERROR_NOT_FOUND || (rc == NVML_SUCCESS && count == 0))
		return gp_error(GP_ENOTFOUND, "no utilization samples for process %u yet", pid);
	if (rc != NVML_ERROR_INSUFFICIENT_SIZE && rc != NVML_SUCCESS)
		return NVML_CALL(rc);
	count += 8; /* processes may start between the two calls */
	samples = calloc(count, sizeof(*samples));
	if (!samples)
		return gp_error(GP_ENOMEM, "no memory for %u NVML process samples", count);
	rc = nvml.nvmlDeviceGetProcessUtilization(h, samples, &count, *last_ts_us);
	if (rc == NVML_ERROR_NOT_FOUND) {
		rc = gp_error(GP_ENOTFOUND, "no utilization samples for process %u yet", pid);
		goto free_samples;
	}
	if ((rc = NVML_CALL(rc)) < 0)
		goto free_samples;
	/* The driver keeps one sample per process and period; the newest for pid wins. */
	unsigned long long newest = 0;
	rc = gp_error(GP_ENOTFOUND, "no utilization samples for process %u yet", pid);
	for (unsigned i = 0; i < count; i++) {
		if (samples[i].ts_us > *last_ts_us && samples[i].ts_us > newest)
			newest = samples[i].ts_us; /* every process's, to advance the cursor */
		if (samples[i].pid != pid)
			continue;
		*sm_pct = samples[i].sm_util;
		*mem_pct = samples[i].mem_util;
		rc = 0;
	}
	if (newest)
		*last_ts_us = newest;
free_samples:
	free(samples);
	return rc;
}

/* ---- GPM: GPU performance monitoring ---------------------------------------------
 * Two GPM samples are counter snapshots; nvmlGpmMetricsGet turns a pair into the mean
 * of each metric over the time between them. A reader keeps the previous snapshot, so
 * that every read covers the interval since the one before (since open for the first). */
struct nvml_gpm {
	nvml_device h;
	int dev;
	struct nvml_gpm_sample_opaque *prev, *cur;
	double t_prev; /* when prev was taken (gp_now_s) */
};

/* NVML's GPM counters refresh internally: two samples closer than 100 ms give zeros
 * (and 0/0 for bandwidth), so a shorter interval is not read at all (nvmlGpmMetricsGet's
 * documentation). */
#define NVML_GPM_MIN_INTERVAL_S 0.1

void nvml_gpm_close(struct nvml_gpm *g)
{
	if (!g)
		return;
	if (g->prev)
		nvml.nvmlGpmSampleFree(g->prev);
	if (g->cur)
		nvml.nvmlGpmSampleFree(g->cur);
	free(g);
	nvml_close();
}

int nvml_gpm_open(int dev, struct nvml_gpm **out)
{
	struct nvml_gpm *g;
	int rc;

	*out = NULL;
	GP_TRY(nvml_open());
	g = calloc(1, sizeof(*g));
	if (!g) {
		nvml_close();
		return gp_error(GP_ENOMEM, "no memory for the GPM reader");
	}
	g->dev = dev;
	if ((rc = nvml_handle(dev, &g->h)) < 0)
		goto fail;
	if (!nvml.nvmlGpmQueryDeviceSupport || !nvml.nvmlGpmSampleAlloc ||
	    !nvml.nvmlGpmSampleFree || !nvml.nvmlGpmSampleGet || !nvml.nvmlGpmMetricsGet) {
		rc = gp_error(GP_EUNSUPPORTED, "NVML lacks the GPM functions (driver before 520)");
		goto fail;
	}
	struct nvml_gpm_support support = { NVML_GPM_SUPPORT_VERSION, 0 };
	int nrc = nvml.nvmlGpmQueryDeviceSupport(g->h, &support);
	if (nrc == NVML_SUCCESS && !support.is_supported_device)
		nrc = NVML_ERROR_NOT_SUPPORTED;
	if (nrc == NVML_ERROR_NOT_SUPPORTED) {
		rc = gp_error(GP_EUNSUPPORTED, "GPU %d does not offer GPM metrics (Hopper and "
			      "newer data-center GPUs do)", dev);
		goto fail;
	}
	if ((rc = NVML_CALL(nrc)) < 0)
		goto fail;
	if ((rc = NVML_CALL(nvml.nvmlGpmSampleAlloc(&g->prev))) < 0 ||
	    (rc = NVML_CALL(nvml.nvmlGpmSampleAlloc(&g->cur))) < 0 ||
	    (rc = NVML_CALL(nvml.nvmlGpmSampleGet(g->h, g->prev))) < 0)
		goto fail;
	g->t_prev = gp_now_s();
	*out = g;
	return 0;
fail:
	nvml_gpm_close(g);
	return rc;
}

int nvml_gpm_read(struct nvml_gpm *g, struct nvml_gpm_metrics *out)
{
	static const unsigned ids[NVML_GPM_OUR_METRICS] = {
		NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY,
		NVML_GPM_METRIC_ANY_TENSOR_UTIL, NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
		NVML_GPM_METRIC_DRAM_BW_UTIL,
	};
	double *dst[NVML_GPM_OUR_METRICS] = {
		&out->sm_util_pct, &out->sm_occupancy_pct, &out->tensor_util_pct,
		&out->hmma_util_pct, &out->dram_bw_util_pct,
	};
	struct nvml_gpm_metrics_get mg;

	for (int i = 0; i < NVML_GPM_OUR_METRICS; i++)
		*dst[i] = NAN;
	double now = gp_now_s();
	if (now - g->t_prev < NVML_GPM_MIN_INTERVAL_S)
		return gp_error(GP_ENOTFOUND, "GPM needs %.0f ms between samples, these are %.0f ms apart",
				1e3 * NVML_GPM_MIN_INTERVAL_S, 1e3 * (now - g->t_prev));
	GP_TRY(NVML_CALL(nvml.nvmlGpmSampleGet(g->h, g->cur)));
	g->t_prev = now;
	memset(&mg, 0, sizeof(mg));
	mg.version = NVML_GPM_METRICS_GET_VERSION;
	mg.num_metrics = NVML_GPM_OUR_METRICS;
	mg.sample1 = g->prev;
	mg.sample2 = g->cur;
	for (int i = 0; i < NVML_GPM_OUR_METRICS; i++)
		mg.metrics[i].metric_id = ids[i];
	int rc = NVML_CALL(nvml.nvmlGpmMetricsGet(&mg));
	/* The newest snapshot starts the next interval, whatever this one gave. */
	struct nvml_gpm_sample_opaque *t = g->prev;
	g->prev = g->cur;
	g->cur = t;
	GP_TRY(rc);
	/* A metric the device cannot give stays NaN; the others are still good. */
	for (int i = 0; i < NVML_GPM_OUR_METRICS; i++)
		if (mg.metrics[i].nvml_return == NVML_SUCCESS)
			*dst[i] = mg.metrics[i].value;
	return 0;
}
