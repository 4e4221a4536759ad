/* Batches travel through a ring of slots: batch number g (counted over all epochs)
 * always lives in slot g % slots, a worker claims the next number once its slot
 * is free, and loader_next waits for exactly that number, so batches come out in
 * order whichever worker finishes first. */
#include "data/loader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "data/transform.h"

#define LOADER_WORKERS_MAX 256
/* keeps the slot count (workers x prefetch) far from int overflow */
#define LOADER_PREFETCH_MAX 64

enum slot_state { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_OUT };

struct slot {
	struct batch b; /* first, so loader_release can find the slot of a batch */
	enum slot_state state;
	long seq;
	int err;
	char errmsg[512];
	struct loader_stats st;
};

/* What one filling thread owns: its decoder and its copy of the epoch's order. */
struct filler {
	struct loader *l;
	struct image_ctx img;
	int32_t *perm;
	int perm_epoch;
};

struct loader {
	struct dataset *ds;
	struct loader_config cfg;
	int per_epoch;
	size_t sample_floats;
	int n_slots;
	struct slot *slots;
	void (*host_free)(void *);

	pthread_mutex_t mu;
	pthread_cond_t cond_free, cond_ready;
	long next_claim, next_deliver;
	atomic_int stop;
	atomic_uchar *bad; /* per sample: found corrupt (warned once) */

	struct filler *fillers; /* one per worker, or one for workers = 0 */
	int n_fillers;
	pthread_t *threads;
	int n_threads;
	struct loader_stats stats;
};

static void *(*host_alloc_fn)(size_t) = malloc;
static void (*host_free_fn)(void *) = free;

void loader_set_host_allocator(void *(*alloc)(size_t), void (*free_fn)(void *))
{
	host_alloc_fn = alloc;
	host_free_fn = free_fn;
}

void loader_epoch_order(uint64_t seed, int train, int n, int epoch, int32_t *perm)
{
	for (int i = 0; i < n; i++)
		perm[i] = i;
	if (train) {
		struct rng r;
		rng_seed(&r, mix64(seed), (uint64_t)epoch);
		for (int i = n - 1; i > 0; i--) {
			int j = (int)rng_below(&r, (uint32_t)i + 1);
			int32_t t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
	}
}

/* Samples this loader reads per epoch: all, or its shard's. */
static int local_count(const struct loader *l)
{
	int n = dataset_count(l->ds);
	return l->cfg.shards > 1 ? n / l->cfg.shards : n;
}

/* The sample order of an epoch: identity for eval, Fisher-Yates for train. */
static void filler_order(struct filler *f, int epoch)
{
	struct loader *l = f->l;
	if (f->perm_epoch == epoch)
		return;
	loader_epoch_order(l->cfg.seed, l->cfg.train, dataset_count(l->ds), epoch, f->perm);
	f->perm_epoch = epoch;
}

/* Load sample idx; a corrupt file, or one that cannot be read (no permission, gone
 * since the listing), is warned about once, counted, and replaced by a sample drawn
 * from (seed, epoch, idx, try), so the replacement is the same in every run. */
static int load_or_replace(struct filler *f, int epoch, int idx, float *x,
			   int32_t *label, struct loader_stats *st)
{
	struct loader *l = f->l;
	int count = dataset_count(l->ds);
	for (int attempt = 0; attempt < LOADER_REPLACE_TRIES_MAX; attempt++) {
		uint64_t seed = sample_seed(l->cfg.seed, epoch, idx);
		if (!atomic_load(&l->bad[idx])) {
			struct sample_cost cost;
			int rc = dataset_load(l->ds, &f->img, idx, seed, x, label, &cost);
			if (rc == 0) {
				st->decode_ms_total += cost.decode_ms;
				st->decoded_pixels += cost.decoded_pixels;
				st->full_pixels += cost.full_pixels;
				return 0;
			}
			if (rc != GP_EFORMAT && rc != GP_EIO)
				return rc;
			if (!atomic_exchange(&l->bad[idx], 1)) {
				const char *path = dataset_path(l->ds, idx);
				fprintf(stderr, "warning: skipping '%s': %s\n",
					path ? path : "?", gp_errmsg());
			}
		}
		st->skipped_corrupt++;
		idx = loader_replacement(seed, attempt, count);
	}
	return gp_error(GP_EFORMAT, "no valid image after %d replacements of a corrupt one",
			LOADER_REPLACE_TRIES_MAX);
}

/* Fill slot s with batch number seq; stops early (and returns 0) on shutdown. */
static int filler_fill(struct filler *f, struct slot *s, long seq)
{
	struct loader *l = f->l;
	int count = local_count(l), shards = l->cfg.shards > 1 ? l->cfg.shards : 1;
	int epoch = (int)(seq / l->per_epoch), index = (int)(seq % l->per_epoch);
	int start = index * l->cfg.batch;
	int n = count - start < l->cfg.batch ? count - start : l->cfg.batch;
	filler_order(f, epoch);
	memset(&s->st, 0, sizeof(s->st));
	s->b.n = n;
	s->b.epoch = epoch;
	s->b.index = index;
	for (int i = 0; i < n; i++) {
		if (atomic_load(&l->stop))
			return 0;
		GP_TRY(load_or_replace(f, epoch, f->perm[(size_t)(start + i) * shards + l->cfg.shard],
				       s->b.x + l->sample_floats * i, &s->b.labels[i], &s->st));
	}
	s->st.images = n;
	return 0;
}

static void *worker_main(void *arg)
{
	struct filler *f = arg;
	struct loader *l = f->l;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (!atomic_load(&l->stop) &&
		       l->slots[l->next_claim % l->n_slots].state != SLOT_FREE)
			pthread_cond_wait(&l->cond_free, &l->mu);
		if (atomic_load(&l->stop))
			break;
		long seq = l->next_claim++;
		struct slot *s = &l->slots[seq % l->n_slots];
		s->state = SLOT_FILLING;
		s->seq = seq;
		pthread_mutex_unlock(&l->mu);

		int rc = filler_fill(f, s, seq);

		pthread_mutex_lock(&l->mu);
		s->err = rc;
		if (rc < 0)
			snprintf(s->errmsg, sizeof(s->errmsg), "%s", gp_errmsg());
		s->state = SLOT_READY;
		pthread_cond_broadcast(&l->cond_ready);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

int loader_replacement(uint64_t sample_seed_, int attempt, int count)
{
	return (int)(mix64(sample_seed_ + (uint64_t)attempt + 1) % (uint64_t)count);
}

int loader_batches_per_epoch(const struct loader *l)
{
	return l->per_epoch;
}

static int config_check(const struct dataset *ds, const struct loader_config *c)
{
	int count = dataset_count(ds);
	if (c->shards > 1) {
		if (c->shard < 0 || c->shard >= c->shards)
			return gp_error(GP_EINVAL, "loader shard %d of %d", c->shard, c->shards);
		if (count < c->shards)
			return gp_error(GP_EINVAL, "%d images cannot be shared among %d ranks", count,
					c->shards);
		count /= c->shards;
	}
	if (c->start_batch < 0)
		return gp_error(GP_EINVAL, "loader start batch %ld is negative", c->start_batch);
	if (c->batch < 1 || c->prefetch < 1)
		return gp_error(GP_EINVAL, "loader needs batch >= 1 and prefetch >= 1 "
				"(got %d, %d)", c->batch, c->prefetch);
	if (c->workers < 0 || c->workers > LOADER_WORKERS_MAX)
		return gp_error(GP_EINVAL, "loader workers must be 0..%d (got %d)",
				LOADER_WORKERS_MAX, c->workers);
	if (c->prefetch > LOADER_PREFETCH_MAX)
		return gp_error(GP_EINVAL, "loader prefetch must be 1..%d (got %d)",
				LOADER_PREFETCH_MAX, c->prefetch);
	if (c->size != dataset_size(ds))
		return gp_error(GP_EINVAL, "loader size %d differs from the dataset's %d",
				c->size, dataset_size(ds));
	if (c->drop_last && count < c->batch)
		return gp_error(GP_EINVAL, "%d images make no full batch of %d%s", count,
				c->batch, c->shards > 1 ? " on each rank" : "");
	return 0;
}

int loader_create(struct dataset *ds, const struct loader_config *cfg, struct loader **out)
{
	GP_TRY(config_check(ds, cfg));
	int count = dataset_count(ds), rc = 0;
	struct loader *l = calloc(1, sizeof(*l));
	if (!l)
		return gp_error(GP_ENOMEM, "out of memory");
	l->ds = ds;
	l->cfg = *cfg;
	int local = local_count(l);
	l->per_epoch = cfg->drop_last ? local / cfg->batch : (local + cfg->batch - 1) / cfg->batch;
	l->sample_floats = (size_t)3 * cfg->size * cfg->size;
	l->n_slots = (cfg->workers > 0 ? cfg->workers : 1) * cfg->prefetch;
	l->host_free = host_free_fn;
	l->next_claim = l->next_deliver = cfg->start_batch;
	atomic_init(&l->stop, 0);
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cond_free, NULL);
	pthread_cond_init(&l->cond_ready, NULL);

	l->slots = calloc(l->n_slots, sizeof(*l->slots));
	l->bad = calloc(count, sizeof(*l->bad));
	l->n_fillers = cfg->workers > 0 ? cfg->workers : 1;
	l->fillers = calloc(l->n_fillers, sizeof(*l->fillers));
	l->threads = calloc(l->n_fillers, sizeof(*l->threads));
	if (!l->slots || !l->bad || !l->fillers || !l->threads) {
		rc = gp_error(GP_ENOMEM, "out of memory");
		goto out_destroy;
	}
	for (int i = 0; i < l->n_slots; i++) {
		struct slot *s = &l->slots[i];
		s->seq = -1;
		s->b.x = host_alloc_fn(sizeof(float) * l->sample_floats * cfg->batch);
		s->b.labels = host_alloc_fn(sizeof(int32_t) * cfg->batch);
		if (!s->b.x || !s->b.labels) {
			rc = gp_error(GP_ENOMEM, "out of host memory for %d batch buffers of "
				      "%zu bytes", l->n_slots,
				      sizeof(float) * l->sample_floats * cfg->batch);
			goto out_destroy;
		}
	}
	for (int i = 0; i < l->n_fillers; i++) {
		struct filler *f = &l->fillers[i];
		f->l = l;
		f->perm_epoch = -1;
		f->perm = malloc(sizeof(int32_t) * count);
		if (!f->perm) {
			rc = gp_error(GP_ENOMEM, "out of memory");
			goto out_destroy;
		}
		rc = image_ctx_init(&f->img);
		if (rc < 0)
			goto out_destroy;
	}
	for (int i = 0; i < cfg->workers; i++) {
		if (pthread_create(&l->threads[i], NULL, worker_main, &l->fillers[i]) != 0) {
			rc = gp_error(GP_ENOMEM, "cannot start loader worker %d", i);
			goto out_destroy;
		}
		l->n_threads++;
	}
	*out = l;
	return 0;
out_destroy:
	loader_destroy(l);
	return rc;
}

int loader_next(struct loader *l, struct batch **out)
{
	long seq = l->next_deliver;
	struct slot *s = &l->slots[seq % l->n_slots];
	double t0 = gp_now_ms();
	int rc = 0;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		/* The slot still holds an older batch the caller has not released: no
		 * worker can ever fill it, so waiting would hang. */
		if (s->state == SLOT_OUT) {
			rc = gp_error(GP_EINVAL, "all %d batch buffers are out: release a "
				      "batch before asking for the next", l->n_slots);
			goto out_unlock;
		}
		if (l->cfg.workers == 0 || (s->state == SLOT_READY && s->seq == seq))
			break;
		pthread_cond_wait(&l->cond_ready, &l->mu);
	}
	if (l->cfg.workers == 0) {
		s->seq = seq;
		s->err = filler_fill(&l->fillers[0], s, seq);
		if (s->err < 0)
			snprintf(s->errmsg, sizeof(s->errmsg), "%s", gp_errmsg());
	}
	l->next_deliver++;
	if (s->err < 0) {
		rc = gp_error(s->err, "%s", s->errmsg);
		s->state = SLOT_FREE;
		pthread_cond_broadcast(&l->cond_free);
		goto out_unlock;
	}
	s->state = SLOT_OUT;
	l->stats.images += s->st.images;
	l->stats.skipped_corrupt += s->st.skipped_corrupt;
	l->stats.decode_ms_total += s->st.decode_ms_total;
	l->stats.decoded_pixels += s->st.decoded_pixels;
	l->stats.full_pixels += s->st.full_pixels;
	s->b.wait_ms = gp_now_ms() - t0;
	*out = &s->b;
out_unlock:
	pthread_mutex_unlock(&l->mu);
	return rc;
}

void loader_release(struct loader *l, struct batch *b)
{
	struct slot *s = (struct slot *)b;
	pthread_mutex_lock(&l->mu);
	s->state = SLOT_FREE;
	pthread_cond_broadcast(&l->cond_free);
	pthread_mutex_unlock(&l->mu);
}

void loader_get_stats(const struct loader *l, struct loader_stats *out)
{
	*out = l->stats;
}

void loader_destroy(struct loader *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	atomic_store(&l->stop, 1);
	pthread_cond_broadcast(&l->cond_free);
	pthread_cond_broadcast(&l->cond_ready);
	pthread_mutex_unlock(&l->mu);
	for (int i = 0; i < l->n_threads; i++)
		pthread_join(l->threads[i], NULL);
	if (l->fillers)
		for (int i = 0; i < l->n_fillers; i++) {
			free(l->fillers[i].perm);
			image_ctx_free(&l->fillers[i].img);
		}
	if (l->slots)
		for (int i = 0; i < l->n_slots; i++) {
			if (l->slots[i].b.x)
				l->host_free(l->slots[i].b.x);
			if (l->slots[i].b.labels)
				l->host_free(l->slots[i].b.labels);
		}
	pthread_cond_destroy(&l->cond_free);
	pthread_cond_destroy(&l->cond_ready);
	pthread_mutex_destroy(&l->mu);
	free(l->slots);
	free((void *)l->bad);
	free(l->fillers);
	free(l->threads);
	free(l);
}
