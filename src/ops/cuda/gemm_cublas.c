/* Linear layers through cuBLAS. cuBLAS is column-major and our arrays are row-major,
 * so each product is written for the transposes: a row-major M x K array is a
 * column-major K x M one. With x: n x in, W: out x in, y: n x out (row-major):
 *   y^T  = W * x^T        -> gemm(T, N, m=out, n=n,   k=in)
 *   dx^T = W^T * dy^T     -> gemm(N, N, m=in,  n=n,   k=out)
 *   dW^T = x^T * dy       -> gemm(N, T, m=in,  n=out, k=n)
 * Strict FP32 computes in CUBLAS_COMPUTE_32F with the handle in DEFAULT_MATH (no
 * TF32); TF32 asks for CUBLAS_COMPUTE_32F_FAST_TF32. */
#include "core/error.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

/* Under mixed precision (ctx->act_dtype 16-bit) x, W, y, dx and dy are 16-bit and the
 * products accumulate in float on tensor cores; the weight gradient comes out in float
 * directly (cuBLAS takes 16-bit inputs with a float result), into the master gradient. */
static cudaDataType_t act_type(const struct cuda_ctx *ctx)
{
	return ctx->act_dtype == GP_F16 ? CUDA_R_16F : ctx->act_dtype == GP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int gemm(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
		int k, const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
		cudaDataType_t c_type)
{
	const float alpha = 1.0f;
	cudaDataType_t t = act_type(ctx);
	cublasComputeType_t ct = ctx->math == CUDA_MATH_TF32 && t == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32
										: CUBLAS_COMPUTE_32F;
	CUBLAS_TRY(cublasGemmEx(ctx->cublas, ta, tb, m, n, k, &alpha, a, t, lda, b, t, ldb, &beta, c,
				c_type, ldc, ct, CUBLAS_GEMM_DEFAULT));
	return 0;
}

int linear_fwd_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
		    const void *w, const float *b, void *y)
{
	GP_TRY(gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, a->out, a->n, a->in, w, a->in, x, a->in, 0.0f, y,
		    a->out, act_type(ctx)));
	if (a->has_bias && b)
		return bias_add_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, 0, a->n, a->out, 1, b, y);
	return 0;
}

int linear_bwd_data_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *dy,
			 const void *w, void *dx, int accumulate)
{
	return gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, a->in, a->n, a->out, w, a->in, dy, a->out,
		    accumulate ? 1.0f : 0.0f, dx, a->in, act_type(ctx));
}

int linear_bwd_weight_acc_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
			       const void *dy, float *dw, int accumulate)
{
	return gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, a->in, a->out, a->n, x, a->in, dy, a->out,
		    accumulate ? 1.0f : 0.0f, dw, a->in, CUDA_R_32F);
}

int linear_bwd_weight_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
			   const void *dy, float *dw, float *db)
{
	GP_TRY(linear_bwd_weight_acc_cuda(ctx, a, x, dy, dw, 0));
	if (a->has_bias && db)
		return channel_sum_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, 0, a->n, a->out, 1, dy, db);
	return 0;
}

/* --- 1x1 convolutions as products ------------------------------------------------------ */
/* A 1x1, stride-1, unpadded, ungrouped convolution is a product with the K x C weights.
 * On 16-bit NHWC activations it is one over N*H*W rows (the linear layer's). On float
 * NCHW ones, image by image, in strided batches of column-major views (P = H*W):
 *   y[n]  (P x K) = x[n] (P x C) * W^T          -> gemm(N, N, m=P, n=K, k=C)
 *   dx[n] (P x C) = dy[n] (P x K) * W           -> gemm(N, T, m=P, n=C, k=K)
 * and the weight gradient, a sum over images, dW^T (C x K) = sum_n x[n]^T dy[n], in
 * one of two ways, whichever moves fewer bytes besides the product's own:
 *   per image into scratch (C*K floats an image), then summed by a product with ones;
 *   images to channel-major rows (swap_outer_cuda; (C+K)*P floats an image), then one
 *   product over all their pixels.
 * Both in batches of as many images as the scratch holds (conv1x1_gemm_scratch_floats
 * asks for batches within CONV1X1_SCRATCH_FLOATS), added up in order: the same bits
 * on every run. cuDNN's FP32 weight gradients for ResNet-50's took 1.2-4.9x these
 * (docs/log/perf-log.md, s24-2). */
#define CONV1X1_SCRATCH_FLOATS ((size_t)16 << 20)

static int nchw_f32(const struct cuda_ctx *ctx)
{
	return ctx->act_dtype == GP_F32 && !ctx->nhwc;
}

int conv1x1_gemm_ok(const struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	if (a->kh != 1 || a->kw != 1 || a->stride != 1 || a->pad != 0 || a->groups != 1)
		return 0;
	size_t px = (size_t)a->h_in * a->w_in;
	if (ctx->act_dtype != GP_F32 && ctx->nhwc)
		return (size_t)a->n * px <= (size_t)INT32_MAX;
	/* cuBLAS takes batches of up to 65535 */
	return nchw_f32(ctx) && a->n <= 65535 && px * (a->c_in > a->c_out ? a->c_in : a->c_out) <= (size_t)INT32_MAX &&
	       (size_t)a->c_in * a->c_out <= (size_t)INT32_MAX;
}

static struct linear_args rows_args(const struct conv2d_args *a)
{
	struct linear_args l = { .n = a->n * a->h_in * a->w_in, .in = a->c_in, .out = a->c_out, .has_bias = 0 };
	return l;
}

/* The weight gradient's way for a (1: through channel-major copies) and the scratch
 * floats it takes an image. */
static int wgrad_swapped(const struct conv2d_args *a, size_t *per_image)
{
	size_t c = (size_t)a->c_in, k = (size_t)a->c_out, p = (size_t)a->h_in * a->w_in;
	int swapped = c * k > (c + k) * p;
	*per_image = swapped ? (c + k) * p : c * k + 1; /* + 1: the ones */
	return swapped;
}

int conv1x1_gemm_scratch_floats(const struct cuda_ctx *ctx, const struct conv2d_args *a, size_t *floats)
{
	*floats = 0;
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (!nchw_f32(ctx))
		return 0;
	size_t per_image, fit;
	wgrad_swapped(a, &per_image);
	fit = CONV1X1_SCRATCH_FLOATS / per_image;
	*floats = per_image * (fit < 1 ? 1 : fit > (size_t)a->n ? (size_t)a->n : fit);
	return 0;
}

static int gemm_batched(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			const float *a, int lda, long long sa, const float *b, int ldb, long long sb, float beta,
			float *c, int ldc, long long sc, int batch)
{
	const float alpha = 1.0f;
	cublasComputeType_t ct = ctx->math == CUDA_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
	CUBLAS_TRY(cublasGemmStridedBatchedEx(ctx->cublas, ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, sa, b,
					      CUDA_R_32F, ldb, sb, &beta, c, CUDA_R_32F, ldc, sc, batch, ct,
					      CUBLAS_GEMM_DEFAULT));
	return 0;
}

int conv1x1_gemm_fwd_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *w,
			  void *y)
{
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (!nchw_f32(ctx)) {
		struct linear_args l = rows_args(a);
		return linear_fwd_cuda(ctx, &l, x, w, NULL, y);
	}
	int c = a->c_in, k = a->c_out, p = a->h_in * a->w_in;
	return gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, p, k, c, x, p, (long long)c * p, w, c, 0, 0.0f, y, p,
			    (long long)k * p, a->n);
}

int conv1x1_gemm_bwd_data_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *dy, const void *w,
			       void *dx, int accumulate)
{
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (!nchw_f32(ctx)) {
		struct linear_args l = rows_args(a);
		return linear_bwd_data_cuda(ctx, &l, dy, w, dx, accumulate);
	}
	int c = a->c_in, k = a->c_out, p = a->h_in * a->w_in;
	return gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_T, p, c, k, dy, p, (long long)k * p, w, c, 0,
			    accumulate ? 1.0f : 0.0f, dx, p, (long long)c * p, a->n);
}

int conv1x1_gemm_bwd_filter_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *dy,
				 float *dw, int accumulate, float *scratch, size_t scratch_floats)
{
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (!nchw_f32(ctx)) {
		struct linear_args l = rows_args(a);
		return linear_bwd_weight_acc_cuda(ctx, &l, x, dy, dw, accumulate);
	}
	/* batches of as many images as the scratch holds */
	size_t per_image;
	int c = a->c_in, k = a->c_out, p = a->h_in * a->w_in, swapped = wgrad_swapped(a, &per_image);
	size_t fit = scratch_floats / per_image;
	if (fit < 1)
		return gp_error(GP_EINVAL, "1x1 weight gradient: %zu floats of scratch, %zu an image needed",
				scratch_floats, per_image);
	int per = fit > (size_t)a->n ? a->n : (int)fit;
	while (swapped && per > 1 && (size_t)per * p > (size_t)INT32_MAX) /* int extents */
		per--;
	const float *xf = x, *dyf = dy;
	const float alpha = 1.0f;
	for (int i0 = 0; i0 < a->n; i0 += per) {
		int nb = a->n - i0 < per ? a->n - i0 : per;
		const float *xb = xf + (size_t)i0 * c * p, *dyb = dyf + (size_t)i0 * k * p;
		float beta = accumulate || i0 ? 1.0f : 0.0f;
		if (swapped) {
			float *xt = scratch, *dyt = scratch + (size_t)c * p * per;
			GP_TRY(swap_outer_cuda(ctx->stream, xt, xb, nb, c, p));
			GP_TRY(swap_outer_cuda(ctx->stream, dyt, dyb, nb, k, p));
			GP_TRY(gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c, k, nb * p, xt, nb * p, 0, dyt, nb * p, 0,
					    beta, dw, c, 0, 1));
			continue;
		}
		float *part = scratch, *ones = scratch + (size_t)c * k * per;
		GP_TRY(gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c, k, p, xb, p, (long long)c * p, dyb, p,
				    (long long)k * p, 0.0f, part, c, (long long)c * k, nb));
		GP_TRY(fill_cuda(ctx->stream, ones, (size_t)nb, 1.0f));
		CUBLAS_TRY(cublasSgemv(ctx->cublas, CUBLAS_OP_N, c * k, nb, &alpha, part, c * k, ones, 1, &beta, dw, 1));
	}
	return 0;
}
