#include "data/decode.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"
#include "data/nvjpeg.h"
#include "gpu/devinfo.h"

static const char *const decode_names[] = { "cpu", "gpu", "auto" };

const char *decode_mode_name_at(int i)
{
	return i >= 0 && i < (int)(sizeof(decode_names) / sizeof(decode_names[0]))
		       ? decode_names[i] : NULL;
}

int decode_mode_parse(const char *s, enum decode_mode *out)
{
	int i = names_find(decode_mode_name_at, s);
	if (i < 0) {
		char buf[64];
		return gp_error(GP_EINVAL, "--decode must be %s (got '%s')",
				names_join(buf, sizeof(buf), decode_mode_name_at, ", ", " or "),
				s);
	}
	*out = (enum decode_mode)i;
	return 0;
}

int decode_gpu_probe(char *why, size_t cap)
{
	struct gp_devinfo d;
	devinfo_query(&d);
	if (d.gpu_count == 0) {
		snprintf(why, cap, "%s", d.note[0] ? d.note : "no CUDA device");
		return 0;
	}
	const struct nvjpeg_api *api;
	if (nvjpeg_open(&api) < 0) {
		snprintf(why, cap, "%s", gp_errmsg());
		gp_error_clear();
		return 0;
	}
	nvjpeg_close();
	why[0] = 0;
	return 1;
}

int decode_resolve(enum decode_mode mode, int can_take_gpu, const char *cmd,
		   enum decode_mode *out)
{
	char why[300];
	*out = DECODE_CPU;
	if (mode == DECODE_CPU)
		return 0;
	int ok = decode_gpu_probe(why, sizeof(why));
	if (mode == DECODE_AUTO) {
		*out = ok && can_take_gpu ? DECODE_AUTO : DECODE_CPU;
		return 0;
	}
	if (!ok)
		return gp_error(GP_EINVAL, "--decode gpu needs a CUDA GPU and nvJPEG: %s", why);
	if (!can_take_gpu)
		return gp_error(GP_EINVAL, "--decode gpu: %s decodes on the GPU only from a folder of "
				"JPEG files%s (not synthetic or CIFAR-10 data)", cmd,
				strcmp(cmd, "loader") ? " onto a CUDA device" : "");
	*out = DECODE_GPU;
	return 0;
}
