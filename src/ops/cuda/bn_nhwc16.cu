/* Batch norm in training on 16-bit NHWC tensors with own kernels, fused with the ReLU
 * or ReLU6 after it and, forward, with a residual add before that activation:
 *   forward  y  = act(bn(x) (+ z))          (batch statistics, running update)
 *   backward dx = bn'(x)^T (dy * act'(bn(x)))  (the mask recomputed from x)
 * and, for a residual block's last batch norm, the backward of the ReLU after the add
 * from that ReLU's output y: dz = dy * (y > 0) written for the add, dx = bn'(x)^T dz.
 * cuDNN's NHWC batch norm fuses ReLU but not ReLU6 (MobileNetV2's activation then
 * costs a pass forward and another backward), and on MobileNetV2's small channel
 * counts over large planes its persistent kernels are far from the memory bound
 * (docs/cuda.md, "16-bit batch norm on own kernels"). Which batch norms take these
 * kernels is bn16_rule.h's decision.
 *
 * Layout of the work: a thread owns 8 adjacent channels (one 16-byte load per row of
 * the N x H x W rows), a block cx threads across channel groups by ry rows; a slice
 * of the rows per block row of the grid, one wave of blocks in all. Each block's sums
 * are combined over its rows in a fixed order, the slices per channel in order by a
 * per-channel kernel: the result is the same on every run of a GPU model (no atomics).
 * The forward's output is bn.cu's apply pass (bn_apply_cuda); every pre-activation
 * value comes from bn_val.cuh, so the mask in backward, which tests the pre-activation
 * against bounds equal to the unfused ReLU's test on the 16-bit output the forward
 * wrote (bn16_mask.h), is the forward's. */
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
#include "ops/cuda/bn16_mask.h"

/* Slices of the rows: one wave of blocks (resident_blocks), at most BN16_TARGET_BLOCKS
 * in all and BN16_SLICES per channel group, which size the scratch. */
#define BN16_SLICES 512
#define BN16_TARGET_BLOCKS 1024
/* 16-byte slots a thread's ring of copies in flight holds (bn16_walk): BN16_RING / NA
 * chunks of each of the NA arrays a pass reads, all but one in flight while that one is
 * used, holding no register. 12: 48 KB of shared memory a block. */
#define BN16_RING 12
/* Blocks a multiprocessor the passes that sum (statistics, backward reduce) are
 * compiled for: at most 65536 / (BLOCK x this) registers a thread. Three (80
 * registers) spill in the reduce and made resnet50 bf16 6% slower; two with the double
 * sums in shared memory run the reduce 15% faster than with them in registers (s25). */
#define BN16_REDUCE_BLOCKS 2

/* Test hook: at most this many slices (0: no cap), to give each thread many rows on a
 * small tensor. Set between runs, never during one. */
static int bn16_max_slices;

extern "C" void bn16_cuda_set_max_slices(int n)
{
	bn16_max_slices = n > 0 ? n : 0;
}

/* Channel groups of 8 per block across: at most 32, spread evenly over the blocks
 * (40 groups: 2 x 20, not 32 + 8). */
static int bn16_cx(int groups)
{
	int bx = (groups + 31) / 32;
	return (groups + bx - 1) / bx;
}

/* The most slices c channels take, whatever the rows: what the scratch holds. */
static int bn16_slices_cap(int c)
{
	int groups = c / VEC, cx = bn16_cx(groups), bx = (groups + cx - 1) / cx;
	int s = (BN16_TARGET_BLOCKS + bx - 1) / bx;
	return s > BN16_SLICES ? BN16_SLICES : s;
}

/* Scratch: the slices' double partial sums, then two float coefficients per channel. */
extern "C" size_t bn16_scratch_bytes(int c)
{
	if (c < VEC)
		return 0;
	return (size_t)bn16_slices_cap(c) * 2 * (size_t)c * sizeof(double) + 2 * (size_t)c * sizeof(float);
}

/* The block's shape and the grid for c channels over `rows` rows: about `target` blocks
 * (one wave, resident_blocks), at most the scratch's slices. */
struct bn16_grid {
	int groups, cx, ry, slices;
	dim3 grid, block;
};

static bn16_grid bn16_grid_for(size_t rows, int c, unsigned target)
{
	bn16_grid g;
	g.groups = c / VEC;
	g.cx = bn16_cx(g.groups);
	g.ry = BLOCK / g.cx;
	int bx = (g.groups + g.cx - 1) / g.cx;
	size_t s = (size_t)bn16_slices_cap(c), most = (rows + g.ry - 1) / g.ry, want = (target + bx - 1) / bx;
	s = s > want ? want : s;
	s = s > most ? most : s;
	if (bn16_max_slices && s > (size_t)bn16_max_slices)
		s = (size_t)bn16_max_slices;
	g.slices = s < 1 ? 1 : (int)s;
	g.grid = dim3((unsigned)bx, (unsigned)g.slices);
	g.block = dim3((unsigned)g.cx, (unsigned)g.ry);
	return g;
}

/* Sums of 8 channels: float for 32 rows at a time in registers, then moved into the
 * thread's double sums, which live in the block's shared memory (sh: 2 x VEC x BLOCK
 * doubles, element e of sum j of thread t at sh[(j * VEC + e) * BLOCK + t], consecutive
 * threads in consecutive words): 32 registers fewer than doubles in registers, which
 * held the passes at two blocks a multiprocessor (s25). */
struct sums8 {
	float f1[VEC], f2[VEC];
	double *d;
	int k;
	__device__ sums8(double *sh) : d(sh + threadIdx.y * blockDim.x + threadIdx.x), k(0)
	{
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			f1[e] = f2[e] = 0.0f;
			d[e * BLOCK] = d[(VEC + e) * BLOCK] = 0.0;
		}
	}
	__device__ void add(int e, float a, float b)
	{
		f1[e] += a;
		f2[e] += b;
	}
	/* sums of g and g * x, the product rounded before the add (never an FMA): the
	 * same bits whichever way g was found */
	__device__ void add_prod(int e, float g, float x)
	{
		f1[e] += g;
		f2[e] += __fmul_rn(g, x);
	}
	__device__ void step()
	{
		if (++k == 32) {
			flush();
			k = 0;
		}
	}
	__device__ void flush()
	{
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			d[e * BLOCK] += f1[e];
			d[(VEC + e) * BLOCK] += f2[e];
			f1[e] = f2[e] = 0.0f;
		}
	}
};

/* The block's sums combined over its ry rows of threads, in row order, into
 * partial[(ch * slices + slice) * 2 + {0, 1}]. sh: the sums' shared memory. */
__device__ static void bn16_block_combine(sums8 &s, int c, int slices, double *sh, double *partial)
{
	int cx = blockDim.x, ry = blockDim.y, t = threadIdx.y * cx + threadIdx.x;
	s.flush();
	__syncthreads();
	/* one thread per (channel of the block, sum): cx * VEC * 2 values */
	int block_threads = cx * ry;
	for (int v = t; v < cx * VEC * 2; v += block_threads) {
		int which = v / (cx * VEC), rest = v % (cx * VEC), tx = rest / VEC, e = rest % VEC;
		int ch = (blockIdx.x * cx + tx) * VEC + e;
		if (ch >= c)
			continue;
		double acc = 0.0;
		for (int y = 0; y < ry; y++)
			acc += sh[(size_t)(which * VEC + e) * BLOCK + y * cx + tx];
		partial[((size_t)ch * slices + blockIdx.y) * 2 + which] = acc;
	}
}

/* Whether the activation passes the gradient at x: bn16_mask.h's bounds on the
 * pre-activation (the forward's formula, bn_val.cuh, without the +0 that only turns -0
 * into 0, which fails either way), equal to the unfused ReLU (ReLU6) backward's test
 * y > 0 (and y < 6) on the 16-bit output the forward wrote. */
__device__ static inline bool bn16_mask(float x, float m, float is, float g, float b, int act, float lo, float hi)
{
	if (!act)
		return true;
	float p = __fmaf_rn(bn16_xhat(x, m, is), g, b);
	return p > lo && p < hi;
}

/* Rows [r0, r1) of this block's slice, for this thread's row lane. */
__device__ static inline void bn16_slice(size_t rows, int slices, size_t *r0, size_t *r1)
{
	size_t per = (rows + slices - 1) / slices;
	*r0 = (size_t)blockIdx.y * per;
	*r1 = *r0 + per < rows ? *r0 + per : rows;
}

/* This thread's ring: BN16_RING 16-byte slots in the block's dynamic shared memory,
 * slot j of thread t at bn16_ring[j * BLOCK + t] (consecutive threads in consecutive 16
 * bytes: no bank conflict). */
extern __shared__ uint4 bn16_ring[];

static const size_t bn16_ring_bytes = (size_t)BN16_RING * BLOCK * sizeof(uint4);

/* Walks chunks k = k0, k0 + step, ... below end of the NA arrays a, b, c (1 to 3, as
 * 16-byte packs): f(a_k, b_k, c_k, k) for each, as the packs they are (widened where
 * used). A chunk's copies into this thread's ring (cp.async, stage by stage of NA slots)
 * are issued stages - 1 chunks before f needs them: that many chunks in flight without
 * the registers that loads into them would hold (s27: resnet50 bf16's passes at 65-86%
 * of DRAM's rate, 58-78% with two chunks in registers and an L2 prefetch of the next
 * two, and 1.95% faster). Each thread reads only the slots it filled, so a wait on its
 * own copies orders them: no barrier. The copy into a stage is issued an iteration
 * after that stage was read. */
template <int NA, typename T, typename F>
__device__ static inline void bn16_walk(size_t k, size_t end, size_t step, const T *a, const T *b, const T *c, F f)
{
	constexpr int S = BN16_RING / NA;
	static_assert(S >= 2, "bn16_walk: a ring of two stages at least");
	const pack<T> *src[3] = { reinterpret_cast<const pack<T> *>(a), reinterpret_cast<const pack<T> *>(b),
				  reinterpret_cast<const pack<T> *>(c) };
	uint4 *ring = bn16_ring + threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
	for (int st = 0; st < S - 1; st++) {
		size_t ks = k + (size_t)st * step;
		if (ks < end) {
#pragma unroll
			for (int j = 0; j < NA; j++)
				cp_async16(&ring[(st * NA + j) * BLOCK], &src[j][ks]);
		}
		cp_async_commit();
	}
	for (int st = 0; k < end; k += step) {
		size_t kn = k + (size_t)(S - 1) * step;
		int sn = st ? st - 1 : S - 1;
		if (kn < end) {
#pragma unroll
			for (int j = 0; j < NA; j++)
				cp_async16(&ring[(sn * NA + j) * BLOCK], &src[j][kn]);
		}
		cp_async_commit();
		cp_async_wait<S - 1>(); /* this chunk's group, committed S - 1 groups ago */
		pack<T> v[NA];
#pragma unroll
		for (int j = 0; j < NA; j++)
			v[j] = *reinterpret_cast<const pack<T> *>(&ring[(st * NA + j) * BLOCK]);
		f(v[0], v[NA > 1 ? 1 : 0], v[NA > 2 ? 2 : 0], k);
		st = st + 1 == S ? 0 : st + 1;
	}
}

/* This thread's chunks of the block's slice of the rows, for channel group cg: rows
 * r0 + threadIdx.y, ... by blockDim.y, below r1. */
template <int NA, typename T, typename F>
__device__ static inline void bn16_walk_rows(size_t rows, int slices, int groups, int cg, const T *a, const T *b,
					     const T *c, F f)
{
	size_t r0, r1;
	bn16_slice(rows, slices, &r0, &r1);
	bn16_walk<NA>((r0 + threadIdx.y) * groups + cg, r1 * groups, (size_t)blockDim.y * groups, a, b, c, f);
}

/* partial = { sum d, sum d^2 } per channel and slice, d = x - shift, with shift the
 * channel's first element: sums about a value inside the data's range keep the
 * variance from cancelling. */
template <typename T>
__global__ static void __launch_bounds__(BLOCK, BN16_REDUCE_BLOCKS) bn16_stats_kernel(size_t rows, int c, int slices, const T *x, double *partial)
{
	__shared__ double sh[2 * BLOCK * VEC];
	int groups = c / VEC, cg = blockIdx.x * blockDim.x + threadIdx.x;
	sums8 s(sh);
	if (cg < groups) {
		float shift[VEC];
		load8<true>(x, (size_t)cg, shift);
		bn16_walk_rows<1>(rows, slices, groups, cg, x, x, x,
				  [&](const pack<T> &v, const pack<T> &, const pack<T> &, size_t) {
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				float d = to_f(v.v[e]) - shift[e];
				s.add(e, d, d * d);
			}
			s.step();
		});
	}
	bn16_block_combine(s, c, slices, sh, partial);
}

/* The slices' two sums of channel ch, combined by one warp: each lane sums every 32nd
 * slice, then a butterfly over the lanes, in the same order on every run (a single
 * thread's chain over 512 slices would take microseconds per batch norm). */
__device__ static void bn16_combine(const double *partial, size_t ch, int slices, double *s1, double *s2)
{
	int lane = threadIdx.x & 31;
	double a = 0.0, b = 0.0;
	for (int s = lane; s < slices; s += 32) {
		a += partial[(ch * slices + s) * 2];
		b += partial[(ch * slices + s) * 2 + 1];
	}
	for (int off = 16; off > 0; off >>= 1) {
		a += __shfl_xor_sync(FULL_MASK, a, off);
		b += __shfl_xor_sync(FULL_MASK, b, off);
	}
	*s1 = a;
	*s2 = b;
}

/* A warp per channel, for the final kernels. */
static unsigned bn16_warp_blocks(int c)
{
	return (unsigned)(((size_t)c * 32 + BLOCK - 1) / BLOCK);
}

/* Batch statistics as PyTorch keeps them: saved mean and 1 / sqrt(biased var + eps);
 * the running variance takes the unbiased one. */
template <typename T>
__global__ static void bn16_stats_final_kernel(int c, int slices, double m, double eps, double momentum,
					       const T *x, const double *partial, float *save_mean,
					       float *save_invstd, float *running_mean, float *running_var)
{
	size_t ch = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	if (ch >= (size_t)c) /* whole warps: c * 32 threads and more */
		return;
	double s1, s2;
	bn16_combine(partial, ch, slices, &s1, &s2);
	if ((threadIdx.x & 31) == 0) {
		bn_stats_write(ch, s1, s2, m, to_f(x[ch]), eps, momentum, save_mean, save_invstd, running_mean,
			       running_var);
	}
}

/* What the backward reduce masks dy with (a template argument, so that each form
 * holds only the registers it needs): nothing; the activation after the batch norm,
 * from x (bn16_mask); or the ReLU after a residual add that the batch norm feeds, from
 * that ReLU's output. */
enum bn16_bwd_mask { BN16_MASK_NONE, BN16_MASK_ACT, BN16_MASK_OUT };

/* partial = { sum g, sum g * xhat } per channel and slice, g = dy where the activation
 * passes. BN16_MASK_OUT: g = dy where the ReLU after the add passes it: at y > 0 (and
 * below infinity) on that ReLU's 16-bit output y, the unfused ReLU backward's test
 * (eltwise.cu); g is also written to dz (which may be dy itself: each element is read
 * and written by one thread), the gradient the add hands on, the same bits as that
 * ReLU's backward pass would have written. */
template <typename T, int MASK>
__global__ static void __launch_bounds__(BLOCK, BN16_REDUCE_BLOCKS)
	bn16_bwd_reduce_kernel(size_t rows, int c, int slices, float lo, float hi, const T *x, const T *dy,
			       const T *y, T *dz, const float *gamma, const float *beta, const float *mean,
			       const float *invstd, double *partial)
{
	__shared__ double sh[2 * BLOCK * VEC];
	int groups = c / VEC, cg = blockIdx.x * blockDim.x + threadIdx.x;
	sums8 s(sh);
	if (cg < groups) {
		float mu[VEC], is[VEC], ga[MASK == BN16_MASK_ACT ? VEC : 1], be[MASK == BN16_MASK_ACT ? VEC : 1];
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			int ch = cg * VEC + e;
			mu[e] = mean[ch];
			is[e] = invstd[ch];
			if constexpr (MASK == BN16_MASK_ACT) { /* the mask's pre-activation */
				ga[e] = gamma[ch];
				be[e] = beta[ch];
			}
		}
		bn16_walk_rows<MASK == BN16_MASK_OUT ? 3 : 2>(
			rows, slices, groups, cg, x, dy, y,
			[&](const pack<T> &v, const pack<T> &d, const pack<T> &o, size_t k) {
				float gs[VEC];
#pragma unroll
				for (int e = 0; e < VEC; e++) {
					float xv = to_f(v.v[e]), xh = bn16_xhat(xv, mu[e], is[e]), g = to_f(d.v[e]);
					if constexpr (MASK == BN16_MASK_OUT) {
						float yv = to_f(o.v[e]);
						g = yv > 0.0f && yv < INFINITY ? g : 0.0f;
						gs[e] = g;
					} else if constexpr (MASK == BN16_MASK_ACT) {
						g = bn16_mask(xv, mu[e], is[e], ga[e], be[e], 1, lo, hi) ? g : 0.0f;
					}
					s.add_prod(e, g, xh);
				}
				if constexpr (MASK == BN16_MASK_OUT)
					store8<true>(dz, k, gs);
				s.step();
			});
	}
	bn16_block_combine(s, c, slices, sh, partial);
}

/* dbeta = sum g, dgamma = sum g * xhat; coef = { mean(g), mean(g * xhat) } for dx. */
__global__ static void bn16_bwd_final_kernel(int c, int slices, double m, const double *partial, float *coef,
					     float *dgamma, float *dbeta)
{
	size_t ch = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	if (ch >= (size_t)c)
		return;
	double s1, s2;
	bn16_combine(partial, ch, slices, &s1, &s2);
	if ((threadIdx.x & 31) == 0) {
		dbeta[ch] = (float)s1;
		dgamma[ch] = (float)s2;
		coef[ch * 2] = (float)(s1 / m);
		coef[ch * 2 + 1] = (float)(s2 / m);
	}
}

/* dx (+)= gamma * invstd * (g - mean(g) - xhat * mean(g * xhat)), rounded once. A
 * thread keeps one channel group (its chunks step by a multiple of c / 8), so its
 * statistics load once; ACC: dx is read too, and added to. */
template <typename T, bool ACC>
__global__ static void bn16_bwd_dx_kernel(size_t chunks, unsigned groups, int act, float lo, float hi,
					  const T *__restrict__ x, const T *__restrict__ dy, const float *gamma,
					  const float *beta, const float *mean, const float *invstd,
					  const float *coef, T *__restrict__ dx)
{
	unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned threads = gridDim.x * blockDim.x / groups * groups;
	if (tid >= threads)
		return;
	unsigned c0 = tid % groups * VEC;
	float mu[VEC], is[VEC], ga[VEC], be[VEC], k1[VEC], k2[VEC];
#pragma unroll
	for (int e = 0; e < VEC; e++) {
		unsigned ch = c0 + e;
		mu[e] = mean[ch];
		is[e] = invstd[ch];
		ga[e] = gamma[ch];
		be[e] = act ? beta[ch] : 0.0f;
		k1[e] = coef[ch * 2];
		k2[e] = coef[ch * 2 + 1];
	}
	bn16_walk<ACC ? 3 : 2>(tid, chunks, threads, x, dy, dx,
			       [&](const pack<T> &vx, const pack<T> &vd, const pack<T> &vo, size_t k) {
		float o[VEC];
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			float v = to_f(vx.v[e]), d = to_f(vd.v[e]);
			float xh = bn16_xhat(v, mu[e], is[e]);
			float g = bn16_mask(v, mu[e], is[e], ga[e], be[e], act, lo, hi) ? d : 0.0f;
			float r = ga[e] * is[e] * (g - k1[e] - xh * k2[e]);
			o[e] = ACC ? to_f(vo.v[e]) + r : r;
		}
		store8<true>(dx, k, o);
	});
}

/* --- launchers ----------------------------------------------------------------------- */

static int bn16_check(const struct bn_args *a, const void *p, const void *q, const void *r)
{
	if (a->c % VEC || !aligned(p, 16) || !aligned(q, 16) || !aligned(r, 16))
		return gp_error(GP_EINVAL, "16-bit NHWC batch norm of %dx%dx%dx%d: the own kernels take "
				"channels in multiples of %d and 16-byte aligned tensors", a->n, a->c, a->h,
				a->w, VEC);
	return 0;
}

/* Whether there is an activation, and its mask's bounds for T (bn16_mask.h). */
template <typename T>
static int act_of(enum bn_apply_act act, float *lo, float *hi)
{
	struct bn16_pass b = bn16_pass_bounds(std::is_same<T, __nv_bfloat16>::value, act == BN_APPLY_RELU6);
	*lo = b.lo;
	*hi = b.hi;
	return act != BN_APPLY_LINEAR;
}

/* One wave of `kernel`'s blocks, each with its threads' rings: at most
 * BN16_TARGET_BLOCKS. */
template <auto kernel>
static int bn16_wave(unsigned *wave)
{
	int resident;
	GP_TRY(kernel_prepare<kernel>(bn16_ring_bytes, &resident));
	*wave = (unsigned)resident < BN16_TARGET_BLOCKS ? (unsigned)resident : BN16_TARGET_BLOCKS;
	return 0;
}

template <typename T>
static int bn16_stats_t(cudaStream_t s, const struct bn_args *a, const void *x, float *save_mean,
			float *save_invstd, float *running_mean, float *running_var, void *scratch)
{
	size_t rows = (size_t)a->n * a->h * a->w;
	unsigned wave;
	GP_TRY(bn16_wave<bn16_stats_kernel<T>>(&wave));
	bn16_grid g = bn16_grid_for(rows, a->c, wave);
	double *partial = (double *)scratch;
	bn16_stats_kernel<T><<<g.grid, g.block, bn16_ring_bytes, s>>>(rows, a->c, g.slices, (const T *)x, partial);
	CUDA_CHECK_LAUNCH();
	bn16_stats_final_kernel<T><<<bn16_warp_blocks(a->c), BLOCK, 0, s>>>(a->c, g.slices, (double)rows, a->eps,
								    a->momentum, (const T *)x, partial,
								    save_mean, save_invstd, running_mean,
								    running_var);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn16_stats_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, const void *x,
			       float *save_mean, float *save_invstd, float *running_mean, float *running_var,
			       void *scratch)
{
	if (!a->n || !a->c || !a->h || !a->w)
		return 0;
	GP_TRY(bn16_check(a, x, NULL, NULL));
	return DISPATCH_H(dt, bn16_stats_t, s, a, x, save_mean, save_invstd, running_mean, running_var, scratch);
}

extern "C" int bn16_fwd_train_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, const void *x,
				   const void *z, enum bn_apply_act act, const float *gamma, const float *beta,
				   void *y, float *save_mean, float *save_invstd, float *running_mean,
				   float *running_var, void *scratch)
{
	if (!a->n || !a->c || !a->h || !a->w)
		return 0;
	GP_TRY(bn16_check(a, x, z, y));
	GP_TRY(DISPATCH_H(dt, bn16_stats_t, s, a, x, save_mean, save_invstd, running_mean, running_var,
			  scratch));
	return bn_apply_cuda(s, dt, 1, a->n, a->c, a->h * a->w, x, z, gamma, beta, save_mean, save_invstd,
			     act, y);
}

/* The backward reduce in its MASK form (y and dz read only by BN16_MASK_OUT), in one
 * wave of its own blocks: *g, the grid it ran. */
template <typename T, int MASK>
static int bn16_reduce_launch(cudaStream_t s, size_t rows, int c, float lo, float hi, const T *x, const T *dy,
			      const T *y, T *dz, const float *gamma, const float *beta, const float *mean,
			      const float *invstd, double *partial, bn16_grid *g)
{
	unsigned wave;
	GP_TRY((bn16_wave<bn16_bwd_reduce_kernel<T, MASK>>(&wave)));
	*g = bn16_grid_for(rows, c, wave);
	bn16_bwd_reduce_kernel<T, MASK><<<g->grid, g->block, bn16_ring_bytes, s>>>(rows, c, g->slices, lo, hi, x, dy, y,
										  dz, gamma, beta, mean, invstd, partial);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int bn16_bwd_t(cudaStream_t s, const struct bn_args *a, enum bn_apply_act act, const void *x,
		      const void *dy, const void *y, void *dz, const float *gamma, const float *beta,
		      const float *save_mean, const float *save_invstd, void *dx, int accumulate, float *dgamma,
		      float *dbeta, void *scratch)
{
	size_t rows = (size_t)a->n * a->h * a->w, chunks = rows * (size_t)a->c / VEC;
	float lo, hi;
	int on = act_of<T>(act, &lo, &hi);
	double *partial = (double *)scratch;
	float *coef = (float *)(partial + (size_t)bn16_slices_cap(a->c) * 2 * a->c);
	auto reduce = y ? bn16_reduce_launch<T, BN16_MASK_OUT>
			: on ? bn16_reduce_launch<T, BN16_MASK_ACT> : bn16_reduce_launch<T, BN16_MASK_NONE>;
	bn16_grid g;
	GP_TRY(reduce(s, rows, a->c, lo, hi, (const T *)x, (const T *)dy, (const T *)y, (T *)dz, gamma, beta,
		      save_mean, save_invstd, partial, &g));
	if (y)
		dy = dz; /* what the activation passed */
	bn16_bwd_final_kernel<<<bn16_warp_blocks(a->c), BLOCK, 0, s>>>(a->c, g.slices, (double)rows, partial, coef,
							       dgamma, dbeta);
	CUDA_CHECK_LAUNCH();
	unsigned wave;
	if (accumulate)
		GP_TRY((bn16_wave<bn16_bwd_dx_kernel<T, true>>(&wave)));
	else
		GP_TRY((bn16_wave<bn16_bwd_dx_kernel<T, false>>(&wave)));
	unsigned blocks = grid_for(chunks) < wave ? grid_for(chunks) : wave;
	if ((unsigned)g.groups > blocks * BLOCK)
		return gp_error(GP_EINVAL, "16-bit NHWC batch norm of %d channels: too many for one pass",
				a->c);
	auto dx_kernel = accumulate ? bn16_bwd_dx_kernel<T, true> : bn16_bwd_dx_kernel<T, false>;
	dx_kernel<<<blocks, BLOCK, bn16_ring_bytes, s>>>(chunks, (unsigned)g.groups, y ? 0 : on, lo, hi, (const T *)x,
							   (const T *)dy, gamma, beta, save_mean, save_invstd, coef,
							   (T *)dx);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn16_bwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, enum bn_apply_act act,
			     const void *x, const void *dy, const float *gamma, const float *beta,
			     const float *save_mean, const float *save_invstd, void *dx, int accumulate,
			     float *dgamma, float *dbeta, void *scratch)
{
	if (!a->n || !a->c || !a->h || !a->w)
		return 0;
	if (act != BN_APPLY_LINEAR && !beta)
		return gp_error(GP_EINVAL, "batch norm backward with an activation needs beta (the mask)");
	GP_TRY(bn16_check(a, x, dy, dx));
	return DISPATCH_H(dt, bn16_bwd_t, s, a, act, x, dy, NULL, NULL, gamma, beta, save_mean, save_invstd, dx,
			  accumulate, dgamma, dbeta, scratch);
}

extern "C" int bn16_bwd_out_masked_cuda(cudaStream_t s, enum gp_dtype dt, const struct bn_args *a, const void *x,
					const void *y, const void *dy, void *dz, const float *gamma,
					const float *save_mean, const float *save_invstd, void *dx, int accumulate,
					float *dgamma, float *dbeta, void *scratch)
{
	if (!a->n || !a->c || !a->h || !a->w)
		return 0;
	GP_TRY(bn16_check(a, x, dy, dx));
	GP_TRY(bn16_check(a, y, dz, dz));
	if (dz == dx || dz == x || dz == y)
		return gp_error(GP_EINVAL, "16-bit batch norm backward masked by the output: dz may be dy, "
				"never x, y or dx");
	return DISPATCH_H(dt, bn16_bwd_t, s, a, BN_APPLY_LINEAR, x, dy, y, dz, gamma, (const float *)NULL,
			  save_mean, save_invstd, dx, accumulate, dgamma, dbeta, scratch);
}

/* --- test hook: the mask's bounds against the rounded form, over every float ------- */

/* count += the floats p where lo < p < hi and the unfused activation's test on the
 * forward's rounded output (bn_val.cuh's activation of p + 0, rounded to T, > 0 and
 * < cap) disagree */
template <typename T>
__global__ static void bn16_mask_sweep_kernel(float lo, float hi, float cap, unsigned long long *count)
{
	unsigned long long n = 0;
	uint64_t step = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < ((uint64_t)1 << 32); i += step) {
		float p = __uint_as_float((unsigned)i);
		float y = rounded<T>(bn16_act(__fadd_rn(p, 0.0f), 1, cap));
		bool ref = y > 0.0f && y < cap;
		n += ref != (p > lo && p < hi);
	}
	for (int off = 16; off > 0; off >>= 1)
		n += __shfl_xor_sync(FULL_MASK, n, off);
	if ((threadIdx.x & 31) == 0 && n)
		atomicAdd(count, n);
}

template <typename T>
static int bn16_mask_sweep_t(enum bn_apply_act act, unsigned long long *mismatches)
{
	float lo, hi;
	act_of<T>(act, &lo, &hi);
	unsigned long long *d = NULL;
	CUDA_TRY(cudaMalloc((void **)&d, sizeof *d));
	int rc = CUDA_CHECK(cudaMemset(d, 0, sizeof *d));
	if (!rc) {
		bn16_mask_sweep_kernel<T><<<4096, BLOCK>>>(lo, hi, act == BN_APPLY_RELU6 ? 6.0f : INFINITY, d);
		rc = CUDA_CHECK(cudaGetLastError());
	}
	if (!rc)
		rc = CUDA_CHECK(cudaMemcpy(mismatches, d, sizeof *d, cudaMemcpyDeviceToHost));
	cudaFree(d);
	return rc;
}

extern "C" int bn16_cuda_mask_mismatches(enum gp_dtype dt, enum bn_apply_act act, unsigned long long *mismatches)
{
	if (act == BN_APPLY_LINEAR)
		return gp_error(GP_EINVAL, "batch norm mask sweep: no activation");
	return DISPATCH_H(dt, bn16_mask_sweep_t, act, mismatches);
}
