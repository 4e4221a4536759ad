/* What the own kernel files share beyond kernel_util.cuh: the dtype dispatch of the
 * templated 16-bit launchers, alignment checks, VEC-element packs widened to float on
 * load and rounded once on store, and the one elementwise kernel (ew_kernel) that the
 * 16-bit streaming ops (eltwise.cu, pool.cu, bn.cu, bias.cu) run on, with the cursor
 * that finds an element's channel in either layout. Include after kernel_util.cuh. */
#ifndef GP_OPS_CUDA_ELTWISE_CUH
#define GP_OPS_CUDA_ELTWISE_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define VEC 8   /* elements per thread in the elementwise kernels: 16 bytes of 16-bit data */

static inline int aligned(const void *p, size_t bytes)
{
	return (uintptr_t)p % bytes == 0;
}

/* The float kernels of an op with a layout argument take NCHW only (float activations
 * are never channels last). */
static inline int f32_nchw_only(int nhwc, const char *what)
{
	return nhwc ? gp_error(GP_EINVAL, "%s: the float kernels take NCHW, not NHWC", what) : 0;
}


/* v as the type T stores it (for checks on what is actually written). */
template <typename T> __device__ static inline float rounded(float v)
{
	T t;
	put_f(&t, v);
	return to_f(t);
}

/* VEC consecutive elements as one aligned unit: 16 bytes of 16-bit data (one 128-bit
 * access), 32 of float (two), 8 of mask bytes (one 64-bit). */
template <typename T> struct alignas(sizeof(T) * VEC < 16 ? sizeof(T) * VEC : 16) pack {
	T v[VEC];
};

/* Chunk k (elements k * VEC ...) widened to float; V: through the aligned pack. */
template <bool V, typename T> __device__ static inline void load8(const T *p, size_t k, float *out)
{
	if constexpr (V) {
		pack<T> r = reinterpret_cast<const pack<T> *>(p)[k];
#pragma unroll
		for (int e = 0; e < VEC; e++)
			out[e] = to_f(r.v[e]);
	} else {
#pragma unroll
		for (int e = 0; e < VEC; e++)
			out[e] = to_f(p[k * VEC + e]);
	}
}

template <bool V, typename T> __device__ static inline void store8(T *p, size_t k, const float *in)
{
	if constexpr (V) {
		pack<T> r;
#pragma unroll
		for (int e = 0; e < VEC; e++)
			put_f(&r.v[e], in[e]);
		reinterpret_cast<pack<T> *>(p)[k] = r;
	} else {
#pragma unroll
		for (int e = 0; e < VEC; e++)
			put_f(&p[k * VEC + e], in[e]);
	}
}

template <bool V> __device__ static inline void load8_mask(const uint8_t *p, size_t k, int *out)
{
	if constexpr (V) {
		pack<uint8_t> r = reinterpret_cast<const pack<uint8_t> *>(p)[k];
#pragma unroll
		for (int e = 0; e < VEC; e++)
			out[e] = r.v[e];
	} else {
#pragma unroll
		for (int e = 0; e < VEC; e++)
			out[e] = p[k * VEC + e];
	}
}

/* --- where an element sits: image, channel, position in the plane -----------------------
 * Per-channel ops need the channel of every element; a 64-bit division per element
 * would make these memory-bound kernels compute-bound, so a chunk divides once and
 * then steps the cursor. */
struct layout {
	int nhwc, c, hw;
};

struct cursor {
	size_t ni; /* image */
	int ch, j; /* channel, position within the h * w plane */
};

__device__ static inline cursor cursor_at(const layout &L, size_t i)
{
	cursor p;
	if (L.nhwc) {
		size_t pix = i / (size_t)L.c;
		p.ch = (int)(i - pix * L.c);
		p.ni = pix / (size_t)L.hw;
		p.j = (int)(pix - p.ni * L.hw);
	} else {
		size_t plane = i / (size_t)L.hw;
		p.j = (int)(i - plane * L.hw);
		p.ni = plane / (size_t)L.c;
		p.ch = (int)(plane - p.ni * L.c);
	}
	return p;
}

__device__ static inline void cursor_next(const layout &L, cursor *p)
{
	if (L.nhwc) {
		if (++p->ch == L.c) {
			p->ch = 0;
			if (++p->j == L.hw) {
				p->j = 0;
				p->ni++;
			}
		}
	} else if (++p->j == L.hw) {
		p->j = 0;
		if (++p->ch == L.c) {
			p->ch = 0;
			p->ni++;
		}
	}
}

/* --- one elementwise kernel for every streaming op ----------------------------------------
 * y[i] = f(a[i], b[i], mask[i]) (+ y[i] with accumulate), each input optional (NULL reads
 * as 0, a NULL mask as 1). A thread takes VEC consecutive elements per step; V selects
 * whole-pack loads and stores, which need every array aligned to its pack; the last
 * count % VEC elements go one by one. An op whose F::indexed is true also gets each
 * element's cursor. y may be a (in-place update): each element is read before it is
 * written, by the same thread. */
template <bool V, typename T, typename F>
__global__ static void ew_kernel(size_t count, const T *a, const T *b, const uint8_t *mask, T *y,
				 int accumulate, F f, layout L)
{
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t chunks = count / VEC;
	for (size_t k = tid; k < chunks; k += stride) {
		float va[VEC] = {}, vb[VEC] = {}, vy[VEC] = {};
		int vm[VEC];
		if (a)
			load8<V>(a, k, va);
		if (b)
			load8<V>(b, k, vb);
		if (mask) {
			load8_mask<V>(mask, k, vm);
		} else {
#pragma unroll
			for (int e = 0; e < VEC; e++)
				vm[e] = 1;
		}
		if (accumulate)
			load8<V>((const T *)y, k, vy);
		cursor p = {};
		if constexpr (F::indexed)
			p = cursor_at(L, k * VEC);
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			float v = f(p, va[e], vb[e], vm[e]);
			vy[e] = accumulate ? vy[e] + v : v;
			if constexpr (F::indexed)
				cursor_next(L, &p);
		}
		store8<V>(y, k, vy);
	}
	for (size_t i = chunks * VEC + tid; i < count; i += stride) {
		cursor p = {};
		if constexpr (F::indexed)
			p = cursor_at(L, i);
		float v = f(p, a ? to_f(a[i]) : 0.0f, b ? to_f(b[i]) : 0.0f, mask ? mask[i] : 1);
		put_f(&y[i], accumulate ? to_f(y[i]) + v : v);
	}
}

/* Threads for count elements at VEC per thread (the tail is under VEC). */
static inline unsigned grid_vec(size_t count)
{
	size_t chunks = count / VEC;
	return grid_for(chunks ? chunks : count);
}

template <typename T, typename F>
static int ew_launch(cudaStream_t s, size_t count, const void *a, const void *b, const uint8_t *mask,
		     void *y, int accumulate, F f, layout L = layout{ 0, 1, 1 })
{
	if (!count)
		return 0;
	const T *ta = (const T *)a, *tb = (const T *)b;
	T *ty = (T *)y;
	if (aligned(a, 16) && aligned(b, 16) && aligned(y, 16) && aligned(mask, 8))
		ew_kernel<true, T, F><<<grid_vec(count), BLOCK, 0, s>>>(count, ta, tb, mask, ty,
									 accumulate, f, L);
	else
		ew_kernel<false, T, F><<<grid_vec(count), BLOCK, 0, s>>>(count, ta, tb, mask, ty,
									  accumulate, f, L);
	CUDA_CHECK_LAUNCH();
	return 0;
}

#endif
