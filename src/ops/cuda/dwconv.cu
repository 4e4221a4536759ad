/* Depthwise convolution kernels (groups == c_in == c_out): forward, the input gradient
 * (a gather, so no atomics) and the weight gradient (a two-pass, fixed-order
 * reduction), behind one launcher per direction taking the element type (this file).
 * Float runs NCHW kernels (dwconv_f32.cu), fp16 and bf16 NHWC kernels from one templated
 * source (dwconv_nhwc.cu, and dwconv_nhwc_filter.cu for the weight gradient): the two
 * differ in how threads map onto the data, each as its layout reads best. The 3x3 case
 * of MobileNetV2 is templated on the stride; any other odd k up to 7 takes a generic path
 * with the sizes read at run time.
 * Results do not depend on the run: every reduction sums in a fixed order. */
#include "ops/cuda/dwconv.cuh"

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
