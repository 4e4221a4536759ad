/* Depthwise convolution kernels (groups == c_in == c_out): forward, the input gradient
 * (a gather, so no atomics) and the weight gradient (a two-pass, fixed-order
 * reduction), behind one launcher per direction taking the element type. Float runs
 * NCHW kernels (the first half of this file), fp16 and bf16 NHWC kernels from one
 * templated source (the second half): the two differ in how threads map onto the data,
 * each as its layout reads best. The 3x3 case of MobileNetV2 is templated on the
 * stride; any other odd k up to 7 takes a generic path with the sizes read at run time.
 * Results do not depend on the run: every reduction sums in a fixed order. */
#include <stdint.h>
#include <stdlib.h>

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

/* === float, NCHW ============================================================================
 * Depthwise convolution kernels (groups == c_in == c_out), NCHW float: forward, the
 * input gradient (a gather, so no atomics) and the weight gradient (a two-pass,
 * fixed-order reduction). The 3x3 case of MobileNetV2 is templated on the stride; any
 * other odd k up to 7 takes a generic path with the sizes read at run time.
 *
 * The kernels are memory-bound, so the layout is chosen to read x and dy about once
 * from DRAM:
 * - adjacent lanes take adjacent columns, so each warp-wide load is one or two cache
 *   lines (a lane owning several columns would make every load span several lines and
 *   cost as many L1 wavefronts);
 * - each thread of a 3x3 kernel owns DW_VH consecutive rows of one column and keeps
 *   the input rows they share in registers: a 3x3 stride-1 forward reads 6 rows x 3
 *   columns for 4 outputs instead of 9 values per output.
 * Indices into whole tensors are size_t (3e9-element activations occur); indices
 * inside one plane are int (planes are limited to 2^30 elements). */

#define BLOCK 256
#define FULL_MASK 0xffffffffu
/* Rows per thread in the 3x3 kernels: enough to share most input rows, few enough that
 * the last, partly empty row group of a 7x7 or 14x14 plane wastes little. */
#define DW_VH 4
/* Weight gradient: the batch is cut into slices so that there are about this many
 * (channel, slice) blocks: ~15 per SM on a 132-SM H100, so every SM stays busy even
 * for the 32-channel layer, while the scratch stays small (c * slices * (k*k + 1)). */
#define DW_TARGET_BLOCKS 2048
/* ... but a slice keeps at least this many outputs, so that the per-block reduction
 * and the scratch round trip stay small next to the streaming. */
#define DW_MIN_OUTPUTS 4096
#define DW_MAX_PLANE (1 << 30)

/* Sizes a kernel needs, and how the threads of a launch map onto planes: a thread is
 * one (plane, row group, column) item; blockIdx.y picks a run of `pps` planes and the
 * item index inside that run stays below 2^32, so unsigned 32-bit division locates it. */
struct dw_k {
	int c, h_in, w_in, h_out, w_out, k, stride, pad;
	int cols;       /* columns of the written plane (w_out forward, w_in backward) */
	unsigned items; /* row groups * cols: threads per plane */
	unsigned pps;   /* planes per grid row */
	size_t planes;  /* n * c */
};

static int dw_supported(const struct conv2d_args *a)
{
	if (!a || a->c_in <= 0 || a->groups != a->c_in || a->c_out != a->c_in)
		return 0;
	if (a->kh != a->kw || a->kh < 1 || a->kh > 7 || !(a->kh & 1))
		return 0;
	if ((a->stride != 1 && a->stride != 2) || a->pad < 0 || a->n < 0)
		return 0;
	if (a->h_in <= 0 || a->w_in <= 0 || a->h_out <= 0 || a->w_out <= 0)
		return 0;
	if (a->h_out != conv_out_size(a->h_in, a->kh, a->stride, a->pad) ||
	    a->w_out != conv_out_size(a->w_in, a->kw, a->stride, a->pad))
		return 0;
	if ((int64_t)a->h_in * a->w_in > DW_MAX_PLANE || (int64_t)a->h_out * a->w_out > DW_MAX_PLANE)
		return 0;
	return 1;
}

static int dw_check(const struct conv2d_args *a, const char *what)
{
	if (dw_supported(a))
		return 0;
	return gp_error(GP_EINVAL,
			"depthwise %s: unsupported convolution (n %d, %d->%d channels, groups %d, "
			"%dx%d kernel, stride %d, pad %d, %dx%d -> %dx%d)",
			what, a->n, a->c_in, a->c_out, a->groups, a->kh, a->kw, a->stride, a->pad,
			a->h_in, a->w_in, a->h_out, a->w_out);
}

static struct dw_k dw_k_from(const struct conv2d_args *a)
{
	struct dw_k p;
	p.c = a->c_in;
	p.h_in = a->h_in;
	p.w_in = a->w_in;
	p.h_out = a->h_out;
	p.w_out = a->w_out;
	p.k = a->kh;
	p.stride = a->stride;
	p.pad = a->pad;
	p.cols = 0;
	p.items = 0;
	p.pps = 0;
	p.planes = (size_t)a->n * a->c_in;
	return p;
}

/* Map rows x cols of every plane, vh rows per thread, onto a grid (see struct dw_k). */
static int dw_grid(struct dw_k *p, int rows, int cols, int vh, dim3 *grid)
{
	unsigned groups = (unsigned)((rows + vh - 1) / vh);
	p->cols = cols;
	p->items = groups * (unsigned)cols;
	p->pps = (unsigned)(DW_MAX_PLANE / p->items);
	if (p->pps > p->planes)
		p->pps = (unsigned)p->planes;
	size_t gy = (p->planes + p->pps - 1) / p->pps;
	if (gy > 65535)
		return gp_error(GP_EINVAL, "depthwise convolution of %zu planes is too large", p->planes);
	size_t gx = ((size_t)p->pps * p->items + BLOCK - 1) / BLOCK;
	*grid = dim3((unsigned)gx, (unsigned)gy, 1);
	return 0;
}

/* This thread's item: plane, first row of its group, column; 0 when past the end. */
__device__ static int dw_item(const struct dw_k &p, int vh, size_t *plane, int *r0, int *col)
{
	unsigned item = blockIdx.x * BLOCK + threadIdx.x, lp = item / p.items;
	*plane = (size_t)blockIdx.y * p.pps + lp;
	if (lp >= p.pps || *plane >= p.planes)
		return 0;
	unsigned rem = item - lp * p.items;
	*r0 = (int)(rem / (unsigned)p.cols) * vh;
	*col = (int)(rem % (unsigned)p.cols);
	return 1;
}

/* --- forward ---------------------------------------------------------------------------- */

/* VH outputs of one column: the (VH - 1) * S + K input rows they span are loaded once
 * into registers (zeros for the padding), then each output is K * K multiply-adds. */
template <int K, int S, int VH>
__global__ static void __launch_bounds__(BLOCK)
dw_fwd_kernel(struct dw_k p, const float *__restrict__ x, const float *__restrict__ w,
	      const float *__restrict__ b, float *__restrict__ y)
{
	const int R = (VH - 1) * S + K;
	size_t plane;
	int oh0, ow;
	if (!dw_item(p, VH, &plane, &oh0, &ow))
		return;
	int c = (int)(plane % (size_t)p.c);
	const float *xp = x + plane * (size_t)(p.h_in * p.w_in);
	float *yp = y + plane * (size_t)(p.h_out * p.w_out);
	float wr[K * K];
#pragma unroll
	for (int t = 0; t < K * K; t++)
		wr[t] = w[c * K * K + t];
	float bias = b ? b[c] : 0.0f;

	int ih0 = oh0 * S - p.pad, iw0 = ow * S - p.pad;
	float v[R][K];
#pragma unroll
	for (int r = 0; r < R; r++) {
		int ih = ih0 + r;
		bool rok = ih >= 0 && ih < p.h_in;
#pragma unroll
		for (int kx = 0; kx < K; kx++) {
			int iw = iw0 + kx;
			v[r][kx] = rok && iw >= 0 && iw < p.w_in ? xp[ih * p.w_in + iw] : 0.0f;
		}
	}
#pragma unroll
	for (int i = 0; i < VH; i++) {
		if (oh0 + i >= p.h_out)
			break;
		float sum = 0.0f;
#pragma unroll
		for (int ky = 0; ky < K; ky++)
#pragma unroll
			for (int kx = 0; kx < K; kx++)
				sum += v[i * S + ky][kx] * wr[ky * K + kx];
		yp[(oh0 + i) * p.w_out + ow] = sum + bias;
	}
}

/* Any k and stride: one output per thread, the window read straight from the cache. */
__global__ static void __launch_bounds__(BLOCK)
dw_fwd_generic_kernel(struct dw_k p, const float *__restrict__ x, const float *__restrict__ w,
		      const float *__restrict__ b, float *__restrict__ y)
{
	size_t plane;
	int oh, ow;
	if (!dw_item(p, 1, &plane, &oh, &ow))
		return;
	int c = (int)(plane % (size_t)p.c), k = p.k;
	const float *xp = x + plane * (size_t)(p.h_in * p.w_in);
	const float *wp = w + (size_t)c * k * k;
	float sum = 0.0f;
	for (int ky = 0; ky < k; ky++) {
		int ih = oh * p.stride - p.pad + ky;
		if (ih < 0 || ih >= p.h_in)
			continue;
		for (int kx = 0; kx < k; kx++) {
			int iw = ow * p.stride - p.pad + kx;
			if (iw >= 0 && iw < p.w_in)
				sum += xp[ih * p.w_in + iw] * wp[ky * k + kx];
		}
	}
	y[plane * (size_t)(p.h_out * p.w_out) + oh * p.w_out + ow] = sum + (b ? b[c] : 0.0f);
}

static int dw_fwd_f32(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *w,
		      const float *b, float *y)
{
	GP_TRY(dw_check(a, "forward"));
	if (!a->n)
		return 0;
	const float *bias = a->has_bias ? b : NULL;
	struct dw_k p = dw_k_from(a);
	dim3 grid;
	if (a->kh == 3) {
		GP_TRY(dw_grid(&p, a->h_out, a->w_out, DW_VH, &grid));
		if (a->stride == 1)
			dw_fwd_kernel<3, 1, DW_VH><<<grid, BLOCK, 0, s>>>(p, x, w, bias, y);
		else
			dw_fwd_kernel<3, 2, DW_VH><<<grid, BLOCK, 0, s>>>(p, x, w, bias, y);
	} else {
		GP_TRY(dw_grid(&p, a->h_out, a->w_out, 1, &grid));
		dw_fwd_generic_kernel<<<grid, BLOCK, 0, s>>>(p, x, w, bias, y);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- backward data ----------------------------------------------------------------------
 * dx[ih][iw] gathers dy[oh][ow] * w[ky][kx] over the taps with oh * S - pad + ky = ih,
 * i.e. th = ih + pad - ky divisible by S and oh = th / S in range (same for columns).
 * Each dx is written by one thread, once: no atomics, and the sum order is fixed. */
template <int K, int S, int VH>
__global__ static void __launch_bounds__(BLOCK)
dw_bwd_data_kernel(struct dw_k p, const float *__restrict__ dy, const float *__restrict__ w,
		   float *__restrict__ dx, int accumulate)
{
	/* Rows th = ih0 + pad - (K - 1) ... ih0 + VH - 1 + pad cover every tap of the VH
	 * rows; for S = 2 the odd ones stay zero. */
	const int R = VH + K - 1;
	size_t plane;
	int ih0, iw;
	if (!dw_item(p, VH, &plane, &ih0, &iw))
		return;
	int c = (int)(plane % (size_t)p.c);
	const float *gp = dy + plane * (size_t)(p.h_out * p.w_out);
	float *dxp = dx + plane * (size_t)(p.h_in * p.w_in);
	float wr[K * K];
#pragma unroll
	for (int t = 0; t < K * K; t++)
		wr[t] = w[c * K * K + t];

	int ow[K];
	bool cok[K];
#pragma unroll
	for (int kx = 0; kx < K; kx++) {
		int tw = iw + p.pad - kx;
		cok[kx] = tw >= 0 && tw % S == 0 && tw / S < p.w_out;
		ow[kx] = tw / S;
	}
	int th0 = ih0 + p.pad - (K - 1);
	float v[R][K];
#pragma unroll
	for (int r = 0; r < R; r++) {
		int th = th0 + r;
		bool rok = th >= 0 && th % S == 0 && th / S < p.h_out;
		int oh = th / S;
#pragma unroll
		for (int kx = 0; kx < K; kx++)
			v[r][kx] = rok && cok[kx] ? gp[oh * p.w_out + ow[kx]] : 0.0f;
	}
#pragma unroll
	for (int i = 0; i < VH; i++) {
		if (ih0 + i >= p.h_in)
			break;
		float sum = 0.0f;
#pragma unroll
		for (int ky = 0; ky < K; ky++)
#pragma unroll
			for (int kx = 0; kx < K; kx++)
				sum += v[i + K - 1 - ky][kx] * wr[ky * K + kx];
		int j = (ih0 + i) * p.w_in + iw;
		dxp[j] = accumulate ? dxp[j] + sum : sum;
	}
}

__global__ static void __launch_bounds__(BLOCK)
dw_bwd_data_generic_kernel(struct dw_k p, const float *__restrict__ dy, const float *__restrict__ w,
			   float *__restrict__ dx, int accumulate)
{
	size_t plane;
	int ih, iw;
	if (!dw_item(p, 1, &plane, &ih, &iw))
		return;
	int c = (int)(plane % (size_t)p.c), k = p.k, s = p.stride;
	const float *gp = dy + plane * (size_t)(p.h_out * p.w_out);
	const float *wp = w + (size_t)c * k * k;
	float sum = 0.0f;
	for (int ky = 0; ky < k; ky++) {
		int th = ih + p.pad - ky;
		if (th < 0 || th % s || th / s >= p.h_out)
			continue;
		for (int kx = 0; kx < k; kx++) {
			int tw = iw + p.pad - kx;
			if (tw < 0 || tw % s || tw / s >= p.w_out)
				continue;
			sum += gp[th / s * p.w_out + tw / s] * wp[ky * k + kx];
		}
	}
	size_t j = plane * (size_t)(p.h_in * p.w_in) + ih * p.w_in + iw;
	dx[j] = accumulate ? dx[j] + sum : sum;
}

static int dw_bwd_data_f32(cudaStream_t s, const struct conv2d_args *a, const float *dy, const float *w,
			   float *dx, int accumulate)
{
	GP_TRY(dw_check(a, "backward data"));
	if (!a->n)
		return 0;
	struct dw_k p = dw_k_from(a);
	dim3 grid;
	if (a->kh == 3) {
		GP_TRY(dw_grid(&p, a->h_in, a->w_in, DW_VH, &grid));
		if (a->stride == 1)
			dw_bwd_data_kernel<3, 1, DW_VH><<<grid, BLOCK, 0, s>>>(p, dy, w, dx, accumulate);
		else
			dw_bwd_data_kernel<3, 2, DW_VH><<<grid, BLOCK, 0, s>>>(p, dy, w, dx, accumulate);
	} else {
		GP_TRY(dw_grid(&p, a->h_in, a->w_in, 1, &grid));
		dw_bwd_data_generic_kernel<<<grid, BLOCK, 0, s>>>(p, dy, w, dx, accumulate);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- backward filter --------------------------------------------------------------------
 * Pass 1: block (channel, slice of the batch) sums all k * k taps and the bias of its
 * slice, each thread in registers over the items it visits, then across the block in
 * a fixed order, into scratch[channel][slice][tap]. Pass 2: one thread per (channel,
 * tap) adds the slices in order, in double. The split depends only on the shape, so
 * the result is the same bits on every run. */

/* Batch slices of the weight gradient (see DW_TARGET_BLOCKS, DW_MIN_OUTPUTS). */
static int dw_slices(const struct conv2d_args *a)
{
	int64_t want = (DW_TARGET_BLOCKS + a->c_in - 1) / a->c_in;
	int64_t most = (int64_t)a->n * a->h_out * a->w_out / DW_MIN_OUTPUTS;
	if (want > a->n)
		want = a->n;
	if (want > most)
		want = most;
	return want < 1 ? 1 : (int)want;
}

static size_t dw_scratch_floats(const struct conv2d_args *a)
{
	if (!dw_supported(a))
		return 0;
	return (size_t)a->c_in * dw_slices(a) * (a->kh * a->kw + 1);
}

/* Sum NV values over the block (butterflies in each warp, then the warps in order), in
 * double: a channel's gradient often nearly cancels, and the extra shuffles cost
 * nothing next to the stream. Thread t < NV writes the t-th total to out[t]. Every
 * thread must call it. */
template <int NV>
__device__ static void dw_block_sum(const float (&v)[NV], float *out)
{
	__shared__ double part[NV][BLOCK / 32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
	for (int t = 0; t < NV; t++) {
		double s = v[t];
		for (int off = 16; off > 0; off >>= 1)
			s += __shfl_xor_sync(FULL_MASK, s, off);
		if (lane == 0)
			part[t][warp] = s;
	}
	__syncthreads();
	if (threadIdx.x < NV) {
		double s = 0.0;
		for (int i = 0; i < BLOCK / 32; i++)
			s += part[threadIdx.x][i];
		out[threadIdx.x] = (float)s;
	}
	__syncthreads(); /* part may be reused by the next call */
}

/* The items of one slice, walked BLOCK at a time: item = (image ni, index j in the
 * plane). Stepping by BLOCK adds qn images and qj items, so the loop needs no 64-bit
 * division however large the slice, and small planes keep every thread busy. */
struct dw_walk {
	int ni, n1, qn;
	unsigned j, qj, items;
};

__device__ static struct dw_walk dw_walk_start(const struct dw_k &p, int n, int slices)
{
	struct dw_walk it;
	int sl = blockIdx.y;
	int n0 = (int)((int64_t)sl * n / slices);
	it.n1 = (int)((int64_t)(sl + 1) * n / slices);
	it.items = p.items;
	it.qn = (int)(BLOCK / p.items);
	it.qj = BLOCK % p.items;
	it.ni = n0 + (int)(threadIdx.x / p.items);
	it.j = threadIdx.x % p.items;
	return it;
}

__device__ static void dw_walk_next(struct dw_walk *it)
{
	it->ni += it->qn;
	it->j += it->qj;
	if (it->j >= it->items) {
		it->j -= it->items;
		it->ni++;
	}
}

template <int K, int S, int VH>
__global__ static void __launch_bounds__(BLOCK)
dw_filter_part_kernel(struct dw_k p, int n, int slices, const float *__restrict__ x,
		      const float *__restrict__ dy, float *__restrict__ part)
{
	const int R = (VH - 1) * S + K;
	int c = blockIdx.x;
	float acc[K * K + 1];
#pragma unroll
	for (int t = 0; t <= K * K; t++)
		acc[t] = 0.0f;
	for (struct dw_walk it = dw_walk_start(p, n, slices); it.ni < it.n1; dw_walk_next(&it)) {
		int oh0 = (int)(it.j / (unsigned)p.cols) * VH, ow = (int)(it.j % (unsigned)p.cols);
		size_t plane = (size_t)it.ni * p.c + c;
		const float *xp = x + plane * (size_t)(p.h_in * p.w_in);
		const float *gp = dy + plane * (size_t)(p.h_out * p.w_out);
		float g[VH];
#pragma unroll
		for (int i = 0; i < VH; i++)
			g[i] = oh0 + i < p.h_out ? gp[(oh0 + i) * p.w_out + ow] : 0.0f;
		int ih0 = oh0 * S - p.pad, iw0 = ow * S - p.pad;
		float v[R][K];
#pragma unroll
		for (int r = 0; r < R; r++) {
			int ih = ih0 + r;
			bool rok = ih >= 0 && ih < p.h_in;
#pragma unroll
			for (int kx = 0; kx < K; kx++) {
				int iw = iw0 + kx;
				v[r][kx] = rok && iw >= 0 && iw < p.w_in ? xp[ih * p.w_in + iw] : 0.0f;
			}
		}
#pragma unroll
		for (int i = 0; i < VH; i++) {
#pragma unroll
			for (int ky = 0; ky < K; ky++)
#pragma unroll
				for (int kx = 0; kx < K; kx++)
					acc[ky * K + kx] += g[i] * v[i * S + ky][kx];
			acc[K * K] += g[i];
		}
	}
	dw_block_sum<K * K + 1>(acc, part + ((size_t)c * slices + blockIdx.y) * (K * K + 1));
}

/* Any k: the taps one after another (x and dy come from the cache after the first),
 * one output per item. */
__global__ static void __launch_bounds__(BLOCK)
dw_filter_part_generic_kernel(struct dw_k p, int n, int slices, const float *__restrict__ x,
			      const float *__restrict__ dy, float *__restrict__ part)
{
	int c = blockIdx.x, k = p.k, kk = k * k;
	float *out = part + ((size_t)c * slices + blockIdx.y) * (kk + 1);
	for (int t = 0; t <= kk; t++) {
		int ky = t / k, kx = t % k;
		float acc[1] = { 0.0f };
		for (struct dw_walk it = dw_walk_start(p, n, slices); it.ni < it.n1; dw_walk_next(&it)) {
			int oh = (int)(it.j / (unsigned)p.cols), ow = (int)(it.j % (unsigned)p.cols);
			size_t plane = (size_t)it.ni * p.c + c;
			float g = dy[plane * (size_t)(p.h_out * p.w_out) + oh * p.w_out + ow];
			if (t == kk) {
				acc[0] += g;
				continue;
			}
			int ih = oh * p.stride - p.pad + ky, iw = ow * p.stride - p.pad + kx;
			if (ih >= 0 && ih < p.h_in && iw >= 0 && iw < p.w_in)
				acc[0] += g * x[plane * (size_t)(p.h_in * p.w_in) + ih * p.w_in + iw];
		}
		dw_block_sum<1>(acc, out + t);
	}
}

__global__ static void dw_filter_sum_kernel(int c, int kk, int slices, const float *__restrict__ part,
					    float *__restrict__ dw, float *__restrict__ db)
{
	int i = blockIdx.x * BLOCK + threadIdx.x;
	if (i >= c * (kk + 1))
		return;
	int ch = i / (kk + 1), t = i % (kk + 1);
	const float *q = part + (size_t)ch * slices * (kk + 1) + t;
	double sum = 0.0;
	for (int sl = 0; sl < slices; sl++)
		sum += q[(size_t)sl * (kk + 1)];
	if (t < kk)
		dw[(size_t)ch * kk + t] = (float)sum;
	else if (db)
		db[ch] = (float)sum;
}

static int dw_filter_f32(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *dy,
			 float *dw, float *db, float *scratch)
{
	GP_TRY(dw_check(a, "backward filter"));
	int c = a->c_in, kk = a->kh * a->kw;
	if (!a->n) {
		/* A sum over no images. */
		CUDA_TRY(cudaMemsetAsync(dw, 0, (size_t)c * kk * sizeof(float), s));
		if (db)
			CUDA_TRY(cudaMemsetAsync(db, 0, (size_t)c * sizeof(float), s));
		return 0;
	}
	if (!scratch)
		return gp_error(GP_EINVAL, "depthwise backward filter needs %zu floats of scratch",
				dw_scratch_floats(a));
	int slices = dw_slices(a);
	struct dw_k p = dw_k_from(a);
	dim3 grid((unsigned)c, (unsigned)slices, 1);
	if (a->kh == 3) {
		p.cols = a->w_out;
		p.items = (unsigned)((a->h_out + DW_VH - 1) / DW_VH * a->w_out);
		if (a->stride == 1)
			dw_filter_part_kernel<3, 1, DW_VH><<<grid, BLOCK, 0, s>>>(p, a->n, slices, x, dy,
										   scratch);
		else
			dw_filter_part_kernel<3, 2, DW_VH><<<grid, BLOCK, 0, s>>>(p, a->n, slices, x, dy,
										   scratch);
	} else {
		p.cols = a->w_out;
		p.items = (unsigned)(a->h_out * a->w_out);
		dw_filter_part_generic_kernel<<<grid, BLOCK, 0, s>>>(p, a->n, slices, x, dy, scratch);
	}
	CUDA_CHECK_LAUNCH();
	unsigned blocks = (unsigned)((c * (kk + 1) + BLOCK - 1) / BLOCK);
	dw_filter_sum_kernel<<<blocks, BLOCK, 0, s>>>(c, kk, slices, scratch, dw, db);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* === 16-bit, NHWC ===========================================================================
 * Depthwise convolution kernels (groups == c_in == c_out) for 16-bit activations in NHWC:
 * forward, the input gradient (a gather, so no atomics) and the weight gradient (a
 * two-pass, fixed-order reduction), for fp16 and bf16 from one templated source. Values
 * are widened to float, accumulated in float and rounded to the 16-bit type once. The 3x3
 * case of MobileNetV2 is templated on the stride; any other odd k up to 7 takes a generic
 * path with the sizes read at run time.
 *
 * The kernels are memory-bound, so the layout is chosen to read x and dy about once
 * from DRAM:
 * - channels are contiguous in NHWC, so adjacent threads take adjacent channel vectors
 *   (V = 8 channels, one 16-byte access, V = 4, 8 bytes, or V = 2, 4 bytes; V = 1 when c
 *   or an array's alignment allows none) and then adjacent columns: every warp-wide
 *   load is whole cache lines;
 * - each forward / backward-data thread of a 3x3 kernel owns DWH_VH consecutive rows of
 *   one column and walks the input rows they share once, adding each loaded vector to
 *   every output it touches (the neighbouring columns come from L1);
 * - a thread's weights are V * k * k consecutive elements of [c][k][k]: k * k vector
 *   loads, widened once into registers.
 * Indices into whole tensors are size_t (batches of thousands of images); offsets inside
 * one image are int (dwh_supported limits an image to 2^31 - 1 elements). */

/* Rows per thread in the 3x3 forward and backward-data kernels, by channels per thread:
 * with 8 channels a thread already holds 72 weights and 8 * rows accumulators. */
#define DWH_VH(V) ((V) == 8 ? 2 : 4)
/* Weight gradient: (channel group, slice) blocks wanted, ~8 per SM on a 132-SM H100 ... */
#define DWH_TARGET_BLOCKS 1024
/* ... but a slice keeps at least this many output pixels, so that the scratch round trip
 * ((k * k + 1) floats per channel and slice) stays well below the data streamed. */
#define DWH_MIN_PIXELS 64
/* Channel vectors one weight-gradient block covers at most (one warp's worth). */
#define DWH_MAX_CVG 32
#define DWH_MAX_IMAGE INT32_MAX

static int bad_dtype(enum gp_dtype ht)
{
	return gp_error(GP_EINVAL, "depthwise convolution takes f32, f16 or bf16, not %s",
			dtype_name(ht));
}

/* Instantiate a templated host launcher for the 16-bit type ht names. */
#define DISPATCH_H(ht, fn, ...)                                                        \
	((ht) == GP_F16    ? fn<__half>(__VA_ARGS__)                                  \
	 : (ht) == GP_BF16 ? fn<__nv_bfloat16>(__VA_ARGS__)                           \
			   : bad_dtype(ht))

/* --- element access ----------------------------------------------------------------------
 * Reading widens exactly, writing rounds to nearest even. */
__device__ static inline float to_f(__half v) { return __half2float(v); }
__device__ static inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ static inline void put_f(__half *p, float v) { *p = __float2half_rn(v); }
__device__ static inline void put_f(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* V consecutive elements as one aligned access (16 bytes for V = 8, 4 for V = 2). */
template <typename T, int V> struct alignas(sizeof(T) * V) hvec {
	T v[V];
};

template <int V, typename T> __device__ static inline void ldv(const T *p, float *out)
{
	hvec<T, V> r = *reinterpret_cast<const hvec<T, V> *>(p);
#pragma unroll
	for (int e = 0; e < V; e++)
		out[e] = to_f(r.v[e]);
}

template <int V, typename T> __device__ static inline void stv(T *p, const float *in)
{
	hvec<T, V> r;
#pragma unroll
	for (int e = 0; e < V; e++)
		put_f(&r.v[e], in[e]);
	*reinterpret_cast<hvec<T, V> *>(p) = r;
}

/* The KK taps of channels ch0 .. ch0 + V - 1: wb = w + ch0 * KK holds them as V * KK
 * consecutive elements, channel-major, read as KK aligned V-vectors. */
template <typename T, int V, int KK>
__device__ static inline void load_w(const T *__restrict__ wb, float (&wr)[KK][V])
{
#pragma unroll
	for (int j = 0; j < KK; j++) {
		hvec<T, V> r = reinterpret_cast<const hvec<T, V> *>(wb)[j];
#pragma unroll
		for (int e = 0; e < V; e++) {
			const int m = j * V + e;
			wr[m % KK][m / KK] = to_f(r.v[e]);
		}
	}
}

static int aligned(const void *p, size_t bytes)
{
	return (uintptr_t)p % bytes == 0;
}

/* Channels per thread by direction, measured on the H100 (mobilenet_v2 bf16, batch 256,
 * docs/log/perf-log.md): forward and backward data run faster at 4 (8-byte accesses, ~75
 * registers, 3 blocks per SM) than at 8 (~110 registers, 2 blocks), the weight gradient
 * at 8. The tests cap all three in turn (dwconv_set_widths) to check every width. */
enum { DWH_FWD, DWH_BWD_DATA, DWH_FILTER };
static int width_cap, rows_v4 = -1; /* 0 / -1: the measured defaults */

/* A width cap (0: the defaults) and a row count (-1: the defaults) from what was asked. */
static int width_of(int v)
{
	return v <= 0 ? 0 : v >= 8 ? 8 : v >= 4 ? 4 : v >= 2 ? 2 : 1;
}

static int rows_of(int vh)
{
	return vh == 2 || vh == 4 ? vh : -1;
}

extern "C" void dwconv_set_widths(int v, int vh)
{
	width_cap = width_of(v);
	rows_v4 = rows_of(vh);
}

static int dwh_vcap(int dir)
{
	if (width_cap)
		return width_cap;
	return dir == DWH_FILTER ? 8 : 4;
}

/* Rows per thread in the 3x3 forward and backward-data kernels at V = 4, measured as for
 * the widths: 4 forward, 2 backward data (dwconv_set_widths sets both). */
static int dwh_vh4(int dir)
{
	if (rows_v4 > 0)
		return rows_v4;
	return dir == DWH_FWD ? 4 : 2;
}

/* Channels per thread: 8, 4 or 2 when c is a multiple and every 16-bit array is aligned to
 * the vector (NULL counts as aligned), else 1; at most the direction's cap. */
static int pick_v(int dir, int c, const void *p0, const void *p1, const void *p2)
{
	int cap = dwh_vcap(dir);
	if (cap >= 8 && c % 8 == 0 && aligned(p0, 16) && aligned(p1, 16) && aligned(p2, 16))
		return 8;
	if (cap >= 4 && c % 4 == 0 && aligned(p0, 8) && aligned(p1, 8) && aligned(p2, 8))
		return 4;
	if (cap >= 2 && c % 2 == 0 && aligned(p0, 4) && aligned(p1, 4) && aligned(p2, 4))
		return 2;
	return 1;
}

/* --- shapes ------------------------------------------------------------------------------ */

static int dwh_supported(const struct conv2d_args *a)
{
	if (!dw_supported(a))
		return 0;
	if ((int64_t)a->h_in * a->w_in * a->c_in > DWH_MAX_IMAGE ||
	    (int64_t)a->h_out * a->w_out * a->c_in > DWH_MAX_IMAGE)
		return 0;
	return 1;
}

static int dwh_check(const struct conv2d_args *a, const char *what)
{
	if (dwh_supported(a))
		return 0;
	return gp_error(GP_EINVAL,
			"16-bit depthwise %s: unsupported convolution (n %d, %d->%d channels, groups %d, "
			"%dx%d kernel, stride %d, pad %d, %dx%d -> %dx%d)",
			what, a->n, a->c_in, a->c_out, a->groups, a->kh, a->kw, a->stride, a->pad,
			a->h_in, a->w_in, a->h_out, a->w_out);
}

/* Sizes a forward / backward-data kernel needs, and how its threads map onto images: a
 * thread is one (image, row group, column, channel vector) item, the channel vector
 * fastest; blockIdx.y picks a run of `ipr` images and the item index inside that run
 * stays below 2^31 + BLOCK, so unsigned 32-bit division locates it. */
struct dwh_k {
	int n, c, h_in, w_in, h_out, w_out, k, stride, pad;
	unsigned cols;  /* columns of the written tensor (w_out forward, w_in backward) */
	unsigned cv;    /* channel vectors per pixel: c / V */
	unsigned items; /* threads per image: row groups * cols * cv */
	unsigned ipr;   /* images per grid row */
	size_t img_in, img_out; /* elements of one image of x / dx and of y / dy */
	int clip6;      /* forward: the input is min(x, 6) (a ReLU6 folded into its reader) */
	const void *mask; /* backward data: dx *= (mask < 6), mask laid out as dx (or NULL) */
};

static struct dwh_k dwh_k_from(const struct conv2d_args *a)
{
	struct dwh_k p;
	p.n = a->n;
	p.c = a->c_in;
	p.h_in = a->h_in;
	p.w_in = a->w_in;
	p.h_out = a->h_out;
	p.w_out = a->w_out;
	p.k = a->kh;
	p.stride = a->stride;
	p.pad = a->pad;
	p.cols = 0;
	p.cv = 0;
	p.items = 0;
	p.ipr = 0;
	p.img_in = (size_t)a->h_in * a->w_in * a->c_in;
	p.img_out = (size_t)a->h_out * a->w_out * a->c_in;
	p.clip6 = 0;
	p.mask = NULL;
	return p;
}

/* The folded ReLU6's clip on loaded input values (its other half, max(., 0), is the
 * batch norm's fused ReLU before it). */
template <int V> __device__ static inline void clip6v(float *v)
{
#pragma unroll
	for (int e = 0; e < V; e++)
		v[e] = fminf(v[e], 6.0f);
}

/* Its backward: a gradient flows only where the ReLU6 input stayed under 6. */
template <typename T, int V> __device__ static inline void mask6v(const T *m, float *g)
{
	float mv[V];
	ldv<V>(m, mv);
#pragma unroll
	for (int e = 0; e < V; e++)
		g[e] = mv[e] < 6.0f ? g[e] : 0.0f;
}

/* Map rows x cols x (c / v) of every image, vh rows per thread, onto a grid (n >= 1). */
static int dwh_grid(struct dwh_k *p, int rows, int cols, int vh, int v, dim3 *grid)
{
	uint64_t groups = (uint64_t)((rows + vh - 1) / vh);
	uint64_t items = groups * (uint64_t)cols * (uint64_t)(p->c / v); /* <= 2^31 - 1 */
	p->cols = (unsigned)cols;
	p->cv = (unsigned)(p->c / v);
	p->items = (unsigned)items;
	uint64_t ipr = ((uint64_t)1 << 31) / items;
	if (ipr > (uint64_t)p->n)
		ipr = (uint64_t)p->n;
	p->ipr = (unsigned)ipr;
	uint64_t gy = ((uint64_t)p->n + ipr - 1) / ipr;
	if (gy > 65535)
		return gp_error(GP_EINVAL, "16-bit depthwise convolution of %d images is too large", p->n);
	uint64_t gx = (ipr * items + BLOCK - 1) / BLOCK;
	*grid = dim3((unsigned)gx, (unsigned)gy, 1);
	return 0;
}

/* This thread's item: image, first row of its group, column, first channel; 0 when past
 * the end. */
template <int V>
__device__ static inline int dwh_item(const struct dwh_k &p, int vh, size_t *ni, int *r0, int *col,
				      int *ch0)
{
	unsigned item = blockIdx.x * BLOCK + threadIdx.x, li = item / p.items;
	if (li >= p.ipr)
		return 0;
	*ni = (size_t)blockIdx.y * p.ipr + li;
	if (*ni >= (size_t)p.n)
		return 0;
	unsigned u = item - li * p.items, rest = u / p.cv;
	*ch0 = (int)(u - rest * p.cv) * V;
	unsigned g = rest / p.cols;
	*col = (int)(rest - g * p.cols);
	*r0 = (int)g * vh;
	return 1;
}

/* --- forward ---------------------------------------------------------------------------- */

/* VH outputs of one column, V channels: each of the (VH - 1) * S + K input rows they span
 * is read once (K vectors) and added to every output whose window holds it. */
template <typename T, int V, int K, int S, int VH>
__global__ static void __launch_bounds__(BLOCK)
dwh_fwd_kernel(struct dwh_k p, const T *__restrict__ x, const T *__restrict__ w,
	       const float *__restrict__ b, T *__restrict__ y)
{
	const int R = (VH - 1) * S + K;
	size_t ni;
	int oh0, ow, ch0;
	if (!dwh_item<V>(p, VH, &ni, &oh0, &ow, &ch0))
		return;
	float wr[K * K][V];
	load_w<T, V, K * K>(w + (size_t)ch0 * (K * K), wr);
	float acc[VH][V];
#pragma unroll
	for (int i = 0; i < VH; i++)
#pragma unroll
		for (int e = 0; e < V; e++)
			acc[i][e] = 0.0f;

	const T *xi = x + ni * p.img_in + ch0;
	int ih0 = oh0 * S - p.pad, iw0 = ow * S - p.pad;
#pragma unroll
	for (int r = 0; r < R; r++) {
		int ih = ih0 + r;
		if (ih < 0 || ih >= p.h_in)
			continue;
#pragma unroll
		for (int kx = 0; kx < K; kx++) {
			int iw = iw0 + kx;
			if (iw < 0 || iw >= p.w_in)
				continue;
			float xv[V];
			ldv<V>(xi + (ih * p.w_in + iw) * p.c, xv);
			if (p.clip6)
				clip6v<V>(xv);
#pragma unroll
			for (int i = 0; i < VH; i++) {
				const int ky = r - i * S;
				if (ky >= 0 && ky < K) {
#pragma unroll
					for (int e = 0; e < V; e++)
						acc[i][e] += xv[e] * wr[ky * K + kx][e];
				}
			}
		}
	}
	float bv[V];
#pragma unroll
	for (int e = 0; e < V; e++)
		bv[e] = b ? b[ch0 + e] : 0.0f;
	T *yi = y + ni * p.img_out + ch0;
#pragma unroll
	for (int i = 0; i < VH; i++) {
		if (oh0 + i >= p.h_out)
			break;
		float out[V];
#pragma unroll
		for (int e = 0; e < V; e++)
			out[e] = acc[i][e] + bv[e];
		stv<V>(yi + ((oh0 + i) * p.w_out + ow) * p.c, out);
	}
}

/* Any k and stride: one output pixel (V channels) per thread, the window read from the
 * cache, the weights of each tap read one by one. */
template <typename T, int V>
__global__ static void __launch_bounds__(BLOCK)
dwh_fwd_generic_kernel(struct dwh_k p, const T *__restrict__ x, const T *__restrict__ w,
		       const float *__restrict__ b, T *__restrict__ y)
{
	size_t ni;
	int oh, ow, ch0;
	if (!dwh_item<V>(p, 1, &ni, &oh, &ow, &ch0))
		return;
	int k = p.k, kk = k * k;
	const T *xi = x + ni * p.img_in + ch0;
	const T *wp = w + (size_t)ch0 * kk;
	float acc[V];
#pragma unroll
	for (int e = 0; e < V; e++)
		acc[e] = 0.0f;
	for (int ky = 0; ky < k; ky++) {
		int ih = oh * p.stride - p.pad + ky;
		if (ih < 0 || ih >= p.h_in)
			continue;
		for (int kx = 0; kx < k; kx++) {
			int iw = ow * p.stride - p.pad + kx;
			if (iw < 0 || iw >= p.w_in)
				continue;
			float xv[V];
			ldv<V>(xi + (ih * p.w_in + iw) * p.c, xv);
			if (p.clip6)
				clip6v<V>(xv);
#pragma unroll
			for (int e = 0; e < V; e++)
				acc[e] += xv[e] * to_f(wp[e * kk + ky * k + kx]);
		}
	}
#pragma unroll
	for (int e = 0; e < V; e++)
		acc[e] += b ? b[ch0 + e] : 0.0f;
	stv<V>(y + ni * p.img_out + (oh * p.w_out + ow) * p.c + ch0, acc);
}

template <typename T, int V, int VH>
static int dwh_fwd3(cudaStream_t s, const struct conv2d_args *a, struct dwh_k p, const T *x, const T *w,
		    const float *b, T *y)
{
	dim3 grid;
	GP_TRY(dwh_grid(&p, a->h_out, a->w_out, VH, V, &grid));
	if (a->stride == 1)
		dwh_fwd_kernel<T, V, 3, 1, VH><<<grid, BLOCK, 0, s>>>(p, x, w, b, y);
	else
		dwh_fwd_kernel<T, V, 3, 2, VH><<<grid, BLOCK, 0, s>>>(p, x, w, b, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T, int V>
static int dwh_fwd_v(cudaStream_t s, const struct conv2d_args *a, const T *x, const T *w,
		     const float *b, T *y, int clip6)
{
	struct dwh_k p = dwh_k_from(a);
	p.clip6 = clip6;
	dim3 grid;
	if (a->kh == 3) {
		if (V == 4 && dwh_vh4(DWH_FWD) == 2)
			return dwh_fwd3<T, V, 2>(s, a, p, x, w, b, y);
		return dwh_fwd3<T, V, DWH_VH(V)>(s, a, p, x, w, b, y);
	} else {
		GP_TRY(dwh_grid(&p, a->h_out, a->w_out, 1, V, &grid));
		dwh_fwd_generic_kernel<T, V><<<grid, BLOCK, 0, s>>>(p, x, w, b, y);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int dwh_fwd(cudaStream_t s, const struct conv2d_args *a, const void *x, const void *w,
		   const float *b, void *y, int clip6)
{
	const T *xt = (const T *)x, *wt = (const T *)w;
	T *yt = (T *)y;
	switch (pick_v(DWH_FWD, a->c_in, x, w, y)) {
	case 8:
		return dwh_fwd_v<T, 8>(s, a, xt, wt, b, yt, clip6);
	case 4:
		return dwh_fwd_v<T, 4>(s, a, xt, wt, b, yt, clip6);
	case 2:
		return dwh_fwd_v<T, 2>(s, a, xt, wt, b, yt, clip6);
	default:
		return dwh_fwd_v<T, 1>(s, a, xt, wt, b, yt, clip6);
	}
}

static int dwh_fwd_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
		       const void *w, const float *b, void *y, int clip6)
{
	GP_TRY(dwh_check(a, "forward"));
	if (ht != GP_F16 && ht != GP_BF16)
		return bad_dtype(ht);
	if (!a->n)
		return 0;
	const float *bias = a->has_bias ? b : NULL;
	return DISPATCH_H(ht, dwh_fwd, s, a, x, w, bias, y, clip6);
}

/* --- backward data ----------------------------------------------------------------------
 * dx[ih][iw] gathers dy[oh][ow] * w[ky][kx] over the taps with oh * S - pad + ky = ih,
 * i.e. th = ih + pad - ky divisible by S and oh = th / S in range (same for columns).
 * Each dx vector is written by one thread, once: no atomics, and the sum order is fixed. */
template <typename T, int V, int K, int S, int VH>
__global__ static void __launch_bounds__(BLOCK)
dwh_bwd_data_kernel(struct dwh_k p, const T *__restrict__ dy, const T *__restrict__ w,
		    T *__restrict__ dx, int accumulate)
{
	/* Rows th = ih0 + pad - (K - 1) ... ih0 + VH - 1 + pad cover every tap of the VH
	 * rows; for S = 2 every other one is skipped. */
	const int R = VH + K - 1;
	size_t ni;
	int ih0, iw, ch0;
	if (!dwh_item<V>(p, VH, &ni, &ih0, &iw, &ch0))
		return;
	float wr[K * K][V];
	load_w<T, V, K * K>(w + (size_t)ch0 * (K * K), wr);
	float acc[VH][V];
#pragma unroll
	for (int i = 0; i < VH; i++)
#pragma unroll
		for (int e = 0; e < V; e++)
			acc[i][e] = 0.0f;

	int owk[K];
	bool cok[K];
#pragma unroll
	for (int kx = 0; kx < K; kx++) {
		int tw = iw + p.pad - kx;
		cok[kx] = tw >= 0 && tw % S == 0 && tw / S < p.w_out;
		owk[kx] = tw / S;
	}
	const T *gi = dy + ni * p.img_out + ch0;
	int th0 = ih0 + p.pad - (K - 1);
#pragma unroll
	for (int r = 0; r < R; r++) {
		int th = th0 + r;
		if (th < 0 || th % S != 0 || th / S >= p.h_out)
			continue;
		int oh = th / S;
#pragma unroll
		for (int kx = 0; kx < K; kx++) {
			if (!cok[kx])
				continue;
			float g[V];
			ldv<V>(gi + (oh * p.w_out + owk[kx]) * p.c, g);
#pragma unroll
			for (int i = 0; i < VH; i++) {
				const int ky = i + K - 1 - r;
				if (ky >= 0 && ky < K) {
#pragma unroll
					for (int e = 0; e < V; e++)
						acc[i][e] += g[e] * wr[ky * K + kx][e];
				}
			}
		}
	}
	T *dxi = dx + ni * p.img_in + ch0;
#pragma unroll
	for (int i = 0; i < VH; i++) {
		if (ih0 + i >= p.h_in)
			break;
		T *q = dxi + ((ih0 + i) * p.w_in + iw) * p.c;
		if (p.mask)
			mask6v<T, V>((const T *)p.mask + (q - dx), acc[i]);
		if (accumulate) {
			float old[V];
			ldv<V>(q, old);
#pragma unroll
			for (int e = 0; e < V; e++)
				acc[i][e] += old[e];
		}
		stv<V>(q, acc[i]);
	}
}

template <typename T, int V>
__global__ static void __launch_bounds__(BLOCK)
dwh_bwd_data_generic_kernel(struct dwh_k p, const T *__restrict__ dy, const T *__restrict__ w,
			    T *__restrict__ dx, int accumulate)
{
	size_t ni;
	int ih, iw, ch0;
	if (!dwh_item<V>(p, 1, &ni, &ih, &iw, &ch0))
		return;
	int k = p.k, kk = k * k, s = p.stride;
	const T *gi = dy + ni * p.img_out + ch0;
	const T *wp = w + (size_t)ch0 * kk;
	float acc[V];
#pragma unroll
	for (int e = 0; e < V; e++)
		acc[e] = 0.0f;
	for (int ky = 0; ky < k; ky++) {
		int th = ih + p.pad - ky;
		if (th < 0 || th % s || th / s >= p.h_out)
			continue;
		for (int kx = 0; kx < k; kx++) {
			int tw = iw + p.pad - kx;
			if (tw < 0 || tw % s || tw / s >= p.w_out)
				continue;
			float g[V];
			ldv<V>(gi + (th / s * p.w_out + tw / s) * p.c, g);
#pragma unroll
			for (int e = 0; e < V; e++)
				acc[e] += g[e] * to_f(wp[e * kk + ky * k + kx]);
		}
	}
	T *q = dx + ni * p.img_in + (ih * p.w_in + iw) * p.c + ch0;
	if (p.mask)
		mask6v<T, V>((const T *)p.mask + (q - dx), acc);
	if (accumulate) {
		float old[V];
		ldv<V>(q, old);
#pragma unroll
		for (int e = 0; e < V; e++)
			acc[e] += old[e];
	}
	stv<V>(q, acc);
}

template <typename T, int V, int VH>
static int dwh_bwd_data3(cudaStream_t s, const struct conv2d_args *a, struct dwh_k p, const T *dy,
			 const T *w, T *dx, int accumulate)
{
	dim3 grid;
	GP_TRY(dwh_grid(&p, a->h_in, a->w_in, VH, V, &grid));
	if (a->stride == 1)
		dwh_bwd_data_kernel<T, V, 3, 1, VH><<<grid, BLOCK, 0, s>>>(p, dy, w, dx, accumulate);
	else
		dwh_bwd_data_kernel<T, V, 3, 2, VH><<<grid, BLOCK, 0, s>>>(p, dy, w, dx, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T, int V>
static int dwh_bwd_data_v(cudaStream_t s, const struct conv2d_args *a, const T *dy, const T *w,
			  T *dx, int accumulate, const void *mask)
{
	struct dwh_k p = dwh_k_from(a);
	p.mask = mask;
	dim3 grid;
	if (a->kh == 3) {
		if (V == 4 && dwh_vh4(DWH_BWD_DATA) == 2)
			return dwh_bwd_data3<T, V, 2>(s, a, p, dy, w, dx, accumulate);
		return dwh_bwd_data3<T, V, DWH_VH(V)>(s, a, p, dy, w, dx, accumulate);
	} else {
		GP_TRY(dwh_grid(&p, a->h_in, a->w_in, 1, V, &grid));
		dwh_bwd_data_generic_kernel<T, V><<<grid, BLOCK, 0, s>>>(p, dy, w, dx, accumulate);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int dwh_bwd_data(cudaStream_t s, const struct conv2d_args *a, const void *dy, const void *w,
			void *dx, int accumulate, const void *mask)
{
	const T *dyt = (const T *)dy, *wt = (const T *)w;
	T *dxt = (T *)dx;
	int v = pick_v(DWH_BWD_DATA, a->c_in, dy, w, dx), vm = mask ? pick_v(DWH_BWD_DATA, a->c_in, mask, NULL, NULL) : 8;
	switch (v < vm ? v : vm) {
	case 8:
		return dwh_bwd_data_v<T, 8>(s, a, dyt, wt, dxt, accumulate, mask);
	case 4:
		return dwh_bwd_data_v<T, 4>(s, a, dyt, wt, dxt, accumulate, mask);
	case 2:
		return dwh_bwd_data_v<T, 2>(s, a, dyt, wt, dxt, accumulate, mask);
	default:
		return dwh_bwd_data_v<T, 1>(s, a, dyt, wt, dxt, accumulate, mask);
	}
}

static int dwh_bwd_data_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *dy,
			    const void *w, void *dx, int accumulate, const void *mask)
{
	GP_TRY(dwh_check(a, "backward data"));
	if (ht != GP_F16 && ht != GP_BF16)
		return bad_dtype(ht);
	if (!a->n)
		return 0;
	return DISPATCH_H(ht, dwh_bwd_data, s, a, dy, w, dx, accumulate, mask);
}

/* --- backward filter --------------------------------------------------------------------
 * Pass 1: block (channel group, slice of the n * h_out output rows) has cvg channel
 * vectors across and py pixel lanes down; each thread walks the slice's pixels py apart
 * and sums, in float registers, g * x for every tap and g for the bias, V channels at a
 * time. The block then adds its py lanes in a fixed order (two levels through shared
 * memory) into scratch[slice][tap][channel]. Pass 2: for each (channel, tap), 8 lanes
 * add every 8th slice in double and one adds the 8 in order. The split depends only on
 * the shape and the alignment of x and dy, so the result is the same bits on every run.
 * The 3x3 kernel computes all taps in one read of the slice; the generic one computes one
 * tap (blockIdx.z) per block. */
struct dwh_f {
	int n, c, h_in, w_in, h_out, w_out, k, stride, pad;
	int cv;           /* channel vectors in total: c / V */
	int cvg, py;      /* block: cvg channel vectors x py pixel lanes */
	int nq, qlanes;   /* shared reduction: nq chunks of qlanes lanes per column */
	int slices;
	int64_t rows;     /* n * h_out, cut into slices */
	int step_n, step_h, step_w; /* py pixels as images, rows (< h_out), columns (< w_out) */
	size_t img_in, img_out;
	int clip6; /* the input is min(x, 6) (a ReLU6 folded into its reader) */
};

/* Channel vectors per block for cv vectors in all: as even a split of cv into groups of
 * at most DWH_MAX_CVG as can be. */
static int dwh_cvg(int cv)
{
	int groups = (cv + DWH_MAX_CVG - 1) / DWH_MAX_CVG;
	return (cv + groups - 1) / groups;
}

/* Slices of the n * h_out rows: ~DWH_TARGET_BLOCKS blocks with the channel groups of the
 * widest vector c allows, at least DWH_MIN_PIXELS pixels and one row each. Depends on the
 * shape alone, so the scratch size does too. */
static int dwh_slices(const struct conv2d_args *a)
{
	int c = a->c_in, v = c % 8 == 0 ? 8 : c % 2 == 0 ? 2 : 1;
	int cv = c / v, groups = (cv + dwh_cvg(cv) - 1) / dwh_cvg(cv);
	int64_t want = (DWH_TARGET_BLOCKS + groups - 1) / groups;
	int64_t rows = (int64_t)a->n * a->h_out;
	int64_t most = rows * a->w_out / DWH_MIN_PIXELS;
	if (want > most)
		want = most;
	if (want > rows)
		want = rows;
	return want < 1 ? 1 : (int)want;
}

static size_t dwh_scratch_floats(const struct conv2d_args *a)
{
	if (!dwh_supported(a))
		return 0;
	return (size_t)a->c_in * dwh_slices(a) * (a->kh * a->kw + 1);
}

template <typename T, int V, int K, int S>
__global__ static void __launch_bounds__(BLOCK)
dwh_filter_part_kernel(struct dwh_f p, const T *__restrict__ x, const T *__restrict__ dy,
		       float *__restrict__ part)
{
	const int NT = K ? K * K + 1 : 1; /* taps summed by this block, the bias last */
	__shared__ float red[BLOCK * V];
	__shared__ float red2[BLOCK];
	int tx = (int)threadIdx.x % p.cvg, ty = (int)threadIdx.x / p.cvg;
	int cvi = (int)blockIdx.x * p.cvg + tx, ch0 = cvi * V;
	int kk = p.k * p.k, tap = K ? 0 : (int)blockIdx.z;
	float acc[NT][V];
#pragma unroll
	for (int t = 0; t < NT; t++)
#pragma unroll
		for (int e = 0; e < V; e++)
			acc[t][e] = 0.0f;

	if (cvi < p.cv) {
		int64_t q1 = (int64_t)(blockIdx.y + 1) * p.rows / p.slices;
		int64_t q = (int64_t)blockIdx.y * p.rows / p.slices + ty / p.w_out;
		int ow = ty % p.w_out;
		int ni = (int)(q / p.h_out), oh = (int)(q - (int64_t)ni * p.h_out);
		int gky = K ? 0 : tap / p.k, gkx = K ? 0 : tap % p.k;
		while (q < q1) {
			const T *xi = x + (size_t)ni * p.img_in + ch0;
			float g[V];
			ldv<V>(dy + (size_t)ni * p.img_out + (oh * p.w_out + ow) * p.c + ch0, g);
			if (K) {
#pragma unroll
				for (int ky = 0; ky < (K ? K : 1); ky++) {
					int ih = oh * S - p.pad + ky;
					if (ih < 0 || ih >= p.h_in)
						continue;
#pragma unroll
					for (int kx = 0; kx < (K ? K : 1); kx++) {
						int iw = ow * S - p.pad + kx;
						if (iw < 0 || iw >= p.w_in)
							continue;
						float xv[V];
						ldv<V>(xi + (ih * p.w_in + iw) * p.c, xv);
			if (p.clip6)
				clip6v<V>(xv);
#pragma unroll
						for (int e = 0; e < V; e++)
							acc[ky * K + kx][e] += g[e] * xv[e];
					}
				}
#pragma unroll
				for (int e = 0; e < V; e++)
					acc[NT - 1][e] += g[e];
			} else if (tap == kk) {
#pragma unroll
				for (int e = 0; e < V; e++)
					acc[0][e] += g[e];
			} else {
				int ih = oh * p.stride - p.pad + gky, iw = ow * p.stride - p.pad + gkx;
				if (ih >= 0 && ih < p.h_in && iw >= 0 && iw < p.w_in) {
					float xv[V];
					ldv<V>(xi + (ih * p.w_in + iw) * p.c, xv);
			if (p.clip6)
				clip6v<V>(xv);
#pragma unroll
					for (int e = 0; e < V; e++)
						acc[0][e] += g[e] * xv[e];
				}
			}
			/* The next pixel, py further on. */
			int carry = 0;
			ow += p.step_w;
			if (ow >= p.w_out) {
				ow -= p.w_out;
				carry = 1;
			}
			oh += p.step_h + carry;
			ni += p.step_n;
			if (oh >= p.h_out) {
				oh -= p.h_out;
				ni++;
			}
			q = (int64_t)ni * p.h_out + oh;
		}
	}

	/* Sum the py lanes of each of the cvg * V columns: lanes in nq chunks of qlanes, then
	 * the chunks, both in order. */
	const int cols = p.cvg * V;
	int j = (int)threadIdx.x % cols, cq = (int)threadIdx.x / cols;
#pragma unroll
	for (int t = 0; t < NT; t++) {
#pragma unroll
		for (int e = 0; e < V; e++)
			red[threadIdx.x * V + e] = acc[t][e];
		__syncthreads();
		if (cq < p.nq) {
			int l0 = cq * p.qlanes, l1 = min(p.py, l0 + p.qlanes);
			float s = 0.0f;
			for (int l = l0; l < l1; l++)
				s += red[l * cols + j];
			red2[cq * cols + j] = s;
		}
		__syncthreads();
		if ((int)threadIdx.x < cols) {
			float s = 0.0f;
			for (int i = 0; i < p.nq; i++)
				s += red2[i * cols + (int)threadIdx.x];
			int ch = (int)blockIdx.x * cols + (int)threadIdx.x;
			if (ch < p.c)
				part[((size_t)blockIdx.y * (kk + 1) + (K ? t : tap)) * p.c + ch] = s;
		}
	}
}

#define SUM_LANES 8

/* dw[ch][t] (t < kk) or db[ch] (t == kk) = the slices' partials added in a fixed order. */
template <typename T>
__global__ static void __launch_bounds__(32 * SUM_LANES)
dwh_filter_sum_kernel(int c, int kk, int slices, const float *__restrict__ part, T *__restrict__ dw,
		      float *__restrict__ db)
{
	__shared__ double s2[SUM_LANES][32];
	int ch = (int)blockIdx.x * 32 + (int)threadIdx.x, t = (int)blockIdx.y;
	double sum = 0.0;
	if (ch < c) {
		const float *q = part + (size_t)t * c + ch;
		size_t step = (size_t)(kk + 1) * c;
#pragma unroll 4
		for (int sl = (int)threadIdx.y; sl < slices; sl += SUM_LANES)
			sum += q[(size_t)sl * step];
	}
	s2[threadIdx.y][threadIdx.x] = sum;
	__syncthreads();
	if (threadIdx.y || ch >= c)
		return;
	double tot = 0.0;
	for (int i = 0; i < SUM_LANES; i++)
		tot += s2[i][threadIdx.x];
	if (t < kk)
		put_f(&dw[(size_t)ch * kk + t], (float)tot);
	else if (db)
		db[ch] = (float)tot;
}

template <typename T, int V>
static int dwh_filter_v(cudaStream_t s, const struct conv2d_args *a, const T *x, const T *dy,
			T *dw, float *db, float *scratch, int clip6)
{
	struct dwh_f p;
	p.clip6 = clip6;
	p.n = a->n;
	p.c = a->c_in;
	p.h_in = a->h_in;
	p.w_in = a->w_in;
	p.h_out = a->h_out;
	p.w_out = a->w_out;
	p.k = a->kh;
	p.stride = a->stride;
	p.pad = a->pad;
	p.cv = a->c_in / V;
	p.cvg = dwh_cvg(p.cv);
	p.py = BLOCK / p.cvg; /* >= 8 >= V: the shared reduction has a chunk per column */
	p.nq = p.py / V;
	p.qlanes = (p.py + p.nq - 1) / p.nq;
	p.slices = dwh_slices(a);
	p.rows = (int64_t)a->n * a->h_out;
	int step_rows = p.py / a->w_out;
	p.step_w = p.py % a->w_out;
	p.step_n = step_rows / a->h_out;
	p.step_h = step_rows % a->h_out;
	p.img_in = (size_t)a->h_in * a->w_in * a->c_in;
	p.img_out = (size_t)a->h_out * a->w_out * a->c_in;
	int kk = a->kh * a->kw, groups = (p.cv + p.cvg - 1) / p.cvg;
	unsigned threads = (unsigned)(p.cvg * p.py);
	if (a->kh == 3) {
		dim3 grid((unsigned)groups, (unsigned)p.slices, 1);
		if (a->stride == 1)
			dwh_filter_part_kernel<T, V, 3, 1><<<grid, threads, 0, s>>>(p, x, dy, scratch);
		else
			dwh_filter_part_kernel<T, V, 3, 2><<<grid, threads, 0, s>>>(p, x, dy, scratch);
	} else {
		dim3 grid((unsigned)groups, (unsigned)p.slices, (unsigned)(kk + 1));
		dwh_filter_part_kernel<T, V, 0, 0><<<grid, threads, 0, s>>>(p, x, dy, scratch);
	}
	CUDA_CHECK_LAUNCH();
	dim3 sgrid((unsigned)((a->c_in + 31) / 32), (unsigned)(kk + 1), 1);
	dwh_filter_sum_kernel<T><<<sgrid, dim3(32, SUM_LANES, 1), 0, s>>>(a->c_in, kk, p.slices, scratch,
									   dw, db);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int dwh_filter(cudaStream_t s, const struct conv2d_args *a, const void *x, const void *dy,
		      void *dw, float *db, float *scratch, int clip6)
{
	const T *xt = (const T *)x, *dyt = (const T *)dy;
	T *dwt = (T *)dw;
	switch (pick_v(DWH_FILTER, a->c_in, x, dy, NULL)) {
	case 8:
		return dwh_filter_v<T, 8>(s, a, xt, dyt, dwt, db, scratch, clip6);
	case 4:
		return dwh_filter_v<T, 4>(s, a, xt, dyt, dwt, db, scratch, clip6);
	case 2:
		return dwh_filter_v<T, 2>(s, a, xt, dyt, dwt, db, scratch, clip6);
	default:
		return dwh_filter_v<T, 1>(s, a, xt, dyt, dwt, db, scratch, clip6);
	}
}

static int dwh_filter_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
			  const void *dy, void *dw, float *db, float *scratch, int clip6);

static int dwh_filter_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
			  const void *dy, void *dw, float *db, float *scratch, int clip6)
{
	GP_TRY(dwh_check(a, "backward filter"));
	if (ht != GP_F16 && ht != GP_BF16)
		return bad_dtype(ht);
	int c = a->c_in, kk = a->kh * a->kw;
	if (!a->n) {
		/* A sum over no images: +0 is all-zero bits in both 16-bit types. */
		CUDA_TRY(cudaMemsetAsync(dw, 0, (size_t)c * kk * 2, s));
		if (db)
			CUDA_TRY(cudaMemsetAsync(db, 0, (size_t)c * sizeof(float), s));
		return 0;
	}
	if (!scratch)
		return gp_error(GP_EINVAL, "16-bit depthwise backward filter needs %zu floats of scratch",
				dwh_scratch_floats(a));
	return DISPATCH_H(ht, dwh_filter, s, a, x, dy, dw, db, scratch, clip6);
}

/* === launchers ============================================================================== */
extern "C" int dwconv_supported(enum gp_dtype dt, int nhwc, const struct conv2d_args *a)
{
	if (dt == GP_F32)
		return !nhwc && dw_supported(a);
	return (dt == GP_F16 || dt == GP_BF16) && nhwc && dwh_supported(a);
}

static int f32_no_relu6(void)
{
	return gp_error(GP_EUNSUPPORTED, "the float depthwise kernels fold no ReLU6");
}

extern "C" int dwconv_fwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
			       const void *w, const float *b, void *y, int relu6)
{
	if (dt != GP_F32)
		return dwh_fwd_any(s, dt, a, x, w, b, y, relu6);
	if (relu6)
		return f32_no_relu6();
	return dw_fwd_f32(s, a, (const float *)x, (const float *)w, b, (float *)y);
}

extern "C" int dwconv_bwd_data_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a,
				    const void *dy, const void *w, void *dx, int accumulate, int relu6,
				    const void *relu6_x)
{
	if (dt != GP_F32) {
		if (!relu6)
			return dwh_bwd_data_any(s, dt, a, dy, w, dx, accumulate, NULL);
		if (!relu6_x && a->n)
			return gp_error(GP_EINVAL, "16-bit depthwise backward data with a folded ReLU6: no input to mask with");
		return dwh_bwd_data_any(s, dt, a, dy, w, dx, accumulate, relu6_x);
	}
	if (relu6)
		return f32_no_relu6();
	return dw_bwd_data_f32(s, a, (const float *)dy, (const float *)w, (float *)dx, accumulate);
}

extern "C" size_t dwconv_bwd_filter_scratch_floats(enum gp_dtype dt, const struct conv2d_args *a)
{
	return dt == GP_F32 ? dw_scratch_floats(a) : dwh_scratch_floats(a);
}

extern "C" int dwconv_bwd_filter_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a,
				      const void *x, const void *dy, void *dw, float *db, float *scratch, int relu6)
{
	if (dt != GP_F32)
		return dwh_filter_any(s, dt, a, x, dy, dw, db, scratch, relu6);
	if (relu6)
		return f32_no_relu6();
	return dw_filter_f32(s, a, (const float *)x, (const float *)dy, (float *)dw, db, scratch);
}
