/* Tuning switches: the few settings gpuperf reads from the environment, read once
 * (tuning_get) and shown by `info` and in every result's settings; and the switches
 * that keep a plain path reachable from the tests as a yardstick for a faster one,
 * set per net and never read from the environment. tuning_table lists each name, its
 * default and its meaning. */
#ifndef GP_TUNING_H
#define GP_TUNING_H

#include <stddef.h>

#define TUNING_PATH_MAX 512
#define TUNING_DECODE_BUFFERS_MIN 2
#define TUNING_DECODE_BUFFERS_MAX 4
#define TUNING_DECODE_BUFFERS_DEFAULT 3
#define TUNING_DECODERS_MAX 2

/* GPUPERF_RELU6_FOLD's values. auto: fold where the batch norm before it, fused with a
 * plain ReLU, would be cuDNN's (which leaves a ReLU6 to a pass of its own), and let the
 * own 16-bit batch norms apply it where they run, which spares the depthwise backward
 * data its read of the input for the mask; always: every such ReLU6 folded (as before
 * the twentieth session); never: none. */
enum relu6_fold { RELU6_FOLD_NEVER = 0, RELU6_FOLD_AUTO = 1, RELU6_FOLD_ALWAYS = 2 };

struct tuning {
	/* GPUPERF_CONV_WORKSPACE_MIB: the most workspace a convolution algorithm may take
	 * to be considered (a budget; larger lets faster algorithms compete) */
	size_t conv_workspace_mib;
	/* GPUPERF_CONV_LOG=1: each convolution's algorithm pick and timings on stderr */
	int conv_log;
	/* GPUPERF_RESULTS: where results go without --out ("" : results/) */
	char results_dir[TUNING_PATH_MAX];
	/* GPUPERF_NVML_LIB: the NVML library to load ("": libnvidia-ml.so.1) */
	char nvml_lib[TUNING_PATH_MAX];
	/* GPUPERF_NVJPEG_LIB: the nvJPEG library to load ("": libnvjpeg.so.13, then .so.12,
	 * then .so) */
	char nvjpeg_lib[TUNING_PATH_MAX];
	/* GPUPERF_MPI_LIB: the MPI transport plugin ("": libgpuperf_mpi.so beside the
	 * executable, or in lib/ beside it) */
	char mpi_lib[TUNING_PATH_MAX];
	/* GPUPERF_NVJPEG_BACKEND: the batched call's nvJPEG backend; 0 auto (hardware
	 * where it can be made), 1 hardware only, 2 CUDA only (anything else: auto) */
	int nvjpeg_backend;
	/* GPUPERF_DECODE_BUFFERS: the batch buffers --decode gpu cycles through, so that
	 * its decode thread works up to decode_buffers - 1 batches ahead of the step (one
	 * is the step's); outside 2..4 the default */
	int decode_buffers;
	/* GPUPERF_DECODERS: nvJPEG decoders in --decode gpu's loader, each with its own
	 * thread; 0 auto (2 on the hardware engines, 1 on CUDA's backend), else 1..2 */
	int decoders;
	/* GPUPERF_BN16: which 16-bit NHWC training batch norms run on the own kernels
	 * (ops/cuda/bn16_rule.h's enum bn16_mode): 0 cudnn (none), 1 auto (the rule),
	 * 2 own (every one whose channels they take) */
	int bn16;
	/* GPUPERF_DWCONV_TILED: 1 lets 16-bit NHWC 3x3 depthwise convolutions on planes wider
	 * than 8 take the tiled shared-memory kernels, 0 keeps the row kernels */
	int dwconv_tiled;
	/* GPUPERF_RELU6_FOLD: where a ReLU6 read only by a 16-bit depthwise convolution on
	 * the own kernels is folded into it (enum relu6_fold) */
	int relu6_fold;
	/* GPUPERF_CONV_STEM: 16-bit NHWC convolutions of few input channels (ResNet's stem)
	 * on the own tensor-core kernels (ops/cuda/conv_stem.cu): 0 cudnn (never), 1 auto
	 * (per direction where timed faster than cuDNN's best), 2 own (always where they
	 * take the shape) */
	int conv_stem;
	/* GPUPERF_CONV_1X1: 1x1 stride-1 convolutions (16-bit NHWC, FP32 NCHW) as cuBLAS
	 * products (ops/cuda/gemm_cublas.c): 0 cudnn (never), 1 auto (per direction where
	 * timed faster than cuDNN's best), 2 cublas (always where they take the shape) */
	int conv_1x1;

	/* Test-only, per net (struct net's copy; 1 by default): 0 takes the plain path
	 * that a test compares the default with. */
	struct tuning_test {
		int bn_fuse;      /* batch norm fused with the ReLU (and add) after it */
		int bn_own;       /* FP32 batch norms not fused on the own kernels, not cuDNN's */
		int conv_ws_arena; /* convolution workspaces planned in the arena, not one shared */
		int wgrad_stream; /* FP32 weight gradients on a second stream */
		int bn_out_mask;  /* a block's last batch norm applies the ReLU-after-add's mask */
		int bn_add_bn;    /* a shortcut's batch norm applied in its join's pass (FUSE_BN_STATS) */
		int bn_pool;      /* a batch norm + ReLU applied by the max pool after it */
	} test;
};

struct tuning_entry {
	const char *name;          /* the environment variable */
	const char *default_value;
	const char *meaning;
};

extern const struct tuning_entry tuning_table[];
extern const int tuning_table_len;

/* The process's settings, read from the environment at the first call. */
const struct tuning *tuning_get(void);
/* Read the environment again (tests that change it). Not while other threads read. */
void tuning_reload(void);
/* The value of tuning_table[i] as t holds it, as text. */
void tuning_value_str(const struct tuning *t, int i, char *buf, size_t cap);

#endif
