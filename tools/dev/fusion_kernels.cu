/* The baseline's own kernels for tools/dev/fusion_bench.c, written as gpuperf's engine
 * runs them today: plain bandwidth-bound passes, one per job, on NHWC tensors seen as
 * an M x C matrix (M = N*H*W rows, C contiguous channels).
 *   fb_fill     deterministic uniform data (a hash of the index, so no host copy)
 *   fb_sbr      y = relu(x * scale[c] + bias[c])   (batch-norm apply + ReLU)
 *   fb_stats    sum[c] = sum_m y[m,c], sqsum[c] = sum_m y[m,c]^2  (batch-norm statistics)
 *   fb_drelu    dz = a > 0 ? da : 0                (ReLU backward, mask from the output)
 * Element types by code: 0 bf16, 1 fp16, 2 float (fusion_bench.c's enum fb_dtype).
 * 16-bit data moves 8 channels per 16-byte access, float 4, when C allows it. */
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#define FB_BLOCK 256

__device__ static inline float fb_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ static inline float fb_ld(const __half *p) { return __half2float(*p); }
__device__ static inline float fb_ld(const float *p) { return *p; }
__device__ static inline void fb_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ static inline void fb_st(__half *p, float v) { *p = __float2half_rn(v); }
__device__ static inline void fb_st(float *p, float v) { *p = v; }

/* V consecutive elements through one 16-byte access (V * sizeof(T) == 16), or one. */
template <typename T, int V> struct __align__(16) fb_vec {
	T e[V];
};
template <typename T, int V> __device__ static inline void fb_ldv(const T *p, float (&v)[V])
{
	fb_vec<T, V> t;
	if constexpr (V * sizeof(T) == 16)
		*(uint4 *)&t = *(const uint4 *)p;
	else
		for (int i = 0; i < V; i++)
			t.e[i] = p[i];
	for (int i = 0; i < V; i++)
		v[i] = fb_ld(&t.e[i]);
}
template <typename T, int V> __device__ static inline void fb_stv(T *p, const float (&v)[V])
{
	fb_vec<T, V> t;
	for (int i = 0; i < V; i++)
		fb_st(&t.e[i], v[i]);
	if constexpr (V * sizeof(T) == 16)
		*(uint4 *)p = *(const uint4 *)&t;
	else
		for (int i = 0; i < V; i++)
			p[i] = t.e[i];
}

static unsigned fb_grid(size_t count)
{
	size_t g = (count + FB_BLOCK - 1) / FB_BLOCK;
	return g > 65536 ? 65536u : g == 0 ? 1u : (unsigned)g;
}

/* --- fill: lo + (hi - lo) * u, u from a 32-bit hash of (seed, index) ------------------ */
__device__ static inline uint32_t fb_hash(uint32_t seed, uint64_t i)
{
	uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return (uint32_t)((z ^ (z >> 31)) >> 32);
}

template <typename T> __global__ void fb_fill_kernel(T *p, size_t n, uint32_t seed, float lo, float hi)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		fb_st(&p[i], lo + (hi - lo) * (float)(fb_hash(seed, i) >> 8) * (1.0f / 16777216.0f));
}

/* --- scale-bias-ReLU: vector i covers channels (i * V) % c .. + V - 1 ----------------- */
template <typename T, int V>
__global__ void fb_sbr_kernel(const T *x, T *y, const float *scale, const float *bias, size_t nvec, int c)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
		float v[V];
		int ch = (int)((i * V) % (size_t)c);
		fb_ldv<T, V>(x + i * V, v);
		for (int j = 0; j < V; j++) {
			float t = fmaf(v[j], scale[ch + j], bias[ch + j]);
			v[j] = t > 0.0f ? t : 0.0f;
		}
		fb_stv<T, V>(y + i * V, v);
	}
}

/* --- statistics: a block is 8 channel groups of V channels by 32 row lanes, over one
 * slice of the rows; the lanes' partials meet in shared memory and one float atomic per
 * channel and block adds them to the (zeroed) outputs. */
#define FB_GROUPS 8
#define FB_LANES 32
template <typename T, int V>
__global__ void fb_stats_kernel(const T *y, float *sum, float *sqsum, size_t m, int c, size_t rows_per_slice)
{
	__shared__ float s_sum[FB_LANES][FB_GROUPS * V], s_sq[FB_LANES][FB_GROUPS * V];
	int g = threadIdx.x % FB_GROUPS, lane = threadIdx.x / FB_GROUPS;
	int c0 = blockIdx.x * FB_GROUPS * V + g * V;
	size_t first = (size_t)blockIdx.y * rows_per_slice;
	size_t last = first + rows_per_slice < m ? first + rows_per_slice : m;
	float s[V], q[V];
	for (int j = 0; j < V; j++)
		s[j] = q[j] = 0.0f;
	if (c0 < c) {
		for (size_t r = first + lane; r < last; r += FB_LANES) {
			float v[V];
			fb_ldv<T, V>(y + r * (size_t)c + c0, v);
			for (int j = 0; j < V; j++) {
				s[j] += v[j];
				q[j] = fmaf(v[j], v[j], q[j]);
			}
		}
	}
	for (int j = 0; j < V; j++) {
		s_sum[lane][g * V + j] = s[j];
		s_sq[lane][g * V + j] = q[j];
	}
	__syncthreads();
	int t = threadIdx.x, ch = blockIdx.x * FB_GROUPS * V + t;
	if (t < FB_GROUPS * V && ch < c) {
		float a = 0.0f, b = 0.0f;
		for (int l = 0; l < FB_LANES; l++) {
			a += s_sum[l][t];
			b += s_sq[l][t];
		}
		atomicAdd(&sum[ch], a);
		atomicAdd(&sqsum[ch], b);
	}
}

/* Dispatch on the element code; T's vector width where c allows it, else one. */
#define FB_DISPATCH(dtype, F)                                                          \
	switch (dtype) {                                                               \
	case 0: F(__nv_bfloat16); break;                                               \
	case 1: F(__half); break;                                                      \
	case 2: F(float); break;                                                       \
	default: return cudaErrorInvalidValue;                                         \
	}

extern "C" cudaError_t fb_fill(void *p, int dtype, size_t n, uint32_t seed, float lo, float hi, cudaStream_t st)
{
#define FB_FILL(T) fb_fill_kernel<T><<<fb_grid(n), FB_BLOCK, 0, st>>>((T *)p, n, seed, lo, hi)
	FB_DISPATCH(dtype, FB_FILL)
	return cudaGetLastError();
}

extern "C" cudaError_t fb_sbr(const void *x, void *y, const float *scale, const float *bias, size_t m, int c,
			      int dtype, cudaStream_t st)
{
	size_t n = m * (size_t)c;
#define FB_SBR(T)                                                                              \
	do {                                                                                   \
		const int v = 16 / sizeof(T);                                                  \
		if (c % v == 0)                                                                \
			fb_sbr_kernel<T, v><<<fb_grid(n / v), FB_BLOCK, 0, st>>>(               \
				(const T *)x, (T *)y, scale, bias, n / v, c);                  \
		else                                                                           \
			fb_sbr_kernel<T, 1><<<fb_grid(n), FB_BLOCK, 0, st>>>((const T *)x, (T *)y, \
									      scale, bias, n, c); \
	} while (0)
	FB_DISPATCH(dtype, FB_SBR)
	return cudaGetLastError();
}

/* Eight blocks of 256 threads per SM of an H100 (132 SMs), a full load of threads, split
 * between channel groups and slices of the rows: fewer leave the pass short of the
 * memory bandwidth, which would flatter the fused path. */
#define FB_STATS_TARGET_BLOCKS 1056

extern "C" cudaError_t fb_stats(const void *y, float *sum, float *sqsum, size_t m, int c, int dtype,
				cudaStream_t st)
{
	cudaError_t e = cudaMemsetAsync(sum, 0, (size_t)c * sizeof(float), st);
	if (e == cudaSuccess)
		e = cudaMemsetAsync(sqsum, 0, (size_t)c * sizeof(float), st);
	if (e != cudaSuccess || m == 0)
		return e;
#define FB_STATS(T)                                                                            \
	do {                                                                                   \
		const int v = 16 / sizeof(T);                                                  \
		int vv = c % v == 0 ? v : 1;                                                   \
		unsigned gx = (unsigned)((c + FB_GROUPS * vv - 1) / (FB_GROUPS * vv));         \
		size_t slices = (FB_STATS_TARGET_BLOCKS + gx - 1) / gx;                        \
		size_t max_slices = (m + FB_LANES - 1) / FB_LANES;                             \
		slices = slices > max_slices ? max_slices : slices < 1 ? 1 : slices;            \
		slices = slices > 65535 ? 65535 : slices;                                      \
		size_t per = (m + slices - 1) / slices;                                        \
		dim3 grid(gx, (unsigned)((m + per - 1) / per));                                \
		if (vv == v)                                                                   \
			fb_stats_kernel<T, v><<<grid, FB_GROUPS * FB_LANES, 0, st>>>(            \
				(const T *)y, sum, sqsum, m, c, per);                          \
		else                                                                           \
			fb_stats_kernel<T, 1><<<grid, FB_GROUPS * FB_LANES, 0, st>>>(            \
				(const T *)y, sum, sqsum, m, c, per);                          \
	} while (0)
	FB_DISPATCH(dtype, FB_STATS)
	return cudaGetLastError();
}

/* --- ReLU backward: dz = a > 0 ? da : 0, the mask from the stored activation a ----------- */
template <typename T, int V> __global__ void fb_drelu_kernel(const T *da, const T *a, T *dz, size_t nvec)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
		float g[V], m[V];
		fb_ldv<T, V>(da + i * V, g);
		fb_ldv<T, V>(a + i * V, m);
		for (int j = 0; j < V; j++)
			g[j] = m[j] > 0.0f ? g[j] : 0.0f;
		fb_stv<T, V>(dz + i * V, g);
	}
}

extern "C" cudaError_t fb_drelu(const void *da, const void *a, void *dz, size_t n, int dtype, cudaStream_t st)
{
#define FB_DRELU(T)                                                                            \
	do {                                                                                   \
		const int v = 16 / sizeof(T);                                                  \
		if (n % v == 0)                                                                \
			fb_drelu_kernel<T, v><<<fb_grid(n / v), FB_BLOCK, 0, st>>>(             \
				(const T *)da, (const T *)a, (T *)dz, n / v);                  \
		else                                                                           \
			fb_drelu_kernel<T, 1><<<fb_grid(n), FB_BLOCK, 0, st>>>(                 \
				(const T *)da, (const T *)a, (T *)dz, n);                      \
	} while (0)
	FB_DISPATCH(dtype, FB_DRELU)
	return cudaGetLastError();
}
