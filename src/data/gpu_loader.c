#include "data/gpu_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "data/image.h"
#include "data/transform.h"

/* One sample of the batch being made: which index it is now (after replacements),
 * its try count, and its file's bytes. */
struct gpu_sample {
	int idx, attempt;
	uint8_t *file;
	size_t cap_bytes;
};

struct gpu_loader {
	struct dataset *ds;
	struct gpu_loader_config cfg;
	int per_epoch, count;
	long seq;
	int32_t *perm;
	int perm_epoch;
	unsigned char *bad; /* per dataset sample: found corrupt (warned once) */
	struct image_ctx ctx;
	struct gpu_decoder *dec; /* owned; NULL with a caller's decoder */
	struct gpu_loader_decoder ops;
	struct gpu_sample *samples;
	struct gpu_decode_item *items;
	unsigned char *failed;
	int32_t *labels;
	struct loader_stats st;
};

static int nvjpeg_run(void *self, const struct gpu_decode_item *items, int n,
		      unsigned char *failed)
{
	return gpu_decoder_run(self, items, n, failed);
}

static const char *nvjpeg_error(void *self, int i)
{
	return gpu_decoder_error(self, i);
}

static void *nvjpeg_output(void *self)
{
	return gpu_decoder_output(self);
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
	if (cfg->drop_last && count < cfg->batch)
		return gp_error(GP_EINVAL, "%d images make no full batch of %d", count, cfg->batch);
	struct gpu_loader *l = calloc(1, sizeof(*l));
	if (!l)
		return gp_error(GP_ENOMEM, "out of memory");
	int rc = 0;
	l->ds = ds;
	l->cfg = *cfg;
	l->count = count;
	l->per_epoch = cfg->drop_last ? count / cfg->batch : (count + cfg->batch - 1) / cfg->batch;
	l->perm_epoch = -1;
	l->perm = malloc(sizeof(*l->perm) * count);
	l->bad = calloc(count, 1);
	l->samples = calloc(cfg->batch, sizeof(*l->samples));
	l->items = calloc(cfg->batch, sizeof(*l->items));
	l->failed = calloc(cfg->batch, 1);
	l->labels = calloc(cfg->batch, sizeof(*l->labels));
	if (!l->perm || !l->bad || !l->samples || !l->items || !l->failed || !l->labels) {
		rc = gp_error(GP_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = image_ctx_init(&l->ctx)) < 0)
		goto fail;
	if (dec) {
		l->ops = *dec;
	} else {
		rc = gpu_decoder_create(cfg->device, cfg->batch, cfg->size, cfg->layout, &l->dec);
		if (rc < 0)
			goto fail;
		l->ops = (struct gpu_loader_decoder){ l->dec, nvjpeg_run, nvjpeg_error,
						      nvjpeg_output };
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
	if (l->bad[idx])
		return;
	l->bad[idx] = 1;
	const char *path = dataset_path(l->ds, idx);
	fprintf(stderr, "warning: skipping '%s': %s\n", path ? path : "?", why);
}

/* Move sample s on to its next replacement, as the CPU loader does; GP_EFORMAT when
 * it has run out of tries. */
static int sample_replace(struct gpu_loader *l, struct gpu_sample *s, int epoch)
{
	l->st.skipped_corrupt++;
	uint64_t seed = sample_seed(l->cfg.seed, epoch, s->idx);
	s->idx = loader_replacement(seed, s->attempt, l->count);
	if (++s->attempt >= LOADER_REPLACE_TRIES_MAX)
		return gp_error(GP_EFORMAT, "no valid image after %d replacements of a corrupt one",
				LOADER_REPLACE_TRIES_MAX);
	return 0;
}

/* Read sample s's file and header and draw its geometry into item (its dst set by
 * the caller); corrupt or unreadable files are replaced until one reads. The bytes
 * move from the shared read buffer into the sample's own, to live until the decode. */
static int sample_prepare(struct gpu_loader *l, struct gpu_sample *s, int epoch,
			  struct gpu_decode_item *item)
{
	size_t len = 0;
	for (;;) {
		int rc = 0;
		if (!l->bad[s->idx]) {
			double t0 = gp_now_ms();
			rc = image_read_file(&l->ctx, dataset_path(l->ds, s->idx), &len);
			if (rc == 0)
				rc = image_header(&l->ctx, l->ctx.file, len, &item->kind, &item->w,
						  &item->h);
			l->st.decode_ms_total += gp_now_ms() - t0;
			if (rc == 0)
				break;
			if (rc != GP_EFORMAT && rc != GP_EIO)
				return rc;
			warn_bad(l, s->idx, gp_errmsg());
		}
		GP_TRY(sample_replace(l, s, epoch));
	}
	if (len > s->cap_bytes) {
		uint8_t *p = realloc(s->file, len);
		if (!p)
			return gp_error(GP_ENOMEM, "out of memory (%zu bytes for a file)", len);
		s->file = p;
		s->cap_bytes = len;
	}
	memcpy(s->file, l->ctx.file, len);
	item->data = s->file;
	item->len_bytes = len;
	sample_geometry_make(l->cfg.train, l->cfg.size, sample_seed(l->cfg.seed, epoch, s->idx),
			     item->w, item->h, &item->geo);
	l->st.full_pixels += (double)item->w * item->h;
	l->st.decoded_pixels += (double)item->w * item->h;
	return 0;
}

int gpu_loader_next(struct gpu_loader *l, struct gpu_batch *out)
{
	long seq = l->seq;
	int epoch = (int)(seq / l->per_epoch), index = (int)(seq % l->per_epoch);
	int start = index * l->cfg.batch;
	int n = l->count - start < l->cfg.batch ? l->count - start : l->cfg.batch;
	if (l->perm_epoch != epoch) {
		loader_epoch_order(l->cfg.seed, l->cfg.train, l->count, epoch, l->perm);
		l->perm_epoch = epoch;
	}
	for (int i = 0; i < n; i++) {
		l->samples[i].idx = l->perm[start + i];
		l->samples[i].attempt = 0;
		l->items[i].dst = i;
		GP_TRY(sample_prepare(l, &l->samples[i], epoch, &l->items[i]));
	}
	/* Decode; what no decoder could read is replaced and the replacements decoded,
	 * until every position holds an image. */
	int pending = n;
	struct gpu_decode_item *items = l->items;
	while (pending > 0) {
		GP_TRY(l->ops.run(l->ops.self, items, pending, l->failed));
		int next = 0;
		for (int k = 0; k < pending; k++) {
			if (!l->failed[k])
				continue;
			int dst = items[k].dst;
			struct gpu_sample *s = &l->samples[dst];
			warn_bad(l, s->idx, l->ops.error(l->ops.self, k));
			GP_TRY(sample_replace(l, s, epoch));
			struct gpu_decode_item it = { .dst = dst };
			GP_TRY(sample_prepare(l, s, epoch, &it));
			items[next++] = it;
		}
		pending = next;
	}
	for (int i = 0; i < n; i++)
		l->labels[i] = dataset_label(l->ds, l->samples[i].idx);
	l->st.images += n;
	l->seq++;
	out->x = l->ops.output(l->ops.self);
	out->labels = l->labels;
	out->n = n;
	out->epoch = epoch;
	out->index = index;
	return 0;
}

int gpu_loader_batches_per_epoch(const struct gpu_loader *l)
{
	return l->per_epoch;
}

void gpu_loader_get_stats(const struct gpu_loader *l, struct loader_stats *st,
			  struct gpu_decode_stats *gs)
{
	*st = l->st;
	if (l->dec)
		gpu_decoder_get_stats(l->dec, gs);
	else
		*gs = (struct gpu_decode_stats){ 0 };
}

const char *gpu_loader_backend(const struct gpu_loader *l)
{
	return l->dec ? gpu_decoder_backend(l->dec) : "caller's";
}

void gpu_loader_destroy(struct gpu_loader *l)
{
	if (!l)
		return;
	gpu_decoder_destroy(l->dec);
	image_ctx_free(&l->ctx);
	if (l->samples)
		for (int i = 0; i < l->cfg.batch; i++)
			free(l->samples[i].file);
	free(l->samples);
	free(l->items);
	free(l->failed);
	free(l->labels);
	free(l->perm);
	free(l->bad);
	free(l);
}
