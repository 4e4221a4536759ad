/* The GPU augment kernel (gpu_augment.cu) against the CPU's resampler
 * (image_resample_chw) on the same random pixels, box by box: shrinks from 1.3x to
 * 9x (beyond about 5.5x a column's window is wider than the weights the kernel keeps
 * in registers, AUG_WTAPS, and takes the other path), an enlargement, fractional
 * boxes, windows that start inside the image, and flips. Same products in the same
 * order, so only float contraction can differ: a few 1e-5 in 0..255 units, where a
 * wrong weight or tap moves random pixels by whole units. Also its time for a batch
 * of 256 crops of 500x375 images to 224 (issue 21's decode + augment). Skips without
 * a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../test.h"
#include "core/error.h"
#include "data/cuda/gpu_augment.h"
#include "data/image.h"
#include "data/transform.h"
#include "data/ycc.h"
#include "harness.h"
#include "net_util.h"

#define SRC_W 600
#define SRC_H 450
#define OUT 64

/* box [x0, x1) x [y0, y1) of the source, the filter's window [wx0, wx1) x [wy0, wy1) */
static struct resample_box box(double x0, double y0, double x1, double y1, int wx0, int wy0,
			       int wx1, int wy1)
{
	return (struct resample_box){ .x0 = x0, .y0 = y0, .x1 = x1, .y1 = y1,
				      .wx0 = wx0, .wy0 = wy0, .wx1 = wx1, .wy1 = wy1 };
}

TEST(gpu_augment_matches_cpu_resampler_at_any_shrink)
{
	NEED_GPU();
	const struct resample_box boxes[] = {
		box(0, 0, SRC_W, SRC_H, 0, 0, SRC_W, SRC_H),              /* 9.4 x 7.0: wide */
		box(13.25, 7.5, 589.75, 440.5, 13, 7, 590, 441),          /* 9.0 x 6.8: wide */
		box(100.5, 50.25, 420.0, 270.75, 100, 50, 420, 271),      /* 5.0 x 3.4 */
		box(200, 100, 328, 228, 200, 100, 328, 228),              /* 2.0 */
		box(31.7, 12.2, 115.3, 96.9, 31, 12, 116, 97),            /* 1.3 */
		box(300, 300, 340, 332, 300, 300, 340, 332),              /* enlarges 1.6 x 2 */
		box(0, 0, 450, 64, 0, 0, 450, 64),                        /* 7.0 x 1.0 */
		box(5, 5, 69, 450, 5, 5, 69, 450),                        /* 1.0 x 6.9 */
	};
	enum { N = sizeof(boxes) / sizeof(boxes[0]) };
	size_t src_bytes = (size_t)SRC_W * SRC_H * 3, out_floats = (size_t)N * 3 * OUT * OUT;
	uint8_t *pix = malloc(src_bytes);
	float *want = malloc(sizeof(float) * out_floats), *got = malloc(sizeof(float) * out_floats);
	uint64_t r = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < src_bytes; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		pix[i] = (uint8_t)(r >> 56);
	}
	struct image_ctx ctx;
	CHECK_OK(image_ctx_init(&ctx));
	struct image img = { .pix = pix, .w = SRC_W, .h = SRC_H };
	struct gpu_augment_item items[N];
	for (int i = 0; i < N; i++) {
		items[i] = (struct gpu_augment_item){ .pitch = (size_t)SRC_W * 3, .w = SRC_W, .h = SRC_H,
						      .box = boxes[i], .flip = i % 3 == 1, .dst = N - 1 - i };
		CHECK_OK(image_resample_chw(&ctx, &img, &boxes[i], OUT, OUT, items[i].flip, imagenet_mean,
					    imagenet_std, want + (size_t)(N - 1 - i) * 3 * OUT * OUT));
	}
	void *src = NULL, *items_dev = NULL, *table = NULL, *out = NULL;
	CHECK(cudaMalloc(&src, src_bytes) == cudaSuccess);
	CHECK(cudaMalloc(&items_dev, sizeof(items)) == cudaSuccess);
	CHECK(cudaMalloc(&table, gpu_augment_table_bytes(N, OUT)) == cudaSuccess);
	CHECK(cudaMalloc(&out, sizeof(float) * out_floats) == cudaSuccess);
	if (test_failed())
		goto out;
	for (int i = 0; i < N; i++)
		items[i].src = src;
	CHECK(cudaMemcpy(src, pix, src_bytes, cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemcpy(items_dev, items, sizeof(items), cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemset(out, 0xff, sizeof(float) * out_floats) == cudaSuccess); /* NaN */
	CHECK_OK(gpu_augment_launch(items_dev, N, OUT, GPU_BATCH_NCHW_F32, imagenet_mean, imagenet_std,
				    table, out, NULL));
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	CHECK(cudaMemcpy(got, out, sizeof(float) * out_floats, cudaMemcpyDeviceToHost) == cudaSuccess);
	if (test_failed())
		goto out;
	for (int s = 0; s < N; s++) {
		double worst = 0, spread = 0;
		for (int c = 0; c < 3; c++)
			for (int p = 0; p < OUT * OUT; p++) {
				size_t k = ((size_t)s * 3 + c) * OUT * OUT + p;
				double d = isnan(got[k]) ? INFINITY : fabs((double)got[k] - want[k]);
				d *= imagenet_std[c] * 255.0;
				worst = d > worst ? d : worst;
				double v = fabs((double)want[k]) * imagenet_std[c] * 255.0;
				spread = v > spread ? v : spread;
			}
		const struct resample_box *b = &boxes[N - 1 - s];
		printf("      box %.1f x %.1f -> %d: worst %.2e in 0..255 units\n", b->x1 - b->x0,
		       b->y1 - b->y0, OUT, worst);
		CHECK_MSG(worst <= 1e-3, "sample %d off by %.3g in 0..255 units", s, worst);
		CHECK(spread > 10); /* random pixels: the output is not flat */
	}

	/* a batch as training makes it: 256 crops of 500x375 images (here one image,
	 * read 256 times) to 224, NHWC bf16, the median of 20 launches */
	enum { B = 256, SIZE = 224 };
	struct gpu_augment_item batch[B];
	uint64_t q = 7;
	for (int i = 0; i < B; i++) {
		struct sample_geometry geo;
		q = mix64(q + (uint64_t)i);
		sample_geometry_make(1, SIZE, q, 500, 375, &geo);
		batch[i] = (struct gpu_augment_item){ .src = src, .pitch = (size_t)SRC_W * 3, .w = 500,
						      .h = 375, .box = geo.box, .flip = geo.flip, .dst = i };
	}
	void *items_b = NULL, *table_b = NULL, *out_b = NULL;
	CHECK(cudaMalloc(&items_b, sizeof(batch)) == cudaSuccess);
	CHECK(cudaMalloc(&table_b, gpu_augment_table_bytes(B, SIZE)) == cudaSuccess);
	CHECK(cudaMalloc(&out_b, (size_t)B * SIZE * SIZE * 3 * 2) == cudaSuccess);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float ms[20];
	if (!test_failed()) {
		CHECK(cudaMemcpy(items_b, batch, sizeof(batch), cudaMemcpyHostToDevice) == cudaSuccess);
		for (int t = -3; t < 20 && !test_failed(); t++) {
			cudaEventRecord(e0, NULL);
			CHECK_OK(gpu_augment_launch(items_b, B, SIZE, GPU_BATCH_NHWC_BF16, imagenet_mean,
						    imagenet_std, table_b, out_b, NULL));
			cudaEventRecord(e1, NULL);
			CHECK(cudaEventSynchronize(e1) == cudaSuccess);
			if (t >= 0)
				cudaEventElapsedTime(&ms[t], e0, e1);
		}
	}
	if (!test_failed()) {
		for (int i = 1; i < 20; i++)
			for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
				float x = ms[j];
				ms[j] = ms[j - 1];
				ms[j - 1] = x;
			}
		printf("      augment alone, %d crops of 500x375 to %d, NHWC bf16: %.3f ms (median of 20; "
		       "%.0f img/s)\n", B, SIZE, ms[10], B / ms[10] * 1e3);
		CHECK(ms[10] > 0);
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(items_b);
	cudaFree(table_b);
	cudaFree(out_b);
out:
	cudaFree(src);
	cudaFree(items_dev);
	cudaFree(table);
	cudaFree(out);
	image_ctx_free(&ctx);
	free(pix);
	free(want);
	free(got);
}

/* Random planes of a SRC_W x SRC_H JPEG with chroma at hs x vs pixels a sample (0:
 * grey), on the host and the device; the image they make, by ycc_pixel (what
 * tests/test_ycc.c holds to TurboJPEG). */
struct planes {
	uint8_t *host[3], *dev[3];
	int cw, ch, hs, vs;
	uint8_t *rgb;
};

static void planes_make(struct planes *p, int hs, int vs, uint64_t seed)
{
	memset(p, 0, sizeof(*p));
	p->hs = hs;
	p->vs = vs;
	p->cw = hs ? (SRC_W + hs - 1) / hs : 0;
	p->ch = vs ? (SRC_H + vs - 1) / vs : 0;
	size_t n[3] = { (size_t)SRC_W * SRC_H, (size_t)p->cw * p->ch, (size_t)p->cw * p->ch };
	for (int k = 0; k < (hs ? 3 : 1); k++) {
		p->host[k] = malloc(n[k]);
		for (size_t i = 0; i < n[k]; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			/* smooth-ish luma, random chroma: both the filter and the
			 * upsampling show */
			p->host[k][i] = k == 0 ? (uint8_t)((i % SRC_W) / 3 + (seed >> 59))
					       : (uint8_t)(seed >> 56);
		}
		CHECK(cudaMalloc((void **)&p->dev[k], n[k]) == cudaSuccess);
		CHECK(cudaMemcpy(p->dev[k], p->host[k], n[k], cudaMemcpyHostToDevice) == cudaSuccess);
	}
	p->rgb = malloc((size_t)SRC_W * SRC_H * 3);
	struct ycc_plane cb = { p->host[1], (size_t)p->cw, p->cw, p->ch, hs, vs }, cr = cb;
	cr.p = p->host[2];
	for (int y = 0; y < SRC_H; y++)
		for (int x = 0; x < SRC_W; x++) {
			uint8_t *o = p->rgb + ((size_t)y * SRC_W + x) * 3;
			if (hs)
				ycc_pixel(p->host[0], SRC_W, &cb, &cr, x, y, o);
			else
				o[0] = o[1] = o[2] = p->host[0][(size_t)y * SRC_W + x];
		}
}

static void planes_free(struct planes *p)
{
	for (int k = 0; k < 3; k++) {
		free(p->host[k]);
		cudaFree(p->dev[k]);
	}
	free(p->rgb);
}

static struct gpu_planar_item planar_item(const struct planes *p, const struct resample_box *b,
					  int flip, int dst)
{
	struct gpu_planar_item it;
	memset(&it, 0, sizeof(it));
	it.a = (struct gpu_augment_item){ .w = SRC_W, .h = SRC_H, .box = *b, .flip = flip, .dst = dst };
	it.y = p->dev[0];
	it.y_pitch = SRC_W;
	if (p->hs) {
		it.cb = (struct ycc_plane){ p->dev[1], (size_t)p->cw, p->cw, p->ch, p->hs, p->vs };
		it.cr = it.cb;
		it.cr.p = p->dev[2];
	}
	return it;
}

/* The one-pass kernel against the CPU (ycc_pixel, then image_resample_chw) for 4:2:0,
 * 4:2:2, 4:4:4 and grey planes, at the shrinks whose tiles fit its shared memory (a
 * 9x box is left to the two passes; a 5.8x shrink of the columns alone fits, with
 * windows wider than the weights kept in registers) and again with too little shared
 * memory, where each tile computes from the planes tap by tap. Then its time for a batch against the two
 * passes it replaces (gpu_ycc_launch, gpu_augment_launch) on the same planes. */
TEST(gpu_planar_matches_cpu_and_beats_two_passes)
{
	NEED_GPU();
	const struct resample_box boxes[] = {
		box(100.5, 50.25, 356.0, 220.75, 100, 50, 356, 221), /* 4.0 x 2.7 */
		box(200, 100, 328, 228, 200, 100, 328, 228),         /* 2.0 */
		box(31.7, 12.2, 115.3, 96.9, 31, 12, 116, 97),       /* 1.3 */
		box(300, 300, 340, 332, 300, 300, 340, 332),         /* enlarges */
		box(0, 1, 63, 225, 0, 1, 63, 225),                   /* 1.0 x 3.5 */
		box(0, 100, 371, 164, 0, 100, 371, 164),             /* 5.8 x 1.0: wide columns */
		box(1, 0, SRC_W - 1, SRC_H, 1, 0, SRC_W - 1, SRC_H), /* 9.3 x 7.0 */
	};
	enum { N = sizeof(boxes) / sizeof(boxes[0]) };
	/* 64: whole tiles; 70: a last column of tiles 6 wide and a last row 6 high */
	enum { S_MAX = 70 };
	const int sizes[] = { OUT, S_MAX };
	const int layouts[][2] = { { 2, 2 }, { 2, 1 }, { 1, 1 }, { 0, 0 } };
	size_t out_floats = (size_t)N * 3 * S_MAX * S_MAX;
	float *want = malloc(sizeof(float) * out_floats), *got = malloc(sizeof(float) * out_floats);
	struct image_ctx ctx;
	CHECK_OK(image_ctx_init(&ctx));
	void *items_dev = NULL, *table = NULL, *out = NULL;
	CHECK(cudaMalloc(&items_dev, N * sizeof(struct gpu_planar_item)) == cudaSuccess);
	CHECK(cudaMalloc(&table, gpu_augment_table_bytes(N, S_MAX)) == cudaSuccess);
	CHECK(cudaMalloc(&out, sizeof(float) * out_floats) == cudaSuccess);
	for (int sl = 0; sl < 2 && !test_failed(); sl++) {
		const int S = sizes[sl];
		CHECK(gpu_planar_shared_bytes(&boxes[N - 1], S) == 0);
		for (int i = 0; i < N - 1; i++)
			CHECK(gpu_planar_shared_bytes(&boxes[i], S) > 0);
		for (int l = 0; l < 4 && !test_failed(); l++) {
			struct planes p;
			planes_make(&p, layouts[l][0], layouts[l][1], 11 + l);
			struct image img = { .pix = p.rgb, .w = SRC_W, .h = SRC_H };
			struct gpu_planar_item items[N];
			int m = N - 1; /* the 9x box: not the one-pass kernel's */
			size_t shared = 0;
			for (int i = 0; i < m; i++) {
				items[i] = planar_item(&p, &boxes[i], i % 2, m - 1 - i);
				size_t sb = gpu_planar_shared_bytes(&boxes[i], S);
				shared = sb > shared ? sb : shared;
				CHECK_OK(image_resample_chw(&ctx, &img, &boxes[i], S, S, i % 2, imagenet_mean,
							    imagenet_std, want + (size_t)(m - 1 - i) * 3 * S * S));
			}
			CHECK(cudaMemcpy(items_dev, items, m * sizeof(items[0]), cudaMemcpyHostToDevice) ==
			      cudaSuccess);
			/* 0: the tiles' own need; 1: 16 bytes, each tile tap by tap; 2: the
			 * most the launcher takes (static shared memory beside it) */
			for (int pass = 0; pass < 3 && !test_failed(); pass++) {
				size_t sb = pass == 0 ? shared : pass == 1 ? 16 : gpu_planar_shared_max();
				CHECK(cudaMemset(out, 0xff, sizeof(float) * out_floats) == cudaSuccess);
				CHECK_OK(gpu_planar_launch(items_dev, m, S, GPU_BATCH_NCHW_F32, imagenet_mean,
							   imagenet_std, sb, table, out, NULL));
				CHECK(cudaDeviceSynchronize() == cudaSuccess);
				CHECK(cudaMemcpy(got, out, sizeof(float) * m * 3 * S * S,
						 cudaMemcpyDeviceToHost) == cudaSuccess);
				double worst = 0;
				for (size_t k = 0; k < (size_t)m * 3 * S * S; k++) {
					int c = (int)(k / (S * S) % 3);
					double d = isnan(got[k]) ? INFINITY : fabs((double)got[k] - want[k]);
					d *= imagenet_std[c] * 255.0;
					worst = d > worst ? d : worst;
				}
				printf("      %s at %d, %s: worst %.2e in 0..255 units over %d boxes\n",
				       l == 0 ? "4:2:0" : l == 1 ? "4:2:2" : l == 2 ? "4:4:4" : "grey", S,
				       pass == 1 ? "tap by tap (no shared memory)" : pass ? "tiles, the most shared memory" : "tiles",
				       worst, m);
				CHECK_MSG(worst <= 1e-3, "layout %d pass %d off by %.3g", l, pass, worst);
			}
			planes_free(&p);
		}
	}

	/* time: 256 crops of a 4:2:0 500x375 image to 224, NHWC bf16, one pass against
	 * the colour kernel (over each crop's reach) then the augment kernel */
	enum { B = 256, SIZE = 224 };
	struct planes p;
	planes_make(&p, 2, 2, 5);
	static struct gpu_planar_item pb[B];
	static struct gpu_augment_item ab[B];
	static struct gpu_ycc_item yb[B];
	void *pdev = NULL, *adev = NULL, *ydev = NULL, *tb = NULL, *ob = NULL, *rgb = NULL;
	size_t rgb_bytes = (size_t)B * 500 * 375 * 3;
	CHECK(cudaMalloc(&pdev, sizeof(pb)) == cudaSuccess);
	CHECK(cudaMalloc(&adev, sizeof(ab)) == cudaSuccess);
	CHECK(cudaMalloc(&ydev, sizeof(yb)) == cudaSuccess);
	CHECK(cudaMalloc(&tb, gpu_augment_table_bytes(B, SIZE)) == cudaSuccess);
	CHECK(cudaMalloc(&ob, (size_t)B * SIZE * SIZE * 3 * 2) == cudaSuccess);
	CHECK(cudaMalloc(&rgb, rgb_bytes) == cudaSuccess);
	size_t shared = 0;
	int max_w = 0, max_h = 0;
	uint64_t q = 3;
	for (int i = 0; i < B && !test_failed(); i++) {
		struct sample_geometry geo;
		q = mix64(q + (uint64_t)i);
		sample_geometry_make(1, SIZE, q, 500, 375, &geo);
		pb[i] = planar_item(&p, &geo.box, geo.flip, i);
		pb[i].a.w = 500;
		pb[i].a.h = 375;
		size_t sb = gpu_planar_shared_bytes(&geo.box, SIZE);
		CHECK(sb > 0);
		shared = sb > shared ? sb : shared;
		unsigned char *dst = (unsigned char *)rgb + (size_t)i * 500 * 375 * 3;
		ab[i] = (struct gpu_augment_item){ .src = dst, .pitch = 500 * 3, .w = 500, .h = 375,
						   .box = geo.box, .flip = geo.flip, .dst = i };
		int reach[4];
		image_resample_reach(&geo.box, SIZE, SIZE, reach);
		yb[i] = (struct gpu_ycc_item){ .y = pb[i].y, .y_pitch = pb[i].y_pitch, .cb = pb[i].cb,
					       .cr = pb[i].cr, .x0 = reach[0], .y0 = reach[1],
					       .w = reach[2] - reach[0], .h = reach[3] - reach[1],
					       .dst = dst, .dst_pitch = 500 * 3 };
		max_w = yb[i].w > max_w ? yb[i].w : max_w;
		max_h = yb[i].h > max_h ? yb[i].h : max_h;
	}
	CHECK(cudaMemcpy(pdev, pb, sizeof(pb), cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemcpy(adev, ab, sizeof(ab), cudaMemcpyHostToDevice) == cudaSuccess);
	CHECK(cudaMemcpy(ydev, yb, sizeof(yb), cudaMemcpyHostToDevice) == cudaSuccess);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float med[2] = { 0, 0 };
	size_t out_bytes = (size_t)B * SIZE * SIZE * 3 * 2;
	uint16_t *h1 = malloc(out_bytes), *h2 = malloc(out_bytes);
	for (int v = 0; v < 2 && !test_failed(); v++) {
		float ms[21];
		for (int t = -3; t < 21 && !test_failed(); t++) {
			cudaEventRecord(e0, NULL);
			if (v == 0) {
				CHECK_OK(gpu_planar_launch(pdev, B, SIZE, GPU_BATCH_NHWC_BF16, imagenet_mean,
							   imagenet_std, shared, tb, ob, NULL));
			} else {
				CHECK_OK(gpu_ycc_launch(ydev, B, max_w, max_h, NULL));
				CHECK_OK(gpu_augment_launch(adev, B, SIZE, GPU_BATCH_NHWC_BF16, imagenet_mean,
							    imagenet_std, tb, ob, NULL));
			}
			cudaEventRecord(e1, NULL);
			CHECK(cudaEventSynchronize(e1) == cudaSuccess);
			if (t >= 0)
				cudaEventElapsedTime(&ms[t], e0, e1);
		}
		for (int i = 1; i < 21; i++)
			for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
				float x = ms[j];
				ms[j] = ms[j - 1];
				ms[j - 1] = x;
			}
		med[v] = ms[10];
		CHECK(cudaMemcpy(v ? h2 : h1, ob, out_bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
	}
	if (!test_failed()) {
		printf("      %d crops of 4:2:0 500x375 to %d, NHWC bf16 (median of 21): one pass %.3f ms "
		       "(%.0f img/s), colour + augment %.3f ms (%.0f img/s)\n", B, SIZE, med[0],
		       B / med[0] * 1e3, med[1], B / med[1] * 1e3);
		CHECK_MSG(!memcmp(h1, h2, out_bytes), "one pass and two passes differ");
		CHECK(med[0] > 0 && med[1] > 0);
	}
	free(h1);
	free(h2);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(pdev);
	cudaFree(adev);
	cudaFree(ydev);
	cudaFree(tb);
	cudaFree(ob);
	cudaFree(rgb);
	planes_free(&p);
	cudaFree(items_dev);
	cudaFree(table);
	cudaFree(out);
	image_ctx_free(&ctx);
	free(want);
	free(got);
}
