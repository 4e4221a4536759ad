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
#include "ops/cuda/dwconv.cuh"

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

int dw_supported(const struct conv2d_args *a)
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

int dw_fwd_f32(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *w,
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

int dw_bwd_data_f32(cudaStream_t s, const struct conv2d_args *a, const float *dy, const float *w,
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

size_t dw_scratch_floats(const struct conv2d_args *a)
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

int dw_filter_f32(cudaStream_t s, const struct conv2d_args *a, const float *x, const float *dy,
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
