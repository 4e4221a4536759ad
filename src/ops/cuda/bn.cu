/* Batch norm on FP32 NCHW tensors with own kernels, optionally fused with the ReLU
 * (ReLU6) after it and, forward, with a residual add before that activation:
 *   forward  y  = act(bn(x) (+ z))          (batch statistics, running update)
 *   backward dx = bn'(x)^T (dy * act'(bn(x)))  (the mask is recomputed from x)
 * cuDNN's fused batch norm (the Ex calls' activation op sets) takes only 16-bit NHWC
 * data; in FP32 the ReLU would otherwise cost a separate pass forward and another in
 * backward. The same kernels serve tensors cuDNN cannot describe (over 2^31 - 1
 * elements) and recompute outputs in backward (bn_apply_cuda).
 *
 * Layout of the work: a statistics pass per (channel, slice of the batch) block, the
 * slices combined in order by a per-channel kernel (reproducible, no atomics), then an
 * element-wise pass. Planes whose size is a multiple of 4 move as float4. Every value
 * of bn(x) is computed by bn_val, so the forward output, a recomputed output and the
 * mask in backward agree bit for bit.
 *
 * bn_apply_cuda (below) takes every element type: fp16 and bf16 in either layout run one
 * templated pass on ew_kernel (eltwise.cuh), widened to float and rounded once. */
#include <math.h>
#include <type_traits>
#include <stdint.h>

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

/* Slices of the batch per channel: enough blocks to fill the GPU (about 2,048), at most
 * BN_SLICES (the scratch is sized for that) and at most one per image. */
#define BN_SLICES 64
#define BN_TARGET_BLOCKS 2048

static int bn_slices(int n, int c)
{
	int s = (BN_TARGET_BLOCKS + c - 1) / c;
	s = s > BN_SLICES ? BN_SLICES : s;
	s = s > n ? n : s;
	return s < 1 ? 1 : s;
}

/* Scratch: the slices' double partial sums, then two float coefficients per channel. */
extern "C" size_t bn_own_scratch_bytes(int c)
{
	return (size_t)BN_SLICES * 2 * (size_t)c * sizeof(double) + 2 * (size_t)c * sizeof(float);
}

/* xhat and bn(x) with explicit rounding, so no kernel contracts them differently. */
__device__ static inline float bn_xhat(float x, float mu, float is)
{
	return __fmul_rn(__fsub_rn(x, mu), is);
}

__device__ static inline float bn_val(float x, float mu, float is, float g, float b)
{
	return __fmaf_rn(bn_xhat(x, mu, is), g, b);
}

__device__ static inline float bn_act(float v, int act)
{
	if (act == BN_APPLY_LINEAR)
		return v;
	v = v > 0.0f ? v : 0.0f;
	return act == BN_APPLY_RELU6 && v > 6.0f ? 6.0f : v;
}

/* Whether the activation passes the gradient at pre-activation v (as relu_bwd on its
 * output y: y > 0, and for ReLU6 y < 6). */
__device__ static inline bool bn_act_passes(float v, int act)
{
	return act == BN_APPLY_LINEAR || (v > 0.0f && (act != BN_APPLY_RELU6 || v < 6.0f));
}

/* V consecutive floats (V = 4: one 16-byte access). */
template <int V> __device__ static inline void ldv(const float *p, float (&v)[V]);
template <> __device__ inline void ldv<1>(const float *p, float (&v)[1])
{
	v[0] = *p;
}
template <> __device__ inline void ldv<4>(const float *p, float (&v)[4])
{
	float4 t = *(const float4 *)p;
	v[0] = t.x;
	v[1] = t.y;
	v[2] = t.z;
	v[3] = t.w;
}
template <int V> __device__ static inline void stv(float *p, const float (&v)[V]);
template <> __device__ inline void stv<1>(float *p, const float (&v)[1])
{
	*p = v[0];
}
template <> __device__ inline void stv<4>(float *p, const float (&v)[4])
{
	*(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}

/* Walks the elements of channel blockIdx.x in slice blockIdx.y of the batch, V at a
 * time, the block's threads side by side across plane boundaries (small planes keep
 * every thread busy). f(offset) gets the offset of the first of V floats. */
template <int V, typename F>
__device__ static inline void slice_walk(int n, int c, int hwv, int slices, F f)
{
	int ch = blockIdx.x, per = (n + slices - 1) / slices;
	int first = blockIdx.y * per, last = min(n, first + per);
	int img = first + (int)threadIdx.x / hwv, j = (int)threadIdx.x % hwv;
	int qi = (int)blockDim.x / hwv, qj = (int)blockDim.x % hwv;
	while (img < last) {
		f((((size_t)img * c + ch) * hwv + j) * V);
		j += qj;
		img += qi;
		if (j >= hwv) {
			j -= hwv;
			img++;
		}
	}
}

/* Two running sums kept in float for 32 steps at a time, then moved into double. */
struct sum2 {
	float f1, f2;
	double d1, d2;
	int k;
	__device__ sum2() : f1(0.0f), f2(0.0f), d1(0.0), d2(0.0), k(0) {}
	__device__ void add(float a, float b)
	{
		f1 += a;
		f2 += b;
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
		d1 += f1;
		d2 += f2;
		f1 = f2 = 0.0f;
	}
};

/* partial[(ch * slices + slice) * 2] = { sum d, sum d^2 }, d = x - shift, with shift
 * the channel's first element: sums about a value inside the data's range keep the
 * variance from cancelling. */
template <int V>
__global__ static void bn_stats_kernel(int n, int c, int hwv, int slices, const float *x, double *partial)
{
	int ch = blockIdx.x;
	float shift = x[(size_t)ch * hwv * V];
	sum2 s;
	slice_walk<V>(n, c, hwv, slices, [&](size_t off) {
		float v[V];
		ldv<V>(x + off, v);
#pragma unroll
		for (int k = 0; k < V; k++) {
			float d = v[k] - shift;
			s.add(d, d * d);
		}
		s.step();
	});
	s.flush();
	double d1 = block_sum_d(s.d1), d2 = block_sum_d(s.d2);
	if (threadIdx.x == 0) {
		partial[((size_t)ch * slices + blockIdx.y) * 2] = d1;
		partial[((size_t)ch * slices + blockIdx.y) * 2 + 1] = d2;
	}
}

/* Batch statistics as PyTorch keeps them: saved mean and 1 / sqrt(biased var + eps);
 * the running variance takes the unbiased one. */
__global__ static void bn_stats_final_kernel(int c, size_t hw, int slices, double m, double eps, double momentum,
					     const float *x, const double *partial, float *save_mean,
					     float *save_invstd, float *running_mean, float *running_var)
{
	FOR_EACH(ch, (size_t)c) {
		double s1 = 0.0, s2 = 0.0;
		for (int s = 0; s < slices; s++) {
			s1 += partial[(ch * slices + s) * 2];
			s2 += partial[(ch * slices + s) * 2 + 1];
		}
		bn_stats_write(ch, s1, s2, m, x[ch * hw], eps, momentum, save_mean, save_invstd, running_mean,
			       running_var);
	}
}

/* y = act(bn(x) (+ id)) element-wise, V at a time; I: the index type (32 bits when the
 * count allows). */
template <int V, typename I>
__global__ static void bn_apply_kernel(I nv, I hwv, int c, const float *x, const float *id, const float *gamma,
				       const float *beta, const float *mean, const float *invstd, int act, float *y)
{
	for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += (I)gridDim.x * blockDim.x) {
		int ch = (int)((i / hwv) % (I)c);
		float mu = mean[ch], is = invstd[ch], g = gamma[ch], b = beta[ch];
		float v[V], z[V];
		ldv<V>(x + (size_t)i * V, v);
		if (id)
			ldv<V>(id + (size_t)i * V, z);
#pragma unroll
		for (int k = 0; k < V; k++) {
			float o = bn_val(v[k], mu, is, g, b);
			if (id)
				o = __fadd_rn(o, z[k]);
			v[k] = bn_act(o, act);
		}
		stv<V>(y + (size_t)i * V, v);
	}
}

/* partial = { sum g, sum g * xhat } over the slice, g = dy where the activation passes. */
template <int V>
__global__ static void bn_bwd_reduce_kernel(int n, int c, int hwv, int slices, int act, const float *x,
					    const float *dy, const float *gamma, const float *beta,
					    const float *mean, const float *invstd, double *partial)
{
	int ch = blockIdx.x;
	/* beta only decides the mask: LINEAR callers may pass NULL */
	float mu = mean[ch], is = invstd[ch], ga = gamma[ch], be = act == BN_APPLY_LINEAR ? 0.0f : beta[ch];
	sum2 s;
	slice_walk<V>(n, c, hwv, slices, [&](size_t off) {
		float v[V], d[V];
		ldv<V>(x + off, v);
		ldv<V>(dy + off, d);
#pragma unroll
		for (int k = 0; k < V; k++) {
			float xh = bn_xhat(v[k], mu, is);
			float g = bn_act_passes(__fmaf_rn(xh, ga, be), act) ? d[k] : 0.0f;
			s.add(g, g * xh);
		}
		s.step();
	});
	s.flush();
	double d1 = block_sum_d(s.d1), d2 = block_sum_d(s.d2);
	if (threadIdx.x == 0) {
		partial[((size_t)ch * slices + blockIdx.y) * 2] = d1;
		partial[((size_t)ch * slices + blockIdx.y) * 2 + 1] = d2;
	}
}

/* dbeta = sum g, dgamma = sum g * xhat; coef = { mean(g), mean(g * xhat) } for dx. */
__global__ static void bn_bwd_final_kernel(int c, int slices, double m, const double *partial, float *coef,
					   float *dgamma, float *dbeta)
{
	FOR_EACH(ch, (size_t)c) {
		double s1 = 0.0, s2 = 0.0;
		for (int s = 0; s < slices; s++) {
			s1 += partial[(ch * slices + s) * 2];
			s2 += partial[(ch * slices + s) * 2 + 1];
		}
		dbeta[ch] = (float)s1;
		dgamma[ch] = (float)s2;
		coef[ch * 2] = (float)(s1 / m);
		coef[ch * 2 + 1] = (float)(s2 / m);
	}
}

/* dx (+)= gamma * invstd * (g - mean(g) - xhat * mean(g * xhat)). */
template <int V, typename I>
__global__ static void bn_bwd_dx_kernel(I nv, I hwv, int c, int act, const float *x, const float *dy,
					const float *gamma, const float *beta, const float *mean,
					const float *invstd, const float *coef, float *dx, int accumulate)
{
	for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += (I)gridDim.x * blockDim.x) {
		int ch = (int)((i / hwv) % (I)c);
		float mu = mean[ch], is = invstd[ch], ga = gamma[ch];
		float be = act == BN_APPLY_LINEAR ? 0.0f : beta[ch];
		float k1 = coef[ch * 2], k2 = coef[ch * 2 + 1], scale = ga * is;
		float v[V], d[V], o[V];
		ldv<V>(x + (size_t)i * V, v);
		ldv<V>(dy + (size_t)i * V, d);
		if (accumulate)
			ldv<V>(dx + (size_t)i * V, o);
#pragma unroll
		for (int k = 0; k < V; k++) {
			float xh = bn_xhat(v[k], mu, is);
			float g = bn_act_passes(__fmaf_rn(xh, ga, be), act) ? d[k] : 0.0f;
			float r = scale * (g - k1 - xh * k2);
			o[k] = accumulate ? o[k] + r : r;
		}
		stv<V>(dx + (size_t)i * V, o);
	}
}

/* --- launchers ----------------------------------------------------------------------- */

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* float4 access when planes are whole float4s and every tensor is 16-byte aligned. */
static int bn_vec4(size_t hw, const void *a, const void *b, const void *c)
{
	return hw % 4 == 0 && aligned16(a) && (!b || aligned16(b)) && (!c || aligned16(c));
}

static unsigned apply_grid(size_t nv)
{
	return grid_for(nv);
}

template <int V, typename I>
static int bn_apply_launch(cudaStream_t s, size_t count, int c, size_t hw, const float *x, const float *id,
			   const float *gamma, const float *beta, const float *mean, const float *invstd,
			   int act, float *y)
{
	size_t nv = count / V;
	bn_apply_kernel<V, I><<<apply_grid(nv), BLOCK, 0, s>>>((I)nv, (I)(hw / V), c, x, id, gamma, beta, mean,
								 invstd, act, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

static int bn_apply_f32(cudaStream_t s, int n, int c, int hw, const float *x, const float *identity,
			const float *gamma, const float *beta, const float *mean, const float *invstd,
			enum bn_apply_act act, float *y)
{
	size_t count = (size_t)n * c * hw;
	if (!count)
		return 0;
	int small = count <= UINT32_MAX;
	if (bn_vec4((size_t)hw, x, identity, y))
		return small ? bn_apply_launch<4, unsigned>(s, count, c, hw, x, identity, gamma, beta, mean, invstd, act, y)
			     : bn_apply_launch<4, size_t>(s, count, c, hw, x, identity, gamma, beta, mean, invstd, act, y);
	return small ? bn_apply_launch<1, unsigned>(s, count, c, hw, x, identity, gamma, beta, mean, invstd, act, y)
		     : bn_apply_launch<1, size_t>(s, count, c, hw, x, identity, gamma, beta, mean, invstd, act, y);
}

/* One block per (channel, slice); at most 65,535 slices fit the grid's y. */
static int bn_grid(const struct bn_args *a, dim3 *grid, int *slices)
{
	if (a->c <= 0 || a->n <= 0 || (size_t)a->h * a->w > (size_t)INT32_MAX / 4)
		return gp_error(GP_EINVAL, "batch norm of %dx%dx%dx%d: no own kernel for this shape", a->n, a->c,
				a->h, a->w);
	*slices = bn_slices(a->n, a->c);
	*grid = dim3((unsigned)a->c, (unsigned)*slices);
	return 0;
}

extern "C" int bn_fwd_train_own_cuda(cudaStream_t s, const struct bn_args *a, const float *x, const float *z,
				     enum bn_apply_act act, const float *gamma, const float *beta, float *y,
				     float *save_mean, float *save_invstd, float *running_mean,
				     float *running_var, void *scratch)
{
	size_t hw = (size_t)a->h * a->w;
	if (!a->n || !a->c || !hw)
		return 0;
	dim3 grid;
	int slices = 1;
	GP_TRY(bn_grid(a, &grid, &slices));
	double *partial = (double *)scratch;
	if (bn_vec4(hw, x, NULL, NULL))
		bn_stats_kernel<4><<<grid, BLOCK, 0, s>>>(a->n, a->c, (int)(hw / 4), slices, x, partial);
	else
		bn_stats_kernel<1><<<grid, BLOCK, 0, s>>>(a->n, a->c, (int)hw, slices, x, partial);
	CUDA_CHECK_LAUNCH();
	bn_stats_final_kernel<<<grid_for(a->c), BLOCK, 0, s>>>(a->c, hw, slices, (double)a->n * hw, a->eps,
								 a->momentum, x, partial, save_mean, save_invstd,
								 running_mean, running_var);
	CUDA_CHECK_LAUNCH();
	return bn_apply_f32(s, a->n, a->c, (int)hw, x, z, gamma, beta, save_mean, save_invstd, act, y);
}

template <int V, typename I>
static int bn_dx_launch(cudaStream_t s, size_t count, const struct bn_args *a, size_t hw, int act,
			const float *x, const float *dy, const float *gamma, const float *beta, const float *mean,
			const float *invstd, const float *coef, float *dx, int accumulate)
{
	size_t nv = count / V;
	bn_bwd_dx_kernel<V, I><<<apply_grid(nv), BLOCK, 0, s>>>((I)nv, (I)(hw / V), a->c, act, x, dy, gamma, beta,
								  mean, invstd, coef, dx, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_bwd_own_cuda(cudaStream_t s, const struct bn_args *a, enum bn_apply_act act, const float *x,
			       const float *dy, const float *gamma, const float *beta, const float *save_mean,
			       const float *save_invstd, float *dx, int accumulate, float *dgamma, float *dbeta,
			       void *scratch)
{
	size_t hw = (size_t)a->h * a->w, count = (size_t)a->n * a->c * hw;
	if (!count)
		return 0;
	if (act != BN_APPLY_LINEAR && !beta)
		return gp_error(GP_EINVAL, "batch norm backward with an activation needs beta (the mask)");
	dim3 grid;
	int slices = 1;
	GP_TRY(bn_grid(a, &grid, &slices));
	double *partial = (double *)scratch;
	float *coef = (float *)(partial + (size_t)BN_SLICES * 2 * a->c);
	int v4 = bn_vec4(hw, x, dy, dx);
	if (v4)
		bn_bwd_reduce_kernel<4><<<grid, BLOCK, 0, s>>>(a->n, a->c, (int)(hw / 4), slices, act, x, dy, gamma,
								beta, save_mean, save_invstd, partial);
	else
		bn_bwd_reduce_kernel<1><<<grid, BLOCK, 0, s>>>(a->n, a->c, (int)hw, slices, act, x, dy, gamma, beta,
								save_mean, save_invstd, partial);
	CUDA_CHECK_LAUNCH();
	bn_bwd_final_kernel<<<grid_for(a->c), BLOCK, 0, s>>>(a->c, slices, (double)count / a->c, partial, coef,
							      dgamma, dbeta);
	CUDA_CHECK_LAUNCH();
	int small = count <= UINT32_MAX;
	if (v4)
		return small ? bn_dx_launch<4, unsigned>(s, count, a, hw, act, x, dy, gamma, beta, save_mean,
							 save_invstd, coef, dx, accumulate)
			     : bn_dx_launch<4, size_t>(s, count, a, hw, act, x, dy, gamma, beta, save_mean,
						       save_invstd, coef, dx, accumulate);
	return small ? bn_dx_launch<1, unsigned>(s, count, a, hw, act, x, dy, gamma, beta, save_mean, save_invstd,
						 coef, dx, accumulate)
		     : bn_dx_launch<1, size_t>(s, count, a, hw, act, x, dy, gamma, beta, save_mean, save_invstd,
					       coef, dx, accumulate);
}

/* Evaluation with the running statistics (tensors cuDNN cannot describe). */
__global__ static void bn_eval_kernel(size_t count, int c, int hw, double eps, const float *x,
				      const float *gamma, const float *beta, const float *rm,
				      const float *rv, float *y)
{
	FOR_EACH(i, count) {
		int ch = (int)((i / (size_t)hw) % (size_t)c);
		float invstd = (float)(1.0 / sqrt((double)rv[ch] + eps));
		y[i] = (x[i] - rm[ch]) * invstd * gamma[ch] + beta[ch];
	}
}

extern "C" int bn_fwd_eval_own_cuda(cudaStream_t s, const struct bn_args *a, const float *x,
				    const float *gamma, const float *beta, const float *running_mean,
				    const float *running_var, float *y)
{
	size_t count = (size_t)a->n * a->c * a->h * a->w;
	if (!count)
		return 0;
	bn_eval_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, a->c, a->h * a->w, a->eps, x, gamma, beta,
							 running_mean, running_var, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}


/* --- batch norm apply in 16 bits ------------------------------------------------------------
 * act(bn(x) + identity), identity b reading 0 when absent; all in float, rounded once.
 * With zn.gamma set the identity is a batch norm's input, normalized by zn on the way
 * (a residual join of two batch norms). */
struct bn_apply_op {
	static constexpr bool indexed = true;
	const float *gamma, *beta, *mean, *invstd;
	int act;
	float cap;
	struct bn_norm zn;
	/* One element from its channel's statistics and parameters (both kernels' formula,
	 * and the own NHWC kernels' backward's: bn_val.cuh). */
	__device__ float at(float x, float id, float m, float is, float g, float b) const
	{
		return bn16_act(bn16_pre(x, id, m, is, g, b), act, cap);
	}
	/* The join's form (zn set): each batch norm as its channel's scale and shift, so that
	 * a thread holds two batch norms' in the registers one's statistics take. */
	__device__ void join_of(int c, float *sx, float *tx, float *sz, float *tz) const
	{
		*sx = __fmul_rn(invstd[c], gamma[c]);
		*tx = __fmaf_rn(-mean[c], *sx, beta[c]);
		*sz = __fmul_rn(zn.invstd[c], zn.gamma[c]);
		*tz = __fmaf_rn(-zn.mean[c], *sz, zn.beta[c]);
	}
	__device__ float join(float x, float z, float sx, float tx, float sz, float tz) const
	{
		return bn16_act(__fadd_rn(__fmaf_rn(x, sx, tx), __fmaf_rn(z, sz, tz)), act, cap);
	}
	__device__ float operator()(const cursor &p, float x, float id, int) const
	{
		int c = p.ch;
		if (zn.gamma) {
			float sx, tx, sz, tz;
			join_of(c, &sx, &tx, &sz, &tz);
			return join(x, id, sx, tx, sz, tz);
		}
		return at(x, id, mean[c], invstd[c], gamma[c], beta[c]);
	}
};

/* The identity the NHWC apply adds: none, as it is, or normalized by bn_apply_op::zn. */
enum { ID_NONE, ID_PLAIN, ID_NORM };

/* Chunks of 8 channels a thread of the NHWC apply loads before it computes any, and the
 * blocks a multiprocessor holds (launch bounds: 80 registers or fewer). */
#define BN_APPLY_CHUNKS 2
#define BN_APPLY_BLOCKS 3

/* NHWC with c % 8 == 0: chunk k holds channels (8k mod c) .. + 7, so a thread whose chunks
 * step by a multiple of c / 8 keeps one channel group: its 32 statistics and parameters
 * load once into registers, and no element needs a division to find its channel.
 * bn_apply_op::at computes each element, so both paths give the same bits. One wave of
 * blocks that loop (resident_blocks), BN_APPLY_CHUNKS chunks' loads in flight together
 * and the next ones' asked of L2, as the own batch norms' other passes (bn_nhwc16.cu). ID:
 * an identity to add. */
template <typename T, int ID>
__global__ static void __launch_bounds__(BLOCK, BN_APPLY_BLOCKS)
	bn_apply_nhwc8_kernel(size_t chunks, unsigned groups, const T *__restrict__ x, const T *__restrict__ id,
			      bn_apply_op f, T *__restrict__ y)
{
	unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned threads = gridDim.x * blockDim.x / groups * groups;
	if (tid >= threads)
		return;
	unsigned c0 = tid % groups * VEC;
	/* a channel's mean, invstd, gamma and beta; for the join (ID_NORM) its two batch
	 * norms' scales and shifts (bn_apply_op::join_of) */
	float p0[VEC], p1[VEC], p2[VEC], p3[VEC];
#pragma unroll
	for (int e = 0; e < VEC; e++) {
		if constexpr (ID == ID_NORM) {
			f.join_of(c0 + e, &p0[e], &p1[e], &p2[e], &p3[e]);
		} else {
			p0[e] = f.mean[c0 + e];
			p1[e] = f.invstd[c0 + e];
			p2[e] = f.gamma[c0 + e];
			p3[e] = f.beta[c0 + e];
		}
	}
	const pack<T> *px = reinterpret_cast<const pack<T> *>(x), *pi = reinterpret_cast<const pack<T> *>(id);
	pack<T> *py = reinterpret_cast<pack<T> *>(y);
	for (size_t k = tid; k < chunks; k += (size_t)BN_APPLY_CHUNKS * threads) {
#pragma unroll
		for (int u = 0; u < BN_APPLY_CHUNKS; u++) {
			size_t kp = k + (size_t)(BN_APPLY_CHUNKS + u) * threads;
			if (kp < chunks) {
				prefetch_l2(&px[kp]);
				if constexpr (ID != ID_NONE)
					prefetch_l2(&pi[kp]);
			}
		}
		pack<T> vx[BN_APPLY_CHUNKS], vi[ID ? BN_APPLY_CHUNKS : 1];
#pragma unroll
		for (int u = 0; u < BN_APPLY_CHUNKS; u++) {
			size_t ku = k + (size_t)u * threads;
			if (ku < chunks) {
				vx[u] = px[ku];
				if constexpr (ID != ID_NONE)
					vi[u] = pi[ku];
			}
		}
#pragma unroll
		for (int u = 0; u < BN_APPLY_CHUNKS; u++) {
			size_t ku = k + (size_t)u * threads;
			if (ku >= chunks)
				break;
#pragma unroll
			for (int e = 0; e < VEC; e++) {
				float z = 0.0f;
				if constexpr (ID != ID_NONE)
					z = to_f(vi[ID ? u : 0].v[e]);
				if constexpr (ID == ID_NORM)
					put_f(&vx[u].v[e], f.join(to_f(vx[u].v[e]), z, p0[e], p1[e], p2[e], p3[e]));
				else
					put_f(&vx[u].v[e], f.at(to_f(vx[u].v[e]), z, p0[e], p1[e], p2[e], p3[e]));
			}
			py[ku] = vx[u];
		}
	}
}

template <typename T>
static int bn_apply_t(cudaStream_t s, int nhwc, int n, int c, int hw, const void *x, const void *id,
		      bn_apply_op f, void *y)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return 0;
	size_t count = (size_t)n * c * hw, chunks = count / VEC;
	if (nhwc && c % VEC == 0 && aligned(x, 16) && aligned(id, 16) && aligned(y, 16)) {
		auto k = !id ? bn_apply_nhwc8_kernel<T, ID_NONE>
			 : f.zn.gamma ? bn_apply_nhwc8_kernel<T, ID_NORM> : bn_apply_nhwc8_kernel<T, ID_PLAIN>;
		unsigned wave = !id ? resident_blocks<bn_apply_nhwc8_kernel<T, ID_NONE>>(4096)
				: f.zn.gamma ? resident_blocks<bn_apply_nhwc8_kernel<T, ID_NORM>>(4096)
					     : resident_blocks<bn_apply_nhwc8_kernel<T, ID_PLAIN>>(4096);
		unsigned blocks = grid_for(chunks) < wave ? grid_for(chunks) : wave;
		if ((unsigned)(c / VEC) <= blocks * BLOCK) {
			k<<<blocks, BLOCK, 0, s>>>(chunks, (unsigned)(c / VEC), (const T *)x, (const T *)id, f,
						   (T *)y);
			CUDA_CHECK_LAUNCH();
			return 0;
		}
	}
	return ew_launch<T>(s, count, x, id, NULL, y, 0, f, layout{ nhwc, c, hw });
}

extern "C" int bn_apply_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw, const void *x,
			     const void *identity, const float *gamma, const float *beta, const float *mean,
			     const float *invstd, enum bn_apply_act act, void *y)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "batch norm apply"));
		return bn_apply_f32(s, n, c, hw, (const float *)x, (const float *)identity, gamma, beta, mean,
				    invstd, act, (float *)y);
	}
	bn_apply_op f = { gamma, beta, mean, invstd, act != BN_APPLY_LINEAR,
			  act == BN_APPLY_RELU6 ? 6.0f : INFINITY, {} };
	return DISPATCH_H(dt, bn_apply_t, s, nhwc, n, c, hw, x, identity, f, y);
}

extern "C" int bn_apply_norm_id_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw,
				     const void *x, const void *z, const float *gamma, const float *beta,
				     const float *mean, const float *invstd, const struct bn_norm *zn,
				     enum bn_apply_act act, void *y)
{
	if (dt == GP_F32)
		return gp_error(GP_EUNSUPPORTED, "batch norm apply with a normalized identity: 16-bit only");
	if (!z || !zn || !zn->gamma || !zn->beta || !zn->mean || !zn->invstd)
		return gp_error(GP_EINVAL, "batch norm apply with a normalized identity: no identity or statistics");
	bn_apply_op f = { gamma, beta, mean, invstd, act != BN_APPLY_LINEAR,
			  act == BN_APPLY_RELU6 ? 6.0f : INFINITY, *zn };
	return DISPATCH_H(dt, bn_apply_t, s, nhwc, n, c, hw, x, z, f, y);
}

/* --- synchronized batch norm (SyncBatchNorm over ranks): the statistics as sums that
 * the caller all-reduces between the calls ----------------------------------------- */
namespace sync_bn {

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

} // namespace sync_bn

using namespace sync_bn;

extern "C" int bn_sync_sums_cuda(cudaStream_t s0, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				 const void *x, double *sums)
{
	cudaStream_t s = s0;
	CUDA_TRY(cudaMemsetAsync(sums, 0, 2 * (size_t)a->c * sizeof(double), s));
	size_t hw = (size_t)a->h * a->w;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		sums_k<T><<<grid_chan(a), kThreads, 0, s>>>((const T *)x, a->c, hw, a->n * hw, nhwc, sums);
	}));
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_finalize_cuda(cudaStream_t s0, const struct bn_args *a, const double *sums,
				     double count, float *save_mean, float *save_invstd, float *run_mean,
				     float *run_var)
{
	finalize_k<<<(a->c + 127) / 128, 128, 0, s0>>>(
		a->c, sums, count, a->eps, a->momentum, save_mean, save_invstd, run_mean, run_var);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_apply_cuda(cudaStream_t s0, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				  const void *x, const float *gamma, const float *beta, const float *mean,
				  const float *invstd, void *y)
{
	size_t hw = (size_t)a->h * a->w, total = (size_t)a->n * a->c * hw;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		apply_k<T><<<grid_1d(total), kThreads, 0, s0>>>(
			(const T *)x, total, a->c, hw, nhwc, gamma, beta, mean, invstd, (T *)y);
	}));
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int bn_sync_bwd_sums_cuda(cudaStream_t s0, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				     const void *x, const void *dy, const float *mean, const float *invstd,
				     double *sums, float *dgamma, float *dbeta)
{
	cudaStream_t s = s0;
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

extern "C" int bn_sync_bwd_dx_cuda(cudaStream_t s0, enum gp_dtype dt, int nhwc, const struct bn_args *a,
				   const void *x, const void *dy, const float *gamma, const float *mean,
				   const float *invstd, const double *sums, double count, void *dx,
				   int accumulate)
{
	size_t hw = (size_t)a->h * a->w, total = (size_t)a->n * a->c * hw;
	GP_TRY(by_dtype(dt, [&](auto *t) {
		using T = typename std::remove_pointer<decltype(t)>::type;
		dx_k<T><<<grid_1d(total), kThreads, 0, s0>>>(
			(const T *)x, (const T *)dy, total, a->c, hw, nhwc, gamma, mean, invstd, sums, count,
			(T *)dx, accumulate);
	}));
	CUDA_CHECK_LAUNCH();
	return 0;
}
