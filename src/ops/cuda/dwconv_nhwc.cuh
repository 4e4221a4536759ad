/* What the two 16-bit NHWC depthwise files (dwconv_nhwc.cu, dwconv_nhwc_filter.cu) share:
 * the dtype dispatch of their templated launchers, element access, the channel width per
 * direction (pick_v, in dwconv_nhwc.cu with the widths the tests set), the shape check and
 * the folded ReLU6's clip. Include after dwconv.cuh. */
#ifndef GP_OPS_CUDA_DWCONV_NHWC_CUH
#define GP_OPS_CUDA_DWCONV_NHWC_CUH


static inline int bad_dtype(enum gp_dtype ht)
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

/* Channels per thread by direction, measured on the H100 (mobilenet_v2 bf16, batch 256,
 * docs/log/perf-log.md): forward and backward data run faster at 4 (8-byte accesses, ~75
 * registers, 3 blocks per SM) than at 8 (~110 registers, 2 blocks), the weight gradient
 * at 8. The tests cap all three in turn (dwconv_set_widths) to check every width. */
enum { DWH_FWD, DWH_BWD_DATA, DWH_FILTER };
/* Channels per thread (8, 4, 2 or 1) for direction dir over c channels and these arrays. */
int pick_v(int dir, int c, const void *p0, const void *p1, const void *p2);

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

/* The folded ReLU6's clip on loaded input values (its other half, max(., 0), is the
 * batch norm's fused ReLU before it). */
template <int V> __device__ static inline void clip6v(float *v)
{
#pragma unroll
	for (int e = 0; e < V; e++)
		v[e] = fminf(v[e], 6.0f);
}

#endif
