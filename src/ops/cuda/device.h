/* The CUDA device context: one device, one stream, the cuDNN and cuBLAS handles bound
 * to it, the shared library workspace, the math mode, and how activations are stored
 * and convolution algorithms picked. One per net (the backend's), set once at set-up:
 * what a call depends on beyond that travels in its arguments. Every device
 * allocation goes through cuda_alloc so bytes are counted by category. A context is
 * used by one thread at a time, which makes its device current first (cudaSetDevice
 * is per thread). Convolution plans live in a cache per device (conv_plan.c). */
#ifndef GP_CUDA_DEVICE_H
#define GP_CUDA_DEVICE_H

#include <stddef.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include "core/memstat.h"

#ifdef __cplusplus
extern "C" {
#endif

enum cuda_math { CUDA_MATH_FP32 = 0, CUDA_MATH_TF32 = 1 };

struct cuda_ctx {
	int device;
	cudaStream_t stream;
	cudnnHandle_t cudnn;
	cublasHandle_t cublas;
	cublasLtHandle_t lt;
	void *workspace;              /* shared by every cuDNN call on the stream */
	size_t workspace_bytes;
	size_t workspace_limit_bytes; /* algorithms needing more are not considered */
	int math;                     /* enum cuda_math */
	int deterministic;            /* 1: only deterministic cuDNN algorithms */
	int fp32_direct_only;         /* 1: no FFT/Winograd convolutions in FP32 */
	int heuristic_algos;          /* 1: algorithms from cuDNN's heuristics, not timing runs */
	/* Activations of convolutions, batch norms and linear layers: GP_F32, or GP_F16 /
	 * GP_BF16 for mixed precision (tensor cores, float accumulation); and their layout,
	 * 1 for NHWC (channels last; convolution weights KRSC then). */
	int act_dtype;
	int nhwc;
	/* FP32 NCHW batch norms run on the own kernels (bn.cu) unless this is set
	 * (cuDNN's for those not fused with an activation: a test's yardstick) */
	int bn_cudnn;
	/* 16-bit NHWC training batch norms on the own kernels: enum bn16_mode (bn16_rule.h),
	 * the net's GPUPERF_BN16 */
	int bn16;
	struct mem_stats *mem;        /* may be NULL: nothing is counted */
	/* A second stream, with its own cuDNN handle, for convolution weight gradients
	 * that run beside the main stream's backward (backend_cuda_ops.c: wgrad on the side);
	 * ev_fork orders it after the main stream, ev_join the main stream after it. */
	cudaStream_t side_stream;
	cudnnHandle_t side_cudnn;
	cudaEvent_t ev_fork, ev_join;

	/* cuBLAS's workspace, set on the handle so that cuBLAS allocates nothing in a
	 * graph (the backend's; freed with the context) */
	void *blas_ws;
	size_t blas_ws_bytes;
	/* 16-bit products' picks among cuBLASLt's candidates (gemm_cublas.c; NULL: none
	 * timed yet); a copy of the context for the side stream shares the table */
	struct gemm_lt_table *gemm_lt;

	/* Batch norm describes its tensors per call; these are reused, not shared state. */
	cudnnTensorDescriptor_t bn_x_desc, bn_param_desc;
	/* fused batch norm + ReLU / ReLU6 (Ex calls; ReLU6 as a ReLU clipped at 6) */
	cudnnActivationDescriptor_t bn_relu_desc, bn_relu6_desc;

	/* Optional: called about every 100 us while the host waits for the stream
	 * (cuda_ctx_sync, cuda_copy_d2h) with the seconds waited so far; a negative return
	 * ends the wait with that error. A net that all-reduces with other ranks sets it,
	 * since a kernel waiting for a rank that died never ends by itself. */
	int (*watch)(void *user, double waited_s);
	void *watch_user;
};

/* The driver's allocation granule: cuda_alloc takes whole pages. */
#define CUDA_PAGE_BYTES ((size_t)2 << 20)

/* 1 if a CUDA device can be used; else 0 and a one-line reason in why. */
int cuda_available(char *why, size_t cap);
/* Make device current on the calling thread (cudaSetDevice, skipped when this thread
 * made it current last; every device switch of gpuperf goes through here). */
int cuda_device_bind(int device);
/* A context on device (GP_ENODEV when there is no such device). */
int cuda_ctx_create(struct cuda_ctx **out, int device, struct mem_stats *mem);
void cuda_ctx_destroy(struct cuda_ctx *ctx);
/* Select strict FP32 (no tensor cores) or TF32 for convolutions and GEMMs. */
int cuda_ctx_set_math(struct cuda_ctx *ctx, int math);
/* Element type (enum gp_dtype: GP_F32, GP_F16, GP_BF16) and layout of activations. */
int cuda_ctx_set_act(struct cuda_ctx *ctx, int dtype, int nhwc);
int cuda_ctx_sync(struct cuda_ctx *ctx);

/* Allocate bytes on the device, charged to cat in ctx->mem. On failure *p is NULL,
 * the CUDA error state is cleared and GP_EDEVOOM says what was tried. */
int cuda_alloc(struct cuda_ctx *ctx, void **p, size_t bytes, enum mem_cat cat);
/* Free what cuda_alloc returned, with the same bytes and category (NULL is fine). */
void cuda_free(struct cuda_ctx *ctx, void *p, size_t bytes, enum mem_cat cat);

/* Copies on the context's stream; the device-to-host copy waits for completion. */
int cuda_copy_h2d(struct cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
int cuda_copy_d2h(struct cuda_ctx *ctx, void *dst, const void *src, size_t bytes);

int cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
int cuda_device_describe(int dev, char *name, size_t cap, int *sm_count, size_t *mem_total_bytes);

/* Versions as the libraries encode them (cudart 13000 = 13.0, cuDNN 91400 = 9.14.0,
 * cuBLAS 130000 = 13.0.0), for result files. */
struct cuda_versions {
	int runtime, driver;
	size_t cudnn;
	int cublas;
};
int cuda_versions_get(struct cuda_versions *v);

#ifdef __cplusplus
}
#endif

#endif
