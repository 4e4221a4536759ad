/* Transforms and resampling against hand-computed values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/image.h"
#include "data/transform.h"
#include "test.h"

static float norm_of(int v, int c)
{
	return (v / 255.0f - imagenet_mean[c]) / imagenet_std[c];
}

/* Back from normalized units to 0..255. */
static double unnorm(float v, int c)
{
	return (v * imagenet_std[c] + imagenet_mean[c]) * 255.0;
}

TEST(data_normalize_and_flip_by_hand)
{
	/* 2x2 RGB: pixel (x, y) channel c = 10 * (2y + x) + 50c */
	uint8_t pix[12];
	for (int i = 0; i < 4; i++)
		for (int c = 0; c < 3; c++)
			pix[i * 3 + c] = (uint8_t)(10 * i + 50 * c);
	struct image img = { pix, 2, 2 };
	struct crop_box all = { 0, 0, 2, 2 };
	struct resample_box b;
	struct image_ctx ctx = { 0 };
	float out[12];
	crop_resample_box(&all, &b);
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 2, 2, 0, imagenet_mean, imagenet_std, out), 0);
	for (int c = 0; c < 3; c++)
		for (int i = 0; i < 4; i++)
			CHECK_NEAR(out[c * 4 + i], norm_of(10 * i + 50 * c, c), 1e-5);
	CHECK_NEAR(out[0], (0 / 255.0 - 0.485) / 0.229, 1e-5);
	CHECK_NEAR(out[4 + 3], (80 / 255.0 - 0.456) / 0.224, 1e-5);
	/* Flipped: column x reads column 1 - x. */
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 2, 2, 1, imagenet_mean, imagenet_std, out), 0);
	for (int c = 0; c < 3; c++)
		for (int y = 0; y < 2; y++)
			for (int x = 0; x < 2; x++)
				CHECK_NEAR(out[c * 4 + y * 2 + x],
					   norm_of(10 * (2 * y + 1 - x) + 50 * c, c), 1e-5);
	image_ctx_free(&ctx);
}

TEST(data_center_crop_by_hand)
{
	/* 6x4 image, Resize(4) keeps it (shorter side already 4), CenterCrop(2):
	 * left = round(4 / 2) = 2, top = round(2 / 2) = 1. */
	uint8_t pix[6 * 4 * 3];
	for (int i = 0; i < 24; i++)
		for (int c = 0; c < 3; c++)
			pix[i * 3 + c] = (uint8_t)(i * 10 + c);
	struct image img = { pix, 6, 4 };
	struct resample_box b;
	struct image_ctx ctx = { 0 };
	float out[12];
	eval_resample_box(6, 4, 4, 2, &b);
	CHECK_NEAR(b.x0, 2, 1e-12);
	CHECK_NEAR(b.y0, 1, 1e-12);
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 2, 2, 0, imagenet_mean, imagenet_std, out), 0);
	for (int c = 0; c < 3; c++)
		for (int y = 0; y < 2; y++)
			for (int x = 0; x < 2; x++)
				CHECK_NEAR(out[c * 4 + y * 2 + x],
					   norm_of(((1 + y) * 6 + 2 + x) * 10 + c, c), 1e-5);
	/* Python's round: halves to even. */
	CHECK_EQ_INT(center_crop_offset(5, 2), 2);
	CHECK_EQ_INT(center_crop_offset(7, 2), 2);
	CHECK_EQ_INT(center_crop_offset(9, 2), 4);
	int w, h;
	resize_short_side(500, 375, 256, &w, &h);
	CHECK_EQ_INT(w, 341);
	CHECK_EQ_INT(h, 256);
	resize_short_side(375, 500, 256, &w, &h);
	CHECK_EQ_INT(w, 256);
	CHECK_EQ_INT(h, 341);
	CHECK_EQ_INT(eval_resize_size(224), 256);
	image_ctx_free(&ctx);
}

TEST(data_rrc_params_in_range_and_fallback)
{
	int tries_seen[12] = { 0 };
	for (uint64_t s = 0; s < 2000; s++) {
		struct rng r;
		struct crop_box c;
		rng_seed(&r, s, 0);
		int tries = rrc_get_params(&r, 500, 375, &c);
		CHECK(tries >= 1 && tries <= 11);
		tries_seen[tries]++;
		CHECK(c.x >= 0 && c.y >= 0 && c.x + c.w <= 500 && c.y + c.h <= 375);
		if (tries > 10)
			continue;
		/* Rounding w and h moves area and ratio a little past the bounds. */
		double area = (double)c.w * c.h / (500.0 * 375.0), ratio = (double)c.w / c.h;
		CHECK_MSG(area >= 0.08 * 0.97 && area <= 1.0, "area %g", area);
		CHECK_MSG(ratio >= 0.75 * 0.97 && ratio <= 4.0 / 3.0 * 1.03, "ratio %g", ratio);
	}
	CHECK(tries_seen[1] > 1500); /* most first tries fit a 4:3 image */
	CHECK(tries_seen[2] > 0);

	/* A strip no crop of ratio >= 3/4 and area >= 8% fits: the fallback. */
	struct rng r;
	struct crop_box c;
	rng_seed(&r, 1, 0);
	CHECK_EQ_INT(rrc_get_params(&r, 1000, 10, &c), 11);
	CHECK_EQ_INT(c.w, 13); /* round(10 * 4/3) */
	CHECK_EQ_INT(c.h, 10);
	CHECK_EQ_INT(c.x, 493);
	CHECK_EQ_INT(c.y, 0);
	rrc_fallback(10, 1000, &c);
	CHECK_EQ_INT(c.w, 10);
	CHECK_EQ_INT(c.h, 13); /* round(10 / (3/4)) */
	CHECK_EQ_INT(c.y, 493);
	rrc_fallback(300, 280, &c); /* ratio inside the range: the whole image */
	CHECK(c.x == 0 && c.y == 0 && c.w == 300 && c.h == 280);
}

TEST(data_resample_constant_stays_constant)
{
	int w = 37, h = 23;
	uint8_t *pix = malloc((size_t)w * h * 3);
	for (int i = 0; i < w * h * 3; i++)
		pix[i] = (uint8_t)(100 + i % 3 * 20);
	struct image img = { pix, w, h };
	struct image_ctx ctx = { 0 };
	const int outs[3][2] = { { 8, 5 }, { 50, 40 }, { 3, 17 } };
	struct resample_box b = { 3.3, 1.7, 30.1, 20.2, 2, 1, 31, 21 };
	for (int k = 0; k < 3; k++) {
		int ow = outs[k][0], oh = outs[k][1];
		float *out = malloc(sizeof(float) * 3 * ow * oh);
		CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, ow, oh, k == 1, imagenet_mean,
						imagenet_std, out), 0);
		for (int c = 0; c < 3; c++)
			for (int i = 0; i < ow * oh; i++)
				CHECK_NEAR(out[c * ow * oh + i], norm_of(100 + 20 * c, c), 1e-4);
		free(out);
	}
	free(pix);
	image_ctx_free(&ctx);
}

TEST(data_resample_ramp_stays_ramp)
{
	/* value(x) = 2x: a linear function survives the triangle filter exactly
	 * wherever the filter does not reach an edge. */
	int w = 100, h = 3;
	uint8_t *pix = malloc((size_t)w * h * 3);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < 3; c++)
				pix[(y * w + x) * 3 + c] = (uint8_t)(2 * x);
	struct image img = { pix, w, h };
	struct image_ctx ctx = { 0 };
	struct crop_box all = { 0, 0, w, h };
	struct resample_box b;
	crop_resample_box(&all, &b);
	float down[3 * 33], up[3 * 400];
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 25, 1, 0, imagenet_mean, imagenet_std, down), 0);
	for (int x = 1; x < 24; x++) /* output x sits at source x' = 4x + 1.5 */
		CHECK_NEAR(unnorm(down[x], 0), 2 * (4 * x + 1.5), 1e-3);
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 400, 1, 0, imagenet_mean, imagenet_std, up), 0);
	for (int x = 4; x < 396; x++) /* x' = (x + 0.5) / 4 - 0.5 */
		CHECK_NEAR(unnorm(up[2 * 400 + x], 2), 2 * ((x + 0.5) / 4 - 0.5), 1e-3);
	/* Stripes 0, 255, 0, ... shrunk by 3: each output centre falls on one source
	 * pixel (3x + 1, bright for even x), so plain bilinear would give 0 or 255;
	 * the widened filter averages
	 * 5 pixels (weights 1/3, 2/3, 1, 2/3, 1/3) to 113 or 142. */
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < 3; c++)
				pix[(y * w + x) * 3 + c] = (uint8_t)(x % 2 ? 255 : 0);
	struct crop_box c99 = { 0, 0, 99, h };
	crop_resample_box(&c99, &b);
	CHECK_EQ_INT(image_resample_chw(&ctx, &img, &b, 33, 1, 0, imagenet_mean, imagenet_std, down), 0);
	for (int x = 1; x < 32; x++)
		CHECK_NEAR(unnorm(down[x], 0), x % 2 ? 255 * 4.0 / 9 : 255 * 5.0 / 9, 1e-3);
	free(pix);
	image_ctx_free(&ctx);
}

/* A smooth colourful test picture. */
static uint8_t *picture_make(int w, int h)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			p[(y * w + x) * 3] = (uint8_t)(255 * x / (w - 1));
			p[(y * w + x) * 3 + 1] = (uint8_t)(255 * y / (h - 1));
			p[(y * w + x) * 3 + 2] = (uint8_t)(128 + 100 * sin(x * 0.1) * cos(y * 0.1));
		}
	return p;
}

TEST(data_jpeg_roundtrip)
{
	int w = 64, h = 48;
	uint8_t *pic = picture_make(w, h), *jpeg;
	size_t len;
	struct image_ctx ctx;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	CHECK_EQ_INT(image_encode_jpeg(pic, w, h, 95, &jpeg, &len), 0);
	enum image_kind kind;
	int jw, jh;
	CHECK_EQ_INT(image_header(&ctx, jpeg, len, &kind, &jw, &jh), 0);
	CHECK(kind == IMAGE_JPEG && jw == w && jh == h);
	struct image img;
	CHECK_EQ_INT(image_decode(&ctx, jpeg, len, kind, w, h, &img), 0);
	double diff = 0;
	for (int i = 0; i < w * h * 3; i++)
		diff += abs((int)img.pix[i] - (int)pic[i]);
	CHECK_LE(diff / (w * h * 3), 2.0);
	/* A broken buffer is a format error with libjpeg's reason. */
	CHECK_EQ_INT(image_header(&ctx, (const uint8_t *)"hello, world", 12, &kind, &jw, &jh),
		     -4);
	CHECK_EQ_INT(image_decode(&ctx, jpeg, len / 2, IMAGE_JPEG, w, h, &img), -4);
	/* A header cut short, then a good one: the size must still come back. */
	CHECK_EQ_INT(image_header(&ctx, jpeg, 200, &kind, &jw, &jh), -4);
	CHECK_EQ_INT(image_header(&ctx, jpeg, len, &kind, &jw, &jh), 0);
	CHECK(jw == w && jh == h);
	image_jpeg_free(jpeg);
	free(pic);
	image_ctx_free(&ctx);
}

TEST(data_scaled_decode_pick)
{
	int sw, sh;
	image_pick_scale(256, 192, 64, 48, &sw, &sh); /* exactly 1/4 */
	CHECK(sw == 64 && sh == 48);
	image_pick_scale(256, 192, 65, 40, &sw, &sh); /* 1/4 is too small: 3/8 */
	CHECK(sw == 96 && sh == 72);
	image_pick_scale(256, 192, 300, 10, &sw, &sh); /* no reduction fits */
	CHECK(sw == 256 && sh == 192);
	image_pick_scale(500, 375, 1, 1, &sw, &sh); /* 1/8, rounded up */
	CHECK(sw == 63 && sh == 47);
	/* A scaled box covers the same part of the picture. */
	struct resample_box b = { 10, 20, 110, 60, 10, 20, 110, 60 }, s;
	resample_box_scale(&b, 256, 192, 64, 48, &s);
	CHECK_NEAR(s.x0, 2.5, 1e-12);
	CHECK_NEAR(s.y1, 15, 1e-12);
	CHECK(s.wx0 == 2 && s.wx1 == 28 && s.wy0 == 5 && s.wy1 == 15);
}
