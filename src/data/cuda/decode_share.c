/* The CPU share of a GPU batch (decode_share.h): a pool of threads, each with its own
 * TurboJPEG state and CUDA stream, taking items from a shared counter. */
#include "data/cuda/decode_share.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "data/image.h"
#include "data/transform.h"
#include "ops/cuda/cuda_common.h"

struct share_thread {
	struct decode_share *s;
	pthread_t th;
	int started;
	struct image_ctx ctx;
	cudaStream_t stream;
	double ms;         /* on the share under way */
	int rc;            /* a hard error on it, 0 none */
	char errmsg[GPU_DECODE_ERRMSG];
};

struct decode_share {
	int device, size, n;
	struct share_thread *t;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sync_made;
	/* the share under way, set by start under mu */
	long generation;   /* bumped by each start */
	int quit, busy;    /* busy: threads not yet done with this generation */
	const struct gpu_decode_item *items;
	const int *idx;
	int k;
	atomic_int next;
	unsigned char *staging;
	const size_t *offset;
	unsigned char *failed;  /* per item index, written by the thread that took it */
	char (*errmsg)[GPU_DECODE_ERRMSG];
};

/* Item i: the crop's pixels at full size into its staging place. 0, GP_EFORMAT for a
 * file TurboJPEG cannot decode (the reason in errmsg), or a hard error. */
static int share_item(struct decode_share *s, struct share_thread *t, int i, char *errmsg)
{
	const struct gpu_decode_item *it = &s->items[i];
	struct image img;
	int rc, ox = 0, oy = 0;
	if (it->kind == IMAGE_JPEG) {
		int reach[4];
		image_resample_reach(&it->geo.box, s->size, s->size, reach);
		rc = image_decode_region(&t->ctx, it->data, it->len_bytes, it->w, it->h, reach, &img,
					 &ox, &oy);
	} else {
		rc = image_decode(&t->ctx, it->data, it->len_bytes, it->kind, it->w, it->h, &img);
	}
	if (rc == GP_EFORMAT) {
		snprintf(errmsg, GPU_DECODE_ERRMSG, "%s", gp_errmsg());
		return GP_EFORMAT;
	}
	GP_TRY(rc);
	if (ox < 0 || oy < 0 || ox + img.w > it->w || oy + img.h > it->h) {
		snprintf(errmsg, GPU_DECODE_ERRMSG, "decoded region lies outside the header's size");
		return GP_EFORMAT;
	}
	size_t pitch = (size_t)it->w * 3;
	unsigned char *dst = s->staging + s->offset[i] + (size_t)oy * pitch + (size_t)ox * 3;
	/* from pageable memory: staged before the call returns, so img may be reused */
	CUDA_TRY(cudaMemcpy2DAsync(dst, pitch, img.pix, (size_t)img.w * 3, (size_t)img.w * 3,
				   (size_t)img.h, cudaMemcpyHostToDevice, t->stream));
	return 0;
}

/* One generation's items, as many as this thread gets; its copies finished. */
static void share_run(struct decode_share *s, struct share_thread *t)
{
	double t0 = gp_now_ms();
	t->rc = 0;
	for (;;) {
		int j = atomic_fetch_add(&s->next, 1);
		if (j >= s->k)
			break;
		int i = s->idx[j];
		int rc = share_item(s, t, i, s->errmsg[i]);
		s->failed[i] = rc == GP_EFORMAT;
		if (rc < 0 && rc != GP_EFORMAT) {
			t->rc = rc;
			snprintf(t->errmsg, sizeof(t->errmsg), "%s", gp_errmsg());
			atomic_store(&s->next, s->k); /* the others stop too */
			break;
		}
	}
	if (cudaStreamSynchronize(t->stream) != cudaSuccess && !t->rc) {
		t->rc = GP_EDEVICE;
		snprintf(t->errmsg, sizeof(t->errmsg), "decode share: %s",
			 cudaGetErrorString(cudaGetLastError()));
	}
	t->ms = gp_now_ms() - t0;
}

static void *share_main(void *arg)
{
	struct share_thread *t = arg;
	struct decode_share *s = t->s;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	cudaSetDevice(s->device);
	long seen = 0;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->quit && s->generation == seen)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->quit)
			break;
		seen = s->generation;
		pthread_mutex_unlock(&s->mu);
		share_run(s, t);
		pthread_mutex_lock(&s->mu);
		if (--s->busy == 0)
			pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int decode_share_create(int device, int threads, int size, struct decode_share **out)
{
	if (threads < 1 || threads > 256)
		return gp_error(GP_EINVAL, "decode share: %d threads (1..256)", threads);
	struct decode_share *s = calloc(1, sizeof(*s));
	if (!s)
		return gp_error(GP_ENOMEM, "out of memory");
	s->device = device;
	s->size = size;
	s->t = calloc((size_t)threads, sizeof(*s->t));
	int rc = 0;
	if (!s->t) {
		rc = gp_error(GP_ENOMEM, "out of memory");
		goto fail;
	}
	if (pthread_mutex_init(&s->mu, NULL) != 0) {
		rc = gp_error(GP_ENOMEM, "cannot make the decode share's mutex");
		goto fail;
	}
	if (pthread_cond_init(&s->cv, NULL) != 0) {
		pthread_mutex_destroy(&s->mu);
		rc = gp_error(GP_ENOMEM, "cannot make the decode share's condition variable");
		goto fail;
	}
	s->sync_made = 1;
	for (; s->n < threads; s->n++) {
		struct share_thread *t = &s->t[s->n];
		t->s = s;
		if ((rc = image_ctx_init(&t->ctx)) < 0)
			goto fail;
		if ((rc = CUDA_CHECK(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking))) < 0) {
			image_ctx_free(&t->ctx);
			goto fail;
		}
		int e = pthread_create(&t->th, NULL, share_main, t);
		if (e != 0) {
			cudaStreamDestroy(t->stream);
			image_ctx_free(&t->ctx);
			rc = gp_error(GP_ENOMEM, "cannot start a decode share thread: %s", strerror(e));
			goto fail;
		}
		t->started = 1;
	}
	*out = s;
	return 0;
fail:
	decode_share_destroy(s);
	return rc;
}

void decode_share_start(struct decode_share *s, const struct gpu_decode_item *items,
			const int *idx, int k, unsigned char *staging, const size_t *offset,
			unsigned char *failed, char (*errmsg)[GPU_DECODE_ERRMSG])
{
	pthread_mutex_lock(&s->mu);
	s->failed = failed;
	s->errmsg = errmsg;
	s->items = items;
	s->idx = idx;
	s->k = k;
	atomic_store(&s->next, 0);
	s->staging = staging;
	s->offset = offset;
	s->busy = s->n;
	s->generation++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int decode_share_wait(struct decode_share *s, double *thread_ms)
{
	pthread_mutex_lock(&s->mu);
	while (s->busy > 0)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	double ms = 0;
	int rc = 0;
	for (int i = 0; i < s->n; i++) {
		ms += s->t[i].ms;
		if (!rc && s->t[i].rc < 0)
			rc = gp_error(s->t[i].rc, "%s", s->t[i].errmsg);
	}
	*thread_ms = ms;
	return rc;
}

void decode_share_destroy(struct decode_share *s)
{
	if (!s)
		return;
	if (s->sync_made) {
		pthread_mutex_lock(&s->mu);
		s->quit = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
	for (int i = 0; i < s->n; i++) {
		struct share_thread *t = &s->t[i];
		if (t->started)
			pthread_join(t->th, NULL);
		if (t->stream)
			cudaStreamDestroy(t->stream);
		image_ctx_free(&t->ctx);
	}
	if (s->sync_made) {
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
	}
	free(s->t);
	free(s);
}
