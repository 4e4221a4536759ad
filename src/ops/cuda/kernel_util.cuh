/* Device helpers shared by the own kernel files: launch sizing, grid-stride loops,
 * deterministic block reductions, element access for float and 16-bit types, the
 * dispatch of templated 16-bit launchers.
 * Included after the project headers; everything is static to each file. */
#ifndef GP_KERNEL_UTIL_CUH
#define GP_KERNEL_UTIL_CUH

#include <math.h>
#include <stdint.h>

#include <atomic>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define BLOCK 256
#define FULL_MASK 0xffffffffu

/* Grid-stride loops let a capped grid cover any count. */
static inline unsigned grid_for(size_t count)
{
	size_t g = (count + BLOCK - 1) / BLOCK;
	return g > 65536 ? 65536u : (unsigned)g;
}

/* Blocks of `kernel` (BLOCK threads, no dynamic shared memory) that the current device
 * holds at once, at most cap: the SMs times the blocks an SM takes. A pass that launches
 * one such wave and loops pays a thread's set-up (statistics loaded, a block's final
 * combine) once and runs no part-full last wave: on MobileNetV2's 7 x 7 and 14 x 14
 * batch norms 4,096 blocks of a dx pass each did one or two chunks a thread after loading
 * 48 statistics (ncu, s21-1). Asked once per kernel and device (and cap). A pass whose
 * sums follow the grid then gives the same bits on every run of one GPU model, not
 * across models. */
template <auto kernel>
static unsigned resident_blocks(unsigned cap)
{
	static std::atomic<int> cache[64];
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
		return cap;
	int n = cache[dev].load(std::memory_order_relaxed);
	if (!n) {
		int sms = 0, per = 0;
		if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
		    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, BLOCK, 0) != cudaSuccess)
			return cap;
		n = sms * (per > 0 ? per : 1);
		cache[dev].store(n, std::memory_order_relaxed);
	}
	return (unsigned)n < cap ? (unsigned)n : cap;
}

/* An L2 prefetch of the bytes at p: a load in flight that holds no register. */
__device__ static inline void prefetch_l2(const void *p)
{
	asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Once per kernel and device: lets `kernel` take `smem` bytes of dynamic shared memory
 * (past the default 48 KB), then *resident = the blocks of BLOCK threads with them that
 * the device holds at once (the SMs times the blocks an SM takes). */
template <auto kernel>
static int kernel_prepare(size_t smem, int *resident)
{
	static std::atomic<int> cache[64];
	int dev = 0;
	CUDA_TRY(cudaGetDevice(&dev));
	int n = dev >= 0 && dev < 64 ? cache[dev].load(std::memory_order_relaxed) : 0;
	if (!n) {
		CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
		int per = 0, sms = 0;
		CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, BLOCK, smem));
		CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
		n = sms * (per > 0 ? per : 1);
		if (dev >= 0 && dev < 64)
			cache[dev].store(n, std::memory_order_relaxed);
	}
	*resident = n;
	return 0;
}

/* Asynchronous 16-byte copies from global into shared memory (cp.async, sm_80 on),
 * committed in groups: loads in flight that hold no register. .cg: through L2 only. */
__device__ static inline void cp_async16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
		     "l"(src)
		     : "memory");
}

__device__ static inline void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Until at most N of this thread's latest groups are still in flight. */
template <int N> __device__ static inline void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#define FOR_EACH(i, count)                                                             \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);    \
	     i += (size_t)gridDim.x * blockDim.x)

/* Pooling backward as a gather: the outputs along one axis whose k-wide window (stride,
 * pad) covers input position i are lo..hi (empty when hi < lo). */
__device__ static inline void pool_covering(int i, int k, int stride, int pad, int n_out, int *lo, int *hi)
{
	int t = i + pad - k + 1;
	*lo = t <= 0 ? 0 : (t + stride - 1) / stride;
	*hi = min(n_out - 1, (i + pad) / stride);
}

/* --- block reductions (blockDim.x a multiple of 32, at most 1024) ----------------------
 * Butterfly shuffles leave the same bits in every lane, and the warp partials are
 * combined in warp order, so the result is the same on every run and every thread. */
__device__ static double block_sum_d(double v)
{
	__shared__ double part[32];
	__shared__ double res;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_xor_sync(FULL_MASK, v, off);
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? part[lane] : 0.0;
		for (int off = 16; off > 0; off >>= 1)
			v += __shfl_xor_sync(FULL_MASK, v, off);
		if (lane == 0)
			res = v;
	}
	__syncthreads();
	return res;
}

/* Argmax with ties going to the lower index, as a sequential scan would. */
__device__ static void argmax_merge(float *v, int *i, float ov, int oi)
{
	if (ov > *v || (ov == *v && oi < *i)) {
		*v = ov;
		*i = oi;
	}
}

__device__ static int block_argmax(float v, int i)
{
	__shared__ float pv[32];
	__shared__ int pi[32];
	__shared__ int res;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int off = 16; off > 0; off >>= 1)
		argmax_merge(&v, &i, __shfl_xor_sync(FULL_MASK, v, off),
			     __shfl_xor_sync(FULL_MASK, i, off));
	if (lane == 0) {
		pv[warp] = v;
		pi[warp] = i;
	}
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? pv[lane] : -INFINITY;
		i = lane < nw ? pi[lane] : 0x7fffffff;
		for (int off = 16; off > 0; off >>= 1)
			argmax_merge(&v, &i, __shfl_xor_sync(FULL_MASK, v, off),
				     __shfl_xor_sync(FULL_MASK, i, off));
		if (lane == 0)
			res = i;
	}
	__syncthreads();
	return res;
}

/* --- element access ----------------------------------------------------------------------
 * Overloads rather than templates: reading widens exactly, writing rounds to nearest even. */
__device__ static inline float to_f(float v) { return v; }
__device__ static inline float to_f(__half v) { return __half2float(v); }
__device__ static inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ static inline void put_f(float *p, float v) { *p = v; }
__device__ static inline void put_f(__half *p, float v) { *p = __float2half_rn(v); }
__device__ static inline void put_f(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* --- dtype dispatch ---------------------------------------------------------------------- */
static inline int bad_dtype(enum gp_dtype ht)
{
	return gp_error(GP_EINVAL, "CUDA kernels take f32, f16 or bf16, not %s", dtype_name(ht));
}

/* Instantiate a templated host launcher for the 16-bit type ht names (launchers take
 * GP_F32 on their float path before this). */
#define DISPATCH_H(ht, fn, ...)                                                        \
	((ht) == GP_F16    ? fn<__half>(__VA_ARGS__)                                  \
	 : (ht) == GP_BF16 ? fn<__nv_bfloat16>(__VA_ARGS__)                           \
			   : bad_dtype(ht))

#endif
