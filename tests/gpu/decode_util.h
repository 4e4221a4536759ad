/* What the GPU decode tests share (test_gpu_decode.c, test_gpu_decode_beside.c): the
 * skip without a GPU or nvJPEG, `dataset make`'s 500x375 JPEGs read into memory, and
 * decode items over them. */
#ifndef GP_TESTS_GPU_DECODE_UTIL_H
#define GP_TESTS_GPU_DECODE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/gpu_decode.h"
#include "data/image.h"
#include "data/transform.h"

#define SIZE 224
#define N_FILES 16

static inline int gpu_decode_ready(void)
{
	static char why[300];
	if (decode_gpu_probe(why, sizeof(why)))
		return 1;
	test_skip(why);
	return 0;
}

/* `gpuperf dataset make` into a fresh folder: N_FILES JPEGs of 500x375 in 2 classes. */
static const char *folder_make(void)
{
	static char dir[600];
	char cmd[900], out[4096];
	snprintf(dir, sizeof(dir), "%s/jpegs", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 2 --images %d "
		 "--size 500x375", test_bin(), dir, N_FILES);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "dataset make: %s", out);
	return dir;
}

struct files {
	uint8_t *data[N_FILES];
	size_t len[N_FILES];
	enum image_kind kind[N_FILES];
	int w[N_FILES], h[N_FILES];
};

static inline void files_read(const struct dataset *ds, struct image_ctx *ctx, struct files *f)
{
	for (int i = 0; i < N_FILES; i++) {
		CHECK_EQ_INT(image_read_file(ctx, dataset_path(ds, i), &f->len[i]), 0);
		f->data[i] = malloc(f->len[i]);
		memcpy(f->data[i], ctx->file, f->len[i]);
		CHECK_EQ_INT(image_header(ctx, f->data[i], f->len[i], &f->kind[i], &f->w[i],
					  &f->h[i]), 0);
	}
}

static inline void files_free(struct files *f)
{
	for (int i = 0; i < N_FILES; i++)
		free(f->data[i]);
}

/* The setup most decode tests share: folder_make's JPEGs opened as a training dataset
 * and read into memory. -1 (after a failed check) when the dataset does not open; the
 * test returns then. jpegs_close undoes it. */
static inline int jpegs_open(struct dataset **ds, struct image_ctx *ctx, struct files *f)
{
	CHECK_EQ_INT(dataset_open(folder_make(), 1, SIZE, ds), 0);
	if (test_failed())
		return -1;
	CHECK_EQ_INT(image_ctx_init(ctx), 0);
	files_read(*ds, ctx, f);
	return 0;
}

static inline void jpegs_close(struct dataset *ds, struct image_ctx *ctx, struct files *f)
{
	files_free(f);
	image_ctx_free(ctx);
	dataset_close(ds);
}

/* n items over the files in turn, item i to sample i, with the train geometry of
 * (seed, epoch 0, index i). */
static inline void items_repeat(const struct files *f, int n, uint64_t seed, struct gpu_decode_item *items)
{
	for (int i = 0; i < n; i++) {
		int k = i % N_FILES;
		items[i] = (struct gpu_decode_item){ .data = f->data[k], .len_bytes = f->len[k],
						     .kind = f->kind[k], .w = f->w[k], .h = f->h[k],
						     .dst = i };
		sample_geometry_make(1, SIZE, sample_seed(seed, 0, i), f->w[k], f->h[k], &items[i].geo);
	}
}

#endif
