/* fusion_bench: does cuDNN's runtime fusion (the backend API) make ResNet-50's 16-bit
 * NHWC forward convolutions with their batch norm faster than what gpuperf runs today?
 * One benchmark program in the manner of llm.c's dev/cuda/: not part of the product.
 *
 * For each distinct convolution shape of ResNet-50 (torchvision v1.5) at --batch it
 * times, with CUDA events (warm-up, then the median of --iters runs):
 *   baseline  sbr:   xa = relu(x * scale[c] + bias[c])  own kernel (fusion_kernels.cu)
 *             conv:  y = conv(xa, w)                    cudnnConvolutionForward, the
 *                                                       fastest algorithm of FindEx
 *             stats: sum[k], sqsum[k] over y            own kernel
 *   fused     one backend graph: x -> MUL scale -> ADD bias -> RELU_FWD -> conv forward
 *             -> y, and GEN_STATS (SUM_SQSUM) of y; engines from the heuristics (mode A,
 *             else FALLBACK), the fastest of the first --plans that finalize
 * (the stem, whose input is the image, has no scale-bias-ReLU on either side), then the
 * weight gradient (unless --no-wgrad): cudnnConvolutionBackwardFilter from the stored
 * activation, and from the activation made again by the sbr kernel, against one graph
 * with the same prologue into CONVOLUTION_BACKWARD_FILTER; and the data gradient (unless
 * --no-dgrad): cudnnConvolutionBackwardData and an own ReLU-backward kernel against one
 * graph with RELU_BWD in the data gradient's epilogue. It checks the numbers: the fused
 * y, sum, sqsum, dw and dz against the baseline's (relative error of the norm), the
 * baseline's convolution, statistics and gradients at sampled points against a
 * double-precision CPU computation. A speed-up counts only where the numbers match.
 *
 * Every cuDNN call goes through a macro that prints the call, file, line, the status and
 * cudnnGetLastErrorString; calls that are expected to fail while probing what cuDNN
 * supports (heuristics, plan finalization) print only with --verbose. A shape that
 * cannot run is reported and skipped; the program ends with a summary. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "fusion_bench.h"

cudaError_t fb_fill(void *p, int dtype, size_t n, uint32_t seed, float lo, float hi, cudaStream_t st);
cudaError_t fb_sbr(const void *x, void *y, const float *scale, const float *bias, size_t m, int c, int dtype,
		   cudaStream_t st);
cudaError_t fb_stats(const void *y, float *sum, float *sqsum, size_t m, int c, int dtype, cudaStream_t st);
cudaError_t fb_drelu(const void *da, const void *a, void *dz, size_t n, int dtype, cudaStream_t st);

/* ---- error checks ---------------------------------------------------------------- */

int verbose;
char last_dnn_error[1024];

int cuda_ok(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return 1;
	fprintf(stderr, "CUDA error: %s\n  at %s:%d: %s (%d)\n", call, file, line, cudaGetErrorString(e), (int)e);
	return 0;
}

/* quiet: a failure that probing expects (an unsupported pattern or engine); its text is
 * kept in last_dnn_error for the shape's report and printed only with --verbose. */
int dnn_ok(cudnnStatus_t s, const char *call, const char *file, int line, int quiet)
{
	char msg[768] = "";
	if (s == CUDNN_STATUS_SUCCESS)
		return 1;
	cudnnGetLastErrorString(msg, sizeof msg);
	snprintf(last_dnn_error, sizeof last_dnn_error, "%s -> %s%s%s", call, cudnnGetErrorString(s),
		 msg[0] ? ": " : "", msg);
	if (!quiet || verbose)
		fprintf(stderr, "cuDNN %s: %s\n  at %s:%d: %s (%d)%s%s\n", quiet ? "(probe)" : "error", call, file,
			line, cudnnGetErrorString(s), (int)s, msg[0] ? "\n  last error: " : "", msg);
	return 0;
}

/* ---- the shapes ------------------------------------------------------------------ */

/* ResNet-50's 53 convolutions as 23 distinct shapes at 224x224 (gpuperf info --model
 * resnet50 lists them). input: what feeds the convolution in the network:
 *   bn-relu   relu(bn(previous conv)): exactly the fused prologue
 *   block-in  the block's input, relu(bn(conv3) + shortcut) (or the max-pool output):
 *             the prologue stands in for it, the residual add is not part of the graph
 *   mixed     both kinds share the shape
 *   image     the stem: no prologue */
static const struct conv_shape shapes[] = {
	{ "stem_7x7_3_64_s2", 3, 64, 224, 7, 2, 1, "image" },
	{ "l1_1x1_64_64", 64, 64, 56, 1, 1, 1, "block-in" },
	{ "l1_3x3_64_64", 64, 64, 56, 3, 1, 3, "bn-relu" },
	{ "l1_1x1_64_256", 64, 256, 56, 1, 1, 4, "mixed" },
	{ "l1_1x1_256_64", 256, 64, 56, 1, 1, 2, "block-in" },
	{ "l2_1x1_256_128", 256, 128, 56, 1, 1, 1, "block-in" },
	{ "l2_3x3_128_128_s2", 128, 128, 56, 3, 2, 1, "bn-relu" },
	{ "l2_1x1_128_512", 128, 512, 28, 1, 1, 4, "bn-relu" },
	{ "l2_1x1_256_512_s2", 256, 512, 56, 1, 2, 1, "block-in" },
	{ "l2_1x1_512_128", 512, 128, 28, 1, 1, 3, "block-in" },
	{ "l2_3x3_128_128", 128, 128, 28, 3, 1, 3, "bn-relu" },
	{ "l3_1x1_512_256", 512, 256, 28, 1, 1, 1, "block-in" },
	{ "l3_3x3_256_256_s2", 256, 256, 28, 3, 2, 1, "bn-relu" },
	{ "l3_1x1_256_1024", 256, 1024, 14, 1, 1, 6, "bn-relu" },
	{ "l3_1x1_512_1024_s2", 512, 1024, 28, 1, 2, 1, "block-in" },
	{ "l3_1x1_1024_256", 1024, 256, 14, 1, 1, 5, "block-in" },
	{ "l3_3x3_256_256", 256, 256, 14, 3, 1, 5, "bn-relu" },
	{ "l4_1x1_1024_512", 1024, 512, 14, 1, 1, 1, "block-in" },
	{ "l4_3x3_512_512_s2", 512, 512, 14, 3, 2, 1, "bn-relu" },
	{ "l4_1x1_512_2048", 512, 2048, 7, 1, 1, 3, "bn-relu" },
	{ "l4_1x1_1024_2048_s2", 1024, 2048, 14, 1, 2, 1, "block-in" },
	{ "l4_1x1_2048_512", 2048, 512, 7, 1, 1, 2, "block-in" },
	{ "l4_3x3_512_512", 512, 512, 7, 3, 1, 2, "bn-relu" },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* ---- options --------------------------------------------------------------------- */

static const char *dtype_name(enum fb_dtype d)
{
	return d == FB_BF16 ? "bf16" : d == FB_F16 ? "fp16" : "float";
}

static size_t dtype_bytes(enum fb_dtype d)
{
	return d == FB_F32 ? 4 : 2;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: fusion_bench [--batch N] [--shapes all|NAME|INDEX|PART] [--iters N] [--warmup N]\n"
		   "                    [--dtype bf16|fp16|float] [--plans N] [--ws-mb N] [--samples N]\n"
		   "                    [--no-wgrad] [--no-dgrad] [--fwd-only] [--verbose] [--list]\n"
		   "  --batch    images per batch (256)\n"
		   "  --shapes   all (default), one shape by name or index, or every shape whose name\n"
		   "             contains the value (3x3) (--list shows them)\n"
		   "  --iters    timed runs per measurement, the median is reported (20)\n"
		   "  --warmup   untimed runs before them (5)\n"
		   "  --dtype    bf16 (default), fp16, or float (cuDNN's runtime fusion is 16-bit:\n"
		   "             the program reports what the heuristics say for float)\n"
		   "  --plans    engine configurations from the heuristics to finalize and time (3)\n"
		   "  --ws-mb    workspace limit for both paths in MiB (1024)\n"
		   "  --samples  output points of the baseline convolution checked on the CPU (512)\n"
		   "  --no-wgrad skip the weight-gradient pass (scale-bias-ReLU prologue + wgrad)\n"
		   "  --no-dgrad skip the data-gradient pass (dgrad + ReLU backward)\n"
		   "  --fwd-only both of those\n"
		   "  --verbose  print every failing cuDNN call while probing\n"
		   "  --list     print the shapes and exit\n");
}

static int parse_int(const char *opt, const char *v, int lo, int hi, int *out)
{
	char *end;
	long x;
	if (!v) {
		fprintf(stderr, "fusion_bench: %s needs a value\n", opt);
		return -1;
	}
	x = strtol(v, &end, 10);
	if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
		fprintf(stderr, "fusion_bench: %s must be an integer in %d..%d, not '%s'\n", opt, lo, hi, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int find_shape(const char *v, int *out, const char **match)
{
	char *end;
	long i;
	*match = NULL;
	if (!strcmp(v, "all")) {
		*out = -1;
		return 0;
	}
	for (int s = 0; s < N_SHAPES; s++)
		if (!strcmp(v, shapes[s].name)) {
			*out = s;
			return 0;
		}
	i = strtol(v, &end, 10);
	if (*v != '\0' && *end == '\0' && i >= 0 && i < N_SHAPES) {
		*out = (int)i;
		return 0;
	}
	for (int s = 0; s < N_SHAPES && *end != '\0'; s++)
		if (strstr(shapes[s].name, v)) { /* a part of names: every shape that has it */
			*out = -1;
			*match = v;
			return 0;
		}
	fprintf(stderr, "fusion_bench: unknown shape '%s' (--list shows the names)\n", v);
	return -1;
}

static void list_shapes(void)
{
	int total = 0;
	printf("%3s  %-20s %5s %5s %4s %4s %3s %5s  %s\n", "idx", "name", "C", "K", "HW", "RxS", "s", "count",
	       "input");
	for (int i = 0; i < N_SHAPES; i++) {
		const struct conv_shape *s = &shapes[i];
		printf("%3d  %-20s %5d %5d %4d %2dx%d %3d %5d  %s\n", i, s->name, s->c, s->k, s->hw, s->r, s->r,
		       s->stride, s->count, s->input);
		total += s->count;
	}
	printf("%d shapes, %d convolutions (ResNet-50 has 53)\n", N_SHAPES, total);
}

/* Returns 1 to run, 0 to exit successfully (--help, --list), -1 on bad input. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	int ws_mb = 1024;
	*o = (struct opts){ .batch = 256, .iters = 20, .warmup = 5, .plans = 3, .samples = 512, .shape = -1,
			    .dtype = FB_BF16, .wgrad = 1, .dgrad = 1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (!strcmp(a, "--batch"))
			rc = parse_int(a, v, 1, 4096, &o->batch), i++;
		else if (!strcmp(a, "--iters"))
			rc = parse_int(a, v, 1, 100000, &o->iters), i++;
		else if (!strcmp(a, "--warmup"))
			rc = parse_int(a, v, 0, 100000, &o->warmup), i++;
		else if (!strcmp(a, "--plans"))
			rc = parse_int(a, v, 1, 64, &o->plans), i++;
		else if (!strcmp(a, "--ws-mb"))
			rc = parse_int(a, v, 0, 65536, &ws_mb), i++;
		else if (!strcmp(a, "--samples"))
			rc = parse_int(a, v, 0, 1000000, &o->samples), i++;
		else if (!strcmp(a, "--shapes")) {
			if (!v) {
				fprintf(stderr, "fusion_bench: --shapes needs a value\n");
				return -1;
			}
			rc = find_shape(v, &o->shape, &o->match), i++;
		} else if (!strcmp(a, "--dtype")) {
			if (v && !strcmp(v, "bf16"))
				o->dtype = FB_BF16;
			else if (v && !strcmp(v, "fp16"))
				o->dtype = FB_F16;
			else if (v && (!strcmp(v, "float") || !strcmp(v, "fp32")))
				o->dtype = FB_F32;
			else {
				fprintf(stderr, "fusion_bench: --dtype must be bf16, fp16 or float, not '%s'\n",
					v ? v : "(nothing)");
				return -1;
			}
			i++;
		} else if (!strcmp(a, "--verbose"))
			verbose = 1;
		else if (!strcmp(a, "--no-wgrad"))
			o->wgrad = 0;
		else if (!strcmp(a, "--no-dgrad"))
			o->dgrad = 0;
		else if (!strcmp(a, "--fwd-only"))
			o->wgrad = o->dgrad = 0;
		else if (!strcmp(a, "--list")) {
			list_shapes();
			return 0;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "fusion_bench: unknown option '%s' (--help lists them)\n", a);
			return -1;
		}
		if (rc < 0)
			return -1;
	}
	o->ws_bytes = (size_t)ws_mb << 20;
	return 1;
}

/* ---- host conversions (16-bit storage <-> float) --------------------------------- */

static float bf16_to_float(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0;
	u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static float half_to_float(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
	return (h & 0x8000) ? -v : v;
}

static uint16_t float_to_half(float f)
{
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	float a = fabsf(f);
	int e;
	long m;
	if (isnan(f))
		return 0x7e00;
	if (a >= 65520.0f)
		return sign | 0x7c00;
	if (a < 6.103515625e-05f) /* subnormal: units of 2^-24, rounded to nearest even */
		return sign | (uint16_t)lrintf(a * 16777216.0f);
	m = lrintf((2.0f * frexpf(a, &e) - 1.0f) * 1024.0f); /* a = (1 + m/1024) 2^(e-1) */
	e += 14;
	if (m == 1024) {
		m = 0;
		e++;
	}
	return e >= 31 ? (uint16_t)(sign | 0x7c00) : (uint16_t)(sign | (e << 10) | m);
}

static double host_get(const void *p, size_t i, enum fb_dtype d)
{
	if (d == FB_F32)
		return ((const float *)p)[i];
	uint16_t v = ((const uint16_t *)p)[i];
	return d == FB_BF16 ? bf16_to_float(v) : half_to_float(v);
}

/* float rounded to the storage type and back, as a kernel writing it would. */
static float host_round(float f, enum fb_dtype d)
{
	return d == FB_BF16 ? bf16_to_float(float_to_bf16(f)) : d == FB_F16 ? half_to_float(float_to_half(f)) : f;
}

/* ||a - b|| / ||b|| over n elements of two host arrays of type d. */
static double rel_err_host(const void *a, const void *b, size_t n, enum fb_dtype d)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double x = host_get(a, i, d), y = host_get(b, i, d);
		num += (x - y) * (x - y);
		den += y * y;
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double rel_err_f(const float *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += b[i] * b[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- one shape's device buffers ---------------------------------------------------- */

static void bufs_free(struct bufs *b)
{
	void *p[] = { b->x, b->xa, b->w, b->yb, b->yf, b->scale_io, b->bias_io, b->scale_f, b->bias_f, b->stats_b,
		      b->stats_f, b->dwb, b->dwf, b->da, b->dzb, b->dzf };
	for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
		if (p[i])
			cudaFree(p[i]);
	memset(b, 0, sizeof *b);
}

/* ---- timing ------------------------------------------------------------------------ */

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* Median milliseconds of iters runs after warm runs, each between its own pair of events;
 * negative when a run failed. */
float time_median(struct timer *t, run_fn fn, void *ctx, int warm, int iters)
{
	float *ms = malloc((size_t)iters * sizeof *ms), med;
	if (!ms) {
		fprintf(stderr, "fusion_bench: out of host memory\n");
		return -1.0f;
	}
	for (int i = 0; i < warm; i++)
		if (!fn(ctx))
			goto fail;
	if (!CUDA_OK(cudaStreamSynchronize(t->st)))
		goto fail;
	for (int i = 0; i < iters; i++) {
		if (!CUDA_OK(cudaEventRecord(t->t0, t->st)) || !fn(ctx) || !CUDA_OK(cudaEventRecord(t->t1, t->st)) ||
		    !CUDA_OK(cudaEventSynchronize(t->t1)) || !CUDA_OK(cudaEventElapsedTime(&ms[i], t->t0, t->t1)))
			goto fail;
	}
	qsort(ms, (size_t)iters, sizeof *ms, cmp_float);
	med = iters % 2 ? ms[iters / 2] : 0.5f * (ms[iters / 2 - 1] + ms[iters / 2]);
	free(ms);
	return med;
fail:
	free(ms);
	return -1.0f;
}

/* ---- the baseline: own kernels around the legacy convolution call ----------------- */

struct base {
	cudnnHandle_t h;
	cudaStream_t st;
	cudnnTensorDescriptor_t xd, yd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	cudnnConvolutionFwdAlgo_t algo;
	cudnnConvolutionBwdFilterAlgo_t wg_algo;
	cudnnConvolutionBwdDataAlgo_t dg_algo;
	size_t algo_ws, wg_algo_ws, dg_algo_ws;
	void *ws;
	struct bufs *b;
	size_t m_in, m_out; /* rows N*H*W of the input and the output */
	int c, k, prologue;
	enum fb_dtype dtype;
};

static int base_sbr(void *p)
{
	struct base *b = p;
	return !b->prologue ||
	       CUDA_OK(fb_sbr(b->b->x, b->b->xa, b->b->scale_f, b->b->bias_f, b->m_in, b->c, b->dtype, b->st));
}

static int base_conv(void *p)
{
	struct base *b = p;
	const float one = 1.0f, zero = 0.0f;
	return DNN_OK(cudnnConvolutionForward(b->h, &one, b->xd, b->prologue ? b->b->xa : b->b->x, b->wd, b->b->w,
					      b->cd, b->algo, b->ws, b->algo_ws, &zero, b->yd, b->b->yb));
}

static int base_stats(void *p)
{
	struct base *b = p;
	return CUDA_OK(fb_stats(b->b->yb, b->b->stats_b, b->b->stats_b + b->k, b->m_out, b->k, b->dtype, b->st));
}

static int base_all(void *p)
{
	return base_sbr(p) && base_conv(p) && base_stats(p);
}

/* Weight gradient from the activation as stored (xa; what gpuperf runs today, where
 * the batch norm's output is kept for the backward pass), dy in yb. */
static int base_wgrad(void *p)
{
	struct base *b = p;
	const float one = 1.0f, zero = 0.0f;
	return DNN_OK(cudnnConvolutionBackwardFilter(b->h, &one, b->xd, b->b->xa, b->yd, b->b->yb, b->cd, b->wg_algo,
						     b->ws, b->wg_algo_ws, &zero, b->wd, b->b->dwb));
}

/* The same when the forward pass fused the batch norm into the convolution and kept only
 * its input: the activation is made again first. */
static int base_sbr_wgrad(void *p)
{
	return base_sbr(p) && base_wgrad(p);
}

/* Data gradient da = conv_bwd_data(dy, w), then the ReLU backward with the mask from
 * the stored activation xa (gpuperf today folds that into cuDNN's batch-norm backward). */
static int base_dgrad(void *p)
{
	struct base *b = p;
	const float one = 1.0f, zero = 0.0f;
	return DNN_OK(cudnnConvolutionBackwardData(b->h, &one, b->wd, b->b->w, b->yd, b->b->yb, b->cd, b->dg_algo,
						   b->ws, b->dg_algo_ws, &zero, b->xd, b->b->da));
}

static int base_drelu(void *p)
{
	struct base *b = p;
	return CUDA_OK(fb_drelu(b->b->da, b->b->xa, b->b->dzb, b->m_in * b->c, b->dtype, b->st));
}

static int base_dgrad_drelu(void *p)
{
	return base_dgrad(p) && base_drelu(p);
}

/* The fastest data-gradient algorithm FindEx measures (base_setup first). */
static int base_dgrad_setup(struct base *b, const struct conv_shape *s, size_t ws_limit)
{
	cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
	int got = 0;
	if (!DNN_OK(cudnnFindConvolutionBackwardDataAlgorithmEx(b->h, b->wd, b->b->w, b->yd, b->b->yb, b->cd, b->xd,
								b->b->da, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
								&got, perf, b->ws, ws_limit)))
		return 0;
	for (int i = 0; i < got; i++)
		if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_limit) {
			b->dg_algo = perf[i].algo;
			b->dg_algo_ws = perf[i].memory;
			return 1;
		}
	fprintf(stderr, "fusion_bench: %s: no data-gradient algorithm ran within %zu MiB of workspace\n", s->name,
		ws_limit >> 20);
	return 0;
}

/* The fastest weight-gradient algorithm FindEx measures (base_setup first). */
static int base_wgrad_setup(struct base *b, const struct conv_shape *s, size_t ws_limit)
{
	cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
	int got = 0;
	if (!DNN_OK(cudnnFindConvolutionBackwardFilterAlgorithmEx(b->h, b->xd, b->b->xa, b->yd, b->b->yb, b->cd,
								  b->wd, b->b->dwb,
								  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
								  perf, b->ws, ws_limit)))
		return 0;
	for (int i = 0; i < got; i++)
		if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_limit) {
			b->wg_algo = perf[i].algo;
			b->wg_algo_ws = perf[i].memory;
			return 1;
		}
	fprintf(stderr, "fusion_bench: %s: no weight-gradient algorithm ran within %zu MiB of workspace\n", s->name,
		ws_limit >> 20);
	return 0;
}

static void base_destroy(struct base *b)
{
	if (b->xd)
		cudnnDestroyTensorDescriptor(b->xd);
	if (b->yd)
		cudnnDestroyTensorDescriptor(b->yd);
	if (b->wd)
		cudnnDestroyFilterDescriptor(b->wd);
	if (b->cd)
		cudnnDestroyConvolutionDescriptor(b->cd);
	b->xd = b->yd = NULL;
	b->wd = NULL;
	b->cd = NULL;
}

/* Describes the convolution and picks the fastest algorithm cuDNN's FindEx measures
 * within the workspace limit (what gpuperf's conv_plan.c does). */
static int base_setup(struct base *b, const struct conv_shape *s, int n, size_t ws_limit)
{
	cudnnDataType_t dt = dtype_cudnn(b->dtype);
	cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
	int p = shape_out(s), got = 0, on, oc, oh, ow;
	if (!DNN_OK(cudnnCreateTensorDescriptor(&b->xd)) || !DNN_OK(cudnnCreateTensorDescriptor(&b->yd)) ||
	    !DNN_OK(cudnnCreateFilterDescriptor(&b->wd)) || !DNN_OK(cudnnCreateConvolutionDescriptor(&b->cd)))
		return 0;
	if (!DNN_OK(cudnnSetTensor4dDescriptor(b->xd, CUDNN_TENSOR_NHWC, dt, n, s->c, s->hw, s->hw)) ||
	    !DNN_OK(cudnnSetTensor4dDescriptor(b->yd, CUDNN_TENSOR_NHWC, dt, n, s->k, p, p)) ||
	    !DNN_OK(cudnnSetFilter4dDescriptor(b->wd, dt, CUDNN_TENSOR_NHWC, s->k, s->c, s->r, s->r)) ||
	    !DNN_OK(cudnnSetConvolution2dDescriptor(b->cd, s->r / 2, s->r / 2, s->stride, s->stride, 1, 1,
						    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)) ||
	    !DNN_OK(cudnnSetConvolutionMathType(b->cd, b->dtype == FB_F32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH)))
		return 0;
	if (!DNN_OK(cudnnGetConvolution2dForwardOutputDim(b->cd, b->xd, b->wd, &on, &oc, &oh, &ow)))
		return 0;
	if (on != n || oc != s->k || oh != p || ow != p) {
		fprintf(stderr, "fusion_bench: %s: cuDNN's output %dx%dx%dx%d is not the expected %dx%dx%dx%d\n",
			s->name, on, oc, oh, ow, n, s->k, p, p);
		return 0;
	}
	if (!DNN_OK(cudnnFindConvolutionForwardAlgorithmEx(b->h, b->xd, b->prologue ? b->b->xa : b->b->x, b->wd,
							   b->b->w, b->cd, b->yd, b->b->yb,
							   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, b->ws,
							   ws_limit)))
		return 0;
	for (int i = 0; i < got; i++)
		if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_limit) {
			b->algo = perf[i].algo;
			b->algo_ws = perf[i].memory;
			return 1;
		}
	fprintf(stderr, "fusion_bench: %s: no forward algorithm ran within %zu MiB of workspace\n", s->name,
		ws_limit >> 20);
	return 0;
}

/* ---- one shape ------------------------------------------------------------------------ */

enum status { ST_OK, ST_UNSUPPORTED, ST_ERROR, ST_SKIPPED };

/* The weight-gradient pass of one shape. */
struct wg_result {
	enum status st;
	float conv_ms, sbr_conv_ms, fused_ms; /* stored activation; activation made again; fused */
	double err_dw, cpu_dw;
	int pass, base_ok, rtc, tensor_core, tried_cfgs, finalized;
	int64_t engine, ws;
	const char *variant, *heur;
	char why[512];
};

/* The data-gradient pass of one shape. */
struct dg_result {
	enum status st;
	float dgrad_ms, drelu_ms, base_ms, fused_ms;
	double err_dz, cpu_dz;
	int pass, base_ok, rtc, tensor_core, tried_cfgs, finalized, mask_from_z;
	int64_t engine, ws;
	const char *variant, *heur;
	char why[512];
};

struct result {
	const struct conv_shape *s;
	struct wg_result wg;
	struct dg_result dg;
	enum status st;
	float sbr_ms, conv_ms, stats_ms, base_ms, fused_ms;
	double err_y, err_sum, err_sq, cpu_conv, cpu_stats;
	int pass, base_ok, rtc, tensor_core, tried_cfgs, finalized;
	int64_t engine, fused_ws;
	const char *variant, *heur;
	char why[512];
};

static double tol_for(enum fb_dtype d)
{
	return d == FB_F32 ? 1e-2 : 1e-2; /* float runs TF32 tensor cores on both paths */
}

/* Host copies for the checks; NULL (and a message) when host memory is short. */
static void *host_copy(const void *dev, size_t bytes)
{
	void *h = malloc(bytes);
	if (!h) {
		fprintf(stderr, "fusion_bench: no host memory for a %zu-byte copy: check skipped\n", bytes);
		return NULL;
	}
	if (!CUDA_OK(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost))) {
		free(h);
		return NULL;
	}
	return h;
}

/* The baseline against a double-precision CPU computation: the convolution at `samples`
 * pseudo-random output points (input through the same rounded scale-bias-ReLU), and the
 * statistics of its output as written. Fills r->cpu_conv and r->cpu_stats (-1: not run). */
static void check_baseline_cpu(struct result *r, const struct opts *o, const struct bufs *b, int prologue,
			       const float *scale, const float *bias, const void *hyb)
{
	const struct conv_shape *s = r->s;
	enum fb_dtype d = o->dtype;
	int p = shape_out(s), pad = s->r / 2;
	size_t m_out = (size_t)o->batch * p * p, xs = (size_t)o->batch * s->hw * s->hw * s->c;
	size_t ws = (size_t)s->k * s->r * s->r * s->c;
	double *sum = calloc(2 * (size_t)s->k, sizeof *sum), num = 0, den = 0;
	float *gpu_stats = malloc(2 * (size_t)s->k * sizeof *gpu_stats);
	void *hx = NULL, *hw = NULL;
	r->cpu_conv = r->cpu_stats = -1;
	if (!sum || !gpu_stats)
		goto out;
	for (size_t i = 0; i < m_out; i++)
		for (int k = 0; k < s->k; k++) {
			double v = host_get(hyb, i * s->k + k, d);
			sum[k] += v;
			sum[s->k + k] += v * v;
		}
	if (CUDA_OK(cudaMemcpy(gpu_stats, b->stats_b, 2 * (size_t)s->k * sizeof(float), cudaMemcpyDeviceToHost)))
		r->cpu_stats = rel_err_f(gpu_stats, sum, 2 * (size_t)s->k);
	if (o->samples == 0 || !(hx = host_copy(b->x, xs * dtype_bytes(d))) || !(hw = host_copy(b->w, ws * dtype_bytes(d))))
		goto out;
	uint64_t z = 0x2545F4914F6CDD1Dull;
	for (int t = 0; t < o->samples; t++) {
		z ^= z << 13, z ^= z >> 7, z ^= z << 17;
		size_t i = (size_t)(z % (m_out * (uint64_t)s->k));
		int k = (int)(i % s->k), q = (int)(i / s->k % p), pp = (int)(i / s->k / p % p);
		int n = (int)(i / s->k / p / p);
		double acc = 0;
		for (int u = 0; u < s->r; u++)
			for (int v = 0; v < s->r; v++) {
				int ih = pp * s->stride - pad + u, iw = q * s->stride - pad + v;
				if (ih < 0 || iw < 0 || ih >= s->hw || iw >= s->hw)
					continue;
				for (int c = 0; c < s->c; c++) {
					float a = (float)host_get(hx, (((size_t)n * s->hw + ih) * s->hw + iw) * s->c + c, d);
					if (prologue) {
						a = fmaf(a, scale[c], bias[c]);
						a = host_round(a > 0.0f ? a : 0.0f, d);
					}
					acc += (double)a * host_get(hw, (((size_t)k * s->r + u) * s->r + v) * s->c + c, d);
				}
			}
		double g = host_get(hyb, i, d);
		num += (g - acc) * (g - acc);
		den += acc * acc;
	}
	r->cpu_conv = den > 0 ? sqrt(num / den) : sqrt(num);
out:
	free(sum);
	free(gpu_stats);
	free(hx);
	free(hw);
}

static double flops(const struct conv_shape *s, int n)
{
	int p = shape_out(s);
	return 2.0 * n * p * p * (double)s->k * s->c * s->r * s->r;
}

/* Fills the inputs: x and w uniform (w scaled by the fan-in so outputs stay near 1),
 * scale in [0.5, 1.5) and bias in [-0.5, 0.5) in steps of 1/64, exact in every type, so
 * both paths see the same numbers whatever type the graph takes them in. */
static int fill_inputs(struct bufs *b, const struct conv_shape *s, const struct opts *o, float *scale, float *bias,
		       cudaStream_t st)
{
	size_t xs = (size_t)o->batch * s->hw * s->hw * s->c, wsz = (size_t)s->k * s->r * s->r * s->c;
	float a = sqrtf(3.0f / (float)(s->c * s->r * s->r));
	uint16_t *io = malloc(2 * (size_t)s->c * sizeof *io);
	int ok;
	if (!io)
		return 0;
	for (int c = 0; c < s->c; c++) {
		scale[c] = 0.5f + (float)((c * 37 + 11) % 64) / 64.0f;
		bias[c] = -0.5f + (float)((c * 53 + 5) % 64) / 64.0f;
		io[c] = o->dtype == FB_BF16 ? float_to_bf16(scale[c]) : float_to_half(scale[c]);
		io[s->c + c] = o->dtype == FB_BF16 ? float_to_bf16(bias[c]) : float_to_half(bias[c]);
	}
	ok = CUDA_OK(fb_fill(b->x, o->dtype, xs, 1, -1.0f, 1.0f, st)) &&
	     CUDA_OK(fb_fill(b->w, o->dtype, wsz, 2, -a, a, st)) &&
	     CUDA_OK(cudaMemcpy(b->scale_f, scale, (size_t)s->c * sizeof(float), cudaMemcpyHostToDevice)) &&
	     CUDA_OK(cudaMemcpy(b->bias_f, bias, (size_t)s->c * sizeof(float), cudaMemcpyHostToDevice)) &&
	     (o->dtype == FB_F32 ||
	      (CUDA_OK(cudaMemcpy(b->scale_io, io, (size_t)s->c * 2, cudaMemcpyHostToDevice)) &&
	       CUDA_OK(cudaMemcpy(b->bias_io, io + s->c, (size_t)s->c * 2, cudaMemcpyHostToDevice)))) &&
	     CUDA_OK(cudaDeviceSynchronize());
	free(io);
	return ok;
}

static int alloc_bufs(struct bufs *b, const struct conv_shape *s, const struct opts *o)
{
	size_t e = dtype_bytes(o->dtype), p = (size_t)shape_out(s);
	size_t xs = (size_t)o->batch * s->hw * s->hw * s->c * e, ys = (size_t)o->batch * p * p * s->k * e;
	size_t wsz = (size_t)s->k * s->r * s->r * s->c * e;
	memset(b, 0, sizeof *b);
	return CUDA_OK(cudaMalloc(&b->x, xs)) && CUDA_OK(cudaMalloc(&b->xa, xs)) && CUDA_OK(cudaMalloc(&b->w, wsz)) &&
	       CUDA_OK(cudaMalloc(&b->yb, ys)) && CUDA_OK(cudaMalloc(&b->yf, ys)) &&
	       CUDA_OK(cudaMalloc(&b->scale_io, (size_t)s->c * e)) && CUDA_OK(cudaMalloc(&b->bias_io, (size_t)s->c * e)) &&
	       CUDA_OK(cudaMalloc((void **)&b->scale_f, (size_t)s->c * 4)) &&
	       CUDA_OK(cudaMalloc((void **)&b->bias_f, (size_t)s->c * 4)) &&
	       CUDA_OK(cudaMalloc((void **)&b->stats_b, 2 * (size_t)s->k * 4)) &&
	       CUDA_OK(cudaMalloc((void **)&b->stats_f, 2 * (size_t)s->k * 4));
}

/* The fused forward graph of shape s against the baseline's output hyb (host). */
static void bench_fused_fwd(struct result *r, const struct opts *o, struct timer *t, struct fused *f, struct bufs *bp,
			    void *ws, int prologue, const void *hyb)
{
	const struct conv_shape *s = r->s;
	size_t ys = (size_t)o->batch * shape_out(s) * shape_out(s) * s->k;
	struct bufs b = *bp;
	void *hyf = NULL;
	f->stats = b.stats_f;
	f->k = s->k;
	last_dnn_error[0] = '\0';
	if (!fz_setup(f, t, s, o, &b, ws, prologue, FZ_FWD)) {
		r->st = ST_UNSUPPORTED;
		snprintf(r->why, sizeof r->why, "no engine: %.400s", last_dnn_error[0] ? last_dnn_error : "heuristics returned none");
		return;
	}
	r->variant = f->variant;
	r->heur = f->heur;
	r->engine = f->engine;
	r->rtc = f->rtc;
	r->tensor_core = f->tensor_core;
	r->tried_cfgs = f->tried_cfgs;
	r->finalized = f->finalized;
	r->fused_ws = f->ws_bytes;
	r->fused_ms = time_median(t, fz_run, f, o->warmup, o->iters);
	if (r->fused_ms < 0 || !CUDA_OK(cudaMemsetAsync(b.yf, 0, ys * dtype_bytes(o->dtype), t->st)) || !fz_run(f) ||
	    !CUDA_OK(cudaStreamSynchronize(t->st))) {
		snprintf(r->why, sizeof r->why, "fused run failed: %.400s", last_dnn_error);
		goto out;
	}
	r->st = ST_OK;
	if (hyb && (hyf = host_copy(b.yf, ys * dtype_bytes(o->dtype)))) {
		float sb[2 * 4096], sf[2 * 4096];
		double ref[2 * 4096];
		r->err_y = rel_err_host(hyf, hyb, ys, o->dtype);
		if (s->k <= 4096 &&
		    CUDA_OK(cudaMemcpy(sb, b.stats_b, 2 * (size_t)s->k * 4, cudaMemcpyDeviceToHost)) &&
		    CUDA_OK(cudaMemcpy(sf, b.stats_f, 2 * (size_t)s->k * 4, cudaMemcpyDeviceToHost))) {
			for (int i = 0; i < 2 * s->k; i++)
				ref[i] = sb[i];
			r->err_sum = rel_err_f(sf, ref, (size_t)s->k);
			r->err_sq = rel_err_f(sf + s->k, ref + s->k, (size_t)s->k);
		}
	}
	/* Fused against the baseline, and the baseline against the CPU where that ran. */
	r->pass = r->err_y >= 0 && r->err_sum >= 0 && r->err_sq >= 0 && r->err_y < tol_for(o->dtype) &&
		  r->err_sum < tol_for(o->dtype) && r->err_sq < tol_for(o->dtype) && r->cpu_conv < tol_for(o->dtype) &&
		  r->cpu_stats < tol_for(o->dtype);
out:
	free(hyf);
	fz_free(f);
}

/* The baseline's weight gradient at sampled entries (o->samples / 8) against a
 * double-precision CPU sum over the batch and the output plane; -1 when not run. */
static double check_wgrad_cpu(const struct conv_shape *s, const struct opts *o, const struct bufs *b,
			      const float *scale, const float *bias, const void *hdw)
{
	enum fb_dtype d = o->dtype;
	int p = shape_out(s), pad = s->r / 2, samples = o->samples / 8;
	size_t e = dtype_bytes(d), xs = (size_t)o->batch * s->hw * s->hw * s->c, ys = (size_t)o->batch * p * p * s->k;
	size_t wsz = (size_t)s->k * s->r * s->r * s->c;
	void *hx = NULL, *hdy = NULL;
	double num = 0, den = 0, res = -1;
	uint64_t z = 0x9E3779B97F4A7C15ull;
	if (samples == 0 || !(hx = host_copy(b->x, xs * e)) || !(hdy = host_copy(b->yb, ys * e)))
		goto out;
	for (int t = 0; t < samples; t++) {
		z ^= z << 13, z ^= z >> 7, z ^= z << 17;
		size_t i = (size_t)(z % wsz);
		int c = (int)(i % s->c), v = (int)(i / s->c % s->r), u = (int)(i / s->c / s->r % s->r);
		int k = (int)(i / s->c / s->r / s->r);
		double acc = 0;
		for (int n = 0; n < o->batch; n++)
			for (int pp = 0; pp < p; pp++)
				for (int q = 0; q < p; q++) {
					int ih = pp * s->stride - pad + u, iw = q * s->stride - pad + v;
					float a;
					if (ih < 0 || iw < 0 || ih >= s->hw || iw >= s->hw)
						continue;
					a = (float)host_get(hx, (((size_t)n * s->hw + ih) * s->hw + iw) * s->c + c, d);
					a = fmaf(a, scale[c], bias[c]);
					a = host_round(a > 0.0f ? a : 0.0f, d);
					acc += (double)a * host_get(hdy, (((size_t)n * p + pp) * p + q) * s->k + k, d);
				}
		double g = host_get(hdw, i, d);
		num += (g - acc) * (g - acc);
		den += acc * acc;
	}
	res = den > 0 ? sqrt(num / den) : sqrt(num);
out:
	free(hx);
	free(hdy);
	return res;
}

/* The weight-gradient pass of shape s, after the forward one: dy random in yb (the
 * forward output is no longer needed). Baseline from the stored activation xa (gpuperf
 * today) and with the activation made again first (what a fused forward pass that keeps
 * only the convolution's input would need without a fused weight gradient); fused: one
 * graph, scale-bias-ReLU prologue into the weight gradient. */
static void bench_wgrad(struct wg_result *w, const struct conv_shape *s, const struct opts *o, struct timer *t,
			struct fused *f, struct base *base, struct bufs *b, void *ws, const float *scale,
			const float *bias)
{
	size_t e = dtype_bytes(o->dtype), wsz = (size_t)s->k * s->r * s->r * s->c, ys = base->m_out * s->k;
	void *hb = NULL, *hf = NULL;
	w->st = ST_ERROR;
	if (!CUDA_OK(cudaMalloc(&b->dwb, wsz * e)) || !CUDA_OK(cudaMalloc(&b->dwf, wsz * e)) ||
	    !CUDA_OK(fb_fill(b->yb, o->dtype, ys, 3, -1.0f, 1.0f, t->st)) || !base_sbr(base) ||
	    !CUDA_OK(cudaStreamSynchronize(t->st)) || !base_wgrad_setup(base, s, o->ws_bytes)) {
		snprintf(w->why, sizeof w->why, "baseline weight gradient failed: %.400s", last_dnn_error);
		return;
	}
	w->conv_ms = time_median(t, base_wgrad, base, o->warmup, o->iters);
	w->sbr_conv_ms = time_median(t, base_sbr_wgrad, base, o->warmup, o->iters);
	if (w->conv_ms < 0 || w->sbr_conv_ms < 0 || !base_sbr_wgrad(base) || !CUDA_OK(cudaStreamSynchronize(t->st))) {
		snprintf(w->why, sizeof w->why, "baseline weight gradient run failed");
		return;
	}
	w->base_ok = 1;
	if ((hb = host_copy(b->dwb, wsz * e)))
		w->cpu_dw = check_wgrad_cpu(s, o, b, scale, bias, hb);
	f->stats = NULL;
	last_dnn_error[0] = '\0';
	if (!fz_setup(f, t, s, o, b, ws, 1, FZ_WGRAD)) {
		w->st = ST_UNSUPPORTED;
		snprintf(w->why, sizeof w->why, "no engine: %.400s",
			 last_dnn_error[0] ? last_dnn_error : "heuristics returned none");
		goto out;
	}
	w->variant = f->variant;
	w->heur = f->heur;
	w->engine = f->engine;
	w->rtc = f->rtc;
	w->tensor_core = f->tensor_core;
	w->tried_cfgs = f->tried_cfgs;
	w->finalized = f->finalized;
	w->ws = f->ws_bytes;
	w->fused_ms = time_median(t, fz_run, f, o->warmup, o->iters);
	if (w->fused_ms < 0 || !CUDA_OK(cudaMemsetAsync(b->dwf, 0, wsz * e, t->st)) || !fz_run(f) ||
	    !CUDA_OK(cudaStreamSynchronize(t->st))) {
		snprintf(w->why, sizeof w->why, "fused run failed: %.400s", last_dnn_error);
		goto out;
	}
	w->st = ST_OK;
	if (hb && (hf = host_copy(b->dwf, wsz * e)))
		w->err_dw = rel_err_host(hf, hb, wsz, o->dtype);
	w->pass = w->err_dw >= 0 && w->err_dw < tol_for(o->dtype) && w->cpu_dw < tol_for(o->dtype);
out:
	free(hb);
	free(hf);
	fz_free(f);
}

/* The baseline's dz at sampled points (o->samples / 8) against a double-precision CPU
 * data gradient with the ReLU mask of the rounded activation; -1 when not run. */
static double check_dgrad_cpu(const struct conv_shape *s, const struct opts *o, const struct bufs *b,
			      const float *scale, const float *bias, const void *hdz)
{
	enum fb_dtype d = o->dtype;
	int p = shape_out(s), pad = s->r / 2, samples = o->samples / 8;
	size_t e = dtype_bytes(d), xs = (size_t)o->batch * s->hw * s->hw * s->c, ys = (size_t)o->batch * p * p * s->k;
	size_t wsz = (size_t)s->k * s->r * s->r * s->c;
	void *hx = NULL, *hdy = NULL, *hw = NULL;
	double num = 0, den = 0, res = -1;
	uint64_t z = 0xD1B54A32D192ED03ull;
	if (samples == 0 || !(hx = host_copy(b->x, xs * e)) || !(hdy = host_copy(b->yb, ys * e)) ||
	    !(hw = host_copy(b->w, wsz * e)))
		goto out;
	for (int t = 0; t < samples; t++) {
		z ^= z << 13, z ^= z >> 7, z ^= z << 17;
		size_t i = (size_t)(z % xs);
		int c = (int)(i % s->c), iw = (int)(i / s->c % s->hw), ih = (int)(i / s->c / s->hw % s->hw);
		int n = (int)(i / s->c / s->hw / s->hw);
		float a = fmaf((float)host_get(hx, i, d), scale[c], bias[c]);
		double acc = 0;
		for (int u = 0; u < s->r; u++)
			for (int v = 0; v < s->r; v++) {
				int oh = ih + pad - u, ow = iw + pad - v, pp, q;
				if (oh < 0 || ow < 0 || oh % s->stride || ow % s->stride)
					continue;
				pp = oh / s->stride, q = ow / s->stride;
				if (pp >= p || q >= p)
					continue;
				for (int k = 0; k < s->k; k++)
					acc += host_get(hdy, (((size_t)n * p + pp) * p + q) * s->k + k, d) *
					       host_get(hw, (((size_t)k * s->r + u) * s->r + v) * s->c + c, d);
			}
		if (!(host_round(a > 0.0f ? a : 0.0f, d) > 0.0f))
			acc = 0;
		double g = host_get(hdz, i, d);
		num += (g - acc) * (g - acc);
		den += acc * acc;
	}
	res = den > 0 ? sqrt(num / den) : sqrt(num);
out:
	free(hx);
	free(hdy);
	free(hw);
	return res;
}

/* The data-gradient pass of shape s: dy random in yb. Baseline: cudnnConvolutionBackwardData
 * then the own ReLU backward with the mask from the stored activation. Fused: dgrad with
 * the ReLU backward in its epilogue, the mask first from z through scale and bias (what a
 * fused forward pass leaves), else from the stored activation. */
static void bench_dgrad(struct dg_result *d, const struct conv_shape *s, const struct opts *o, struct timer *t,
			struct fused *f, struct base *base, struct bufs *b, void *ws, const float *scale,
			const float *bias)
{
	size_t e = dtype_bytes(o->dtype), xs = base->m_in * s->c, ys = base->m_out * s->k;
	void *hb = NULL, *hf = NULL;
	d->st = ST_ERROR;
	if (!CUDA_OK(cudaMalloc(&b->da, xs * e)) || !CUDA_OK(cudaMalloc(&b->dzb, xs * e)) ||
	    !CUDA_OK(cudaMalloc(&b->dzf, xs * e)) || !CUDA_OK(fb_fill(b->yb, o->dtype, ys, 4, -1.0f, 1.0f, t->st)) ||
	    !base_sbr(base) || !CUDA_OK(cudaStreamSynchronize(t->st)) || !base_dgrad_setup(base, s, o->ws_bytes)) {
		snprintf(d->why, sizeof d->why, "baseline data gradient failed: %.400s", last_dnn_error);
		return;
	}
	d->dgrad_ms = time_median(t, base_dgrad, base, o->warmup, o->iters);
	d->drelu_ms = time_median(t, base_drelu, base, o->warmup, o->iters);
	d->base_ms = time_median(t, base_dgrad_drelu, base, o->warmup, o->iters);
	if (d->dgrad_ms < 0 || d->drelu_ms < 0 || d->base_ms < 0 || !base_dgrad_drelu(base) ||
	    !CUDA_OK(cudaStreamSynchronize(t->st))) {
		snprintf(d->why, sizeof d->why, "baseline data gradient run failed");
		return;
	}
	d->base_ok = 1;
	if ((hb = host_copy(b->dzb, xs * e)))
		d->cpu_dz = check_dgrad_cpu(s, o, b, scale, bias, hb);
	f->stats = NULL;
	last_dnn_error[0] = '\0';
	d->mask_from_z = 1;
	if (!fz_setup(f, t, s, o, b, ws, 1, FZ_DGRAD)) {
		d->mask_from_z = 0;
		if (!fz_setup(f, t, s, o, b, ws, 0, FZ_DGRAD)) {
			d->st = ST_UNSUPPORTED;
			snprintf(d->why, sizeof d->why, "no engine: %.400s",
				 last_dnn_error[0] ? last_dnn_error : "heuristics returned none");
			goto out;
		}
	}
	d->variant = f->variant;
	d->heur = f->heur;
	d->engine = f->engine;
	d->rtc = f->rtc;
	d->tensor_core = f->tensor_core;
	d->tried_cfgs = f->tried_cfgs;
	d->finalized = f->finalized;
	d->ws = f->ws_bytes;
	d->fused_ms = time_median(t, fz_run, f, o->warmup, o->iters);
	if (d->fused_ms < 0 || !CUDA_OK(cudaMemsetAsync(b->dzf, 0, xs * e, t->st)) || !fz_run(f) ||
	    !CUDA_OK(cudaStreamSynchronize(t->st))) {
		snprintf(d->why, sizeof d->why, "fused run failed: %.400s", last_dnn_error);
		goto out;
	}
	d->st = ST_OK;
	if (hb && (hf = host_copy(b->dzf, xs * e)))
		d->err_dz = rel_err_host(hf, hb, xs, o->dtype);
	d->pass = d->err_dz >= 0 && d->err_dz < tol_for(o->dtype) && d->cpu_dz < tol_for(o->dtype);
out:
	free(hb);
	free(hf);
	fz_free(f);
}

static void bench_shape(struct result *r, const struct opts *o, cudnnHandle_t h, struct timer *t, void *ws)
{
	const struct conv_shape *s = r->s;
	int p = shape_out(s), prologue = strcmp(s->input, "image") != 0;
	size_t ys = (size_t)o->batch * p * p * s->k;
	struct bufs b;
	struct base base = { .h = h, .st = t->st, .ws = ws, .b = &b, .c = s->c, .k = s->k, .prologue = prologue,
			     .dtype = o->dtype };
	struct fused *f = calloc(1, sizeof *f);
	float *scale = malloc((size_t)s->c * sizeof *scale), *bias = malloc((size_t)s->c * sizeof *bias);
	void *hyb = NULL;
	base.m_in = (size_t)o->batch * s->hw * s->hw;
	base.m_out = (size_t)o->batch * p * p;
	r->wg.st = ST_SKIPPED;
	snprintf(r->wg.why, sizeof r->wg.why, "not run (the forward baseline failed)");
	r->wg.err_dw = r->wg.cpu_dw = -1;
	r->wg.engine = -1;
	r->dg.st = ST_SKIPPED;
	snprintf(r->dg.why, sizeof r->dg.why, "not run (the forward baseline failed)");
	r->dg.err_dz = r->dg.cpu_dz = -1;
	r->dg.engine = -1;
	r->st = ST_ERROR;
	r->cpu_conv = r->cpu_stats = r->err_y = r->err_sum = r->err_sq = -1;
	r->engine = -1;
	if (!f || !scale || !bias) {
		snprintf(r->why, sizeof r->why, "out of host memory");
		goto out;
	}
	f->h = h;
	f->st = t->st;
	if (!alloc_bufs(&b, s, o)) {
		snprintf(r->why, sizeof r->why, "device allocation failed (batch too large?)");
		goto out_bufs;
	}
	if (!fill_inputs(&b, s, o, scale, bias, t->st)) {
		snprintf(r->why, sizeof r->why, "filling the inputs failed");
		goto out_bufs;
	}

	/* Baseline: the activated input is made once before Find, which reads it. */
	if (!base_sbr(&base) || !CUDA_OK(cudaStreamSynchronize(t->st)) || !base_setup(&base, s, o->batch, o->ws_bytes)) {
		snprintf(r->why, sizeof r->why, "baseline convolution failed: %.400s", last_dnn_error);
		goto out_base;
	}
	r->sbr_ms = prologue ? time_median(t, base_sbr, &base, o->warmup, o->iters) : 0.0f;
	r->conv_ms = time_median(t, base_conv, &base, o->warmup, o->iters);
	r->stats_ms = time_median(t, base_stats, &base, o->warmup, o->iters);
	r->base_ms = time_median(t, base_all, &base, o->warmup, o->iters);
	if (r->sbr_ms < 0 || r->conv_ms < 0 || r->stats_ms < 0 || r->base_ms < 0 || !base_all(&base) ||
	    !CUDA_OK(cudaStreamSynchronize(t->st))) {
		snprintf(r->why, sizeof r->why, "baseline run failed");
		goto out_base;
	}
	r->base_ok = 1;
	if ((hyb = host_copy(b.yb, ys * dtype_bytes(o->dtype))))
		check_baseline_cpu(r, o, &b, prologue, scale, bias, hyb);

	bench_fused_fwd(r, o, t, f, &b, ws, prologue, hyb);
	free(hyb);
	hyb = NULL;
	if (o->wgrad && prologue)
		bench_wgrad(&r->wg, r->s, o, t, f, &base, &b, ws, scale, bias);
	else
		snprintf(r->wg.why, sizeof r->wg.why, "%s", prologue ? "not asked for" : "no prologue (stem)");
	/* The stem's data gradient (towards the image) is never computed in training. */
	if (o->dgrad && prologue)
		bench_dgrad(&r->dg, r->s, o, t, f, &base, &b, ws, scale, bias);
	else
		snprintf(r->dg.why, sizeof r->dg.why, "%s", prologue ? "not asked for" : "not needed (stem)");
out_base:
	base_destroy(&base);
out_bufs:
	bufs_free(&b);
out:
	free(hyb);
	free(f);
	free(scale);
	free(bias);
}

/* ---- report ------------------------------------------------------------------------ */

static void print_row_header(void)
{
	printf("%-20s %3s %8s %8s %8s %8s %8s %7s %7s %8s %8s %8s %8s  %s\n", "shape", "n", "sbr_ms", "conv_ms",
	       "stats_ms", "base_ms", "fused_ms", "speedup", "TFLOP/s", "err_y", "err_sum", "err_sq", "check",
	       "engine");
}

static void print_row(const struct result *r, int batch)
{
	const struct conv_shape *s = r->s;
	if (!r->base_ok) {
		printf("%-20s %3d  baseline failed: %s\n", s->name, s->count, r->why);
		return;
	}
	printf("%-20s %3d %8.3f %8.3f %8.3f %8.3f ", s->name, s->count, r->sbr_ms, r->conv_ms, r->stats_ms,
	       r->base_ms);
	if (r->st != ST_OK) {
		printf("%8s %7s %7s %8s %8s %8s %8s  %s\n", "-", "-", "-", "-", "-", "-",
		       r->st == ST_UNSUPPORTED ? "unsup" : "error", r->why);
		return;
	}
	printf("%8.3f %6.2fx %7.1f %8.1e %8.1e %8.1e %8s  #%lld%s%s (%s; heur %s)\n", r->fused_ms,
	       r->base_ms / r->fused_ms, flops(s, batch) / (r->fused_ms * 1e9), r->err_y, r->err_sum, r->err_sq,
	       r->pass ? "PASS" : "FAIL", (long long)r->engine, r->rtc ? " rtc" : "", r->tensor_core ? " tc" : "",
	       r->variant, r->heur);
}

static void print_wg_row(const struct wg_result *w, int wgrad_asked)
{
	if (!wgrad_asked || (w->st == ST_SKIPPED && !w->base_ok)) {
		if (wgrad_asked)
			printf("  %-18s wgrad: %s\n", "", w->why);
		return;
	}
	if (!w->base_ok) {
		printf("  %-18s wgrad: %s\n", "", w->why);
		return;
	}
	printf("  %-18s wgrad: stored act %.3f ms, sbr+wgrad %.3f ms, ", "", w->conv_ms, w->sbr_conv_ms);
	if (w->st != ST_OK) {
		printf("fused %s: %s (baseline vs CPU %.1e)\n", w->st == ST_UNSUPPORTED ? "unsupported" : "error",
		       w->why, w->cpu_dw);
		return;
	}
	printf("fused %.3f ms (%.2fx of stored, %.2fx of sbr+wgrad), err_dw %.1e %s, baseline vs CPU %.1e, "
	       "#%lld%s%s (%s; heur %s)\n",
	       w->fused_ms, w->conv_ms / w->fused_ms, w->sbr_conv_ms / w->fused_ms, w->err_dw,
	       w->pass ? "PASS" : "FAIL", w->cpu_dw, (long long)w->engine, w->rtc ? " rtc" : "",
	       w->tensor_core ? " tc" : "", w->variant, w->heur);
}

static void print_dg_row(const struct dg_result *d, int asked)
{
	if (!asked)
		return;
	if (!d->base_ok) {
		printf("  %-18s dgrad: %s\n", "", d->why);
		return;
	}
	printf("  %-18s dgrad: dgrad %.3f ms + drelu %.3f ms = %.3f ms, ", "", d->dgrad_ms, d->drelu_ms, d->base_ms);
	if (d->st != ST_OK) {
		printf("fused %s: %s (baseline vs CPU %.1e)\n", d->st == ST_UNSUPPORTED ? "unsupported" : "error",
		       d->why, d->cpu_dz);
		return;
	}
	printf("fused %.3f ms (%.2fx), mask from %s, err_dz %.1e %s, baseline vs CPU %.1e, #%lld%s%s (%s; heur %s)\n",
	       d->fused_ms, d->base_ms / d->fused_ms, d->mask_from_z ? "z*scale+bias" : "stored act", d->err_dz,
	       d->pass ? "PASS" : "FAIL", d->cpu_dz, (long long)d->engine, d->rtc ? " rtc" : "",
	       d->tensor_core ? " tc" : "", d->variant, d->heur);
}

int main(int argc, char **argv)
{
	struct opts o;
	struct result res[N_SHAPES];
	struct timer t = { 0 };
	struct cudaDeviceProp prop;
	cudnnHandle_t h = NULL;
	void *ws = NULL;
	int rc = parse_args(argc, argv, &o), first, last, n_run = 0, sticky = 0;
	if (rc <= 0)
		return rc < 0 ? 2 : 0;
	first = o.shape < 0 ? 0 : o.shape;
	last = o.shape < 0 ? N_SHAPES - 1 : o.shape;
	memset(res, 0, sizeof res);

	if (!CUDA_OK(cudaSetDevice(0)) || !CUDA_OK(cudaGetDeviceProperties(&prop, 0)))
		return 1;
	printf("fusion_bench: %s (sm_%d%d, %d SMs), cuDNN %zu (built against %d), CUDA runtime %zu\n", prop.name,
	       prop.major, prop.minor, prop.multiProcessorCount, cudnnGetVersion(), CUDNN_VERSION,
	       cudnnGetCudartVersion());
	printf("batch %d, %s NHWC, %d warm-up + %d timed runs (median), %d plans tried, workspace limit %zu MiB, "
	       "tolerance %.0e\n\n",
	       o.batch, dtype_name(o.dtype), o.warmup, o.iters, o.plans, o.ws_bytes >> 20, tol_for(o.dtype));
	/* A blocking stream: the plain cudaMemcpy calls (legacy default stream) stay ordered
	 * with the work on it. */
	if (!DNN_OK(cudnnCreate(&h)) || !CUDA_OK(cudaStreamCreate(&t.st)) ||
	    !DNN_OK(cudnnSetStream(h, t.st)) || !CUDA_OK(cudaEventCreate(&t.t0)) || !CUDA_OK(cudaEventCreate(&t.t1)) ||
	    !CUDA_OK(cudaMalloc(&ws, o.ws_bytes ? o.ws_bytes : 256))) {
		rc = 1;
		goto out;
	}

	print_row_header();
	for (int i = first; i <= last; i++) {
		struct result *r = &res[i];
		cudaError_t e;
		if (o.match && !strstr(shapes[i].name, o.match))
			continue;
		r->s = &shapes[i];
		if (sticky) {
			r->st = ST_SKIPPED;
			continue;
		}
		bench_shape(r, &o, h, &t, ws);
		n_run++;
		print_row(r, o.batch);
		if (r->base_ok)
			printf("  %-18s baseline vs CPU: conv %.1e at %d points, stats %.1e; fused: %d configurations "
			       "tried, %d finalized, workspace %lld B\n",
			       "", r->cpu_conv, o.samples, r->cpu_stats, r->tried_cfgs, r->finalized,
			       (long long)r->fused_ws);
		print_wg_row(&r->wg, o.wgrad);
		print_dg_row(&r->dg, o.dgrad);
		fflush(stdout);
		/* A sticky error (an illegal address) spoils the context: stop measuring. */
		e = cudaDeviceSynchronize();
		if (e != cudaSuccess && cudaDeviceSynchronize() != cudaSuccess) {
			fprintf(stderr, "fusion_bench: the CUDA context is broken (%s): remaining shapes skipped\n",
				cudaGetErrorString(e));
			sticky = 1;
		}
	}

	/* Summary: network sums weight each shape by its count in ResNet-50. */
	{
		double base_all_ms = 0, base_cov = 0, fused_cov = 0, wg_stored = 0, wg_sbr = 0, wg_fused = 0;
		double dg_base = 0, dg_fused = 0;
		int dg_ok = 0, dg_pass = 0, dg_unsup = 0, dg_err = 0;
		int n_ok = 0, n_pass = 0, n_unsup = 0, n_err = 0, wg_ok = 0, wg_pass = 0, wg_unsup = 0, wg_err = 0;
		printf("\nsummary (%s, batch %d):\n", dtype_name(o.dtype), o.batch);
		for (int i = first; i <= last; i++) {
			const struct result *r = &res[i];
			if (!r->s) /* not selected */
				continue;
			if (r->base_ok)
				base_all_ms += r->s->count * r->base_ms;
			if (r->st == ST_OK) {
				n_ok++;
				if (r->pass) {
					n_pass++;
					base_cov += r->s->count * r->base_ms;
					fused_cov += r->s->count * r->fused_ms;
				}
			} else if (r->st == ST_UNSUPPORTED)
				n_unsup++;
			else
				n_err++;
			if (r->wg.st == ST_OK) {
				wg_ok++;
				if (r->wg.pass) {
					wg_pass++;
					wg_stored += r->s->count * r->wg.conv_ms;
					wg_sbr += r->s->count * r->wg.sbr_conv_ms;
					wg_fused += r->s->count * r->wg.fused_ms;
				}
			} else if (r->wg.st == ST_UNSUPPORTED)
				wg_unsup++;
			else if (r->wg.st == ST_ERROR)
				wg_err++;
			if (r->dg.st == ST_OK) {
				dg_ok++;
				if (r->dg.pass) {
					dg_pass++;
					dg_base += r->s->count * r->dg.base_ms;
					dg_fused += r->s->count * r->dg.fused_ms;
				}
			} else if (r->dg.st == ST_UNSUPPORTED)
				dg_unsup++;
			else if (r->dg.st == ST_ERROR)
				dg_err++;
			printf("  %-20s fwd: %-40s wgrad: %s\n", r->s->name,
			       r->st == ST_OK ? (r->pass ? "fused, numbers match" : "fused, NUMBERS DIFFER: not counted")
			       : r->st == ST_UNSUPPORTED ? "not supported by any engine"
			       : r->st == ST_SKIPPED	 ? "skipped (broken context)"
							 : "error",
			       r->wg.st == ST_OK ? (r->wg.pass ? "fused, numbers match" : "fused, NUMBERS DIFFER")
			       : r->wg.st == ST_UNSUPPORTED ? "not supported by any engine"
			       : r->wg.st == ST_SKIPPED	    ? r->wg.why
							    : "error");
			printf("  %-20s dgrad: %s\n", "",
			       r->dg.st == ST_OK ? (r->dg.pass ? "fused, numbers match" : "fused, NUMBERS DIFFER")
			       : r->dg.st == ST_UNSUPPORTED ? "not supported by any engine"
			       : r->dg.st == ST_SKIPPED	    ? r->dg.why
							    : "error");
		}
		printf("  shapes run %d: fused %d (numbers match %d), unsupported %d, errors or skipped %d\n", n_run,
		       n_ok, n_pass, n_unsup, n_err);
		printf("  baseline, all forward convolutions with their BN apply and statistics, weighted by count: "
		       "%.3f ms\n",
		       base_all_ms);
		if (n_pass)
			printf("  where fused and matching: baseline %.3f ms, fused %.3f ms, speed-up %.2fx, saving %.3f "
			       "ms per forward pass\n",
			       base_cov, fused_cov, base_cov / fused_cov, base_cov - fused_cov);
		else
			printf("  no shape fused with matching numbers: no speed-up to report\n");
		if (o.wgrad) {
			printf("  wgrad: fused %d (numbers match %d), unsupported %d, errors %d\n", wg_ok, wg_pass,
			       wg_unsup, wg_err);
			if (wg_pass)
				printf("  wgrad where fused and matching, weighted by count: stored activation %.3f ms, "
				       "sbr+wgrad %.3f ms, fused %.3f ms (%.2fx of stored, %.2fx of sbr+wgrad)\n",
				       wg_stored, wg_sbr, wg_fused, wg_stored / wg_fused, wg_sbr / wg_fused);
		}
		if (o.dgrad) {
			printf("  dgrad: fused %d (numbers match %d), unsupported %d, errors %d\n", dg_ok, dg_pass,
			       dg_unsup, dg_err);
			if (dg_pass)
				printf("  dgrad + ReLU backward where fused and matching, weighted by count: baseline %.3f "
				       "ms, fused %.3f ms (%.2fx)\n",
				       dg_base, dg_fused, dg_base / dg_fused);
		}
		rc = n_err || wg_err || dg_err ? 1 : 0;
	}
out:
	if (ws)
		cudaFree(ws);
	if (t.t0)
		cudaEventDestroy(t.t0);
	if (t.t1)
		cudaEventDestroy(t.t1);
	if (t.st)
		cudaStreamDestroy(t.st);
	if (h)
		cudnnDestroy(h);
	return rc;
}
