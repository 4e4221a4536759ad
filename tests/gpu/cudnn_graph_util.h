/* What the cuDNN graph API probes share (test_cudnn_graph.c, test_cudnn_graph_bwd.c):
 * the layer shapes, element counts, the legacy path's arguments for a shape, the host
 * convolution, error measures, 16-bit device copies and the median of timings. */
#ifndef GP_TESTS_GPU_CUDNN_GRAPH_UTIL_H
#define GP_TESTS_GPU_CUDNN_GRAPH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "harness.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/ops.h"

/* ResNet-50's first 3x3 layer (64 -> 64 channels, pad 1) at batch 256, 56x56, and a
 * small copy of it the host can check in full. */
#define CG_SMALL ((struct cg_conv_shape){ .n = 2, .c = 64, .h = 10, .w = 10, .k = 64, .r = 3, .s = 3, \
					  .pad = 1, .stride = 1 })
#define CG_REAL ((struct cg_conv_shape){ .n = 256, .c = 64, .h = 56, .w = 56, .k = 64, .r = 3, .s = 3, \
					 .pad = 1, .stride = 1 })
/* Timed runs per median. */
#define CG_REPS 21

static inline struct conv2d_args cg_legacy_args(const struct cg_conv_shape *s)
{
	struct conv2d_args a = { .n = (int)s->n, .c_in = (int)s->c, .h_in = (int)s->h, .w_in = (int)s->w,
				 .c_out = (int)s->k, .kh = (int)s->r, .kw = (int)s->s, .stride = (int)s->stride,
				 .pad = (int)s->pad, .groups = 1, .has_bias = 0 };
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
	return (size_t)(s->k * s->c * s->r * s->s);
}

/* y = conv(x, w) in double, NHWC and KRSC; then per-channel sum and sum of squares of y
 * (sums may be NULL). */
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

#endif
