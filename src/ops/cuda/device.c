#include "ops/cuda/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "core/tuning.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

int cuda_status_check(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return 0;
	/* Clear the error so that a recoverable one (out of memory) does not
	 * resurface at the next unrelated launch check. */
	cudaGetLastError();
	return gp_error(e == cudaErrorMemoryAllocation ? GP_EDEVOOM : GP_EDEVICE,
			"%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e),
			cudaGetErrorString(e), file, line);
}

int cudnn_status_check(cudnnStatus_t s, const char *call, const char *file, int line)
{
	if (s == CUDNN_STATUS_SUCCESS)
		return 0;
	cudaGetLastError();
	return gp_error(s == CUDNN_STATUS_ALLOC_FAILED ? GP_EDEVOOM : GP_EDEVICE,
			"%s failed: %s at %s:%d", call, cudnnGetErrorString(s), file, line);
}

int cublas_status_check(cublasStatus_t s, const char *call, const char *file, int line)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	cudaGetLastError();
	return gp_error(s == CUBLAS_STATUS_ALLOC_FAILED ? GP_EDEVOOM : GP_EDEVICE,
			"%s failed: %s at %s:%d", call, cublasGetStatusString(s), file, line);
}

int cuda_available(char *why, size_t cap)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(why, cap, "%s", cudaGetErrorString(e));
		return 0;
	}
	if (n == 0) {
		snprintf(why, cap, "no CUDA device found");
		return 0;
	}
	if (cap)
		why[0] = 0;
	return 1;
}

/* The device this thread made current last, through here (-1: none yet). */
static _Thread_local int bound_device = -1;

int cuda_device_bind(int device)
{
	if (device == bound_device)
		return 0;
	CUDA_TRY(cudaSetDevice(device));
	bound_device = device;
	return 0;
}

int cuda_ctx_create(struct cuda_ctx **out, int device, struct mem_stats *mem)
{
	char why[256];
	int rc;

	*out = NULL;
	if (!cuda_available(why, sizeof(why)))
		return gp_error(GP_ENODEV, "CUDA: %s", why);
	int count = 0;
	CUDA_TRY(cudaGetDeviceCount(&count));
	if (device < 0 || device >= count)
		return gp_error(GP_ENODEV, "CUDA device %d does not exist (%d found)", device, count);
	struct cuda_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return gp_error(GP_ENOMEM, "out of memory for the CUDA context");
	ctx->device = device;
	ctx->mem = mem;
	ctx->workspace_limit_bytes = tuning_get()->conv_workspace_mib << 20;

	if ((rc = cuda_device_bind(device)) < 0 ||
	    (rc = CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnCreate(&ctx->cudnn))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnSetStream(ctx->cudnn, ctx->stream))) < 0 ||
	    (rc = CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->side_stream, cudaStreamNonBlocking))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnCreate(&ctx->side_cudnn))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnSetStream(ctx->side_cudnn, ctx->side_stream))) < 0 ||
	    (rc = CUDA_CHECK(cudaEventCreateWithFlags(&ctx->ev_fork, cudaEventDisableTiming))) < 0 ||
	    (rc = CUDA_CHECK(cudaEventCreateWithFlags(&ctx->ev_join, cudaEventDisableTiming))) < 0 ||
	    (rc = CUBLAS_CHECK(cublasCreate(&ctx->cublas))) < 0 ||
	    (rc = CUBLAS_CHECK(cublasSetStream(ctx->cublas, ctx->stream))) < 0 ||
	    (rc = CUBLAS_CHECK(cublasLtCreate(&ctx->lt))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnCreateTensorDescriptor(&ctx->bn_x_desc))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnCreateTensorDescriptor(&ctx->bn_param_desc))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnCreateActivationDescriptor(&ctx->bn_relu_desc))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnSetActivationDescriptor(ctx->bn_relu_desc, CUDNN_ACTIVATION_RELU,
							   CUDNN_NOT_PROPAGATE_NAN, 0.0))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnCreateActivationDescriptor(&ctx->bn_relu6_desc))) < 0 ||
	    (rc = CUDNN_CHECK(cudnnSetActivationDescriptor(ctx->bn_relu6_desc, CUDNN_ACTIVATION_CLIPPED_RELU,
							   CUDNN_NOT_PROPAGATE_NAN, 6.0))) < 0 ||
	    (rc = cuda_ctx_set_math(ctx, CUDA_MATH_FP32)) < 0)
		goto destroy_ctx;
	*out = ctx;
	return 0;

destroy_ctx:
	cuda_ctx_destroy(ctx);
	return rc;
}

/* Also used to unwind a partly created context: every handle is checked. */
void cuda_ctx_destroy(struct cuda_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->stream)
		cudaStreamSynchronize(ctx->stream);
	cuda_device_bind(ctx->device);
	cuda_free(ctx, ctx->workspace, ctx->workspace_bytes, MEM_WORKSPACE);
	cuda_free(ctx, ctx->blas_ws, ctx->blas_ws_bytes, MEM_WORKSPACE);
	if (ctx->bn_relu_desc)
		cudnnDestroyActivationDescriptor(ctx->bn_relu_desc);
	if (ctx->bn_relu6_desc)
		cudnnDestroyActivationDescriptor(ctx->bn_relu6_desc);
	if (ctx->bn_param_desc)
		cudnnDestroyTensorDescriptor(ctx->bn_param_desc);
	if (ctx->bn_x_desc)
		cudnnDestroyTensorDescriptor(ctx->bn_x_desc);
	gemm_lt_free(ctx);
	if (ctx->lt)
		cublasLtDestroy(ctx->lt);
	if (ctx->cublas)
		cublasDestroy(ctx->cublas);
	if (ctx->side_stream)
		cudaStreamSynchronize(ctx->side_stream);
	if (ctx->ev_fork)
		cudaEventDestroy(ctx->ev_fork);
	if (ctx->ev_join)
		cudaEventDestroy(ctx->ev_join);
	if (ctx->side_cudnn)
		cudnnDestroy(ctx->side_cudnn);
	if (ctx->side_stream)
		cudaStreamDestroy(ctx->side_stream);
	if (ctx->cudnn)
		cudnnDestroy(ctx->cudnn);
	if (ctx->stream)
		cudaStreamDestroy(ctx->stream);
	cudaGetLastError();
	free(ctx);
}

/* cuBLAS takes the mode from the handle; cuDNN from each plan's descriptors, so
 * plans are keyed by math mode and both kinds can live in the cache. */
int cuda_ctx_set_math(struct cuda_ctx *ctx, int math)
{
	if (math != CUDA_MATH_FP32 && math != CUDA_MATH_TF32)
		return gp_error(GP_EINVAL, "unknown CUDA math mode %d", math);
	CUBLAS_TRY(cublasSetMathMode(ctx->cublas, math == CUDA_MATH_TF32 ?
				     CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
	ctx->math = math;
	return 0;
}

int cuda_ctx_set_act(struct cuda_ctx *ctx, int dtype, int nhwc)
{
	if (dtype != GP_F32 && dtype != GP_F16 && dtype != GP_BF16)
		return gp_error(GP_EINVAL, "activations in %s are not supported on CUDA",
				dtype_name((enum gp_dtype)dtype));
	if (nhwc && dtype == GP_F32)
		return gp_error(GP_EUNSUPPORTED, "NHWC layout needs fp16 or bf16 activations");
	ctx->act_dtype = dtype;
	ctx->nhwc = nhwc;
	return 0;
}

/* Wait for the context's stream: blocking, or polling it and the watcher. */
static int stream_wait(struct cuda_ctx *ctx)
{
	if (!ctx->watch) {
		CUDA_TRY(cudaStreamSynchronize(ctx->stream));
		return 0;
	}
	struct timespec t0, now, nap = { 0, 100000 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		cudaError_t e = cudaStreamQuery(ctx->stream);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return CUDA_CHECK(e);
		clock_gettime(CLOCK_MONOTONIC, &now);
		GP_TRY(ctx->watch(ctx->watch_user,
				  (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec)));
		nanosleep(&nap, NULL);
	}
}

int cuda_ctx_sync(struct cuda_ctx *ctx)
{
	return stream_wait(ctx);
}

int cuda_alloc(struct cuda_ctx *ctx, void **p, size_t bytes, enum mem_cat cat)
{
	*p = NULL;
	if (bytes == 0)
		return 0;
	/* Whole 2 MiB pages: the driver hands out smaller blocks from shared pages, and a
	 * page stays taken while any block in it lives, so freed memory would come back
	 * only partly (free memory after a failed set-up would drift by a page). The
	 * counts keep the bytes asked for, which is what the memory plan predicts. */
	cudaError_t e = cudaMalloc(p, (bytes + CUDA_PAGE_BYTES - 1) & ~(CUDA_PAGE_BYTES - 1));
	if (e == cudaErrorMemoryAllocation) {
		size_t free_b = 0, total_b = 0;
		*p = NULL;
		cudaGetLastError();
		cudaMemGetInfo(&free_b, &total_b);
		cudaGetLastError();
		return gp_error(GP_EDEVOOM, "cudaMalloc of %.1f MiB for %s failed: %.1f MiB free of %.1f MiB",
				bytes / GP_MIB, mem_cat_name(cat), free_b / GP_MIB, total_b / GP_MIB);
	}
	if (e != cudaSuccess) {
		*p = NULL;
		return gp_error_wrap(cuda_status_check(e, "cudaMalloc", __FILE__, __LINE__),
				     "%.1f MiB for %s", bytes / GP_MIB, mem_cat_name(cat));
	}
	if (ctx->mem)
		mem_stats_add(ctx->mem, cat, bytes);
	return 0;
}

void cuda_free(struct cuda_ctx *ctx, void *p, size_t bytes, enum mem_cat cat)
{
	if (!p)
		return;
	cudaFree(p);
	if (ctx->mem)
		mem_stats_sub(ctx->mem, cat, bytes);
}

int cuda_copy_h2d(struct cuda_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
	return 0;
}

int cuda_copy_d2h(struct cuda_ctx *ctx, void *dst, const void *src, size_t bytes)
{
	CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
	return stream_wait(ctx);
}

int cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes));
	return 0;
}

int cuda_device_describe(int dev, char *name, size_t cap, int *sm_count, size_t *mem_total_bytes)
{
	struct cudaDeviceProp prop;
	CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
	snprintf(name, cap, "%s", prop.name);
	*sm_count = prop.multiProcessorCount;
	*mem_total_bytes = prop.totalGlobalMem;
	return 0;
}

int cuda_versions_get(struct cuda_versions *v)
{
	int major = 0, minor = 0, patch = 0;
	CUDA_TRY(cudaRuntimeGetVersion(&v->runtime));
	CUDA_TRY(cudaDriverGetVersion(&v->driver));
	v->cudnn = cudnnGetVersion();
	CUBLAS_TRY(cublasGetProperty(MAJOR_VERSION, &major));
	CUBLAS_TRY(cublasGetProperty(MINOR_VERSION, &minor));
	CUBLAS_TRY(cublasGetProperty(PATCH_LEVEL, &patch));
	v->cublas = major * 10000 + minor * 100 + patch;
	return 0;
}
