/* Synchronized batch norm's kernels (bn_sync.h): per-channel sums reduced by blocks
 * over (slice, channel) in double, and elementwise passes over every element. One
 * template over the element type serves FP32 and the 16-bit types. */
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"
}
#include "ops/cuda/bn_sync.h"
#include "ops/cuda/cuda_common.h"

namespace {

__device__ __forceinline__ float ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, size_t i, float v) { p[i] = __float2half(v); }
__device__ __forceinline__ void st(__nv_bfloat16 *p, size_t i, float v) { p[i] = __float2bfloat16(v); }

/* Element j of channel c (j over n * hw). */
__device__ __forceinline__ size_t at(size_t j, int c, int C, size_t hw, int nhwc)
{
	return nhwc ? j * C + c : ((j / hw) * C + c) * hw + j % hw;
}

__device__ __forceinline__ int chan_of(size_t idx, int C, size_t hw, int nhwc)
{
	return nhwc ? (int)(idx % C) : (int)((idx / hw) % C);
}

constexpr int kThreads = 256;

__device__ __forceinline__ double block_sum(double v, double *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	v = threadIdx.x < kThreads / 32 ? sh[threadIdx.x] : 0.0;
	if (warp == 0)
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, o);
	__syncthreads();
	return v;
}

template <typename T>
__global__ void sums_k(const T *x, int C, size_t hw, size_t per_c, int nhwc, double *sums)
{
	__shared__ double sh[kThreads / 32];
	int c = blockIdx.y;
	double s = 0, q = 0;
	for (size_t j = (size_t)blockIdx.x * kThreads + threadIdx.x; j < per_c; j += (size_t)gridDim.x * kThreads) {
		double v = ld(x, at(j, c, C, hw, nhwc));
		s += v;
		q += v * v;
	}
	s = block_sum(s, sh);
	q = block_sum(q, sh);
	if (threadIdx.x == 0) {
		atomicAdd(&sums[c], s);
		atomicAdd(&sums[C + c], q);
	}
}

__global__ void finalize_k(int C, const double *sums, double count, double eps, double momentum,
			   float *mean_out, float *invstd_out, float *run_mean, float *run_var)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double mean = sums[c] / count, var = sums[C + c] / count - mean * mean;
	if (var < 0)
		var = 0;
	double unbiased = count > 1 ? var * count / (count - 1) : var;
	mean_out[c] = (float)mean;
	invstd_out[c] = (float)(1.0 / sqrt(var + eps));
	run_mean[c] = (float)((1.0 - momentum) * run_mean[c] + momentum * mean);
	run_var[c] = (float)((1.0 - momentum) * run_var[c] + momentum * unbiased);
}

template <typename T>
__global__ void apply_k(const T *x, size_t total, int C, size_t hw, int nhwc, const float *gamma,
			const float *beta, const float *mean, const float *invstd, T *y)
{
	for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < total; i += (size_t)gridDim.x * kThreads) {
		int c = chan_of(i, C, hw, nhwc);
		st(y, i, (ld(x, i) - mean[c]) * invstd[c] * gamma[c] + beta[c]);
	}
}

template <typename T>
__global__ void bwd_sums_k(const T *x, const T *dy, int C, size_t hw, size_t per_c, int nhwc,
			   const float *mean, const float *invstd, double *sums)
{
	__shared__ double sh[kThreads / 32];
	int c = blockIdx.y;
	double m = mean[c], is = invstd[c], s = 0, q = 0;
	for (size_t j = (size_t)blockIdx.x * kThreads + threadIdx.x; j < per_c; j += (size_t)gridDim.x * kThreads) {
		size_t k = at(j, c, C, hw, nhwc);
		double g = ld(dy, k);
		s += g;
		q += g * ((ld(x, k) - m) * is);
	}
	s = block_sum(s, sh);
	q = block_sum(q, sh);
	if (threadIdx.x == 0) {
		atomicAdd(&sums[c], s);
		atomicAdd(&sums[C + c], q);
	}
}

__global__ void param_grads_k(int C, const double *sums, float *dgamma, float *dbeta)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c < C) {
		dbeta[c] = (float)sums[c];
		dgamma[c] = (float)sums[C + c];
	}
}

template <typename T>
__global__ void dx_k(const T *x, const T *dy, size_t total, int C, size_t hw, int nhwc,
		     const float *gamma, const float *mean, const float *invstd, const double *sums,
		     double count, T *dx, int acc)
{
	for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < total; i += (size_t)gridDim.x * kThreads) {
		int c = chan_of(i, C, hw, nhwc);
		float xhat = (ld(x, i) - mean[c]) * invstd[c];
		float k = (float)(gamma[c] * invstd[c] / count);
		float g = k * ((float)count * ld(dy, i) - (float)sums[c] - xhat * (float)sums[C + c]);
		st(dx, i, acc ? ld(dx, i) + g : g);
	}
}

unsigned grid_1d(size_t total)
{
	size_t b = (total + kThreads - 1) / kThreads;
	return (unsigned)(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);
}

dim3 grid_chan(const struct bn_args *a)
{
	size_t per_c = (size_t)a->n * a->h * a->w;
	size_t s = (per_c + kThreads * 8 - 1) / (kThreads * 8);
	return dim3((unsigned)(s < 1 ? 1 : s > 64 ? 64 : s), (unsigned)a->c);
}

template <typename F>
int by_dtype(enum gp_dtype dt, F f)
{
	switch (dt) {
	case GP_F32: f((float *)0); return 0;
	case GP_F16: f((__half *)0); return 0;
	case GP_BF16: f((__nv_bfloat16 *)0); return 0;
	default: return gp_error(GP_EUNSUPPORTED, "synchronized batch norm: no %s kernels", dtype_name(dt));
	}
}

} // namespace

extern "C" int bn_sync_sums_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				 const void *x, double *sums)
{
	cudaStream_t s = (cudaStream_t)stream;
	CUDA_TRY(cudaMemsetAsync(sums, 0, 2 * (size_t)a->c * sizeof(double), s));
	size_t hw = (size_t)a->h * a->w;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		sums_k<T><<<grid_chan(a), kThreads, 0, s>>>((const T *)x, a->c, hw, a->n * hw, nhwc, sums);
	}));
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_finalize_cuda(void *stream, const struct bn_args *a, const double *sums,
				     double count, float *save_mean, float *save_invstd, float *run_mean,
				     float *run_var)
{
	finalize_k<<<(a->c + 127) / 128, 128, 0, (cudaStream_t)stream>>>(
		a->c, sums, count, a->eps, a->momentum, save_mean, save_invstd, run_mean, run_var);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_apply_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				  const void *x, const float *gamma, const float *beta, const float *mean,
				  const float *invstd, void *y)
{
	size_t hw = (size_t)a->h * a->w, total = (size_t)a->n * a->c * hw;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		apply_k<T><<<grid_1d(total), kThreads, 0, (cudaStream_t)stream>>>(
			(const T *)x, total, a->c, hw, nhwc, gamma, beta, mean, invstd, (T *)y);
	}));
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_bwd_sums_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				     const void *x, const void *dy, const float *mean, const float *invstd,
				     double *sums, float *dgamma, float *dbeta)
{
	cudaStream_t s = (cudaStream_t)stream;
	CUDA_TRY(cudaMemsetAsync(sums, 0, 2 * (size_t)a->c * sizeof(double), s));
	size_t hw = (size_t)a->h * a->w;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		bwd_sums_k<T><<<grid_chan(a), kThreads, 0, s>>>((const T *)x, (const T *)dy, a->c, hw,
								a->n * hw, nhwc, mean, invstd, sums);
	}));
	CUDA_CHECK_LAUNCH();
	param_grads_k<<<(a->c + 127) / 128, 128, 0, s>>>(a->c, sums, dgamma, dbeta);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_bwd_dx_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				   const void *x, const void *dy, const float *gamma, const float *mean,
				   const float *invstd, const double *sums, double count, void *dx,
				   int accumulate)
{
	size_t hw = (size_t)a->h * a->w, total = (size_t)a->n * a->c * hw;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		dx_k<T><<<grid_1d(total), kThreads, 0, (cudaStream_t)stream>>>(
			(const T *)x, (const T *)dy, total, a->c, hw, nhwc, gamma, mean, invstd, sums, count,
			(T *)dx, accumulate);
	}));
	CUDA_CHECK_LAUNCH();
	return 0;
}
