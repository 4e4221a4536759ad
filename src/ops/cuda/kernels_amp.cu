/* Half-precision kernels for mixed-precision training: conversions and layout changes,
 * elementwise ops, global average pooling (max pooling: pool_amp.cu), batch-norm apply, dropout, softmax cross-entropy and the
 * bias helpers, for fp16 and bf16 from one templated source. Values are widened to
 * float, computed as the float kernels in kernels.cu compute them, and rounded to the
 * 16-bit type once. Each launcher checks the type, launches nothing for empty inputs
 * and checks the launch. Reductions run in a fixed order (no atomics). */
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
#include "ops/cuda/cuda_amp.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/kernels_amp.cuh"

#define TILE 32 /* transpose tile edge */

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
static unsigned grid_vec(size_t count)
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

/* The ops, as the float kernels define them. */
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

/* act(bn(x) + identity), identity b reading 0 when absent; all in float, rounded once. */
struct bn_apply_op {
	static constexpr bool indexed = true;
	const float *gamma, *beta, *mean, *invstd;
	int act;
	float cap;
	/* One element from its channel's statistics and parameters (both kernels' formula). */
	__device__ float at(float x, float id, float m, float is, float g, float b) const
	{
		float v = (x - m) * is * g + b + id;
		if (act) {
			v = v > 0.0f ? v : 0.0f;
			v = v > cap ? cap : v;
		}
		return v;
	}
	__device__ float operator()(const cursor &p, float x, float id, int) const
	{
		int c = p.ch;
		return at(x, id, mean[c], invstd[c], gamma[c], beta[c]);
	}
};

struct bias_add_op {
	static constexpr bool indexed = true;
	const float *bias;
	__device__ float operator()(const cursor &p, float y, float, int) const { return y + bias[p.ch]; }
};

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

/* --- conversions ------------------------------------------------------------------------- */
template <bool V, typename Tin, typename Tout>
__global__ static void cast_kernel(size_t count, const Tin *x, Tout *y, int accumulate)
{
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t chunks = count / VEC;
	for (size_t k = tid; k < chunks; k += stride) {
		float v[VEC], old[VEC] = {};
		load8<V>(x, k, v);
		if (accumulate) {
			load8<V>((const Tout *)y, k, old);
#pragma unroll
			for (int e = 0; e < VEC; e++)
				v[e] += old[e];
		}
		store8<V>(y, k, v);
	}
	for (size_t i = chunks * VEC + tid; i < count; i += stride) {
		float v = to_f(x[i]);
		put_f(&y[i], accumulate ? to_f(y[i]) + v : v);
	}
}

template <typename Tin, typename Tout>
static int cast_launch(cudaStream_t s, size_t count, const Tin *x, Tout *y, int accumulate)
{
	if (!count)
		return 0;
	if (aligned(x, 16) && aligned(y, 16))
		cast_kernel<true><<<grid_vec(count), BLOCK, 0, s>>>(count, x, y, accumulate);
	else
		cast_kernel<false><<<grid_vec(count), BLOCK, 0, s>>>(count, x, y, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* y[b][j][i] = x[b][i][j] (+ y with accumulate) for a batch of rows x cols matrices:
 * NCHW -> NHWC is rows = C, cols = H*W per image, and back is the transpose of that.
 * A tile goes through shared memory (padded against bank conflicts), so both the reads
 * along a row of x and the writes along a row of y are coalesced. Every loop bound is
 * the same for the whole block, so the barriers are reached by all its threads. */
template <typename Tin, typename Tout>
__global__ static void transpose_kernel(int batch, int rows, int cols, const Tin *x, Tout *y,
					int accumulate)
{
	__shared__ float tile[TILE][TILE + 1];
	for (int bz = blockIdx.z; bz < batch; bz += gridDim.z) {
		const Tin *xb = x + (size_t)bz * rows * cols;
		Tout *yb = y + (size_t)bz * rows * cols;
		for (int r0 = blockIdx.y * TILE; r0 < rows; r0 += gridDim.y * TILE)
			for (int c0 = blockIdx.x * TILE; c0 < cols; c0 += gridDim.x * TILE) {
				for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
					int r = r0 + i, c = c0 + threadIdx.x;
					if (r < rows && c < cols)
						tile[i][threadIdx.x] = to_f(xb[(size_t)r * cols + c]);
				}
				__syncthreads();
				for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
					int c = c0 + i, r = r0 + threadIdx.x;
					if (r < rows && c < cols) {
						size_t o = (size_t)c * rows + r;
						float v = tile[threadIdx.x][i];
						put_f(&yb[o], accumulate ? to_f(yb[o]) + v : v);
					}
				}
				__syncthreads();
			}
	}
}

static unsigned cap_grid(long long blocks, unsigned cap)
{
	return blocks > (long long)cap ? cap : (unsigned)blocks;
}

/* The same for narrow matrices (a 3x3 convolution's weights: rows = C, cols = 9), where
 * a 32x32 tile would be mostly idle: one thread per output element, its reads strided
 * within a few cache lines of the image's small matrix. */
template <typename Tin, typename Tout>
__global__ static void transpose_narrow_kernel(size_t count, int rows, int cols, const Tin *x, Tout *y,
					       int accumulate)
{
	size_t per = (size_t)rows * cols;
	for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < count; o += (size_t)gridDim.x * blockDim.x) {
		size_t b = o / per, rem = o - b * per;
		int c = (int)(rem / rows), r = (int)(rem - (size_t)c * rows); /* y[b][c][r] */
		float v = to_f(x[b * per + (size_t)r * cols + c]);
		put_f(&y[o], accumulate ? to_f(y[o]) + v : v);
	}
}

template <typename Tin, typename Tout>
static int transpose_launch(cudaStream_t s, int batch, int rows, int cols, const Tin *x, Tout *y,
			    int accumulate)
{
	if (rows == 1 || cols == 1) /* the same order: a 1x1 convolution's weights, one channel */
		return cast_launch(s, (size_t)batch * rows * cols, x, y, accumulate);
	if (rows < TILE / 2 || cols < TILE / 2) {
		size_t count = (size_t)batch * rows * cols;
		unsigned blocks = cap_grid(((long long)count + 255) / 256, 1u << 16);
		transpose_narrow_kernel<<<blocks, 256, 0, s>>>(count, rows, cols, x, y, accumulate);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	dim3 grid(cap_grid(((long long)cols + TILE - 1) / TILE, 1u << 20),
		  cap_grid(((long long)rows + TILE - 1) / TILE, 65535u), cap_grid(batch, 65535u));
	transpose_kernel<<<grid, dim3(TILE, 8), 0, s>>>(batch, rows, cols, x, y, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* Dimensions of a 4-D tensor: negative is a bug (an error), zero an empty tensor (1). */
static int dims_check(const char *what, int n, int c, int h, int w)
{
	if (n < 0 || c < 0 || h < 0 || w < 0)
		return gp_error(GP_EINVAL, "%s of a %dx%dx%dx%d tensor", what, n, c, h, w);
	return !n || !c || !h || !w;
}

template <typename T>
static int to_layout_t(cudaStream_t s, int n, int c, int h, int w, int nhwc_out, const float *x,
		       void *y)
{
	int rc = dims_check("to_h_layout", n, c, h, w);
	if (rc)
		return rc < 0 ? rc : 0;
	if (!nhwc_out)
		return cast_launch(s, (size_t)n * c * h * w, x, (T *)y, 0);
	return transpose_launch(s, n, c, h * w, x, (T *)y, 0);
}

template <typename T>
static int from_layout_t(cudaStream_t s, int n, int c, int h, int w, int nhwc_in, const void *x,
			 float *y, int accumulate)
{
	int rc = dims_check("from_h_layout", n, c, h, w);
	if (rc)
		return rc < 0 ? rc : 0;
	if (!nhwc_in)
		return cast_launch(s, (size_t)n * c * h * w, (const T *)x, y, accumulate);
	return transpose_launch(s, n, h * w, c, (const T *)x, y, accumulate);
}

template <typename T>
static int cast_to_h_t(cudaStream_t s, size_t count, const float *x, void *y)
{
	return cast_launch(s, count, x, (T *)y, 0);
}

template <typename T>
static int cast_from_h_t(cudaStream_t s, size_t count, const void *x, float *y)
{
	return cast_launch(s, count, (const T *)x, y, 0);
}

extern "C" int cast_f32_to_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const float *x,
				  void *y)
{
	return DISPATCH_H(ht, cast_to_h_t, s, count, x, y);
}

extern "C" int cast_h_to_f32_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x,
				  float *y)
{
	return DISPATCH_H(ht, cast_from_h_t, s, count, x, y);
}

extern "C" int to_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w,
				int nhwc_out, const float *x, void *y)
{
	return DISPATCH_H(ht, to_layout_t, s, n, c, h, w, nhwc_out, x, y);
}

extern "C" int from_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w,
				  int nhwc_in, const void *x, float *y, int accumulate)
{
	return DISPATCH_H(ht, from_layout_t, s, n, c, h, w, nhwc_in, x, y, accumulate);
}

/* --- activations, add, gradient pass ------------------------------------------------------ */
template <typename T, typename F>
static int ew_t(cudaStream_t s, size_t count, const void *a, const void *b, const uint8_t *mask,
		void *y, int accumulate, F f)
{
	return ew_launch<T>(s, count, a, b, mask, y, accumulate, f);
}

extern "C" int relu_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x, void *y)
{
	return DISPATCH_H(ht, ew_t, s, count, x, NULL, NULL, y, 0, relu_fwd_op{ INFINITY });
}

extern "C" int relu_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *y,
			       const void *dy, void *dx, int accumulate)
{
	return DISPATCH_H(ht, ew_t, s, count, y, dy, NULL, dx, accumulate, relu_bwd_op{ INFINITY });
}

extern "C" int relu6_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x, void *y)
{
	return DISPATCH_H(ht, ew_t, s, count, x, NULL, NULL, y, 0, relu_fwd_op{ 6.0f });
}

extern "C" int relu6_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *y,
				const void *dy, void *dx, int accumulate)
{
	return DISPATCH_H(ht, ew_t, s, count, y, dy, NULL, dx, accumulate, relu_bwd_op{ 6.0f });
}

extern "C" int add_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *a,
			      const void *b, void *y)
{
	return DISPATCH_H(ht, ew_t, s, count, a, b, NULL, y, 0, add_op{});
}

extern "C" int grad_pass_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *dy,
				void *dx, int accumulate)
{
	if (ht != GP_F16 && ht != GP_BF16)
		return bad_dtype(ht);
	if (!count)
		return 0;
	/* Overwriting is a copy of the same 16-bit values. */
	if (!accumulate) {
		CUDA_TRY(cudaMemcpyAsync(dx, dy, count * 2, cudaMemcpyDeviceToDevice, s));
		return 0;
	}
	return DISPATCH_H(ht, ew_t, s, count, dy, NULL, NULL, dx, 1, pass_op{});
}

/* --- loss scaling ---------------------------------------------------------------------------
 * p *= factor; with flag, raise *flag where the stored result is inf or NaN: checked
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

extern "C" int scale_h_cuda(cudaStream_t s, enum gp_dtype ht, void *p, size_t count, double factor,
			    int *nonfinite_flag)
{
	return DISPATCH_H(ht, scale_t, s, p, count, (float)factor, nonfinite_flag);
}

/* --- global average pooling ---------------------------------------------------------------
 * NCHW: one warp per (n, c) plane, lanes strided over the plane, combined by butterfly
 * shuffles (the same bits in every lane, every run). NHWC: one thread per (n, c), summing
 * its column over hw in order; neighbouring threads read neighbouring channels, so each
 * step is one coalesced row. */
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

extern "C" int avgpool_global_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c,
					 int hw, const void *x, void *y)
{
	return DISPATCH_H(ht, avgpool_fwd_t, s, nhwc, n, c, hw, x, y);
}

extern "C" int avgpool_global_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c,
					 int hw, const void *dy, void *dx, int accumulate)
{
	return DISPATCH_H(ht, avgpool_bwd_t, s, nhwc, n, c, hw, dy, dx, accumulate);
}

/* --- batch norm apply, bias add ------------------------------------------------------------ */
/* NHWC with c % 8 == 0: chunk k holds channels (8k mod c) .. + 7, so a thread whose chunks
 * step by a multiple of c / 8 keeps one channel group: its 32 statistics and parameters
 * load once into registers, and no element needs a division to find its channel.
 * bn_apply_op::at computes each element, so both paths give the same bits. */
template <typename T>
__global__ static void bn_apply_nhwc8_kernel(size_t chunks, unsigned groups, const T *x, const T *id,
					     bn_apply_op f, T *y)
{
	unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned threads = gridDim.x * blockDim.x / groups * groups;
	if (tid >= threads)
		return;
	unsigned c0 = tid % groups * VEC;
	float mean[VEC], invstd[VEC], gamma[VEC], beta[VEC];
#pragma unroll
	for (int e = 0; e < VEC; e++) {
		mean[e] = f.mean[c0 + e];
		invstd[e] = f.invstd[c0 + e];
		gamma[e] = f.gamma[c0 + e];
		beta[e] = f.beta[c0 + e];
	}
	for (size_t k = tid; k < chunks; k += threads) {
		float v[VEC], vi[VEC] = {};
		load8<true>(x, k, v);
		if (id)
			load8<true>(id, k, vi);
#pragma unroll
		for (int e = 0; e < VEC; e++)
			v[e] = f.at(v[e], vi[e], mean[e], invstd[e], gamma[e], beta[e]);
		store8<true>(y, k, v);
	}
}

template <typename T>
static int bn_apply_t(cudaStream_t s, int nhwc, int n, int c, int hw, const void *x, const void *id,
		      bn_apply_op f, void *y)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return 0;
	size_t count = (size_t)n * c * hw, chunks = count / VEC;
	unsigned blocks = grid_for(chunks) < 4096 ? grid_for(chunks) : 4096;
	if (nhwc && c % VEC == 0 && (unsigned)(c / VEC) <= blocks * BLOCK && aligned(x, 16) &&
	    aligned(id, 16) && aligned(y, 16)) {
		bn_apply_nhwc8_kernel<T><<<blocks, BLOCK, 0, s>>>(chunks, (unsigned)(c / VEC), (const T *)x,
								 (const T *)id, f, (T *)y);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	return ew_launch<T>(s, count, x, id, NULL, y, 0, f, layout{ nhwc, c, hw });
}

extern "C" int bn_apply_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw,
			       const void *x, const void *identity, const float *gamma, const float *beta,
			       const float *mean, const float *invstd, enum bn_apply_act act, void *y)
{
	bn_apply_op f = { gamma, beta, mean, invstd, act != BN_APPLY_LINEAR,
			  act == BN_APPLY_RELU6 ? 6.0f : INFINITY };
	return DISPATCH_H(ht, bn_apply_t, s, nhwc, n, c, hw, x, identity, f, y);
}

template <typename T>
static int bias_add_t(cudaStream_t s, int nhwc, int n, int c, int hw, const float *b, void *y)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return 0;
	return ew_launch<T>(s, (size_t)n * c * hw, y, NULL, NULL, y, 0, bias_add_op{ b },
			    layout{ nhwc, c, hw });
}

extern "C" int bias_add_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw,
			       const float *b, void *y)
{
	return DISPATCH_H(ht, bias_add_t, s, nhwc, n, c, hw, b, y);
}

/* --- dropout --------------------------------------------------------------------------------- */
/* Inverted dropout as in PyTorch: kept elements are scaled by 1 / (1 - p). */
static float dropout_scale(double p)
{
	return p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
}

extern "C" int dropout_fwd_h_cuda(cudaStream_t s, enum gp_dtype ht, const struct dropout_args *a,
				  const uint8_t *mask, const void *x, void *y)
{
	dropout_op f = { dropout_scale(a->p) };
	return DISPATCH_H(ht, ew_t, s, a->count, x, NULL, mask, y, 0, f);
}

extern "C" int dropout_bwd_h_cuda(cudaStream_t s, enum gp_dtype ht, const struct dropout_args *a,
				  const uint8_t *mask, const void *dy, void *dx, int accumulate)
{
	dropout_op f = { dropout_scale(a->p) };
	return DISPATCH_H(ht, ew_t, s, a->count, dy, NULL, mask, dx, accumulate, f);
}

/* --- softmax cross-entropy (kernel_util.cuh) --------------------------------------------- */
extern "C" int softmax_xent_h_cuda(cudaStream_t s, enum gp_dtype ht, int n, int k, const void *logits,
				   const int32_t *labels, void *dlogits, float *row_scratch,
				   double *loss, int *correct)
{
	return DISPATCH_H(ht, softmax_xent_t, s, n, k, logits, labels, dlogits, row_scratch, loss,
			  correct);
}

/* --- channel sums ------------------------------------------------------------------------------
 * NCHW with hw > 1: one block per channel, as channel_sum_cuda. Channels last (and NCHW
 * with hw = 1, the linear layer's N x C, which is the same array): dy is rows of C, so a
 * block takes 32 channels, its threads reading 32 neighbouring channels of a row at a
 * time (coalesced); each of the CS_ROWS thread rows sums every CS_ROWS-th row in order,
 * and the partials are added in thread-row order. Double partials, as the float kernel. */
#define CS_ROWS 16

template <typename T>
__global__ static void channel_sum_nchw_kernel(int n, int c, int hw, const T *dy, float *db)
{
	int ch = blockIdx.x;
	size_t m = (size_t)n * hw;
	double acc = 0.0;
	for (size_t t = threadIdx.x; t < m; t += blockDim.x) {
		size_t ni = t / hw, j = t % hw;
		acc += to_f(dy[(ni * c + ch) * hw + j]);
	}
	acc = block_sum_d(acc);
	if (threadIdx.x == 0)
		db[ch] = (float)acc;
}

template <typename T>
__global__ static void channel_sum_rows_kernel(size_t rows, int c, const T *dy, float *db)
{
	__shared__ double part[CS_ROWS][33];
	int ch = blockIdx.x * 32 + threadIdx.x;
	double acc = 0.0;
	if (ch < c)
		for (size_t r = threadIdx.y; r < rows; r += CS_ROWS)
			acc += to_f(dy[r * c + ch]);
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && ch < c) {
		double sum = 0.0;
		for (int i = 0; i < CS_ROWS; i++)
			sum += part[i][threadIdx.x];
		db[ch] = (float)sum;
	}
}

template <typename T>
static int channel_sum_t(cudaStream_t s, int nhwc, int n, int c, int hw, const void *dy, float *db)
{
	if (c <= 0)
		return 0;
	if (n < 0 || hw < 0)
		return gp_error(GP_EINVAL, "channel sum over %d x %d positions", n, hw);
	if (nhwc || hw == 1)
		channel_sum_rows_kernel<<<(c + 31) / 32, dim3(32, CS_ROWS), 0, s>>>((size_t)n * hw, c,
										   (const T *)dy, db);
	else
		channel_sum_nchw_kernel<<<c, BLOCK, 0, s>>>(n, c, hw, (const T *)dy, db);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int channel_sum_h_cuda(cudaStream_t s, enum gp_dtype ht, int nhwc, int n, int c, int hw,
				  const void *dy, float *db)
{
	return DISPATCH_H(ht, channel_sum_t, s, nhwc, n, c, hw, dy, db);
}
