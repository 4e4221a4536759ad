/* Convolutions through cuDNN's descriptor API. A plan per shape and math mode holds
 * the descriptors and the algorithms that cuDNN measured fastest for that shape, found
 * once on scratch buffers; later calls only look the plan up.
 *
 * The plans are one cache per process, keyed by device (and by the context's type,
 * layout, math mode and algorithm policy), not one per context: every net on a device
 * then runs a shape with the same algorithms, so two nets compared bit for bit (the
 * tests) or tried one after the other (maxbatch) agree, and a shape is measured once.
 * A mutex guards it: nets on other threads plan and look up concurrently. Plans are
 * freed only by conv2d_plans_clear, so a pointer found stays valid. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tuning.h"
#include "ops/cuda/conv_plan.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

static const float one = 1.0f, zero = 0.0f;

#define CONV_PLAN_BUCKETS 256
static struct conv_plan *plan_cache[CONV_PLAN_BUCKETS];
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

/* The context's algorithm policy as one number of the key. */
static int ctx_policy(const struct cuda_ctx *ctx)
{
	return (ctx->fp32_direct_only != 0) | (ctx->deterministic != 0) << 1 | (ctx->heuristic_algos != 0) << 2;
}

static struct conv2d_args plan_key(const struct conv2d_args *a)
{
	struct conv2d_args k = *a;
	k.has_bias = 0;
	return k;
}

/* FNV-1a over the key's bytes (a struct of ints, so no padding). */
static unsigned plan_hash(const struct conv2d_args *k, const struct cuda_ctx *ctx)
{
	const unsigned char *p = (const unsigned char *)k;
	uint32_t h = 2166136261u ^ (uint32_t)ctx->math ^ ((uint32_t)ctx->act_dtype << 4) ^ ((uint32_t)ctx->nhwc << 8) ^
		     ((uint32_t)ctx_policy(ctx) << 12) ^ ((uint32_t)ctx->device << 16);
	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ p[i]) * 16777619u;
	return h % CONV_PLAN_BUCKETS;
}

/* The cached plan of key in ctx's mode, or NULL; plan_lock held. */
static struct conv_plan *plan_lookup(const struct cuda_ctx *ctx, const struct conv2d_args *key, unsigned b)
{
	struct conv_plan *p = plan_cache[b];
	while (p && !(p->device == ctx->device && p->math == ctx->math && p->dtype == ctx->act_dtype &&
		      p->nhwc == ctx->nhwc && p->policy == ctx_policy(ctx) && !memcmp(&p->a, key, sizeof(*key))))
		p = p->next;
	return p;
}

static void plan_free(struct conv_plan *p)
{
	if (p->bwd_filter_desc)
		cudnnDestroyConvolutionDescriptor(p->bwd_filter_desc);
	if (p->bwd_data_desc)
		cudnnDestroyConvolutionDescriptor(p->bwd_data_desc);
	if (p->fwd_desc)
		cudnnDestroyConvolutionDescriptor(p->fwd_desc);
	if (p->w_desc)
		cudnnDestroyFilterDescriptor(p->w_desc);
	if (p->y_desc)
		cudnnDestroyTensorDescriptor(p->y_desc);
	if (p->x_desc)
		cudnnDestroyTensorDescriptor(p->x_desc);
	free(p);
}

void conv2d_plans_clear(const struct cuda_ctx *ctx)
{
	pthread_mutex_lock(&plan_lock);
	for (int b = 0; b < CONV_PLAN_BUCKETS; b++) {
		for (struct conv_plan **pp = &plan_cache[b]; *pp;) {
			struct conv_plan *p = *pp;
			if (p->device != ctx->device) {
				pp = &p->next;
				continue;
			}
			*pp = p->next;
			plan_free(p);
		}
	}
	pthread_mutex_unlock(&plan_lock);
}

int conv2d_plans_count(const struct cuda_ctx *ctx)
{
	int n = 0;
	pthread_mutex_lock(&plan_lock);
	for (int b = 0; b < CONV_PLAN_BUCKETS; b++)
		for (const struct conv_plan *p = plan_cache[b]; p; p = p->next)
			n += p->device == ctx->device;
	pthread_mutex_unlock(&plan_lock);
	return n;
}

/* cuDNN type of the context's activations. */
static cudnnDataType_t act_cudnn_type(int dtype)
{
	return dtype == GP_F16 ? CUDNN_DATA_HALF : dtype == GP_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* The compute (accumulation) type is float in every mode, as under PyTorch's autocast. */
static int conv_desc_make(cudnnConvolutionDescriptor_t *d, const struct conv2d_args *a,
			  cudnnMathType_t math)
{
	CUDNN_TRY(cudnnCreateConvolutionDescriptor(d));
	CUDNN_TRY(cudnnSetConvolution2dDescriptor(*d, a->pad, a->pad, a->stride, a->stride, 1, 1,
						  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	CUDNN_TRY(cudnnSetConvolutionGroupCount(*d, a->groups));
	CUDNN_TRY(cudnnSetConvolutionMathType(*d, math));
	return 0;
}

static int plan_describe(struct conv_plan *p, const struct conv2d_args *a, int math)
{
	/* TF32: DEFAULT_MATH lets cuDNN use tensor cores for float data (TF32) on
	 * Ampere and later; FMA_MATH keeps to FMA kernels, i.e. strict FP32. 16-bit data
	 * takes tensor cores. */
	cudnnMathType_t mt = p->dtype != GP_F32 ? CUDNN_TENSOR_OP_MATH
			     : math == CUDA_MATH_TF32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
	cudnnDataType_t dt = act_cudnn_type(p->dtype);
	cudnnTensorFormat_t fmt = p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
	int n, c, h, w;

	CUDNN_TRY(cudnnCreateTensorDescriptor(&p->x_desc));
	CUDNN_TRY(cudnnSetTensor4dDescriptor(p->x_desc, fmt, dt, a->n, a->c_in, a->h_in, a->w_in));
	CUDNN_TRY(cudnnCreateTensorDescriptor(&p->y_desc));
	CUDNN_TRY(cudnnSetTensor4dDescriptor(p->y_desc, fmt, dt, a->n, a->c_out, a->h_out, a->w_out));
	CUDNN_TRY(cudnnCreateFilterDescriptor(&p->w_desc));
	CUDNN_TRY(cudnnSetFilter4dDescriptor(p->w_desc, dt, fmt, a->c_out, a->c_in / a->groups,
					     a->kh, a->kw));
	GP_TRY(conv_desc_make(&p->fwd_desc, a, mt));
	GP_TRY(conv_desc_make(&p->bwd_data_desc, a, mt));
	GP_TRY(conv_desc_make(&p->bwd_filter_desc, a, mt));
	CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(p->fwd_desc, p->x_desc, p->w_desc,
							&n, &c, &h, &w));
	if (n != a->n || c != a->c_out || h != a->h_out || w != a->w_out)
		return gp_error(GP_EINVAL, "conv output %dx%dx%dx%d, cuDNN computes %dx%dx%dx%d",
				a->n, a->c_out, a->h_out, a->w_out, n, c, h, w);
	return 0;
}

/* Algorithms that sum products directly. With ctx->fp32_direct_only the
 * transform-based ones (FFT, Winograd) are left out of FP32: they round differently.
 * By default they compete, as under PyTorch's cudnn.benchmark; tensor cores stay off
 * in FP32 either way (FMA math). */
static int fwd_algo_strict(cudnnConvolutionFwdAlgo_t algo)
{
	return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
	       algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
	       algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

static int bwd_data_algo_strict(cudnnConvolutionBwdDataAlgo_t algo)
{
	return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

static int bwd_filter_algo_strict(cudnnConvolutionBwdFilterAlgo_t algo)
{
	return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
	       algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
	       algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* Whether a measured result may be used: it ran, fits the workspace, and meets the
 * context's precision and determinism demands. Results come sorted by time. */
static int result_usable(const struct cuda_ctx *ctx, cudnnStatus_t status, size_t memory,
			 size_t ws_bytes, cudnnDeterminism_t det, int strict_ok)
{
	return status == CUDNN_STATUS_SUCCESS && memory <= ws_bytes &&
	       (ctx->math == CUDA_MATH_TF32 || ctx->act_dtype != GP_F32 || !ctx->fp32_direct_only ||
		strict_ok) &&
	       (!ctx->deterministic || det == CUDNN_DETERMINISTIC);
}

/* PICK_RESULT: among usable results (sorted by time, the fastest first), the one
 * needing the least workspace within WS_SLACK of the fastest (-1 if none): the
 * workspace is shared and sized by the hungriest convolution, so a 1% slower algorithm
 * that needs a fraction of the memory is the better trade (the budget is large so that
 * the fast ones compete at all). */
#define WS_SLACK 1.02f
#define PICK_RESULT(res, n, ws_bytes, strict_fn, out)                                          \
	do {                                                                                   \
		int best_ = -1;                                                                \
		(out) = -1;                                                                    \
		for (int k_ = 0; k_ < (n); k_++) {                                             \
			if (!result_usable(ctx, res[k_].status, res[k_].memory, ws_bytes,      \
					   res[k_].determinism, strict_fn(res[k_].algo)))      \
				continue;                                                      \
			if (best_ < 0)                                                         \
				best_ = (out) = k_;                                            \
			else if (res[k_].time <= res[best_].time * WS_SLACK &&                 \
				 res[k_].memory < res[out].memory)                             \
				(out) = k_;                                                    \
		}                                                                              \
	} while (0)

/* In strict mode the descriptor stays FMA_MATH whatever a result reports, so no
 * tensor-core path can slip in; in TF32 mode it takes the measured math type. */
static int desc_take_math(const struct cuda_ctx *ctx, cudnnConvolutionDescriptor_t d,
			  cudnnMathType_t measured)
{
	if (ctx->math == CUDA_MATH_TF32 || ctx->act_dtype != GP_F32)
		CUDNN_TRY(cudnnSetConvolutionMathType(d, measured));
	return 0;
}

static int conv_desc_text(char *buf, size_t cap, const struct conv2d_args *a)
{
	return snprintf(buf, cap, "conv %dx%dx%dx%d -> %d ch, %dx%d s%d p%d g%d", a->n, a->c_in,
			a->h_in, a->w_in, a->c_out, a->kh, a->kw, a->stride, a->pad, a->groups);
}

static int no_algo(const char *dir, const struct conv2d_args *a, int returned, size_t ws_bytes)
{
	char what[128];
	conv_desc_text(what, sizeof(what), a);
	return gp_error(GP_EUNSUPPORTED, "no usable cuDNN %s algorithm for %s (%d measured, %.1f MiB workspace)",
			dir, what, returned, ws_bytes / (1024.0 * 1024.0));
}

/* Scratch for measuring: the largest workspace up to the limit that can be had. */
static int find_workspace_alloc(struct cuda_ctx *ctx, size_t want, void **ws, size_t *ws_bytes)
{
	size_t bytes = want;
	for (;;) {
		int rc = cuda_alloc(ctx, ws, bytes, MEM_WORKSPACE);
		if (rc == 0 || rc != GP_EDEVOOM || bytes < ((size_t)1 << 20)) {
			*ws_bytes = rc == 0 ? bytes : 0;
			return rc == GP_EDEVOOM ? 0 : rc;
		}
		bytes /= 2;
	}
}

/* The workspace the timing runs need: the most any algorithm of the three directions asks
 * for within the budget, with a margin (a size query answers for the descriptor's math
 * type; the timing runs may try the other), never above the budget. Allocating the whole
 * budget instead made the set-up, not training, the process's peak for small nets. */
static size_t find_workspace_need(struct cuda_ctx *ctx, const struct conv_plan *p)
{
	size_t limit = ctx->workspace_limit_bytes, most = 0, sz;
	for (int algo = 0; algo < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; algo++)
		if (cudnnGetConvolutionForwardWorkspaceSize(ctx->cudnn, p->x_desc, p->w_desc, p->fwd_desc, p->y_desc,
							    (cudnnConvolutionFwdAlgo_t)algo, &sz) == CUDNN_STATUS_SUCCESS &&
		    sz <= limit && sz > most)
			most = sz;
	for (int algo = 0; algo < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; algo++)
		if (cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->cudnn, p->w_desc, p->y_desc, p->bwd_data_desc,
								 p->x_desc, (cudnnConvolutionBwdDataAlgo_t)algo,
								 &sz) == CUDNN_STATUS_SUCCESS &&
		    sz <= limit && sz > most)
			most = sz;
	for (int algo = 0; algo < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; algo++)
		if (cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->cudnn, p->x_desc, p->y_desc,
								   p->bwd_filter_desc, p->w_desc,
								   (cudnnConvolutionBwdFilterAlgo_t)algo,
								   &sz) == CUDNN_STATUS_SUCCESS &&
		    sz <= limit && sz > most)
			most = sz;
	size_t want = most + most / 4 + ((size_t)16 << 20);
	return want < limit ? want : limit;
}

/* GPUPERF_CONV_LOG=1: each direction's pick and the candidates' times on stderr, to see
 * whether runs of the same net pick the same algorithms. */
static int conv_log_on(void)
{
	return tuning_get()->conv_log;
}

#define CONV_LOG(res, n, pick, dirname)                                                          \
	do {                                                                                     \
		if (!conv_log_on())                                                              \
			break;                                                                   \
		char what_[128];                                                                 \
		conv_desc_text(what_, sizeof(what_), a);                                         \
		fprintf(stderr, "conv-plan %s %s: algo %d", what_, dirname, (int)res[pick].algo); \
		for (int k_ = 0; k_ < (n) && k_ < 6; k_++)                                       \
			if (res[k_].status == CUDNN_STATUS_SUCCESS)                              \
				fprintf(stderr, " | %d:%.3f ms %.0f MiB", (int)res[k_].algo,      \
					(double)res[k_].time, res[k_].memory / 1048576.0);       \
		fprintf(stderr, "\n");                                                           \
	} while (0)
/* The implementations beside cuDNN's that a direction may take: cuBLAS products for
 * 1x1 convolutions, the own kernels for few input channels. */
enum alt_impl { ALT_GEMM, ALT_STEM };

static const char *const alt_name[] = { "cuBLAS", "own stem kernels" };

static int alt_ok(const struct cuda_ctx *ctx, enum alt_impl k, const struct conv2d_args *a, int dir)
{
	/* strided 16-bit NHWC products timed faster per direction than cuDNN's (which
	 * reads the strided pixels in place), yet the resnet50 bf16 step ran 0.6% slower
	 * with them (s24-6, s24-7): FP32 NCHW only, where cuDNN took 2x as long */
	if (k == ALT_GEMM)
		return tuning_get()->conv_1x1 != 0 && conv1x1_gemm_ok(ctx, a) &&
		       (a->stride == 1 || ctx->act_dtype == GP_F32);
	return dir != 1 && tuning_get()->conv_stem != 0 && stem_conv_supported((enum gp_dtype)ctx->act_dtype,
										ctx->nhwc, a);
}

/* One run of direction dir (0 forward, 1 backward data, 2 weight gradient into float
 * dw) on implementation k. */
static int alt_run(struct cuda_ctx *ctx, enum alt_impl k, const struct conv2d_args *a, int dir, void *x, void *w,
		   void *y, float *dw, void *scratch, size_t scratch_bytes)
{
	if (k == ALT_STEM)
		return dir == 0 ? stem_conv_fwd_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, a, x, w, y)
				: stem_conv_wgrad_cuda(ctx->stream, (enum gp_dtype)ctx->act_dtype, a, x, y, dw, 0,
						       scratch, scratch_bytes / sizeof(float));
	return dir == 0 ? conv1x1_gemm_fwd_cuda(ctx, a, x, w, y, scratch, scratch_bytes)
	       : dir == 1 ? conv1x1_gemm_bwd_data_cuda(ctx, a, y, w, x, 0, scratch, scratch_bytes)
			  : conv1x1_gemm_bwd_filter_cuda(ctx, a, x, y, dw, 0, scratch, scratch_bytes);
}

/* The scratch bytes direction dir of implementation k needs. */
static int alt_scratch_bytes(const struct cuda_ctx *ctx, enum alt_impl k, const struct conv2d_args *a, int dir,
			     size_t *bytes)
{
	*bytes = 0;
	if (k == ALT_GEMM)
		return conv1x1_gemm_scratch_bytes(ctx, a, dir, bytes);
	if (dir != 2)
		return 0;
	size_t floats = 0;
	GP_TRY(stem_conv_wgrad_scratch_floats((enum gp_dtype)ctx->act_dtype, a, &floats));
	*bytes = floats * sizeof(float);
	return 0;
}

/* Mean milliseconds of direction dir on implementation k over 3 runs after a warm-up;
 * -1 when there was no room to measure (cuDNN's then). x, w, y: the measuring buffers. */
static int alt_time(struct cuda_ctx *ctx, enum alt_impl k, const struct conv2d_args *a, int dir, void *x, void *w,
		    void *y, float *ms)
{
	size_t dw_bytes = (size_t)a->c_out * a->c_in * a->kh * a->kw * sizeof(float), scratch_bytes = 0;
	float *dw = NULL;
	void *scratch = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	*ms = -1;
	int rc = dir == 2 ? cuda_alloc(ctx, (void **)&dw, dw_bytes, MEM_WORKSPACE) : 0;
	if (rc == 0 && (rc = alt_scratch_bytes(ctx, k, a, dir, &scratch_bytes)) == 0 && scratch_bytes)
		rc = cuda_alloc(ctx, &scratch, scratch_bytes, MEM_WORKSPACE);
	/* the product's pick among cuBLASLt's candidates first; without one, cublasGemmEx's */
	if (rc == 0 && k == ALT_GEMM && conv1x1_gemm_tune_cuda(ctx, a, dir, x, w, y, dw) < 0)
		gp_error_clear();
	if (rc == 0 && (rc = CUDA_CHECK(cudaEventCreate(&e0))) == 0 && (rc = CUDA_CHECK(cudaEventCreate(&e1))) == 0) {
		for (int r = 0; r < 4 && rc == 0; r++) {
			if (r == 1 && (rc = CUDA_CHECK(cudaEventRecord(e0, ctx->stream))) < 0)
				break;
			rc = alt_run(ctx, k, a, dir, x, w, y, dw, scratch, scratch_bytes);
		}
		if (rc == 0 && (rc = CUDA_CHECK(cudaEventRecord(e1, ctx->stream))) == 0 &&
		    (rc = CUDA_CHECK(cudaEventSynchronize(e1))) == 0 &&
		    (rc = CUDA_CHECK(cudaEventElapsedTime(ms, e0, e1))) == 0)
			*ms /= 3;
	}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	cuda_free(ctx, scratch, scratch_bytes, MEM_WORKSPACE);
	cuda_free(ctx, dw, dw_bytes, MEM_WORKSPACE);
	if (rc == GP_EDEVOOM) {
		gp_error_clear();
		*ms = -1;
		return 0;
	}
	return rc;
}

/* Take implementation k for direction dir where it is measured faster than cuDNN's
 * choice (cuDNN's time: best_ms); in heuristic mode, where nothing is timed, and under
 * GPUPERF_CONV_STEM=own (the stem kernels) or GPUPERF_CONV_1X1=cublas (the products),
 * always. */
static int alt_pick(struct cuda_ctx *ctx, enum alt_impl k, const struct conv2d_args *a, int dir, void *x, void *w,
		    void *y, float best_ms, int *use)
{
	float ms = -1;
	*use = 0;
	if (!alt_ok(ctx, k, a, dir))
		return 0;
	if (ctx->heuristic_algos || (k == ALT_STEM && tuning_get()->conv_stem == 2) ||
	    (k == ALT_GEMM && tuning_get()->conv_1x1 == 2)) {
		*use = 1;
		return 0;
	}
	GP_TRY(alt_time(ctx, k, a, dir, x, w, y, &ms));
	*use = ms >= 0 && ms < best_ms;
	if (conv_log_on()) {
		char what[128];
		conv_desc_text(what, sizeof(what), a);
		fprintf(stderr, "conv-plan %s dir %d: %s %.3f ms against cuDNN %.3f: %s\n", what, dir, alt_name[k],
			(double)ms, (double)best_ms, *use ? alt_name[k] : "cuDNN");
	}
	return 0;
}

/* cuDNN's Find times each algorithm once; at small batches, where a convolution takes
 * 20-300 us, that single timing's noise picked a 2.6x slower algorithm for a ResNet-18
 * convolution in one run out of two (docs/log/perf-log.md, fifth session). So the usable
 * results within RETIME_SPAN of the fastest (at most RETIME_MAX) are timed again,
 * RETIME_ROUNDS rounds of RETIME_RUNS runs after a warm-up, and their times replaced
 * by their best round's mean before the pick. */
#define RETIME_SPAN 1.5f
#define RETIME_MAX 4
#define RETIME_RUNS 3
#define RETIME_ROUNDS 3

/* One run of direction dir (0 forward, 1 backward data, 2 backward filter) with algo. */
static int conv_run_algo(struct cuda_ctx *ctx, struct conv_plan *p, int dir, int algo, void *x, void *w, void *y,
			 void *ws, size_t ws_bytes)
{
	if (dir == 0)
		CUDNN_TRY(cudnnConvolutionForward(ctx->cudnn, &one, p->x_desc, x, p->w_desc, w, p->fwd_desc,
						  (cudnnConvolutionFwdAlgo_t)algo, ws, ws_bytes, &zero, p->y_desc, y));
	else if (dir == 1)
		CUDNN_TRY(cudnnConvolutionBackwardData(ctx->cudnn, &one, p->w_desc, w, p->y_desc, y, p->bwd_data_desc,
						       (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes, &zero,
						       p->x_desc, x));
	else
		CUDNN_TRY(cudnnConvolutionBackwardFilter(ctx->cudnn, &one, p->x_desc, x, p->y_desc, y,
							 p->bwd_filter_desc, (cudnnConvolutionBwdFilterAlgo_t)algo, ws,
							 ws_bytes, &zero, p->w_desc, w));
	return 0;
}

/* Mean milliseconds of RETIME_RUNS runs after a warm-up (the descriptor's math type
 * set to the result's first, as the pick will). */
static int conv_time_algo(struct cuda_ctx *ctx, struct conv_plan *p, int dir, int algo, cudnnMathType_t math,
			  void *x, void *w, void *y, void *ws, size_t ws_bytes, float *ms)
{
	cudnnConvolutionDescriptor_t d = dir == 0 ? p->fwd_desc : dir == 1 ? p->bwd_data_desc : p->bwd_filter_desc;
	cudaEvent_t e0 = NULL, e1 = NULL;
	int rc = desc_take_math(ctx, d, math);
	if (rc == 0 && (rc = CUDA_CHECK(cudaEventCreate(&e0))) == 0 && (rc = CUDA_CHECK(cudaEventCreate(&e1))) == 0) {
		for (int r = 0; r <= RETIME_RUNS && rc == 0; r++) {
			if (r == 1 && (rc = CUDA_CHECK(cudaEventRecord(e0, ctx->stream))) < 0)
				break;
			rc = conv_run_algo(ctx, p, dir, algo, x, w, y, ws, ws_bytes);
		}
		if (rc == 0 && (rc = CUDA_CHECK(cudaEventRecord(e1, ctx->stream))) == 0 &&
		    (rc = CUDA_CHECK(cudaEventSynchronize(e1))) == 0 &&
		    (rc = CUDA_CHECK(cudaEventElapsedTime(ms, e0, e1))) == 0)
			*ms /= RETIME_RUNS;
	}
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	return rc;
}

/* RETIME(res, n, dir): re-time the usable results near the fastest in RETIME_ROUNDS
 * interleaved rounds (A B C, A B C, ...: a clock still settling, or any other passing
 * slowness, then weighs on one round of every candidate rather than on all of one),
 * each candidate keeping its best round's mean; then sort by time again (the pick takes
 * the first usable one as the fastest). */
#define RETIME(res, n, dir, strict_fn)                                                                 \
	do {                                                                                           \
		int cand_[RETIME_MAX], nc_ = 0, first_ = -1;                                            \
		float best_[RETIME_MAX];                                                                \
		for (int k_ = 0; k_ < (n) && nc_ < RETIME_MAX; k_++) {                                 \
			if (!result_usable(ctx, res[k_].status, res[k_].memory, ws_bytes,              \
					   res[k_].determinism, strict_fn(res[k_].algo)))              \
				continue;                                                              \
			if (first_ < 0)                                                                \
				first_ = k_;                                                           \
			else if (res[k_].time > res[first_].time * RETIME_SPAN)                        \
				break;                                                                 \
			best_[nc_] = -1;                                                               \
			cand_[nc_++] = k_;                                                             \
		}                                                                                      \
		for (int r_ = 0; r_ < RETIME_ROUNDS && nc_ > 1 && rc == 0; r_++)                       \
			for (int c_ = 0; c_ < nc_ && rc == 0; c_++) {                                  \
				float t_ = 0;                                                          \
				rc = conv_time_algo(ctx, p, dir, (int)res[cand_[c_]].algo,             \
						    res[cand_[c_]].mathType, x, w, y, ws, ws_bytes, &t_);  \
				if (rc == 0 && (best_[c_] < 0 || t_ < best_[c_]))                      \
					best_[c_] = t_;                                                \
			}                                                                              \
		for (int c_ = 0; c_ < nc_ && nc_ > 1 && rc == 0; c_++)                                 \
			res[cand_[c_]].time = best_[c_];                                               \
		for (int a_ = 1; a_ < (n) && nc_ > 1; a_++) /* insertion sort by time */               \
			for (int b_ = a_; b_ > 0 && res[b_].status == CUDNN_STATUS_SUCCESS &&          \
					  (res[b_ - 1].status != CUDNN_STATUS_SUCCESS ||               \
					   res[b_].time < res[b_ - 1].time);                           \
			     b_--) {                                                                   \
				__typeof__(res[0]) t_ = res[b_];                                       \
				res[b_] = res[b_ - 1];                                                 \
				res[b_ - 1] = t_;                                                      \
			}                                                                              \
	} while (0)

/* Measure the three directions' algorithms. With bufs (the net's own activation,
 * parameter and gradient memory, free to overwrite before training starts) nothing
 * but the measuring workspace is allocated: at the largest batches, scratch copies
 * of the largest tensors would not fit beside them. */
static int plan_measure(struct cuda_ctx *ctx, struct conv_plan *p, const struct conv_bufs *bufs)
{
	const struct conv2d_args *a = &p->a;
	size_t es = act_size(ctx);
	size_t x_bytes = (size_t)a->n * a->c_in * a->h_in * a->w_in * es;
	size_t y_bytes = (size_t)a->n * a->c_out * a->h_out * a->w_out * es;
	size_t w_bytes = (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw * es;
	void *x = NULL, *y = NULL, *w = NULL, *ws = NULL;
	size_t ws_bytes = 0;
	int returned = 0, rc, i;
	cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
	cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
	cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];

	if (ctx->heuristic_algos) {
		/* cuDNN's heuristics instead of timing runs: nothing allocated, nothing run */
		ws_bytes = ctx->workspace_limit_bytes;
		rc = CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx->cudnn, p->x_desc, p->w_desc, p->fwd_desc,
									p->y_desc, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
									&returned, fwd));
	} else if (bufs) {
		x = bufs->x;
		y = bufs->y;
		w = bufs->w;
	} else if ((rc = cuda_alloc(ctx, &x, x_bytes, MEM_WORKSPACE)) < 0 ||
		   (rc = cuda_alloc(ctx, &y, y_bytes, MEM_WORKSPACE)) < 0 ||
		   (rc = cuda_alloc(ctx, &w, w_bytes, MEM_WORKSPACE)) < 0) {
		goto free_scratch;
	}
	if (!ctx->heuristic_algos) {
		if ((rc = find_workspace_alloc(ctx, find_workspace_need(ctx, p), &ws, &ws_bytes)) < 0)
			goto free_scratch;
		/* Zeros, so that no NaN or denormal pattern skews the timings. */
		if ((rc = CUDA_CHECK(cudaMemsetAsync(x, 0, x_bytes, ctx->stream))) < 0 ||
		    (rc = CUDA_CHECK(cudaMemsetAsync(y, 0, y_bytes, ctx->stream))) < 0 ||
		    (rc = CUDA_CHECK(cudaMemsetAsync(w, 0, w_bytes, ctx->stream))) < 0)
			goto free_scratch;
		rc = CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
			ctx->cudnn, p->x_desc, x, p->w_desc, w, p->fwd_desc, p->y_desc, y,
			CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, fwd, ws, ws_bytes));
	}
	if (rc < 0)
		goto free_scratch;
	if (!ctx->heuristic_algos)
		RETIME(fwd, returned, 0, fwd_algo_strict);
	if (rc < 0)
		goto free_scratch;
	PICK_RESULT(fwd, returned, ws_bytes, fwd_algo_strict, i);
	if (i < 0) {
		rc = no_algo("forward", a, returned, ws_bytes);
		goto free_scratch;
	}
	CONV_LOG(fwd, returned, i, "fwd");
	p->fwd_algo = fwd[i].algo;
	p->fwd_ws_bytes = fwd[i].memory;
	if ((rc = desc_take_math(ctx, p->fwd_desc, fwd[i].mathType)) < 0 ||
	    (rc = alt_pick(ctx, ALT_GEMM, a, 0, x, w, y, fwd[i].time, &p->fwd_gemm)) < 0 ||
	    (!p->fwd_gemm && (rc = alt_pick(ctx, ALT_STEM, a, 0, x, w, y, fwd[i].time, &p->fwd_stem)) < 0))
		goto free_scratch;
	if (rc == 0 && (p->fwd_gemm || p->fwd_stem))
		rc = alt_scratch_bytes(ctx, p->fwd_gemm ? ALT_GEMM : ALT_STEM, a, 0, &p->fwd_ws_bytes);
	if (rc < 0)
		goto free_scratch;

	/* Backward data reads dy (the y scratch) and writes dx (the x scratch). */
	if (ctx->heuristic_algos)
		rc = CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
			ctx->cudnn, p->w_desc, p->y_desc, p->bwd_data_desc, p->x_desc,
			CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, bwd_data));
	else
		rc = CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
			ctx->cudnn, p->w_desc, w, p->y_desc, y, p->bwd_data_desc, p->x_desc, x,
			CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, bwd_data, ws, ws_bytes));
	if (rc < 0)
		goto free_scratch;
	if (!ctx->heuristic_algos)
		RETIME(bwd_data, returned, 1, bwd_data_algo_strict);
	if (rc < 0)
		goto free_scratch;
	PICK_RESULT(bwd_data, returned, ws_bytes, bwd_data_algo_strict, i);
	if (i < 0) {
		rc = no_algo("backward-data", a, returned, ws_bytes);
		goto free_scratch;
	}
	CONV_LOG(bwd_data, returned, i, "bwd-data");
	p->bwd_data_algo = bwd_data[i].algo;
	p->bwd_data_ws_bytes = bwd_data[i].memory;
	if ((rc = desc_take_math(ctx, p->bwd_data_desc, bwd_data[i].mathType)) < 0 ||
	    (rc = alt_pick(ctx, ALT_GEMM, a, 1, x, w, y, bwd_data[i].time, &p->bwd_data_gemm)) < 0)
		goto free_scratch;
	if (p->bwd_data_gemm && (rc = alt_scratch_bytes(ctx, ALT_GEMM, a, 1, &p->bwd_data_ws_bytes)) < 0)
		goto free_scratch;

	/* Backward filter reads x and dy and writes dw (the w scratch). */
	if (ctx->heuristic_algos)
		rc = CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
			ctx->cudnn, p->x_desc, p->y_desc, p->bwd_filter_desc, p->w_desc,
			CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, bwd_filter));
	else
		rc = CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
			ctx->cudnn, p->x_desc, x, p->y_desc, y, p->bwd_filter_desc, p->w_desc, w,
			CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, bwd_filter, ws, ws_bytes));
	if (rc < 0)
		goto free_scratch;
	if (!ctx->heuristic_algos)
		RETIME(bwd_filter, returned, 2, bwd_filter_algo_strict);
	if (rc < 0)
		goto free_scratch;
	PICK_RESULT(bwd_filter, returned, ws_bytes, bwd_filter_algo_strict, i);
	if (i < 0) {
		rc = no_algo("backward-filter", a, returned, ws_bytes);
		goto free_scratch;
	}
	CONV_LOG(bwd_filter, returned, i, "bwd-filter");
	p->bwd_filter_algo = bwd_filter[i].algo;
	p->bwd_filter_ws_bytes = bwd_filter[i].memory;
	rc = desc_take_math(ctx, p->bwd_filter_desc, bwd_filter[i].mathType);
	/* one alternative at most (a 1x1 convolution of few channels might take either) */
	if (rc == 0 && (rc = alt_pick(ctx, ALT_GEMM, a, 2, x, w, y, bwd_filter[i].time, &p->bwd_filter_gemm)) == 0 &&
	    !p->bwd_filter_gemm)
		rc = alt_pick(ctx, ALT_STEM, a, 2, x, w, y, bwd_filter[i].time, &p->bwd_filter_stem);
	if (rc == 0 && (p->bwd_filter_gemm || p->bwd_filter_stem))
		rc = alt_scratch_bytes(ctx, p->bwd_filter_gemm ? ALT_GEMM : ALT_STEM, a, 2, &p->bwd_filter_ws_bytes);

free_scratch:
	cuda_free(ctx, ws, ws_bytes, MEM_WORKSPACE);
	if (!bufs) {
		cuda_free(ctx, w, w_bytes, MEM_WORKSPACE);
		cuda_free(ctx, y, y_bytes, MEM_WORKSPACE);
		cuda_free(ctx, x, x_bytes, MEM_WORKSPACE);
	}
	return rc;
}

/* Grow (never shrink) the shared workspace to what a plan needs. cudaFree waits for
 * the device, so no queued call still uses the old buffer. */
int cuda_workspace_reserve(struct cuda_ctx *ctx, size_t bytes)
{
	/* whole 2 MiB pages: a smaller block shares a page with other allocations, and
	 * freeing and taking it again would move free memory by a page */
	bytes = (bytes + CUDA_PAGE_BYTES - 1) & ~(CUDA_PAGE_BYTES - 1);
	if (bytes <= ctx->workspace_bytes)
		return 0;
	cuda_free(ctx, ctx->workspace, ctx->workspace_bytes, MEM_WORKSPACE);
	ctx->workspace = NULL;
	ctx->workspace_bytes = 0;
	GP_TRY(cuda_alloc(ctx, &ctx->workspace, bytes, MEM_WORKSPACE));
	ctx->workspace_bytes = bytes;
	return 0;
}
/* The plan of a's shape, measured now if the cache has none. Measuring holds the lock:
 * two nets measuring at once would skew each other's timings anyway. */
int conv_plan_get(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_bufs *bufs,
		  struct conv_plan **out)
{
	struct conv2d_args key = plan_key(a);
	unsigned b = plan_hash(&key, ctx);
	int rc;

	pthread_mutex_lock(&plan_lock);
	struct conv_plan *p = plan_lookup(ctx, &key, b);
	if (p) {
		pthread_mutex_unlock(&plan_lock);
		*out = p;
		return 0;
	}
	if (a->groups < 1 || a->c_in % a->groups || a->c_out % a->groups) {
		rc = gp_error(GP_EINVAL, "conv with %d groups of %d -> %d channels", a->groups, a->c_in, a->c_out);
		goto unlock;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		rc = gp_error(GP_ENOMEM, "out of memory for a conv plan");
		goto unlock;
	}
	p->a = key;
	p->device = ctx->device;
	p->math = ctx->math;
	p->dtype = ctx->act_dtype;
	p->nhwc = ctx->nhwc;
	p->policy = ctx_policy(ctx);
	if ((rc = plan_describe(p, &key, ctx->math)) < 0 || (rc = plan_measure(ctx, p, bufs)) < 0) {
		plan_free(p);
		goto unlock;
	}
	p->next = plan_cache[b];
	plan_cache[b] = p;
	*out = p;
unlock:
	pthread_mutex_unlock(&plan_lock);
	return rc;
}

const struct conv_plan *conv_plan_find(const struct cuda_ctx *ctx, const struct conv2d_args *a)
{
	struct conv2d_args key = plan_key(a);
	pthread_mutex_lock(&plan_lock);
	const struct conv_plan *p = plan_lookup(ctx, &key, plan_hash(&key, ctx));
	pthread_mutex_unlock(&plan_lock);
	return p;
}
