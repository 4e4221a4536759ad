/* fp16 / bf16 NHWC depthwise weight gradient (see dwconv_nhwc.cu for the layout). */
#include <string.h>

#include "ops/cuda/dwconv.cuh"
#include "ops/cuda/dwconv_nhwc.cuh"

/* Weight gradient: (channel group, slice) blocks wanted, ~8 per SM on a 132-SM H100 ... */
#define DWH_TARGET_BLOCKS 1024
/* ... but a slice keeps at least this many output pixels, so that the scratch round trip
 * ((k * k + 1) floats per channel and slice) stays well below the data streamed. */
#define DWH_MIN_PIXELS 64
/* Channel vectors one weight-gradient block covers at most (one warp's worth). */
#define DWH_MAX_CVG 32

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
	/* tiled kernel: dy tiles in all (cut into the slices), per image, per tile row */
	int64_t tiles;
	int tiles_img, tiles_w;
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

size_t dwh_scratch_floats(const struct conv2d_args *a)
{
	if (!dwh_supported(a))
		return 0;
	return (size_t)a->c_in * dwh_slices(a) * (a->kh * a->kw + 1);
}

/* The block's partial sums: the py lanes of each of the cvg * V columns added in nq
 * chunks of qlanes lanes, then the chunks, both in order, into part[slice][tap0 + t][ch]
 * for each of the NT taps; red holds BLOCK * V floats, red2 BLOCK. */
template <int V, int NT>
__device__ static inline void dwh_block_sum(const struct dwh_f &p, const float (&acc)[NT][V],
					    float *red, float *red2, float *__restrict__ part, int tap0,
					    int kk)
{
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
				part[((size_t)blockIdx.y * (kk + 1) + tap0 + t) * p.c + ch] = s;
		}
	}
}

/* Tiled (3x3, pad 1; dwconv_nhwc.cuh): block (channel group of CB, slice) walks the dy
 * tiles of its slice (TH x TWB dy pixels of one image each), staging each tile's x window
 * and dy into shared memory; CB / 4 channel vectors x L pixel lanes, each lane summing
 * dy * x for the 9 taps and dy for the bias over every L-th pixel of the tile. Then the
 * block's sum as the row kernel's, in the same scratch layout. */
template <int S, int CB> struct dwt_filter_shape {
	static constexpr int CV = CB / 4, L = DWT_THREADS / CV, TH = 8;
	static constexpr int TWB = S == 1 ? 16 : 8;
	static constexpr int NR = (TH - 1) * S + 3, NC = (TWB - 1) * S + 3;
	static constexpr int XN = NR * NC * CV, GN = TH * TWB * CV; /* float4s staged */
	/* A lane's run: R adjacent dy pixels of one tile row, so that its 3 x 3 taps slide
	 * along the x row and share (R - 1) * S + 3 loads a tap row instead of 3 R. Only at
	 * 32 channels a block: at 16, a quarter warp holds two lanes, whose runs R apart
	 * would meet the same banks. */
	static constexpr int R = CB == 32 ? TH * TWB / L : 1;
	static constexpr int XR = (R - 1) * S + 3; /* x vectors a tap row of a run reads */
	static_assert(R == 1 || TWB % R == 0, "a run stays within a tile row");
};

/* The image, first row and first column of dy tile t. */
__device__ static inline void dwt_tile_at(const struct dwh_f &p, int64_t t, int th, int tw, int64_t *img,
					  int *oh0, int *ow0)
{
	*img = t / p.tiles_img;
	int rest = (int)(t - *img * p.tiles_img), r = rest / p.tiles_w;
	*oh0 = r * th;
	*ow0 = (rest - r * p.tiles_w) * tw;
}

/* Blocks an SM must hold at once: 2 is what ptxas takes unbounded (2.57-2.59 ms a step);
 * 3 (80 registers, up to 56 bytes spilled) measured 2.91 ms (s19-9). */
#define DWT_FILTER_BLOCKS 2
template <typename T, int CB, int S>
__global__ static void __launch_bounds__(DWT_THREADS, DWT_FILTER_BLOCKS)
dwt_filter_kernel(struct dwh_f p, const T *__restrict__ x, const T *__restrict__ dy,
		  float *__restrict__ part)
{
	using G = dwt_filter_shape<S, CB>;
	__shared__ float4 sm[G::XN + G::GN];
	float4 *xt = sm, *gt = sm + G::XN;
	const int cv = (int)threadIdx.x % G::CV, lane = (int)threadIdx.x / G::CV, c0 = (int)blockIdx.x * CB;
	float acc[10][4];
#pragma unroll
	for (int t = 0; t < 10; t++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			acc[t][e] = 0.0f;
	int64_t t = (int64_t)blockIdx.y * p.tiles / p.slices, t1 = (int64_t)(blockIdx.y + 1) * p.tiles / p.slices;
	uint4 rx[dwt_win<CB, G::NR, G::NC>::PER], rg[dwt_win<CB, G::TH, G::TWB>::PER];
	int64_t img;
	int oh0, ow0;
	if (t < t1) {
		dwt_tile_at(p, t, G::TH, G::TWB, &img, &oh0, &ow0);
		dwt_load<T, CB, G::NR, G::NC>(rx, x + (size_t)img * p.img_in, p.h_in, p.w_in, p.c, oh0 * S - 1,
					      ow0 * S - 1, c0);
		dwt_load<T, CB, G::TH, G::TWB>(rg, dy + (size_t)img * p.img_out, p.h_out, p.w_out, p.c, oh0, ow0, c0);
	}
	for (; t < t1; t++) {
		__syncthreads(); /* the previous tile read */
		dwt_store<T, CB, G::NR, G::NC>(xt, rx, p.clip6);
		dwt_store<T, CB, G::TH, G::TWB>(gt, rg, false);
		__syncthreads();
		if (t + 1 < t1) {
			dwt_tile_at(p, t + 1, G::TH, G::TWB, &img, &oh0, &ow0);
			dwt_load<T, CB, G::NR, G::NC>(rx, x + (size_t)img * p.img_in, p.h_in, p.w_in, p.c,
						      oh0 * S - 1, ow0 * S - 1, c0);
			dwt_load<T, CB, G::TH, G::TWB>(rg, dy + (size_t)img * p.img_out, p.h_out, p.w_out, p.c,
						       oh0, ow0, c0);
		}
		if constexpr (G::R > 1) {
			/* lane's run: R pixels from row i, column j0 */
			const int p0 = lane * G::R, i = p0 / G::TWB, j0 = p0 % G::TWB;
			float4 g[G::R];
#pragma unroll
			for (int r = 0; r < G::R; r++) {
				g[r] = gt[(p0 + r) * G::CV + cv];
				acc[9][0] += g[r].x;
				acc[9][1] += g[r].y;
				acc[9][2] += g[r].z;
				acc[9][3] += g[r].w;
			}
#pragma unroll
			for (int ky = 0; ky < 3; ky++) {
				const float4 *row = xt + ((i * S + ky) * G::NC + j0 * S) * G::CV + cv;
				float4 xv[G::XR];
#pragma unroll
				for (int q = 0; q < G::XR; q++)
					xv[q] = row[q * G::CV];
#pragma unroll
				for (int r = 0; r < G::R; r++)
#pragma unroll
					for (int kx = 0; kx < 3; kx++) {
						const float4 v = xv[r * S + kx];
						acc[ky * 3 + kx][0] += g[r].x * v.x;
						acc[ky * 3 + kx][1] += g[r].y * v.y;
						acc[ky * 3 + kx][2] += g[r].z * v.z;
						acc[ky * 3 + kx][3] += g[r].w * v.w;
					}
			}
		} else {
#pragma unroll
			for (int pix = lane; pix < G::TH * G::TWB; pix += G::L) {
				const int i = pix / G::TWB, jj = pix % G::TWB;
				const float4 g = gt[pix * G::CV + cv];
				acc[9][0] += g.x;
				acc[9][1] += g.y;
				acc[9][2] += g.z;
				acc[9][3] += g.w;
#pragma unroll
				for (int ky = 0; ky < 3; ky++)
#pragma unroll
					for (int kx = 0; kx < 3; kx++) {
						const float4 xv = xt[((i * S + ky) * G::NC + jj * S + kx) * G::CV + cv];
						acc[ky * 3 + kx][0] += g.x * xv.x;
						acc[ky * 3 + kx][1] += g.y * xv.y;
						acc[ky * 3 + kx][2] += g.z * xv.z;
						acc[ky * 3 + kx][3] += g.w * xv.w;
					}
			}
		}
	}
	__syncthreads();
	float *red = reinterpret_cast<float *>(sm), *red2 = red + DWT_THREADS * 4;
	dwh_block_sum<4, 10>(p, acc, red, red2, part, 0, 9);
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

	dwh_block_sum<V, NT>(p, acc, red, red2, part, tap, kk);
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

/* The fixed-order sum of the slices' partials into dw and db. */
template <typename T>
static int dwh_filter_sum(cudaStream_t s, const struct conv2d_args *a, int slices, const float *scratch,
			  T *dw, float *db)
{
	int kk = a->kh * a->kw;
	dim3 sgrid((unsigned)((a->c_in + 31) / 32), (unsigned)(kk + 1), 1);
	dwh_filter_sum_kernel<T><<<sgrid, dim3(32, SUM_LANES, 1), 0, s>>>(a->c_in, kk, slices, scratch, dw, db);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* The sizes both partial-sum kernels read. */
static struct dwh_f dwh_f_from(const struct conv2d_args *a, int clip6)
{
	struct dwh_f p;
	memset(&p, 0, sizeof(p));
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
	p.slices = dwh_slices(a);
	p.rows = (int64_t)a->n * a->h_out;
	p.img_in = (size_t)a->h_in * a->w_in * a->c_in;
	p.img_out = (size_t)a->h_out * a->w_out * a->c_in;
	return p;
}

/* The tiled weight gradient: blocks of CB channels (4 a thread) by slices of tiles, about
 * DWH_TARGET_BLOCKS blocks in all (fewer slices than the row kernel's where its share of
 * a block would be under a tile: the block's sum would then cost more than its tiles). */
template <typename T, int CB>
static int dwt_filter(cudaStream_t s, const struct conv2d_args *a, const T *x, const T *dy, T *dw,
		      float *db, float *scratch, int clip6)
{
	struct dwh_f p = dwh_f_from(a, clip6);
	int tw = a->stride == 1 ? dwt_filter_shape<1, CB>::TWB : dwt_filter_shape<2, CB>::TWB;
	int th = dwt_filter_shape<1, CB>::TH, groups = a->c_in / CB;
	p.cv = a->c_in / 4;
	p.cvg = CB / 4;
	p.py = DWT_THREADS / p.cvg; /* >= 32: a reduction chunk per column */
	p.nq = p.py / 4;
	p.qlanes = (p.py + p.nq - 1) / p.nq;
	p.tiles_w = (a->w_out + tw - 1) / tw;
	p.tiles_img = (a->h_out + th - 1) / th * p.tiles_w;
	p.tiles = (int64_t)a->n * p.tiles_img;
	int64_t want = (DWH_TARGET_BLOCKS + groups - 1) / groups;
	if (want > p.tiles)
		want = p.tiles;
	if (want < p.slices) /* the scratch holds dwh_slices(a) */
		p.slices = want < 1 ? 1 : (int)want;
	dim3 grid((unsigned)groups, (unsigned)p.slices, 1);
	if (a->stride == 1)
		dwt_filter_kernel<T, CB, 1><<<grid, DWT_THREADS, 0, s>>>(p, x, dy, scratch);
	else
		dwt_filter_kernel<T, CB, 2><<<grid, DWT_THREADS, 0, s>>>(p, x, dy, scratch);
	CUDA_CHECK_LAUNCH();
	return dwh_filter_sum<T>(s, a, p.slices, scratch, dw, db);
}

template <typename T, int V>
static int dwh_filter_v(cudaStream_t s, const struct conv2d_args *a, const T *x, const T *dy,
			T *dw, float *db, float *scratch, int clip6)
{
	struct dwh_f p = dwh_f_from(a, clip6);
	p.cv = a->c_in / V;
	p.cvg = dwh_cvg(p.cv);
	p.py = BLOCK / p.cvg; /* >= 8 >= V: the shared reduction has a chunk per column */
	p.nq = p.py / V;
	p.qlanes = (p.py + p.nq - 1) / p.nq;
	int step_rows = p.py / a->w_out;
	p.step_w = p.py % a->w_out;
	p.step_n = step_rows / a->h_out;
	p.step_h = step_rows % a->h_out;
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
	return dwh_filter_sum<T>(s, a, p.slices, scratch, dw, db);
}

template <typename T>
static int dwh_filter(cudaStream_t s, const struct conv2d_args *a, const void *x, const void *dy,
		      void *dw, float *db, float *scratch, int clip6)
{
	const T *xt = (const T *)x, *dyt = (const T *)dy;
	T *dwt = (T *)dw;
	if (dwt_takes(DWH_FILTER, a, x, dy, NULL, NULL))
		switch (dwt_cb(a->c_in)) {
		case 32:
			return dwt_filter<T, 32>(s, a, xt, dyt, dwt, db, scratch, clip6);
		case 16:
			return dwt_filter<T, 16>(s, a, xt, dyt, dwt, db, scratch, clip6);
		default:
			return dwt_filter<T, 8>(s, a, xt, dyt, dwt, db, scratch, clip6);
		}
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

int dwh_filter_any(cudaStream_t s, enum gp_dtype ht, const struct conv2d_args *a, const void *x,
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
