/* What the depthwise convolution files share (private to them; the public launchers are
 * in cuda_ops.h): the includes (kernel_util.cuh's block size and helpers), and the entry points of the two layouts
 * the launchers in dwconv.cu pick between. dwconv_f32.cu holds the float NCHW kernels;
 * the 16-bit NHWC ones are dwconv_nhwc.cu (forward, backward data) and
 * dwconv_nhwc_filter.cu (weight gradient), with dwconv_nhwc.cuh between them. */
#ifndef GP_OPS_CUDA_DWCONV_CUH
#define GP_OPS_CUDA_DWCONV_CUH

#include <stdint.h>
#include <stdlib.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"
}
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_util.cuh" /* BLOCK, FULL_MASK, element access, DISPATCH_H */

/* float, NCHW (dwconv_f32.cu) */
int dw_supported(const struct conv2d_args *a);
int dw_fwd_f32(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *w,
	       const float *b, float *y);
int dw_bwd_data_f32(cudaStream_t s, const struct conv2d_args *a, const float *dy, const float *w,
		    float *dx, int accumulate);
size_t dw_scratch_floats(const struct conv2d_args *a);
int dw_filter_f32(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *dy,
		  float *dw, float *db, float *scratch);

/* fp16 / bf16, NHWC (dwconv_nhwc.cu, dwconv_nhwc_filter.cu) */
int dwh_supported(const struct conv2d_args *a);
int dwh_fwd_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
		const void *w, const float *b, void *y, int clip6);
int dwh_bwd_data_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *dy,
		     const void *w, void *dx, int accumulate, const void *mask);
size_t dwh_scratch_floats(const struct conv2d_args *a);
int dwh_filter_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
		   const void *dy, void *dw, float *db, float *scratch, int clip6);

#endif
