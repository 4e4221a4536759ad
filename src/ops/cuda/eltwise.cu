/* Elementwise kernels: fill and copy, ReLU and ReLU6, add, the gradient pass, dropout
 * and its masks, loss scaling. Each op has one launcher taking the element type
 * (GP_F32, GP_F16, GP_BF16): float runs the float kernels here (float4 where aligned),
 * the 16-bit types one templated source on ew_kernel (eltwise.cuh), which widens to
 * float, computes as the float kernels compute, and rounds to the 16-bit type once.
 * Each launcher launches nothing for empty inputs and checks the launch. */
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

/* --- fill, copy ------------------------------------------------------------------------ */
__global__ static void fill_kernel(float *p, size_t count, float value)
{
	FOR_EACH(i, count)
		p[i] = value;
}

extern "C" int fill_cuda(cudaStream_t s, float *p, size_t count, float value)
{
	if (!count)
		return 0;
	fill_kernel<<<grid_for(count), BLOCK, 0, s>>>(p, count, value);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* dst[b][a][l] = src[a][b][l]: rows of l floats, a 4-float vector a thread where l
 * allows (src and dst from cudaMalloc, so aligned then); 32-bit indices (the launcher
 * refuses more). */
template <typename V>
__global__ static void swap_outer_kernel(V *dst, const V *src, unsigned a, unsigned b, unsigned l)
{
	unsigned count = a * b * l;
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
		unsigned li = i % l, r = i / l; /* the source row: ai * b + bi */
		unsigned bi = r % b, ai = r / b;
		dst[(bi * a + ai) * l + li] = src[i];
	}
}

extern "C" int swap_outer_cuda(cudaStream_t s, float *dst, const float *src, int a, int b, int l)
{
	size_t count = (size_t)a * b * l;
	if (!count)
		return 0;
	if (count > UINT32_MAX / 2) /* the grid's stride may not wrap either */
		return gp_error(GP_EINVAL, "swap_outer: %zu elements, more than 32-bit indices reach", count);
	if (l % 4 == 0)
		swap_outer_kernel<float4><<<grid_for(count / 4), BLOCK, 0, s>>>((float4 *)dst, (const float4 *)src,
										   (unsigned)a, (unsigned)b, (unsigned)l / 4);
	else
		swap_outer_kernel<float><<<grid_for(count), BLOCK, 0, s>>>(dst, src, (unsigned)a, (unsigned)b,
									   (unsigned)l);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- every s-th pixel of planes (strided 1x1 convolutions) --------------------------
 * A plane is h x w pixels of u contiguous elements (NCHW: u = 1, a plane per channel;
 * NHWC: u = C, a plane per image); the subsampled plane is ho x wo. The copies move
 * V-sized pieces of a pixel (V: the widest of 16, 8, 4, 2 bytes dividing its bytes). */
struct sub_geom {
	unsigned planes, h, w, ho, wo, s, vpu; /* vpu: pieces a pixel */
};

/* The piece of the full planes that piece i of the subsampled ones comes from. I: the
 * index type, 32 bits where the count allows (64-bit division costs more than the
 * copy). */
template <typename I>
__device__ static inline I sub_src(const sub_geom &g, I i)
{
	I t = i / g.vpu, v = i - t * g.vpu;
	I r = t / g.wo, ow = t - r * g.wo;
	I pl = r / g.ho, oh = r - pl * g.ho;
	return ((pl * g.h + oh * g.s) * g.w + ow * g.s) * g.vpu + v;
}

/* dir 0: sub[i] = full[src]; dir 1: full[src] = sub[i] */
template <typename V, typename I>
__global__ static void subsample_kernel(sub_geom g, I count, V *full, V *sub, int dir)
{
	for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (I)gridDim.x * blockDim.x) {
		I j = sub_src<I>(g, i);
		if (dir == 0)
			sub[i] = full[j];
		else
			full[j] = sub[i];
	}
}

/* full[src] += sub[i], element by element in float, rounded once */
template <typename T, typename I>
__global__ static void subsample_add_kernel(sub_geom g, I count, T *full, const T *sub)
{
	for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (I)gridDim.x * blockDim.x) {
		I j = sub_src<I>(g, i);
		put_f(&full[j], to_f(full[j]) + to_f(sub[i]));
	}
}

/* the full planes' element count decides the index type: every index stays below it */
static bool sub_small(const sub_geom &g, size_t piece_per_pixel)
{
	return (size_t)g.planes * g.h * g.w * piece_per_pixel < (size_t)1 << 31;
}

template <typename V>
static void subsample_launch(cudaStream_t st, sub_geom g, void *full, void *sub, int dir, size_t pixel_bytes)
{
	g.vpu = (unsigned)(pixel_bytes / sizeof(V));
	size_t count = (size_t)g.planes * g.ho * g.wo * g.vpu;
	if (sub_small(g, g.vpu))
		subsample_kernel<V, unsigned><<<grid_for(count), BLOCK, 0, st>>>(g, (unsigned)count, (V *)full, (V *)sub,
										 dir);
	else
		subsample_kernel<V, size_t><<<grid_for(count), BLOCK, 0, st>>>(g, count, (V *)full, (V *)sub, dir);
}

template <typename T>
static int subsample_add_t(cudaStream_t st, sub_geom g, void *full, const void *sub)
{
	size_t count = (size_t)g.planes * g.ho * g.wo * g.vpu;
	if (sub_small(g, g.vpu))
		subsample_add_kernel<T, unsigned><<<grid_for(count), BLOCK, 0, st>>>(g, (unsigned)count, (T *)full,
										     (const T *)sub);
	else
		subsample_add_kernel<T, size_t><<<grid_for(count), BLOCK, 0, st>>>(g, count, (T *)full, (const T *)sub);
	return 0;
}

extern "C" int subsample_cuda(cudaStream_t st, enum gp_dtype dt, int planes, int h, int w, int u, int stride,
			      int op, void *full, void *sub)
{
	size_t es = dt == GP_F32 ? 4 : 2, pixel = (size_t)u * es;
	sub_geom g = { (unsigned)planes, (unsigned)h, (unsigned)w, (unsigned)((h - 1) / stride + 1),
		       (unsigned)((w - 1) / stride + 1), (unsigned)stride, (unsigned)u };
	if (!planes || !u)
		return 0;
	if (op == SUBSAMPLE_ADD) {
		if (dt == GP_F32)
			subsample_add_t<float>(st, g, full, sub);
		else
			GP_TRY(DISPATCH_H(dt, subsample_add_t, st, g, full, sub));
	} else if (pixel % 16 == 0 && aligned(full, 16) && aligned(sub, 16)) {
		subsample_launch<uint4>(st, g, full, sub, op, pixel);
	} else if (pixel % 8 == 0 && aligned(full, 8) && aligned(sub, 8)) {
		subsample_launch<uint2>(st, g, full, sub, op, pixel);
	} else if (pixel % 4 == 0 && aligned(full, 4) && aligned(sub, 4)) {
		subsample_launch<unsigned>(st, g, full, sub, op, pixel);
	} else {
		subsample_launch<unsigned short>(st, g, full, sub, op, pixel);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int copy_cuda(cudaStream_t s, float *dst, const float *src, size_t count)
{
	if (!count)
		return 0;
	CUDA_TRY(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
	return 0;
}

/* --- activations, add, gradient pass ---------------------------------------------------- */
__global__ static void relu_fwd_kernel(size_t count, const float *x, float *y, float cap)
{
	FOR_EACH(i, count) {
		float v = x[i] > 0.0f ? x[i] : 0.0f;
		y[i] = v > cap ? cap : v;
	}
}

/* The gradient passes where lo < y < hi (relu: hi = +inf, relu6: hi = 6). */
__global__ static void relu_bwd_kernel(size_t count, const float *y, const float *dy, float *dx,
				       int accumulate, float hi)
{
	FOR_EACH(i, count) {
		float g = (y[i] > 0.0f && y[i] < hi) ? dy[i] : 0.0f;
		dx[i] = accumulate ? dx[i] + g : g;
	}
}

/* The element-wise passes are memory-bound: with 16-byte aligned arrays and a count
 * divisible by 4 they move float4s (the arena's 256-byte alignment gives that for
 * every activation), which the profile showed to matter (ReLU backward was 12.5 ms of
 * ResNet-50's 275 ms step against PyTorch's 9.6 ms). */
static int vec4_ok(size_t count, const void *a, const void *b, const void *c)
{
	return count % 4 == 0 && !((uintptr_t)a % 16) && !((uintptr_t)b % 16) && !((uintptr_t)c % 16);
}

__device__ static float relu_cap(float v, float cap)
{
	v = v > 0.0f ? v : 0.0f;
	return v > cap ? cap : v;
}

__global__ static void relu_fwd4_kernel(size_t n4, const float4 *x, float4 *y, float cap)
{
	FOR_EACH(i, n4) {
		float4 v = x[i];
		y[i] = make_float4(relu_cap(v.x, cap), relu_cap(v.y, cap), relu_cap(v.z, cap),
				   relu_cap(v.w, cap));
	}
}

__device__ static float relu_pass(float y, float g, float hi)
{
	return (y > 0.0f && y < hi) ? g : 0.0f;
}

__global__ static void relu_bwd4_kernel(size_t n4, const float4 *y, const float4 *dy, float4 *dx,
					int accumulate, float hi)
{
	FOR_EACH(i, n4) {
		float4 v = y[i], g = dy[i];
		float4 r = make_float4(relu_pass(v.x, g.x, hi), relu_pass(v.y, g.y, hi),
				       relu_pass(v.z, g.z, hi), relu_pass(v.w, g.w, hi));
		if (accumulate) {
			float4 o = dx[i];
			r = make_float4(o.x + r.x, o.y + r.y, o.z + r.z, o.w + r.w);
		}
		dx[i] = r;
	}
}

static int relu_fwd_launch(cudaStream_t s, size_t count, const float *x, float *y, float cap)
{
	if (!count)
		return 0;
	if (vec4_ok(count, x, y, y))
		relu_fwd4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)x,
								       (float4 *)y, cap);
	else
		relu_fwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, x, y, cap);
	CUDA_CHECK_LAUNCH();
	return 0;
}

static int relu_bwd_launch(cudaStream_t s, size_t count, const float *y, const float *dy, float *dx,
			   int accumulate, float hi)
{
	if (!count)
		return 0;
	if (vec4_ok(count, y, dy, dx))
		relu_bwd4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)y,
								       (const float4 *)dy, (float4 *)dx,
								       accumulate, hi);
	else
		relu_bwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, y, dy, dx, accumulate, hi);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void add_kernel(size_t count, const float *a, const float *b, float *y)
{
	FOR_EACH(i, count)
		y[i] = a[i] + b[i];
}

__global__ static void add4_kernel(size_t n4, const float4 *a, const float4 *b, float4 *y)
{
	FOR_EACH(i, n4) {
		float4 u = a[i], v = b[i];
		y[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
	}
}

static int add_f32(cudaStream_t s, size_t count, const float *a, const float *b, float *y)
{
	if (!count)
		return 0;
	if (vec4_ok(count, a, b, y))
		add4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)a,
								  (const float4 *)b, (float4 *)y);
	else
		add_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, a, b, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void accumulate_kernel(size_t count, const float *dy, float *dx)
{
	FOR_EACH(i, count)
		dx[i] += dy[i];
}

static int grad_pass_f32(cudaStream_t s, size_t count, const float *dy, float *dx, int accumulate)
{
	if (!count)
		return 0;
	if (!accumulate)
		return copy_cuda(s, dx, dy, count);
	if (vec4_ok(count, dy, dx, dx)) {
		add4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)dx,
								  (const float4 *)dy, (float4 *)dx);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	accumulate_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, dy, dx);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* The 16-bit ops on ew_kernel, as the float kernels define them. */
struct relu_fwd_op {
	static constexpr bool indexed = false;
	float cap;
	__device__ float operator()(const cursor &, float x, float, int) const
	{
		float v = x > 0.0f ? x : 0.0f;
		return v > cap ? cap : v;
	}
};

/* The gradient passes where 0 < y < hi (relu: hi = +inf, relu6: hi = 6). */
struct relu_bwd_op {
	static constexpr bool indexed = false;
	float hi;
	__device__ float operator()(const cursor &, float y, float dy, int) const
	{
		return (y > 0.0f && y < hi) ? dy : 0.0f;
	}
};

struct add_op {
	static constexpr bool indexed = false;
	__device__ float operator()(const cursor &, float a, float b, int) const { return a + b; }
};

struct pass_op {
	static constexpr bool indexed = false;
	__device__ float operator()(const cursor &, float a, float, int) const { return a; }
};

struct dropout_op {
	static constexpr bool indexed = false;
	float scale;
	__device__ float operator()(const cursor &, float x, float, int m) const
	{
		return m ? x * scale : 0.0f;
	}
};


template <typename T, typename F>
static int ew_t(cudaStream_t s, size_t count, const void *a, const void *b, const uint8_t *mask,
		void *y, int accumulate, F f)
{
	return ew_launch<T>(s, count, a, b, mask, y, accumulate, f);
}

extern "C" int relu_fwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *x, void *y)
{
	if (dt == GP_F32)
		return relu_fwd_launch(s, count, (const float *)x, (float *)y, INFINITY);
	return DISPATCH_H(dt, ew_t, s, count, x, NULL, NULL, y, 0, relu_fwd_op{ INFINITY });
}

extern "C" int relu_bwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *y,
			     const void *dy, void *dx, int accumulate)
{
	if (dt == GP_F32)
		return relu_bwd_launch(s, count, (const float *)y, (const float *)dy, (float *)dx, accumulate,
				       INFINITY);
	return DISPATCH_H(dt, ew_t, s, count, y, dy, NULL, dx, accumulate, relu_bwd_op{ INFINITY });
}

extern "C" int relu6_fwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *x, void *y)
{
	if (dt == GP_F32)
		return relu_fwd_launch(s, count, (const float *)x, (float *)y, 6.0f);
	return DISPATCH_H(dt, ew_t, s, count, x, NULL, NULL, y, 0, relu_fwd_op{ 6.0f });
}

extern "C" int relu6_bwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *y,
			      const void *dy, void *dx, int accumulate)
{
	if (dt == GP_F32)
		return relu_bwd_launch(s, count, (const float *)y, (const float *)dy, (float *)dx, accumulate,
				       6.0f);
	return DISPATCH_H(dt, ew_t, s, count, y, dy, NULL, dx, accumulate, relu_bwd_op{ 6.0f });
}

extern "C" int add_fwd_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *a,
			    const void *b, void *y)
{
	if (dt == GP_F32)
		return add_f32(s, count, (const float *)a, (const float *)b, (float *)y);
	return DISPATCH_H(dt, ew_t, s, count, a, b, NULL, y, 0, add_op{});
}

extern "C" int grad_pass_cuda(cudaStream_t s, enum gp_dtype dt, size_t count, const void *dy,
			      void *dx, int accumulate)
{
	if (dt == GP_F32)
		return grad_pass_f32(s, count, (const float *)dy, (float *)dx, accumulate);
	if (dt != GP_F16 && dt != GP_BF16)
		return bad_dtype(dt);
	if (!count)
		return 0;
	/* Overwriting is a copy of the same 16-bit values. */
	if (!accumulate) {
		CUDA_TRY(cudaMemcpyAsync(dx, dy, count * 2, cudaMemcpyDeviceToDevice, s));
		return 0;
	}
	return DISPATCH_H(dt, ew_t, s, count, dy, NULL, NULL, dx, 1, pass_op{});
}

/* --- dropout ---------------------------------------------------------------------------- */
/* Inverted dropout as in PyTorch: kept elements are scaled by 1 / (1 - p). */
static float dropout_scale(double p)
{
	return p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
}

__global__ static void dropout_kernel(size_t count, const uint8_t *mask, const float *x, float *y,
				      float scale, int accumulate)
{
	FOR_EACH(i, count) {
		float v = mask[i] ? x[i] * scale : 0.0f;
		y[i] = accumulate ? y[i] + v : v;
	}
}

static int dropout_fwd_f32(cudaStream_t s, const struct dropout_args *a, const uint8_t *mask,
			   const float *x, float *y)
{
	if (!a->count)
		return 0;
	dropout_kernel<<<grid_for(a->count), BLOCK, 0, s>>>(a->count, mask, x, y,
							     dropout_scale(a->p), 0);
	CUDA_CHECK_LAUNCH();
	return 0;
}

static int dropout_bwd_f32(cudaStream_t s, const struct dropout_args *a, const uint8_t *mask,
			   const float *dy, float *dx, int accumulate)
{
	if (!a->count)
		return 0;
	dropout_kernel<<<grid_for(a->count), BLOCK, 0, s>>>(a->count, mask, dy, dx,
							     dropout_scale(a->p), accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* SplitMix64's finalizer: a bijective mixer whose output bits pass as independent,
 * so hashing a counter gives a stream that any thread can index directly. */
__device__ static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

__global__ static void dropout_mask_kernel(size_t count, uint32_t threshold, uint64_t seed,
					   uint64_t offset, uint8_t *mask)
{
	FOR_EACH(i, count) {
		uint32_t u24 = (uint32_t)(mix64(seed ^ mix64(offset + i)) >> 40);
		mask[i] = u24 >= threshold;
	}
}

extern "C" int dropout_mask_cuda(cudaStream_t s, size_t count, double p, uint64_t seed,
				 uint64_t offset, uint8_t *mask)
{
	if (!(p >= 0.0 && p <= 1.0))
		return gp_error(GP_EINVAL, "dropout probability %g is not in [0, 1]", p);
	if (!count)
		return 0;
	uint32_t threshold = (uint32_t)ceil(p * 16777216.0);
	dropout_mask_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, threshold, seed, offset, mask);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* The same mask with the step read from device memory, so that a captured CUDA
 * graph draws a fresh mask on every replay. */
__global__ static void dropout_mask_step_kernel(size_t count, uint32_t threshold, uint64_t seed,
						const unsigned long long *step, uint8_t *mask)
{
	uint64_t s = seed ^ mix64((uint64_t)*step);
	FOR_EACH(i, count) {
		uint32_t u24 = (uint32_t)(mix64(s ^ mix64(i)) >> 40);
		mask[i] = u24 >= threshold;
	}
}

extern "C" int dropout_mask_step_cuda(cudaStream_t s, size_t count, double p, uint64_t seed,
				      const unsigned long long *step, uint8_t *mask)
{
	if (!(p >= 0.0 && p <= 1.0))
		return gp_error(GP_EINVAL, "dropout probability %g is not in [0, 1]", p);
	if (!count)
		return 0;
	uint32_t threshold = (uint32_t)ceil(p * 16777216.0);
	dropout_mask_step_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, threshold, seed, step, mask);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void counter_inc_kernel(unsigned long long *c)
{
	*c += 1;
}

extern "C" int counter_inc_cuda(cudaStream_t s, unsigned long long *c)
{
	counter_inc_kernel<<<1, 1, 0, s>>>(c);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int dropout_fwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct dropout_args *a,
				const uint8_t *mask, const void *x, void *y)
{
	if (dt == GP_F32)
		return dropout_fwd_f32(s, a, mask, (const float *)x, (float *)y);
	dropout_op f = { dropout_scale(a->p) };
	return DISPATCH_H(dt, ew_t, s, a->count, x, NULL, mask, y, 0, f);
}

extern "C" int dropout_bwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct dropout_args *a,
				const uint8_t *mask, const void *dy, void *dx, int accumulate)
{
	if (dt == GP_F32)
		return dropout_bwd_f32(s, a, mask, (const float *)dy, (float *)dx, accumulate);
	dropout_op f = { dropout_scale(a->p) };
	return DISPATCH_H(dt, ew_t, s, a->count, dy, NULL, mask, dx, accumulate, f);
}

/* --- loss scaling ---------------------------------------------------------------------------
 * Float: p *= factor; with flag, also raise *flag where a result is inf or NaN. */
__global__ static void scale_f32_kernel(float *p, size_t count, float factor, int *flag)
{
	FOR_EACH(i, count) {
		float v = p[i] * factor;
		p[i] = v;
		if (flag && !isfinite(v))
			*flag = 1;
	}
}

static int scale_f32(cudaStream_t s, float *p, size_t count, double factor, int *nonfinite_flag)
{
	if (!count)
		return 0;
	scale_f32_kernel<<<grid_for(count), BLOCK, 0, s>>>(p, count, (float)factor, nonfinite_flag);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* 16-bit: p *= factor; with flag, raise *flag where the stored result is inf or NaN: checked
 * after rounding, so a product beyond the fp16 range counts. A thread writes the flag
 * at most once, after its loop. */
template <bool V, typename T>
__global__ static void scale_kernel(T *p, size_t count, float factor, int *flag)
{
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t chunks = count / VEC;
	int bad = 0;
	for (size_t k = tid; k < chunks; k += stride) {
		float v[VEC];
		load8<V>((const T *)p, k, v);
#pragma unroll
		for (int e = 0; e < VEC; e++) {
			v[e] = rounded<T>(v[e] * factor);
			bad |= !isfinite(v[e]);
		}
		store8<V>(p, k, v);
	}
	for (size_t i = chunks * VEC + tid; i < count; i += stride) {
		float v = rounded<T>(to_f(p[i]) * factor);
		bad |= !isfinite(v);
		put_f(&p[i], v);
	}
	if (flag && bad)
		*flag = 1;
}

template <typename T>
static int scale_t(cudaStream_t s, void *p, size_t count, float factor, int *flag)
{
	if (!count)
		return 0;
	if (aligned(p, 16))
		scale_kernel<true><<<grid_vec(count), BLOCK, 0, s>>>((T *)p, count, factor, flag);
	else
		scale_kernel<false><<<grid_vec(count), BLOCK, 0, s>>>((T *)p, count, factor, flag);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int scale_cuda(cudaStream_t s, enum gp_dtype dt, void *p, size_t count, double factor,
			  int *nonfinite_flag)
{
	if (dt == GP_F32)
		return scale_f32(s, (float *)p, count, factor, nonfinite_flag);
	return DISPATCH_H(dt, scale_t, s, p, count, (float)factor, nonfinite_flag);
}
