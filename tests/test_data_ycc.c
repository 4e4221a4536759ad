/* data/ycc.h, the chroma upsampling and colour conversion that the GPU decoder runs
 * on nvJPEG's planes, against TurboJPEG itself: TurboJPEG's own planes
 * (tjDecompressToYUVPlanes, the IDCT output before upsampling) through ycc.h must give
 * TurboJPEG's RGB bit for bit, for 4:2:0, 4:2:2 and 4:4:4, at odd sizes (edge rows and
 * columns) and on images of sharp colour blocks, where a sample-repeating upsampler
 * (what nvJPEG's hardware engines do) is off by tens of levels. */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "test.h"
#include "data/ycc.h"

/* Colour blocks of 5 x 3 pixels (edges off the chroma grid) over a diagonal ramp. */
static uint8_t *blocks_rgb(int w, int h, unsigned seed)
{
	uint8_t *p = malloc((size_t)w * h * 3);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			unsigned b = (unsigned)(x / 5) * 7919u + (unsigned)(y / 3) * 104729u + seed;
			b = b * 2654435761u;
			for (int c = 0; c < 3; c++) {
				int v = (b >> (8 * c)) & 1 ? 230 : 20;
				v += (x + y + 16 * c) % 20 - 10;
				p[((size_t)y * w + x) * 3 + c] = (uint8_t)v;
			}
		}
	return p;
}

struct ycc_result {
	int max_exact;   /* ycc.h against TurboJPEG's RGB */
	int max_repeat;  /* repeating each chroma sample against TurboJPEG's RGB */
};

/* Decode jpeg both ways and compare; 0 or -1 if TurboJPEG refused. */
static int compare_decode(const uint8_t *jpeg, unsigned long len, struct ycc_result *res)
{
	tjhandle tj = tjInitDecompress();
	int w, h, ss, cs, rc = -1;
	uint8_t *rgb = NULL, *planes[3] = { NULL, NULL, NULL };
	if (tjDecompressHeader3(tj, jpeg, len, &w, &h, &ss, &cs) < 0)
		goto out;
	rgb = malloc((size_t)w * h * 3);
	int strides[3];
	for (int c = 0; c < 3; c++) {
		strides[c] = tjPlaneWidth(c, w, ss);
		planes[c] = malloc((size_t)strides[c] * tjPlaneHeight(c, h, ss));
	}
	if (tjDecompress2(tj, jpeg, len, rgb, w, 0, h, TJPF_RGB, 0) < 0 ||
	    tjDecompressToYUVPlanes(tj, jpeg, len, planes, w, strides, h, 0) < 0)
		goto out;
	int hs = tjMCUWidth[ss] / 8, vs = tjMCUHeight[ss] / 8;
	struct ycc_plane cb = { planes[1], (size_t)strides[1], tjPlaneWidth(1, w, ss),
				tjPlaneHeight(1, h, ss), hs, vs };
	struct ycc_plane cr = cb;
	cr.p = planes[2];
	struct ycc_plane rep = cb;
	rep.hs = rep.vs = 1; /* index with x / hs by hand below */
	res->max_exact = res->max_repeat = 0;
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			uint8_t got[3], naive[3];
			ycc_pixel(planes[0], (size_t)strides[0], &cb, &cr, x, y, got);
			size_t ci = (size_t)(y / vs) * strides[1] + x / hs;
			ycc_to_rgb(planes[0][(size_t)y * strides[0] + x], planes[1][ci], planes[2][ci],
				   naive);
			for (int c = 0; c < 3; c++) {
				int want = rgb[((size_t)y * w + x) * 3 + c];
				int e = abs(got[c] - want), n = abs(naive[c] - want);
				res->max_exact = e > res->max_exact ? e : res->max_exact;
				res->max_repeat = n > res->max_repeat ? n : res->max_repeat;
			}
		}
	rc = 0;
out:
	free(rgb);
	for (int c = 0; c < 3; c++)
		free(planes[c]);
	tjDestroy(tj);
	return rc;
}

TEST(ycc_matches_turbojpeg_bit_for_bit)
{
	static const int sizes[][2] = { { 24, 18 }, { 37, 23 }, { 1, 1 }, { 2, 3 }, { 17, 1 },
					{ 500, 375 }, { 333, 501 } };
	static const int subsamp[] = { TJSAMP_420, TJSAMP_422, TJSAMP_444 };
	static const char *const ss_name[] = { "4:2:0", "4:2:2", "4:4:4" };
	int worst_repeat_420 = 0;
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
		for (int k = 0; k < 3; k++) {
			int w = sizes[si][0], h = sizes[si][1];
			uint8_t *rgb = blocks_rgb(w, h, (unsigned)si * 31u + (unsigned)k);
			tjhandle tc = tjInitCompress();
			unsigned char *jpeg = NULL;
			unsigned long len = 0;
			CHECK(tjCompress2(tc, rgb, w, 0, h, TJPF_RGB, &jpeg, &len, subsamp[k], 90, 0)
			      == 0);
			struct ycc_result r;
			CHECK_EQ_INT(compare_decode(jpeg, len, &r), 0);
			CHECK_MSG(r.max_exact == 0, "%dx%d %s: ycc.h off TurboJPEG by %d levels", w,
				  h, ss_name[k], r.max_exact);
			if (subsamp[k] == TJSAMP_420 && r.max_repeat > worst_repeat_420)
				worst_repeat_420 = r.max_repeat;
			tjFree(jpeg);
			tjDestroy(tc);
			free(rgb);
		}
	/* The images are hard enough to tell the two upsamplers apart. */
	printf("    repeated chroma samples against TurboJPEG, 4:2:0: worst %d levels\n",
	       worst_repeat_420);
	CHECK(worst_repeat_420 > 12);
}

/* The files of tests/data/bad that decode (the loader test's images, 24x18 4:2:0). */
TEST(ycc_matches_turbojpeg_on_test_files)
{
	static const char *const files[] = {
		"tests/data/bad/class_000/img_0000000.jpg", "tests/data/bad/class_000/img_0000002.jpg",
		"tests/data/bad/class_001/img_0000001.jpg", "tests/data/bad/class_001/img_0000005.jpg",
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		FILE *f = fopen(files[i], "rb");
		CHECK_MSG(f != NULL, "cannot open %s", files[i]);
		if (!f)
			continue;
		uint8_t buf[4096];
		size_t len = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		struct ycc_result r;
		CHECK_EQ_INT(compare_decode(buf, (unsigned long)len, &r), 0);
		CHECK_MSG(r.max_exact == 0, "%s: off by %d", files[i], r.max_exact);
	}
}

/* libjpeg's fixed-point conversion at the corners of the YCbCr cube and at grey. */
TEST(ycc_to_rgb_known_values)
{
	uint8_t rgb[3];
	ycc_to_rgb(128, 128, 128, rgb);
	CHECK(rgb[0] == 128 && rgb[1] == 128 && rgb[2] == 128);
	ycc_to_rgb(255, 0, 255, rgb); /* r = 255 + 178 -> 255; b = 255 - 227 = 28 */
	CHECK_EQ_INT(rgb[0], 255);
	CHECK_EQ_INT(rgb[2], 28);
	ycc_to_rgb(0, 255, 0, rgb); /* r = round(1.402 * -128) = -179 -> 0; b = 225 */
	CHECK_EQ_INT(rgb[0], 0);
	CHECK_EQ_INT(rgb[2], 225);
	/* g = 100 + floor((-22554 * -28 + 32768 - 46802 * 72) / 65536) = 100 - 42 */
	ycc_to_rgb(100, 100, 200, rgb);
	CHECK_EQ_INT(rgb[1], 58);
}

/* ycc_quad_h2v2 gives ycc_pixel's pixels, four at a time from any even column, on
 * random planes of odd sizes (the clamped edge columns and rows, a last group of
 * fewer than four) and of even ones. */
TEST(ycc_quad_h2v2_matches_ycc_pixel)
{
	static const int sizes[][2] = { { 37, 23 }, { 38, 24 }, { 1, 1 }, { 2, 3 }, { 5, 2 } };
	unsigned seed = 12345;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]) && !test_failed(); s++) {
		int w = sizes[s][0], h = sizes[s][1], cw = (w + 1) / 2, ch = (h + 1) / 2;
		size_t ypitch = (size_t)w + 3, cpitch = (size_t)cw + 1;
		uint8_t *yp = malloc(ypitch * h), *pb = malloc(cpitch * ch), *pr = malloc(cpitch * ch);
		for (size_t i = 0; i < ypitch * h; i++)
			yp[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
		for (size_t i = 0; i < cpitch * ch; i++) {
			pb[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
			pr[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
		}
		struct ycc_plane cb = { pb, cpitch, cw, ch, 2, 2 }, cr = { pr, cpitch, cw, ch, 2, 2 };
		int bad = 0;
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x += 2) {
				int n = w - x < 4 ? w - x : 4;
				uint8_t quad[12], one[3];
				ycc_quad_h2v2(yp, ypitch, &cb, &cr, x, y, n, quad);
				for (int k = 0; k < n; k++) {
					ycc_pixel(yp, ypitch, &cb, &cr, x + k, y, one);
					if (memcmp(one, quad + 3 * k, 3) && bad++ < 5)
						CHECK_MSG(0, "%dx%d: pixel (%d, %d) from x = %d: %d %d %d, "
							  "ycc_pixel %d %d %d", w, h, x + k, y, x,
							  quad[3 * k], quad[3 * k + 1], quad[3 * k + 2],
							  one[0], one[1], one[2]);
				}
			}
		free(yp);
		free(pb);
		free(pr);
	}
}

/* ycc_roi: the region holds every luma and chroma sample that ycc_pixel reads for
 * the reach's pixels. The planes outside the region are replaced by other values
 * (each sample xor 0x5a), as if the decoder had made only the region; every pixel of
 * the reach must come out as from the whole planes. Random image sizes, reaches and
 * the three subsamplings; without the region's one-sample margin, reaches that start
 * or end on an MCU's edge read outside it, and this fails. */
TEST(ycc_roi_holds_what_the_reach_reads)
{
	static const int sub[][2] = { { 2, 2 }, { 2, 1 }, { 1, 1 } };
	unsigned seed = 777;
#define RND() ((seed = seed * 1103515245u + 12345u) >> 8)
	int bad = 0;
	for (int trial = 0; trial < 600 && !bad; trial++) {
		int hs = sub[trial % 3][0], vs = sub[trial % 3][1];
		int w = 1 + (int)(RND() % 120), h = 1 + (int)(RND() % 90);
		int cw = (w + hs - 1) / hs, ch = (h + vs - 1) / vs;
		int reach[4], roi[4];
		reach[0] = (int)(RND() % (unsigned)w);
		reach[2] = reach[0] + 1 + (int)(RND() % (unsigned)(w - reach[0]));
		reach[1] = (int)(RND() % (unsigned)h);
		reach[3] = reach[1] + 1 + (int)(RND() % (unsigned)(h - reach[1]));
		if (trial % 5 == 0) { /* on MCU edges */
			reach[0] = reach[0] / (8 * hs) * 8 * hs;
			reach[1] = reach[1] / (8 * vs) * 8 * vs;
		}
		ycc_roi(w, h, hs, vs, reach, roi);
		CHECK(roi[0] % (8 * hs) == 0 && roi[1] % (8 * vs) == 0);
		CHECK(roi[0] <= reach[0] && roi[1] <= reach[1] && roi[2] >= reach[2] &&
		      roi[3] >= reach[3] && roi[2] <= w && roi[3] <= h);
		uint8_t *yp = malloc((size_t)w * h), *yk = malloc((size_t)w * h);
		uint8_t *c[2], *ck[2];
		for (int p = 0; p < 2; p++) {
			c[p] = malloc((size_t)cw * ch);
			ck[p] = malloc((size_t)cw * ch);
			for (int i = 0; i < cw * ch; i++) {
				c[p][i] = (uint8_t)RND();
				int cx = i % cw, cy = i / cw;
				int in = cx >= roi[0] / hs && cx < (roi[2] + hs - 1) / hs &&
					 cy >= roi[1] / vs && cy < (roi[3] + vs - 1) / vs;
				ck[p][i] = in ? c[p][i] : c[p][i] ^ 0x5a;
			}
		}
		for (int i = 0; i < w * h; i++) {
			int x = i % w, y = i / w;
			int in = x >= roi[0] && x < roi[2] && y >= roi[1] && y < roi[3];
			yp[i] = (uint8_t)RND();
			yk[i] = in ? yp[i] : yp[i] ^ 0x5a;
		}
		struct ycc_plane cb = { c[0], (size_t)cw, cw, ch, hs, vs }, cr = cb;
		cr.p = c[1];
		struct ycc_plane kb = cb, kr = cb;
		kb.p = ck[0];
		kr.p = ck[1];
		for (int y = reach[1]; y < reach[3] && !bad; y++)
			for (int x = reach[0]; x < reach[2] && !bad; x++) {
				uint8_t want[3], got[3];
				ycc_pixel(yp, (size_t)w, &cb, &cr, x, y, want);
				ycc_pixel(yk, (size_t)w, &kb, &kr, x, y, got);
				if (memcmp(want, got, 3)) {
					bad = 1;
					CHECK_MSG(0, "%dx%d h%dv%d: reach %d,%d-%d,%d, region %d,%d-%d,%d: "
						  "pixel (%d, %d) reads outside the region", w, h, hs, vs,
						  reach[0], reach[1], reach[2], reach[3], roi[0], roi[1],
						  roi[2], roi[3], x, y);
				}
			}
		free(yp);
		free(yk);
		for (int p = 0; p < 2; p++) {
			free(c[p]);
			free(ck[p]);
		}
	}
#undef RND
}
