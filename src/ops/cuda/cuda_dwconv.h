/* Own depthwise convolution kernels (dwconv.cu), for the layers where cuDNN's FP32 NCHW
 * depthwise paths are slow (MobileNetV2's 3x3 convolutions: the backward of one layer
 * runs as ~100 small kernels). Same contract as cuda_ops.h: every function returns 0
 * or a negative GP_E* code, only enqueues work on a stream, forward overwrites y,
 * backward data honours `accumulate`, parameter gradients are overwritten. Weights are
 * c x 1 x k x k (PyTorch layout). All pointers are device pointers. Results do not
 * depend on the run: every reduction sums in a fixed order, without atomics. */
#ifndef GP_CUDA_DWCONV_H
#define GP_CUDA_DWCONV_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a is a depthwise convolution these kernels handle: groups == c_in == c_out, kh == kw (odd, <= 7),
 * stride 1 or 2, any pad, NCHW float. */
int dwconv_supported(const struct conv2d_args *a);
/* y = x (*) w, plus b[c] when b is given and a->has_bias. */
int dwconv_fwd_cuda(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *w,
		    const float *b, float *y);
int dwconv_bwd_data_cuda(cudaStream_t s, const struct conv2d_args *a, const float *dy, const float *w,
			 float *dx, int accumulate);
/* Scratch floats dwconv_bwd_filter_cuda needs (for per-block partial sums, reduced in a second, fixed-order pass). */
size_t dwconv_bwd_filter_scratch_floats(const struct conv2d_args *a);
/* dw overwritten (c x 1 x k x k, PyTorch layout); db (may be NULL, c floats) overwritten with the sum of dy. */
int dwconv_bwd_filter_cuda(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *dy,
			   float *dw, float *db, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
