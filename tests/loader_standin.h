/* The GPU loader's decoder stood in for by the CPU (tests/test_gpu_loader.c,
 * tests/test_data_decode.c): TurboJPEG and image.c's resampler into host batches, so
 * that the loader's order, replacements, counts and threads are checked against the
 * CPU loader's on a machine without a GPU. */
#ifndef GP_TESTS_LOADER_STANDIN_H
#define GP_TESTS_LOADER_STANDIN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/gpu_loader.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/transform.h"
#include "test.h"

/* A CPU stand-in for nvJPEG: TurboJPEG at full size and image.c's resampler, into
 * host batches, failing where libjpeg fails. With fail_batch >= 0, the run that
 * starts batch fail_batch (the fail_batch-th with a whole batch of items: a
 * replacement run has fewer) fails as a CUDA error would. With launch, a run only
 * "launches" (writes a shadow buffer) and the buffer holds the pixels once waited
 * for (cpu_decoder_wait), as gpu_decoder_launch's do. */
struct cpu_decoder {
	struct image_ctx ctx;
	float *out[GPU_LOADER_OUTPUTS_MAX];
	float *shadow[GPU_LOADER_OUTPUTS_MAX]; /* with launch */
	int launch, waits, fail_wait;
	int size, batch;
	int fail_batch, full_runs;
	/* for the auto probe: sleep this long per run (a slow GPU path), or decode
	 * nothing (one faster than any CPU decoding) */
	int delay_ms, skip;
	char why[16][160];
};

static inline int cpu_decoder_init(struct cpu_decoder *c, int batch, int size)
{
	*c = (struct cpu_decoder){ .size = size, .batch = batch, .fail_batch = -1,
				   .fail_wait = -1 };
	for (int k = 0; k < GPU_LOADER_OUTPUTS_MAX; k++)
		if (!(c->out[k] = calloc((size_t)batch * 3 * size * size, sizeof(float))) ||
		    !(c->shadow[k] = calloc((size_t)batch * 3 * size * size, sizeof(float))))
			return GP_ENOMEM;
	return image_ctx_init(&c->ctx);
}

static inline void cpu_decoder_free(struct cpu_decoder *c)
{
	for (int k = 0; k < GPU_LOADER_OUTPUTS_MAX; k++) {
		free(c->out[k]);
		free(c->shadow[k]);
	}
	image_ctx_free(&c->ctx);
}

static inline int cpu_decoder_run(void *self, int output, const struct gpu_decode_item *items,
				  int n, unsigned char *failed)
{
	struct cpu_decoder *c = self;
	size_t sample = (size_t)3 * c->size * c->size;
	if (n == c->batch && c->full_runs++ == c->fail_batch)
		return gp_error(GP_EDEVICE, "injected failure at batch %d", c->fail_batch);
	if (c->delay_ms) {
		struct timespec nap = { c->delay_ms / 1000, (long)(c->delay_ms % 1000) * 1000000 };
		nanosleep(&nap, NULL);
	}
	if (c->skip) {
		memset(failed, 0, (size_t)n);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		struct image img;
		const struct gpu_decode_item *it = &items[i];
		int rc = image_decode(&c->ctx, it->data, it->len_bytes, it->kind, it->w, it->h, &img);
		failed[i] = rc == GP_EFORMAT;
		snprintf(c->why[i], sizeof(c->why[i]), "%s", failed[i] ? gp_errmsg() : "");
		if (failed[i])
			continue;
		GP_TRY(rc);
		GP_TRY(image_resample_chw(&c->ctx, &img, &it->geo.box, c->size, c->size,
					  it->geo.flip, imagenet_mean, imagenet_std,
					  (c->launch ? c->shadow : c->out)[output] + sample * it->dst));
	}
	return 0;
}

static inline int cpu_decoder_wait(void *self, int output)
{
	struct cpu_decoder *c = self;
	if (c->waits++ == c->fail_wait)
		return gp_error(GP_EDEVICE, "injected failure of wait %d", c->fail_wait);
	memcpy(c->out[output], c->shadow[output],
	       sizeof(float) * (size_t)c->batch * 3 * c->size * c->size);
	return 0;
}

static inline const char *cpu_decoder_error(void *self, int i)
{
	return ((struct cpu_decoder *)self)->why[i];
}

static inline void *cpu_decoder_output(void *self, int output)
{
	return ((struct cpu_decoder *)self)->out[output];
}

/* The stand-in as the GPU loader's decoder. */
static inline struct gpu_loader_decoder cpu_decoder_ops(struct cpu_decoder *cd)
{
	return (struct gpu_loader_decoder){ cd, cpu_decoder_run, cpu_decoder_error,
					    cpu_decoder_output };
}

/* A batch of the GPU loader (CPU stand-in, 16 x 16 float NCHW) is batch b of the CPU
 * loader: the same place in the epochs, labels and pixels. */
static inline void check_same_batch(const struct gpu_batch *gb, const struct batch *cb, int b)
{
	CHECK_EQ_INT(gb->epoch, cb->epoch);
	CHECK_EQ_INT(gb->index, cb->index);
	CHECK_MSG(!memcmp(gb->labels, cb->labels, sizeof(int32_t) * cb->n), "batch %d: labels differ", b);
	CHECK_MSG(!memcmp(gb->x, cb->x, sizeof(float) * 3 * 16 * 16 * cb->n),
		  "batch %d: pixels differ from the CPU loader's", b);
}

/* tests/data/bad at 16 x 16, batch 4, through both loaders from batch start: the CPU
 * loader and the GPU loader on the CPU stand-in (the same seed, so the same batches). */
struct both_loaders {
	struct dataset *ds;
	struct cpu_decoder cd;
	struct loader *cl;
	struct gpu_loader *gl;
};

/* 0, or the test has failed; both_close frees what was made either way. */
static inline int both_open(struct both_loaders *b, int train, uint64_t seed, long start)
{
	memset(b, 0, sizeof(*b));
	CHECK_EQ_INT(dataset_open("tests/data/bad", train, 16, &b->ds), 0);
	if (test_failed())
		return -1;
	dataset_set_scaled_decode(b->ds, 0);
	CHECK_EQ_INT(cpu_decoder_init(&b->cd, 4, 16), 0);
	struct gpu_loader_decoder ops = cpu_decoder_ops(&b->cd);
	struct loader_config lc = { .batch = 4, .workers = 0, .prefetch = 1, .size = 16,
				    .train = train, .seed = seed, .start_batch = start };
	struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = train, .seed = seed,
					.start_batch = start };
	CHECK_MSG(loader_create(b->ds, &lc, &b->cl) == 0, "%s", gp_errmsg());
	CHECK_MSG(gpu_loader_create_with(b->ds, &gc, &ops, 1, &b->gl) == 0, "%s", gp_errmsg());
	return test_failed() ? -1 : 0;
}

static inline void both_close(struct both_loaders *b)
{
	gpu_loader_destroy(b->gl);
	loader_destroy(b->cl);
	cpu_decoder_free(&b->cd);
	dataset_close(b->ds);
}

/* The next batch of both loaders into *cb and *gb: 0, or -1 once a check has failed
 * (then *cb is released). */
static inline int both_next(struct both_loaders *b, struct batch **cb, struct gpu_batch *gb)
{
	CHECK_MSG(loader_next(b->cl, cb) == 0, "%s", gp_errmsg());
	if (test_failed())
		return -1;
	CHECK_MSG(gpu_loader_next(b->gl, gb) == 0, "%s", gp_errmsg());
	if (!test_failed())
		return 0;
	loader_release(b->cl, *cb);
	return -1;
}

#endif
