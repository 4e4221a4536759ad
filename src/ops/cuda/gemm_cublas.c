/* Linear layers through cuBLAS. cuBLAS is column-major and our arrays are row-major,
 * so each product is written for the transposes: a row-major M x K array is a
 * column-major K x M one. With x: n x in, W: out x in, y: n x out (row-major):
 *   y^T  = W * x^T        -> gemm(T, N, m=out, n=n,   k=in)
 *   dx^T = W^T * dy^T     -> gemm(N, N, m=in,  n=n,   k=out)
 *   dW^T = x^T * dy       -> gemm(N, T, m=in,  n=out, k=n)
 * Strict FP32 computes in CUBLAS_COMPUTE_32F with the handle in DEFAULT_MATH (no
 * TF32); TF32 asks for CUBLAS_COMPUTE_32F_FAST_TF32. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tuning.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

/* Under mixed precision (ctx->act_dtype 16-bit) x, W, y, dx and dy are 16-bit and the
 * products accumulate in float on tensor cores; the weight gradient comes out in float
 * directly (cuBLAS takes 16-bit inputs with a float result), into the master gradient. */
static cudaDataType_t act_type(const struct cuda_ctx *ctx)
{
	return ctx->act_dtype == GP_F16 ? CUDA_R_16F : ctx->act_dtype == GP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* --- 16-bit products through cuBLASLt's candidates -------------------------------------
 * cublasGemmEx runs its heuristic's first pick. For a product the conv plan times
 * (conv1x1_gemm_tune_cuda), cuBLASLt's candidates for the same workspace are timed
 * against that pick once per context, and the fastest by GEMM_LT_MARGIN or more is kept
 * with its descriptors; every later call of the same product (shape, transposes,
 * leading dimensions, types, beta zero or not) runs it. On ResNet-50's 1x1 products
 * the best candidate per shape took 0.96x the default's time, up to 0.85x on single
 * shapes (make gemm-probe, s28-2). Not under deterministic algorithms (a candidate's
 * reduction order is its own), not for float. */
#define GEMM_LT_CANDIDATES 8
#define GEMM_LT_MARGIN 0.02f
#define GEMM_LT_ALIGN 16

struct gemm_lt_key {
	int ta, tb, m, n, k, lda, ldb, ldc, beta1, a_type, c_type;
};

struct gemm_lt_pick {
	struct gemm_lt_key key;
	int lt; /* 0: cublasGemmEx's own pick was as fast */
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
};

struct gemm_lt_table {
	struct gemm_lt_pick *v;
	int n, cap;
};

static int lt_force; /* test hook: take cuBLASLt's fastest candidate whatever the margin */

void gemm_lt_force(int on)
{
	lt_force = on;
}

static struct gemm_lt_key lt_key(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
				 int ldc, float beta, cudaDataType_t t, cudaDataType_t c_type)
{
	struct gemm_lt_key key = { (int)ta, (int)tb, m, n, k, lda, ldb, ldc, beta != 0.0f, (int)t, (int)c_type };
	return key;
}

static const struct gemm_lt_pick *lt_find(const struct cuda_ctx *ctx, const struct gemm_lt_key *key)
{
	const struct gemm_lt_table *tb = ctx->gemm_lt;
	for (int i = 0; tb && i < tb->n; i++)
		if (!memcmp(&tb->v[i].key, key, sizeof(*key)))
			return &tb->v[i];
	return NULL;
}

static void lt_release(struct gemm_lt_pick *p)
{
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->lc)
		cublasLtMatrixLayoutDestroy(p->lc);
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	p->la = p->lb = p->lc = NULL;
	p->op = NULL;
}

void gemm_lt_free(struct cuda_ctx *ctx)
{
	struct gemm_lt_table *tb = ctx->gemm_lt;
	if (!tb)
		return;
	for (int i = 0; i < tb->n; i++)
		lt_release(&tb->v[i]);
	free(tb->v);
	free(tb);
	ctx->gemm_lt = NULL;
}

int gemm_lt_picks(const struct cuda_ctx *ctx, int *taken)
{
	const struct gemm_lt_table *tb = ctx->gemm_lt;
	*taken = 0;
	for (int i = 0; tb && i < tb->n; i++)
		*taken += tb->v[i].lt;
	return tb ? tb->n : 0;
}

static int aligned_all(const void *a, const void *b, const void *c)
{
	return (uintptr_t)a % GEMM_LT_ALIGN == 0 && (uintptr_t)b % GEMM_LT_ALIGN == 0 &&
	       (uintptr_t)c % GEMM_LT_ALIGN == 0;
}

/* The workspace cuBLASLt's candidates are asked for and run with: cuBLAS's. */
static size_t lt_ws_bytes(const struct cuda_ctx *ctx)
{
	return ctx->blas_ws ? ctx->blas_ws_bytes : 0;
}

static int lt_run(struct cuda_ctx *ctx, const struct gemm_lt_pick *p, const void *a, const void *b, float beta,
		  void *c)
{
	const float alpha = 1.0f;
	CUBLAS_TRY(cublasLtMatmul(ctx->lt, p->op, &alpha, a, p->la, b, p->lb, &beta, c, p->lc, c, p->lc, &p->algo,
				  ctx->blas_ws, lt_ws_bytes(ctx), ctx->stream));
	return 0;
}

static int gemm_ex(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
		   const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc, cudaDataType_t c_type)
{
	const float alpha = 1.0f;
	cudaDataType_t t = act_type(ctx);
	cublasComputeType_t ct = ctx->math == CUDA_MATH_TF32 && t == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32
										: CUBLAS_COMPUTE_32F;
	CUBLAS_TRY(cublasGemmEx(ctx->cublas, ta, tb, m, n, k, &alpha, a, t, lda, b, t, ldb, &beta, c,
				c_type, ldc, ct, CUBLAS_GEMM_DEFAULT));
	return 0;
}

static int gemm(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
		int k, const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
		cudaDataType_t c_type)
{
	cudaDataType_t t = act_type(ctx);
	/* a context passes from net to net: one with deterministic algorithms keeps
	 * cublasGemmEx's pick even where another net's plan timed the product */
	if (t != CUDA_R_32F && ctx->gemm_lt && !ctx->deterministic) {
		struct gemm_lt_key key = lt_key(ta, tb, m, n, k, lda, ldb, ldc, beta, t, c_type);
		const struct gemm_lt_pick *p = lt_find(ctx, &key);
		if (p && p->lt && aligned_all(a, b, c))
			return lt_run(ctx, p, a, b, beta, c);
	}
	return gemm_ex(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, c_type);
}

/* Mean ms of a run over the best of 3 rounds of 3, after one; lt: the candidate, or
 * NULL for cublasGemmEx. -1 when a run fails (that candidate is not taken). */
static float lt_time(struct cuda_ctx *ctx, const struct gemm_lt_pick *lt, cublasOperation_t ta,
		     cublasOperation_t tb, int m, int n, int k, const void *a, int lda, const void *b, int ldb,
		     float beta, void *c, int ldc, cudaDataType_t c_type, cudaEvent_t e0, cudaEvent_t e1)
{
	float best = -1;
	for (int r = 0; r < 4; r++) {
		if (r && cudaEventRecord(e0, ctx->stream) != cudaSuccess)
			return -1;
		for (int i = 0; i < (r ? 3 : 1); i++) {
			int rc = lt ? lt_run(ctx, lt, a, b, beta, c)
				    : gemm_ex(ctx, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, c_type);
			if (rc < 0) {
				gp_error_clear();
				return -1;
			}
		}
		float ms = 0;
		if (r && (cudaEventRecord(e1, ctx->stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
			  cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess))
			return -1;
		if (r && (best < 0 || ms / 3 < best))
			best = ms / 3;
	}
	return best;
}

static int lt_describe(struct gemm_lt_pick *p, cudaDataType_t t)
{
	const struct gemm_lt_key *k = &p->key;
	cublasOperation_t ta = (cublasOperation_t)k->ta, tb = (cublasOperation_t)k->tb;
	CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
	CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
	CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, t, ta == CUBLAS_OP_N ? k->m : k->k, ta == CUBLAS_OP_N ? k->k : k->m,
					      k->lda));
	CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, t, tb == CUBLAS_OP_N ? k->k : k->n, tb == CUBLAS_OP_N ? k->n : k->k,
					      k->ldb));
	CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lc, (cudaDataType_t)k->c_type, k->m, k->n, k->ldc));
	return 0;
}

/* Time the product's cuBLASLt candidates against cublasGemmEx on the caller's buffers
 * (c is overwritten) and keep the pick (once per product and context). */
static int gemm_tune(struct cuda_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
		     const void *a, int lda, const void *b, int ldb, float beta, void *c, int ldc,
		     cudaDataType_t c_type)
{
	cudaDataType_t t = act_type(ctx);
	if (t == CUDA_R_32F || ctx->deterministic || !aligned_all(a, b, c))
		return 0;
	struct gemm_lt_key key = lt_key(ta, tb, m, n, k, lda, ldb, ldc, beta, t, c_type);
	if (lt_find(ctx, &key))
		return 0;
	struct gemm_lt_table *tbl = ctx->gemm_lt;
	if (!tbl && !(tbl = ctx->gemm_lt = calloc(1, sizeof(*tbl))))
		return gp_error(GP_ENOMEM, "cannot allocate the product picks");
	if (tbl->n == tbl->cap) {
		int cap = tbl->cap ? 2 * tbl->cap : 32;
		struct gemm_lt_pick *v = realloc(tbl->v, (size_t)cap * sizeof(*v));
		if (!v)
			return gp_error(GP_ENOMEM, "cannot allocate the product picks");
		tbl->v = v;
		tbl->cap = cap;
	}
	struct gemm_lt_pick cand = { .key = key };
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res[GEMM_LT_CANDIDATES];
	cudaEvent_t e0 = NULL, e1 = NULL;
	int got = 0, best = -1, rc = lt_describe(&cand, t);
	uint32_t align = GEMM_LT_ALIGN;
	size_t ws = lt_ws_bytes(ctx);
	if (rc == 0)
		rc = CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	if (rc == 0)
		rc = CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
									 sizeof(ws)));
	for (int at = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; rc == 0 && at <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES;
	     at++)
		rc = CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)at,
									 &align, sizeof(align)));
	if (rc == 0 && cublasLtMatmulAlgoGetHeuristic(ctx->lt, cand.op, cand.la, cand.lb, cand.lc, cand.lc, pref,
						      GEMM_LT_CANDIDATES, res, &got) != CUBLAS_STATUS_SUCCESS)
		got = 0;
	if (rc == 0)
		rc = CUDA_CHECK(cudaEventCreate(&e0));
	if (rc == 0)
		rc = CUDA_CHECK(cudaEventCreate(&e1));
	float def_ms = -1, best_ms = -1;
	if (rc == 0)
		def_ms = lt_time(ctx, NULL, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, c_type, e0, e1);
	for (int i = 0; rc == 0 && i < got; i++) {
		if (res[i].state != CUBLAS_STATUS_SUCCESS)
			continue;
		cand.algo = res[i].algo;
		float ms = lt_time(ctx, &cand, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, c_type, e0, e1);
		if (ms > 0 && (best < 0 || ms < best_ms)) {
			best = i;
			best_ms = ms;
		}
	}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (rc < 0) {
		lt_release(&cand);
		return rc;
	}
	cand.lt = best >= 0 && (lt_force || (def_ms > 0 && best_ms < def_ms * (1.0f - GEMM_LT_MARGIN)));
	if (cand.lt)
		cand.algo = res[best].algo;
	else
		lt_release(&cand);
	if (tuning_get()->conv_log)
		fprintf(stderr, "gemm-pick %c%c m %d n %d k %d beta %d: GemmEx %.4f ms, cuBLASLt best %.4f (candidate %d of "
			"%d): %s\n", ta == CUBLAS_OP_T ? 'T' : 'N', tb == CUBLAS_OP_T ? 'T' : 'N', m, n, k, beta != 0.0f,
			(double)def_ms, (double)best_ms, best, got, cand.lt ? "cuBLASLt" : "GemmEx");
	tbl->v[tbl->n++] = cand;
	return 0;
}

/* The linear layer's product of direction dir (0 forward, 1 backward data, 2 weight
 * gradient into float; the header's transposes) on operands pa, pb into c: run, or
 * with tune set timed through cuBLASLt's candidates and its pick kept (gemm_tune). */
static int linear_gemm(struct cuda_ctx *ctx, const struct linear_args *a, int dir, const void *pa, const void *pb,
		       float beta, void *c, int tune)
{
	cublasOperation_t ta = dir == 0 ? CUBLAS_OP_T : CUBLAS_OP_N, tb = dir == 2 ? CUBLAS_OP_T : CUBLAS_OP_N;
	int m = dir == 0 ? a->out : a->in, n = dir == 2 ? a->out : a->n, k = dir == 0 ? a->in : dir == 1 ? a->out : a->n;
	int ldb = dir == 0 ? a->in : a->out, ldc = dir == 0 ? a->out : a->in;
	cudaDataType_t ct = dir == 2 ? CUDA_R_32F : act_type(ctx);
	return tune ? gemm_tune(ctx, ta, tb, m, n, k, pa, a->in, pb, ldb, beta, c, ldc, ct)
		    : gemm(ctx, ta, tb, m, n, k, pa, a->in, pb, ldb, beta, c, ldc, ct);
}

int linear_fwd_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
		    const void *w, const float *b, void *y)
{
	GP_TRY(linear_gemm(ctx, a, 0, w, x, 0.0f, y, 0));
	if (a->has_bias && b)
		return bias_add_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, 0, a->n, a->out, 1, b, y);
	return 0;
}

int linear_bwd_data_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *dy,
			 const void *w, void *dx, int accumulate)
{
	return linear_gemm(ctx, a, 1, w, dy, accumulate ? 1.0f : 0.0f, dx, 0);
}

int linear_bwd_weight_acc_cuda(struct cuda_ctx *ctx, const struct linear_args *a, const void *x,
			       const void *dy, float *dw, int accumulate)
{
	return linear_gemm(ctx, a, 2, x, dy, accumulate ? 1.0f : 0.0f, dw, 0);
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
/* A 1x1, unpadded, ungrouped convolution is a product with the K x C weights. At
 * stride 1, on 16-bit NHWC activations it is one over N*H*W rows (the linear layer's);
 * on float NCHW ones, image by image, in strided batches of column-major views
 * (P = H*W):
 *   y[n]  (P x K) = x[n] (P x C) * W^T          -> gemm(N, N, m=P, n=K, k=C)
 *   dx[n] (P x C) = dy[n] (P x K) * W           -> gemm(N, T, m=P, n=C, k=K)
 * and the weight gradient, a sum over images, dW^T (C x K) = sum_n x[n]^T dy[n], in
 * one of two ways, whichever moves fewer bytes besides the product's own:
 *   per image into scratch (C*K floats an image), then summed by a product with ones;
 *   images to channel-major rows (swap_outer_cuda; (C+K)*P floats an image), then one
 *   product over all their pixels.
 * At stride s the same products run on every s-th pixel, copied into scratch
 * (subsample_cuda): the forward and the weight gradient gather x's, backward data
 * computes them and scatters them into dx (zeros between, or added to dx).
 * All in batches of as many images as the scratch holds (conv1x1_gemm_scratch_bytes
 * asks for batches within CONV1X1_SCRATCH_BYTES), added up in order: the same bits on
 * every run. cuDNN's FP32 weight gradients for ResNet-50's took 1.2-4.9x these, its
 * 16-bit NHWC directions 1.6-7.3x (docs/log/perf-log.md, s24-2, s24-4). */
#define CONV1X1_SCRATCH_BYTES ((size_t)64 << 20)
#define SCRATCH_ALIGN ((size_t)256)

static int nchw_f32(const struct cuda_ctx *ctx)
{
	return ctx->act_dtype == GP_F32 && !ctx->nhwc;
}

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

int conv1x1_gemm_ok(const struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	if (a->kh != 1 || a->kw != 1 || a->stride < 1 || a->pad != 0 || a->groups != 1 ||
	    a->h_out != (a->h_in - 1) / a->stride + 1 || a->w_out != (a->w_in - 1) / a->stride + 1)
		return 0;
	size_t px = (size_t)a->h_out * a->w_out, big = a->c_in > a->c_out ? a->c_in : a->c_out;
	if (ctx->act_dtype != GP_F32 && ctx->nhwc)
		return (size_t)a->n * px <= (size_t)INT32_MAX;
	/* cuBLAS takes batches of up to 65535 */
	return nchw_f32(ctx) && a->n <= 65535 && px * big <= (size_t)INT32_MAX &&
	       (size_t)a->c_in * a->c_out <= (size_t)INT32_MAX;
}

/* The stride-1 convolution of a's subsampled input, over n images. */
static struct conv2d_args dense_args(const struct conv2d_args *a, int n)
{
	struct conv2d_args d = *a;
	d.n = n;
	d.h_in = a->h_out;
	d.w_in = a->w_out;
	d.stride = 1;
	return d;
}

static struct linear_args rows_args(const struct conv2d_args *a)
{
	struct linear_args l = { .n = a->n * a->h_in * a->w_in, .in = a->c_in, .out = a->c_out, .has_bias = 0 };
	return l;
}

/* Stride 1, float NCHW: the weight gradient's way (1: through channel-major copies) and
 * the scratch bytes it takes an image. */
static int wgrad_swapped(const struct conv2d_args *a, size_t *per_image)
{
	size_t c = (size_t)a->c_in, k = (size_t)a->c_out, p = (size_t)a->h_in * a->w_in;
	int swapped = c * k > (c + k) * p;
	*per_image = (swapped ? (c + k) * p : c * k + 1) * sizeof(float); /* + 1: the ones */
	return swapped;
}

/* Scratch bytes an image of direction dir: the subsampled copy (stride > 1) and, for
 * the float NCHW weight gradient, the products' own. */
static size_t per_image_bytes(const struct cuda_ctx *ctx, const struct conv2d_args *a, int dir)
{
	size_t b = a->stride > 1 ? (size_t)a->c_in * a->h_out * a->w_out * act_size(ctx) : 0, w = 0;
	if (dir == 2 && nchw_f32(ctx)) {
		struct conv2d_args d = dense_args(a, 1);
		wgrad_swapped(&d, &w);
	}
	return b + w;
}

/* Images a batch of direction dir takes within bytes (0: not one). */
static int batch_images(const struct cuda_ctx *ctx, const struct conv2d_args *a, int dir, size_t bytes)
{
	size_t per = per_image_bytes(ctx, a, dir);
	if (!per)
		return a->n;
	size_t fit = bytes > SCRATCH_ALIGN ? (bytes - SCRATCH_ALIGN) / per : 0;
	return fit > (size_t)a->n ? a->n : (int)fit;
}

int conv1x1_gemm_scratch_bytes(const struct cuda_ctx *ctx, const struct conv2d_args *a, int dir, size_t *bytes)
{
	*bytes = 0;
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	size_t per = per_image_bytes(ctx, a, dir);
	if (!per)
		return 0;
	size_t fit = CONV1X1_SCRATCH_BYTES / per;
	*bytes = per * (fit < 1 ? 1 : fit > (size_t)a->n ? (size_t)a->n : fit) + SCRATCH_ALIGN;
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

/* Stride 1 (a is dense). */
static int dense_fwd(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *w, void *y)
{
	if (!nchw_f32(ctx)) {
		struct linear_args l = rows_args(a);
		return linear_fwd_cuda(ctx, &l, x, w, NULL, y);
	}
	int c = a->c_in, k = a->c_out, p = a->h_in * a->w_in;
	return gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, p, k, c, x, p, (long long)c * p, w, c, 0, 0.0f, y, p,
			    (long long)k * p, a->n);
}

static int dense_bwd_data(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *dy, const void *w,
			  void *dx, int accumulate)
{
	if (!nchw_f32(ctx)) {
		struct linear_args l = rows_args(a);
		return linear_bwd_data_cuda(ctx, &l, dy, w, dx, accumulate);
	}
	int c = a->c_in, k = a->c_out, p = a->h_in * a->w_in;
	return gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_T, p, c, k, dy, p, (long long)k * p, w, c, 0,
			    accumulate ? 1.0f : 0.0f, dx, p, (long long)c * p, a->n);
}

/* Float NCHW: all of a's images at once (the caller sized scratch for them). */
static int dense_bwd_filter_nchw(struct cuda_ctx *ctx, const struct conv2d_args *a, const float *x,
				 const float *dy, float *dw, int accumulate, float *scratch)
{
	size_t per_image;
	int c = a->c_in, k = a->c_out, p = a->h_in * a->w_in, nb = a->n;
	float beta = accumulate ? 1.0f : 0.0f;
	const float alpha = 1.0f;
	if (wgrad_swapped(a, &per_image)) {
		float *xt = scratch, *dyt = scratch + (size_t)c * p * nb;
		GP_TRY(swap_outer_cuda(ctx->stream, xt, x, nb, c, p));
		GP_TRY(swap_outer_cuda(ctx->stream, dyt, dy, nb, k, p));
		return gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c, k, nb * p, xt, nb * p, 0, dyt, nb * p, 0, beta,
				    dw, c, 0, 1);
	}
	float *part = scratch, *ones = scratch + (size_t)c * k * nb;
	GP_TRY(gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c, k, p, x, p, (long long)c * p, dy, p, (long long)k * p,
			    0.0f, part, c, (long long)c * k, nb));
	GP_TRY(fill_cuda(ctx->stream, ones, (size_t)nb, 1.0f));
	CUBLAS_TRY(cublasSgemv(ctx->cublas, CUBLAS_OP_N, c * k, nb, &alpha, part, c * k, ones, 1, &beta, dw, 1));
	return 0;
}

/* The subsampled copy's planes, pixel width and bytes for images of a. */
static void sub_layout(const struct cuda_ctx *ctx, const struct conv2d_args *a, int images, int *planes, int *u,
		       size_t *bytes)
{
	*planes = ctx->nhwc ? images : images * a->c_in;
	*u = ctx->nhwc ? a->c_in : 1;
	*bytes = round_up((size_t)images * a->c_in * a->h_out * a->w_out * act_size(ctx), SCRATCH_ALIGN);
}

static int scratch_short(const struct cuda_ctx *ctx, const struct conv2d_args *a, int dir, size_t bytes)
{
	return gp_error(GP_EINVAL, "1x1 convolution products: %zu bytes of scratch, %zu an image needed", bytes,
			per_image_bytes(ctx, a, dir) + SCRATCH_ALIGN);
}

#define AT(p, off) ((void *)((char *)(p) + (size_t)(off) * act_size(ctx)))
#define AT_C(p, off) ((const void *)((const char *)(p) + (size_t)(off) * act_size(ctx)))

int conv1x1_gemm_tune_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, int dir, void *x, void *w, void *y,
			   float *dw)
{
	if (!conv1x1_gemm_ok(ctx, a) || a->stride != 1 || ctx->act_dtype == GP_F32)
		return 0;
	struct linear_args l = rows_args(a);
	if (dir == 0)
		return linear_gemm(ctx, &l, 0, w, x, 0.0f, y, 1);
	if (dir == 1) { /* alone, and adding into dx (a block input's gradient) */
		GP_TRY(linear_gemm(ctx, &l, 1, w, y, 0.0f, x, 1));
		return linear_gemm(ctx, &l, 1, w, y, 1.0f, x, 1);
	}
	return dw ? linear_gemm(ctx, &l, 2, x, y, 0.0f, dw, 1) : 0;
}

int conv1x1_gemm_fwd_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *w, void *y,
			  void *scratch, size_t scratch_bytes)
{
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (a->stride == 1)
		return dense_fwd(ctx, a, x, w, y);
	int per = batch_images(ctx, a, 0, scratch_bytes);
	if (per < 1)
		return scratch_short(ctx, a, 0, scratch_bytes);
	size_t in_img = (size_t)a->c_in * a->h_in * a->w_in, out_img = (size_t)a->c_out * a->h_out * a->w_out;
	for (int i0 = 0; i0 < a->n; i0 += per) {
		int nb = a->n - i0 < per ? a->n - i0 : per, planes, u;
		size_t sub_bytes;
		sub_layout(ctx, a, nb, &planes, &u, &sub_bytes);
		struct conv2d_args d = dense_args(a, nb);
		GP_TRY(subsample_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, planes, a->h_in, a->w_in, u, a->stride,
				      SUBSAMPLE_GATHER, AT(x, i0 * in_img), scratch));
		GP_TRY(dense_fwd(ctx, &d, scratch, w, AT(y, i0 * out_img)));
	}
	return 0;
}

int conv1x1_gemm_bwd_data_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *dy, const void *w,
			       void *dx, int accumulate, void *scratch, size_t scratch_bytes)
{
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (a->stride == 1)
		return dense_bwd_data(ctx, a, dy, w, dx, accumulate);
	int per = batch_images(ctx, a, 1, scratch_bytes);
	if (per < 1)
		return scratch_short(ctx, a, 1, scratch_bytes);
	size_t in_img = (size_t)a->c_in * a->h_in * a->w_in, out_img = (size_t)a->c_out * a->h_out * a->w_out;
	if (!accumulate) /* the pixels no window reads get no gradient */
		CUDA_TRY(cudaMemsetAsync(dx, 0, (size_t)a->n * in_img * act_size(ctx), ctx->stream));
	for (int i0 = 0; i0 < a->n; i0 += per) {
		int nb = a->n - i0 < per ? a->n - i0 : per, planes, u;
		size_t sub_bytes;
		sub_layout(ctx, a, nb, &planes, &u, &sub_bytes);
		struct conv2d_args d = dense_args(a, nb);
		GP_TRY(dense_bwd_data(ctx, &d, AT_C(dy, i0 * out_img), w, scratch, 0));
		GP_TRY(subsample_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, planes, a->h_in, a->w_in, u, a->stride,
				      accumulate ? SUBSAMPLE_ADD : SUBSAMPLE_SCATTER, AT(dx, i0 * in_img), scratch));
	}
	return 0;
}

int conv1x1_gemm_bwd_filter_cuda(struct cuda_ctx *ctx, const struct conv2d_args *a, const void *x, const void *dy,
				 float *dw, int accumulate, void *scratch, size_t scratch_bytes)
{
	if (!conv1x1_gemm_ok(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "not a 1x1 convolution cuBLAS takes");
	if (a->stride == 1 && !nchw_f32(ctx)) {
		struct linear_args l = rows_args(a);
		return linear_bwd_weight_acc_cuda(ctx, &l, x, dy, dw, accumulate);
	}
	int per = batch_images(ctx, a, 2, scratch_bytes);
	if (per < 1)
		return scratch_short(ctx, a, 2, scratch_bytes);
	size_t in_img = (size_t)a->c_in * a->h_in * a->w_in, out_img = (size_t)a->c_out * a->h_out * a->w_out;
	for (int i0 = 0; i0 < a->n; i0 += per) {
		int nb = a->n - i0 < per ? a->n - i0 : per, planes, u, acc = accumulate || i0;
		size_t sub_bytes = 0;
		const void *xs = AT_C(x, i0 * in_img);
		char *rest = scratch;
		struct conv2d_args d = dense_args(a, nb);
		if (a->stride > 1) {
			sub_layout(ctx, a, nb, &planes, &u, &sub_bytes);
			GP_TRY(subsample_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, planes, a->h_in, a->w_in, u,
					      a->stride, SUBSAMPLE_GATHER, (void *)xs, scratch));
			xs = scratch;
			rest += sub_bytes;
		}
		if (nchw_f32(ctx)) {
			GP_TRY(dense_bwd_filter_nchw(ctx, &d, xs, (const float *)AT_C(dy, i0 * out_img), dw, acc,
						     (float *)rest));
		} else {
			struct linear_args l = rows_args(&d);
			GP_TRY(linear_bwd_weight_acc_cuda(ctx, &l, xs, AT_C(dy, i0 * out_img), dw, acc));
		}
	}
	return 0;
}
