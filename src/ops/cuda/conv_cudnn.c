/* Convolutions on the CUDA device: each call runs its shape's plan (conv_plan.c: the
 * cuDNN descriptors and the algorithms measured fastest, or a cuBLAS product for 16-bit
 * NHWC 1x1 convolutions), in slices of the batch where a tensor is beyond cuDNN's int
 * sizes; depthwise convolutions run on the own kernels (dwconv.cu); the bias and its
 * gradient on the bias helpers (bias.cu). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/cuda/conv_plan.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

static const float one = 1.0f, zero = 0.0f;

/* cuDNN describes tensors with int sizes: one of more than 2^31 - 1 elements is not
 * supported. Larger batches (maxbatch reaches 2,500 MobileNet images, whose widest
 * activation is 1.2 M floats each) run as slices of the batch: convolution treats
 * images independently, and the weight gradient sums the slices (beta = 1). */
static size_t max_elems = (size_t)INT32_MAX;

void conv_cuda_set_max_elems(size_t n)
{
	max_elems = n ? n : (size_t)INT32_MAX;
}

/* Slices: how many, and the images in each but the last (which takes the rest). */
static int conv_slices(const struct conv2d_args *a, int *per)
{
	size_t img = (size_t)a->c_in * a->h_in * a->w_in;
	size_t out = (size_t)a->c_out * a->h_out * a->w_out;
	if (out > img)
		img = out;
	size_t fit = img ? max_elems / img : (size_t)a->n;
	if (fit >= (size_t)a->n || fit == 0) {
		*per = a->n;
		return 1;
	}
	int k = (int)((a->n + fit - 1) / fit);
	*per = (a->n + k - 1) / k;
	return (a->n + *per - 1) / *per;
}

/* Arguments of slice i, and its offsets into x and y in elements. */
static struct conv2d_args conv_slice(const struct conv2d_args *a, int per, int i, size_t *x_off,
				     size_t *y_off)
{
	struct conv2d_args s = *a;
	int first = i * per;
	s.n = a->n - first < per ? a->n - first : per;
	*x_off = (size_t)first * a->c_in * a->h_in * a->w_in;
	*y_off = (size_t)first * a->c_out * a->h_out * a->w_out;
	return s;
}

/* Depthwise convolutions run on own kernels (dwconv.cu) in FP32 NCHW and in 16-bit
 * NHWC. FP32: cuDNN's took 22 ms per step for MobileNetV2's first one alone at batch 256
 * on the H100 (~100 kernels), where PyTorch's native kernels take 10 ms for all 17
 * layers' weight gradients. 16 bits: cuDNN's path made MobileNetV2 bf16 0.29x of
 * PyTorch's speed, these 0.69x. */
static int use_dwconv(const struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	return dwconv_supported((enum gp_dtype)ctx->act_dtype, ctx->nhwc, a);
}

int conv2d_can_fold_relu6(const struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	return ctx->act_dtype != GP_F32 && use_dwconv(ctx, a);
}

int conv2d_wgrad_is_cudnn(const struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	if (use_dwconv(ctx, a))
		return 0;
	int per, k = conv_slices(a, &per);
	for (int i = 0; i < k; i++) { /* cuBLAS's handle is bound to the main stream */
		size_t xo, yo;
		struct conv2d_args sa = conv_slice(a, per, i, &xo, &yo);
		const struct conv_plan *p = conv_plan_find(ctx, &sa);
		if (p && (p->bwd_filter_gemm || p->bwd_filter_stem))
			return 0;
	}
	return 1;
}

/* The workspace a convolution call uses, of need bytes: the caller's (planned for it),
 * or the context's shared one, grown to need where it is smaller (a plan may come from
 * the cache, made by a net that planned its workspaces elsewhere). */
static int conv_ws(struct cuda_ctx *ctx, const struct conv_call *call, size_t need, void **ws)
{
	if (call && call->ws_planned) {
		*ws = call->ws;
		return 0;
	}
	GP_TRY(cuda_workspace_reserve(ctx, need));
	*ws = ctx->workspace;
	return 0;
}

static int call_relu6(const struct conv_call *call)
{
	return call && call->relu6;
}

int conv2d_ws_bytes_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, size_t *fwd, size_t *bwd,
			 size_t *wgrad)
{
	*fwd = *bwd = 0;
	if (wgrad)
		*wgrad = 0;
	if (use_dwconv(ctx, a))
		return 0; /* the own kernels' scratch is in the shared workspace */
	int per, k = conv_slices(a, &per);
	size_t xo, yo;
	struct conv2d_args sl[2] = { conv_slice(a, per, 0, &xo, &yo), conv_slice(a, per, k - 1, &xo, &yo) };
	for (int i = 0; i < 2; i++) {
		const struct conv_plan *p = conv_plan_find(ctx, &sl[i]);
		if (!p)
			return gp_error(GP_ENOTFOUND, "no convolution plan for this shape yet");
		if (p->fwd_ws_bytes > *fwd)
			*fwd = p->fwd_ws_bytes;
		if (p->bwd_data_ws_bytes > *bwd)
			*bwd = p->bwd_data_ws_bytes;
		size_t *f = wgrad ? wgrad : bwd;
		if (p->bwd_filter_ws_bytes > *f)
			*f = p->bwd_filter_ws_bytes;
	}
	return 0;
}

static int dwconv_reserve(struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	size_t floats = dwconv_bwd_filter_scratch_floats((enum gp_dtype)ctx->act_dtype, a);
	return cuda_workspace_reserve(ctx, floats * sizeof(float));
}

int conv2d_plan_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	if (use_dwconv(ctx, a))
		return dwconv_reserve(ctx, a);
	struct conv_plan *p;
	int per, k = conv_slices(a, &per);
	size_t xo, yo;
	/* the slices come in at most two sizes: the first's and the last's */
	struct conv2d_args first = conv_slice(a, per, 0, &xo, &yo), last = conv_slice(a, per, k - 1, &xo, &yo);
	GP_TRY(conv_plan_get(ctx, &first, NULL, &p));
	return conv_plan_get(ctx, &last, NULL, &p);
}

int conv2d_plan_cuda_in(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_bufs *bufs)
{
	if (use_dwconv(ctx, a))
		return dwconv_reserve(ctx, a);
	struct conv_plan *p;
	int per, k = conv_slices(a, &per);
	size_t xo, yo;
	struct conv2d_args first = conv_slice(a, per, 0, &xo, &yo), last = conv_slice(a, per, k - 1, &xo, &yo);
	GP_TRY(conv_plan_get(ctx, &first, bufs, &p));
	return conv_plan_get(ctx, &last, bufs, &p);
}

/* Element offsets into activation arrays of the context's type. */
#define AT(p, off) ((void *)((char *)(p) + (off) * act_size(ctx)))
#define AT_C(p, off) ((const void *)((const char *)(p) + (off) * act_size(ctx)))

int conv2d_fwd_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
		    const void *x, const void *w, const float *b, void *y)
{
	if (use_dwconv(ctx, a))
		return dwconv_fwd_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, a, x, w, a->has_bias ? b : NULL, y,
				       call_relu6(call));
	if (call_relu6(call))
		return gp_error(GP_EINVAL, "a ReLU6 folded into a convolution that is not a 16-bit depthwise one");
	struct conv_plan *p;
	int per, k = conv_slices(a, &per);
	for (int i = 0; i < k; i++) {
		size_t xo, yo;
		struct conv2d_args sa = conv_slice(a, per, i, &xo, &yo);
		GP_TRY(conv_plan_get(ctx, &sa, NULL, &p));
		if (p->fwd_stem) {
			GP_TRY(stem_conv_fwd_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, &sa, AT_C(x, xo), w,
						  AT(y, yo)));
			continue;
		}
		void *ws;
		GP_TRY(conv_ws(ctx, call, p->fwd_ws_bytes, &ws));
		if (p->fwd_gemm) {
			GP_TRY(conv1x1_gemm_fwd_cuda(ctx, &sa, AT_C(x, xo), w, AT(y, yo), ws, p->fwd_ws_bytes));
			continue;
		}
		CUDNN_TRY(cudnnConvolutionForward(ctx->cudnn, &one, p->x_desc, AT_C(x, xo), p->w_desc, w,
						  p->fwd_desc, p->fwd_algo, ws, p->fwd_ws_bytes, &zero, p->y_desc,
						  AT(y, yo)));
	}
	if (a->has_bias && b)
		return bias_add_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, ctx->nhwc, a->n, a->c_out,
				     a->h_out * a->w_out, b, y);
	return 0;
}

int conv2d_bwd_data_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
			 const void *dy, const void *w, void *dx, int accumulate)
{
	if (use_dwconv(ctx, a))
		return dwconv_bwd_data_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, a, dy, w, dx, accumulate,
					    call_relu6(call), call_relu6(call) ? call->relu6_x : NULL);
	if (call_relu6(call))
		return gp_error(GP_EINVAL, "a ReLU6 folded into a convolution that is not a 16-bit depthwise one");
	struct conv_plan *p;
	int per, k = conv_slices(a, &per);
	for (int i = 0; i < k; i++) {
		size_t xo, yo;
		struct conv2d_args sa = conv_slice(a, per, i, &xo, &yo);
		GP_TRY(conv_plan_get(ctx, &sa, NULL, &p));
		void *ws;
		GP_TRY(conv_ws(ctx, call, p->bwd_data_ws_bytes, &ws));
		if (p->bwd_data_gemm) {
			GP_TRY(conv1x1_gemm_bwd_data_cuda(ctx, &sa, AT_C(dy, yo), w, AT(dx, xo), accumulate, ws,
							  p->bwd_data_ws_bytes));
			continue;
		}
		CUDNN_TRY(cudnnConvolutionBackwardData(ctx->cudnn, &one, p->w_desc, w, p->y_desc, AT_C(dy, yo),
						       p->bwd_data_desc, p->bwd_data_algo, ws, p->bwd_data_ws_bytes,
						       accumulate ? &one : &zero, p->x_desc, AT(dx, xo)));
	}
	return 0;
}

int conv2d_bwd_filter_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
			   const void *x, const void *dy, void *dw, float *db)
{
	if (use_dwconv(ctx, a)) {
		GP_TRY(dwconv_reserve(ctx, a)); /* nothing to do once planned */
		return dwconv_bwd_filter_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, a, x, dy, dw,
					      a->has_bias ? db : NULL, ctx->workspace, call_relu6(call));
	}
	if (call_relu6(call))
		return gp_error(GP_EINVAL, "a ReLU6 folded into a convolution that is not a 16-bit depthwise one");
	struct conv_plan *p;
	int per, k = conv_slices(a, &per);
	for (int i = 0; i < k; i++) {
		size_t xo, yo;
		struct conv2d_args sa = conv_slice(a, per, i, &xo, &yo);
		GP_TRY(conv_plan_get(ctx, &sa, NULL, &p));
		if (p->bwd_filter_stem)
			return gp_error(GP_EINVAL, "a weight gradient planned in float (the stem kernels) "
					"asked for in the activations' type");
		void *ws;
		GP_TRY(conv_ws(ctx, call, p->bwd_filter_ws_bytes, &ws));
		if (p->bwd_filter_gemm && ctx->act_dtype == GP_F32) { /* float dw: the activations' type */
			GP_TRY(conv1x1_gemm_bwd_filter_cuda(ctx, &sa, AT_C(x, xo), AT_C(dy, yo), dw, i > 0, ws,
							    p->bwd_filter_ws_bytes));
			continue;
		}
		CUDNN_TRY(cudnnConvolutionBackwardFilter(ctx->cudnn, &one, p->x_desc, AT_C(x, xo), p->y_desc,
							 AT_C(dy, yo), p->bwd_filter_desc, p->bwd_filter_algo, ws,
							 p->bwd_filter_ws_bytes, i ? &one : &zero, p->w_desc, dw));
	}
	if (a->has_bias && db)
		return channel_sum_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, ctx->nhwc, a->n, a->c_out,
					a->h_out * a->w_out, dy, db);
	return 0;
}

int conv2d_bwd_filter_f32_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_call *call,
			       const void *x, const void *dy, float *dw, float *db)
{
	enum gp_dtype dt = (enum gp_dtype)ctx->act_dtype;
	if (dt == GP_F32 || use_dwconv(ctx, a) || (!conv1x1_gemm_ok(ctx, a) && !stem_conv_supported(dt, ctx->nhwc, a)))
		return 0;
	struct conv_plan *p;
	int per, k = conv_slices(a, &per);
	/* a slice planned for the product or the stem kernels has no cuDNN workspace: then
	 * all take that path */
	int gemm = 0, stem = 0;
	size_t ws_bytes = 0;
	for (int i = 0; i < k; i++) {
		size_t xo, yo;
		struct conv2d_args sa = conv_slice(a, per, i, &xo, &yo);
		GP_TRY(conv_plan_get(ctx, &sa, NULL, &p));
		gemm |= p->bwd_filter_gemm;
		stem |= p->bwd_filter_stem;
		if (p->bwd_filter_ws_bytes > ws_bytes)
			ws_bytes = p->bwd_filter_ws_bytes;
	}
	if (!gemm && !stem)
		return 0;
	void *ws = NULL;
	GP_TRY(conv_ws(ctx, call, ws_bytes, &ws));
	for (int i = 0; i < k; i++) {
		size_t xo, yo;
		struct conv2d_args sa = conv_slice(a, per, i, &xo, &yo);
		if (stem) {
			GP_TRY(stem_conv_wgrad_cuda(ctx->stream, dt, &sa, AT_C(x, xo), AT_C(dy, yo), dw, i > 0, ws,
						    ws_bytes / sizeof(float)));
			continue;
		}
		GP_TRY(conv1x1_gemm_bwd_filter_cuda(ctx, &sa, AT_C(x, xo), AT_C(dy, yo), dw, i > 0, ws, ws_bytes));
	}
	if (a->has_bias && db)
		GP_TRY(channel_sum_cuda(ctx->stream, dt, ctx->nhwc, a->n, a->c_out, a->h_out * a->w_out, dy, db));
	return 1;
}
