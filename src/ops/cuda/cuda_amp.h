/* The half-precision kernel set for mixed-precision training (kernels_amp.cu). The
 * same contract as cuda_ops.h: every function returns 0 or a negative GP_E* code,
 * only enqueues work on a stream, and launches nothing for empty inputs.
 *
 * `ht` selects the 16-bit type: GP_F16 (__half) or GP_BF16 (__nv_bfloat16); any other
 * value is GP_EINVAL. Pointers typed `void *` are device arrays of that type, `float *`
 * are float32. Arithmetic and accumulation run in float and each result is rounded to
 * the 16-bit type once (round to nearest even), so an op gives what its float kernel
 * gives on the same 16-bit inputs, rounded. `nhwc` = 1 means a 4-D activation is
 * stored N,H,W,C (channels last) instead of N,C,H,W. `accumulate` = 1 adds the
 * gradient to dx (in float, from the 16-bit dx, then rounded), 0 overwrites.
 *
 * The elementwise kernels move 8 elements (16 bytes) per thread when every array
 * involved is 16-byte aligned (a dropout mask 8-byte aligned); any other pointer
 * still works, through a slower scalar path. */
#ifndef GP_CUDA_AMP_H
#define GP_CUDA_AMP_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops/ops.h"
#include "ops/cuda/cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- conversions ---------------------------------------------------------------------- */
int cast_f32_to_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const float *x, void *y);
int cast_h_to_f32_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x, float *y);
/* 4-D float NCHW -> 16-bit NHWC (also used for conv weights KCRS -> KRSC) and back; with
 * nhwc_in == 0 / nhwc_out == 0 it is a plain cast. accumulate: y += converted x (float math) */
int to_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w, int nhwc_out,
		     const float *x, void *y);
int from_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w, int nhwc_in,
		       const void *x, float *y, int accumulate);

/* --- activations, add, gradient pass, loss scaling ------------------------------------- */
int relu_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x, void *y);
/* The gradient passes where 0 < y (and y < 6 for relu6). */
int relu_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *y, const void *dy,
		    void *dx, int accumulate);
int relu6_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x, void *y);
int relu6_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *y, const void *dy,
		     void *dx, int accumulate);
int add_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *a, const void *b,
		   void *y);
int grad_pass_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *dy, void *dx,
		     int accumulate);
/* p *= factor in place; nonfinite_flag (device int, may be NULL) set to 1 where the result is
 * inf/NaN. The result checked is the rounded 16-bit value, so an fp16 overflow counts; the
 * flag is not cleared first. */
int scale_h_cuda(cudaStream_t s, enum gp_dtype ht, void *p, size_t count, double factor,
		 int *nonfinite_flag);

/* --- pooling ---------------------------------------------------------------------------- */
/* Global average pool to N x C (output is N x C, the same in both layouts) and its backward */
int avgpool_global_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw,
			      const void *x, void *y);
int avgpool_global_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw,
			      const void *dy, void *dx, int accumulate);
/* Max pooling (padding counts as -inf, PyTorch semantics: a NaN in a window wins, ties go
 * to the first position in window scan order). argmax is int32, one per output element and
 * stored in the output's layout; its value is the input element's offset h * w_in + w
 * within its (n, c) plane whatever the layout, as maxpool_fwd_cuda defines it. Backward
 * is deterministic (each input element gathers, in output order, the dy of the windows
 * whose argmax it is). */
int maxpool_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, const struct pool_args *a,
		       const void *x, void *y, int32_t *argmax);
int maxpool_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, const struct pool_args *a,
		       const void *dy, const int32_t *argmax, void *dx, int accumulate);

/* --- batch norm, dropout ---------------------------------------------------------------- */
/* y = act((x - mean[c]) * invstd[c] * gamma[c] + beta[c] (+ identity)), statistics and
 * parameters float, identity 16-bit or NULL: one pass in float, rounded once (recompute). */
int bn_apply_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw, const void *x,
		    const void *identity, const float *gamma, const float *beta, const float *mean,
		    const float *invstd, enum bn_apply_act act, void *y);
/* Inverted dropout: kept elements (mask 1) are scaled by 1 / (1 - p). */
int dropout_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, const struct dropout_args *a,
		       const uint8_t *mask, const void *x, void *y);
int dropout_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, const struct dropout_args *a,
		       const uint8_t *mask, const void *dy, void *dx, int accumulate);

/* --- loss -------------------------------------------------------------------------------- */
/* Softmax cross-entropy in float from 16-bit logits (autocast semantics): mean loss into *loss
 * (device double), dlogits (16-bit) = (softmax - onehot) / n, *correct (device int) = right
 * argmax predictions (ties to lower index). row_scratch: 2 * n floats. As softmax_xent_cuda,
 * n <= 0 or k <= 0 is GP_EINVAL. */
int softmax_xent_h_cuda(cudaStream_t s, enum gp_dtype ht, int n, int k, const void *logits,
			const int32_t *labels, void *dlogits, float *row_scratch, double *loss,
			int *correct);

/* --- linear layer helpers ------------------------------------------------------------- */
/* y[n][c][i] += b[c] (b float, y 16-bit; hw = 1 for linear layers, where both layouts
 * coincide). */
int bias_add_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw, const float *b,
		    void *y);
/* db[c] = sum over n and hw of dy (dy 16-bit in the layout nhwc selects, db float; overwrites;
 * deterministic, summed in double as channel_sum_cuda does). */
int channel_sum_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw,
		       const void *dy, float *db);

#ifdef __cplusplus
}
#endif

#endif
