/* Datasets: ImageFolder order and errors, CIFAR-10 parsing, scaled decoding. */
#include <cairo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "test.h"

static void file_write(const char *dir, const char *name, const void *data, size_t len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	CHECK_MSG(f, "cannot write %s", path);
	if (!f)
		return;
	CHECK(fwrite(data, 1, len, f) == len);
	fclose(f);
}

static void jpeg_write(const char *dir, const char *name, int w, int h, int shade)
{
	uint8_t *rgb = malloc((size_t)w * h * 3), *jpeg;
	size_t len;
	for (int i = 0; i < w * h; i++) {
		rgb[3 * i] = (uint8_t)(shade + i % w);
		rgb[3 * i + 1] = (uint8_t)(shade / 2 + i / w);
		rgb[3 * i + 2] = (uint8_t)shade;
	}
	CHECK_EQ_INT(image_encode_jpeg(rgb, w, h, 90, &jpeg, &len), 0);
	file_write(dir, name, jpeg, len);
	image_jpeg_free(jpeg);
	free(rgb);
}

static void dir_make(const char *root, const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, name);
	CHECK(mkdir(path, 0755) == 0);
}

TEST(data_imagefolder_order_like_torchvision)
{
	const char *root = test_tmpdir();
	char dir[512];
	dir_make(root, "b");
	dir_make(root, "a");
	dir_make(root, "C");   /* upper case sorts first, as in Python */
	dir_make(root, "a/sub");
	snprintf(dir, sizeof(dir), "%s/a", root);
	jpeg_write(dir, "z.JPG", 8, 8, 10);
	file_write(dir, "x.txt", "not an image", 12);
	cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 6, 4);
	cairo_t *cr = cairo_create(s);
	cairo_set_source_rgb(cr, 1.0, 0.5, 0.0);
	cairo_paint(cr);
	cairo_destroy(cr);
	snprintf(dir, sizeof(dir), "%s/a/y.png", root);
	CHECK(cairo_surface_write_to_png(s, dir) == CAIRO_STATUS_SUCCESS);
	cairo_surface_destroy(s);
	snprintf(dir, sizeof(dir), "%s/a/sub", root);
	jpeg_write(dir, "a.jpeg", 8, 8, 20);
	snprintf(dir, sizeof(dir), "%s/b", root);
	jpeg_write(dir, "m.jpg", 8, 8, 30);
	snprintf(dir, sizeof(dir), "%s/C", root);
	jpeg_write(dir, "k.jpg", 8, 8, 40);

	struct dataset *ds;
	CHECK_EQ_INT(dataset_open(root, 0, 4, &ds), 0);
	if (test_failed())
		return;
	CHECK_EQ_INT(dataset_classes(ds), 3);
	CHECK(!strcmp(dataset_class_name(ds, 0), "C"));
	CHECK(!strcmp(dataset_class_name(ds, 1), "a"));
	CHECK(!strcmp(dataset_class_name(ds, 2), "b"));
	CHECK_EQ_INT(dataset_count(ds), 5);
	/* os.walk order: the class folder's own files, then its sub-folders'. */
	const char *want[5] = { "C/k.jpg", "a/y.png", "a/z.JPG", "a/sub/a.jpeg", "b/m.jpg" };
	const int labels[5] = { 0, 1, 1, 1, 2 };
	for (int i = 0; i < 5; i++) {
		const char *p = dataset_path(ds, i);
		CHECK_MSG(p && strlen(p) > strlen(want[i]) &&
			  !strcmp(p + strlen(p) - strlen(want[i]), want[i]),
			  "sample %d is '%s', want '%s'", i, p ? p : "", want[i]);
		CHECK_EQ_INT(dataset_label(ds, i), labels[i]);
	}
	/* The PNG decodes: orange, flat. */
	struct image_ctx ctx;
	struct sample_cost cost;
	float out[3 * 4 * 4];
	int32_t label;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	CHECK_EQ_INT(dataset_load(ds, &ctx, 1, 0, out, &label, &cost), 0);
	CHECK_EQ_INT(label, 1);
	CHECK_NEAR(out[0], (1.0 - 0.485) / 0.229, 1e-4);
	CHECK_NEAR(out[16 + 5], (128 / 255.0 - 0.456) / 0.224, 1e-2);
	CHECK_NEAR(out[32 + 15], (0 - 0.406) / 0.225, 1e-4);
	image_ctx_free(&ctx);
	dataset_close(ds);
}

TEST(data_imagefolder_errors)
{
	const char *root = test_tmpdir();
	char path[512];
	struct dataset *ds = NULL;
	snprintf(path, sizeof(path), "%s/missing", root);
	CHECK_EQ_INT(dataset_open(path, 1, 8, &ds), GP_ENOTFOUND);
	CHECK(strstr(gp_errmsg(), "does not exist") && strstr(gp_errmsg(), "missing"));
	CHECK_EQ_INT(dataset_open(root, 1, 8, &ds), GP_EFORMAT); /* no classes */
	CHECK(strstr(gp_errmsg(), "no class sub-folders"));
	dir_make(root, "cat");
	snprintf(path, sizeof(path), "%s/cat", root);
	file_write(path, "readme.txt", "x", 1);
	CHECK_EQ_INT(dataset_open(root, 1, 8, &ds), GP_EFORMAT); /* a class without images */
	CHECK(strstr(gp_errmsg(), "cat") && strstr(gp_errmsg(), "has no images"));
	CHECK_EQ_INT(dataset_open("synthetic:0", 1, 8, &ds), GP_EINVAL);
	CHECK_EQ_INT(dataset_open("synthetic:5x", 1, 8, &ds), GP_EINVAL);
	CHECK(ds == NULL);
	CHECK_EQ_INT(dataset_open("synthetic:50:3", 1, 8, &ds), 0);
	if (ds) {
		CHECK_EQ_INT(dataset_count(ds), 50);
		CHECK_EQ_INT(dataset_classes(ds), 3);
		dataset_close(ds);
	}
}

/* A CIFAR record: label, then R, G, B planes with pixel (c, y, x) = f(i, c, y, x). */
static uint8_t cifar_pixel(int i, int c, int y, int x)
{
	return (uint8_t)(i * 31 + c * 70 + y * 3 + x * 5);
}

static void cifar_write(const char *dir, const char *name, int first, int n)
{
	uint8_t *buf = malloc((size_t)3073 * n);
	for (int r = 0; r < n; r++) {
		uint8_t *rec = buf + (size_t)3073 * r;
		rec[0] = (uint8_t)((first + r) % 10);
		for (int c = 0; c < 3; c++)
			for (int y = 0; y < 32; y++)
				for (int x = 0; x < 32; x++)
					rec[1 + c * 1024 + y * 32 + x] = cifar_pixel(first + r, c, y, x);
	}
	file_write(dir, name, buf, (size_t)3073 * n);
	free(buf);
}

static const float cifar_mean[3] = { 0.4914f, 0.4822f, 0.4465f };
static const float cifar_std[3] = { 0.2470f, 0.2435f, 0.2616f };

TEST(data_cifar10_parse_and_crop)
{
	const char *dir = test_tmpdir();
	char spec[600];
	snprintf(spec, sizeof(spec), "cifar10:%s", dir);
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open(spec, 0, 32, &ds), GP_ENOTFOUND);
	cifar_write(dir, "test_batch.bin", 3, 3);
	CHECK_EQ_INT(dataset_open(spec, 0, 32, &ds), 0);
	if (test_failed())
		return;
	CHECK_EQ_INT(dataset_count(ds), 3);
	CHECK_EQ_INT(dataset_classes(ds), 10);
	CHECK(!strcmp(dataset_class_name(ds, 3), "cat"));
	struct image_ctx ctx;
	struct sample_cost cost;
	float *out = malloc(sizeof(float) * 3 * 32 * 32);
	int32_t label;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	CHECK_EQ_INT(dataset_load(ds, &ctx, 1, 99, out, &label, &cost), 0);
	CHECK_EQ_INT(label, 4);
	for (int c = 0; c < 3; c++)
		for (int p = 0; p < 1024; p += 37)
			CHECK_NEAR(out[c * 1024 + p],
				   (cifar_pixel(4, c, p / 32, p % 32) / 255.0f - cifar_mean[c]) /
				   cifar_std[c], 1e-5);
	dataset_close(ds);

	/* Train: each sample is the image shifted by -4..4 each way (zero padding),
	 * maybe mirrored; find which and check every pixel. */
	char name[32];
	for (int b = 1; b <= 5; b++) {
		snprintf(name, sizeof(name), "data_batch_%d.bin", b);
		cifar_write(dir, name, 2 * (b - 1), 2);
	}
	CHECK_EQ_INT(dataset_open(spec, 1, 32, &ds), 0);
	if (test_failed())
		goto out_free;
	CHECK_EQ_INT(dataset_count(ds), 10);
	int flips = 0, shifted = 0;
	for (uint64_t seed = 0; seed < 12; seed++) {
		int i = (int)(seed % 10), found = 0;
		CHECK_EQ_INT(dataset_load(ds, &ctx, i, seed, out, &label, &cost), 0);
		CHECK_EQ_INT(label, i);
		for (int dy = -4; dy <= 4 && !found; dy++)
			for (int dx = -4; dx <= 4 && !found; dx++)
				for (int flip = 0; flip < 2 && !found; flip++) {
					int ok = 1;
					for (int c = 0; c < 3 && ok; c++)
						for (int y = 0; y < 32 && ok; y++)
							for (int x = 0; x < 32 && ok; x++) {
								int sx = (flip ? 31 - x : x) + dx, sy = y + dy;
								int v = sx < 0 || sy < 0 || sx > 31 || sy > 31 ? 0
									: cifar_pixel(i, c, sy, sx);
								float want = (v / 255.0f - cifar_mean[c]) / cifar_std[c];
								ok = fabsf(out[c * 1024 + y * 32 + x] - want) < 1e-4f;
							}
					if (ok) {
						found = 1;
						flips += flip;
						shifted += dx || dy;
					}
				}
		CHECK_MSG(found, "sample %d (seed %llu) is no padded crop of the image", i,
			  (unsigned long long)seed);
	}
	CHECK(flips > 0 && flips < 12);
	CHECK(shifted > 0);
	dataset_close(ds);

	char path[600];
	cifar_write(dir, "data_batch_3.bin", 0, 1);
	snprintf(path, sizeof(path), "%s/data_batch_3.bin", dir);
	FILE *f = fopen(path, "ab");
	CHECK(f != NULL);
	if (f) {
		fputc(7, f); /* one byte too many */
		fclose(f);
	}
	CHECK_EQ_INT(dataset_open(spec, 1, 32, &ds), GP_EFORMAT);
	CHECK(strstr(gp_errmsg(), "data_batch_3.bin") && strstr(gp_errmsg(), "3074 bytes"));
out_free:
	free(out);
	image_ctx_free(&ctx);
}

TEST(data_scaled_decode_used_when_crop_allows)
{
	const char *root = test_tmpdir();
	char dir[512];
	dir_make(root, "only");
	snprintf(dir, sizeof(dir), "%s/only", root);
	jpeg_write(dir, "big.jpg", 256, 192, 60);
	/* Eval at 32: Resize(36) of the shorter side needs 48 x 36; the 1/4 decode
	 * (64 x 48) is the smallest that is large enough. */
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open(root, 0, 32, &ds), 0);
	if (test_failed())
		return;
	struct image_ctx ctx;
	struct sample_cost cost;
	float scaled[3 * 32 * 32], full[3 * 32 * 32];
	int32_t label;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	CHECK_EQ_INT(dataset_load(ds, &ctx, 0, 0, scaled, &label, &cost), 0);
	CHECK_NEAR(cost.decoded_pixels, 64 * 48, 0);
	CHECK_NEAR(cost.full_pixels, 256 * 192, 0);
	dataset_set_scaled_decode(ds, 0);
	CHECK_EQ_INT(dataset_load(ds, &ctx, 0, 0, full, &label, &cost), 0);
	CHECK_NEAR(cost.decoded_pixels, 256 * 192, 0);
	/* The reduced decode shows the same picture (smooth gradients). */
	CHECK_LE(rel_err_norm_f32(scaled, full, 3 * 32 * 32), 0.02);
	dataset_close(ds);

	/* Eval at 200 needs more than 256 x 192 offers: full size. */
	CHECK_EQ_INT(dataset_open(root, 0, 200, &ds), 0);
	float *big = malloc(sizeof(float) * 3 * 200 * 200);
	CHECK_EQ_INT(dataset_load(ds, &ctx, 0, 0, big, &label, &cost), 0);
	CHECK_NEAR(cost.decoded_pixels, 256 * 192, 0);
	free(big);
	dataset_close(ds);
	image_ctx_free(&ctx);
}

TEST(data_train_sample_is_rrc_then_flip)
{
	const char *root = test_tmpdir();
	char dir[512], path[600];
	dir_make(root, "only");
	snprintf(dir, sizeof(dir), "%s/only", root);
	jpeg_write(dir, "pic.jpg", 160, 120, 30);
	snprintf(path, sizeof(path), "%s/pic.jpg", dir);
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open(root, 1, 24, &ds), 0);
	if (test_failed())
		return;
	dataset_set_scaled_decode(ds, 0);
	struct image_ctx ctx, ref;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	CHECK_EQ_INT(image_ctx_init(&ref), 0);
	size_t len;
	enum image_kind kind;
	int w, h;
	struct image img;
	CHECK_EQ_INT(image_read_file(&ref, path, &len), 0);
	CHECK_EQ_INT(image_header(&ref, ref.file, len, &kind, &w, &h), 0);
	CHECK_EQ_INT(image_decode(&ref, ref.file, len, kind, w, h, &img), 0);
	int flips = 0;
	for (uint64_t seed = 0; seed < 8; seed++) {
		float got[3 * 24 * 24], want[3 * 24 * 24];
		struct sample_cost cost;
		int32_t label;
		CHECK_EQ_INT(dataset_load(ds, &ctx, 0, seed, got, &label, &cost), 0);
		/* The same draws by hand: crop parameters first, then the coin. */
		struct rng r;
		struct crop_box c;
		struct resample_box b;
		rng_seed(&r, seed, 0);
		rrc_get_params(&r, w, h, &c);
		int flip = rng_uniform(&r) < 0.5;
		flips += flip;
		crop_resample_box(&c, &b);
		CHECK_EQ_INT(image_resample_chw(&ref, &img, &b, 24, 24, flip, imagenet_mean,
						imagenet_std, want), 0);
		CHECK_MSG(!memcmp(got, want, sizeof(got)), "seed %llu differs",
			  (unsigned long long)seed);
	}
	CHECK(flips > 0 && flips < 8);
	image_ctx_free(&ref);
	image_ctx_free(&ctx);
	dataset_close(ds);
}
