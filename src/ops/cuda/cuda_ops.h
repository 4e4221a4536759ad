/* The CUDA op layer beneath the engine's GPU backend. Every function returns 0 or a
 * negative GP_E* code and only enqueues work on a stream (nothing synchronizes unless
 * it says so). Argument meanings match the CPU reference kernels in ops/ops.h:
 * forward kernels overwrite, input gradients take `accumulate`, parameter gradients
 * are overwritten.
 *
 * Each op has one launcher, and the launchers of the own kernels take the element type
 * `dt` of their activations: GP_F32 (float), GP_F16 (__half) or GP_BF16
 * (__nv_bfloat16); any other is GP_EINVAL. Pointers typed `void *` are device arrays of
 * that type, `float *` are float32 whatever dt is. 16-bit values are widened to float,
 * computed as the float kernels compute them, and each result is rounded to the 16-bit
 * type once (round to nearest even), so an op gives what its float kernel gives on the
 * same inputs, rounded; `accumulate` adds in float to the widened dx, then rounds.
 * Where the layout matters the launcher takes `nhwc`: 1 means a 4-D activation is
 * stored N,H,W,C (channels last) instead of N,C,H,W. Float activations are always NCHW
 * (nhwc = 1 with GP_F32 is GP_EINVAL). Launchers launch nothing for empty inputs.
 *
 * The 16-bit elementwise kernels move 8 elements (16 bytes) per thread when every array
 * involved is 16-byte aligned (a dropout mask 8-byte aligned), the float ones 4 (float4)
 * when 16-byte aligned and the count divides; any other pointer still works, through a
 * slower scalar path. */
#ifndef GP_CUDA_OPS_H
#define GP_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element size of the context's activations. */
static inline size_t act_size(const struct cuda_ctx *ctx)
{
	return ctx->act_dtype == GP_F32 ? sizeof(float) : 2;
}

/* --- elementwise (eltwise.cu) ---------------------------------------------------------- */
int fill_cuda(cudaStream_t s, float *p, size_t count, float value);
int copy_cuda(cudaStream_t s, float *dst, const float *src, size_t count);
/* dst[b][a][:] = src[a][b][:] for rows of l floats (NCHW images to channel-major). */
/* Every stride-th pixel of `planes` planes of h x w pixels, u contiguous elements of dt a
 * pixel (NCHW: u 1; NHWC: u = channels), against the ((h-1)/stride+1) x ((w-1)/stride+1)
 * planes of sub: SUBSAMPLE_GATHER copies them into sub, SUBSAMPLE_SCATTER back into full
 * (the other pixels untouched), SUBSAMPLE_ADD adds sub to them (in float, rounded once). */
enum subsample_op { SUBSAMPLE_GATHER = 0, SUBSAMPLE_SCATTER = 1, SUBSAMPLE_ADD = 2 };
int subsample_cuda(cudaStream_t s, enum gp_dtype dt, int planes, int h, int w, int u, int stride, int op,
		   void *full, void *sub);
int swap_outer_cuda(cudaStream_t s, float *dst, const float *src, int a, int b, int l);
int relu_fwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *x, void *y);
/* The gradient passes where 0 < y (and y < 6 for relu6). */
int relu_bwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *y, const void *dy,
		  void *dx, int accumulate);
int relu6_fwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *x, void *y);
int relu6_bwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *y, const void *dy,
		   void *dx, int accumulate);
int add_fwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *a, const void *b,
		 void *y);
int grad_pass_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *dy, void *dx,
		   int accumulate);
/* Inverted dropout as in PyTorch: kept elements (mask 1) are scaled by 1 / (1 - p). */
int dropout_fwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct dropout_args *a,
		     const uint8_t *mask, const void *x, void *y);
int dropout_bwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct dropout_args *a,
		     const uint8_t *mask, const void *dy, void *dx, int accumulate);
/* Mask element i is kept (1) when a hash of (seed, offset + i) maps to u >= p, u
 * uniform on [0, 1) in steps of 2^-24; it does not reproduce dropout_mask_cpu. */
int dropout_mask_cuda(cudaStream_t s, size_t count, double p, uint64_t seed, uint64_t offset,
		      uint8_t *mask);
/* As dropout_mask_cuda, with the step counter read on the device (CUDA graphs). */
int dropout_mask_step_cuda(cudaStream_t s, size_t count, double p, uint64_t seed,
			   const unsigned long long *step, uint8_t *mask);
/* *c += 1 on the device. */
int counter_inc_cuda(cudaStream_t s, unsigned long long *c);
/* p *= factor in place; if nonfinite_flag (device int, may be NULL) is given, it is set
 * to 1 where a result is inf or NaN (it is not cleared first). In 16 bits the result
 * checked is the rounded value, so an fp16 overflow counts. */
int scale_cuda(cudaStream_t s, enum gp_dtype dt, void *p, size_t count, double factor,
	       int *nonfinite_flag);

/* --- conversions between float and 16 bits (convert.cu); ht: GP_F16 or GP_BF16 ---------- */
int cast_f32_to_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const float *x, void *y);
int cast_h_to_f32_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x, float *y);
/* 4-D float NCHW -> 16-bit NHWC (also used for conv weights KCRS -> KRSC) and back; with
 * nhwc_in == 0 / nhwc_out == 0 it is a plain cast. accumulate: y += converted x (float math) */
int to_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w, int nhwc_out,
		     const float *x, void *y);
int from_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w, int nhwc_in,
		       const void *x, float *y, int accumulate);

/* --- pooling (pool.cu) ------------------------------------------------------------------ */
/* Global average pool to N x C (the output is N x C in both layouts) and its backward. */
int avgpool_global_fwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw,
			    const void *x, void *y);
int avgpool_global_bwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw,
			    const void *dy, void *dx, int accumulate);
/* Max pooling (padding counts as -inf; ties go to the first position in window scan
 * order; in 16 bits, as in PyTorch, a NaN in a window wins). argmax is a byte, one per
 * output element and stored in the output's layout; its value is the maximum's offset
 * ky * k + kx within its window (k <= MAXPOOL_K_MAX), as the CPU reference's. Backward
 * is deterministic: each input element gathers, in output order, the dy of the
 * windows whose argmax it is. */
int maxpool_fwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct pool_args *a,
		     const void *x, void *y, uint8_t *argmax);
int maxpool_bwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct pool_args *a,
		     const void *dy, const uint8_t *argmax, void *dx, int accumulate);

/* --- batch norm apply (bn.cu) ------------------------------------------------------------ */
/* The activation after a recomputed batch norm (bn_apply_cuda). */
enum bn_apply_act { BN_APPLY_LINEAR, BN_APPLY_RELU, BN_APPLY_RELU6 };
/* y = act((x - mean) * invstd * gamma + beta (+ identity)) per channel, from saved
 * statistics (identity may be NULL; statistics and parameters float): a batch norm's
 * output, or a residual block's, in one pass. In float bit-identical to the linear form
 * followed by the add and activation kernels, and to the own training forward's output
 * (bn_fwd_train_own_cuda); in 16 bits one pass in float, rounded once. */
int bn_apply_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw, const void *x,
		  const void *identity, const float *gamma, const float *beta, const float *mean,
		  const float *invstd, enum bn_apply_act act, void *y);
/* A batch norm's normalization from its parameters and saved statistics (float, one
 * each a channel): (x - mean) * invstd * gamma + beta. */
struct bn_norm {
	const float *gamma, *beta, *mean, *invstd;
};
/* The same with the identity z a batch norm's input, normalized by zn on the way:
 * act(bn(x) + bn_z(z)), in float, rounded once (16 bits only). A downsampling residual
 * block's join, whose shortcut batch norm then never writes its output. */
int bn_apply_norm_id_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw, const void *x,
			  const void *z, const float *gamma, const float *beta, const float *mean,
			  const float *invstd, const struct bn_norm *zn, enum bn_apply_act act, void *y);
/* Training's max pool (a) over relu(bn(x)), x a batch norm's input and bn its
 * parameters and saved statistics: each element of a window normalized, activated and
 * rounded as the batch norm's apply would write it, so y and argmax are the pool's over
 * that output bit for bit, and the output is never written (ResNet's stem). 16-bit NHWC
 * with channels in eights (maxpool_bn_relu_ok, from the settings alone). */
int maxpool_bn_relu_ok(enum gp_dtype dt, int nhwc, const struct pool_args *a);
int maxpool_bn_relu_fwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct pool_args *a, const void *x,
			     const struct bn_norm *bn, void *y, uint8_t *argmax);

/* --- loss (loss.cu) ----------------------------------------------------------------------- */
/* Mean cross-entropy of softmax(logits) against labels into *loss (device double),
 * computed in float from any logits' type (autocast semantics); dlogits (the logits'
 * type) = (softmax - onehot) / n, *correct (device int) = right argmax predictions (ties
 * to the lower index). row_scratch is 2 * n floats of scratch. n <= 0 or k <= 0 is
 * GP_EINVAL. */
int softmax_xent_cuda(cudaStream_t s, enum gp_dtype dt, int n, int k, const void *logits,
		      const int32_t *labels, void *dlogits, float *row_scratch, double *loss,
		      int *correct);
/* The same with label smoothing e (softmax_xent_ls_cpu): the target is 1 - e on the
 * label plus e / k on every class. */
int softmax_xent_ls_cuda(cudaStream_t s, enum gp_dtype dt, int n, int k, const void *logits,
			 const int32_t *labels, double smoothing, void *dlogits, float *row_scratch,
			 double *loss, int *correct);

/* --- optimizer (optim.cu) ------------------------------------------------------------------ */
/* One launch over the flat float arrays (torch.optim.SGD semantics); momentum_buf may
 * be NULL when a->momentum == 0. */
int sgd_step_cuda(cudaStream_t s, const struct sgd_args *a, size_t count, float *param,
		  const float *grad, float *momentum_buf);
/* Beyond plain SGD: the step's hyperparameters that change from step to step live in
 * device memory (so a captured step reads the current ones): lr, momentum (SGD), beta1
 * and the step number (AdamW), OPTIM_HYPER_DOUBLES doubles, written by
 * optim_hyper_set_cuda (one tiny launch, outside a captured graph, before the step). */
#define OPTIM_HYPER_DOUBLES 4
/* Blocks of the sum of squares, whose partial sums it keeps (as many doubles). */
#define OPTIM_SUMSQ_BLOCKS 512
int optim_hyper_set_cuda(cudaStream_t s, double *hyper, const struct sgd_args *a);
/* *sumsq = sum of x^2 in double, in a fixed order (partials: OPTIM_SUMSQ_BLOCKS doubles). */
int sumsq_cuda(cudaStream_t s, size_t count, const float *x, double *partials, double *sumsq);
/* One launch over the flat arrays: every gradient times optim_grad_factor(a, *sumsq)
 * (sumsq NULL: no clipping), then a->kind's update with the rate (and momentum or
 * beta1, step) read from hyper; buf1 is SGD's momentum buffer or AdamW's exp_avg,
 * buf2 AdamW's exp_avg_sq. As sgd_step_cpu and adamw_step_cpu in float. The gradients
 * are left as they were. */
int optim_step_cuda(cudaStream_t s, const struct sgd_args *a, const double *hyper, const double *sumsq,
		    size_t count, float *param, const float *grad, float *buf1, float *buf2);
/* enum grad_accum_mode: acc = grad, acc += grad, or grad += acc. */
int grad_accum_cuda(cudaStream_t s, enum grad_accum_mode mode, size_t count, float *grad, float *acc);

/* --- bias helpers (bias.cu); b and db float ------------------------------------------------ */
/* y[n][c][i] += b[c] over hw positions (linear layers: hw = 1, where both layouts
 * coincide). */
int bias_add_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw, const float *b,
		  void *y);
/* db[c] = sum over n and hw of dy[n][c][i] (overwrites; deterministic, summed in double). */
int channel_sum_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw,
		     const void *dy, float *db);

/* --- depthwise convolution on own kernels (dwconv.cu) ------------------------------------
 * For the layers where cuDNN's depthwise paths are slow (MobileNetV2's 3x3 convolutions).
 * GP_F32 runs NCHW float kernels, weights c x 1 x k x k (PyTorch layout); GP_F16 and
 * GP_BF16 NHWC kernels, weights KRSC ([c][kh][kw][1], the same memory order), moving 8,
 * 4 or 2 channels per thread when c is a multiple and the 16-bit arrays are aligned to
 * that (else a scalar path). The bias and its gradient are float; weight gradients are
 * in the activations' type. Results do not depend on the run: every reduction sums in a
 * fixed order, without atomics. */
/* 1 when a is a depthwise convolution these kernels handle in type dt and layout nhwc
 * (float NCHW, 16-bit NHWC): groups == c_in == c_out, kh == kw (odd, <= 7), stride 1 or
 * 2, any pad; in 16 bits one image of x or y holds at most 2^31 - 1 elements. */
int dwconv_supported(enum gp_dtype dt, int nhwc, const struct conv2d_args *a);
/* relu6 (16 bits only; float: GP_EUNSUPPORTED): a ReLU6 folded into the convolution that
 * reads its output (the batch norm before it applies max(., 0) in cuDNN's fused ReLU and
 * stores that; these apply min(., 6)): forward and weight gradient take min(x, 6) for x,
 * and backward data keeps dx only where relu6_x < 6 (relu6_x: the stored input, laid out
 * as dx; accumulate adds the masked gradient). */
/* y = x (*) w, plus b[c] when b is given and a->has_bias. */
int dwconv_fwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
		    const void *w, const float *b, void *y, int relu6);
int dwconv_bwd_data_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *dy,
			 const void *w, void *dx, int accumulate, int relu6, const void *relu6_x);
/* Scratch floats dwconv_bwd_filter_cuda needs (per-block partial sums, reduced in a
 * second, fixed-order pass); 0 for an unsupported shape. */
size_t dwconv_bwd_filter_scratch_floats(enum gp_dtype dt, const struct conv2d_args *a);
/* dw overwritten ([c][kh][kw]); db (may be NULL, c floats) overwritten with the sum of dy. */
int dwconv_bwd_filter_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
			   const void *dy, void *dw, float *db, float *scratch, int relu6);
/* 16 bits: channels per thread for every direction (8, 4, 2, 1; 0: the measured
 * defaults) and rows per thread at 4 channels (2 or 4; 0: the defaults): for the tests,
 * which check every width. Process-wide and not thread-safe; set before launching. */
void dwconv_set_widths(int v, int vh);
/* 16 bits: which directions let 3x3 pad-1 shapes take the tiled kernels (bits: 1 forward,
 * 2 backward data, 4 weight gradient; 7, all, is the default), the rest staying on the
 * row kernels; for the tests, which check and time both. Process-wide and not
 * thread-safe, as above. */
void dwconv_set_tiled(int dirs);

/* --- convolutions of few input channels on own tensor-core kernels (conv_stem.cu) -------
 * ResNet's stem (3 channels, 7 x 7, stride 2) in 16-bit NHWC, where cuDNN's legacy API
 * has no fast kernel; conv_plan.c times them against cuDNN's best per direction. */
/* 1 when these kernels take a in type dt and layout nhwc: fp16 or bf16 NHWC, ungrouped,
 * 1..7 input channels, c_in * kh * kw <= 160, c_out a multiple of 64. */
int stem_conv_supported(enum gp_dtype dt, int nhwc, const struct conv2d_args *a);
/* The forward's staged-rows layout (conv_stem.cu, "forward on staged input rows"), in
 * 16-bit elements: a tile's kh input rows in `copies` copies, copy i shifted by i * gcd,
 * each copy_el long (kh rows of row_el, then padding); the weights [64][ldb]. */
struct stem_rows {
	int pieces;  /* 8-element pieces of a window row: ceil(kw * c_in / 8) */
	int kq;      /* pieces of the product's K, rounded up to even */
	int gcd;     /* gcd(stride * c_in, 8) */
	int copies;  /* 8 / gcd */
	int row_el;  /* elements of a staged row */
	int copy_el; /* elements of a copy: kh * row_el and padding to 8k + 1 slots of 8 */
	int ldb;     /* the weights' row stride: kq * 8 + 8 */
	int segs;    /* tiles along an output row (up to 128 pixels each) */
	int tiles;
};
/* 1 and *r where the forward of a supported shape reads its windows from staged input
 * rows (ResNet's stem: 3 channels, 7 x 7, stride 2, pad 3, a width that is a multiple
 * of 8); 0 where it builds columns element by element. */
int stem_conv_rows(const struct conv2d_args *a, struct stem_rows *r);
/* y = x (*) w (weights KRSC); no bias (the caller adds it). */
int stem_conv_fwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
		       const void *w, void *y);
/* The float scratch stem_conv_wgrad_cuda needs on the current device (per-block partial
 * sums, added in a fixed order by a second pass). */
int stem_conv_wgrad_scratch_floats(enum gp_dtype dt, const struct conv2d_args *a, size_t *floats);
/* The weight gradient into float dw in the master layout (KCRS), overwritten, or added
 * to where accumulate; the same bits on every run. */
int stem_conv_wgrad_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
			 const void *dy, float *dw, int accumulate, float *scratch, size_t scratch_floats);

/* --- convolution (conv_plan.c: plans, algorithms; conv_cudnn.c: the calls) --------------
 * The first call for a shape (and math mode) builds its plan: descriptors and the
 * fastest algorithms measured by cuDNN within ctx->workspace_limit_bytes. Building a
 * plan allocates scratch; it synchronizes the device. Plans are cached per device for
 * the process (every context on the device shares them). */
int conv2d_plan_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a);
/* The same, measuring on the caller's buffers (input, weights, output; each at least
 * the convolution's size, contents overwritten) instead of allocating scratch. */
struct conv_bufs {
	void *x, *w, *y;
};
int conv2d_plan_cuda_in(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_bufs *bufs);
/* What one convolution call uses beyond the context. ws_planned: the workspace is ws
 * (memory the caller planned for this call, such as part of the activation arena;
 * NULL when it needs none) instead of the context's shared one, which a call without
 * it grows where it is too small (so never inside a CUDA graph capture). relu6: a
 * 16-bit depthwise convolution (conv2d_can_fold_relu6) reads the output of a ReLU6
 * folded into it: min(x, 6) on load, and backward data masked where the stored input
 * relu6_x reaches 6. A NULL call: the shared workspace, nothing folded. */
struct conv_call {
	int ws_planned;
	void *ws;
	int relu6;
	const void *relu6_x;
};
/* x, w, y, dx, dy, dw are in the context's activation type and layout (ctx->act_dtype,
 * ctx->nhwc; weights KRSC under NHWC); the bias and its gradient are float. */
int conv2d_fwd_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
		    const void *x, const void *w, const float *b, void *y);
int conv2d_bwd_data_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
			 const void *dy, const void *w, void *dx, int accumulate);
int conv2d_bwd_filter_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
			   const void *x, const void *dy, void *dw, float *db);
/* Tensors of more elements than this (default and 0: 2^31 - 1, cuDNN's limit) run as
 * slices of the batch; tests lower it to check the slicing on small tensors. */
void conv_cuda_set_max_elems(size_t n);
/* Workspace bytes a's planned convolution needs forward and in backward (data and
 * filter share one buffer, one after the other); GP_ENOTFOUND before planning. */
/* The weight gradient straight into float dw (and db), where the plan computes it
 * that way in 16 bits (NHWC 1x1 convolutions through cuBLAS, few input channels on the
 * stem kernels, whose scratch is call's workspace): 1 when done, 0 when the caller
 * must use conv2d_bwd_filter_cuda (always in FP32, where dw is the activations' type). */
int conv2d_bwd_filter_f32_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
			       const void *x, const void *dy, float *dw, float *db);
/* 1 when a runs on the own 16-bit NHWC depthwise kernels in ctx's mode (a ReLU6
 * before it can then be folded in: struct conv_call's relu6). */
int conv2d_can_fold_relu6(const struct cuda_ctx *ctx, const struct conv2d_args *a);
/* The workspace a planned convolution's forward and backward take; with wgrad, bwd is
 * backward data's alone and *wgrad the weight gradient's (they then run apart). */
int conv2d_ws_bytes_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, size_t *fwd, size_t *bwd,
			 size_t *wgrad);
/* 1 when a's weight gradient is a cuDNN call (the side stream can take it; a plan not
 * made yet counts as cuDNN's). */
int conv2d_wgrad_is_cudnn(const struct cuda_ctx *ctx, const struct conv2d_args *a);
/* Drop every cached plan of ctx's device (the workspace stays); no net may be set up
 * on that device meanwhile. */
void conv2d_plans_clear(const struct cuda_ctx *ctx);
/* Plans in the cache for ctx's device. */
int conv2d_plans_count(const struct cuda_ctx *ctx);

/* --- batch norm with own kernels (bn.cu), float NCHW ------------------------------
 * For tensors cuDNN cannot describe (more than 2^31 - 1 elements), and fused with the
 * activation after it in FP32 (cuDNN fuses only 16-bit NHWC). Scratch: bn_own_scratch_bytes. */
size_t bn_own_scratch_bytes(int c);
/* y = act(bn(x) (+ z)) with batch statistics (z may be NULL): saved mean and inverse
 * standard deviation, running statistics updated as PyTorch does. */
int bn_fwd_train_own_cuda(cudaStream_t s, const struct bn_args *a, const float *x, const float *z,
			  enum bn_apply_act act, const float *gamma, const float *beta, float *y,
			  float *save_mean, float *save_invstd, float *running_mean, float *running_var,
			  void *scratch);
int bn_fwd_eval_own_cuda(cudaStream_t s, const struct bn_args *a, const float *x,
			 const float *gamma, const float *beta, const float *running_mean,
			 const float *running_var, float *y);
/* Backward of y = act(bn(x)) from dy, the gradient of y; the activation's mask is
 * recomputed from x and the saved statistics (beta only for that). */
int bn_bwd_own_cuda(cudaStream_t s, const struct bn_args *a, enum bn_apply_act act, const float *x,
		    const float *dy, const float *gamma, const float *beta, const float *save_mean,
		    const float *save_invstd, float *dx, int accumulate, float *dgamma, float *dbeta,
		    void *scratch);

/* --- batch norm with own kernels (bn_nhwc16.cu), 16-bit NHWC training ------------
 * Where bn16_rule.h takes them over cuDNN's (bn_cudnn.c routes): dt GP_F16 or GP_BF16,
 * channels a multiple of 8, tensors 16-byte aligned; statistics and parameters float,
 * with the semantics of bn_fwd_train_own_cuda and bn_bwd_own_cuda. Scratch:
 * bn16_scratch_bytes. */
size_t bn16_scratch_bytes(int c);
/* Test hook: the row slices capped at n (0: no cap), so that on a small tensor each
 * thread walks many rows. */
void bn16_cuda_set_max_slices(int n);
/* Test hook: the floats (all 2^32 bit patterns) where the backward's mask from
 * bn16_mask.h's bounds and the unfused activation's test on the rounded output
 * disagree, for dt and act (ReLU or ReLU6). */
int bn16_cuda_mask_mismatches(enum gp_dtype dt, enum bn_apply_act act, unsigned long long *mismatches);
/* The training forward's statistics alone (saved and running), for an apply elsewhere
 * (bn_apply_norm_id_cuda). */
int bn16_stats_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, const void *x, float *save_mean,
		    float *save_invstd, float *running_mean, float *running_var, void *scratch);
int bn16_fwd_train_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, const void *x,
			const void *z, enum bn_apply_act act, const float *gamma, const float *beta,
			void *y, float *save_mean, float *save_invstd, float *running_mean,
			float *running_var, void *scratch);
int bn16_bwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, enum bn_apply_act act,
		  const void *x, const void *dy, const float *gamma, const float *beta,
		  const float *save_mean, const float *save_invstd, void *dx, int accumulate,
		  float *dgamma, float *dbeta, void *scratch);
/* The backward of batch norm b in y = relu(b(x) + z), where the ReLU's backward has not
 * run: g = dy where y > 0 (the unfused ReLU backward's test on the 16-bit output y) is
 * written to dz, the add's gradient for both its inputs (dz may be dy: in place), and
 * dx is b's backward of g. Saves the ReLU backward's pass: read dy and y, write dz. */
int bn16_bwd_out_masked_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, const void *x,
			     const void *y, const void *dy, void *dz, const float *gamma,
			     const float *save_mean, const float *save_invstd, void *dx, int accumulate,
			     float *dgamma, float *dbeta, void *scratch);

/* Grow (never shrink) the shared workspace to at least bytes (whole 2 MiB pages);
 * synchronizes the device when it grows. */
int cuda_workspace_reserve(struct cuda_ctx *ctx, size_t bytes);

/* --- synchronized batch norm (bn.cu), over several ranks (SyncBatchNorm) --------------
 * In pieces between which the caller all-reduces per-channel sums (double): x, y, dy
 * and dx in dt and NCHW or NHWC; statistics, running values and parameter gradients
 * float; sums 2 x channels doubles. */
/* sums[0..c) = sum of x, sums[c..2c) = sum of x^2, per channel (sums zeroed here). */
int bn_sync_sums_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct bn_args *a,
		      const void *x, double *sums);
/* From summed sums over count elements: save_mean, save_invstd, and the running
 * values (momentum, unbiased variance). */
int bn_sync_finalize_cuda(cudaStream_t s, const struct bn_args *a, const double *sums, double count,
			  float *save_mean, float *save_invstd, float *run_mean, float *run_var);
int bn_sync_apply_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct bn_args *a,
		       const void *x, const float *gamma, const float *beta, const float *mean,
		       const float *invstd, void *y);
/* sums[0..c) = sum of dy, sums[c..2c) = sum of dy * xhat (zeroed here); dgamma and
 * dbeta get this rank's values (float). */
int bn_sync_bwd_sums_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct bn_args *a,
			  const void *x, const void *dy, const float *mean, const float *invstd,
			  double *sums, float *dgamma, float *dbeta);
int bn_sync_bwd_dx_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct bn_args *a,
			const void *x, const void *dy, const float *gamma, const float *mean,
			const float *invstd, const double *sums, double count, void *dx,
			int accumulate);

/* --- batch norm (bn_cudnn.c), cuDNN spatial mode; more than 2^31 - 1 elements: own kernels */
/* Reserve what a batch norm of these arguments needs (the own kernels' scratch). */
int bn_plan_cuda(struct cuda_ctx *ctx, const struct bn_args *a);
/* Tests: route every batch norm through the own kernels (1) or by size (0). */
void bn_cuda_force_own(int on);
/* x, y, dx, dy in the context's activation type and layout; the rest float. */
int bn_fwd_train_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x,
		      const float *gamma, const float *beta, void *y, float *save_mean,
		      float *save_invstd, float *running_mean, float *running_var);
int bn_fwd_eval_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x,
		     const float *gamma, const float *beta, const float *running_mean,
		     const float *running_var, void *y);
int bn_bwd_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x, const void *dy,
		const float *gamma, const float *save_mean, const float *save_invstd, void *dx,
		int accumulate, float *dgamma, float *dbeta);
/* Whether a's backward can apply the mask of a ReLU after a residual add that a feeds
 * (the own 16-bit kernels: bn16_bwd_out_masked_cuda); then bn_bwd_out_masked_cuda is
 * bn_bwd_cuda on g = (y > 0 ? dy : 0), g written to dz (which may be dy). */
int bn_bwd_out_masks_cuda(const struct cuda_ctx *ctx, const struct bn_args *a);
int bn_bwd_out_masked_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x, const void *y,
			   const void *dy, void *dz, const float *gamma, const float *save_mean,
			   const float *save_invstd, void *dx, int accumulate, float *dgamma, float *dbeta);

/* Fused batch norm: y = relu(bn(x)), relu6(bn(x)) or relu(bn(x) + z), as the ReLU
 * (ReLU6) and add nodes that follow a batch norm would compute them, in one pass:
 * through cuDNN's Ex calls for 16-bit NHWC, on the own kernels (bn.cu) for FP32 NCHW. */
enum bn_fuse { BN_FUSE_NONE = 0, BN_FUSE_RELU, BN_FUSE_ADD_RELU, BN_FUSE_RELU6 };
/* 1 when cuDNN runs the fused op for a's shape in the context's type and layout (its
 * workspace reserved, *reserve_bytes what it keeps between forward and backward);
 * 0 when it does not (plain batch norm then); < 0 on error. */
int bn_fuse_plan_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op,
		      size_t *reserve_bytes);
/* 1 when a's training batch norm followed by op runs on the own 16-bit NHWC kernels
 * (bn_nhwc16.cu) in this context, as every call for it will: the answer of the mode
 * (ctx->bn16, GPUPERF_BN16) and the shape's rule (bn16_rule.h); 0 on cuDNN. */
int bn16_routed_own_cuda(const struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op);
/* 1 when a's training batch norm fused with op (a ReLU or ReLU6) takes the activation's
 * mask from x in backward, never reading the activation's output y (the own kernels,
 * 16-bit or FP32); from the context's settings alone, so that a plan without a device
 * gives the same answer (gpuperf info). */
int bn_fused_mask_from_x_cuda(const struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op);
/* Training forward of a fused op (z only for BN_FUSE_ADD_RELU). */
int bn_fwd_train_fused_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op,
			    const void *x, const void *z, const float *gamma, const float *beta, void *y,
			    float *save_mean, float *save_invstd, float *running_mean, float *running_var,
			    void *reserve, size_t reserve_bytes);
/* A residual join y = relu(bn(x) + bn_z(z)) of two training batch norms of a's shape
 * (a downsampling block: bn_z ends the shortcut): 1 when both run on the own 16-bit
 * kernels, where the join applies bn_z in its own pass (bn_fwd_train_add_bn_relu_cuda)
 * and bn_z's forward makes its statistics only (bn_fwd_stats_cuda); from the settings
 * alone, as bn16_routed_own_cuda. */
int bn_add_bn_relu_own_cuda(const struct cuda_ctx *ctx, const struct bn_args *a);
/* A training batch norm's statistics (saved and running) without its output; op: what
 * it is fused with, which routes it (the own 16-bit kernels only). */
int bn_fwd_stats_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op, const void *x,
		      float *save_mean, float *save_invstd, float *running_mean, float *running_var);
/* Training forward of y = relu(bn(x) + bn_z(z)): bn's statistics, then one pass;
 * zn: bn_z's parameters and the statistics bn_fwd_stats_cuda saved. */
int bn_fwd_train_add_bn_relu_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x, const void *z,
				  const float *gamma, const float *beta, const struct bn_norm *zn, void *y,
				  float *save_mean, float *save_invstd, float *running_mean, float *running_var);
/* Backward of y = relu(bn(x)) (op BN_FUSE_RELU) or relu6(bn(x)) (BN_FUSE_RELU6) from y
 * and dy (the gradient of y): dx (accumulated into when accumulate), dgamma, dbeta. */
int bn_bwd_relu_fused_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op, const void *x, const void *y,
			   const void *dy, const float *gamma, const float *beta, const float *save_mean,
			   const float *save_invstd, void *dx, int accumulate, float *dgamma, float *dbeta,
			   void *reserve, size_t reserve_bytes);

/* --- linear (gemm_cublas.c): y = x W^T + b, W is out x in (PyTorch layout) ------------- */
/* x, w, y, dx, dy in the context's activation type (w: the 16-bit copy under mixed
 * precision); dw, b, db float. */
int linear_fwd_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
		    const void *w, const float *b, void *y);
int linear_bwd_data_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *dy,
			 const void *w, void *dx, int accumulate);
int linear_bwd_weight_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
			   const void *dy, float *dw, float *db);
/* dW only, added into dw when accumulate (1x1 convolutions in batch slices). */
int linear_bwd_weight_acc_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
			       const void *dy, float *dw, int accumulate);

/* --- 1x1 convolutions as cuBLAS products (gemm_cublas.c) ------------------------------ */
/* 1 when a (1x1, unpadded, ungrouped, any stride) is taken in ctx's mode: 16-bit NHWC
 * (one product over N*H*W rows) or float NCHW (image by image). conv_plan.c times each
 * direction against cuDNN's best. x, y, dx, dy, w in the activations' type; dw float. */
int conv1x1_gemm_ok(const struct cuda_ctx *ctx, const struct conv2d_args *a);
/* The scratch bytes direction dir (0 forward, 1 backward data, 2 weight gradient) asks
 * for: none at stride 1 but for the float NCHW weight gradient. Each direction takes
 * less too, down to one image's, in more batches. */
int conv1x1_gemm_scratch_bytes(const struct cuda_ctx *ctx, const struct conv2d_args *a, int dir, size_t *bytes);
int conv1x1_gemm_fwd_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *w, void *y,
			  void *scratch, size_t scratch_bytes);
int conv1x1_gemm_bwd_data_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *dy, const void *w,
			       void *dx, int accumulate, void *scratch, size_t scratch_bytes);
/* The weight gradient into float dw (KCRS), overwritten, or added to where accumulate;
 * the same bits on every run with the same scratch_bytes. */
int conv1x1_gemm_bwd_filter_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *dy,
				 float *dw, int accumulate, void *scratch, size_t scratch_bytes);
/* Time direction dir's 16-bit stride-1 product (backward data alone and adding into
 * dx) through cuBLASLt's candidates against cublasGemmEx's pick on the buffers given
 * (overwritten; dw for the weight gradient) and keep the fastest for every later call
 * of that product on ctx (conv_plan.c, before it times the direction); nothing for
 * other shapes, float or deterministic algorithms. */
int conv1x1_gemm_tune_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, int dir, void *x, void *w, void *y,
			   float *dw);
/* The context's product picks: how many were timed, *taken how many run cuBLASLt's
 * candidate; and their release (cuda_ctx_destroy). */
int gemm_lt_picks(const struct cuda_ctx *ctx, int *taken);
void gemm_lt_free(struct cuda_ctx *ctx);
/* Test hook: on, every timed product takes cuBLASLt's fastest candidate. */
void gemm_lt_force(int on);

#ifdef __cplusplus
}
#endif

#endif
