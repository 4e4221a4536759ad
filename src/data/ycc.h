/* libjpeg-turbo's last two decoding steps, as integer arithmetic that both the CPU
 * (tests) and the GPU (data/cuda/gpu_augment.cu) compile: "fancy" chroma upsampling
 * (a triangle filter, 3/4 of the nearer chroma sample and 1/4 of the farther, per
 * axis, with libjpeg's rounding biases) and the fixed-point YCbCr -> RGB conversion
 * (16 fraction bits, each table entry rounded as libjpeg rounds it).
 *
 * Why: nvJPEG (its hardware engines at least) upsamples chroma by repeating each
 * sample, so at a sharp colour edge its RGB differs from TurboJPEG's by up to a
 * quarter of the chroma step (65/255 measured on `dataset make`'s images). Asking
 * nvJPEG for the planes (NVJPEG_OUTPUT_YUV) and finishing here gives TurboJPEG's
 * pixels wherever the two IDCTs agree (tests/test_ycc.c checks this header against
 * TurboJPEG bit for bit). */
#ifndef GP_DATA_YCC_H
#define GP_DATA_YCC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define YCC_FN static inline __host__ __device__
#else
#define YCC_FN static inline
#endif

/* One chroma plane of a decoded JPEG: cw x ch samples, pitch bytes a row, covering
 * the image at hs x vs image pixels a sample (1 or 2 on each axis). */
struct ycc_plane {
	const uint8_t *p;
	size_t pitch;
	int cw, ch, hs, vs;
};

YCC_FN int ycc_clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* The chroma value at image pixel (x, y). libjpeg works row by row: vertically the
 * nearer row counts 3, the farther 1 (the row above for an even output row, below
 * for an odd one, edge rows repeated); horizontally the same on the column sums,
 * with biases 8 (left half) and 7 (right half) before the shift by 4. The edge
 * columns' special cases of libjpeg equal this with the neighbour clamped. Only
 * h2v1 is done with its own weights (biases 1 and 2, shift 2). */
YCC_FN int ycc_chroma_at(const struct ycc_plane *c, int x, int y)
{
	int i = x >> (c->hs - 1), r = y >> (c->vs - 1); /* x / hs, y / vs for 1 or 2 */
	if (c->hs == 1 && c->vs == 1)
		return c->p[(size_t)r * c->pitch + i];
	int in = ycc_clampi((x & 1) ? i + 1 : i - 1, 0, c->cw - 1);
	if (c->vs == 1) {
		const uint8_t *row = c->p + (size_t)r * c->pitch;
		return (3 * row[i] + row[in] + ((x & 1) ? 2 : 1)) >> 2;
	}
	int rn = ycc_clampi((y & 1) ? r + 1 : r - 1, 0, c->ch - 1);
	const uint8_t *near = c->p + (size_t)r * c->pitch, *far = c->p + (size_t)rn * c->pitch;
	int this_sum = 3 * near[i] + far[i], next_sum = 3 * near[in] + far[in];
	return (3 * this_sum + next_sum + ((x & 1) ? 7 : 8)) >> 4;
}

#define YCC_SCALEBITS 16
#define YCC_ONE_HALF (1 << (YCC_SCALEBITS - 1))
/* FIX(x) of libjpeg: x in 16.16 fixed point, rounded. */
#define YCC_FIX_1_40200 91881
#define YCC_FIX_1_77200 116130
#define YCC_FIX_0_71414 46802
#define YCC_FIX_0_34414 22554

/* An arithmetic right shift (libjpeg's RIGHT_SHIFT: floor for negatives). */
YCC_FN int ycc_shift(int v)
{
	return v >= 0 ? v >> YCC_SCALEBITS : -((-v + (1 << YCC_SCALEBITS) - 1) >> YCC_SCALEBITS);
}

/* ycc_rgb_convert of jdcolor.c: red and blue from rounded table entries, green
 * from the two unrounded products plus one half, then clamped to 0..255. */
YCC_FN void ycc_to_rgb(int y, int cb, int cr, uint8_t *rgb)
{
	int xb = cb - 128, xr = cr - 128;
	int r = y + ycc_shift(YCC_FIX_1_40200 * xr + YCC_ONE_HALF);
	int g = y + ycc_shift(-YCC_FIX_0_34414 * xb + YCC_ONE_HALF - YCC_FIX_0_71414 * xr);
	int b = y + ycc_shift(YCC_FIX_1_77200 * xb + YCC_ONE_HALF);
	rgb[0] = (uint8_t)ycc_clampi(r, 0, 255);
	rgb[1] = (uint8_t)ycc_clampi(g, 0, 255);
	rgb[2] = (uint8_t)ycc_clampi(b, 0, 255);
}

/* Pixel (x, y) of a decoded 3-component JPEG from its planes. */
YCC_FN void ycc_pixel(const uint8_t *yp, size_t y_pitch, const struct ycc_plane *cb,
		      const struct ycc_plane *cr, int x, int y, uint8_t *rgb)
{
	ycc_to_rgb(yp[(size_t)y * y_pitch + x], ycc_chroma_at(cb, x, y), ycc_chroma_at(cr, x, y),
		   rgb);
}

/* Pixels x .. x + n - 1 (x even, 1 <= n <= 4) of row y of a 4:2:0 (h2v2) image, as
 * ycc_pixel gives them, into rgb (3 n bytes): the four pixels share their chroma
 * columns x / 2 - 1 .. x / 2 + 2, so each plane is read 8 times for four pixels
 * instead of 16, and each column's vertical sum is made once. */
YCC_FN void ycc_quad_h2v2(const uint8_t *yp, size_t y_pitch, const struct ycc_plane *cb,
			  const struct ycc_plane *cr, int x, int y, int n, uint8_t *rgb)
{
	int i = x >> 1, col[4];
	for (int k = 0; k < 4; k++)
		col[k] = ycc_clampi(i - 1 + k, 0, cb->cw - 1);
	int r = y >> 1, rn = ycc_clampi((y & 1) ? r + 1 : r - 1, 0, cb->ch - 1);
	int sb[4], sr[4];
	const uint8_t *bn = cb->p + (size_t)r * cb->pitch, *bf = cb->p + (size_t)rn * cb->pitch;
	const uint8_t *rn_ = cr->p + (size_t)r * cr->pitch, *rf = cr->p + (size_t)rn * cr->pitch;
	for (int k = 0; k < 4; k++) {
		sb[k] = 3 * bn[col[k]] + bf[col[k]];
		sr[k] = 3 * rn_[col[k]] + rf[col[k]];
	}
	const uint8_t *yr = yp + (size_t)y * y_pitch + x;
	for (int k = 0; k < n; k++) {
		/* pixel x + k: its own column (k >> 1) + 1, its neighbour one to the left for
		 * an even pixel, to the right for an odd one */
		int self = (k >> 1) + 1, nb = (k & 1) ? self + 1 : self - 1, bias = (k & 1) ? 7 : 8;
		ycc_to_rgb(yr[k], (3 * sb[self] + sb[nb] + bias) >> 4,
			   (3 * sr[self] + sr[nb] + bias) >> 4, rgb + 3 * k);
	}
}

/* The region to have the JPEG decoder make so that ycc_pixel gives every pixel of
 * reach[] = {x0, y0, x1, y1} (image pixels, x1 and y1 past the end) of a w x h image
 * with chroma at hs x vs pixels a sample: the reach widened by one chroma sample each
 * side (the upsampling's neighbour), out to whole MCUs (8 hs x 8 vs pixels) and
 * clipped to the image, into roi[] in the same form. The region's chroma planes then
 * start at chroma sample (roi[0] / hs, roi[1] / vs) exactly, and decoding it costs
 * the decoder only the MCUs the reach touches. */
YCC_FN void ycc_roi(int w, int h, int hs, int vs, const int reach[4], int roi[4])
{
	int mw = 8 * hs, mh = 8 * vs;
	int x0 = reach[0] - hs, y0 = reach[1] - vs, x1 = reach[2] + hs, y1 = reach[3] + vs;
	x0 = x0 < 0 ? 0 : x0 / mw * mw;
	y0 = y0 < 0 ? 0 : y0 / mh * mh;
	x1 = (x1 + mw - 1) / mw * mw;
	y1 = (y1 + mh - 1) / mh * mh;
	roi[0] = x0;
	roi[1] = y0;
	roi[2] = x1 > w ? w : x1;
	roi[3] = y1 > h ? h : y1;
}

#endif
