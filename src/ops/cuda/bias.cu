/* The bias helpers of convolutions and linear layers: y += b per channel, and the bias
 * gradient db = the sum of dy per channel (deterministic, partial sums in double), each
 * behind one launcher taking the element type and layout (b and db are float). */
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

/* === float, NCHW ========================================================================== */
/* --- bias helpers ------------------------------------------------------------------------ */
__global__ static void bias_add_kernel(size_t count, int c, int hw, const float *b, float *y)
{
	FOR_EACH(i, count)
		y[i] += b[i / hw % c];
}

static int bias_add_f32(cudaStream_t s, int n, int c, int hw, const float *b, float *y)
{
	size_t count = (size_t)n * c * hw;
	if (!count)
		return 0;
	bias_add_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, c, hw, b, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* One block per channel, partial sums in double, combined in a fixed order. */
__global__ static void channel_sum_kernel(int n, int c, int hw, const float *dy, float *db)
{
	int ch = blockIdx.x;
	size_t m = (size_t)n * hw;
	double acc = 0.0;
	for (size_t t = threadIdx.x; t < m; t += blockDim.x) {
		size_t ni = t / hw, j = t % hw;
		acc += dy[(ni * c + ch) * hw + j];
	}
	acc = block_sum_d(acc);
	if (threadIdx.x == 0)
		db[ch] = (float)acc;
}

static int channel_sum_f32(cudaStream_t s, int n, int c, int hw, const float *dy, float *db)
{
	if (c <= 0)
		return 0;
	channel_sum_kernel<<<c, BLOCK, 0, s>>>(n, c, hw, dy, db);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* === 16-bit, NCHW or NHWC ================================================================== */
struct bias_add_op {
	static constexpr bool indexed = true;
	const float *bias;
	__device__ float operator()(const cursor &p, float y, float, int) const { return y + bias[p.ch]; }
};


template <typename T>
static int bias_add_t(cudaStream_t s, int nhwc, int n, int c, int hw, const float *b, void *y)
{
	if (n <= 0 || c <= 0 || hw <= 0)
		return 0;
	return ew_launch<T>(s, (size_t)n * c * hw, y, NULL, NULL, y, 0, bias_add_op{ b },
			    layout{ nhwc, c, hw });
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

/* === launchers ============================================================================= */
extern "C" int bias_add_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw,
			     const float *b, void *y)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "bias add"));
		return bias_add_f32(s, n, c, hw, b, (float *)y);
	}
	return DISPATCH_H(dt, bias_add_t, s, nhwc, n, c, hw, b, y);
}

extern "C" int channel_sum_cuda(cudaStream_t s, enum gp_dtype dt, int nhwc, int n, int c, int hw,
				const void *dy, float *db)
{
	if (dt == GP_F32) {
		GP_TRY(f32_nchw_only(nhwc, "channel sum"));
		return channel_sum_f32(s, n, c, hw, (const float *)dy, db);
	}
	return DISPATCH_H(dt, channel_sum_t, s, nhwc, n, c, hw, dy, db);
}
