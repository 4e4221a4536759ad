/* The resampler against its first, scalar form, bit for bit: image_resample_chw is
 * vectorized for speed (issue 21), and a pixel that moves by one ulp is a change of
 * output, not an optimization. The reference below is the scalar code as it was. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/image.h"
#include "data/transform.h"
#include "test.h"

struct ref_axis {
	int *lo, *cnt;
	float *w;
	int k;
};

static double ref_triangle(double x)
{
	x = fabs(x);
	return x < 1.0 ? 1.0 - x : 0.0;
}

static void ref_axis_make(double in0, double in1, int in_size, int out_size, struct ref_axis *a)
{
	double scale = (in1 - in0) / out_size;
	double filterscale = scale > 1.0 ? scale : 1.0;
	double support = filterscale;
	a->k = (int)ceil(support) * 2 + 1;
	a->lo = malloc(sizeof(int) * out_size * 2);
	a->w = malloc(sizeof(float) * (size_t)out_size * a->k);
	a->cnt = a->lo + out_size;
	for (int i = 0; i < out_size; i++) {
		double center = in0 + (i + 0.5) * scale, sum = 0;
		int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > in_size)
			hi = in_size;
		if (hi <= lo)
			hi = (lo = lo < in_size ? lo : in_size - 1) + 1;
		float *w = a->w + (size_t)i * a->k;
		for (int x = lo; x < hi; x++)
			sum += ref_triangle((x - center + 0.5) / filterscale);
		for (int x = lo; x < hi; x++)
			w[x - lo] = (float)(sum > 0 ? ref_triangle((x - center + 0.5) / filterscale) / sum
					     : 1.0 / (hi - lo));
		a->lo[i] = lo;
		a->cnt[i] = hi - lo;
	}
}

static void ref_resample_chw(const struct image *img, const struct resample_box *b, int out_w,
			     int out_h, int flip, float *out)
{
	struct ref_axis ax, ay;
	ref_axis_make(b->x0 - b->wx0, b->x1 - b->wx0, b->wx1 - b->wx0, out_w, &ax);
	ref_axis_make(b->y0 - b->wy0, b->y1 - b->wy0, b->wy1 - b->wy0, out_h, &ay);
	int row0 = ay.lo[0], row1 = ay.lo[out_h - 1] + ay.cnt[out_h - 1];
	for (int y = 0; y < out_h; y++) {
		row0 = ay.lo[y] < row0 ? ay.lo[y] : row0;
		row1 = ay.lo[y] + ay.cnt[y] > row1 ? ay.lo[y] + ay.cnt[y] : row1;
	}
	size_t row_floats = (size_t)out_w * 3;
	float *tmp = malloc(sizeof(float) * row_floats * (row1 - row0));
	for (int r = row0; r < row1; r++) {
		const uint8_t *src = img->pix + ((size_t)(b->wy0 + r) * img->w + b->wx0) * 3;
		float *t = tmp + (size_t)(r - row0) * row_floats;
		for (int x = 0; x < out_w; x++) {
			const float *w = ax.w + (size_t)x * ax.k;
			const uint8_t *s = src + (size_t)ax.lo[x] * 3;
			float acc0 = 0, acc1 = 0, acc2 = 0;
			for (int k = 0; k < ax.cnt[x]; k++) {
				acc0 += w[k] * s[3 * k];
				acc1 += w[k] * s[3 * k + 1];
				acc2 += w[k] * s[3 * k + 2];
			}
			t[3 * x] = acc0;
			t[3 * x + 1] = acc1;
			t[3 * x + 2] = acc2;
		}
	}
	float scale[3], shift[3];
	for (int ch = 0; ch < 3; ch++) {
		scale[ch] = 1.0f / (255.0f * imagenet_std[ch]);
		shift[ch] = -imagenet_mean[ch] / imagenet_std[ch];
	}
	size_t plane = (size_t)out_w * out_h;
	for (int y = 0; y < out_h; y++) {
		const float *w = ay.w + (size_t)y * ay.k;
		float *o = out + (size_t)y * out_w;
		for (int x = 0; x < out_w; x++) {
			float acc[3] = { 0, 0, 0 };
			for (int k = 0; k < ay.cnt[y]; k++) {
				const float *t = tmp + (size_t)(ay.lo[y] + k - row0) * row_floats + 3 * x;
				acc[0] += w[k] * t[0];
				acc[1] += w[k] * t[1];
				acc[2] += w[k] * t[2];
			}
			int ox = flip ? out_w - 1 - x : x;
			for (int ch = 0; ch < 3; ch++)
				o[ch * plane + ox] = acc[ch] * scale[ch] + shift[ch];
		}
	}
	free(tmp);
	free(ax.lo);
	free(ax.w);
	free(ay.lo);
	free(ay.w);
}

/* A 500 x 375 picture with texture and noise, as the generated datasets have. */
static uint8_t *textured_picture(int w, int h)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	struct rng r;
	rng_seed(&r, 7, 0);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < 3; c++) {
				double v = 128 + 90 * sin(x * (0.07 + 0.05 * c) + y * 0.11) +
					   30 * (rng_uniform(&r) - 0.5);
				p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
			}
	return p;
}

TEST(data_resample_matches_scalar_reference)
{
	int w = 500, h = 375;
	uint8_t *pic = textured_picture(w, h), *jpeg;
	size_t len;
	struct image_ctx ctx;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	CHECK_EQ_INT(image_encode_jpeg(pic, w, h, 90, &jpeg, &len), 0);
	static const int sizes[] = { 224, 32, 97 };
	float *got = malloc(sizeof(float) * 3 * 224 * 224), *want = malloc(sizeof(float) * 3 * 224 * 224);
	int compared = 0, differ = 0, scaled = 0;
	for (int s = 0; s < 3; s++)
		for (int train = 0; train < 2; train++)
			for (int i = 0; i < 40; i++) {
				int size = sizes[s];
				struct sample_geometry g;
				sample_geometry_make(train, size, sample_seed(3, s, i), w, h, &g);
				int sw = w, sh = h;
				if (i % 4) /* the loader's reduced-scale decode, and full size */
					image_pick_scale(w, h, g.need_w, g.need_h, &sw, &sh);
				struct image img;
				CHECK_EQ_INT(image_decode(&ctx, jpeg, len, IMAGE_JPEG, sw, sh, &img), 0);
				struct resample_box box = g.box;
				if (sw != w) {
					resample_box_scale(&g.box, w, h, sw, sh, &box);
					scaled++;
				}
				int flip = train ? g.flip : i % 2;
				CHECK_EQ_INT(image_resample_chw(&ctx, &img, &box, size, size, flip,
								imagenet_mean, imagenet_std, got), 0);
				ref_resample_chw(&img, &box, size, size, flip, want);
				differ += memcmp(got, want, sizeof(float) * 3 * size * size) != 0;
				compared++;
			}
	CHECK_EQ_INT(compared, 240);
	CHECK(scaled > 20); /* reduced-scale decodes were among them */
	CHECK_EQ_INT(differ, 0);
	free(got);
	free(want);
	image_jpeg_free(jpeg);
	free(pic);
	image_ctx_free(&ctx);
}

/* Encode pic with TurboJPEG at a chroma subsampling (TJSAMP_*), optionally progressive. */
static uint8_t *jpeg_make(const uint8_t *pic, int w, int h, int samp, int progressive,
			  size_t *len)
{
	tjhandle tj = tjInitCompress();
	unsigned char *buf = NULL;
	unsigned long n = 0;
	int rc = tjCompress2(tj, pic, w, 0, h, TJPF_RGB, &buf, &n, samp, 90,
			     progressive ? TJFLAG_PROGRESSIVE : 0);
	tjDestroy(tj);
	*len = n;
	return rc < 0 ? NULL : buf;
}

/* The region decode the loader uses gives, where the resampler reads, the full
 * decode's pixels bit for bit, and so the same batch: for every chroma layout, at
 * full and reduced scales, train and eval geometries. */
TEST(data_region_decode_matches_full)
{
	int w = 500, h = 375;
	uint8_t *pic = textured_picture(w, h);
	static const int samps[] = { TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY, TJSAMP_440 };
	struct image_ctx full_ctx, reg_ctx;
	CHECK_EQ_INT(image_ctx_init(&full_ctx), 0);
	CHECK_EQ_INT(image_ctx_init(&reg_ctx), 0);
	float *got = malloc(sizeof(float) * 3 * 224 * 224), *want = malloc(sizeof(float) * 3 * 224 * 224);
	int compared = 0, differ = 0, pix_differ = 0, cropped = 0;
	for (int v = 0; v < 6; v++) {
		size_t len;
		uint8_t *jpeg = jpeg_make(pic, w, h, v < 5 ? samps[v] : TJSAMP_420, v == 5, &len);
		CHECK(jpeg != NULL);
		for (int i = 0; i < 48; i++) {
			int train = i % 3 != 0, size = i % 4 == 1 ? 64 : 224;
			struct sample_geometry g;
			sample_geometry_make(train, size, sample_seed(11, v, i), w, h, &g);
			int sw = w, sh = h;
			if (i % 5)
				image_pick_scale(w, h, g.need_w, g.need_h, &sw, &sh);
			struct resample_box box = g.box;
			resample_box_scale(&g.box, w, h, sw, sh, &box);
			struct image full, reg;
			CHECK_EQ_INT(image_decode(&full_ctx, jpeg, len, IMAGE_JPEG, sw, sh, &full), 0);
			int reach[4], ox, oy;
			image_resample_reach(&box, size, size, reach);
			CHECK_EQ_INT(image_decode_region(&reg_ctx, jpeg, len, sw, sh, reach, &reg,
							 &ox, &oy), 0);
			cropped += reg.w < sw || reg.h < sh;
			for (int y = reach[1]; y < reach[3]; y++)
				pix_differ += memcmp(full.pix + ((size_t)y * sw + reach[0]) * 3,
						     reg.pix + ((size_t)(y - oy) * reg.w + reach[0] - ox) * 3,
						     (size_t)(reach[2] - reach[0]) * 3) != 0;
			CHECK_EQ_INT(image_resample_chw(&full_ctx, &full, &box, size, size, g.flip,
							imagenet_mean, imagenet_std, want), 0);
			struct resample_box moved = box;
			moved.x0 -= ox;
			moved.x1 -= ox;
			moved.wx0 -= ox;
			moved.wx1 -= ox;
			moved.y0 -= oy;
			moved.y1 -= oy;
			moved.wy0 -= oy;
			moved.wy1 -= oy;
			CHECK_EQ_INT(image_resample_chw(&reg_ctx, &reg, &moved, size, size, g.flip,
							imagenet_mean, imagenet_std, got), 0);
			differ += memcmp(got, want, sizeof(float) * 3 * size * size) != 0;
			compared++;
		}
		/* Cut short, the file fails whatever part is asked for, as a full decode does. */
		int top[4] = { 0, 0, 64, 32 };
		struct image reg;
		int ox, oy;
		CHECK_EQ_INT(image_decode_region(&reg_ctx, jpeg, len * 2 / 3, w, h, top, &reg, &ox, &oy),
			     -4);
		CHECK_MSG(strstr(gp_errmsg(), "Premature end of JPEG file") != NULL, "%s", gp_errmsg());
		gp_error_clear();
		tjFree(jpeg);
	}
	CHECK_EQ_INT(compared, 288);
	CHECK(cropped > 200); /* most decodes were partial */
	CHECK_EQ_INT(pix_differ, 0);
	CHECK_EQ_INT(differ, 0);
	free(got);
	free(want);
	free(pic);
	image_ctx_free(&full_ctx);
	image_ctx_free(&reg_ctx);
}

/* A region whose reach leaves the decoded pixels is refused, not read past. */
TEST(data_resample_refuses_reads_outside_image)
{
	uint8_t pix[4 * 4 * 3] = { 0 };
	struct image img = { pix, 4, 4 };
	struct resample_box b = { 0, 0, 8, 8, 0, 0, 8, 8 };
	struct image_ctx ctx;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	float out[3 * 2 * 2];
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 2, 2, 0, imagenet_mean, imagenet_std, out),
		     GP_EINVAL);
	gp_error_clear();
	image_ctx_free(&ctx);
}
