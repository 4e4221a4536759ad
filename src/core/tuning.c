#include "core/tuning.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TUNING_WORKSPACE_MIB_DEFAULT 4096

const struct tuning_entry tuning_table[] = {
	{ "GPUPERF_CONV_WORKSPACE_MIB", "4096",
	  "workspace budget in MiB for a convolution algorithm to be considered" },
	{ "GPUPERF_CONV_LOG", "0", "1: each convolution's algorithm pick and candidate times on stderr" },
	{ "GPUPERF_RESULTS", "results", "directory for results without --out" },
	{ "GPUPERF_NVML_LIB", "libnvidia-ml.so.1", "the NVML library to load" },
	{ "GPUPERF_MPI_LIB", "libgpuperf_mpi.so", "the MPI transport plugin (beside the executable)" },
	{ "GPUPERF_NVJPEG_LIB", "libnvjpeg.so.13", "the nvJPEG library to load for --decode gpu "
	  "(unset: libnvjpeg.so.13, then .so.12, then .so)" },
	{ "GPUPERF_NVJPEG_BACKEND", "auto", "nvJPEG's backend for --decode gpu's batched "
	  "call: auto (the hardware engines where the GPU has them), hardware or cuda" },
	{ "GPUPERF_DECODE_BUFFERS", "3", "N batch buffers for --decode gpu, 2 to 4: its decode "
	  "thread runs up to N-1 batches ahead of the step; each buffer is one batch of GPU "
	  "memory (rounded up to a multiple of the decoders)" },
	{ "GPUPERF_DECODERS", "auto", "nvJPEG decoders for --decode gpu, each with its own "
	  "thread taking every other batch: auto (2 on the hardware engines, 1 on CUDA's "
	  "backend), 1 or 2" },
	{ "GPUPERF_BN16", "auto", "16-bit NHWC training batch norms: cudnn (cuDNN's), auto "
	  "(the own kernels where they are faster: large tensors before an unfused ReLU6 or "
	  "with channels not a multiple of 64) or own (the own kernels wherever the channels "
	  "are a multiple of 8)" },
	{ "GPUPERF_DWCONV_TILED", "1", "16-bit NHWC 3x3 depthwise convolutions: 1 the tiled "
	  "shared-memory kernels on planes wider than 8, 0 the row kernels everywhere" },
	{ "GPUPERF_RELU6_FOLD", "auto", "a ReLU6 read only by a 16-bit depthwise convolution: "
	  "auto (applied by the batch norm before it where that runs on the own kernels, "
	  "else folded into the convolution), always (folded wherever the depthwise kernels "
	  "can) or never" },
	{ "GPUPERF_CONV_STEM", "auto", "16-bit NHWC convolutions of 1-7 input channels (ResNet's "
	  "stem): auto (the own tensor-core kernels per direction where timed faster than "
	  "cuDNN's best), cudnn (never) or own (always)" },
	{ "GPUPERF_CONV_1X1", "auto", "1x1 convolutions of stride 1 (16-bit NHWC and FP32 NCHW): "
	  "auto (cuBLAS products per direction where timed faster than cuDNN's best), cudnn "
	  "(never) or cublas (always)" },
};
const int tuning_table_len = (int)(sizeof(tuning_table) / sizeof(tuning_table[0]));

static struct tuning current;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void path_from_env(const char *name, char *dst)
{
	const char *v = getenv(name);
	snprintf(dst, TUNING_PATH_MAX, "%s", v ? v : "");
}

/* An integer switch: v as a whole in lo..hi, else def with a warning naming it. */
static long int_from_env(const char *name, long lo, long hi, long def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end = NULL;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno == 0 && end != v && *end == '\0' && x >= lo && x <= hi)
		return x;
	fprintf(stderr, "warning: %s='%s' is not an integer from %ld to %ld; using %ld\n", name,
		v, lo, hi, def);
	return def;
}

void tuning_reload(void)
{
	struct tuning t = { 0 };
	t.conv_workspace_mib = (size_t)int_from_env("GPUPERF_CONV_WORKSPACE_MIB", 1, 1L << 30,
						     TUNING_WORKSPACE_MIB_DEFAULT);
	const char *v = getenv("GPUPERF_CONV_LOG");
	t.conv_log = v && *v == '1';
	path_from_env("GPUPERF_RESULTS", t.results_dir);
	path_from_env("GPUPERF_NVML_LIB", t.nvml_lib);
	path_from_env("GPUPERF_MPI_LIB", t.mpi_lib);
	path_from_env("GPUPERF_NVJPEG_LIB", t.nvjpeg_lib);
	v = getenv("GPUPERF_NVJPEG_BACKEND");
	t.nvjpeg_backend = !v ? 0 : !strcmp(v, "hardware") ? 1 : !strcmp(v, "cuda") ? 2 : 0;
	if (v && *v && strcmp(v, "auto") && !t.nvjpeg_backend)
		fprintf(stderr, "warning: GPUPERF_NVJPEG_BACKEND='%s' is not auto, hardware or cuda; "
			"using auto\n", v);
	t.decode_buffers = (int)int_from_env("GPUPERF_DECODE_BUFFERS", TUNING_DECODE_BUFFERS_MIN,
					     TUNING_DECODE_BUFFERS_MAX,
					     TUNING_DECODE_BUFFERS_DEFAULT);
	v = getenv("GPUPERF_DECODERS");
	t.decoders = !v || !*v || !strcmp(v, "auto") ? 0
		     : (int)int_from_env("GPUPERF_DECODERS", 1, TUNING_DECODERS_MAX, 0);
	v = getenv("GPUPERF_BN16");
	t.bn16 = !v || !*v || !strcmp(v, "auto") ? 1 : !strcmp(v, "cudnn") ? 0 : !strcmp(v, "own") ? 2 : -1;
	if (t.bn16 < 0) {
		fprintf(stderr, "warning: GPUPERF_BN16='%s' is not cudnn, auto or own; using auto\n", v);
		t.bn16 = 1;
	}
	t.dwconv_tiled = (int)int_from_env("GPUPERF_DWCONV_TILED", 0, 1, 1);
	v = getenv("GPUPERF_RELU6_FOLD");
	t.relu6_fold = !v || !*v || !strcmp(v, "auto") ? RELU6_FOLD_AUTO
		       : !strcmp(v, "always")         ? RELU6_FOLD_ALWAYS
		       : !strcmp(v, "never")          ? RELU6_FOLD_NEVER
						      : -1;
	if (t.relu6_fold < 0) {
		fprintf(stderr, "warning: GPUPERF_RELU6_FOLD='%s' is not auto, always or never; using auto\n", v);
		t.relu6_fold = RELU6_FOLD_AUTO;
	}
	v = getenv("GPUPERF_CONV_STEM");
	t.conv_stem = !v || !*v || !strcmp(v, "auto") ? 1 : !strcmp(v, "cudnn") ? 0 : !strcmp(v, "own") ? 2 : -1;
	if (t.conv_stem < 0) {
		fprintf(stderr, "warning: GPUPERF_CONV_STEM='%s' is not cudnn, auto or own; using auto\n", v);
		t.conv_stem = 1;
	}
	v = getenv("GPUPERF_CONV_1X1");
	t.conv_1x1 = !v || !*v || !strcmp(v, "auto") ? 1 : !strcmp(v, "cudnn") ? 0 : !strcmp(v, "cublas") ? 2 : -1;
	if (t.conv_1x1 < 0) {
		fprintf(stderr, "warning: GPUPERF_CONV_1X1='%s' is not cudnn, auto or cublas; using auto\n", v);
		t.conv_1x1 = 1;
	}
	t.test.bn_fuse = t.test.bn_own = t.test.conv_ws_arena = t.test.wgrad_stream = t.test.bn_out_mask = t.test.bn_add_bn = t.test.bn_pool = 1;
	current = t;
}

const struct tuning *tuning_get(void)
{
	pthread_once(&once, tuning_reload);
	return &current;
}

void tuning_value_str(const struct tuning *t, int i, char *buf, size_t cap)
{
	switch (i) {
	case 0:
		snprintf(buf, cap, "%zu", t->conv_workspace_mib);
		return;
	case 1:
		snprintf(buf, cap, "%d", t->conv_log);
		return;
	case 2:
		snprintf(buf, cap, "%s", t->results_dir[0] ? t->results_dir : tuning_table[i].default_value);
		return;
	case 3:
		snprintf(buf, cap, "%s", t->nvml_lib[0] ? t->nvml_lib : tuning_table[i].default_value);
		return;
	case 4:
		snprintf(buf, cap, "%s", t->mpi_lib[0] ? t->mpi_lib : tuning_table[i].default_value);
		return;
	case 5:
		snprintf(buf, cap, "%s", t->nvjpeg_lib[0] ? t->nvjpeg_lib : tuning_table[i].default_value);
		return;
	case 6:
		snprintf(buf, cap, "%s", t->nvjpeg_backend == 1 ? "hardware"
					 : t->nvjpeg_backend == 2 ? "cuda" : "auto");
		return;
	case 7:
		snprintf(buf, cap, "%d", t->decode_buffers);
		return;
	case 8:
		if (t->decoders)
			snprintf(buf, cap, "%d", t->decoders);
		else
			snprintf(buf, cap, "auto");
		return;
	case 9:
		snprintf(buf, cap, "%s", t->bn16 == 1 ? "auto" : t->bn16 == 2 ? "own" : "cudnn");
		return;
	case 10:
		snprintf(buf, cap, "%d", t->dwconv_tiled);
		return;
	case 11:
		snprintf(buf, cap, "%s", t->relu6_fold == RELU6_FOLD_AUTO     ? "auto"
					 : t->relu6_fold == RELU6_FOLD_ALWAYS ? "always"
									      : "never");
		return;
	case 12:
		snprintf(buf, cap, "%s", t->conv_stem == 1 ? "auto" : t->conv_stem == 2 ? "own" : "cudnn");
		return;
	case 13:
		snprintf(buf, cap, "%s", t->conv_1x1 == 1 ? "auto" : t->conv_1x1 == 2 ? "cublas" : "cudnn");
		return;
	default:
		snprintf(buf, cap, "?");
	}
}
