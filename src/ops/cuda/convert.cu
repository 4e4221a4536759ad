/* Conversions between the float master copies and 16-bit activations: plain casts, and
 * 4-D layout changes (float NCHW to 16-bit NHWC and back, also a convolution's weights
 * KCRS to KRSC) through a shared-memory transpose. Values are widened to float and
 * rounded to the 16-bit type once. Each launcher checks the type, launches nothing for
 * empty inputs and checks the launch. */
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

#define TILE 32 /* transpose tile edge */

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

/* The 16-bit side of a conversion: f16 or bf16 (float to float is no conversion). */
static int half_only(enum gp_dtype ht)
{
	if (ht == GP_F16 || ht == GP_BF16)
		return 0;
	return gp_error(GP_EINVAL, "conversions between float and 16 bits take f16 or bf16, not %s",
			dtype_name(ht));
}

extern "C" int cast_f32_to_h_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const float *x,
				  void *y)
{
	GP_TRY(half_only(ht));
	return DISPATCH_H(ht, cast_to_h_t, s, count, x, y);
}

extern "C" int cast_h_to_f32_cuda(cudaStream_t s, enum gp_dtype ht, size_t count, const void *x,
				  float *y)
{
	GP_TRY(half_only(ht));
	return DISPATCH_H(ht, cast_from_h_t, s, count, x, y);
}

extern "C" int to_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w,
				int nhwc_out, const float *x, void *y)
{
	GP_TRY(half_only(ht));
	return DISPATCH_H(ht, to_layout_t, s, n, c, h, w, nhwc_out, x, y);
}

extern "C" int from_h_layout_cuda(cudaStream_t s, enum gp_dtype ht, int n, int c, int h, int w,
				  int nhwc_in, const void *x, float *y, int accumulate)
{
	GP_TRY(half_only(ht));
	return DISPATCH_H(ht, from_layout_t, s, n, c, h, w, nhwc_in, x, y, accumulate);
}
