/* The batch loader: shuffles a dataset each epoch and turns it into batches of
 * normalized floats, in the calling thread (workers = 0) or in worker threads that
 * fill a bounded ring of buffers. Batches come out in order and their content
 * depends only on the seed, never on the number of workers or thread timing. */
#ifndef GP_DATA_LOADER_H
#define GP_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

struct loader_config {
	int batch;
	int workers;   /* 0: decode in loader_next's caller */
	int prefetch;  /* batches in flight per worker (buffers: max(workers, 1) * prefetch) */
	int size;      /* must equal the dataset's size */
	int train;     /* shuffle each epoch */
	int drop_last; /* drop an epoch's last, partial batch */
	uint64_t seed;
	/* Data parallelism: this loader reads shard `shard` of `shards` (0 or 1: all), as
	 * torch's DistributedSampler with drop_last: every rank shuffles the same order,
	 * cut to a multiple of shards, and takes every shards-th sample from its own. */
	int shard, shards;
	/* The first batch to deliver, counted over all epochs (epoch x batches per epoch
	 * + index): a resumed run starts where the checkpoint stopped. Orders and
	 * augmentation draw from (seed, epoch, sample), never from a running state, so
	 * the batches are those an uninterrupted loader would have delivered. */
	long start_batch;
};

struct batch {
	float *x;        /* n x 3 x size x size */
	int32_t *labels; /* n */
	int n;
	int epoch, index;  /* index: batch number within the epoch */
	double wait_ms;    /* how long loader_next blocked for this batch */
};

struct loader_stats {
	long images;          /* images in delivered batches */
	long skipped_corrupt; /* bad files replaced in delivered batches */
	double decode_ms_total;
	double decoded_pixels, full_pixels; /* full / decoded is the scaled-decode gain */
};

struct loader;

/* Where batch buffers come from (default malloc/free); takes effect for loaders
 * created afterwards (pinned memory: data_use_pinned_memory in data/pinned.h). */
void loader_set_host_allocator(void *(*alloc)(size_t), void (*free)(void *));

int loader_create(struct dataset *ds, const struct loader_config *cfg, struct loader **out);
/* Next batch, in order; endless (epochs roll over). Hand it back with
 * loader_release before more than the ring's buffers are out. */
int loader_next(struct loader *l, struct batch **out);
void loader_release(struct loader *l, struct batch *b);
int loader_batches_per_epoch(const struct loader *l);
/* Totals over the batches delivered so far (from loader_next's thread). */
void loader_get_stats(const struct loader *l, struct loader_stats *out);
/* The sample order of an epoch into perm (n entries): identity for eval, a
 * Fisher-Yates shuffle drawn from (seed, epoch) for train. */
void loader_epoch_order(uint64_t seed, int train, int n, int epoch, int32_t *perm);
/* How many replacements a bad sample may go through before the loader gives up
 * (only a dataset made almost entirely of bad files gets there). */
#define LOADER_REPLACE_TRIES_MAX 64
/* The sample that replaces a bad one at its attempt-th try (0 first), drawn from
 * the bad sample's seed (sample_seed), so the replacement is the same in every run
 * and on either decode path. */
int loader_replacement(uint64_t sample_seed_, int attempt, int count);
/* Stop and join the workers (outstanding batches become invalid) and free all. */
void loader_destroy(struct loader *l);

#endif
