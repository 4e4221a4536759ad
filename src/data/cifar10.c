/* CIFAR-10, binary version: records of 1 label byte and 3 x 32 x 32 pixel bytes
 * (planes R, G, B). The whole split is read into memory (150 MB for train).
 * Train augmentation is the usual CIFAR recipe: RandomCrop(32, padding=4) with
 * zero padding, then RandomHorizontalFlip; normalization uses CIFAR-10's own
 * channel statistics. */
#include "data/dataset_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_PAD 4

static const float cifar_mean[3] = { 0.4914f, 0.4822f, 0.4465f };
static const float cifar_std[3] = { 0.2470f, 0.2435f, 0.2616f };

static const char *const cifar_names[10] = {
	"airplane", "automobile", "bird", "cat", "deer",
	"dog", "frog", "horse", "ship", "truck",
};

/* Append the records of one batch file to ds->labels and ds->cifar. */
static int read_batch_file(struct dataset *ds, const char *path)
{
	long long len;
	FILE *f;
	if (access(path, F_OK) != 0 && errno == ENOENT)
		return gp_error(GP_ENOTFOUND, "cannot open CIFAR-10 file '%s': %s", path,
				strerror(errno));
	int rc = file_fopen_read(path, &f, &len);
	if (rc < 0)
		return gp_error_wrap(rc, "CIFAR-10");
	if (len <= 0 || len % CIFAR_RECORD != 0) {
		rc = gp_error(GP_EFORMAT, "CIFAR-10 file '%s' is %lld bytes, not a positive "
			      "multiple of %d (1 label byte + %d pixel bytes per image)",
			      path, len, CIFAR_RECORD, CIFAR_PIXELS);
		goto out_close;
	}
	int n = (int)(len / CIFAR_RECORD);
	int32_t *labels = realloc(ds->labels, sizeof(int32_t) * (ds->count + n));
	if (labels)
		ds->labels = labels;
	uint8_t *pix = realloc(ds->cifar, (size_t)CIFAR_PIXELS * (ds->count + n));
	if (pix)
		ds->cifar = pix;
	if (!labels || !pix) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
		goto out_close;
	}
	for (int i = 0; i < n; i++) {
		uint8_t label;
		uint8_t *dst = ds->cifar + (size_t)CIFAR_PIXELS * ds->count;
		if (fread(&label, 1, 1, f) != 1 || fread(dst, 1, CIFAR_PIXELS, f) != CIFAR_PIXELS) {
			rc = gp_error(GP_EIO, "cannot read '%s'", path);
			goto out_close;
		}
		if (label >= 10) {
			rc = gp_error(GP_EFORMAT, "CIFAR-10 file '%s': record %d has label %d "
				      "(not 0..9)", path, i, label);
			goto out_close;
		}
		ds->labels[ds->count++] = label;
	}
out_close:
	fclose(f);
	return rc;
}

int cifar10_has_test_batch(const char *dir)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/test_batch.bin", dir);
	return access(path, F_OK) == 0;
}

int cifar10_open(struct dataset *ds, const char *dir)
{
	ds->kind = DATASET_CIFAR10;
	ds->class_names = calloc(10, sizeof(char *));
	if (!ds->class_names)
		return gp_error(GP_ENOMEM, "out of memory");
	ds->classes = 10;
	for (int i = 0; i < 10; i++) {
		ds->class_names[i] = strdup(cifar_names[i]);
		if (!ds->class_names[i])
			return gp_error(GP_ENOMEM, "out of memory");
	}
	char path[4096];
	if (!ds->train) {
		snprintf(path, sizeof(path), "%s/test_batch.bin", dir);
		return read_batch_file(ds, path);
	}
	for (int b = 1; b <= 5; b++) {
		snprintf(path, sizeof(path), "%s/data_batch_%d.bin", dir, b);
		GP_TRY(read_batch_file(ds, path));
	}
	return 0;
}

int cifar10_load(const struct dataset *ds, struct image_ctx *ctx, int index,
		 uint64_t seed, float *out)
{
	const uint8_t *src = ds->cifar + (size_t)CIFAR_PIXELS * index;
	uint8_t rgb[CIFAR_PIXELS];
	int dx = 0, dy = 0, flip = 0;
	if (ds->train) {
		struct rng r;
		rng_seed(&r, seed, 0);
		dy = (int)rng_below(&r, 2 * CIFAR_PAD + 1) - CIFAR_PAD;
		dx = (int)rng_below(&r, 2 * CIFAR_PAD + 1) - CIFAR_PAD;
		flip = rng_uniform(&r) < 0.5;
	}
	/* The crop of the zero-padded image, interleaved for the resampler. */
	const int plane = CIFAR_SIDE * CIFAR_SIDE;
	for (int y = 0; y < CIFAR_SIDE; y++)
		for (int x = 0; x < CIFAR_SIDE; x++) {
			int sy = y + dy, sx = x + dx;
			int inside = sy >= 0 && sy < CIFAR_SIDE && sx >= 0 && sx < CIFAR_SIDE;
			for (int c = 0; c < 3; c++)
				rgb[(y * CIFAR_SIDE + x) * 3 + c] =
					inside ? src[c * plane + sy * CIFAR_SIDE + sx] : 0;
		}
	struct image img = { rgb, CIFAR_SIDE, CIFAR_SIDE };
	struct crop_box all = { 0, 0, CIFAR_SIDE, CIFAR_SIDE };
	struct resample_box box;
	crop_resample_box(&all, &box);
	return image_resample_chw(ctx, &img, &box, ds->size, ds->size, flip, cifar_mean,
				  cifar_std, out);
}
