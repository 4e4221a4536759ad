/* Fast float convolution and linear layers: im2col per image and group, then one
 * OpenBLAS sgemm (blas.h; it brings its own threads). Same contract as the reference
 * kernels, and tested against them. Per group, with K = c_in/groups * kh * kw:
 *   forward      Y[cog][HW] = W[cog][K] * col[K][HW]
 *   bwd data     col[K][HW] = W^T * dY, then scattered back (col2im)
 *   bwd filter   dW[cog][K] += dY * col^T, summed over images */
#include <string.h>

#include "ops/cpu/blas.h"
#include "ops/ops.h"

/* A 1x1, stride-1, unpadded convolution reads its input plane as the column
 * matrix itself. */
static int conv_is_pointwise(const struct conv2d_args *a)
{
	return a->kh == 1 && a->kw == 1 && a->stride == 1 && a->pad == 0;
}

/* One input channel per group: K is 9 or so and sgemm would be mostly overhead. */
static int conv_is_depthwise(const struct conv2d_args *a)
{
	return a->groups > 1 && a->groups == a->c_in && a->groups == a->c_out;
}

/* The output columns [lo, hi) whose window cell kx falls inside the input row:
 * 0 <= ow * stride - pad + kx < w_in. */
static void conv_valid_cols(const struct conv2d_args *a, int kx, int *lo, int *hi)
{
	int first = a->pad - kx, last = a->w_in - 1 + a->pad - kx;
	*lo = first > 0 ? (first + a->stride - 1) / a->stride : 0;
	*hi = last < 0 ? 0 : last / a->stride + 1;
	if (*hi > a->w_out)
		*hi = a->w_out;
}

/* db[c] = sum of dy over the batch and the plane, accumulated in double. */
static void conv_bias_grad(const struct conv2d_args *a, const float *dy, float *db)
{
	size_t hw_out = (size_t)a->h_out * a->w_out;
	for (int c = 0; c < a->c_out; c++) {
		double sum = 0.0;
		for (int n = 0; n < a->n; n++) {
			const float *plane = dy + ((size_t)n * a->c_out + c) * hw_out;
			for (size_t i = 0; i < hw_out; i++)
				sum += plane[i];
		}
		db[c] = (float)sum;
	}
}

/* Depthwise convolution as direct loops over each plane: for every kernel cell, a
 * contiguous run of output columns reads a strided run of one input row, with the
 * padding handled once per row instead of per element. */
static void depthwise_fwd(const struct conv2d_args *a, const float *x, const float *w,
			  const float *b, float *y)
{
	size_t hw_in = (size_t)a->h_in * a->w_in, hw_out = (size_t)a->h_out * a->w_out;
	for (int n = 0; n < a->n; n++)
	for (int c = 0; c < a->c_in; c++) {
		const float *xp = x + ((size_t)n * a->c_in + c) * hw_in;
		const float *wc = w + (size_t)c * a->kh * a->kw;
		float *yp = y + ((size_t)n * a->c_out + c) * hw_out;
		for (int oh = 0; oh < a->h_out; oh++) {
			float *row = yp + (size_t)oh * a->w_out;
			float init = a->has_bias ? b[c] : 0.0f;
			for (int ow = 0; ow < a->w_out; ow++)
				row[ow] = init;
			for (int ky = 0; ky < a->kh; ky++) {
				int ih = oh * a->stride - a->pad + ky;
				if (ih < 0 || ih >= a->h_in)
					continue;
				for (int kx = 0; kx < a->kw; kx++) {
					int lo, hi;
					float wv = wc[ky * a->kw + kx];
					const float *xr = xp + (size_t)ih * a->w_in;
					conv_valid_cols(a, kx, &lo, &hi);
					for (int ow = lo; ow < hi; ow++)
						row[ow] += wv * xr[ow * a->stride - a->pad + kx];
				}
			}
		}
	}
}

static void depthwise_bwd_data(const struct conv2d_args *a, const float *dy, const float *w,
			       float *dx, int accumulate)
{
	size_t hw_in = (size_t)a->h_in * a->w_in, hw_out = (size_t)a->h_out * a->w_out;
	if (!accumulate)
		memset(dx, 0, (size_t)a->n * a->c_in * hw_in * sizeof(*dx));
	for (int n = 0; n < a->n; n++)
	for (int c = 0; c < a->c_in; c++) {
		const float *dyp = dy + ((size_t)n * a->c_out + c) * hw_out;
		const float *wc = w + (size_t)c * a->kh * a->kw;
		float *dxp = dx + ((size_t)n * a->c_in + c) * hw_in;
		for (int oh = 0; oh < a->h_out; oh++) {
			const float *row = dyp + (size_t)oh * a->w_out;
			for (int ky = 0; ky < a->kh; ky++) {
				int ih = oh * a->stride - a->pad + ky;
				if (ih < 0 || ih >= a->h_in)
					continue;
				for (int kx = 0; kx < a->kw; kx++) {
					int lo, hi;
					float wv = wc[ky * a->kw + kx];
					float *dxr = dxp + (size_t)ih * a->w_in;
					conv_valid_cols(a, kx, &lo, &hi);
					for (int ow = lo; ow < hi; ow++)
						dxr[ow * a->stride - a->pad + kx] += wv * row[ow];
				}
			}
		}
	}
}

/* Each weight's gradient sums rows in float and the rows in double: the sum runs
 * over the whole batch. */
static void depthwise_bwd_filter(const struct conv2d_args *a, const float *x, const float *dy,
				 float *dw, float *db)
{
	size_t hw_in = (size_t)a->h_in * a->w_in, hw_out = (size_t)a->h_out * a->w_out;
	for (int c = 0; c < a->c_in; c++)
	for (int ky = 0; ky < a->kh; ky++)
	for (int kx = 0; kx < a->kw; kx++) {
		int lo, hi;
		double sum = 0.0;
		conv_valid_cols(a, kx, &lo, &hi);
		for (int n = 0; n < a->n; n++) {
			const float *xp = x + ((size_t)n * a->c_in + c) * hw_in;
			const float *dyp = dy + ((size_t)n * a->c_out + c) * hw_out;
			for (int oh = 0; oh < a->h_out; oh++) {
				int ih = oh * a->stride - a->pad + ky;
				if (ih < 0 || ih >= a->h_in)
					continue;
				const float *xr = xp + (size_t)ih * a->w_in;
				const float *row = dyp + (size_t)oh * a->w_out;
				float part = 0.0f;
				for (int ow = lo; ow < hi; ow++)
					part += row[ow] * xr[ow * a->stride - a->pad + kx];
				sum += part;
			}
		}
		dw[((size_t)c * a->kh + ky) * a->kw + kx] = (float)sum;
	}
	if (db && a->has_bias)
		conv_bias_grad(a, dy, db);
}

size_t conv2d_fast_workspace_floats(const struct conv2d_args *a)
{
	if (conv_is_pointwise(a) || conv_is_depthwise(a))
		return 0;
	return (size_t)(a->c_in / a->groups) * a->kh * a->kw * a->h_out * a->w_out;
}

/* col[(ic * kh + ky) * kw + kx][oh * w_out + ow] = x[ic][ih][iw], 0 in the padding;
 * x points at the group's first channel of one image. */
static void im2col(const struct conv2d_args *a, const float *x, float *col)
{
	int cig = a->c_in / a->groups;
	size_t hw_out = (size_t)a->h_out * a->w_out;
	for (int ic = 0; ic < cig; ic++)
	for (int ky = 0; ky < a->kh; ky++)
	for (int kx = 0; kx < a->kw; kx++) {
		float *row = col + ((size_t)(ic * a->kh + ky) * a->kw + kx) * hw_out;
		const float *plane = x + (size_t)ic * a->h_in * a->w_in;
		for (int oh = 0; oh < a->h_out; oh++) {
			float *out = row + (size_t)oh * a->w_out;
			int ih = oh * a->stride - a->pad + ky;
			if (ih < 0 || ih >= a->h_in) {
				memset(out, 0, a->w_out * sizeof(*out));
				continue;
			}
			for (int ow = 0; ow < a->w_out; ow++) {
				int iw = ow * a->stride - a->pad + kx;
				out[ow] = iw >= 0 && iw < a->w_in ? plane[ih * a->w_in + iw] : 0.0f;
			}
		}
	}
}

/* The adjoint of im2col: adds every column entry back onto the input cell it came
 * from (cells covered by several windows receive several terms). */
static void col2im_add(const struct conv2d_args *a, const float *col, float *dx)
{
	int cig = a->c_in / a->groups;
	size_t hw_out = (size_t)a->h_out * a->w_out;
	for (int ic = 0; ic < cig; ic++)
	for (int ky = 0; ky < a->kh; ky++)
	for (int kx = 0; kx < a->kw; kx++) {
		const float *row = col + ((size_t)(ic * a->kh + ky) * a->kw + kx) * hw_out;
		float *plane = dx + (size_t)ic * a->h_in * a->w_in;
		for (int oh = 0; oh < a->h_out; oh++) {
			int ih = oh * a->stride - a->pad + ky;
			if (ih < 0 || ih >= a->h_in)
				continue;
			for (int ow = 0; ow < a->w_out; ow++) {
				int iw = ow * a->stride - a->pad + kx;
				if (iw >= 0 && iw < a->w_in)
					plane[ih * a->w_in + iw] += row[(size_t)oh * a->w_out + ow];
			}
		}
	}
}

void conv2d_fwd_fast_f32(const struct conv2d_args *a, const float *x, const float *w,
			 const float *b, float *y, float *workspace)
{
	if (conv_is_depthwise(a)) {
		depthwise_fwd(a, x, w, b, y);
		return;
	}
	int cig = a->c_in / a->groups, cog = a->c_out / a->groups;
	int k = cig * a->kh * a->kw;
	size_t hw_in = (size_t)a->h_in * a->w_in, hw_out = (size_t)a->h_out * a->w_out;
	for (int n = 0; n < a->n; n++)
		for (int g = 0; g < a->groups; g++) {
			const float *xg = x + ((size_t)n * a->c_in + (size_t)g * cig) * hw_in;
			float *yg = y + ((size_t)n * a->c_out + (size_t)g * cog) * hw_out;
			const float *col = xg;
			if (!conv_is_pointwise(a)) {
				im2col(a, xg, workspace);
				col = workspace;
			}
			blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, cog, (int)hw_out, k,
				    1.0f, w + (size_t)g * cog * k, k, col, (int)hw_out,
				    0.0f, yg, (int)hw_out);
		}
	if (!a->has_bias)
		return;
	for (int n = 0; n < a->n; n++)
		for (int oc = 0; oc < a->c_out; oc++) {
			float *plane = y + ((size_t)n * a->c_out + oc) * hw_out;
			for (size_t i = 0; i < hw_out; i++)
				plane[i] += b[oc];
		}
}

void conv2d_bwd_data_fast_f32(const struct conv2d_args *a, const float *dy, const float *w,
			      float *dx, int accumulate, float *workspace)
{
	if (conv_is_depthwise(a)) {
		depthwise_bwd_data(a, dy, w, dx, accumulate);
		return;
	}
	int cig = a->c_in / a->groups, cog = a->c_out / a->groups;
	int k = cig * a->kh * a->kw;
	size_t hw_in = (size_t)a->h_in * a->w_in, hw_out = (size_t)a->h_out * a->w_out;
	int pointwise = conv_is_pointwise(a);
	/* col2im adds, so an overwrite starts from zero; the pointwise gemm writes dx
	 * directly and takes accumulate as its beta. */
	if (!pointwise && !accumulate)
		memset(dx, 0, (size_t)a->n * a->c_in * hw_in * sizeof(*dx));
	for (int n = 0; n < a->n; n++)
		for (int g = 0; g < a->groups; g++) {
			const float *dyg = dy + ((size_t)n * a->c_out + (size_t)g * cog) * hw_out;
			const float *wg = w + (size_t)g * cog * k;
			float *dxg = dx + ((size_t)n * a->c_in + (size_t)g * cig) * hw_in;
			if (pointwise) {
				blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, (int)hw_out,
					    cog, 1.0f, wg, k, dyg, (int)hw_out,
					    accumulate ? 1.0f : 0.0f, dxg, (int)hw_out);
				continue;
			}
			blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, (int)hw_out, cog,
				    1.0f, wg, k, dyg, (int)hw_out, 0.0f, workspace, (int)hw_out);
			col2im_add(a, workspace, dxg);
		}
}

void conv2d_bwd_filter_fast_f32(const struct conv2d_args *a, const float *x, const float *dy,
				float *dw, float *db, float *workspace)
{
	if (conv_is_depthwise(a)) {
		depthwise_bwd_filter(a, x, dy, dw, db);
		return;
	}
	int cig = a->c_in / a->groups, cog = a->c_out / a->groups;
	int k = cig * a->kh * a->kw;
	size_t hw_in = (size_t)a->h_in * a->w_in, hw_out = (size_t)a->h_out * a->w_out;
	for (int n = 0; n < a->n; n++)
		for (int g = 0; g < a->groups; g++) {
			const float *xg = x + ((size_t)n * a->c_in + (size_t)g * cig) * hw_in;
			const float *dyg = dy + ((size_t)n * a->c_out + (size_t)g * cog) * hw_out;
			const float *col = xg;
			if (!conv_is_pointwise(a)) {
				im2col(a, xg, workspace);
				col = workspace;
			}
			/* The first image overwrites dw, the others add to it. */
			blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, cog, k, (int)hw_out,
				    1.0f, dyg, (int)hw_out, col, (int)hw_out, n ? 1.0f : 0.0f,
				    dw + (size_t)g * cog * k, k);
		}
	if (db && a->has_bias)
		conv_bias_grad(a, dy, db);
}

/* y[N][out] = x[N][in] * W^T, bias added after. */
void linear_fwd_fast_f32(const struct linear_args *a, const float *x, const float *w,
			 const float *b, float *y)
{
	blas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->n, a->out, a->in, 1.0f, x,
		    a->in, w, a->in, 0.0f, y, a->out);
	if (!a->has_bias)
		return;
	for (int n = 0; n < a->n; n++)
		for (int o = 0; o < a->out; o++)
			y[(size_t)n * a->out + o] += b[o];
}

/* dx[N][in] = dy[N][out] * W[out][in]. */
void linear_bwd_data_fast_f32(const struct linear_args *a, const float *dy, const float *w,
			      float *dx, int accumulate)
{
	blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a->n, a->in, a->out, 1.0f, dy,
		    a->out, w, a->in, accumulate ? 1.0f : 0.0f, dx, a->in);
}

/* dW[out][in] = dy^T * x; db = column sums of dy. */
void linear_bwd_weight_fast_f32(const struct linear_args *a, const float *x, const float *dy,
				float *dw, float *db)
{
	blas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, a->out, a->in, a->n, 1.0f, dy,
		    a->out, x, a->in, 0.0f, dw, a->in);
	if (!db || !a->has_bias)
		return;
	for (int o = 0; o < a->out; o++) {
		double sum = 0.0;
		for (int n = 0; n < a->n; n++)
			sum += dy[(size_t)n * a->out + o];
		db[o] = (float)sum;
	}
}
