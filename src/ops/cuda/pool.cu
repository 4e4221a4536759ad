/* Pooling: global average pooling and max pooling (forward with argmax, backward as a
 * gather), each behind one launcher taking the element type and layout. Float runs the
 * NCHW float kernels; fp16 and bf16 one templated source for either layout, widened to
 * float and rounded once. Reductions run in a fixed order (no atomics). */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"
}
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/eltwise.cuh"
#include "ops/cuda/bn_val.cuh"

/* === float, NCHW ========================================================================== */
/* --- global average pooling: one warp per (n, c) plane ---------------------------------- */
__global__ static void avgpool_global_fwd_kernel(size_t planes, int hw, const float *x, float *y)
{
	size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
	int lane = threadIdx.x & 31;
	/* Every lane of a warp has the same plane, so whole warps run the shuffles. */
	for (size_t plane = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; plane < planes;
	     plane += warps) {
		const float *p = x + plane * hw;
		float sum = 0.0f;
		for (int i = lane; i < hw; i += 32)
			sum += p[i];
		for (int off = 16; off > 0; off >>= 1)
			sum += __shfl_xor_sync(FULL_MASK, sum, off);
		if (lane == 0)
			y[plane] = sum / (float)hw;
	}
}

static int avgpool_global_fwd_f32(cudaStream_t s, int n, int c, int hw, const float *x, float *y)
{
	size_t planes = (size_t)n * c;
	if (!planes || hw <= 0)
		return 0;
	avgpool_global_fwd_kernel<<<grid_for(planes * 32), BLOCK, 0, s>>>(planes, hw, x, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void avgpool_global_bwd_kernel(size_t count, int hw, const float *dy, float *dx,
						 int accumulate)
{
	FOR_EACH(i, count) {
		float g = dy[i / hw] / (float)hw;
		dx[i] = accumulate ? dx[i] + g : g;
	}
}

static int avgpool_global_bwd_f32(cudaStream_t s, int n, int c, int hw, const float *dy, float *dx,
				  int accumulate)
{
	size_t count = (size_t)n * c * hw;
	if (!count)
		return 0;
	avgpool_global_bwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, hw, dy, dx, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- max pooling ------------------------------------------------------------------------ */
struct pool_k {
	int h_in, w_in, h_out, w_out, k, stride, pad;
};

/* Pixel and channel group of group g (8 channels) of an NHWC tensor of h x w pixels and
 * cg groups a pixel: 32-bit index math for the kernels that move 8 channels a thread. */
__device__ static inline void nhwc8_locate(int g, int cg, int h, int w, int *ni, int *y, int *x, int *c8)
{
	int t = g / cg;
	*c8 = g - t * cg;
	*x = t % w;
	t /= w;
	*y = t % h;
	*ni = t / h;
}

/* ResNet's pooling (3 x 3, stride 2, pad 1) backward, a 2 x 2 block of input pixels
 * (2oh, 2ow) .. (2oh + 1, 2ow + 1) at a time: only the windows (oh, ow), (oh, ow + 1),
 * (oh + 1, ow) and (oh + 1, ow + 1) (w = 0..3) cover it. The offset of the block's
 * pixel q (0..3: (0, 0), (0, 1), (1, 0), (1, 1)) in window w, -1 where w does not cover
 * it; ascending w is ascending window order. */
__device__ static inline int k3s2p1_off(int q, int w)
{
	static const signed char off[4][4] = {
		{ 4, -1, -1, -1 }, /* (0, 0): window 0 */
		{ 5, 3, -1, -1 },  /* (0, 1): windows 0, 1 */
		{ 7, -1, 1, -1 },  /* (1, 0): windows 0, 2 */
		{ 8, 6, 2, 0 },    /* (1, 1): windows 0, 1, 2, 3 */
	};
	return off[q][w];
}

static bool k3s2p1(const struct pool_args *a)
{
	return a->k == 3 && a->stride == 2 && a->pad == 1 && a->h_out == (a->h_in + 1) / 2 &&
	       a->w_out == (a->w_in + 1) / 2;
}

/* Padding never wins (PyTorch pads with -inf); ties keep the first position in
 * row-major window order. I: the index type, 32 bits when the count allows (64-bit
 * division costs more than the loads; ResNet's stem pooling was compute-bound on it). */
template <typename I>
__global__ static void maxpool_fwd_f32_kernel(I count, struct pool_k p, const float *x, float *y, uint8_t *argmax)
{
	for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < count; o += (I)gridDim.x * blockDim.x) {
		I row = o / (I)p.w_out, plane = row / (I)p.h_out;
		int ow = (int)(o - row * (I)p.w_out), oh = (int)(row - plane * (I)p.h_out);
		const float *xp = x + (size_t)plane * p.h_in * p.w_in;
		float m = -INFINITY;
		int idx = -1;
		for (int i = 0; i < p.k; i++) {
			int ih = oh * p.stride - p.pad + i;
			if (ih < 0 || ih >= p.h_in)
				continue;
			for (int j = 0; j < p.k; j++) {
				int iw = ow * p.stride - p.pad + j;
				if (iw < 0 || iw >= p.w_in)
					continue;
				float v = xp[ih * p.w_in + iw];
				if (idx < 0 || v > m) {
					m = v;
					idx = i * p.k + j;
				}
			}
		}
		y[o] = m;
		argmax[o] = (uint8_t)idx;
	}
}

/* Gather instead of scatter: each input element sums, in ascending output order, the
 * gradients of the windows that chose it, so no atomics and the CPU's order of sums. */
template <typename I>
__global__ static void maxpool_bwd_f32_kernel(I count, struct pool_k p, const float *dy, const uint8_t *argmax,
					  float *dx, int accumulate)
{
	for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (I)gridDim.x * blockDim.x) {
		I row = i / (I)p.w_in, plane = row / (I)p.h_in;
		int iw = (int)(i - row * (I)p.w_in), ih = (int)(row - plane * (I)p.h_in);
		int oh0, oh1, ow0, ow1;
		pool_covering(ih, p.k, p.stride, p.pad, p.h_out, &oh0, &oh1);
		pool_covering(iw, p.k, p.stride, p.pad, p.w_out, &ow0, &ow1);
		size_t base = (size_t)plane * p.h_out * p.w_out;
		float acc = accumulate ? dx[i] : 0.0f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				size_t o = base + (size_t)oh * p.w_out + ow;
				/* this input's offset in window (oh, ow) */
				int off = (ih - oh * p.stride + p.pad) * p.k + (iw - ow * p.stride + p.pad);
				if (argmax[o] == off)
					acc += dy[o];
			}
		dx[i] = acc;
	}
}

/* The same for ResNet's pooling, a thread per output pixel writing its 2 x 2 input
 * pixels (k3s2p1_off): each window's dy and argmax read once and the index math done
 * once for 4 pixels, where the kernel above reads each window for every pixel it
 * covers. That one took 2.08 ms of a batch-256 resnet50 fp32 step on an H200, 9x its
 * bytes (s24-1). Sums in the same ascending window order: the same bits. */
template <typename I>
__global__ static void maxpool_bwd_k3s2p1_f32_kernel(I count, struct pool_k p, const float *dy,
						     const uint8_t *argmax, float *dx, int accumulate)
{
	for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < count; o += (I)gridDim.x * blockDim.x) {
		I row = o / (I)p.w_out, plane = row / (I)p.h_out;
		int ow = (int)(o - row * (I)p.w_out), oh = (int)(row - plane * (I)p.h_out);
		bool right = ow + 1 < p.w_out, down = oh + 1 < p.h_out;
		float d[4];
		int m[4];
#pragma unroll
		for (int w = 0; w < 4; w++) {
			bool have = (!(w >> 1) || down) && (!(w & 1) || right);
			I ow_ = o + (I)((w >> 1) * p.w_out + (w & 1));
			d[w] = have ? dy[ow_] : 0.0f;
			m[w] = have ? argmax[ow_] : 255;
		}
		size_t base = (size_t)plane * p.h_in * p.w_in;
#pragma unroll
		for (int q = 0; q < 4; q++) {
			int ih = 2 * oh + (q >> 1), iw = 2 * ow + (q & 1);
			if (ih >= p.h_in || iw >= p.w_in)
				continue;
			size_t i = base + (size_t)ih * p.w_in + iw;
			float acc = accumulate ? dx[i] : 0.0f;
#pragma unroll
			for (int w = 0; w < 4; w++)
				if (k3s2p1_off(q, w) >= 0 && m[w] == k3s2p1_off(q, w))
					acc += d[w];
			dx[i] = acc;
		}
	}
}

static struct pool_k pool_k_from(const struct pool_args *a)
{
	struct pool_k p = { a->h_in, a->w_in, a->h_out, a->w_out, a->k, a->stride, a->pad };
	return p;
}

static int maxpool_fwd_f32(cudaStream_t s, const struct pool_args *a, const float *x, float *y,
			   uint8_t *argmax)
{
	size_t count = (size_t)a->n * a->c * a->h_out * a->w_out;
	if (!count)
		return 0;
	if (count <= UINT32_MAX)
		maxpool_fwd_f32_kernel<unsigned><<<grid_for(count), BLOCK, 0, s>>>((unsigned)count, pool_k_from(a), x, y,
										argmax);
	else
		maxpool_fwd_f32_kernel<size_t><<<grid_for(count), BLOCK, 0, s>>>(count, pool_k_from(a), x, y, argmax);
	CUDA_CHECK_LAUNCH();
	return 0;
}

static int maxpool_bwd_f32(cudaStream_t s, const struct pool_args *a, const float *dy,
			   const uint8_t *argmax, float *dx, int accumulate)
{
	size_t count = (size_t)a->n * a->c * a->h_in * a->w_in;
	if (!count)
		return 0;
	if (k3s2p1(a)) {
		size_t outs = (size_t)a->n * a->c * a->h_out * a->w_out;
		if (count <= UINT32_MAX)
			maxpool_bwd_k3s2p1_f32_kernel<unsigned><<<grid_for(outs), BLOCK, 0, s>>>(
				(unsigned)outs, pool_k_from(a), dy, argmax, dx, accumulate);
		else
			maxpool_bwd_k3s2p1_f32_kernel<size_t><<<grid_for(outs), BLOCK, 0, s>>>(outs, pool_k_from(a), dy,
												argmax, dx, accumulate);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	if (count <= UINT32_MAX)
		maxpool_bwd_f32_kernel<unsigned><<<grid_for(count), BLOCK, 0, s>>>((unsigned)count, pool_k_from(a), dy,
										argmax, dx, accumulate);
	else
		maxpool_bwd_f32_kernel<size_t><<<grid_for(count), BLOCK, 0, s>>>(count, pool_k_from(a), dy, argmax, dx,
									      accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* === 16-bit, NCHW or NHWC ================================================================== */
/* --- global average pooling ---------------------------------------------------------------
 * NCHW: one warp per (n, c) plane, lanes strided over the plane, combined by butterfly
 * shuffles (the same bits in every lane, every run). NHWC: one thread per (n, c), summing
 * its column over hw in order; neighbouring threads read neighbouring channels, so each
 * step is one coalesced row. The backward runs on ew_kernel. */
/* dx = dy[n][c] / hw: dy is N x C in both layouts. */
template <typename T> struct avgpool_bwd_op {
	static constexpr bool indexed = true;
	const T *dy;
	int c, hw;
	__device__ float operator()(const cursor &p, float, float, int) const
	{
		return to_f(dy[p.ni * c + p.ch]) / (float)hw;
	}
};

template <typename T>
__global__ static void avgpool_fwd_nchw_kernel(size_t planes, int hw, const T *x, T *y)
{
	size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
	int lane = threadIdx.x & 31;
	/* Every lane of a warp has the same plane, so whole warps run the shuffles. */
	for (size_t plane = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; plane < planes;
	     plane += warps) {
		const T *p = x + plane * hw;
		float sum = 0.0f;
		for (int i = lane; i < hw; i += 32)
			sum += to_f(p[i]);
		for (int off = 16; off > 0; off >>= 1)
			sum += __shfl_xor_sync(FULL_MASK, sum, off);
		if (lane == 0)
			put_f(&y[plane], sum / (float)hw);
	}
}

template <typename T>
__global__ static void avgpool_fwd_nhwc_kernel(size_t planes, int c, int hw, const T *x, T *y)
{
	FOR_EACH(o, planes) {
		size_t ni = o / c;
		int ch = (int)(o - ni * c);
		const T *p = x + ni * hw * c + ch;
		float sum = 0.0f;
		for (int i = 0; i < hw; i++)
			sum += to_f(p[(size_t)i * c]);
		put_f(&y[o], sum / (float)hw);
	}
}

template <typename T>
static int avgpool_fwd_t(cudaStream_t s, int nhwc, int n, int c, int hw, const void *x, void *y)
{
	size_t planes = (size_t)n * c;
	if (n <= 0 || c <= 0 || hw <= 0)
		return 0;
	if (nhwc)
		avgpool_fwd_nhwc_kernel<<<grid_for(planes), BLOCK, 0, s>>>(planes, c, hw, (const T *)x,
									    (T *)y);
	else
		avgpool_fwd_nchw_kernel<<<grid_for(planes * 32), BLOCK, 0, s>>>(planes, hw, (const T *)x,
										 (T *)y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int avgpool_bwd_t(cudaStream_t s, int nhwc, int n, int c, int hw, const void *dy, void *dx,
			 int accumulate)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return 0;
	avgpool_bwd_op<T> f = { (const T *)dy, c, hw };
	return ew_launch<T>(s, (size_t)n * c * hw, NULL, NULL, NULL, dx, accumulate, f,
			    layout{ nhwc, c, hw });
}

/* --- max pooling ------------------------------------------------------------------------------
 * One thread per output (forward) or input (backward) element in storage order, so in
 * NHWC consecutive threads take consecutive channels and every access is coalesced.
 * An element of plane (n, c) at pixel q = h * w + w sits at base + q * ps: NCHW
 * base = (n * C + c) * plane size, ps = 1; NHWC base = n * plane size * C + c, ps = C. */
struct pool_hk {
	int c, h_in, w_in, h_out, w_out, k, stride, pad, nhwc;
};

/* Image, channel, row and column of element e of an n x c x h x w tensor stored NHWC
 * or NCHW. */
__device__ static inline void pool_locate(size_t e, int nhwc, int c, int h, int w, size_t *ni, int *ch, int *y,
					  int *x)
{
	if (nhwc) {
		size_t t = e / c;
		*ch = (int)(e - t * c);
		*x = (int)(t % w);
		t /= w;
		*y = (int)(t % h);
		*ni = t / h;
	} else {
		*x = (int)(e % w);
		size_t t = e / w;
		*y = (int)(t % h);
		t /= h;
		*ch = (int)(t % c);
		*ni = t / c;
	}
}

/* Padding never wins (PyTorch pads with -inf); a NaN wins, as in PyTorch and the CPU
 * reference; otherwise ties keep the first position in row-major window order. */
template <typename T>
__global__ static void maxpool_fwd_kernel(size_t count, pool_hk p, const T *x, T *y, uint8_t *argmax)
{
	FOR_EACH(o, count) {
		int ow, oh, ch;
		size_t ni;
		pool_locate(o, p.nhwc, p.c, p.h_out, p.w_out, &ni, &ch, &oh, &ow);
		size_t plane_size = (size_t)p.h_in * p.w_in;
		size_t base = p.nhwc ? ni * plane_size * p.c + ch : (ni * p.c + ch) * plane_size;
		size_t ps = p.nhwc ? (size_t)p.c : 1;
		float m = -INFINITY;
		int idx = -1;
		for (int i = 0; i < p.k; i++) {
			int ih = oh * p.stride - p.pad + i;
			if (ih < 0 || ih >= p.h_in)
				continue;
			for (int j = 0; j < p.k; j++) {
				int iw = ow * p.stride - p.pad + j;
				if (iw < 0 || iw >= p.w_in)
					continue;
				int q = ih * p.w_in + iw;
				float v = to_f(x[base + (size_t)q * ps]);
				if (idx < 0 || v > m || isnan(v)) {
					m = v;
					idx = i * p.k + j;
				}
			}
		}
		put_f(&y[o], m);
		argmax[o] = (uint8_t)idx;
	}
}

/* NHWC with channels in whole groups of 8 (16-byte aligned): one thread per 8 channels
 * of an output pixel, 32-bit index math, the window's rows read 16 bytes at a time and
 * the 8 argmax bytes written as one. The generic kernel above took 0.86 ms for
 * ResNet's stem pooling at batch 256 in bf16, 7.3x its bytes (s23-1). Same choice
 * rule element by element. */
template <typename T, bool BN = false>
__global__ static void maxpool_fwd_nhwc8_kernel(int groups, pool_hk p, const T *x, bn_norm bn, T *y,
						uint8_t *argmax)
{
	int cg = p.c / VEC, cur = -1;
	float mu[BN ? VEC : 1], is[BN ? VEC : 1], ga[BN ? VEC : 1], be[BN ? VEC : 1];
	for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
		int ni, oh, ow, c8;
		nhwc8_locate(g, cg, p.h_out, p.w_out, &ni, &oh, &ow, &c8);
		if constexpr (BN) {
			if (c8 != cur) { /* a thread's channel group stays when the stride keeps it */
#pragma unroll
				for (int e = 0; e < VEC; e++) {
					int ch = c8 * VEC + e;
					mu[e] = bn.mean[ch];
					is[e] = bn.invstd[ch];
					ga[e] = bn.gamma[ch];
					be[e] = bn.beta[ch];
				}
				cur = c8;
			}
		}
		float m[VEC];
		int idx[VEC];
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			m[e] = -INFINITY;
			idx[e] = -1;
		}
		for (int i = 0; i < p.k; i++) {
			int ih = oh * p.stride - p.pad + i;
			if (ih < 0 || ih >= p.h_in)
				continue;
			size_t row = ((size_t)ni * p.h_in + ih) * p.w_in;
			for (int j = 0; j < p.k; j++) {
				int iw = ow * p.stride - p.pad + j;
				if (iw < 0 || iw >= p.w_in)
					continue;
				float v[VEC];
				load8<true>(x, (row + iw) * cg + c8, v);
#pragma unroll
				for (int e = 0; e < VEC; e++) {
					if constexpr (BN) /* the batch norm's output as its apply writes it */
						v[e] = rounded<T>(bn16_act(bn16_pre(v[e], 0.0f, mu[e], is[e], ga[e], be[e]),
									   1, INFINITY));
					if (idx[e] < 0 || v[e] > m[e] || isnan(v[e])) {
						m[e] = v[e];
						idx[e] = i * p.k + j;
					}
				}
			}
		}
		store8<true>(y, (size_t)g, m);
		pack<uint8_t> am;
#pragma unroll
		for (int e = 0; e < VEC; e++)
			am.v[e] = (uint8_t)idx[e];
		reinterpret_cast<pack<uint8_t> *>(argmax)[g] = am;
	}
}

/* Gather instead of scatter: each input element sums, in ascending output order, the
 * gradients of the windows that chose it, so no atomics and the CPU's order of sums. */
template <typename T>
__global__ static void maxpool_bwd_kernel(size_t count, pool_hk p, const T *dy, const uint8_t *argmax,
					  T *dx, int accumulate)
{
	FOR_EACH(i, count) {
		int iw, ih, ch;
		size_t ni;
		pool_locate(i, p.nhwc, p.c, p.h_in, p.w_in, &ni, &ch, &ih, &iw);
		size_t plane_size = (size_t)p.h_out * p.w_out;
		size_t base = p.nhwc ? ni * plane_size * p.c + ch : (ni * p.c + ch) * plane_size;
		size_t ps = p.nhwc ? (size_t)p.c : 1;
		int oh0, oh1, ow0, ow1;
		pool_covering(ih, p.k, p.stride, p.pad, p.h_out, &oh0, &oh1);
		pool_covering(iw, p.k, p.stride, p.pad, p.w_out, &ow0, &ow1);
		float acc = accumulate ? to_f(dx[i]) : 0.0f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				size_t o = base + ((size_t)oh * p.w_out + ow) * ps;
				int off = (ih - oh * p.stride + p.pad) * p.k + (iw - ow * p.stride + p.pad);
				if (argmax[o] == off)
					acc += to_f(dy[o]);
			}
		put_f(&dx[i], acc);
	}
}

/* NHWC with channels in whole groups of 8 (16-byte aligned): one thread per 8 channels
 * of an input pixel, so the window arithmetic is done once for 8 elements and the
 * gradient, argmax and result move 16, 8 and 16 bytes at a time; 32-bit index math. */
template <typename T>
__global__ static void maxpool_bwd_nhwc8_kernel(int groups, pool_hk p, const T *dy, const uint8_t *argmax,
						T *dx, int accumulate)
{
	int cg = p.c / VEC;
	for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
		int ni, ih, iw, c8;
		nhwc8_locate(g, cg, p.h_in, p.w_in, &ni, &ih, &iw, &c8);
		int oh0, oh1, ow0, ow1;
		pool_covering(ih, p.k, p.stride, p.pad, p.h_out, &oh0, &oh1);
		pool_covering(iw, p.k, p.stride, p.pad, p.w_out, &ow0, &ow1);
		float acc[VEC];
		if (accumulate)
			load8<true>(dx, (size_t)g, acc);
		else
#pragma unroll
			for (int e = 0; e < VEC; e++)
				acc[e] = 0.0f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				size_t o8 = (((size_t)ni * p.h_out + oh) * p.w_out + ow) * cg + c8; /* in groups of 8 */
				uint2 am = reinterpret_cast<const uint2 *>(argmax)[o8]; /* 8 offsets */
				const uint8_t *idx = reinterpret_cast<const uint8_t *>(&am);
				int off = (ih - oh * p.stride + p.pad) * p.k + (iw - ow * p.stride + p.pad);
				float d[VEC];
				load8<true>(dy, o8, d);
#pragma unroll
				for (int e = 0; e < VEC; e++)
					if (idx[e] == off)
						acc[e] += d[e];
			}
		store8<true>(dx, (size_t)g, acc);
	}
}

/* The same gather for ResNet's pooling (3 x 3, stride 2, pad 1), one thread per 8
 * channels of an output pixel: it writes the 2 x 2 input pixels of k3s2p1_off's block,
 * so each window's dy and argmax are read once and the index math is done once for 4
 * pixels. The general kernel above took 0.485 ms of a batch-256 step on an
 * H200, 4.1x its bytes (s23-3). Sums in the same ascending window order: the same bits. */
template <typename T>
__global__ static void maxpool_bwd_k3s2p1_nhwc8_kernel(int groups, pool_hk p, const T *dy, const uint8_t *argmax,
							T *dx, int accumulate)
{
	int cg = p.c / VEC;
	for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
		int ni, oh, ow, c8;
		nhwc8_locate(g, cg, p.h_out, p.w_out, &ni, &oh, &ow, &c8);
		bool right = ow + 1 < p.w_out, down = oh + 1 < p.h_out;
		/* the windows' gradients and argmax offsets, 0 and 255 where there is none */
		float d[4][VEC];
		pack<uint8_t> m[4];
#pragma unroll
		for (int w = 0; w < 4; w++) {
			int wy = oh + (w >> 1), wx = ow + (w & 1);
			bool have = (!(w >> 1) || down) && (!(w & 1) || right);
			size_t o8 = (((size_t)ni * p.h_out + wy) * p.w_out + wx) * cg + c8;
			if (have) {
				load8<true>(dy, o8, d[w]);
				m[w] = reinterpret_cast<const pack<uint8_t> *>(argmax)[o8];
			} else {
#pragma unroll
				for (int e = 0; e < VEC; e++) {
					d[w][e] = 0.0f;
					m[w].v[e] = 255;
				}
			}
		}
#pragma unroll
		for (int q = 0; q < 4; q++) {
			int ih = 2 * oh + (q >> 1), iw = 2 * ow + (q & 1);
			if (ih >= p.h_in || iw >= p.w_in)
				continue;
			size_t i8 = (((size_t)ni * p.h_in + ih) * p.w_in + iw) * cg + c8;
			float acc[VEC];
			if (accumulate)
				load8<true>(dx, i8, acc);
			else
#pragma unroll
				for (int e = 0; e < VEC; e++)
					acc[e] = 0.0f;
#pragma unroll
			for (int w = 0; w < 4; w++) {
				if (k3s2p1_off(q, w) < 0)
					continue;
#pragma unroll
				for (int e = 0; e < VEC; e++)
					if (m[w].v[e] == k3s2p1_off(q, w))
						acc[e] += d[w][e];
			}
			store8<true>(dx, i8, acc);
		}
	}
}

/* Whether the 8-channels-a-thread kernels take a pass of groups groups: NHWC, whole
 * groups, int indices, its 16-bit arrays 16-byte and its argmax 8-byte aligned. */
static int pool_nhwc8_ok(int nhwc, const struct pool_args *a, size_t groups, const void *in, const void *out,
			 const uint8_t *argmax)
{
	return nhwc && a->c % VEC == 0 && groups <= (size_t)INT32_MAX && aligned(in, 16) && aligned(out, 16) &&
	       aligned(argmax, 8);
}

static pool_hk pool_hk_from(const struct pool_args *a, int nhwc)
{
	pool_hk p = { a->c, a->h_in, a->w_in, a->h_out, a->w_out, a->k, a->stride, a->pad, nhwc ? 1 : 0 };
	return p;
}

template <typename T>
static int maxpool_fwd_t(cudaStream_t s, int nhwc, const struct pool_args *a, const void *x, void *y,
			 uint8_t *argmax)
{
	size_t count = (size_t)a->n * a->c * a->h_out * a->w_out;
	if (!count)
		return 0;
	if (pool_nhwc8_ok(nhwc, a, count / VEC, x, y, argmax)) {
		int groups = (int)(count / VEC);
		maxpool_fwd_nhwc8_kernel<<<grid_for((size_t)groups), BLOCK, 0, s>>>(groups, pool_hk_from(a, nhwc),
										    (const T *)x, bn_norm{}, (T *)y,
										    argmax);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	maxpool_fwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, pool_hk_from(a, nhwc), (const T *)x,
							      (T *)y, argmax);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int maxpool_bwd_t(cudaStream_t s, int nhwc, const struct pool_args *a, const void *dy,
			 const uint8_t *argmax, void *dx, int accumulate)
{
	size_t count = (size_t)a->n * a->c * a->h_in * a->w_in;
	if (!count)
		return 0;
	size_t out_groups = (size_t)a->n * a->c * a->h_out * a->w_out / VEC;
	if (k3s2p1(a) && pool_nhwc8_ok(nhwc, a, out_groups, dy, dx, argmax)) {
		maxpool_bwd_k3s2p1_nhwc8_kernel<<<grid_for(out_groups), BLOCK, 0, s>>>(
			(int)out_groups, pool_hk_from(a, nhwc), (const T *)dy, argmax, (T *)dx, accumulate);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	if (pool_nhwc8_ok(nhwc, a, count / VEC, dy, dx, argmax)) {
		int groups = (int)(count / VEC);
		maxpool_bwd_nhwc8_kernel<<<grid_for((size_t)groups), BLOCK, 0, s>>>(groups, pool_hk_from(a, nhwc),
										    (const T *)dy, argmax, (T *)dx,
										    accumulate);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	maxpool_bwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, pool_hk_from(a, nhwc), (const T *)dy,
							      argmax, (T *)dx, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* === launchers ============================================================================= */
extern "C" int avgpool_global_fwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c,
				       int hw, const void *x, void *y)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "global average pooling"));
		return avgpool_global_fwd_f32(s, n, c, hw, (const float *)x, (float *)y);
	}
	return DISPATCH_H(dt, avgpool_fwd_t, s, nhwc, n, c, hw, x, y);
}

extern "C" int avgpool_global_bwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c,
				       int hw, const void *dy, void *dx, int accumulate)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "global average pooling"));
		return avgpool_global_bwd_f32(s, n, c, hw, (const float *)dy, (float *)dx, accumulate);
	}
	return DISPATCH_H(dt, avgpool_bwd_t, s, nhwc, n, c, hw, dy, dx, accumulate);
}

extern "C" int maxpool_fwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct pool_args *a,
				const void *x, void *y, uint8_t *argmax)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "max pooling"));
		return maxpool_fwd_f32(s, a, (const float *)x, (float *)y, argmax);
	}
	return DISPATCH_H(dt, maxpool_fwd_t, s, nhwc, a, x, y, argmax);
}

/* ResNet's stem pool (3 x 3, stride 2, pad 1) over relu(bn(x)) in tiles: a block's
 * PBN_TH x PBN_TW output pixels of PBN_G channel groups first normalize, activate and
 * round their input pixels once into shared memory (each thread one channel group, so
 * its 32 statistics and parameters load once), then take their windows there, by the
 * same rule in the same order as maxpool_fwd_nhwc8_kernel: the same bits. Where a pixel
 * reached 2.25 windows' worth of that work in the direct kernel, it now does it about
 * 1.2 times (the tiles' halo). */
#define PBN_TH 4
#define PBN_TW 8
#define PBN_G 8 /* BLOCK = PBN_TH * PBN_TW * PBN_G */
template <typename T>
__global__ static void __launch_bounds__(BLOCK) maxpool_bn_relu_tile_kernel(pool_hk p, int tiles_h, int tiles_w,
									     int ctiles, const T *x, bn_norm bn,
									     T *y, uint8_t *argmax)
{
	constexpr int K = 3, S = 2, P = 1, IH = (PBN_TH - 1) * S + K, IW = (PBN_TW - 1) * S + K;
	__shared__ pack<T> tile[IH * IW * PBN_G];
	int cg = p.c / VEC, b = blockIdx.x;
	int ct = b % ctiles;
	b /= ctiles;
	int tw = b % tiles_w;
	b /= tiles_w;
	int th = b % tiles_h, ni = b / tiles_h;
	int g = threadIdx.x % PBN_G, g0 = ct * PBN_G, oh0 = th * PBN_TH, ow0 = tw * PBN_TW;
	int ih0 = oh0 * S - P, iw0 = ow0 * S - P;
	if (g0 + g < cg) { /* BLOCK is a multiple of PBN_G: a thread's group is the same in every row */
		float mu[VEC], is[VEC], ga[VEC], be[VEC];
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			int ch = (g0 + g) * VEC + e;
			mu[e] = bn.mean[ch];
			is[e] = bn.invstd[ch];
			ga[e] = bn.gamma[ch];
			be[e] = bn.beta[ch];
		}
		for (int q = threadIdx.x / PBN_G; q < IH * IW; q += BLOCK / PBN_G) {
			int ih = ih0 + q / IW, iw = iw0 + q % IW;
			if (ih < 0 || ih >= p.h_in || iw < 0 || iw >= p.w_in)
				continue;
			float v[VEC];
			load8<true>(x, (((size_t)ni * p.h_in + ih) * p.w_in + iw) * cg + g0 + g, v);
			pack<T> r;
#pragma unroll
			for (int e = 0; e < VEC; e++)
				put_f(&r.v[e], bn16_act(bn16_pre(v[e], 0.0f, mu[e], is[e], ga[e], be[e]), 1, INFINITY));
			tile[q * PBN_G + g] = r;
		}
	}
	__syncthreads();
	int t = threadIdx.x / PBN_G, oh = oh0 + t / PBN_TW, ow = ow0 + t % PBN_TW;
	if (g0 + g >= cg || oh >= p.h_out || ow >= p.w_out)
		return;
	float m[VEC];
	int idx[VEC];
#pragma unroll
	for (int e = 0; e < VEC; e++) {
		m[e] = -INFINITY;
		idx[e] = -1;
	}
	for (int i = 0; i < K; i++) {
		int ih = oh * S - P + i;
		if (ih < 0 || ih >= p.h_in)
			continue;
		for (int j = 0; j < K; j++) {
			int iw = ow * S - P + j;
			if (iw < 0 || iw >= p.w_in)
				continue;
			pack<T> pv = tile[((ih - ih0) * IW + iw - iw0) * PBN_G + g];
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				float v = to_f(pv.v[e]);
				if (idx[e] < 0 || v > m[e] || isnan(v)) {
					m[e] = v;
					idx[e] = i * K + j;
				}
			}
		}
	}
	size_t o = (((size_t)ni * p.h_out + oh) * p.w_out + ow) * cg + g0 + g;
	store8<true>(y, o, m);
	pack<uint8_t> am;
#pragma unroll
	for (int e = 0; e < VEC; e++)
		am.v[e] = (uint8_t)idx[e];
	reinterpret_cast<pack<uint8_t> *>(argmax)[o] = am;
}

template <typename T>
static int maxpool_bn_relu_fwd_t(cudaStream_t s, const struct pool_args *a, const void *x, const bn_norm *bn,
				 void *y, uint8_t *argmax)
{
	size_t count = (size_t)a->n * a->c * a->h_out * a->w_out;
	if (!count)
		return 0;
	if (!pool_nhwc8_ok(1, a, count / VEC, x, y, argmax))
		return gp_error(GP_EUNSUPPORTED, "max pool over a batch norm of %d channels: NHWC in eights, aligned",
				a->c);
	int tiles_h = (a->h_out + PBN_TH - 1) / PBN_TH, tiles_w = (a->w_out + PBN_TW - 1) / PBN_TW;
	int ctiles = (a->c / VEC + PBN_G - 1) / PBN_G;
	size_t blocks = (size_t)a->n * tiles_h * tiles_w * ctiles;
	if (a->k == 3 && a->stride == 2 && a->pad == 1 && blocks <= (size_t)INT32_MAX) {
		maxpool_bn_relu_tile_kernel<T><<<(unsigned)blocks, BLOCK, 0, s>>>(pool_hk_from(a, 1), tiles_h, tiles_w,
										ctiles, (const T *)x, *bn, (T *)y,
										argmax);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	int groups = (int)(count / VEC);
	maxpool_fwd_nhwc8_kernel<T, true><<<grid_for((size_t)groups), BLOCK, 0, s>>>(
		groups, pool_hk_from(a, 1), (const T *)x, *bn, (T *)y, argmax);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int maxpool_bn_relu_ok(enum gp_dtype dt, int nhwc, const struct pool_args *a)
{
	return dt != GP_F32 && nhwc && a->c % VEC == 0 && a->k <= MAXPOOL_K_MAX &&
	       (size_t)a->n * a->c * a->h_out * a->w_out / VEC <= (size_t)INT32_MAX;
}

extern "C" int maxpool_bn_relu_fwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct pool_args *a,
					const void *x, const struct bn_norm *bn, void *y, uint8_t *argmax)
{
	if (!maxpool_bn_relu_ok(dt, nhwc, a))
		return gp_error(GP_EUNSUPPORTED, "max pool over a batch norm: 16-bit NHWC with channels in eights");
	return DISPATCH_H(dt, maxpool_bn_relu_fwd_t, s, a, x, bn, y, argmax);
}

extern "C" int maxpool_bwd_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, const struct pool_args *a,
				const void *dy, const uint8_t *argmax, void *dx, int accumulate)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "max pooling"));
		return maxpool_bwd_f32(s, a, (const float *)dy, argmax, (float *)dx, accumulate);
	}
	return DISPATCH_H(dt, maxpool_bwd_t, s, nhwc, a, dy, argmax, dx, accumulate);
}
