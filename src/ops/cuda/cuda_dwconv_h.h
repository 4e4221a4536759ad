/* Own 16-bit depthwise convolution kernels (dwconv_h.cu) for mixed precision, where
 * activations are fp16 or bf16 in NHWC (channels last) and cuDNN's depthwise paths are
 * slow. The FP32 NCHW counterparts are in cuda_dwconv.h. Same contract as cuda_ops.h and
 * cuda_amp.h: every function returns 0 or a negative GP_E* code, only enqueues work on a
 * stream, forward overwrites y, backward data honours `accumulate` (dx += the gradient, in
 * float from the 16-bit dx, rounded once), parameter gradients are overwritten. `ht` is
 * GP_F16 (__half) or GP_BF16 (__nv_bfloat16); anything else is GP_EINVAL. Arithmetic runs
 * in float and each 16-bit result is rounded once (round to nearest even). All pointers
 * are device pointers. Results do not depend on the run: every reduction sums in a fixed
 * order, without atomics. Channels move 8 (16 bytes) or 2 (4 bytes) per thread when c is
 * a multiple and the 16-bit arrays are aligned to that; any other case takes a scalar
 * path. */
#ifndef GP_CUDA_DWCONV_H_H
#define GP_CUDA_DWCONV_H_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a is a depthwise convolution these kernels handle (same shape rules as dwconv_supported,
 * and one image of x or y holds at most 2^31 - 1 elements). */
int dwconv_h_supported(const struct conv2d_args *a);
/* x, y, dx, dy: 16-bit (ht = GP_F16 or GP_BF16) activations in NHWC; w: 16-bit weights in KRSC layout, i.e. for a
 * depthwise conv [c][kh][kw][1] (which is the same memory order as PyTorch's [c][1][kh][kw]); b (may be NULL) float. */
int dwconv_h_fwd_cuda(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x, const void *w, const float *b, void *y);
int dwconv_h_bwd_data_cuda(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *dy, const void *w, void *dx, int accumulate);
size_t dwconv_h_bwd_filter_scratch_floats(const struct conv2d_args *a);
/* Channels per thread for every direction (8, 4, 2, 1; 0: the measured defaults) and
 * rows per thread at 4 channels (2 or 4; 0: the defaults): for the tests, which check
 * every width. Process-wide and not thread-safe; set before launching. */
void dwconv_h_set_widths(int v, int vh);
/* dw: 16-bit, [c][kh][kw] (overwritten); db (may be NULL) float, overwritten. Deterministic two-pass reduction in float/double. */
int dwconv_h_bwd_filter_cuda(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x, const void *dy, void *dw, float *db, float *scratch);
/* The same with a ReLU6 folded into the convolution that reads its output (mixed
 * precision: the batch norm before it applies max(., 0) in cuDNN's fused ReLU and
 * stores that; these apply min(., 6)): forward and weight gradient take min(x, 6) for
 * x, and backward data keeps dx only where x < 6 (x: the stored input, laid out as dx;
 * accumulate adds the masked gradient). */
int dwconv_h_fwd_relu6_cuda(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x, const void *w, const float *b, void *y);
int dwconv_h_bwd_data_relu6_cuda(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *dy, const void *w, const void *x, void *dx, int accumulate);
int dwconv_h_bwd_filter_relu6_cuda(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x, const void *dy, void *dw, float *db, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
