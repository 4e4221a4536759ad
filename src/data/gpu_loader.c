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

/* A batch's files, read and with their geometry drawn. Two of them a lane: while its
 * decoder works on batch seq, a thread reads the lane's next batch into the other. */
struct gpu_set {
	struct gpu_lane *lane;
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

/* One decoder with its decode thread, its reader thread and their two sets: lane j
 * of `lanes` makes the batches seq with seq % lanes == j, into the slots k with k %
 * lanes == j (its decoder's buffer k / lanes). */
struct gpu_lane {
	struct gpu_loader *l;
	int id;
	struct gpu_decoder *dec; /* owned; NULL with a caller's decoder */
	struct gpu_loader_decoder ops;
	struct gpu_set set[2];
	int32_t *perm;     /* the epoch order, of perm_epoch; one thread at a time */
	int perm_epoch;
	pthread_t reader;  /* started and joined by the decode thread */
	int reading;
	pthread_t thread;
	int running;
	unsigned char *failed;
};

struct gpu_loader {
	struct dataset *ds;
	struct gpu_loader_config cfg;
	int per_epoch, count; /* count: the dataset's samples */
	int local;            /* those this loader reads per epoch: its shard's */
	long seq;        /* the batch gpu_loader_next returns next */
	atomic_uchar *bad; /* per dataset sample: found corrupt (warned once) */
	struct gpu_lane lane[GPU_LOADER_DECODERS_MAX];
	int lanes;

	/* Between the decode threads and the caller, under mu: the slots' seq, stop and
	 * the error. The rest of a slot belongs to whoever its state gives it to. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sync_made;
	int stop;
	long err_seq;      /* the first batch a decode thread failed on, -1 none */
	int err_rc;
	char errmsg[512];
	struct gpu_slot slot[GPU_LOADER_OUTPUTS_MAX];
	int outputs;       /* slots in use: GPUPERF_DECODE_BUFFERS, a multiple of lanes */
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

/* A lane's sets and its order of the samples. */
static int lane_init(struct gpu_loader *l, int j)
{
	struct gpu_lane *ln = &l->lane[j];
	ln->l = l;
	ln->id = j;
	ln->perm_epoch = -1;
	ln->perm = malloc(sizeof(*ln->perm) * l->count);
	ln->failed = calloc(l->cfg.batch, 1);
	if (!ln->perm || !ln->failed)
		return gp_error(GP_ENOMEM, "out of memory");
	for (int k = 0; k < 2; k++) {
		struct gpu_set *set = &ln->set[k];
		set->lane = ln;
		set->seq = -1;
		set->samples = calloc(l->cfg.batch, sizeof(*set->samples));
		set->items = calloc(l->cfg.batch, sizeof(*set->items));
		if (!set->samples || !set->items)
			return gp_error(GP_ENOMEM, "out of memory");
		GP_TRY(image_ctx_init(&set->ctx));
	}
	return 0;
}

/* The decoder of lane j of `lanes`: its share of the CPU threads (split exactly) and
 * `per` batch buffers. */
static int lane_decoder_create(struct gpu_loader *l, int j, int lanes, int per)
{
	struct gpu_lane *ln = &l->lane[j];
	struct gpu_decoder_opts o = gpu_decoder_opts_default();
	o.cpu_threads = l->cfg.decode_threads / lanes + (j < l->cfg.decode_threads % lanes);
	GP_TRY(gpu_decoder_create_opts(l->cfg.device, l->cfg.batch, l->cfg.size, l->cfg.layout,
				       per, &o, &ln->dec));
	ln->ops = (struct gpu_loader_decoder){ ln->dec, nvjpeg_run, nvjpeg_error, nvjpeg_output,
					       nvjpeg_output_event, nvjpeg_wait };
	return 0;
}

/* The batch buffers, rounded up to a multiple of the lanes. */
static int outputs_for(int lanes)
{
	int n = tuning_get()->decode_buffers;
	n = (n + lanes - 1) / lanes * lanes;
	return n > GPU_LOADER_OUTPUTS_MAX ? GPU_LOADER_OUTPUTS_MAX / lanes * lanes : n;
}

/* nvJPEG decoders: GPUPERF_DECODERS, or (auto) two where the first one made runs on
 * the JPEG engines, one on CUDA's backend. Two decoders, each with its own thread,
 * reader and buffers, take alternate batches: a batch that one decoder is slow on
 * (its nvJPEG call waiting behind the step's kernels) no longer holds up the next
 * one. mobilenet_v2 bf16 from JPEGs on the H100 (s16): the spread between repeats
 * went from 67-87 to 8-11 img/s. The first decoder is made for two and made again
 * for one where it turns out to be alone; under auto, a second decoder that cannot be
 * made (device memory: it doubles the decoder's) leaves the first alone, with its
 * buffers, and a note. */
static int decoders_create(struct gpu_loader *l)
{
	int want = tuning_get()->decoders;
	int lanes = want ? want : GPU_LOADER_DECODERS_MAX;
	GP_TRY(lane_decoder_create(l, 0, lanes, outputs_for(lanes) / lanes));
	if (!want && strcmp(gpu_decoder_backend(l->lane[0].dec), "hardware")) {
		gpu_decoder_destroy(l->lane[0].dec);
		l->lane[0].dec = NULL;
		lanes = 1;
		GP_TRY(lane_decoder_create(l, 0, lanes, outputs_for(lanes)));
	}
	l->lanes = lanes;
	l->outputs = outputs_for(lanes);
	for (int j = 1; j < lanes; j++) {
		int rc = lane_decoder_create(l, j, lanes, l->outputs / lanes);
		if (rc < 0 && !want) {
			fprintf(stderr, "note: a second nvJPEG decoder could not be made (%s); one "
				"decoder with %d batch buffers\n", gp_errmsg(), l->outputs / lanes);
			gp_error_clear();
			l->outputs /= lanes;
			l->lanes = 1;
			break;
		}
		GP_TRY(rc);
	}
	lanes = l->lanes;
	for (int j = 0; j < lanes; j++) {
		GP_TRY(lane_init(l, j));
		for (int k = 0; k < 2; k++)
			GP_TRY(gpu_decode_parser_create(l->lane[j].dec, &l->lane[j].set[k].parser));
	}
	return 0;
}

static int loader_make(struct dataset *ds, const struct gpu_loader_config *cfg,
		       const struct gpu_loader_decoder *decs, int n_decs, struct gpu_loader **out)
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
	if (decs && (n_decs < 1 || n_decs > GPU_LOADER_DECODERS_MAX))
		return gp_error(GP_EINVAL, "gpu loader: %d decoders (1 to %d)", n_decs,
				GPU_LOADER_DECODERS_MAX);
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
	l->seq = cfg->start_batch;
	l->bad = calloc(count, sizeof(*l->bad));
	l->err_seq = -1;
	l->held = -1;
	if (!l->bad) {
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
	for (int k = 0; k < GPU_LOADER_OUTPUTS_MAX; k++) {
		l->slot[k].seq = -1;
		l->slot[k].labels = calloc(cfg->batch, sizeof(*l->slot[k].labels));
		if (!l->slot[k].labels) {
			rc = gp_error(GP_ENOMEM, "out of memory");
			goto fail;
		}
	}
	if (decs) {
		l->lanes = n_decs;
		l->outputs = outputs_for(n_decs);
		for (int j = 0; j < n_decs && rc == 0; j++) {
			l->lane[j].ops = decs[j];
			rc = lane_init(l, j);
		}
	} else {
		rc = decoders_create(l);
	}
	if (rc < 0)
		goto fail;
	*out = l;
	return 0;
fail:
	gpu_loader_destroy(l);
	return rc;
}

int gpu_loader_create(struct dataset *ds, const struct gpu_loader_config *cfg,
		      struct gpu_loader **out)
{
	return loader_make(ds, cfg, NULL, 0, out);
}

int gpu_loader_create_with(struct dataset *ds, const struct gpu_loader_config *cfg,
			   const struct gpu_loader_decoder *decs, int n_decs,
			   struct gpu_loader **out)
{
	if (!decs)
		return gp_error(GP_EINVAL, "gpu loader: no decoder");
	return loader_make(ds, cfg, decs, n_decs, out);
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
static int set_fill(struct gpu_set *set, long seq)
{
	struct gpu_lane *ln = set->lane;
	struct gpu_loader *l = ln->l;
	set->seq = -1;
	set->epoch = (int)(seq / l->per_epoch);
	set->index = (int)(seq % l->per_epoch);
	int start = set->index * l->cfg.batch, shards = l->cfg.shards > 1 ? l->cfg.shards : 1;
	set->n = l->local - start < l->cfg.batch ? l->local - start : l->cfg.batch;
	if (ln->perm_epoch != set->epoch) {
		loader_epoch_order(l->cfg.seed, l->cfg.train, l->count, set->epoch, ln->perm);
		ln->perm_epoch = set->epoch;
	}
	for (int i = 0; i < set->n; i++) {
		/* every rank shuffles the same order and takes every shards-th sample of it */
		set->samples[i].idx = ln->perm[(size_t)(start + i) * shards +
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
	set->rc = set_fill(set, set->want);
	if (set->rc < 0)
		snprintf(set->errmsg, sizeof(set->errmsg), "%s", gp_errmsg());
	return NULL;
}

/* Wait for the lane's reading thread, if one runs. */
static void reader_join(struct gpu_lane *ln)
{
	if (ln->reading)
		pthread_join(ln->reader, NULL);
	ln->reading = 0;
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
	to->one_pass += from->one_pass;
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
	d->one_pass = now->one_pass - before->one_pass;
}

/* Make batch seq into slot k (lane ln's decode thread): its files (read ahead by the
 * lane's reader thread, which then starts on the lane's next batch), decoded into the
 * lane's buffer k / lanes; what no decoder could read is replaced and the
 * replacements decoded, until every position holds an image. The batch's counts go
 * into the slot, to be added when it is delivered. */
static int batch_make(struct gpu_lane *ln, long seq, int k)
{
	struct gpu_loader *l = ln->l;
	long q = seq / l->lanes; /* the lane's own count */
	struct gpu_set *set = &ln->set[q % 2], *next = &ln->set[(q + 1) % 2];
	struct gpu_slot *slot = &l->slot[k];
	struct gpu_decode_stats before = { 0 }, after = { 0 };
	int buf = k / l->lanes;
	reader_join(ln);
	if (set->seq != seq) {
		if (set->want == seq && set->rc < 0)
			return gp_error(set->rc, "%s", set->errmsg);
		GP_TRY(set_fill(set, seq));
	}
	next->want = seq + l->lanes;
	next->rc = 0;
	next->seq = -1;
	if (pthread_create(&ln->reader, NULL, reader_main, next) == 0)
		ln->reading = 1;
	if (ln->dec)
		gpu_decoder_get_stats(ln->dec, &before);
	int pending = set->n;
	struct gpu_decode_item *items = set->items;
	while (pending > 0) {
		GP_TRY(ln->ops.run(ln->ops.self, buf, items, pending, ln->failed));
		int k_next = 0;
		for (int i = 0; i < pending; i++) {
			if (!ln->failed[i])
				continue;
			int dst = items[i].dst;
			struct gpu_sample *s = &set->samples[dst];
			warn_bad(l, s->idx, ln->ops.error(ln->ops.self, i));
			GP_TRY(sample_replace(l, set, s));
			struct gpu_decode_item it = { .dst = dst };
			GP_TRY(sample_prepare(l, set, s, &it));
			items[k_next++] = it;
		}
		pending = k_next;
	}
	if (ln->dec)
		gpu_decoder_get_stats(ln->dec, &after);
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

/* A lane's decode thread: its batches in order from the first at or after the one
 * the caller asks for, each into the slot of its number once the caller has handed
 * that slot back; stops at stop or at its first error, which the caller finds at that
 * batch (the earliest of the lanes' errors). Signals go to the other threads (the
 * trainer's SIGINT handler), not to a read here. */
static void *lane_main(void *arg)
{
	struct gpu_lane *ln = arg;
	struct gpu_loader *l = ln->l;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	long s0 = l->cfg.start_batch; /* where gpu_loader_next's first call starts */
	long first = s0 + ((ln->id - s0 % l->lanes) % l->lanes + l->lanes) % l->lanes;
	for (long seq = first;; seq += l->lanes) {
		int k = (int)(seq % l->outputs);
		pthread_mutex_lock(&l->mu);
		while (!l->stop && l->slot[k].seq != -1)
			pthread_cond_wait(&l->cv, &l->mu);
		int stop = l->stop;
		pthread_mutex_unlock(&l->mu);
		if (stop)
			break;
		int rc = batch_make(ln, seq, k);
		pthread_mutex_lock(&l->mu);
		if (rc < 0) {
			if (l->err_seq < 0 || seq < l->err_seq) {
				l->err_rc = rc;
				l->err_seq = seq;
				snprintf(l->errmsg, sizeof(l->errmsg), "%s", gp_errmsg());
			}
		} else {
			l->slot[k].seq = seq;
		}
		pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
		if (rc < 0)
			break;
	}
	reader_join(ln);
	return NULL;
}

/* The lanes' threads, at the first call to gpu_loader_next (under mu). */
static int lanes_start(struct gpu_loader *l)
{
	for (int j = 0; j < l->lanes; j++) {
		struct gpu_lane *ln = &l->lane[j];
		if (ln->running)
			continue;
		int e = pthread_create(&ln->thread, NULL, lane_main, ln);
		if (e != 0)
			return gp_error(GP_ENOMEM, "cannot start the gpu loader's thread: %s",
					strerror(e));
		ln->running = 1;
	}
	return 0;
}

/* Hand back the slot the caller holds, wait for batch l->seq (the time the caller
 * blocks is its data wait) and hold its slot in turn. The decode threads start at
 * the first call, not at create, so that they do not compete with the net's set-up. */
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
	int rc = lanes_start(l);
	if (rc < 0) {
		pthread_mutex_unlock(&l->mu);
		return rc;
	}
	while (l->slot[k].seq != seq && !(l->err_seq >= 0 && l->err_seq <= seq))
		pthread_cond_wait(&l->cv, &l->mu);
	if (l->slot[k].seq != seq) {
		char why[sizeof(l->errmsg)];
		rc = l->err_rc;
		snprintf(why, sizeof(why), "%s", l->errmsg);
		pthread_mutex_unlock(&l->mu);
		return gp_error(rc, "%s", why);
	}
	l->held = k;
	pthread_mutex_unlock(&l->mu);
	const struct gpu_loader_decoder *ops = &l->lane[k % l->lanes].ops;
	int buf = k / l->lanes;
	if (ops->wait && (rc = ops->wait(ops->self, buf)) < 0) {
		/* this batch is lost: the next calls give the same error, not a wait for a
		 * slot that the decode thread fills with a later batch */
		pthread_mutex_lock(&l->mu);
		if (l->err_seq < 0 || seq < l->err_seq) {
			l->err_rc = rc;
			l->err_seq = seq;
			snprintf(l->errmsg, sizeof(l->errmsg), "%s", gp_errmsg());
		}
		pthread_mutex_unlock(&l->mu);
		return rc;
	}
	struct gpu_slot *slot = &l->slot[k];
	stats_add(&l->st, &slot->st);
	decode_stats_add(&l->gst, &slot->gst);
	l->seq++;
	out->x = ops->output(ops->self, buf);
	out->read_event = ops->output_event ? ops->output_event(ops->self, buf) : NULL;
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

int gpu_loader_decoders(const struct gpu_loader *l)
{
	return l->lanes;
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
	return l->lane[0].dec ? gpu_decoder_backend(l->lane[0].dec) : "caller's";
}

void gpu_loader_destroy(struct gpu_loader *l)
{
	if (!l)
		return;
	if (l->sync_made) {
		pthread_mutex_lock(&l->mu);
		l->stop = 1;
		pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
	}
	for (int j = 0; j < GPU_LOADER_DECODERS_MAX; j++) { /* every thread, then the rest */
		struct gpu_lane *ln = &l->lane[j];
		if (ln->running)
			pthread_join(ln->thread, NULL);
		ln->running = 0;
		reader_join(ln);
	}
	for (int j = 0; j < GPU_LOADER_DECODERS_MAX; j++) {
		struct gpu_lane *ln = &l->lane[j];
		for (int k = 0; k < 2; k++) /* before the decoder: its handle */
			gpu_decode_parser_destroy(ln->set[k].parser);
		gpu_decoder_destroy(ln->dec);
		for (int k = 0; k < 2; k++) {
			struct gpu_set *set = &ln->set[k];
			image_ctx_free(&set->ctx);
			if (set->samples)
				for (int i = 0; i < l->cfg.batch; i++)
					free(set->samples[i].file);
			free(set->samples);
			free(set->items);
		}
		free(ln->failed);
		free(ln->perm);
	}
	for (int k = 0; k < GPU_LOADER_OUTPUTS_MAX; k++)
		free(l->slot[k].labels);
	if (l->sync_made) {
		pthread_cond_destroy(&l->cv);
		pthread_mutex_destroy(&l->mu);
	}
	free((void *)l->bad);
	free(l);
}
