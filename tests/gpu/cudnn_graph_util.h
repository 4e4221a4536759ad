/* What the cuDNN graph API probes share (test_cudnn_graph.c, test_cudnn_graph_bwd.c,
 * test_cudnn_graph_res.c, test_cudnn_graph_dw.c): the layer shapes, element counts, the
 * legacy path's arguments for a shape, the host convolution, error measures, 16-bit
 * device copies and random inputs, a plan with its printed line, and timed comparisons. */
#ifndef GP_TESTS_GPU_CUDNN_GRAPH_UTIL_H
#define GP_TESTS_GPU_CUDNN_GRAPH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "core/error.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/ops.h"

/* ResNet-50's first 3x3 layer (64 -> 64 channels, pad 1) at batch 256, 56x56, and a
 * small copy of it the host can check in full. */
#define CG_SMALL ((struct cg_conv_shape){ .n = 2, .c = 64, .h = 10, .w = 10, .k = 64, .r = 3, .s = 3, \
					  .pad = 1, .stride = 1 })
#define CG_REAL ((struct cg_conv_shape){ .n = 256, .c = 64, .h = 56, .w = 56, .k = 64, .r = 3, .s = 3, \
					 .pad = 1, .stride = 1 })
/* The residual forward's shape: the first 1x1 of a layer-1 block after another block
 * (256 -> 64 channels at 56x56), whose input is relu(bn(conv3) + shortcut). */
#define CG_RES_REAL ((struct cg_conv_shape){ .n = 256, .c = 256, .h = 56, .w = 56, .k = 64, .r = 1, .s = 1, \
					     .pad = 0, .stride = 1 })
#define CG_RES_SMALL ((struct cg_conv_shape){ .n = 2, .c = 64, .h = 10, .w = 10, .k = 64, .r = 1, .s = 1, \
					      .pad = 0, .stride = 1 })

/* A depthwise 3x3 layer of MobileNetV2 (pad 1, groups = channels) on an h x h input. */
#define CG_DW(n_, c_, h_, stride_) ((struct cg_conv_shape){ .n = (n_), .c = (c_), .h = (h_), .w = (h_), \
							    .k = (c_), .r = 3, .s = 3, .pad = 1,            \
							    .stride = (stride_), .groups = (c_) })

/* Timed runs per median. */
#define CG_REPS 21

static inline struct conv2d_args cg_legacy_args(const struct cg_conv_shape *s)
{
	struct conv2d_args a = { .n = (int)s->n, .c_in = (int)s->c, .h_in = (int)s->h, .w_in = (int)s->w,
				 .c_out = (int)s->k, .kh = (int)s->r, .kw = (int)s->s, .stride = (int)s->stride,
				 .pad = (int)s->pad, .groups = (int)cg_conv_groups(s), .has_bias = 0 };
	a.h_out = conv_out_size(a.h_in, a.kh, a.stride, a.pad);
	a.w_out = conv_out_size(a.w_in, a.kw, a.stride, a.pad);
	return a;
}

static inline size_t cg_x_count(const struct cg_conv_shape *s)
{
	return (size_t)(s->n * s->c * s->h * s->w);
}

static inline size_t cg_y_count(const struct cg_conv_shape *s)
{
	return (size_t)(s->n * s->k * cg_conv_out(s->h, s->r, s->pad, s->stride) *
			cg_conv_out(s->w, s->s, s->pad, s->stride));
}

static inline size_t cg_w_count(const struct cg_conv_shape *s)
{
	return (size_t)(s->k * cg_conv_w_c(s) * s->r * s->s);
}

/* y = conv(x, w) in double, NHWC and KRSC (ungrouped shapes only); then per-channel sum
 * and sum of squares of y (sums may be NULL). */
static inline void cg_conv_host(const struct cg_conv_shape *s, const float *x, const float *w, float *y,
				double *sum, double *sqsum)
{
	int64_t p = cg_conv_out(s->h, s->r, s->pad, s->stride), q = cg_conv_out(s->w, s->s, s->pad, s->stride);
	for (int64_t n = 0; n < s->n; n++)
		for (int64_t oh = 0; oh < p; oh++)
			for (int64_t ow = 0; ow < q; ow++)
				for (int64_t k = 0; k < s->k; k++) {
					double acc = 0;
					for (int64_t r = 0; r < s->r; r++) {
						int64_t ih = oh * s->stride - s->pad + r;
						if (ih < 0 || ih >= s->h)
							continue;
						for (int64_t t = 0; t < s->s; t++) {
							int64_t iw = ow * s->stride - s->pad + t;
							if (iw < 0 || iw >= s->w)
								continue;
							const float *xp = x + ((n * s->h + ih) * s->w + iw) * s->c;
							const float *wp = w + ((k * s->r + r) * s->s + t) * s->c;
							for (int64_t c = 0; c < s->c; c++)
								acc += (double)xp[c] * wp[c];
						}
					}
					y[((n * p + oh) * q + ow) * s->k + k] = (float)acc;
				}
	if (!sum)
		return;
	for (int64_t k = 0; k < s->k; k++)
		sum[k] = sqsum[k] = 0;
	for (size_t i = 0; i < cg_y_count(s); i++) {
		double v = y[i];
		sum[i % (size_t)s->k] += v;
		sqsum[i % (size_t)s->k] += v * v;
	}
}

/* The largest difference over the largest reference value (an element's relative
 * error means little where the reference is near zero). */
static inline double cg_max_rel(const float *a, const float *b, size_t n)
{
	double d = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]);
		if (isnan(e))
			return NAN;
		if (e > d)
			d = e;
		if (fabs(b[i]) > m)
			m = fabs(b[i]);
	}
	return m > 0 ? d / m : d;
}

/* The harness's 16-bit type of a cuDNN one (bf16 otherwise). */
static inline enum gp_dtype cg_htype(cudnnDataType_t dt)
{
	return dt == CUDNN_DATA_HALF ? GP_F16 : GP_BF16;
}

/* A device copy in dt (float, fp16 or bf16) of host values already rounded to it. */
static inline void *cg_dev_typed(struct gpu *g, cudnnDataType_t dt, const float *h, size_t n)
{
	if (dt == CUDNN_DATA_FLOAT)
		return dev_from(g, h, n);
	void *d = dev_bytes(g, n * 2);
	put_h(g, cg_htype(dt), d, h, n);
	return d;
}

/* Device values of type dt back to host floats. */
static inline float *cg_down_typed(struct gpu *g, cudnnDataType_t dt, const void *d, size_t n)
{
	return dt == CUDNN_DATA_FLOAT ? down(g, d, n) : down_h(g, cg_htype(dt), d, n);
}

/* Host values rounded to dt (in place; float stays). */
static inline void cg_round_typed(cudnnDataType_t dt, float *h, size_t n)
{
	if (dt != CUDNN_DATA_FLOAT)
		for (size_t i = 0; i < n; i++)
			h[i] = h_round(cg_htype(dt), h[i]);
}

static inline int cg_cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static inline float cg_median(float *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cg_cmp_f);
	return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* The plan of a built graph (rc: the builder's result), with one line printed either
 * way: the engine taken, or why none (heuristics A and FALLBACK, cuDNN's message). 0:
 * graph and plan are the caller's to destroy; otherwise both are gone. */
static inline int plan_line(const char *what, const char *name, int rc, struct cg_graph *gr, struct cg_plan *p)
{
	char desc[200];
	memset(p, 0, sizeof(*p));
	if (rc == 0)
		rc = cg_plan_build(gr, p);
	if (rc < 0) {
		printf("      %s, %s: %s\n", what, name, gp_errmsg());
		cg_graph_destroy(gr);
		return rc;
	}
	cg_plan_describe(p, desc, sizeof(desc));
	printf("      %s, %s: %s\n", what, name, desc);
	return 0;
}

static inline void *plan_ws(struct gpu *g, const struct cg_plan *p)
{
	return p->ws_bytes > 0 ? dev_bytes(g, (size_t)p->ws_bytes) : NULL;
}

/* One step of a timed comparison: enqueues its work on the context's stream. */
typedef int (*step_fn)(struct gpu *g, void *arg);

/* Medians (ms) of a and of b, run alternately CG_REPS times after three warm-up rounds,
 * timed by CUDA events on the context's stream. */
static inline int time_two(struct gpu *g, step_fn a, void *aa, step_fn b, void *ba, float *ma, float *mb)
{
	cudaEvent_t ev[3];
	float ta[CG_REPS], tb[CG_REPS];
	int n_ev = 0, rc = 0;
	cudaStream_t st = g->ctx->stream;
	for (; n_ev < 3; n_ev++)
		if (cudaEventCreate(&ev[n_ev]) != cudaSuccess)
			break;
	if (n_ev < 3)
		rc = gp_error(GP_EDEVICE, "cudaEventCreate failed");
	for (int i = -3; i < CG_REPS && rc == 0; i++) {
		rc = CUDA_CHECK(cudaEventRecord(ev[0], st));
		if (rc == 0)
			rc = a(g, aa);
		if (rc == 0)
			rc = CUDA_CHECK(cudaEventRecord(ev[1], st));
		if (rc == 0)
			rc = b(g, ba);
		if (rc == 0)
			rc = CUDA_CHECK(cudaEventRecord(ev[2], st));
		if (rc == 0)
			rc = CUDA_CHECK(cudaEventSynchronize(ev[2]));
		if (rc == 0 && i >= 0)
			rc = CUDA_CHECK(cudaEventElapsedTime(&ta[i], ev[0], ev[1]));
		if (rc == 0 && i >= 0)
			rc = CUDA_CHECK(cudaEventElapsedTime(&tb[i], ev[1], ev[2]));
	}
	for (int i = 0; i < n_ev; i++)
		cudaEventDestroy(ev[i]);
	if (rc == 0) {
		*ma = cg_median(ta, CG_REPS);
		*mb = cg_median(tb, CG_REPS);
	}
	return rc;
}

/* How time_ahead samples: samples after warm ones (at most AHEAD_MAX_SAMPLES), runs per
 * sample, and the bytes of the memset queued ahead of each. */
struct ahead_timing {
	int samples, warm, runs;
	size_t ahead_bytes;
};
#define AHEAD_MAX_SAMPLES 32

/* Median ms of one run of a and of b (b NULL: a alone, *mb = *ma): each sample t->runs
 * back-to-back runs between two events, queued behind a memset of ahead
 * (t->ahead_bytes) so that the device is still busy with it while the host enqueues the
 * runs; a and b in turns, t->warm samples first. */
static inline int time_ahead(struct gpu *g, void *ahead, const struct ahead_timing *t, step_fn a, void *aa,
			     step_fn b, void *ba, float *ma, float *mb)
{
	cudaEvent_t ev[2];
	float ts[2][AHEAD_MAX_SAMPLES];
	int n_ev = 0, rc = 0, sides = b ? 2 : 1;
	cudaStream_t st = g->ctx->stream;
	if (t->samples < 1 || t->samples > AHEAD_MAX_SAMPLES)
		return gp_error(GP_EINVAL, "time_ahead: %d samples (1 to %d)", t->samples, AHEAD_MAX_SAMPLES);
	for (; n_ev < 2; n_ev++)
		if (cudaEventCreate(&ev[n_ev]) != cudaSuccess)
			break;
	if (n_ev < 2)
		rc = gp_error(GP_EDEVICE, "cudaEventCreate failed");
	for (int i = -t->warm; i < t->samples && rc == 0; i++)
		for (int side = 0; side < sides && rc == 0; side++) {
			step_fn f = side ? b : a;
			void *arg = side ? ba : aa;
			rc = CUDA_CHECK(cudaMemsetAsync(ahead, i & 0x7f, t->ahead_bytes, st));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventRecord(ev[0], st));
			for (int r = 0; r < t->runs && rc == 0; r++)
				rc = f(g, arg);
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventRecord(ev[1], st));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventSynchronize(ev[1]));
			float ms = 0;
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
			if (rc == 0 && i >= 0)
				ts[side][i] = ms / t->runs;
		}
	for (int i = 0; i < n_ev; i++)
		cudaEventDestroy(ev[i]);
	if (rc == 0) {
		*ma = cg_median(ts[0], t->samples);
		*mb = b ? cg_median(ts[1], t->samples) : *ma;
	}
	return rc;
}

/* n 16-bit elements at d: the pool (pool_n device elements) tiled over them (the real
 * shapes take hundreds of millions of inputs). */
static inline int fill_tiled(struct gpu *g, void *d, size_t n, const void *pool, size_t pool_n)
{
	for (size_t at = 0; at < n; at += pool_n) {
		size_t k = n - at < pool_n ? n - at : pool_n;
		GP_TRY(CUDA_CHECK(cudaMemcpyAsync((char *)d + at * 2, pool, k * 2, cudaMemcpyDeviceToDevice,
						  g->ctx->stream)));
	}
	return 0;
}

/* n values spread uniformly with standard deviation sd around shift, rounded to ht:
 * the real shapes take hundreds of millions of inputs, which the harness's normal
 * draws would spend most of the suite's time on. Each call draws a new stream. */
static inline float *rand_h(struct gpu *g, enum gp_dtype ht, size_t n, double sd, double shift)
{
	static uint64_t calls;
	float *p = host_f(g, n);
	uint64_t st = 0x9e3779b97f4a7c15ull * (++calls) ^ 0xd1b54a32d192ed03ull;
	double k = sd * sqrt(3.0) / 2147483648.0;
	for (size_t i = 0; i < n; i++) {
		st ^= st << 13;
		st ^= st >> 7;
		st ^= st << 17;
		p[i] = h_round(ht, (float)((double)(int32_t)(st >> 32) * k + shift));
	}
	return p;
}

static inline double rel_f(const float *a, const float *b, size_t n)
{
	return rel_err_norm_f32(a, b, n);
}

/* Per-channel doubles as floats (host). */
static inline float *to_f(struct gpu *g, const double *d, size_t n)
{
	float *f = host_f(g, n);
	for (size_t i = 0; i < n; i++)
		f[i] = (float)d[i];
	return f;
}

static inline const char *dt_name(cudnnDataType_t dt)
{
	return dt == CUDNN_DATA_HALF ? "fp16" : dt == CUDNN_DATA_BFLOAT16 ? "bf16" : "float";
}

#endif
