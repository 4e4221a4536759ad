/* The GPU tests' harness: a device context per test with every buffer it allocates,
 * host/device copies, random inputs, and 16-bit values on the host. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* 0: ready; 1: no device (why says so); -1: the context could not be made. */
int gpu_open(struct gpu *g, uint64_t seed, uint64_t stream)
{
	char reason[256];
	memset(g, 0, sizeof(*g));
	rng_seed(&g->rng, seed, stream);
	if (!cuda_available(reason, sizeof(reason))) {
		snprintf(g->why, sizeof(g->why), "no CUDA device: %s", reason);
		return 1;
	}
	return cuda_ctx_create(&g->ctx, 0, &g->mem) < 0 ? -1 : 0;
}

/* Free the buffers allocated after the marks. */
void gpu_release(struct gpu *g, int dev_mark, int host_mark)
{
	for (int i = g->n_dev - 1; i >= dev_mark; i--)
		cuda_free(g->ctx, g->dev[i], g->dev_bytes[i], MEM_OTHER);
	g->n_dev = dev_mark;
	for (int i = g->n_host - 1; i >= host_mark; i--)
		free(g->host[i]);
	g->n_host = host_mark;
}

/* Frees everything and checks that the byte counts went back to zero. */
void gpu_close(struct gpu *g)
{
	gpu_release(g, 0, 0);
	CHECK_EQ_INT(g->mem.cur_bytes[MEM_OTHER], 0);
	cuda_ctx_destroy(g->ctx);
	CHECK_EQ_INT(g->mem.total_bytes, 0);
}

void poison(struct gpu *g, void *d, size_t bytes)
{
	if (d)
		CHECK_OK(CUDA_CHECK(cudaMemsetAsync(d, 0xff, bytes, g->ctx->stream)));
}

/* Device buffer of bytes, filled with 0xff (NaN as float and as both 16-bit types). */
void *dev_bytes(struct gpu *g, size_t bytes)
{
	void *p = NULL;
	if (g->n_dev == MAX_BUFS) {
		test_fail(__FILE__, __LINE__, "too many device buffers in one test");
		return NULL;
	}
	CHECK_OK(cuda_alloc(g->ctx, &p, bytes ? bytes : 1, MEM_OTHER));
	if (!p)
		return NULL;
	g->dev[g->n_dev] = p;
	g->dev_bytes[g->n_dev++] = bytes ? bytes : 1;
	poison(g, p, bytes);
	return p;
}

float *dev_f(struct gpu *g, size_t n)
{
	return dev_bytes(g, n * sizeof(float));
}

/* A test cannot go on without its host buffers, and they are small: abort if none. */
void *host_bytes(struct gpu *g, size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p || g->n_host == MAX_BUFS) {
		free(p);
		test_fail(__FILE__, __LINE__, "host allocation of %zu bytes", bytes);
		abort();
	}
	g->host[g->n_host++] = p;
	return p;
}

float *host_f(struct gpu *g, size_t n)
{
	return host_bytes(g, n * sizeof(float));
}

float *host_rand(struct gpu *g, size_t n, double scale, double shift)
{
	float *p = host_f(g, n);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(rng_normal(&g->rng) * scale + shift);
	return p;
}

void put(struct gpu *g, void *d, const void *h, size_t bytes)
{
	if (d)
		CHECK_OK(cuda_copy_h2d(g->ctx, d, h, bytes));
}

void get(struct gpu *g, void *h, const void *d, size_t bytes)
{
	if (d)
		CHECK_OK(cuda_copy_d2h(g->ctx, h, d, bytes));
}

/* On the context's stream, after what is queued there (the poison of dev_bytes, the
 * kernels): a plain device-to-device cudaMemcpy runs on the legacy stream, which a
 * non-blocking stream does not wait for, and overtook a queued poison (s26-1). */
void dev_copy(struct gpu *g, void *dst, const void *src, size_t bytes)
{
	if (dst && src)
		CHECK_OK(CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->ctx->stream)));
}

float *dev_from(struct gpu *g, const float *h, size_t n)
{
	float *d = dev_f(g, n);
	put(g, d, h, n * sizeof(float));
	return d;
}

float *down(struct gpu *g, const float *d, size_t n)
{
	float *h = host_f(g, n);
	get(g, h, d, n * sizeof(float));
	return h;
}

float *copy_f(struct gpu *g, const float *src, size_t n)
{
	float *p = host_f(g, n);
	memcpy(p, src, n * sizeof(float));
	return p;
}

/* Largest |a - b| (NaN counts as infinite), for the ops that must match exactly. */
double max_abs_diff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);
		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

double tol_for(enum gp_dtype ht)
{
	return ht == GP_BF16 ? 1e-2 : 2e-3;
}

/* --- 16-bit values on the host ----------------------------------------------------------------
 * Bit-level conversions, round to nearest even as __float2half_rn / __float2bfloat16_rn
 * (checked against GCC's _Float16 over every float when written), so the tests do not
 * depend on the host compiler's half support. */
uint32_t f_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

float bits_f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t f32_to_bf16(float f)
{
	uint32_t u = f_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN (quiet) */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

float bf16_to_f32(uint16_t h)
{
	return bits_f((uint32_t)h << 16);
}

uint16_t f32_to_f16(float f)
{
	uint32_t u = f_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u);
	if (a >= 0x477ff000u) /* 65520 and beyond round to inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: subnormal or zero, in units of 2^-24 */
		float m = bits_f(a) * 16777216.0f; /* exact: a power-of-two scale */
		return (uint16_t)(sign | (uint32_t)nearbyintf(m));
	}
	/* Normal: round the 23-bit mantissa to 10 bits (a carry moves the exponent up,
	 * which is right), then rebias the exponent from 127 to 15. */
	uint32_t r = a + 0xfffu + ((a >> 13) & 1);
	return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
	float v;
	if (e == 0)
		v = (float)m * (1.0f / 16777216.0f);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = bits_f(((e + 112) << 23) | (m << 13));
	return bits_f(f_bits(v) | sign);
}

uint16_t h_bits(enum gp_dtype ht, float f)
{
	return ht == GP_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
}

float h_val(enum gp_dtype ht, uint16_t b)
{
	return ht == GP_BF16 ? bf16_to_f32(b) : f16_to_f32(b);
}

float h_round(enum gp_dtype ht, float f)
{
	return h_val(ht, h_bits(ht, f));
}

/* Random floats already rounded to the 16-bit type. */
float *host_rand_h(struct gpu *g, enum gp_dtype ht, size_t n, double scale, double shift)
{
	float *p = host_rand(g, n, scale, shift);
	for (size_t i = 0; i < n; i++)
		p[i] = h_round(ht, p[i]);
	return p;
}

void put_h(struct gpu *g, enum gp_dtype ht, void *d, const float *h, size_t n)
{
	uint16_t *b = host_bytes(g, n * 2);
	for (size_t i = 0; i < n; i++)
		b[i] = h_bits(ht, h[i]);
	put(g, d, b, n * 2);
}

/* A 16-bit device array as floats. */
float *down_h(struct gpu *g, enum gp_dtype ht, const void *d, size_t n)
{
	uint16_t *b = host_bytes(g, n * 2);
	float *f = host_f(g, n);
	get(g, b, d, n * 2);
	for (size_t i = 0; i < n; i++)
		f[i] = h_val(ht, b[i]);
	return f;
}

struct conv2d_args dw_args(int n, int c, int h, int w, int k, int stride, int pad, int bias)
{
	struct conv2d_args a = { .n = n, .c_in = c, .h_in = h, .w_in = w, .c_out = c,
				 .kh = k, .kw = k, .stride = stride, .pad = pad, .groups = c,
				 .has_bias = bias };
	a.h_out = conv_out_size(h, k, stride, pad);
	a.w_out = conv_out_size(w, k, stride, pad);
	return a;
}

/* N,C,HW -> N,HW,C (nhwc) or back, on the host. */
static void *host_transpose(struct gpu *g, const void *src, size_t elem, int n, int c, int hw, int nhwc)
{
	char *dst = host_bytes(g, (size_t)n * c * hw * elem);
	for (int ni = 0; ni < n; ni++)
		for (int ch = 0; ch < c; ch++)
			for (int j = 0; j < hw; j++) {
				size_t a = ((size_t)ni * c + ch) * hw + j, b = ((size_t)ni * hw + j) * c + ch;
				memcpy(dst + (nhwc ? b : a) * elem, (const char *)src + (nhwc ? a : b) * elem, elem);
			}
	return dst;
}

void *host_to_nhwc(struct gpu *g, const void *src, size_t elem, int n, int c, int hw)
{
	return host_transpose(g, src, elem, n, c, hw, 1);
}

void *host_to_nchw(struct gpu *g, const void *src, size_t elem, int n, int c, int hw)
{
	return host_transpose(g, src, elem, n, c, hw, 0);
}
