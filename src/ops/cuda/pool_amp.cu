/* Half-precision max pooling (forward with argmax, backward as a gather) for
 * mixed-precision training, fp16 and bf16 from one templated source; the rest of the
 * 16-bit kernel set is kernels_amp.cu. */
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"
}
#include "ops/cuda/cuda_amp.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/kernels_amp.cuh"

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
__global__ static void maxpool_fwd_kernel(size_t count, pool_hk p, const T *x, T *y, int32_t *argmax)
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
					idx = q;
				}
			}
		}
		put_f(&y[o], m);
		argmax[o] = idx;
	}
}

/* Gather instead of scatter: each input element sums, in ascending output order, the
 * gradients of the windows that chose it, so no atomics and the CPU's order of sums. */
template <typename T>
__global__ static void maxpool_bwd_kernel(size_t count, pool_hk p, const T *dy, const int32_t *argmax,
					  T *dx, int accumulate)
{
	FOR_EACH(i, count) {
		int iw, ih, ch;
		size_t ni;
		pool_locate(i, p.nhwc, p.c, p.h_in, p.w_in, &ni, &ch, &ih, &iw);
		size_t plane_size = (size_t)p.h_out * p.w_out;
		size_t base = p.nhwc ? ni * plane_size * p.c + ch : (ni * p.c + ch) * plane_size;
		size_t ps = p.nhwc ? (size_t)p.c : 1;
		int pos = ih * p.w_in + iw;
		int oh0, oh1, ow0, ow1;
		pool_covering(ih, p.k, p.stride, p.pad, p.h_out, &oh0, &oh1);
		pool_covering(iw, p.k, p.stride, p.pad, p.w_out, &ow0, &ow1);
		float acc = accumulate ? to_f(dx[i]) : 0.0f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				size_t o = base + ((size_t)oh * p.w_out + ow) * ps;
				if (argmax[o] == pos)
					acc += to_f(dy[o]);
			}
		put_f(&dx[i], acc);
	}
}

/* NHWC with channels in whole groups of 8 (16-byte aligned): one thread per 8 channels
 * of an input pixel, so the window arithmetic is done once for 8 elements and the
 * gradient, argmax and result move 16 and 32 bytes at a time; 32-bit index math. */
template <typename T>
__global__ static void maxpool_bwd_nhwc8_kernel(int groups, pool_hk p, const T *dy, const int32_t *argmax,
						T *dx, int accumulate)
{
	int cg = p.c / VEC;
	for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
		int t = g / cg, c8 = g - t * cg;
		int iw = t % p.w_in;
		t /= p.w_in;
		int ih = t % p.h_in, ni = t / p.h_in;
		int pos = ih * p.w_in + iw;
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
				const int4 *am = reinterpret_cast<const int4 *>(argmax) + 2 * o8;
				int4 a0 = am[0], a1 = am[1];
				int idx[VEC] = { a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w };
				float d[VEC];
				load8<true>(dy, o8, d);
#pragma unroll
				for (int e = 0; e < VEC; e++)
					if (idx[e] == pos)
						acc[e] += d[e];
			}
		store8<true>(dx, (size_t)g, acc);
	}
}

static pool_hk pool_hk_from(const struct pool_args *a, int nhwc)
{
	pool_hk p = { a->c, a->h_in, a->w_in, a->h_out, a->w_out, a->k, a->stride, a->pad, nhwc ? 1 : 0 };
	return p;
}

template <typename T>
static int maxpool_fwd_t(cudaStream_t s, int nhwc, const struct pool_args *a, const void *x, void *y,
			 int32_t *argmax)
{
	size_t count = (size_t)a->n * a->c * a->h_out * a->w_out;
	if (!count)
		return 0;
	maxpool_fwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, pool_hk_from(a, nhwc), (const T *)x,
							      (T *)y, argmax);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int maxpool_bwd_t(cudaStream_t s, int nhwc, const struct pool_args *a, const void *dy,
			 const int32_t *argmax, void *dx, int accumulate)
{
	size_t count = (size_t)a->n * a->c * a->h_in * a->w_in;
	if (!count)
		return 0;
	if (nhwc && a->c % VEC == 0 && count / VEC <= (size_t)INT32_MAX && aligned(dy, 16) && aligned(dx, 16) &&
	    aligned(argmax, 16)) {
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

extern "C" int maxpool_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, const struct pool_args *a,
				  const void *x, void *y, int32_t *argmax)
{
	return DISPATCH_H(ht, maxpool_fwd_t, s, nhwc, a, x, y, argmax);
}

extern "C" int maxpool_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, const struct pool_args *a,
				  const void *dy, const int32_t *argmax, void *dx, int accumulate)
{
	return DISPATCH_H(ht, maxpool_bwd_t, s, nhwc, a, dy, argmax, dx, accumulate);
}
