/* Convolutions of few input channels in 16-bit NHWC on the tensor cores: ResNet's stem
 * (3 channels, 7 x 7, stride 2, 64 filters). cuDNN's legacy API has no fast kernel for
 * it in bf16: 1.55 ms forward and 0.89 ms weight gradient a step at batch 256 on an
 * H200, 15x what its math and bytes need; padding the input to 4 or 8 channels does
 * not help in bf16 (fp16 has such kernels; tools/dev/stem_probe.c, s23-2). conv_plan.c
 * times these kernels against cuDNN's best per shape and direction and takes the
 * faster (GPUPERF_CONV_STEM).
 *
 * Both directions are one matrix product over the output pixels with the input made
 * into columns in shared memory (im2col): A[pixel][(r * kw + s) * C + c] = x[n, oh *
 * stride - pad + r, ow * stride - pad + s, c], zero outside the image and past C * kh *
 * kw (rounded up to 16). Forward: y[pixel][k] = A[pixel][:] . w[k][:] (the weights are
 * KRSC, so w[k] is a row in the same order). Weight gradient: dw[k][:] = sum over
 * pixels of dy[pixel][k] * A[pixel][:], per block over its tiles into a partial sum,
 * the partials then added in a fixed order straight into the float master gradient
 * (KCRS), so every run gives the same bits. mma.sync m16n8k16 with ldmatrix, float
 * accumulators. ResNet's stem at a width that is a multiple of 8 (input rows of whole
 * 16-byte chunks) builds no columns in the forward: it stages the input rows a tile's
 * windows cover and reads the windows in place ("forward on staged input rows" below),
 * 1.4x faster than the column fill. */
#include <stdint.h>

#include <atomic>

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

#define STEM_M 128            /* output pixels per tile */
#define STEM_N 64             /* output channels per block; blockIdx.y picks the group */
#define STEM_KP 160           /* the most columns C * kh * kw, rounded up to 16 */
#define STEM_LDA (STEM_KP + 8) /* row strides in elements: 16-byte rows for ldmatrix, */
#define STEM_LDB (STEM_N + 8)  /* 8 rows of them on distinct banks */
#define STEM_C_MAX 7             /* more input channels are cuDNN's (a multiple of 8 is fast there) */

struct stem_k {
	int c, h, w, k_out, ho, wo, kh, kw, stride, pad;
	int kk;     /* c * kh * kw */
	int kp;     /* kk rounded up to 16 */
	int pixels; /* n * ho * wo */
	int tiles;
};

extern "C" int stem_conv_supported(enum gp_dtype dt, int nhwc, const struct conv2d_args *a)
{
	size_t pixels = (size_t)a->n * a->h_out * a->w_out;
	return (dt == GP_F16 || dt == GP_BF16) && nhwc && a->groups == 1 && a->c_in >= 1 && a->c_in <= STEM_C_MAX &&
	       a->c_in * a->kh * a->kw <= STEM_KP && a->c_out % STEM_N == 0 && pixels >= 1 &&
	       pixels <= (size_t)INT32_MAX - STEM_M && a->h_in * a->w_in >= 1;
}

static stem_k stem_k_from(const struct conv2d_args *a)
{
	stem_k p;
	p.c = a->c_in;
	p.h = a->h_in;
	p.w = a->w_in;
	p.k_out = a->c_out;
	p.ho = a->h_out;
	p.wo = a->w_out;
	p.kh = a->kh;
	p.kw = a->kw;
	p.stride = a->stride;
	p.pad = a->pad;
	p.kk = a->c_in * a->kh * a->kw;
	p.kp = (p.kk + 15) / 16 * 16;
	p.pixels = a->n * a->h_out * a->w_out;
	p.tiles = (p.pixels + STEM_M - 1) / STEM_M;
	return p;
}

/* --- tensor-core fragments (mma.sync m16n8k16, float accumulators) ----------------------
 * ldmatrix reads four 8 x 8 blocks of 16-bit elements, each lane giving one row's
 * address (16-byte aligned); .trans hands each lane the transposed block's elements, so
 * an operand stored the other way round loads as the instruction wants it. */
__device__ static inline unsigned smem_u32(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}

__device__ static inline void ldsm4(unsigned addr, unsigned r[4])
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

__device__ static inline void ldsm4_t(unsigned addr, unsigned r[4])
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

/* d += a (16 x 16, row) * b (16 x 8, col). Lane t then holds d[0..1] at row t / 4,
 * columns 2 (t % 4) and + 1, d[2..3] the same 8 rows down. */
template <typename T> __device__ static inline void mma16816(float d[4], const unsigned a[4], unsigned b0, unsigned b1);

template <> __device__ inline void mma16816<__nv_bfloat16>(float d[4], const unsigned a[4], unsigned b0, unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
		     "{%8, %9}, {%0, %1, %2, %3};"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <> __device__ inline void mma16816<__half>(float d[4], const unsigned a[4], unsigned b0, unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
		     "{%8, %9}, {%0, %1, %2, %3};"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats rounded into one 32-bit pair of the 16-bit type, lower address first. */
template <typename T> __device__ static inline unsigned pack2(float lo, float hi);
template <> __device__ inline unsigned pack2<__nv_bfloat16>(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<unsigned *>(&v);
}
template <> __device__ inline unsigned pack2<__half>(float lo, float hi)
{
	__half2 v = __floats2half2_rn(lo, hi);
	return *reinterpret_cast<unsigned *>(&v);
}

/* --- the columns (im2col) in shared memory ------------------------------------------------
 * Warp w fills rows 4w..4w+3, 4w+32.. of the tile; its lanes take consecutive columns
 * (lane + 32 j), so the loads of a window row are contiguous and the shared stores free
 * of bank conflicts. A lane's columns are the same in every row: their offsets from
 * the window's first element and their r, s are worked out once. Each row's pixel is
 * decoded once, by one of the warp's first 16 lanes, and shuffled to the rest. Four
 * rows' loads (20 a lane) are issued before any is stored, and nothing waits on a load
 * before the stores: a column off the image loads a zero from stem_zero. Loads one
 * at a time, each waiting for L2, made the tile 15x its math (s23-3); a decode per lane
 * and row and branching loads kept it instruction-bound (ncu, s23-5). */
#define STEM_FILL_ROWS 4
#define STEM_COLS (STEM_KP / 32)

/* What a column off the image or past C * kh * kw loads: zero in both 16-bit types. */
__device__ static uint16_t stem_zero[8];

struct stem_lane_cols {
	int off[STEM_COLS];
	int r[STEM_COLS], s[STEM_COLS]; /* r = 1 << 20: a padding column */
};

__device__ static stem_lane_cols stem_columns(const stem_k &p)
{
	stem_lane_cols c;
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int j = 0; j < STEM_COLS; j++) {
		int kk = lane + 32 * j;
		int ci = kk % p.c, rs = kk / p.c;
		c.s[j] = rs % p.kw;
		c.r[j] = kk < p.kk ? rs / p.kw : 1 << 20;
		c.off[j] = kk < p.kk ? (c.r[j] * p.w + c.s[j]) * p.c + ci : 0;
	}
	return c;
}

template <typename T>
__device__ static void stem_fill(const stem_k &p, const T *__restrict__ x, const stem_lane_cols &c, T *as,
				 int pix0)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const T *zero = reinterpret_cast<const T *>(stem_zero);
	/* lane q < 16 decodes the warp's row 32 (q / 4) + 4 warp + q % 4 */
	int q = lane & 15, my_m = 32 * (q >> 2) + STEM_FILL_ROWS * warp + (q & 3);
	int pix = pix0 + my_m;
	int ow = pix % p.wo, t = pix / p.wo;
	int oh = t % p.ho, ni = t / p.ho;
	int my_ih0 = oh * p.stride - p.pad, my_iw0 = ow * p.stride - p.pad;
	/* 0: past the last pixel; 1: at an edge; 2: the window inside the image */
	int my_kind = pix >= p.pixels ? 0
		      : my_ih0 >= 0 && my_ih0 + p.kh <= p.h && my_iw0 >= 0 && my_iw0 + p.kw <= p.w ? 2
												   : 1;
	long long my_base = (((long long)ni * p.h + my_ih0) * p.w + my_iw0) * p.c;
	bool real[STEM_COLS];
#pragma unroll
	for (int j = 0; j < STEM_COLS; j++)
		real[j] = c.r[j] < (1 << 20);
#pragma unroll
	for (int b = 0; b < STEM_M / 32; b++) {
		T v[STEM_FILL_ROWS][STEM_COLS];
		/* the same in every lane: whether all four rows' windows are inside the image */
		bool all_inside = __all_sync(FULL_MASK, (lane & 15) >> 2 != b || my_kind == 2);
#pragma unroll
		for (int i = 0; i < STEM_FILL_ROWS; i++) {
			int src = b * 4 + i;
			long long base = __shfl_sync(FULL_MASK, my_base, src);
			const T *w0 = x + base;
			if (all_inside) {
				/* every real column is in bounds, a padding one never */
#pragma unroll
				for (int j = 0; j < STEM_COLS; j++)
					v[i][j] = __ldg(real[j] ? w0 + c.off[j] : zero);
				continue;
			}
			int kind = __shfl_sync(FULL_MASK, my_kind, src);
			int ih0 = __shfl_sync(FULL_MASK, my_ih0, src), iw0 = __shfl_sync(FULL_MASK, my_iw0, src);
#pragma unroll
			for (int j = 0; j < STEM_COLS; j++) {
				bool ok = (kind != 0) & ((unsigned)(ih0 + c.r[j]) < (unsigned)p.h) &
					  ((unsigned)(iw0 + c.s[j]) < (unsigned)p.w);
				v[i][j] = __ldg(ok ? w0 + c.off[j] : zero);
			}
		}
#pragma unroll
		for (int i = 0; i < STEM_FILL_ROWS; i++)
#pragma unroll
			for (int j = 0; j < STEM_COLS; j++)
				as[(32 * b + STEM_FILL_ROWS * warp + i) * STEM_LDA + lane + 32 * j] = v[i][j];
	}
}

static size_t stem_fwd_smem(void)
{
	return (size_t)STEM_M * STEM_LDA * 2 + (size_t)STEM_N * STEM_LDA * 2;
}

static size_t stem_wgrad_smem(void)
{
	return (size_t)STEM_M * STEM_LDA * 2 + (size_t)STEM_M * STEM_LDB * 2;
}

/* A tile's output (the fragments acc of warp (wm, wn)) through shared memory cs, so
 * that a pixel's 64 channels are written 16 bytes at a time: pixels pix0 .. pix0 +
 * valid - 1 of y, channels k0 ... Syncs the block. */
template <typename T>
__device__ static void stem_store_tile(const stem_k &p, float acc[2][4][4], T *cs, T *__restrict__ y, int wm, int wn,
				       int lane, size_t pix0, int valid, int k0)
{
	int g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
	for (int i = 0; i < 2; i++)
#pragma unroll
		for (int j = 0; j < 4; j++) {
			T *o = cs + (wm + i * 16 + g) * STEM_LDB + wn + j * 8 + c2;
			*reinterpret_cast<unsigned *>(o) = pack2<T>(acc[i][j][0], acc[i][j][1]);
			*reinterpret_cast<unsigned *>(o + 8 * STEM_LDB) = pack2<T>(acc[i][j][2], acc[i][j][3]);
		}
	__syncthreads();
	/* 8 channels (16 bytes) a thread, a pixel's 64 channels contiguous */
#pragma unroll
	for (int i = 0; i < STEM_M * (STEM_N / VEC) / BLOCK; i++) {
		int e = threadIdx.x + i * BLOCK, m = e / (STEM_N / VEC), c8 = e - m * (STEM_N / VEC);
		if (m < valid)
			reinterpret_cast<uint4 *>(y + (pix0 + m) * p.k_out + k0)[c8] =
				reinterpret_cast<const uint4 *>(cs + m * STEM_LDB)[c8];
	}
}

/* Forward: blocks loop over the tiles of 128 pixels for their 64 output channels; 8
 * warps, each 32 pixels x 32 channels of the tile (2 x 4 fragments). The weights stay
 * in shared memory as [k][kk] rows (the second operand's own layout); the output goes
 * back through shared memory (over A, once read) so that a pixel's 64 channels are
 * written 16 bytes at a time. */
template <typename T>
__global__ static void __launch_bounds__(BLOCK) stem_fwd_kernel(stem_k p, const T *__restrict__ x,
								 const T *__restrict__ w, T *__restrict__ y)
{
	extern __shared__ __align__(128) unsigned char smem[];
	T *as = reinterpret_cast<T *>(smem);
	T *bs = reinterpret_cast<T *>(smem + (size_t)STEM_M * STEM_LDA * 2);
	T *cs = as; /* the output tile, [pixel][STEM_LDB] */
	int k0 = blockIdx.y * STEM_N;
	for (int e = threadIdx.x; e < STEM_N * STEM_KP; e += blockDim.x) {
		int n = e / STEM_KP, kk = e - n * STEM_KP;
		bs[n * STEM_LDA + kk] = kk < p.kk ? w[(size_t)(k0 + n) * p.kk + kk] : T(0.0f);
	}
	stem_lane_cols cols = stem_columns(p);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
	/* ldmatrix row addresses: A's 16 x 16 blocks row (lane & 15), column 8 (lane >> 4);
	 * B's two 8-channel tiles, channel (lane & 7) + 8 (lane >> 4), column 8 ((lane >> 3) & 1) */
	unsigned a_addr = smem_u32(as + (wm + (lane & 15)) * STEM_LDA + ((lane >> 4) << 3));
	unsigned b_addr = smem_u32(bs + (wn + (lane & 7) + ((lane >> 4) << 3)) * STEM_LDA + (((lane >> 3) & 1) << 3));
	for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
		int pix0 = tile * STEM_M;
		__syncthreads(); /* the weights, or the last tile's output read */
		stem_fill(p, x, cols, as, pix0);
		__syncthreads();
		float acc[2][4][4] = {};
		for (int kc = 0; kc < p.kp; kc += 16) {
			unsigned a[2][4], bq[2][4];
#pragma unroll
			for (int i = 0; i < 2; i++)
				ldsm4(a_addr + (i * 16 * STEM_LDA + kc) * 2, a[i]);
#pragma unroll
			for (int j = 0; j < 2; j++)
				ldsm4(b_addr + (j * 16 * STEM_LDA + kc) * 2, bq[j]);
#pragma unroll
			for (int i = 0; i < 2; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					mma16816<T>(acc[i][j], a[i], bq[j >> 1][(j & 1) * 2], bq[j >> 1][(j & 1) * 2 + 1]);
		}
		__syncthreads(); /* every warp done with A before the output overwrites it */
		stem_store_tile<T>(p, acc, cs, y, wm, wn, lane, (size_t)pix0, p.pixels - pix0, k0);
	}
}

/* --- forward on staged input rows ----------------------------------------------------
 * Where a row of the input is a whole number of 16-byte chunks (w * c a multiple of 8),
 * the forward builds no columns: a tile is a segment of up to STEM_M pixels of one
 * output row, and the kh input rows its windows cover are staged in shared memory,
 * padding as zeros, with 16-byte loads and stores. A window row's kw * c elements are
 * contiguous there, so the first operand's ldmatrix rows are read in place: the
 * product's K runs over 8-element pieces of the window rows (pieces = ceil(kw * c / 8)
 * a row), the elements past kw * c in a row's last piece meeting zero weights. ldmatrix
 * wants each row 16-byte aligned; pixel m's window starts at element m * stride * c, so
 * the rows are staged in copies = 8 / gcd(stride * c, 8) copies, copy i shifted by
 * i * gcd elements, and pixel m reads the copy that aligns it (copies 8k + 1 slots
 * apart put the 8 pixels of an ldmatrix on 8 bank groups at stride 2 and 3 channels).
 * ResNet's stem (3 channels, stride 2): 4 copies; the column fill it replaces spent
 * about 10 integer instructions on every element's address (ncu, s26-4). The layout
 * (struct stem_rows, cuda_ops.h) is general; the kernel is built for ResNet's form
 * only (STEM_ROWS_FORM). */
#define STEM_ROWS_SMEM_MAX (100 * 1024) /* two blocks an SM at least */
#define STEM_STAGE_ITEMS 3 /* staging items a thread loads before it stores any */

__device__ __host__ static inline int stem_floor8(int v)
{
	return v >= 0 ? v / 8 : -((-v + 7) / 8);
}

static int stem_gcd8(int v)
{
	int g = 8;
	while (v % g)
		g /= 2;
	return g;
}

static stem_rows stem_rows_from(const stem_k &p)
{
	stem_rows r;
	r.pieces = (p.kw * p.c + 7) / 8;
	r.kq = (p.kh * r.pieces + 1) / 2 * 2;
	r.gcd = stem_gcd8(p.stride * p.c);
	r.copies = 8 / r.gcd;
	int l = p.wo < STEM_M ? p.wo : STEM_M, q = (l - 1) * p.stride + p.kw;
	/* the last piece of the last window reads up to 7 + 7 elements past q * c */
	r.row_el = (q * p.c + 14 + 7) / 8 * 8;
	int slots = p.kh * r.row_el / 8;
	slots += (1 - slots % 8 + 8) % 8; /* copies 8k + 1 slots apart: 8 pixels' rows on 8 bank groups */
	r.copy_el = slots * 8;
	r.ldb = r.kq * 8 + 8;
	r.segs = (p.wo + STEM_M - 1) / STEM_M;
	r.tiles = p.pixels / p.wo * r.segs;
	return r;
}

static size_t stem_rows_smem(const stem_rows &r)
{
	size_t a = (size_t)r.copies * r.copy_el, c = (size_t)STEM_M * STEM_LDB;
	return ((a > c ? a : c) + (size_t)STEM_N * r.ldb) * 2;
}

/* The one form the staged-rows kernel is built in (its template arguments): gcd(stride
 * * c, 8) 2, the unshifted copy's first element 7 into its chunk ((-pad * c) mod 8), 3
 * pieces a window row, 7 window rows: ResNet's stem (3 channels, 7 x 7, stride 2, pad
 * 3). A form with these read at run time was correct but issued more instructions than
 * the column fill (346 M against 315 M on ResNet's stem, s26-7), so other shapes keep
 * the fill. */
#define STEM_ROWS_FORM 2, 7, 3, 7

/* Whether the staged-rows forward takes the shape (x must also be 16-byte aligned). */
static int stem_rows_take(const stem_k &p)
{
	if ((p.w * p.c) % 8 || p.pad < 0 || p.kh != 7)
		return 0;
	stem_rows r = stem_rows_from(p);
	return r.gcd == 2 && ((-p.pad * p.c) & 7) == 7 && r.pieces == 3 && stem_rows_smem(r) <= STEM_ROWS_SMEM_MAX;
}

/* Elements E .. E + 7 of the 24 elements of a, b, c (E fixed), as 4 pairs. */
template <int E>
__device__ static inline uint4 stem_window(uint4 a, uint4 b, uint4 c)
{
	unsigned w[12] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w }, o[4];
#pragma unroll
	for (int i = 0; i < 4; i++)
		o[i] = E % 2 ? __byte_perm(w[i + E / 2], w[i + E / 2 + 1], 0x5432) : w[i + E / 2];
	return make_uint4(o[0], o[1], o[2], o[3]);
}

/* Copy i's slot from the three chunks about it, for copies 8 / G with the unshifted
 * copy's slot starting D0 elements into the middle chunk: element 8 + D0 - i G on. */
template <typename T, int G, int D0, int I = 0>
__device__ static inline void stem_put_copies(T *row0, size_t copy_el, int slot, uint4 a, uint4 b, uint4 c)
{
	if constexpr (I < 8 / G) {
		reinterpret_cast<uint4 *>(row0 + I * copy_el)[slot] = stem_window<8 + D0 - I * G>(a, b, c);
		stem_put_copies<T, G, D0, I + 1>(row0, copy_el, slot, a, b, c);
	}
}

/* 16-byte chunk k of input row ih of image n, zero outside the image. */
template <typename T>
__device__ static inline uint4 stem_chunk(const stem_k &p, const T *__restrict__ x, int n, int ih, int k)
{
	if ((unsigned)ih >= (unsigned)p.h || (unsigned)k >= (unsigned)(p.w * p.c / 8))
		return make_uint4(0, 0, 0, 0);
	return __ldg(reinterpret_cast<const uint4 *>(x + ((size_t)n * p.h + ih) * p.w * p.c) + k);
}

/* Stages the kh input rows of output row oh of image n that the tile from ow0 covers:
 * each 16-byte slot of each copy from the three input chunks about it, three items (a
 * row's slot) a thread with all their loads issued before any store. The caller syncs
 * before and after. */
template <typename T, int G, int D0>
__device__ static inline void stem_stage_rows(const stem_k &p, const stem_rows &sr, const T *__restrict__ x, T *as,
					      int n, int oh, int ow0)
{
	int row_chunks = sr.row_el / 8, items = p.kh * row_chunks;
	/* staged element e of a row is input element (ow0 * stride - pad) * c + e of it */
	int e0 = (ow0 * p.stride - p.pad) * p.c;
	/* whether a copy's slot starts in the chunk before the unshifted one's */
	constexpr bool low = D0 < (8 / G - 1) * G;
#pragma unroll 1
	for (int v0 = threadIdx.x; v0 < items; v0 += STEM_STAGE_ITEMS * BLOCK) {
		uint4 ch[STEM_STAGE_ITEMS][3];
#pragma unroll
		for (int u = 0; u < STEM_STAGE_ITEMS; u++) {
			int v = v0 + u * BLOCK, slot = v % row_chunks, r = v / row_chunks;
			int ih = v < items ? oh * p.stride - p.pad + r : -1, k = stem_floor8(e0 + 8 * slot);
			ch[u][0] = low ? stem_chunk(p, x, n, ih, k - 1) : make_uint4(0, 0, 0, 0);
			ch[u][1] = stem_chunk(p, x, n, ih, k);
			ch[u][2] = stem_chunk(p, x, n, ih, k + 1);
		}
#pragma unroll
		for (int u = 0; u < STEM_STAGE_ITEMS; u++) {
			int v = v0 + u * BLOCK, slot = v % row_chunks, r = v / row_chunks;
			if (v >= items)
				break;
			stem_put_copies<T, G, D0>(as + r * sr.row_el, sr.copy_el, slot, ch[u][0], ch[u][1], ch[u][2]);
		}
	}
}

/* The ldmatrix row address of pixel m of a tile in the staged rows: its copy (the one
 * that aligns its window start, m * stride * c) and that start in it. */
__device__ static inline unsigned stem_pixel_addr(const stem_k &p, const stem_rows &sr, const void *as, int m)
{
	int start = m * p.stride * p.c, i = ((8 - (start & 7)) & 7) / sr.gcd;
	return smem_u32(as) + (unsigned)(i * sr.copy_el + start + i * sr.gcd) * 2;
}

/* One 16-column step of the product: the first operand's rows at a_base + off, the
 * weights' at b (this step's columns). */
template <typename T>
__device__ static inline void stem_rows_step(float acc[2][4][4], const unsigned a_base[2], unsigned off, unsigned b,
					     int ldb)
{
	unsigned a[2][4], bq[2][4];
#pragma unroll
	for (int f = 0; f < 2; f++)
		ldsm4(a_base[f] + off, a[f]);
#pragma unroll
	for (int j = 0; j < 2; j++)
		ldsm4(b + (unsigned)(j * 16 * ldb) * 2, bq[j]);
#pragma unroll
	for (int f = 0; f < 2; f++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			mma16816<T>(acc[f][j], a[f], bq[j >> 1][(j & 1) * 2], bq[j >> 1][(j & 1) * 2 + 1]);
}

/* Forward on staged rows: blocks loop over the tiles (n, oh, segment) for their 64
 * output channels; 8 warps, each 32 pixels x 32 channels (2 x 4 fragments), as
 * stem_fwd_kernel, whose output path it shares. G, D0, P, KH: the shape's gcd, the
 * unshifted copy's first element in its chunk, pieces a window row, window rows
 * (STEM_ROWS_FORM), fixed so that the staging's copies and the product's steps unroll
 * with their offsets known. */
template <typename T, int G, int D0, int P, int KH>
__global__ static void __launch_bounds__(BLOCK, 3) stem_fwd_rows_kernel(stem_k p, stem_rows sr, const T *__restrict__ x,
									  const T *__restrict__ w, T *__restrict__ y)
{
	extern __shared__ __align__(128) unsigned char smem[];
	T *as = reinterpret_cast<T *>(smem);
	size_t a_el = (size_t)sr.copies * sr.copy_el, c_el = (size_t)STEM_M * STEM_LDB;
	T *bs = as + (a_el > c_el ? a_el : c_el);
	T *cs = as; /* the output tile, [pixel][STEM_LDB], over the staged rows once read */
	int k0 = blockIdx.y * STEM_N, kc = p.kw * p.c;
	for (int e = threadIdx.x; e < STEM_N * sr.kq * 8; e += blockDim.x) {
		int n = e / (sr.kq * 8), kk = e - n * (sr.kq * 8), q = kk / 8, r = q / sr.pieces;
		int col = (q - r * sr.pieces) * 8 + kk % 8;
		bs[n * sr.ldb + kk] = r < p.kh && col < kc ? w[(size_t)(k0 + n) * p.kk + r * kc + col] : T(0.0f);
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = (warp & 3) * 32, wn = (warp >> 2) * 32;
	unsigned b_addr = smem_u32(bs + (wn + (lane & 7) + ((lane >> 4) << 3)) * sr.ldb + (((lane >> 3) & 1) << 3));
	for (int tile = blockIdx.x; tile < sr.tiles; tile += gridDim.x) {
		int seg = tile % sr.segs, orow = tile / sr.segs, n = orow / p.ho, oh = orow - n * p.ho;
		int ow0 = seg * STEM_M, len = p.wo - ow0 < STEM_M ? p.wo - ow0 : STEM_M;
		__syncthreads(); /* the weights, or the last tile's output read */
		stem_stage_rows<T, G, D0>(p, sr, x, as, n, oh, ow0);
		__syncthreads();
		/* ldmatrix rows: pixel wm + 16 f + (lane & 15) (the last one past the segment), its
		 * copy and window start; lanes 16.. take the second piece of each 16 columns */
		unsigned a_base[2];
#pragma unroll
		for (int f = 0; f < 2; f++) {
			int m = wm + 16 * f + (lane & 15);
			a_base[f] = stem_pixel_addr(p, sr, as, m < len ? m : len - 1);
		}
		float acc[2][4][4] = {};
		/* step ks reads pieces 2 ks (lanes 0..15) and 2 ks + 1: their offsets folded */
		constexpr int KQ = (KH * P + 1) / 2 * 2;
		int hi = lane >> 4;
#pragma unroll
		for (int ks = 0; ks < KQ / 2; ks++) {
			int q0 = 2 * ks, q1 = 2 * ks + 1; /* past K: zero weights, any finite row */
			unsigned o0 = q0 < KH * P ? (unsigned)((q0 / P) * sr.row_el + (q0 % P) * 8) * 2 : 0;
			unsigned o1 = q1 < KH * P ? (unsigned)((q1 / P) * sr.row_el + (q1 % P) * 8) * 2 : 0;
			stem_rows_step<T>(acc, a_base, hi ? o1 : o0, b_addr + (unsigned)ks * 32, sr.ldb);
		}
		__syncthreads(); /* every warp done with the staged rows before the output overwrites them */
		stem_store_tile<T>(p, acc, cs, y, wm, wn, lane, (size_t)orow * p.wo + ow0, len, k0);
	}
}

/* Weight gradient on staged rows (ResNet's form, as the forward): a tile's sum dw[k][piece
 * column] += dy^T (64 x len) . A (len x pieces * 8), A's rows read in place from the staged
 * rows (ldmatrix.trans: its rows are pixels, 8 columns of one piece each, at the pixel's
 * window start). 8 warps: 4 of 16 channels x 2 halves of the pieces (11 and 10 of ResNet's
 * 21); dy's rows past the segment are zero, so the pixels read there (the last one's)
 * add nothing. The columns past kw * c in a row's last piece are never written out. */
template <typename T, int G, int D0, int P, int KH>
__global__ static void __launch_bounds__(BLOCK, 2) stem_wgrad_rows_kernel(stem_k p, stem_rows sr,
									    const T *__restrict__ x,
									    const T *__restrict__ dy,
									    float *__restrict__ part)
{
	constexpr int NQ = KH * P, NQ0 = (NQ + 1) / 2, NJ = (NQ0 + 1) / 2;
	extern __shared__ __align__(128) unsigned char smem[];
	T *as = reinterpret_cast<T *>(smem);
	T *ds = as + (size_t)sr.copies * sr.copy_el; /* dy's tile, [pixel][STEM_LDB] */
	int k0 = blockIdx.y * STEM_N;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = (warp & 3) * 16, half = warp >> 2;
	int q0 = half ? NQ0 : 0, nq = half ? NQ - NQ0 : NQ0;
	/* dy^T from ds as the stem_wgrad_kernel reads it */
	unsigned a_addr = smem_u32(ds + ((lane & 7) + ((lane >> 4) << 3)) * STEM_LDB + wm + (((lane >> 3) & 1) << 3));
	/* this lane's ldmatrix.trans row: pixel pm of each 16, piece q0 + 2 j + (lane >> 4) */
	int pm = (lane & 7) + (((lane >> 3) & 1) << 3);
	unsigned qoff[NJ];
#pragma unroll
	for (int j = 0; j < NJ; j++) {
		int q = q0 + 2 * j + (lane >> 4);
		qoff[j] = q < NQ ? (unsigned)((q / P) * sr.row_el + (q % P) * 8) * 2 : 0;
	}
	float acc[NQ0][4] = {};
	for (int tile = blockIdx.x; tile < sr.tiles; tile += gridDim.x) {
		int seg = tile % sr.segs, orow = tile / sr.segs, n = orow / p.ho, oh = orow - n * p.ho;
		int ow0 = seg * STEM_M, len = p.wo - ow0 < STEM_M ? p.wo - ow0 : STEM_M;
		size_t pix0 = (size_t)orow * p.wo + ow0;
		__syncthreads(); /* the last tile's rows and dy read */
		uint4 dv[STEM_M * (STEM_N / VEC) / BLOCK];
#pragma unroll
		for (int i = 0; i < STEM_M * (STEM_N / VEC) / BLOCK; i++) {
			int e = threadIdx.x + i * BLOCK, m = e / (STEM_N / VEC), c8 = e - m * (STEM_N / VEC);
			dv[i] = make_uint4(0, 0, 0, 0);
			if (m < len)
				dv[i] = __ldg(reinterpret_cast<const uint4 *>(dy + (pix0 + m) * p.k_out + k0) + c8);
		}
		stem_stage_rows<T, G, D0>(p, sr, x, as, n, oh, ow0);
#pragma unroll
		for (int i = 0; i < STEM_M * (STEM_N / VEC) / BLOCK; i++) {
			int e = threadIdx.x + i * BLOCK, m = e / (STEM_N / VEC), c8 = e - m * (STEM_N / VEC);
			reinterpret_cast<uint4 *>(ds + m * STEM_LDB)[c8] = dv[i];
		}
		__syncthreads();
		for (int kc = 0; kc < len; kc += 16) {
			unsigned a[4];
			ldsm4_t(a_addr + kc * STEM_LDB * 2, a);
			int m = kc + pm;
			unsigned b = stem_pixel_addr(p, sr, as, m < len ? m : len - 1);
#pragma unroll
			for (int j = 0; j < NJ; j++) {
				if (2 * j >= nq)
					break;
				unsigned bq[4];
				ldsm4_t(b + qoff[j], bq);
				mma16816<T>(acc[2 * j], a, bq[0], bq[1]);
				if (2 * j + 1 < NQ0 && 2 * j + 1 < nq) /* the first test folds: acc's bound */
					mma16816<T>(acc[2 * j + 1], a, bq[2], bq[3]);
			}
		}
	}
	/* fragment f's columns: piece q0 + f, elements c2, c2 + 1; rows (channels) g, g + 8 */
	int g = lane >> 2, c2 = (lane & 3) * 2, kwc = p.kw * p.c;
	float *out = part + ((size_t)blockIdx.x * p.k_out + k0 + wm) * p.kk;
#pragma unroll
	for (int f = 0; f < NQ0; f++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int q = q0 + f, col = (q % P) * 8 + c2 + (e & 1), row = g + (e >> 1) * 8;
			if (f < nq && col < kwc)
				out[(size_t)row * p.kk + (q / P) * kwc + col] = acc[f][e];
		}
}

static size_t stem_wgrad_rows_smem(const stem_rows &r)
{
	return ((size_t)r.copies * r.copy_el + (size_t)STEM_M * STEM_LDB) * 2;
}

/* Weight gradient, first pass: blocks loop over tiles of 128 pixels for their 64
 * output channels, each warp 16 channels x 80 columns of the 64 x 160 sum (10 fragments:
 * dy transposed as the first operand, the columns as the second, both through
 * ldmatrix.trans); the block's sum goes to part[blockIdx.x][k][kk]. */
template <typename T>
__global__ static void __launch_bounds__(BLOCK, 2) stem_wgrad_kernel(stem_k p, const T *__restrict__ x,
								   const T *__restrict__ dy, float *__restrict__ part)
{
	extern __shared__ __align__(128) unsigned char smem[];
	T *as = reinterpret_cast<T *>(smem);
	T *ds = reinterpret_cast<T *>(smem + (size_t)STEM_M * STEM_LDA * 2);
	int k0 = blockIdx.y * STEM_N;
	stem_lane_cols cols = stem_columns(p);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = (warp & 3) * 16, wn = (warp >> 2) * 80;
	/* A (channels x pixels) from ds[pixel][channel]: block rows are pixels (lane & 7) + 8
	 * (lane >> 4), channel column 8 ((lane >> 3) & 1); B (pixels x columns) from
	 * as[pixel][column]: pixel (lane & 7) + 8 ((lane >> 3) & 1), column 8 (lane >> 4) */
	unsigned a_addr = smem_u32(ds + ((lane & 7) + ((lane >> 4) << 3)) * STEM_LDB + wm + (((lane >> 3) & 1) << 3));
	unsigned b_addr = smem_u32(as + ((lane & 7) + (((lane >> 3) & 1) << 3)) * STEM_LDA + wn + ((lane >> 4) << 3));
	int nf = (p.kp - wn + 7) / 8; /* the warp's 8-column fragments that hold columns */
	nf = nf < 0 ? 0 : nf > 10 ? 10 : nf;
	float acc[10][4] = {};
	for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
		int pix0 = tile * STEM_M;
		__syncthreads(); /* the last tile's A and dy read */
		/* dy's tile, 16 bytes a load, all of a thread's loads issued before its stores */
		uint4 dv[STEM_M * (STEM_N / VEC) / BLOCK];
#pragma unroll
		for (int i = 0; i < STEM_M * (STEM_N / VEC) / BLOCK; i++) {
			int e = threadIdx.x + i * BLOCK, m = e / (STEM_N / VEC), c8 = e - m * (STEM_N / VEC);
			dv[i] = make_uint4(0, 0, 0, 0);
			if (pix0 + m < p.pixels)
				dv[i] = __ldg(reinterpret_cast<const uint4 *>(dy + (size_t)(pix0 + m) * p.k_out + k0) + c8);
		}
		stem_fill(p, x, cols, as, pix0);
#pragma unroll
		for (int i = 0; i < STEM_M * (STEM_N / VEC) / BLOCK; i++) {
			int e = threadIdx.x + i * BLOCK, m = e / (STEM_N / VEC), c8 = e - m * (STEM_N / VEC);
			reinterpret_cast<uint4 *>(ds + m * STEM_LDB)[c8] = dv[i];
		}
		__syncthreads();
#pragma unroll 2
		for (int kc = 0; kc < STEM_M; kc += 16) {
			unsigned a[4];
			ldsm4_t(a_addr + kc * STEM_LDB * 2, a);
#pragma unroll
			for (int j = 0; j < 5; j++) {
				if (2 * j >= nf)
					break;
				unsigned bq[4];
				ldsm4_t(b_addr + (kc * STEM_LDA + j * 16) * 2, bq);
				mma16816<T>(acc[2 * j], a, bq[0], bq[1]);
				mma16816<T>(acc[2 * j + 1], a, bq[2], bq[3]);
			}
		}
	}
	/* straight from the fragments: rows (channels) g and g + 8, columns c2 and c2 + 1 */
	int g = lane >> 2, c2 = (lane & 3) * 2;
	float *out = part + ((size_t)blockIdx.x * p.k_out + k0 + wm) * p.kk;
#pragma unroll
	for (int f = 0; f < 10; f++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int kk = wn + f * 8 + c2 + (e & 1), row = g + (e >> 1) * 8;
			if (kk < p.kk)
				out[(size_t)row * p.kk + kk] = acc[f][e];
		}
}

/* Weight gradient, second pass: each column (k, kk) summed over the blocks' partials in
 * block order (8 warps a stripe each, then the stripes in order), into the float KCRS
 * gradient. */
__global__ static void stem_wgrad_reduce_kernel(stem_k p, int blocks, const float *__restrict__ part,
						float *__restrict__ dw, int accumulate)
{
	__shared__ float stripe[8][33];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int cols = p.k_out * p.kk;
	int col = blockIdx.x * 32 + lane;
	float s = 0.0f;
	if (col < cols)
		for (int b = warp; b < blocks; b += 8)
			s += part[(size_t)b * cols + col];
	stripe[warp][lane] = s;
	__syncthreads();
	if (warp || col >= cols)
		return;
	float t = 0.0f;
	for (int i = 0; i < 8; i++)
		t += stripe[i][lane];
	int k = col / p.kk, kk = col - k * p.kk;
	int ci = kk % p.c, rs = kk / p.c, sx = rs % p.kw, r = rs / p.kw;
	size_t o = (((size_t)k * p.c + ci) * p.kh + r) * p.kw + sx;
	dw[o] = accumulate ? dw[o] + t : t;
}

/* Blocks along the pixels: one wave of the resident blocks shared by the channel
 * groups (blockIdx.y), at most one a tile. */
static int stem_blocks_x(const stem_k &p, int resident)
{
	int gx = resident / (p.k_out / STEM_N);
	gx = gx > 0 ? gx : 1;
	return gx < p.tiles ? gx : p.tiles;
}

/* stem_blocks_x for a staged-rows kernel over sr's tiles, each block with smem bytes:
 * kernel_prepare allows the kernel STEM_ROWS_SMEM_MAX (its count is for that), the
 * shape takes less, so the blocks resident with smem are asked at each call. */
template <auto kernel>
static int stem_rows_blocks(const stem_k &p, const stem_rows &sr, size_t smem, int *blocks)
{
	int resident, per = 0, dev = 0, sms = 0;
	GP_TRY(kernel_prepare<kernel>(STEM_ROWS_SMEM_MAX, &resident));
	CUDA_TRY(cudaGetDevice(&dev));
	CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, BLOCK, smem));
	stem_k q = p;
	q.tiles = sr.tiles;
	*blocks = stem_blocks_x(q, sms * (per > 0 ? per : 1));
	return 0;
}

template <typename T>
static int stem_fwd_t(cudaStream_t s, const struct conv2d_args *a, const void *x, const void *w, void *y)
{
	if (!aligned(y, 16))
		return gp_error(GP_EINVAL, "stem convolution: output not 16-byte aligned");
	stem_k p = stem_k_from(a);
	if (stem_rows_take(p) && aligned(x, 16)) {
		stem_rows sr = stem_rows_from(p);
		size_t smem = stem_rows_smem(sr);
		int blocks;
		GP_TRY((stem_rows_blocks<stem_fwd_rows_kernel<T, STEM_ROWS_FORM>>(p, sr, smem, &blocks)));
		dim3 grid(blocks, p.k_out / STEM_N);
		stem_fwd_rows_kernel<T, STEM_ROWS_FORM><<<grid, BLOCK, smem, s>>>(p, sr, (const T *)x, (const T *)w,
										   (T *)y);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	int resident;
	GP_TRY(kernel_prepare<stem_fwd_kernel<T>>(stem_fwd_smem(), &resident));
	dim3 grid(stem_blocks_x(p, resident), p.k_out / STEM_N);
	stem_fwd_kernel<T><<<grid, BLOCK, stem_fwd_smem(), s>>>(p, (const T *)x, (const T *)w, (T *)y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* The blocks of the weight gradient's first pass along the pixels (one partial each):
 * on staged rows (rows) or columns; the scratch is sized for the more of the two, the x
 * pointer's alignment choosing between them only at the call. */
template <typename T>
static int stem_wgrad_blocks_t(const struct conv2d_args *a, int rows, int *blocks)
{
	stem_k p = stem_k_from(a);
	int resident;
	GP_TRY(kernel_prepare<stem_wgrad_kernel<T>>(stem_wgrad_smem(), &resident));
	int cols = stem_blocks_x(p, resident);
	if (!stem_rows_take(p)) {
		*blocks = cols;
		return 0;
	}
	stem_rows sr = stem_rows_from(p);
	int staged;
	GP_TRY((stem_rows_blocks<stem_wgrad_rows_kernel<T, STEM_ROWS_FORM>>(p, sr, stem_wgrad_rows_smem(sr), &staged)));
	*blocks = rows > 0 ? staged : rows == 0 ? cols : staged > cols ? staged : cols;
	return 0;
}

template <typename T>
static int stem_wgrad_t(cudaStream_t s, const struct conv2d_args *a, const void *x, const void *dy, float *dw,
			int accumulate, float *scratch, size_t scratch_floats)
{
	if (!aligned(dy, 16))
		return gp_error(GP_EINVAL, "stem convolution: output gradient not 16-byte aligned");
	stem_k p = stem_k_from(a);
	int rows = stem_rows_take(p) && aligned(x, 16), blocks;
	GP_TRY(stem_wgrad_blocks_t<T>(a, rows, &blocks));
	size_t need = (size_t)blocks * p.k_out * p.kk;
	if (!scratch || scratch_floats < need)
		return gp_error(GP_EINVAL, "stem convolution: weight-gradient scratch of %zu floats, %zu needed",
				scratch_floats, need);
	dim3 grid(blocks, p.k_out / STEM_N);
	if (rows) {
		stem_rows sr = stem_rows_from(p);
		stem_wgrad_rows_kernel<T, STEM_ROWS_FORM><<<grid, BLOCK, stem_wgrad_rows_smem(sr), s>>>(
			p, sr, (const T *)x, (const T *)dy, scratch);
	} else {
		stem_wgrad_kernel<T><<<grid, BLOCK, stem_wgrad_smem(), s>>>(p, (const T *)x, (const T *)dy, scratch);
	}
	CUDA_CHECK_LAUNCH();
	int cols = p.k_out * p.kk;
	stem_wgrad_reduce_kernel<<<(cols + 31) / 32, BLOCK, 0, s>>>(p, blocks, scratch, dw, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

template <typename T>
static int stem_scratch_t(const struct conv2d_args *a, size_t *floats)
{
	int blocks;
	GP_TRY(stem_wgrad_blocks_t<T>(a, -1, &blocks));
	*floats = (size_t)blocks * a->c_out * a->c_in * a->kh * a->kw;
	return 0;
}

static int stem_unsupported(void)
{
	return gp_error(GP_EUNSUPPORTED, "this convolution is not one the stem kernels take");
}

extern "C" int stem_conv_rows(const struct conv2d_args *a, struct stem_rows *r)
{
	stem_k p = stem_k_from(a);
	if (!stem_rows_take(p))
		return 0;
	*r = stem_rows_from(p);
	return 1;
}

extern "C" int stem_conv_fwd_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
				  const void *w, void *y)
{
	if (!stem_conv_supported(dt, 1, a))
		return stem_unsupported();
	return DISPATCH_H(dt, stem_fwd_t, s, a, x, w, y);
}

extern "C" int stem_conv_wgrad_scratch_floats(enum gp_dtype dt, const struct conv2d_args *a, size_t *floats)
{
	*floats = 0;
	if (!stem_conv_supported(dt, 1, a))
		return stem_unsupported();
	return DISPATCH_H(dt, stem_scratch_t, a, floats);
}

extern "C" int stem_conv_wgrad_cuda(cudaStream_t s, enum gp_dtype dt, const struct conv2d_args *a, const void *x,
				    const void *dy, float *dw, int accumulate, float *scratch, size_t scratch_floats)
{
	if (!stem_conv_supported(dt, 1, a))
		return stem_unsupported();
	return DISPATCH_H(dt, stem_wgrad_t, s, a, x, dy, dw, accumulate, scratch, scratch_floats);
}
