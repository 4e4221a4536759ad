#include "data/gpu_loader.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "core/tuning.h"
#include "data/image.h"
#include "data/transform.h"

/* One sample of a batch being made: which index it is now (after replacements),
 * its try count, and its file's bytes. */
struct gpu_sample {
	int idx, attempt;
	uint8_t *file;
	size_t cap_bytes;
};

/* A batch's files, read and with their geometry drawn. Two of them: while the
 * decoder works on batch seq, a thread reads batch seq + 1 into the other. */
struct gpu_set {
	struct gpu_loader *l;
	long seq;  /* the batch it holds, -1 none */
	long want; /* the batch the thread is reading */
	int n, epoch, index;
	struct gpu_sample *samples;
	struct gpu_decode_item *items;
	struct image_ctx ctx;
	struct gpu_decode_parser *parser; /* nvJPEG's header reads, here; or NULL */
	struct loader_stats st;
	int rc;
	char errmsg[512];
};

/* A batch buffer of the decoder and what goes with it: free, being written by the
 * decode thread, ready for the caller, or held by it (after gpu_loader_next until
 * its next call). */
struct gpu_slot {
	long seq;        /* the batch it holds, ready or held; -1 free or being written */
	int n, epoch, index;
	int32_t *labels;
	struct loader_stats st;      /* of this batch: counted when delivered */
	struct gpu_decode_stats gst;
};

struct gpu_loader {
	struct dataset *ds;
	struct gpu_loader_config cfg;
	int per_epoch, count; /* count: the dataset's samples */
	int local;            /* those this loader reads per epoch: its shard's */
	long seq;        /* the batch gpu_loader_next returns next */
	int32_t *perm;  /* used by one reader at a time */
	int perm_epoch;
	atomic_uchar *bad; /* per dataset sample: found corrupt (warned once) */
	struct gpu_decoder *dec; /* owned; NULL with a caller's decoder */
	struct gpu_loader_decoder ops;
	struct gpu_set set[2];
	pthread_t reader;  /* started and joined by the decode thread */
	int reading;
	unsigned char *failed;

	/* Between the decode thread and the caller, under mu: the slots' seq, stop and
	 * the error. The rest of a slot belongs to whoever its state gives it to. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sync_made;
	pthread_t decoder;
	int decoding;
	int stop;
	long err_seq;      /* the batch the decode thread failed on, -1 none */
	int err_rc;
	char errmsg[512];
	struct gpu_slot slot[GPU_LOADER_OUTPUTS_MAX];
	int outputs;       /* slots in use, GPUPERF_DECODE_BUFFERS */
	int held;          /* the slot the caller holds, -1 none */

	struct loader_stats st;       /* over delivered batches */
	struct gpu_decode_stats gst;
};

/* Launched, not run: the decode thread goes on to the next batch's nvJPEG call while
 * this batch's colour and augment kernels wait for SMs beside the step, and the
 * caller waits for the buffer (nvjpeg_wait) when it takes it. mobilenet_v2 bf16 from
 * JPEGs on the H100: 7,843-7,906 img/s run (s14-3/4), 7,947-7,956 launched (s14-5/6),
 * against 8,342-8,368 synthetic. */
static int nvjpeg_run(void *self, int output, const struct gpu_decode_item *items, int n,
		      unsigned char *failed)
{
	return gpu_decoder_launch(self, output, items, n, failed);
}

static int nvjpeg_wait(void *self, int output)
{
	return gpu_decoder_output_wait(self, output);
}

static const char *nvjpeg_error(void *self, int i)
{
	return gpu_decoder_error(self, i);
}

static void *nvjpeg_output(void *self, int output)
{
	return gpu_decoder_output(self, output);
}

static void *nvjpeg_output_event(void *self, int output)
{
	return gpu_decoder_output_event(self, output);
}

static int loader_make(struct dataset *ds, const struct gpu_loader_config *cfg,
		       const struct gpu_loader_decoder *dec, struct gpu_loader **out)
{
	int count = dataset_count(ds);
	if (!dataset_path(ds, 0))
		return gp_error(GP_EINVAL, "--decode gpu needs a folder of JPEG files "
				"(ImageFolder), not synthetic or CIFAR-10 data");
	if (cfg->batch < 1 || cfg->size != dataset_size(ds))
		return gp_error(GP_EINVAL, "gpu loader: batch %d, size %d (dataset's %d)",
				cfg->batch, cfg->size, dataset_size(ds));
	if (cfg->start_batch < 0)
		return gp_error(GP_EINVAL, "loader start batch %ld is negative", cfg->start_batch);
	int local = count;
	if (cfg->shards > 1) { /* as loader.c's config_check */
		if (cfg->shard < 0 || cfg->shard >= cfg->shards)
			return gp_error(GP_EINVAL, "loader shard %d of %d", cfg->shard, cfg->shards);
		if (count < cfg->shards)
			return gp_error(GP_EINVAL, "%d images cannot be shared among %d ranks", count,
					cfg->shards);
		local = count / cfg->shards;
	}
	if (cfg->drop_last && local < cfg->batch)
		return gp_error(GP_EINVAL, "%d images make no full batch of %d%s", local, cfg->batch,
				cfg->shards > 1 ? " on each rank" : "");
	struct gpu_loader *l = calloc(1, sizeof(*l));
	if (!l)
		return gp_error(GP_ENOMEM, "out of memory");
	int rc = 0;
	l->ds = ds;
	l->cfg = *cfg;
	l->count = count;
	l->local = local;
	l->per_epoch = cfg->drop_last ? local / cfg->batch : (local + cfg->batch - 1) / cfg->batch;
	l->perm_epoch = -1;
	l->seq = cfg->start_batch;
	l->perm = malloc(sizeof(*l->perm) * count);
	l->bad = calloc(count, sizeof(*l->bad));
	l->failed = calloc(cfg->batch, 1);
	l->err_seq = -1;
	l->held = -1;
	l->outputs = tuning_get()->decode_buffers;
	if (!l->perm || !l->bad || !l->failed) {
		rc = gp_error(GP_ENOMEM, "out of memory");
		goto fail;
	}
	if (pthread_mutex_init(&l->mu, NULL) != 0) {
		rc = gp_error(GP_ENOMEM, "cannot make the gpu loader's mutex");
		goto fail;
	}
	if (pthread_cond_init(&l->cv, NULL) != 0) {
		pthread_mutex_destroy(&l->mu);
		rc = gp_error(GP_ENOMEM, "cannot make the gpu loader's condition variable");
		goto fail;
	}
	l->sync_made = 1;
	for (int k = 0; k < l->outputs; k++) {
		l->slot[k].seq = -1;
		l->slot[k].labels = calloc(cfg->batch, sizeof(*l->slot[k].labels));
		if (!l->slot[k].labels) {
			rc = gp_error(GP_ENOMEM, "out of memory");
			goto fail;
		}
	}
	for (int k = 0; k < 2; k++) {
		struct gpu_set *set = &l->set[k];
		set->l = l;
		set->seq = -1;
		set->samples = calloc(cfg->batch, sizeof(*set->samples));
		set->items = calloc(cfg->batch, sizeof(*set->items));
		if (!set->samples || !set->items) {
			rc = gp_error(GP_ENOMEM, "out of memory");
			goto fail;
		}
		if ((rc = image_ctx_init(&set->ctx)) < 0)
			goto fail;
	}
	if (dec) {
		l->ops = *dec;
	} else {
		struct gpu_decoder_opts o = gpu_decoder_opts_default();
		o.cpu_threads = cfg->decode_threads;
		rc = gpu_decoder_create_opts(cfg->device, cfg->batch, cfg->size, cfg->layout,
					     l->outputs, &o, &l->dec);
		if (rc < 0)
			goto fail;
		l->ops = (struct gpu_loader_decoder){ l->dec, nvjpeg_run, nvjpeg_error,
						      nvjpeg_output, nvjpeg_output_event,
						      nvjpeg_wait };
		for (int k = 0; k < 2; k++)
			if ((rc = gpu_decode_parser_create(l->dec, &l->set[k].parser)) < 0)
				goto fail;
	}
	*out = l;
	return 0;
fail:
	gpu_loader_destroy(l);
	return rc;
}

int gpu_loader_create(struct dataset *ds, const struct gpu_loader_config *cfg,
		      struct gpu_loader **out)
{
	return loader_make(ds, cfg, NULL, out);
}

int gpu_loader_create_with(struct dataset *ds, const struct gpu_loader_config *cfg,
			   const struct gpu_loader_decoder *dec, struct gpu_loader **out)
{
	return loader_make(ds, cfg, dec, out);
}

static void warn_bad(struct gpu_loader *l, int idx, const char *why)
{
	if (atomic_exchange(&l->bad[idx], 1))
		return;
	const char *path = dataset_path(l->ds, idx);
	fprintf(stderr, "warning: skipping '%s': %s\n", path ? path : "?", why);
}

/* Move sample s on to its next replacement, as the CPU loader does; GP_EFORMAT when
 * it has run out of tries. */
static int sample_replace(struct gpu_loader *l, struct gpu_set *set, struct gpu_sample *s)
{
	set->st.skipped_corrupt++;
	uint64_t seed = sample_seed(l->cfg.seed, set->epoch, s->idx);
	s->idx = loader_replacement(seed, s->attempt, l->count);
	if (++s->attempt >= LOADER_REPLACE_TRIES_MAX)
		return gp_error(GP_EFORMAT, "no valid image after %d replacements of a corrupt one",
				LOADER_REPLACE_TRIES_MAX);
	return 0;
}

/* Read sample s's file and header and draw its geometry into item (its dst set by
 * the caller); corrupt or unreadable files are replaced until one reads. The bytes
 * move from the set's read buffer into the sample's own, to live until the decode. */
static int sample_prepare(struct gpu_loader *l, struct gpu_set *set, struct gpu_sample *s,
			  struct gpu_decode_item *item)
{
	size_t len = 0;
	for (;;) {
		int rc = 0;
		if (!atomic_load(&l->bad[s->idx])) {
			double t0 = gp_now_ms();
			rc = image_read_file(&set->ctx, dataset_path(l->ds, s->idx), &len);
			if (rc == 0)
				rc = image_header(&set->ctx, set->ctx.file, len, &item->kind,
						  &item->w, &item->h);
			set->st.decode_ms_total += gp_now_ms() - t0;
			if (rc == 0)
				break;
			if (rc != GP_EFORMAT && rc != GP_EIO)
				return rc;
			warn_bad(l, s->idx, gp_errmsg());
		}
		GP_TRY(sample_replace(l, set, s));
	}
	if (len > s->cap_bytes) {
		uint8_t *p = realloc(s->file, len);
		if (!p)
			return gp_error(GP_ENOMEM, "out of memory (%zu bytes for a file)", len);
		s->file = p;
		s->cap_bytes = len;
	}
	memcpy(s->file, set->ctx.file, len);
	item->hdr = (struct gpu_decode_header){ 0 }; /* the last batch's, if any: not this file's */
	item->data = s->file;
	item->len_bytes = len;
	sample_geometry_make(l->cfg.train, l->cfg.size,
			     sample_seed(l->cfg.seed, set->epoch, s->idx), item->w, item->h,
			     &item->geo);
	set->st.full_pixels += (double)item->w * item->h;
	set->st.decoded_pixels += (double)item->w * item->h;
	return 0;
}

/* Read batch seq's files into set. */
static int set_fill(struct gpu_loader *l, struct gpu_set *set, long seq)
{
	set->seq = -1;
	set->epoch = (int)(seq / l->per_epoch);
	set->index = (int)(seq % l->per_epoch);
	int start = set->index * l->cfg.batch, shards = l->cfg.shards > 1 ? l->cfg.shards : 1;
	set->n = l->local - start < l->cfg.batch ? l->local - start : l->cfg.batch;
	if (l->perm_epoch != set->epoch) {
		loader_epoch_order(l->cfg.seed, l->cfg.train, l->count, set->epoch, l->perm);
		l->perm_epoch = set->epoch;
	}
	for (int i = 0; i < set->n; i++) {
		/* every rank shuffles the same order and takes every shards-th sample of it */
		set->samples[i].idx = l->perm[(size_t)(start + i) * shards +
					      (shards > 1 ? l->cfg.shard : 0)];
		set->samples[i].attempt = 0;
		set->items[i].dst = i;
		GP_TRY(sample_prepare(l, set, &set->samples[i], &set->items[i]));
	}
	if (set->parser) {
		double t0 = gp_now_ms();
		gpu_decoder_parse(set->parser, set->items, set->n);
		set->st.decode_ms_total += gp_now_ms() - t0;
	}
	set->seq = seq;
	return 0;
}

static void *reader_main(void *arg)
{
	struct gpu_set *set = arg;
	set->rc = set_fill(set->l, set, set->want);
	if (set->rc < 0)
		snprintf(set->errmsg, sizeof(set->errmsg), "%s", gp_errmsg());
	return NULL;
}

/* Wait for the reading thread, if one runs. */
static void reader_join(struct gpu_loader *l)
{
	if (l->reading)
		pthread_join(l->reader, NULL);
	l->reading = 0;
}

static void stats_add(struct loader_stats *to, struct loader_stats *from)
{
	to->images += from->images;
	to->skipped_corrupt += from->skipped_corrupt;
	to->decode_ms_total += from->decode_ms_total;
	to->decoded_pixels += from->decoded_pixels;
	to->full_pixels += from->full_pixels;
	memset(from, 0, sizeof(*from));
}

static void decode_stats_add(struct gpu_decode_stats *to, const struct gpu_decode_stats *from)
{
	to->hw_decoded += from->hw_decoded;
	to->cuda_decoded += from->cuda_decoded;
	to->cpu_fallback += from->cpu_fallback;
	to->failed += from->failed;
	to->nvjpeg_chroma += from->nvjpeg_chroma;
	to->cpu_shared += from->cpu_shared;
	to->decode_ms += from->decode_ms;
	to->augment_ms += from->augment_ms;
	to->parse_ms += from->parse_ms;
	to->parsed_ahead += from->parsed_ahead;
	to->region_decoded += from->region_decoded;
	to->region_pixels += from->region_pixels;
	to->region_full_pixels += from->region_full_pixels;
}

/* What the decoder counted since `before`: the counts of one batch. */
static void decode_stats_since(const struct gpu_decode_stats *now,
			       const struct gpu_decode_stats *before, struct gpu_decode_stats *d)
{
	d->hw_decoded = now->hw_decoded - before->hw_decoded;
	d->cuda_decoded = now->cuda_decoded - before->cuda_decoded;
	d->cpu_fallback = now->cpu_fallback - before->cpu_fallback;
	d->failed = now->failed - before->failed;
	d->nvjpeg_chroma = now->nvjpeg_chroma - before->nvjpeg_chroma;
	d->cpu_shared = now->cpu_shared - before->cpu_shared;
	d->decode_ms = now->decode_ms - before->decode_ms;
	d->augment_ms = now->augment_ms - before->augment_ms;
	d->parse_ms = now->parse_ms - before->parse_ms;
	d->parsed_ahead = now->parsed_ahead - before->parsed_ahead;
	d->region_decoded = now->region_decoded - before->region_decoded;
	d->region_pixels = now->region_pixels - before->region_pixels;
	d->region_full_pixels = now->region_full_pixels - before->region_full_pixels;
}

/* Make batch seq into slot k (decode thread): its files (read ahead by the reader
 * thread, which then starts on seq + 1), decoded into buffer k; what no decoder could
 * read is replaced and the replacements decoded, until every position holds an
 * image. The batch's counts go into the slot, to be added when it is delivered. */
static int batch_make(struct gpu_loader *l, long seq, int k)
{
	struct gpu_set *set = &l->set[seq % 2], *next = &l->set[(seq + 1) % 2];
	struct gpu_slot *slot = &l->slot[k];
	struct gpu_decode_stats before = { 0 }, after = { 0 };
	reader_join(l);
	if (set->seq != seq) {
		if (set->want == seq && set->rc < 0)
			return gp_error(set->rc, "%s", set->errmsg);
		GP_TRY(set_fill(l, set, seq));
	}
	next->want = seq + 1;
	next->rc = 0;
	next->seq = -1;
	if (pthread_create(&l->reader, NULL, reader_main, next) == 0)
		l->reading = 1;
	if (l->dec)
		gpu_decoder_get_stats(l->dec, &before);
	int pending = set->n;
	struct gpu_decode_item *items = set->items;
	while (pending > 0) {
		GP_TRY(l->ops.run(l->ops.self, k, items, pending, l->failed));
		int k_next = 0;
		for (int i = 0; i < pending; i++) {
			if (!l->failed[i])
				continue;
			int dst = items[i].dst;
			struct gpu_sample *s = &set->samples[dst];
			warn_bad(l, s->idx, l->ops.error(l->ops.self, i));
			GP_TRY(sample_replace(l, set, s));
			struct gpu_decode_item it = { .dst = dst };
			GP_TRY(sample_prepare(l, set, s, &it));
			items[k_next++] = it;
		}
		pending = k_next;
	}
	if (l->dec)
		gpu_decoder_get_stats(l->dec, &after);
	decode_stats_since(&after, &before, &slot->gst);
	for (int i = 0; i < set->n; i++)
		slot->labels[i] = dataset_label(l->ds, set->samples[i].idx);
	set->st.images += set->n;
	memset(&slot->st, 0, sizeof(slot->st));
	stats_add(&slot->st, &set->st);
	slot->n = set->n;
	slot->epoch = set->epoch;
	slot->index = set->index;
	set->seq = -1;
	return 0;
}

/* The decode thread: batches in order from the first the caller asks for, each into
 * the slot of its number once the caller has handed that slot back; stops at stop or
 * at its first error, which the caller finds at that batch. Signals go to the other
 * threads (the trainer's SIGINT handler), not to a read here. */
static void *decoder_main(void *arg)
{
	struct gpu_loader *l = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (long seq = l->seq;; seq++) {
		int k = (int)(seq % l->outputs);
		pthread_mutex_lock(&l->mu);
		while (!l->stop && l->slot[k].seq != -1)
			pthread_cond_wait(&l->cv, &l->mu);
		int stop = l->stop;
		pthread_mutex_unlock(&l->mu);
		if (stop)
			break;
		int rc = batch_make(l, seq, k);
		pthread_mutex_lock(&l->mu);
		if (rc < 0) {
			l->err_rc = rc;
			l->err_seq = seq;
			snprintf(l->errmsg, sizeof(l->errmsg), "%s", gp_errmsg());
		} else {
			l->slot[k].seq = seq;
		}
		pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
		if (rc < 0)
			break;
	}
	reader_join(l);
	return NULL;
}

/* Hand back the slot the caller holds, wait for batch l->seq (the time the caller
 * blocks is its data wait) and hold its slot in turn. The decode thread starts at the
 * first call, not at create, so that it does not compete with the net's set-up. */
int gpu_loader_next(struct gpu_loader *l, struct gpu_batch *out)
{
	long seq = l->seq;
	int k = (int)(seq % l->outputs);
	pthread_mutex_lock(&l->mu);
	if (l->held >= 0) {
		l->slot[l->held].seq = -1;
		l->held = -1;
		pthread_cond_broadcast(&l->cv);
	}
	if (!l->decoding) {
		int e = pthread_create(&l->decoder, NULL, decoder_main, l);
		if (e != 0) {
			pthread_mutex_unlock(&l->mu);
			return gp_error(GP_ENOMEM, "cannot start the gpu loader's thread: %s",
					strerror(e));
		}
		l->decoding = 1;
	}
	while (l->slot[k].seq != seq && l->err_seq != seq)
		pthread_cond_wait(&l->cv, &l->mu);
	if (l->slot[k].seq != seq) {
		char why[sizeof(l->errmsg)];
		int rc = l->err_rc;
		snprintf(why, sizeof(why), "%s", l->errmsg);
		pthread_mutex_unlock(&l->mu);
		return gp_error(rc, "%s", why);
	}
	l->held = k;
	pthread_mutex_unlock(&l->mu);
	if (l->ops.wait)
		GP_TRY(l->ops.wait(l->ops.self, k));
	struct gpu_slot *slot = &l->slot[k];
	stats_add(&l->st, &slot->st);
	decode_stats_add(&l->gst, &slot->gst);
	l->seq++;
	out->x = l->ops.output(l->ops.self, k);
	out->read_event = l->ops.output_event ? l->ops.output_event(l->ops.self, k) : NULL;
	out->labels = slot->labels;
	out->n = slot->n;
	out->epoch = slot->epoch;
	out->index = slot->index;
	return 0;
}

int gpu_loader_outputs(const struct gpu_loader *l)
{
	return l->outputs;
}

int gpu_loader_batches_per_epoch(const struct gpu_loader *l)
{
	return l->per_epoch;
}

void gpu_loader_get_stats(const struct gpu_loader *l, struct loader_stats *st,
			  struct gpu_decode_stats *gs)
{
	*st = l->st;
	*gs = l->gst;
}

const char *gpu_loader_backend(const struct gpu_loader *l)
{
	return l->dec ? gpu_decoder_backend(l->dec) : "caller's";
}

void gpu_loader_destroy(struct gpu_loader *l)
{
	if (!l)
		return;
	if (l->decoding) {
		pthread_mutex_lock(&l->mu);
		l->stop = 1;
		pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->decoder, NULL);
	}
	reader_join(l);
	for (int k = 0; k < 2; k++)
		gpu_decode_parser_destroy(l->set[k].parser); /* before the decoder: its handle */
	gpu_decoder_destroy(l->dec);
	for (int k = 0; k < 2; k++) {
		struct gpu_set *set = &l->set[k];
		image_ctx_free(&set->ctx);
		if (set->samples)
			for (int i = 0; i < l->cfg.batch; i++)
				free(set->samples[i].file);
		free(set->samples);
		free(set->items);
	}
	for (int k = 0; k < GPU_LOADER_OUTPUTS_MAX; k++)
		free(l->slot[k].labels);
	if (l->sync_made) {
		pthread_cond_destroy(&l->cv);
		pthread_mutex_destroy(&l->mu);
	}
	free(l->failed);
	free(l->perm);
	free((void *)l->bad);
	free(l);
}
