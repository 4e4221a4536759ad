/* What the half-precision kernel files (kernels_amp.cu, pool_amp.cu) share: the 16-bit
 * type dispatch, alignment checks, and VEC-element packs widened to float on load and
 * rounded once on store. Include after kernel_util.cuh. */
#ifndef GP_OPS_CUDA_KERNELS_AMP_CUH
#define GP_OPS_CUDA_KERNELS_AMP_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define VEC 8   /* elements per thread in the elementwise kernels: 16 bytes of 16-bit data */

static inline int bad_dtype(enum gp_dtype ht)
{
	return gp_error(GP_EINVAL, "16-bit kernels take f16 or bf16, not %s", dtype_name(ht));
}

/* Instantiate a templated host launcher for the 16-bit type ht names. */
#define DISPATCH_H(ht, fn, ...)                                                        \
	((ht) == GP_F16    ? fn<__half>(__VA_ARGS__)                                  \
	 : (ht) == GP_BF16 ? fn<__nv_bfloat16>(__VA_ARGS__)                           \
			   : bad_dtype(ht))

static inline int aligned(const void *p, size_t bytes)
{
	return (uintptr_t)p % bytes == 0;
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

#endif
