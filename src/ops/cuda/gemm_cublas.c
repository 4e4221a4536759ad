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
