/* One block per output row of one sample (blockIdx.y), one thread per output pixel:
 * the pixel's coefficient windows on both axes are worked out as axis_coeffs_make
 * (image.c) does, in double, each weight rounded to float, once per row (y) and per
 * pixel (x) rather than per tap; the source rows are filtered horizontally, then
 * combined vertically, in the CPU's order, so from the same decoded pixels the
 * result differs from the CPU's only by float contraction (FMA). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "core/error.h"
}
#include "data/cuda/gpu_augment.h"
#include "ops/cuda/cuda_common.h"

/* One axis of one output coordinate: the source range [lo, lo + cnt) of the window
 * and the normalizing sum of its triangle weights. */
struct axis_window {
	double center, filterscale, sum;
	int lo, cnt;
};

__device__ static double tri(double x)
{
	x = fabs(x);
	return x < 1.0 ? 1.0 - x : 0.0;
}

__device__ static axis_window axis_window_make(double in0, double in1, int in_size,
					       int out_size, int i)
{
	axis_window a;
	double scale = (in1 - in0) / out_size;
	a.filterscale = scale > 1.0 ? scale : 1.0;
	double support = a.filterscale;
	a.center = in0 + (i + 0.5) * scale;
	int lo = (int)(a.center - support + 0.5), hi = (int)(a.center + support + 0.5);
	if (lo < 0)
		lo = 0;
	if (hi > in_size)
		hi = in_size;
	if (hi <= lo) {
		lo = lo < in_size ? lo : in_size - 1;
		hi = lo + 1;
	}
	a.sum = 0;
	for (int x = lo; x < hi; x++)
		a.sum += tri((x - a.center + 0.5) / a.filterscale);
	a.lo = lo;
	a.cnt = hi - lo;
	return a;
}

__device__ static float axis_weight(const axis_window &a, int k)
{
	if (a.sum > 0)
		return (float)(tri((a.lo + k - a.center + 0.5) / a.filterscale) / a.sum);
	return (float)(1.0 / a.cnt);
}

__device__ static void store(float *out, size_t i, float v) { out[i] = v; }
__device__ static void store(__nv_bfloat16 *out, size_t i, float v) { out[i] = __float2bfloat16_rn(v); }
__device__ static void store(__half *out, size_t i, float v) { out[i] = __float2half_rn(v); }

/* Taps of a window kept as float weights in shared memory: the y axis's once per
 * block (a block is one output row), the x axis's once per thread (a column each).
 * A wider window (a shrink by more than ~7x in x, ~30x in y) takes the rest of its
 * weights as it goes. */
#define AUG_TAPS 64
#define AUG_XTAPS 16
#define AUG_THREADS 256

template <typename T, bool NHWC>
__global__ void augment_kernel(const gpu_augment_item *items, int size, float3 scale,
			       float3 shift, T *out)
{
	__shared__ axis_window ay;
	__shared__ float wy[AUG_TAPS];
	__shared__ float wxs[AUG_XTAPS][AUG_THREADS];
	const gpu_augment_item &it = items[blockIdx.y];
	const resample_box &b = it.box;
	int y = blockIdx.x;
	if (threadIdx.x == 0)
		ay = axis_window_make(b.y0 - b.wy0, b.y1 - b.wy0, b.wy1 - b.wy0, size, y);
	__syncthreads();
	for (int k = threadIdx.x; k < ay.cnt && k < AUG_TAPS; k += blockDim.x)
		wy[k] = axis_weight(ay, k);
	__syncthreads();
	size_t plane = (size_t)size * size;
	for (int x = threadIdx.x; x < size; x += blockDim.x) {
		axis_window ax = axis_window_make(b.x0 - b.wx0, b.x1 - b.wx0, b.wx1 - b.wx0, size, x);
		float *wx = &wxs[0][threadIdx.x]; /* tap k at wx[k * AUG_THREADS] */
		int nx = ax.cnt < AUG_XTAPS ? ax.cnt : AUG_XTAPS;
		for (int kx = 0; kx < nx; kx++)
			wx[kx * AUG_THREADS] = axis_weight(ax, kx);
		float acc0 = 0, acc1 = 0, acc2 = 0;
		for (int ky = 0; ky < ay.cnt; ky++) {
			const unsigned char *row = it.src + (size_t)(b.wy0 + ay.lo + ky) * it.pitch +
						   (size_t)(b.wx0 + ax.lo) * 3;
			float r0 = 0, r1 = 0, r2 = 0;
			for (int kx = 0; kx < ax.cnt; kx++) {
				float w = kx < AUG_XTAPS ? wx[kx * AUG_THREADS] : axis_weight(ax, kx);
				r0 += w * row[3 * kx];
				r1 += w * row[3 * kx + 1];
				r2 += w * row[3 * kx + 2];
			}
			float w = ky < AUG_TAPS ? wy[ky] : axis_weight(ay, ky);
			acc0 += w * r0;
			acc1 += w * r1;
			acc2 += w * r2;
		}
		int ox = it.flip ? size - 1 - x : x;
		if (NHWC) {
			size_t o = (((size_t)it.dst * size + y) * size + ox) * 3;
			store(out, o, acc0 * scale.x + shift.x);
			store(out, o + 1, acc1 * scale.y + shift.y);
			store(out, o + 2, acc2 * scale.z + shift.z);
		} else {
			size_t o = (size_t)it.dst * 3 * plane + (size_t)y * size + ox;
			store(out, o, acc0 * scale.x + shift.x);
			store(out, o + plane, acc1 * scale.y + shift.y);
			store(out, o + 2 * plane, acc2 * scale.z + shift.z);
		}
	}
}

/* A 32 x 8 tile of one item's pixels (blockIdx.z): no division to find a pixel. */
__global__ void ycc_kernel(const gpu_ycc_item *items)
{
	const gpu_ycc_item &it = items[blockIdx.z];
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
	if (x >= it.w || y >= it.h)
		return;
	unsigned char *o = it.dst + (size_t)y * it.dst_pitch + (size_t)x * 3;
	if (!it.cb.p) {
		unsigned char v = it.y[(size_t)y * it.y_pitch + x];
		o[0] = o[1] = o[2] = v;
		return;
	}
	uint8_t rgb[3];
	ycc_pixel(it.y, it.y_pitch, &it.cb, &it.cr, x, y, rgb);
	o[0] = rgb[0];
	o[1] = rgb[1];
	o[2] = rgb[2];
}

extern "C" int gpu_ycc_launch(const gpu_ycc_item *items_dev, int n, int max_w, int max_h,
			      void *stream)
{
	if (n <= 0 || max_w <= 0 || max_h <= 0)
		return 0;
	if (n > 65535 || (max_h + 7) / 8 > 65535)
		return gp_error(GP_EINVAL, "gpu ycc: %d images of up to %d rows in one launch "
				"(at most 65535 and 524280)", n, max_h);
	dim3 block(32, 8), grid((unsigned)((max_w + 31) / 32), (unsigned)((max_h + 7) / 8),
				(unsigned)n);
	ycc_kernel<<<grid, block, 0, (cudaStream_t)stream>>>(items_dev);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int gpu_augment_launch(const gpu_augment_item *items_dev, int n, int size,
				  enum gpu_batch_layout layout, const float mean[3],
				  const float std[3], void *out, void *stream)
{
	if (n <= 0)
		return 0;
	if (n > 65535)
		return gp_error(GP_EINVAL, "gpu augment: %d samples in one launch (at most 65535)", n);
	/* the CPU's constants, computed the CPU's way */
	float3 scale = make_float3(1.0f / (255.0f * std[0]), 1.0f / (255.0f * std[1]),
				   1.0f / (255.0f * std[2]));
	float3 shift = make_float3(-mean[0] / std[0], -mean[1] / std[1], -mean[2] / std[2]);
	if (size > 65535)
		return gp_error(GP_EINVAL, "gpu augment: output size %d (at most 65535)", size);
	/* a block per output row of a sample */
	dim3 block(size < AUG_THREADS ? (size + 31) / 32 * 32 : AUG_THREADS),
		grid((unsigned)size, (unsigned)n);
	cudaStream_t s = (cudaStream_t)stream;
	switch (layout) {
	case GPU_BATCH_NCHW_F32:
		augment_kernel<float, false><<<grid, block, 0, s>>>(items_dev, size, scale, shift,
								    (float *)out);
		break;
	case GPU_BATCH_NHWC_BF16:
		augment_kernel<__nv_bfloat16, true><<<grid, block, 0, s>>>(
			items_dev, size, scale, shift, (__nv_bfloat16 *)out);
		break;
	case GPU_BATCH_NHWC_F16:
		augment_kernel<__half, true><<<grid, block, 0, s>>>(items_dev, size, scale, shift,
								    (__half *)out);
		break;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}
