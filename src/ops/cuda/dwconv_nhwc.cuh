/* What the two 16-bit NHWC depthwise files (dwconv_nhwc.cu, dwconv_nhwc_filter.cu) share
 * beyond kernel_util.cuh (dispatch, element access): vector access, the channel width per
 * direction (pick_v, in dwconv_nhwc.cu with the widths the tests set), the shape check and
 * the folded ReLU6's clip. Include after dwconv.cuh. */
#ifndef GP_OPS_CUDA_DWCONV_NHWC_CUH
#define GP_OPS_CUDA_DWCONV_NHWC_CUH

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

/* Channels per thread by direction, measured on the H100 (mobilenet_v2 bf16, batch 256,
 * docs/log/perf-log.md): forward and backward data run faster at 4 (8-byte accesses, ~75
 * registers, 3 blocks per SM) than at 8 (~110 registers, 2 blocks), the weight gradient
 * at 8. The tests cap all three in turn (dwconv_set_widths) to check every width. */
enum { DWH_FWD, DWH_BWD_DATA, DWH_FILTER };
/* Channels per thread (8, 4, 2 or 1) for direction dir over c channels and these arrays. */
int pick_v(int dir, int c, const void *p0, const void *p1, const void *p2);

/* Whether shape a takes the tiled kernels in direction dir with these arrays (NULL counts
 * as aligned; dwconv_set_tiled can turn them off). */
int dwt_takes(int dir, const struct conv2d_args *a, const void *p0, const void *p1, const void *p2,
	      const void *p3);

static inline int dwh_check(const struct conv2d_args *a, const char *what)
{
	if (dwh_supported(a))
		return 0;
	return gp_error(GP_EINVAL,
			"16-bit depthwise %s: unsupported convolution (n %d, %d->%d channels, groups %d, "
			"%dx%d kernel, stride %d, pad %d, %dx%d -> %dx%d)",
			what, a->n, a->c_in, a->c_out, a->groups, a->kh, a->kw, a->stride, a->pad,
			a->h_in, a->w_in, a->h_out, a->w_out);
}

/* --- tiles in shared memory (3x3, pad 1, stride 1 or 2) -----------------------------------
 * The tiled kernels stage a block's whole input window (rows x columns x CB channels of
 * one image) into shared memory as float in one round of 16-byte loads, every thread's
 * loads in flight at once, each element widened (and clipped) once; the threads then
 * compute from shared memory, V = 4 channels each. The row kernels instead read every
 * input vector from L1 once per output column, at 40-55% issue, waiting on loads (ncu,
 * docs/log/perf-log.md s19). They take 3x3 pad-1 shapes with c a multiple of 8 and
 * 16-byte aligned arrays; dwt_takes says which. */
#define DWT_THREADS 256

/* Channels a block covers: the widest of 32, 16, 8 that divides c. */
static inline int dwt_cb(int c)
{
	return c % 32 == 0 ? 32 : c % 16 == 0 ? 16 : 8;
}

/* Two 16-bit values of a 32-bit word, widened. */
__device__ static inline void unpack2(__nv_bfloat16 *, uint32_t u, float &lo, float &hi)
{
	lo = __uint_as_float(u << 16);
	hi = __uint_as_float(u & 0xffff0000u);
}

__device__ static inline void unpack2(__half *, uint32_t u, float &lo, float &hi)
{
	__half2 h = *reinterpret_cast<__half2 *>(&u);
	float2 f = __half22float2(h);
	lo = f.x;
	hi = f.y;
}

/* Staging a window: rows [r0, r0 + NR) x columns [q0, q0 + NC) x channels [c0, c0 + CB)
 * of one h x w x c image at base, each thread's share of its 16-byte vectors first loaded
 * into registers (dwt_load, zeros outside the image), later widened into shared memory as
 * tile[(r * NC + q) * CB / 4 + v] (float4 v of the pixel), min(., 6) when clip6
 * (dwt_store). Between the two the thread can compute on the previous window, so that
 * the next one's loads are in flight meanwhile. */
template <int CB, int NR, int NC> struct dwt_win {
	static constexpr int NV8 = CB / 8, N = NR * NC * NV8;
	static constexpr int PER = (N + DWT_THREADS - 1) / DWT_THREADS;
};

template <typename T, int CB, int NR, int NC>
__device__ static inline void dwt_load(uint4 (&raw)[dwt_win<CB, NR, NC>::PER], const T *__restrict__ base,
				       int h, int w, int c, int r0, int q0, int c0)
{
	using W = dwt_win<CB, NR, NC>;
#pragma unroll
	for (int k = 0; k < W::PER; k++) {
		int idx = (int)threadIdx.x + k * DWT_THREADS;
		raw[k] = make_uint4(0, 0, 0, 0);
		if (idx < W::N) {
			int v8 = idx % W::NV8, pix = idx / W::NV8, q = pix % NC, r = pix / NC;
			int ih = r0 + r, iw = q0 + q;
			if (ih >= 0 && ih < h && iw >= 0 && iw < w)
				raw[k] = *reinterpret_cast<const uint4 *>(base + (ih * w + iw) * c + c0 + v8 * 8);
		}
	}
}

template <typename T, int CB, int NR, int NC>
__device__ static inline void dwt_store(float4 *tile, const uint4 (&raw)[dwt_win<CB, NR, NC>::PER], bool clip6)
{
	using W = dwt_win<CB, NR, NC>;
#pragma unroll
	for (int k = 0; k < W::PER; k++) {
		int idx = (int)threadIdx.x + k * DWT_THREADS;
		if (idx < W::N) {
			float f[8];
			unpack2((T *)0, raw[k].x, f[0], f[1]);
			unpack2((T *)0, raw[k].y, f[2], f[3]);
			unpack2((T *)0, raw[k].z, f[4], f[5]);
			unpack2((T *)0, raw[k].w, f[6], f[7]);
			if (clip6)
#pragma unroll
				for (int e = 0; e < 8; e++)
					f[e] = fminf(f[e], 6.0f);
			tile[idx * 2] = make_float4(f[0], f[1], f[2], f[3]);
			tile[idx * 2 + 1] = make_float4(f[4], f[5], f[6], f[7]);
		}
	}
}

/* a += x * w, 4 channels. */
__device__ static inline void fma4(float (&a)[4], const float4 &x, const float (&w)[4])
{
	a[0] += x.x * w[0];
	a[1] += x.y * w[1];
	a[2] += x.z * w[2];
	a[3] += x.w * w[3];
}

/* The folded ReLU6's clip on loaded input values (its other half, max(., 0), is the
 * batch norm's fused ReLU before it). */
template <int V> __device__ static inline void clip6v(float *v)
{
#pragma unroll
	for (int e = 0; e < V; e++)
		v[e] = fminf(v[e], 6.0f);
}

#endif
