/* The coefficient windows of each output column and row are worked out as
 * axis_coeffs_make (image.c) does, in double, each weight rounded to float, once per
 * batch into a table (window_kernel), not once per pixel and tap; then a block per
 * output row of one sample, a thread per output pixel: the source rows are filtered
 * horizontally, then combined vertically, in the CPU's order, so from the same decoded
 * pixels the result differs from the CPU's only by float contraction (FMA). */
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

/* One output coordinate's window on one axis of one sample, as the augment kernel
 * reads it: the first AUG_WTAPS weights rounded to float; a wider window (a shrink by
 * more than ~5x) has its other weights worked out from the window as they are used. */
#define AUG_WTAPS 12
struct aug_axis {
	axis_window a;
	float w[AUG_WTAPS];
};

/* The windows of every output column (axis 0) and row (axis 1) of every sample:
 * table[(sample * 2 + axis) * size + i]. Once per batch, not once per pixel. */
__global__ void window_kernel(const gpu_augment_item *items, int size, aug_axis *table)
{
	int s = blockIdx.x, axis = blockIdx.y;
	const resample_box &b = items[s].box;
	for (int i = threadIdx.x; i < size; i += blockDim.x) {
		aug_axis e;
		e.a = axis == 0 ? axis_window_make(b.x0 - b.wx0, b.x1 - b.wx0, b.wx1 - b.wx0, size, i)
				: axis_window_make(b.y0 - b.wy0, b.y1 - b.wy0, b.wy1 - b.wy0, size, i);
		for (int k = 0; k < AUG_WTAPS; k++)
			e.w[k] = k < e.a.cnt ? axis_weight(e.a, k) : 0.0f;
		table[((size_t)s * 2 + axis) * size + i] = e;
	}
}

__device__ static float aug_weight(const aug_axis &e, int k)
{
	return k < AUG_WTAPS ? e.w[k] : axis_weight(e.a, k);
}

/* A block per output row y (blockIdx.x) of a sample (blockIdx.y), a thread per output
 * pixel, the windows from window_kernel's table. */
template <typename T, bool NHWC>
__global__ void augment_kernel(const gpu_augment_item *items, int size, float3 scale,
			       float3 shift, const aug_axis *table, T *out)
{
	const gpu_augment_item &it = items[blockIdx.y];
	const resample_box &b = it.box;
	int y = blockIdx.x;
	const aug_axis &ay = table[((size_t)blockIdx.y * 2 + 1) * size + y];
	const aug_axis *xs = table + (size_t)blockIdx.y * 2 * size;
	size_t plane = (size_t)size * size;
	for (int x = threadIdx.x; x < size; x += blockDim.x) {
		const aug_axis &ax = xs[x];
		float acc0 = 0, acc1 = 0, acc2 = 0;
		for (int ky = 0; ky < ay.a.cnt; ky++) {
			const unsigned char *row = it.src + (size_t)(b.wy0 + ay.a.lo + ky) * it.pitch +
						   (size_t)(b.wx0 + ax.a.lo) * 3;
			float r0 = 0, r1 = 0, r2 = 0;
			for (int kx = 0; kx < ax.a.cnt; kx++) {
				float w = aug_weight(ax, kx);
				r0 += w * row[3 * kx];
				r1 += w * row[3 * kx + 1];
				r2 += w * row[3 * kx + 2];
			}
			float w = aug_weight(ay, ky);
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

/* A tile of 32 x YCC_PX pixels by 8 rows of one item's region (blockIdx.z), a thread
 * per YCC_PX pixels of a row from a column that is a multiple of YCC_PX (so a few
 * pixels left of the region are made too, which are the image's own): 4:2:0 through
 * ycc_quad_h2v2, which reads each chroma plane 8 times for the four, and the 12
 * bytes stored as 3 words where they are aligned; other layouts pixel by pixel. */
#define YCC_PX 4
__global__ void ycc_kernel(const gpu_ycc_item *items)
{
	const gpu_ycc_item &it = items[blockIdx.z];
	int x = (it.x0 & ~(YCC_PX - 1)) + (blockIdx.x * blockDim.x + threadIdx.x) * YCC_PX;
	int y = blockIdx.y * blockDim.y + threadIdx.y;
	int end = it.x0 + it.w;
	if (x >= end || y >= it.h)
		return;
	y += it.y0;
	int n = end - x < YCC_PX ? end - x : YCC_PX;
	unsigned char *o = it.dst + (size_t)y * it.dst_pitch + (size_t)x * 3;
	uint8_t rgb[3 * YCC_PX];
	if (!it.cb.p) {
		for (int k = 0; k < n; k++)
			rgb[3 * k] = rgb[3 * k + 1] = rgb[3 * k + 2] = it.y[(size_t)y * it.y_pitch + x + k];
	} else if (it.cb.hs == 2 && it.cb.vs == 2) {
		ycc_quad_h2v2(it.y, it.y_pitch, &it.cb, &it.cr, x, y, n, rgb);
	} else {
		for (int k = 0; k < n; k++)
			ycc_pixel(it.y, it.y_pitch, &it.cb, &it.cr, x + k, y, rgb + 3 * k);
	}
	if (n == YCC_PX && ((uintptr_t)o & 3) == 0) {
		uint32_t *w = (uint32_t *)o;
		for (int k = 0; k < 3; k++)
			w[k] = (uint32_t)rgb[4 * k] | (uint32_t)rgb[4 * k + 1] << 8 |
			       (uint32_t)rgb[4 * k + 2] << 16 | (uint32_t)rgb[4 * k + 3] << 24;
	} else {
		for (int k = 0; k < 3 * n; k++)
			o[k] = rgb[k];
	}
}

extern "C" int gpu_ycc_launch(const gpu_ycc_item *items_dev, int n, int max_w, int max_h,
			      void *stream)
{
	if (n <= 0 || max_w <= 0 || max_h <= 0)
		return 0;
	if (n > 65535 || (max_h + 7) / 8 > 65535)
		return gp_error(GP_EINVAL, "gpu ycc: %d images of up to %d rows in one launch "
				"(at most 65535 and 524280)", n, max_h);
	/* a region's first group may start up to YCC_PX - 1 pixels left of it */
	int groups = (max_w + YCC_PX - 1 + YCC_PX - 1) / YCC_PX;
	dim3 block(32, 8), grid((unsigned)((groups + 31) / 32), (unsigned)((max_h + 7) / 8),
				(unsigned)n);
	ycc_kernel<<<grid, block, 0, (cudaStream_t)stream>>>(items_dev);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" size_t gpu_augment_table_bytes(int n, int size)
{
	return (size_t)n * 2 * (size_t)size * sizeof(aug_axis);
}

extern "C" int gpu_augment_launch(const gpu_augment_item *items_dev, int n, int size,
				  enum gpu_batch_layout layout, const float mean[3],
				  const float std[3], void *table, void *out, void *stream)
{
	if (n <= 0)
		return 0;
	if (n > 65535 || size > 65535)
		return gp_error(GP_EINVAL, "gpu augment: %d samples of %d x %d in one launch (at "
				"most 65535 and 65535)", n, size, size);
	/* the CPU's constants, computed the CPU's way */
	float3 scale = make_float3(1.0f / (255.0f * std[0]), 1.0f / (255.0f * std[1]),
				   1.0f / (255.0f * std[2]));
	float3 shift = make_float3(-mean[0] / std[0], -mean[1] / std[1], -mean[2] / std[2]);
	cudaStream_t s = (cudaStream_t)stream;
	aug_axis *t = (aug_axis *)table;
	window_kernel<<<dim3((unsigned)n, 2), 128, 0, s>>>(items_dev, size, t);
	CUDA_CHECK_LAUNCH();
	dim3 block(size < 256 ? (size + 31) / 32 * 32 : 256), grid((unsigned)size, (unsigned)n);
	switch (layout) {
	case GPU_BATCH_NCHW_F32:
		augment_kernel<float, false><<<grid, block, 0, s>>>(items_dev, size, scale, shift, t,
								    (float *)out);
		break;
	case GPU_BATCH_NHWC_BF16:
		augment_kernel<__nv_bfloat16, true><<<grid, block, 0, s>>>(
			items_dev, size, scale, shift, t, (__nv_bfloat16 *)out);
		break;
	case GPU_BATCH_NHWC_F16:
		augment_kernel<__half, true><<<grid, block, 0, s>>>(items_dev, size, scale, shift, t,
								    (__half *)out);
		break;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}
