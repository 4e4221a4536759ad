/* The coefficient windows of each output column and row are worked out as
 * axis_coeffs_make (image.c) does, in double, each weight rounded to float, once per
 * batch into a table (window_kernel), not once per pixel and tap; then a block per
 * output row of one sample, a thread per output pixel: the source rows are filtered
 * horizontally, then combined vertically, in the CPU's order, so from the same decoded
 * pixels the result differs from the CPU's only by float contraction (FMA).
 * The table keeps the columns' weights tap-major as well (w[tap][column]): a warp's
 * threads read one tap's weights of 32 neighbouring columns in one transaction, into
 * registers once per pixel, where a record per column (80 bytes) spread each tap's
 * read over 20 (docs/log/perf-log.md, eighteenth session). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

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

/* The table: the windows of every output column (axis 0) and row (axis 1) of every
 * sample, rec[(sample * 2 + axis) * size + i]; then, for the columns only, each
 * window's first source column and tap count, lo[sample * size + i] and
 * cnt[sample * size + i], and its weights tap-major, w[(sample * AUG_WTAPS + k) * size
 * + i]. Worked out once per batch, not once per pixel. */
struct aug_table {
	aug_axis *rec;
	int *lo, *cnt;
	float *w;
};

__host__ __device__ static aug_table aug_table_at(void *base, int n, int size)
{
	size_t cells = (size_t)n * size;
	aug_table t;
	t.rec = (aug_axis *)base;
	t.lo = (int *)(t.rec + 2 * cells);
	t.cnt = t.lo + cells;
	t.w = (float *)(t.cnt + cells);
	return t;
}

__device__ static const resample_box &item_box(const gpu_augment_item &it) { return it.box; }
__device__ static const resample_box &item_box(const gpu_planar_item &it) { return it.a.box; }

template <typename I>
__global__ void window_kernel(const I *items, int size, aug_table t)
{
	int s = blockIdx.x, axis = blockIdx.y;
	const resample_box &b = item_box(items[s]);
	for (int i = threadIdx.x; i < size; i += blockDim.x) {
		aug_axis e;
		e.a = axis == 0 ? axis_window_make(b.x0 - b.wx0, b.x1 - b.wx0, b.wx1 - b.wx0, size, i)
				: axis_window_make(b.y0 - b.wy0, b.y1 - b.wy0, b.wy1 - b.wy0, size, i);
		for (int k = 0; k < AUG_WTAPS; k++)
			e.w[k] = k < e.a.cnt ? axis_weight(e.a, k) : 0.0f;
		t.rec[((size_t)s * 2 + axis) * size + i] = e;
		if (axis == 0) {
			size_t c = (size_t)s * size + i;
			t.lo[c] = e.a.lo;
			t.cnt[c] = e.a.cnt;
			for (int k = 0; k < AUG_WTAPS; k++)
				t.w[((size_t)s * AUG_WTAPS + k) * size + i] = e.w[k];
		}
	}
}

__device__ static float aug_weight(const aug_axis &e, int k)
{
	return k < AUG_WTAPS ? e.w[k] : axis_weight(e.a, k);
}

/* The first cnt (at most AUG_WTAPS) taps of a row from registers: unrolled, leaving
 * the loop at cnt (a predicated tail would issue all AUG_WTAPS taps' instructions:
 * ncu counted 25 instructions a pixel, eighteenth session). */
__device__ static void row_taps(const float *wx, int cnt, const unsigned char *row, float &s0,
			       float &s1, float &s2)
{
#pragma unroll
	for (int kx = 0; kx < AUG_WTAPS; kx++) {
		if (kx >= cnt)
			break;
		s0 += wx[kx] * row[3 * kx];
		s1 += wx[kx] * row[3 * kx + 1];
		s2 += wx[kx] * row[3 * kx + 2];
	}
}

/* A block per output row y (blockIdx.x) of a sample (blockIdx.y), a thread per output
 * pixel, the windows from window_kernel's table. A column window of at most AUG_WTAPS
 * taps (any shrink up to ~5x) runs from registers, unrolled; a wider one reads its
 * record as it goes. Either way the same products in the same order. */
template <typename T, bool NHWC>
__global__ void augment_kernel(const gpu_augment_item *items, int size, float3 scale,
			       float3 shift, aug_table t, T *out)
{
	const gpu_augment_item &it = items[blockIdx.y];
	const resample_box &b = it.box;
	int y = blockIdx.x;
	const aug_axis &ay = t.rec[((size_t)blockIdx.y * 2 + 1) * size + y];
	const aug_axis *xs = t.rec + (size_t)blockIdx.y * 2 * size;
	const float *ws = t.w + (size_t)blockIdx.y * AUG_WTAPS * size;
	size_t plane = (size_t)size * size;
	for (int x = threadIdx.x; x < size; x += blockDim.x) {
		size_t c = (size_t)blockIdx.y * size + x;
		int lo = t.lo[c], cnt = t.cnt[c];
		float wx[AUG_WTAPS];
#pragma unroll
		for (int k = 0; k < AUG_WTAPS; k++)
			wx[k] = ws[(size_t)k * size + x];
		float acc0 = 0, acc1 = 0, acc2 = 0;
		for (int ky = 0; ky < ay.a.cnt; ky++) {
			const unsigned char *row = it.src + (size_t)(b.wy0 + ay.a.lo + ky) * it.pitch +
						   (size_t)(b.wx0 + lo) * 3;
			float r0 = 0, r1 = 0, r2 = 0;
			if (cnt <= AUG_WTAPS) {
				row_taps(wx, cnt, row, r0, r1, r2);
			} else {
				const aug_axis &ax = xs[x];
				for (int kx = 0; kx < cnt; kx++) {
					float w = aug_weight(ax, kx);
					r0 += w * row[3 * kx];
					r1 += w * row[3 * kx + 1];
					r2 += w * row[3 * kx + 2];
				}
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

/* The one-pass kernel (gpu_planar_item): a block of PL_TX x PL_BY threads per tile of
 * PL_TX x PL_TY output pixels of a sample (blockIdx.z). Its source span (the union of
 * its columns' and rows' windows) is converted once into shared memory as RGB bytes
 * (ycc_quad_h2v2 or ycc_pixel: what ycc_kernel makes), each row of the span filtered
 * there horizontally for each output column, then the filtered rows combined
 * vertically for each output pixel: the products and sums of augment_kernel, in its
 * order. Tiles overlap by their windows' reach: at a 1.4x shrink a source pixel is
 * converted about 1.4 times. */
#define PL_TX 32
#define PL_TY 16 /* output rows a tile */
#define PL_BY 8  /* thread rows a block: each thread makes PL_TY / PL_BY output rows */
/* The dynamic shared memory a launch may ask for: with the kernel's static span[]
 * within the 48 KB a block gets without opting in (cudaFuncSetAttribute). */
#define PL_SHARED_MAX (((size_t)48 << 10) - 64)

__host__ __device__ static size_t pl_src_bytes(size_t rows, size_t cols)
{
	return (rows * cols * 3 + 15) / 16 * 16;
}

__host__ __device__ static size_t pl_shared_need(size_t rows, size_t cols)
{
	return pl_src_bytes(rows, cols) + rows * PL_TX * 3 * sizeof(float);
}

__device__ static void pl_pixel(const gpu_planar_item &it, int x, int y, unsigned char *rgb)
{
	if (!it.cb.p) {
		unsigned char v = it.y[(size_t)y * it.y_pitch + x];
		rgb[0] = rgb[1] = rgb[2] = v;
	} else {
		ycc_pixel(it.y, it.y_pitch, &it.cb, &it.cr, x, y, rgb);
	}
}

template <typename T, bool NHWC>
__device__ static void pl_store(const gpu_augment_item &it, int size, int x, int y, float3 scale,
				float3 shift, float acc0, float acc1, float acc2, T *out)
{
	int ox = it.flip ? size - 1 - x : x;
	if (NHWC) {
		size_t o = (((size_t)it.dst * size + y) * size + ox) * 3;
		store(out, o, acc0 * scale.x + shift.x);
		store(out, o + 1, acc1 * scale.y + shift.y);
		store(out, o + 2, acc2 * scale.z + shift.z);
	} else {
		size_t plane = (size_t)size * size;
		size_t o = (size_t)it.dst * 3 * plane + (size_t)y * size + ox;
		store(out, o, acc0 * scale.x + shift.x);
		store(out, o + plane, acc1 * scale.y + shift.y);
		store(out, o + 2 * plane, acc2 * scale.z + shift.z);
	}
}

__device__ static void warp_span(int lo, int hi, int *out)
{
	for (int d = 16; d > 0; d >>= 1) {
		lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, d));
		hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, d));
	}
	if ((threadIdx.x & 31) == 0) {
		out[0] = lo;
		out[1] = hi;
	}
}

/* Row of a tile's source span: pixels [x0, x0 + n) of image row y as RGB bytes at
 * dst, the block's threads along x (tx of PL_TX) taking 4 pixels each: 4:2:0 through
 * ycc_quad_h2v2 from the even pixel at or left of x0 (the one left of it made and
 * dropped), other layouts pixel by pixel. */
__device__ static void pl_row(const gpu_planar_item &it, int x0, int y, int n, unsigned char *dst,
			      int tx)
{
	if (it.cb.p && it.cb.hs == 2 && it.cb.vs == 2) {
		int xe = x0 & ~1, end = x0 + n;
		for (int x = xe + 4 * tx; x < end; x += 4 * PL_TX) {
			int m = end - x < 4 ? end - x : 4;
			uint8_t rgb[12];
			ycc_quad_h2v2(it.y, it.y_pitch, &it.cb, &it.cr, x, y, m, rgb);
#pragma unroll
			for (int k = 0; k < 4; k++)
				if (k < m && x + k >= x0) {
					unsigned char *o = dst + (size_t)(x + k - x0) * 3;
					o[0] = rgb[3 * k];
					o[1] = rgb[3 * k + 1];
					o[2] = rgb[3 * k + 2];
				}
		}
		return;
	}
	for (int c = tx; c < n; c += PL_TX)
		pl_pixel(it, x0 + c, y, dst + (size_t)c * 3);
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(PL_TX *PL_BY)
	planar_kernel(const gpu_planar_item *items, int size, float3 scale, float3 shift,
		      size_t shared_bytes, aug_table t, T *out)
{
	extern __shared__ __align__(16) unsigned char pl_smem[];
	__shared__ int span[4]; /* columns c0, c1, rows r0, r1 of the windows */
	const gpu_planar_item &it = items[blockIdx.z];
	const resample_box &b = it.a.box;
	int tx = threadIdx.x, ty = threadIdx.y;
	int xb = blockIdx.x * PL_TX, yb = blockIdx.y * PL_TY;
	int nx = min(PL_TX, size - xb), ny = min(PL_TY, size - yb);
	int x = xb + tx;
	size_t cell = (size_t)blockIdx.z * size + x; /* column x's in the table */
	const aug_axis *cols = t.rec + (size_t)blockIdx.z * 2 * size;
	const aug_axis *rows = cols + size;
	if (ty == 0) {
		bool in = tx < nx;
		warp_span(in ? t.lo[cell] : INT_MAX, in ? t.lo[cell] + t.cnt[cell] : INT_MIN, span);
	} else if (ty == 1) {
		int lo = INT_MAX, hi = INT_MIN;
		for (int k = tx; k < ny; k += PL_TX) {
			lo = min(lo, rows[yb + k].a.lo);
			hi = max(hi, rows[yb + k].a.lo + rows[yb + k].a.cnt);
		}
		warp_span(lo, hi, span + 2);
	}
	__syncthreads();
	int c0 = span[0], ncols = span[1] - span[0], r0 = span[2], nrows = span[3] - span[2];
	if (pl_shared_need(nrows, ncols) > shared_bytes) {
		/* wider than the host's bound (gpu_planar_shared_bytes): each pixel from
		 * the planes, tap by tap; slow, and not seen */
		if (tx >= nx)
			return;
		const aug_axis &ax = cols[x];
		for (int y = yb + ty; y < yb + ny; y += PL_BY) {
			const aug_axis &ay = rows[y];
			float acc0 = 0, acc1 = 0, acc2 = 0;
			for (int ky = 0; ky < ay.a.cnt; ky++) {
				float s0 = 0, s1 = 0, s2 = 0;
				for (int kx = 0; kx < ax.a.cnt; kx++) {
					unsigned char p[3];
					pl_pixel(it, b.wx0 + ax.a.lo + kx, b.wy0 + ay.a.lo + ky, p);
					float w = aug_weight(ax, kx);
					s0 += w * p[0];
					s1 += w * p[1];
					s2 += w * p[2];
				}
				float w = aug_weight(ay, ky);
				acc0 += w * s0;
				acc1 += w * s1;
				acc2 += w * s2;
			}
			pl_store<T, NHWC>(it.a, size, x, y, scale, shift, acc0, acc1, acc2, out);
		}
		return;
	}
	unsigned char *src = pl_smem;
	float *h = (float *)(pl_smem + pl_src_bytes(nrows, ncols));
	for (int r = ty; r < nrows; r += PL_BY)
		pl_row(it, b.wx0 + c0, b.wy0 + r0 + r, ncols, src + (size_t)r * ncols * 3, tx);
	__syncthreads();
	if (tx < nx) {
		int lo = t.lo[cell] - c0, cnt = t.cnt[cell];
		float wx[AUG_WTAPS];
#pragma unroll
		for (int k = 0; k < AUG_WTAPS; k++)
			wx[k] = t.w[((size_t)blockIdx.z * AUG_WTAPS + k) * size + x];
		for (int r = ty; r < nrows; r += PL_BY) {
			const unsigned char *row = src + ((size_t)r * ncols + lo) * 3;
			float s0 = 0, s1 = 0, s2 = 0;
			if (cnt <= AUG_WTAPS) {
				row_taps(wx, cnt, row, s0, s1, s2);
			} else {
				for (int kx = 0; kx < cnt; kx++) {
					float w = aug_weight(cols[x], kx);
					s0 += w * row[3 * kx];
					s1 += w * row[3 * kx + 1];
					s2 += w * row[3 * kx + 2];
				}
			}
			h[(0 * nrows + r) * PL_TX + tx] = s0;
			h[(1 * nrows + r) * PL_TX + tx] = s1;
			h[(2 * nrows + r) * PL_TX + tx] = s2;
		}
	}
	__syncthreads();
	if (tx >= nx)
		return;
	for (int y = yb + ty; y < yb + ny; y += PL_BY) {
		const aug_axis &ay = rows[y];
		int rl = ay.a.lo - r0;
		float acc0 = 0, acc1 = 0, acc2 = 0;
		for (int ky = 0; ky < ay.a.cnt; ky++) {
			float w = aug_weight(ay, ky);
			acc0 += w * h[(0 * nrows + rl + ky) * PL_TX + tx];
			acc1 += w * h[(1 * nrows + rl + ky) * PL_TX + tx];
			acc2 += w * h[(2 * nrows + rl + ky) * PL_TX + tx];
		}
		pl_store<T, NHWC>(it.a, size, x, y, scale, shift, acc0, acc1, acc2, out);
	}
}

/* Output pixels' windows [lo, hi) on one axis of a tile of `tile` outputs span at
 * most (tile - 1) x scale + 2 x support + 1 source pixels (each window is centre
 * -/+ support, rounded: axis_window_make); 2 more for safety. */
static size_t pl_axis_span(double in0, double in1, int size, int tile)
{
	double scale = (in1 - in0) / size, support = scale > 1.0 ? scale : 1.0;
	return (size_t)ceil((tile - 1) * scale + 2 * support) + 3;
}

extern "C" size_t gpu_planar_shared_max(void)
{
	return PL_SHARED_MAX;
}

extern "C" size_t gpu_planar_shared_bytes(const struct resample_box *b, int size)
{
	if (size <= 0)
		return 0;
	size_t cols = pl_axis_span(b->x0 - b->wx0, b->x1 - b->wx0, size, PL_TX);
	size_t rows = pl_axis_span(b->y0 - b->wy0, b->y1 - b->wy0, size, PL_TY);
	size_t need = pl_shared_need(rows, cols);
	return need <= PL_SHARED_MAX ? need : 0;
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
	size_t cells = (size_t)n * size;
	return cells * (2 * sizeof(aug_axis) + 2 * sizeof(int) + AUG_WTAPS * sizeof(float));
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
	aug_table t = aug_table_at(table, n, size);
	window_kernel<gpu_augment_item><<<dim3((unsigned)n, 2), 128, 0, s>>>(items_dev, size, t);
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

extern "C" int gpu_planar_launch(const gpu_planar_item *items_dev, int n, int size,
				 enum gpu_batch_layout layout, const float mean[3], const float std[3],
				 size_t shared_bytes, void *table, void *out, void *stream)
{
	if (n <= 0)
		return 0;
	if (n > 65535 || size > 65535 || shared_bytes > PL_SHARED_MAX)
		return gp_error(GP_EINVAL, "gpu augment: %d samples of %d x %d, %zu bytes of shared "
				"memory in one launch (at most 65535, 65535 and %zu)", n, size, size,
				shared_bytes, PL_SHARED_MAX);
	float3 scale = make_float3(1.0f / (255.0f * std[0]), 1.0f / (255.0f * std[1]),
				   1.0f / (255.0f * std[2]));
	float3 shift = make_float3(-mean[0] / std[0], -mean[1] / std[1], -mean[2] / std[2]);
	cudaStream_t s = (cudaStream_t)stream;
	aug_table t = aug_table_at(table, n, size);
	window_kernel<gpu_planar_item><<<dim3((unsigned)n, 2), 128, 0, s>>>(items_dev, size, t);
	CUDA_CHECK_LAUNCH();
	dim3 block(PL_TX, PL_BY), grid((unsigned)((size + PL_TX - 1) / PL_TX),
				       (unsigned)((size + PL_TY - 1) / PL_TY), (unsigned)n);
	switch (layout) {
	case GPU_BATCH_NCHW_F32:
		planar_kernel<float, false><<<grid, block, shared_bytes, s>>>(
			items_dev, size, scale, shift, shared_bytes, t, (float *)out);
		break;
	case GPU_BATCH_NHWC_BF16:
		planar_kernel<__nv_bfloat16, true><<<grid, block, shared_bytes, s>>>(
			items_dev, size, scale, shift, shared_bytes, t, (__nv_bfloat16 *)out);
		break;
	case GPU_BATCH_NHWC_F16:
		planar_kernel<__half, true><<<grid, block, shared_bytes, s>>>(
			items_dev, size, scale, shift, shared_bytes, t, (__half *)out);
		break;
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}
