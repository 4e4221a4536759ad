/* === 16-bit, NHWC ===========================================================================
 * Depthwise convolution kernels (groups == c_in == c_out) for 16-bit activations in NHWC:
 * forward, the input gradient (a gather, so no atomics) and the weight gradient (a
 * two-pass, fixed-order reduction), for fp16 and bf16 from one templated source. Values
 * are widened to float, accumulated in float and rounded to the 16-bit type once. The 3x3
 * case of MobileNetV2 is templated on the stride; any other odd k up to 7 takes a generic
 * path with the sizes read at run time. This file holds the forward and backward-data
 * kernels (one thread mapping, struct dwh_k) and the channel widths all three use; the
 * weight gradient, with a mapping of its own, is dwconv_nhwc_filter.cu.
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
#include "ops/cuda/dwconv.cuh"
#include "ops/cuda/dwconv_nhwc.cuh"

/* Rows per thread in the 3x3 forward and backward-data kernels, by channels per thread:
 * with 8 channels a thread already holds 72 weights and 8 * rows accumulators. */
#define DWH_VH(V) ((V) == 8 ? 2 : 4)
#define DWH_MAX_IMAGE INT32_MAX

static int aligned(const void *p, size_t bytes)
{
	return (uintptr_t)p % bytes == 0;
}

/* The widths per direction (see DWH_FWD in dwconv_nhwc.cuh) and rows per thread the tests
 * set through dwconv_set_widths. */
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
int pick_v(int dir, int c, const void *p0, const void *p1, const void *p2)
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

int dwh_supported(const struct conv2d_args *a)
{
	if (!dw_supported(a))
		return 0;
	if ((int64_t)a->h_in * a->w_in * a->c_in > DWH_MAX_IMAGE ||
	    (int64_t)a->h_out * a->w_out * a->c_in > DWH_MAX_IMAGE)
		return 0;
	return 1;
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

/* --- tiled forward and backward data (3x3, pad 1; dwconv_nhwc.cuh) ------------------------
 * A block stages its input window, then each thread computes DWT_TH / RG rows of one
 * column for 4 channels from shared memory. Forward reads x and writes y (bias, the
 * folded ReLU6 clip); backward data at stride 1 is the same correlation of dy with the
 * taps reversed (mask, accumulate); at stride 2 a thread makes 2 x 2 dx pixels at a time
 * from the 2 x 2 dy pixels they share (dwt_bwd_data2_kernel). */
static int tiled_dirs = 7; /* bit DWH_FWD, DWH_BWD_DATA, DWH_FILTER: that direction tiled */

extern "C" void dwconv_set_tiled(int dirs)
{
	tiled_dirs = dirs & 7;
}

int dwt_takes(int dir, const struct conv2d_args *a, const void *p0, const void *p1, const void *p2,
	      const void *p3)
{
	/* the written plane (dy's for the weight gradient) wider than 8: on 7 x 7 planes the
	 * row kernels measured faster in every direction (s19) */
	int wide = (dir == DWH_BWD_DATA ? a->w_in : a->w_out) > 8;
	return (tiled_dirs >> dir & 1) && wide && a->kh == 3 && a->kw == 3 && a->pad == 1 &&
	       (a->stride == 1 || a->stride == 2) && a->c_in % 8 == 0 && a->n <= 65535 &&
	       aligned(p0, 16) && aligned(p1, 16) && aligned(p2, 16) && aligned(p3, 16);
}

#define DWT_TH 8 /* output rows a forward block covers */

struct dwt_p {
	int c, in_h, in_w, out_h, out_w; /* the read tensor's rows and columns, the written's */
	int cgroups;                     /* channel groups of CB */
	size_t img_in, img_out;          /* elements of one image of the read and the written */
	int clip6;                       /* forward: min(x, 6) on load */
	const void *mask;                /* backward: dx *= (mask < 6), laid out as dx, or NULL */
	int accumulate;                  /* backward: dx += the result */
	int tpb;                         /* tiles a block takes, one below the other */
};

/* Tiles a forward block takes down the image (grid.y covers the rest): the next tile's
 * loads are in flight while the block computes one. Backward data blocks take one tile:
 * with the same prefetch they measured slower (s19). */
#define DWT_TPB_FWD 4
/* Blocks an SM must hold at once: backward data at stride 1 took 98 registers unbounded
 * (2 blocks) and measured 2.93 against 3.40 ms a step with 3 (80 registers, 16 bytes
 * spilled); the forward lost with that bound (2.09 against 1.80 ms) and keeps 2 (its
 * 122-126 registers; s19-7 to s19-9). */
#define DWT_BWD_BLOCKS 3
#define DWT_FWD_BLOCKS 2

/* The forward block: CB / 4 channel vectors x TWB columns x RG row groups of RT rows. */
template <int S, int CB> struct dwt_fwd_shape {
	static constexpr int CV = CB / 4, RG = S == 1 ? 2 : 4, RT = DWT_TH / RG;
	static constexpr int TWB = DWT_THREADS / (CV * RG);
	static constexpr int NR = (DWT_TH - 1) * S + 3, NC = (TWB - 1) * S + 3;
};

/* Store 4 channels of a written pixel: + bias forward; backward the mask, then
 * accumulate, as the row kernels do. */
template <typename T, bool BWD>
__device__ static inline void dwt_put(const struct dwt_p &p, T *o, const T *out, float (&v)[4])
{
	if (BWD && p.mask)
		mask6v<T, 4>((const T *)p.mask + (o - out), v);
	if (BWD && p.accumulate) {
		float old[4];
		ldv<4>(o, old);
#pragma unroll
		for (int e = 0; e < 4; e++)
			v[e] += old[e];
	}
	stv<4>(o, v);
}

/* The correlation both kernels below run: forward (BWD false) or backward data at
 * stride 1 (BWD true, the taps reversed). */
template <typename T, int CB, int S, bool BWD>
__device__ static inline void dwt_corr(const struct dwt_p &p, const T *__restrict__ in, const T *__restrict__ w,
				       const float *__restrict__ b, T *__restrict__ out)
{
	using G = dwt_fwd_shape<S, CB>;
	__shared__ float4 tile[G::NR * G::NC * G::CV];
	const int cg = (int)blockIdx.x % p.cgroups, tc = (int)blockIdx.x / p.cgroups;
	const int ow0 = tc * G::TWB, c0 = cg * CB;
	const size_t ni = blockIdx.z;
	const T *ib = in + ni * p.img_in;
	const int cv = (int)threadIdx.x % G::CV, rest = (int)threadIdx.x / G::CV;
	const int j = rest % G::TWB, rg = rest / G::TWB, ch = c0 + cv * 4, ow = ow0 + j;
	float wl[9][4], wr[9][4], bv[4];
	load_w<T, 4, 9>(w + (size_t)ch * 9, wl);
#pragma unroll
	for (int k = 0; k < 9; k++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			wr[k][e] = wl[BWD ? 8 - k : k][e]; /* backward: the taps reversed */
#pragma unroll
	for (int e = 0; e < 4; e++)
		bv[e] = !BWD && b ? b[ch + e] : 0.0f;
	int oh0 = (int)blockIdx.y * p.tpb * DWT_TH;
	const int oh_end = min(p.out_h, oh0 + p.tpb * DWT_TH);
	uint4 raw[dwt_win<CB, G::NR, G::NC>::PER];
	dwt_load<T, CB, G::NR, G::NC>(raw, ib, p.in_h, p.in_w, p.c, oh0 * S - 1, ow0 * S - 1, c0);
	for (; oh0 < oh_end; oh0 += DWT_TH) {
		__syncthreads(); /* the previous tile read */
		dwt_store<T, CB, G::NR, G::NC>(tile, raw, !BWD && p.clip6);
		__syncthreads();
		if (!BWD && oh0 + DWT_TH < oh_end) /* backward: one tile a block (s19) */
			dwt_load<T, CB, G::NR, G::NC>(raw, ib, p.in_h, p.in_w, p.c, (oh0 + DWT_TH) * S - 1,
						      ow0 * S - 1, c0);
		float acc[G::RT][4];
#pragma unroll
		for (int i = 0; i < G::RT; i++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[i][e] = 0.0f;
#pragma unroll
		for (int rr = 0; rr < (G::RT - 1) * S + 3; rr++) {
			const int r = rg * G::RT * S + rr;
#pragma unroll
			for (int kx = 0; kx < 3; kx++) {
				const float4 xv = tile[(r * G::NC + j * S + kx) * G::CV + cv];
#pragma unroll
				for (int i = 0; i < G::RT; i++) {
					const int ky = rr - i * S;
					if (ky >= 0 && ky < 3)
						fma4(acc[i], xv, wr[ky * 3 + kx]);
				}
			}
		}
		if (ow >= p.out_w)
			continue;
#pragma unroll
		for (int i = 0; i < G::RT; i++) {
			const int oh = oh0 + rg * G::RT + i;
			if (oh >= p.out_h)
				break;
			float v[4];
#pragma unroll
			for (int e = 0; e < 4; e++)
				v[e] = acc[i][e] + bv[e];
			dwt_put<T, BWD>(p, out + ni * p.img_out + (oh * p.out_w + ow) * p.c + ch, out, v);
		}
	}
}

/* Kernel names say the direction: profile's op tables split a convolution's backward
 * into data and weight gradient by kernel name (src/report/analysis_ops.c). */
template <typename T, int CB, int S>
__global__ static void __launch_bounds__(DWT_THREADS, DWT_FWD_BLOCKS)
dwt_fwd_kernel(struct dwt_p p, const T *__restrict__ x, const T *__restrict__ w,
	       const float *__restrict__ b, T *__restrict__ y)
{
	dwt_corr<T, CB, S, false>(p, x, w, b, y);
}

template <typename T, int CB>
__global__ static void __launch_bounds__(DWT_THREADS, DWT_BWD_BLOCKS)
dwt_bwd_data_kernel(struct dwt_p p, const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx)
{
	dwt_corr<T, CB, 1, true>(p, dy, w, NULL, dx);
}

/* Backward data at stride 2: CB / 4 channel vectors x TB column pairs x RG row groups of
 * RP row pairs; the block covers TH x TW dx pixels and stages NR x NC dy pixels. */
template <int CB> struct dwt_bwd_data2_shape {
	static constexpr int CV = CB / 4, RG = 4, RP = 2, TB = DWT_THREADS / (CV * RG);
	static constexpr int NR = RG * RP + 1, NC = TB + 1, TH = 2 * RG * RP, TW = 2 * TB;
};

/* dx(2a + u, 2b + v) from dy(a, b), dy(a, b + 1), dy(a + 1, b), dy(a + 1, b + 1): dx row
 * 2oh - 1 + ky gets dy row oh through tap ky, so an even dx row takes tap 1 of row a, an
 * odd one taps 2 of row a and 0 of row a + 1 (columns alike). */
template <typename T, int CB>
__global__ static void __launch_bounds__(DWT_THREADS)
dwt_bwd_data2_kernel(struct dwt_p p, const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx)
{
	using G = dwt_bwd_data2_shape<CB>;
	__shared__ float4 tile[G::NR * G::NC * G::CV];
	const int cg = (int)blockIdx.x % p.cgroups, tc = (int)blockIdx.x / p.cgroups;
	const int b0 = tc * G::TB, c0 = cg * CB;
	const size_t ni = blockIdx.z;
	const T *gb = dy + ni * p.img_in;
	const int cv = (int)threadIdx.x % G::CV, rest = (int)threadIdx.x / G::CV;
	const int jb = rest % G::TB, rg = rest / G::TB, ch = c0 + cv * 4;
	const int iw = 2 * (b0 + jb);
	float wr[9][4];
	load_w<T, 4, 9>(w + (size_t)ch * 9, wr);
	T *base = dx + ni * p.img_out + ch;
	const int a0 = (int)blockIdx.y * (G::TH / 2);
	uint4 raw[dwt_win<CB, G::NR, G::NC>::PER];
	dwt_load<T, CB, G::NR, G::NC>(raw, gb, p.in_h, p.in_w, p.c, a0, b0, c0);
	dwt_store<T, CB, G::NR, G::NC>(tile, raw, false);
	__syncthreads();
	if (iw >= p.out_w)
		return;
#pragma unroll
	for (int rp = 0; rp < G::RP; rp++) {
		const int a = rg * G::RP + rp, ih = 2 * (a0 + a);
		if (ih >= p.out_h)
			break;
		const float4 d00 = tile[(a * G::NC + jb) * G::CV + cv];
		const float4 d01 = tile[(a * G::NC + jb + 1) * G::CV + cv];
		const float4 d10 = tile[((a + 1) * G::NC + jb) * G::CV + cv];
		const float4 d11 = tile[((a + 1) * G::NC + jb + 1) * G::CV + cv];
		float v[4] = { 0, 0, 0, 0 };
		fma4(v, d00, wr[4]);
		dwt_put<T, true>(p, base + (ih * p.out_w + iw) * p.c, dx, v);
		if (iw + 1 < p.out_w) {
			float u[4] = { 0, 0, 0, 0 };
			fma4(u, d00, wr[5]);
			fma4(u, d01, wr[3]);
			dwt_put<T, true>(p, base + (ih * p.out_w + iw + 1) * p.c, dx, u);
		}
		if (ih + 1 >= p.out_h)
			break;
		float q[4] = { 0, 0, 0, 0 };
		fma4(q, d00, wr[7]);
		fma4(q, d10, wr[1]);
		dwt_put<T, true>(p, base + ((ih + 1) * p.out_w + iw) * p.c, dx, q);
		if (iw + 1 < p.out_w) {
			float z[4] = { 0, 0, 0, 0 };
			fma4(z, d00, wr[8]);
			fma4(z, d01, wr[6]);
			fma4(z, d10, wr[2]);
			fma4(z, d11, wr[0]);
			dwt_put<T, true>(p, base + ((ih + 1) * p.out_w + iw + 1) * p.c, dx, z);
		}
	}
}

template <typename T, int CB, bool BWD>
static int dwt_launch_cb(cudaStream_t s, const struct conv2d_args *a, struct dwt_p p, const T *in,
			 const T *w, const float *b, T *out)
{
	p.cgroups = a->c_in / CB;
	int tw, th;
	if (BWD && a->stride == 2) {
		tw = dwt_bwd_data2_shape<CB>::TW;
		th = dwt_bwd_data2_shape<CB>::TH;
	} else {
		tw = a->stride == 1 ? dwt_fwd_shape<1, CB>::TWB : dwt_fwd_shape<2, CB>::TWB;
		th = DWT_TH;
	}
	int tiles_h = (p.out_h + th - 1) / th;
	p.tpb = BWD ? 1 : DWT_TPB_FWD;
	if (p.tpb > tiles_h)
		p.tpb = tiles_h;
	dim3 grid((unsigned)(p.cgroups * ((p.out_w + tw - 1) / tw)), (unsigned)((tiles_h + p.tpb - 1) / p.tpb),
		  (unsigned)a->n);
	if (BWD && a->stride == 2)
		dwt_bwd_data2_kernel<T, CB><<<grid, DWT_THREADS, 0, s>>>(p, in, w, out);
	else if (BWD)
		dwt_bwd_data_kernel<T, CB><<<grid, DWT_THREADS, 0, s>>>(p, in, w, out);
	else if (a->stride == 1)
		dwt_fwd_kernel<T, CB, 1><<<grid, DWT_THREADS, 0, s>>>(p, in, w, b, out);
	else
		dwt_fwd_kernel<T, CB, 2><<<grid, DWT_THREADS, 0, s>>>(p, in, w, b, out);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* Forward (BWD false: in x, out y) or backward data (in dy, out dx) on the tiles. */
template <typename T, bool BWD>
static int dwt_run(cudaStream_t s, const struct conv2d_args *a, const T *in, const T *w,
		   const float *b, T *out, int clip6, const void *mask, int accumulate)
{
	struct dwt_p p;
	p.c = a->c_in;
	p.in_h = BWD ? a->h_out : a->h_in;
	p.in_w = BWD ? a->w_out : a->w_in;
	p.out_h = BWD ? a->h_in : a->h_out;
	p.out_w = BWD ? a->w_in : a->w_out;
	p.img_in = (size_t)p.in_h * p.in_w * p.c;
	p.img_out = (size_t)p.out_h * p.out_w * p.c;
	p.cgroups = 0;
	p.clip6 = clip6;
	p.mask = mask;
	p.accumulate = accumulate;
	p.tpb = 1;
	switch (dwt_cb(a->c_in)) {
	case 32:
		return dwt_launch_cb<T, 32, BWD>(s, a, p, in, w, b, out);
	case 16:
		return dwt_launch_cb<T, 16, BWD>(s, a, p, in, w, b, out);
	default:
		return dwt_launch_cb<T, 8, BWD>(s, a, p, in, w, b, out);
	}
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
	if (dwt_takes(DWH_FWD, a, x, w, y, NULL))
		return dwt_run<T, false>(s, a, xt, wt, b, yt, clip6, NULL, 0);
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

int dwh_fwd_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
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
	if (dwt_takes(DWH_BWD_DATA, a, dy, w, dx, mask))
		return dwt_run<T, true>(s, a, dyt, wt, NULL, dxt, 0, mask, accumulate);
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

int dwh_bwd_data_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *dy,
		     const void *w, void *dx, int accumulate, const void *mask)
{
	GP_TRY(dwh_check(a, "backward data"));
	if (ht != GP_F16 && ht != GP_BF16)
		return bad_dtype(ht);
	if (!a->n)
		return 0;
	return DISPATCH_H(ht, dwh_bwd_data, s, a, dy, w, dx, accumulate, mask);
}
