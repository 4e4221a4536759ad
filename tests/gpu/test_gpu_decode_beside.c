/* The GPU decode beside other work on the same GPU: a batch decoded beside a queue of
 * matrix products on another stream (what nvJPEG waits for, named by CUPTI's
 * callbacks), beside resnet50's training (the decode keeps up, and what it costs the
 * step), and beside CPU threads that decode a share of it (the same batch). Skips
 * without a GPU or nvJPEG. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include "../test.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "data/gpu_decode.h"
#include "data/image.h"
#include "data/transform.h"
#include "nn/models.h"
#include "nn/net.h"
#include "train/trainer.h"
#include "decode_util.h"

/* Runtime and driver API calls of one thread that took longer than 1 ms (CUPTI's
 * callbacks), to name where a decode waits when it does. */
#define SLOW_CALLS_MAX 48
static struct {
	pthread_t thread;
	int depth;
	double t0[16];
	int n;
	struct {
		char name[72];
		double ms;
	} calls[SLOW_CALLS_MAX];
} slow;

static void CUPTIAPI slow_call_cb(void *user, CUpti_CallbackDomain dom, CUpti_CallbackId id,
				  const void *data)
{
	const CUpti_CallbackData *cb = data;
	if (!pthread_equal(pthread_self(), slow.thread))
		return;
	if (cb->callbackSite == CUPTI_API_ENTER) {
		if (slow.depth < 16)
			slow.t0[slow.depth] = gp_now_ms();
		slow.depth++;
		return;
	}
	if (--slow.depth < 0 || slow.depth >= 16)
		return;
	double ms = gp_now_ms() - slow.t0[slow.depth];
	if (ms > 1.0 && slow.n < SLOW_CALLS_MAX) {
		snprintf(slow.calls[slow.n].name, sizeof(slow.calls[0].name), "%s %s",
			 dom == CUPTI_CB_DOMAIN_DRIVER_API ? "driver" : "runtime",
			 cb->functionName ? cb->functionName : "?");
		slow.calls[slow.n++].ms = ms;
	}
}

/* A queue of FP32 matrix products on a stream of its own. */
struct busy {
	cudaStream_t stream;
	cublasHandle_t blas;
	float *a, *b, *c;
	cudaEvent_t e0, e1;
	float gemm_ms;
};
enum { BUSY_M = 4096 };

static void busy_gemm(struct busy *q)
{
	const float one = 1.0f, zero = 0.0f;
	cublasSgemm(q->blas, CUBLAS_OP_N, CUBLAS_OP_N, BUSY_M, BUSY_M, BUSY_M, &one, q->a, BUSY_M,
		    q->b, BUSY_M, &zero, q->c, BUSY_M);
}

/* top: the stream at the greatest priority, as the net's streams are */
static int busy_make(struct busy *q, int top)
{
	memset(q, 0, sizeof(*q));
	size_t bytes = sizeof(float) * BUSY_M * BUSY_M;
	int least = 0, greatest = 0;
	if (top)
		cudaDeviceGetStreamPriorityRange(&least, &greatest);
	int ok = cudaStreamCreateWithPriority(&q->stream, cudaStreamNonBlocking, greatest) ==
			 cudaSuccess &&
		 cublasCreate(&q->blas) == CUBLAS_STATUS_SUCCESS &&
		 cublasSetStream(q->blas, q->stream) == CUBLAS_STATUS_SUCCESS &&
		 cudaMalloc((void **)&q->a, bytes) == cudaSuccess &&
		 cudaMalloc((void **)&q->b, bytes) == cudaSuccess &&
		 cudaMalloc((void **)&q->c, bytes) == cudaSuccess &&
		 cudaEventCreate(&q->e0) == cudaSuccess && cudaEventCreate(&q->e1) == cudaSuccess;
	if (!ok)
		return -1;
	cudaMemsetAsync(q->a, 0, bytes, q->stream);
	cudaMemsetAsync(q->b, 0, bytes, q->stream);
	for (int r = 0; r < 2; r++) { /* one product timed, after a warm-up */
		cudaEventRecord(q->e0, q->stream);
		busy_gemm(q);
		cudaEventRecord(q->e1, q->stream);
		cudaEventSynchronize(q->e1);
	}
	cudaEventElapsedTime(&q->gemm_ms, q->e0, q->e1);
	return q->gemm_ms > 0 ? 0 : -1;
}

/* Queue products for at least ms; returns how many. */
static int busy_queue(struct busy *q, double ms)
{
	int k = (int)(ms / q->gemm_ms) + 1;
	cudaEventRecord(q->e0, q->stream);
	for (int i = 0; i < k; i++)
		busy_gemm(q);
	cudaEventRecord(q->e1, q->stream);
	return k;
}

static int busy_drained(struct busy *q)
{
	int done = cudaEventQuery(q->e1) == cudaSuccess;
	cudaGetLastError();
	return done;
}

static float busy_wait(struct busy *q)
{
	float ms = 0;
	cudaEventSynchronize(q->e1);
	cudaEventElapsedTime(&ms, q->e0, q->e1);
	return ms;
}

static void busy_free(struct busy *q)
{
	if (q->stream)
		cudaStreamSynchronize(q->stream);
	cudaFree(q->a);
	cudaFree(q->b);
	cudaFree(q->c);
	if (q->e0)
		cudaEventDestroy(q->e0);
	if (q->e1)
		cudaEventDestroy(q->e1);
	if (q->blas)
		cublasDestroy(q->blas);
	if (q->stream)
		cudaStreamDestroy(q->stream);
}

/* A batch of 256 decoded while another stream keeps the GPU busy with a queue of FP32
 * matrix products (the net's step, in the loader's case): the decode's own work
 * shares the SMs, but nothing in it may wait for the other stream's queue to drain,
 * or the decode thread cannot hide behind the step (issue 21: beside training, a
 * batch took the step's time plus its own). The decoder gpu_decoder_create makes is
 * held to that; beside it, for the record, nvJPEG's pipelined hardware decode (which
 * waited for the whole queue on the H100, s11-1) and the CUDA backend. Each: the time
 * alone, the time beside a queue at least 6x as long, and the runtime and driver
 * calls over 1 ms. */
TEST(gpu_decode_beside_a_busy_gpu)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 256 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH];
	static unsigned char failed[BATCH];
	items_repeat(&f, BATCH, 5, items);
	static const struct {
		const char *name;
		int made_by_create; /* gpu_decoder_create's decoder: held to the bound */
		struct gpu_decoder_opts o;
	} variants[] = {
		{ "gpu_decoder_create's", 1, { 0 } },
		{ "hardware, nvJPEG's pipelining", 0, { GPU_DECODE_HARDWARE, 1 } },
		{ "cuda backend", 0, { GPU_DECODE_CUDA, 0 } },
	};
	struct busy q;
	int have = busy_make(&q, 0) == 0;
	CHECK_MSG(have, "no queue of products: %s", cudaGetErrorString(cudaGetLastError()));
	for (size_t vi = 0; have && vi < sizeof(variants) / sizeof(variants[0]); vi++) {
		struct busy *bq = &q;
		struct gpu_decoder *d = NULL;
		int rc = variants[vi].made_by_create
				 ? gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &d)
				 : gpu_decoder_create_opts(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1,
							   &variants[vi].o, &d);
		if (rc < 0) {
			CHECK_MSG(!variants[vi].made_by_create, "%s", gp_errmsg());
			printf("    %s: not made here (%s)\n", variants[vi].name, gp_errmsg());
			continue;
		}
		double alone = 1e30;
		for (int r = 0; r < 4; r++) { /* warm-up, then the best of 3 */
			double t0 = gp_now_ms();
			CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0);
			if (r > 0 && gp_now_ms() - t0 < alone)
				alone = gp_now_ms() - t0;
		}
		/* CUPTI first: its first subscription takes a few hundred ms (s11-8) */
		CUpti_SubscriberHandle sub = NULL;
		memset(&slow, 0, sizeof(slow));
		slow.thread = pthread_self();
		int traced = cuptiSubscribe(&sub, slow_call_cb, NULL) == CUPTI_SUCCESS &&
			     cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS &&
			     cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS;
		double tq = gp_now_ms();
		int k = busy_queue(bq, alone * 6 > 300 ? alone * 6 : 300);
		tq = gp_now_ms() - tq;
		/* the queue must still run when the decode starts, or nothing is measured */
		int queued = !busy_drained(bq);
		memset(&slow, 0, sizeof(slow)); /* the decode's calls only */
		slow.thread = pthread_self();
		double t0 = gp_now_ms();
		CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0);
		double t_ret = gp_now_ms(), beside = t_ret - t0;
		if (sub)
			cuptiUnsubscribe(sub);
		float queue = busy_wait(bq);
		double left = gp_now_ms() - t_ret; /* what the queue still had to do */
		struct gpu_decode_stats st;
		gpu_decoder_get_stats(d, &st);
		printf("    %s (%s backend): a batch alone %.1f ms, beside a queue of %d products "
		       "(%.1f ms each, %.0f ms in all, queued in %.1f ms) %.1f ms; the queue "
		       "ended %.0f ms after it\n", variants[vi].name, gpu_decoder_backend(d), alone,
		       k, bq->gemm_ms, queue, tq, beside, left);
		if (!traced)
			printf("      (no CUPTI callbacks here)\n");
		for (int i = 0; i < slow.n; i++)
			printf("      %-60s %8.1f ms\n", slow.calls[i].name, slow.calls[i].ms);
		CHECK_MSG(queued, "%s: the queue of products had drained before the decode began "
			  "(queued in %.1f ms)", variants[vi].name, tq);
		if (variants[vi].made_by_create && queued)
			CHECK_MSG(beside < 0.5 * queue && left > 0.25 * queue,
				  "the decode waited for the other stream's queue (%.1f ms of a %.0f "
				  "ms queue; alone %.1f ms)", beside, queue, alone);
		gpu_decoder_destroy(d);
	}
	if (have)
		busy_free(&q);
	jpegs_close(ds, &ctx, &f);
}

/* Launches back to back (gpu_decoder_launch, the loader's way) while a queue of
 * matrix products on a stream of the greatest priority (as the net's are) holds the
 * SMs, so that each batch's colour and augment kernels are still queued when the next
 * batch's nvJPEG call writes its planes: every buffer must still hold what
 * gpu_decoder_run makes of its batch alone, bit for bit. Four batches, each of other
 * crops, into four buffers, the two plane buffers each used twice. */
TEST(gpu_decode_launches_back_to_back_give_run_batches)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 64, SETS = 4 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[SETS][BATCH];
	static unsigned char failed[BATCH];
	for (int b = 0; b < SETS; b++)
		items_repeat(&f, BATCH, 21 + b, items[b]);
	size_t bytes = (size_t)BATCH * 3 * SIZE * SIZE * 2;
	uint16_t *want[SETS] = { 0 }, *got = malloc(bytes);
	for (int b = 0; b < SETS; b++)
		want[b] = malloc(bytes);
	struct gpu_decoder *ref = NULL, *d = NULL;
	struct busy q;
	int have = 0, pending = 0;
	CHECK_MSG(gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &ref) == 0, "%s",
		  gp_errmsg());
	CHECK_MSG(gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, SETS, &d) == 0, "%s",
		  gp_errmsg());
	CHECK(got && want[SETS - 1]);
	if (test_failed())
		goto out;
	for (int b = 0; b < SETS && !test_failed(); b++) {
		CHECK_EQ_INT(gpu_decoder_run(ref, 0, items[b], BATCH, failed), 0);
		CHECK(cudaMemcpy(want[b], gpu_decoder_output(ref, 0), bytes,
				 cudaMemcpyDeviceToHost) == cudaSuccess);
	}
	for (int b = 0; b < SETS && !test_failed(); b++) /* warm: the sides' buffers made */
		CHECK_EQ_INT(gpu_decoder_run(d, b, items[b], BATCH, failed), 0);
	CHECK_EQ_INT(busy_make(&q, 1), 0);
	have = !test_failed();
	if (!have)
		goto out;
	busy_queue(&q, 300);
	double t0 = gp_now_ms();
	for (int b = 0; b < SETS && !test_failed(); b++) {
		CHECK_EQ_INT(gpu_decoder_launch(d, b, items[b], BATCH, failed), 0);
		for (int i = 0; i < BATCH; i++)
			CHECK_EQ_INT(failed[i], 0);
	}
	double launched = gp_now_ms() - t0;
	pending = !busy_drained(&q);
	for (int b = 0; b < SETS && !test_failed(); b++) {
		CHECK_EQ_INT(gpu_decoder_output_wait(d, b), 0);
		CHECK(cudaMemcpy(got, gpu_decoder_output(d, b), bytes, cudaMemcpyDeviceToHost) ==
		      cudaSuccess);
		CHECK_MSG(!memcmp(want[b], got, bytes), "batch %d differs from its run alone", b);
	}
	printf("    %d launches of %d beside a %.0f ms queue at the greatest priority: %.1f ms, "
	       "the queue %s by then\n", SETS, BATCH, busy_wait(&q), launched,
	       pending ? "still running" : "drained");
out:
	if (have)
		busy_free(&q);
	gpu_decoder_destroy(ref);
	gpu_decoder_destroy(d);
	for (int b = 0; b < SETS; b++)
		free(want[b]);
	free(got);
	jpegs_close(ds, &ctx, &f);
}

/* A thread that decodes batches until told to stop: into one buffer with
 * gpu_decoder_run, or (launch) into two in turn with gpu_decoder_launch, waiting for
 * a buffer only before it is written again, as the loader's thread does. */
struct decode_loop {
	struct gpu_decoder *d;
	const struct gpu_decode_item *items;
	int n, launch;
	unsigned char *failed;
	atomic_int stop;
	int batches, rc;
	double ms;
};

static void *decode_loop_main(void *arg)
{
	struct decode_loop *l = arg;
	double t0 = gp_now_ms();
	while (!atomic_load(&l->stop) && l->rc == 0) {
		int k = l->batches % 2;
		if (!l->launch)
			l->rc = gpu_decoder_run(l->d, 0, l->items, l->n, l->failed);
		else if ((l->rc = gpu_decoder_output_wait(l->d, k)) == 0)
			l->rc = gpu_decoder_launch(l->d, k, l->items, l->n, l->failed);
		l->batches++;
	}
	for (int k = 0; l->launch && l->rc == 0 && k < 2; k++)
		l->rc = gpu_decoder_output_wait(l->d, k);
	l->ms = gp_now_ms() - t0;
	return NULL;
}

static const struct sgd_args beside_sgd = { .lr = 0.01, .momentum = 0.9 };

/* A net of `model` training bf16 on one synthetic batch of `batch` at SIZE (10
 * classes) with CUDA graphs, as `train` runs it, warmed up and captured; *x and *y
 * (the batch) are the caller's to free. NULL after a failed check. */
static struct net *beside_net(const char *model, int batch, float **x, int32_t **y)
{
	struct model_opts mo = model_defaults(model);
	mo.batch = batch;
	mo.classes = 10;
	struct net *net = NULL;
	CHECK_EQ_INT(model_build(model, &mo, &net), 0);
	if (!net)
		return NULL;
	net->use_graphs = 1;
	CHECK_MSG(net_setup(net, BACKEND_CUDA, GP_F32, PREC_BF16) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(train_synthetic_batch(batch, 3, SIZE, SIZE, 10, 1, x, y), 0);
	if (!test_failed())
		CHECK_EQ_INT(net_set_batch_data(net, *x, *y), 0);
	for (int s = 0; s < 5 && !test_failed(); s++) /* warm-up and graph capture */
		CHECK_EQ_INT(net_train_step(net, &beside_sgd, NULL, NULL), 0);
	CHECK_EQ_INT(net_wait(net), 0);
	if (test_failed()) {
		net_free(net);
		return NULL;
	}
	return net;
}

/* The mean wall time of a training step over `steps`, the GPU waited for. */
static double beside_step_ms(struct net *net, int steps)
{
	double t0 = gp_now_ms();
	for (int s = 0; s < steps; s++)
		CHECK_EQ_INT(net_train_step(net, &beside_sgd, NULL, NULL), 0);
	CHECK_EQ_INT(net_wait(net), 0);
	return (gp_now_ms() - t0) / steps;
}

/* What hides the decode behind training: a batch of 256 decoded while resnet50 bf16
 * trains on batches of 256 (CUDA graphs, as `train` runs it) in the same process takes
 * less than a training step, and what it costs the step (its kernels and copies share
 * the SMs) is printed. Each decoder variant: the step alone, the step beside a thread
 * that decodes without a pause, and that thread's time per batch. Held to it:
 * gpu_decoder_create's decoder. */
TEST(gpu_decode_keeps_up_beside_training)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 256, STEPS = 20 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH];
	static unsigned char failed[BATCH];
	items_repeat(&f, BATCH, 7, items);
	float *x = NULL;
	int32_t *y = NULL;
	struct net *net = beside_net("resnet50", BATCH, &x, &y);
	/* made: 1 gpu_decoder_create's, 0 the options given, 2 the defaults with
	 * hw_preallocate as given; launch: gpu_decoder_launch into two buffers in turn,
	 * as the loader runs it */
	static const struct {
		const char *name;
		int made, launch;
		struct gpu_decoder_opts o;
	} variants[] = {
		{ "gpu_decoder_create's, launched", 1, 1, { 0 } },
		{ "gpu_decoder_create's, run", 1, 0, { 0 } },
		{ "without the pool made at the start", 2, 1, { .hw_preallocate = 0 } },
		{ "hardware, nvJPEG's pipelining", 0, 0, { GPU_DECODE_HARDWARE, 1 } },
	};
	for (size_t vi = 0; !test_failed() && vi < sizeof(variants) / sizeof(variants[0]); vi++) {
		struct gpu_decoder *d = NULL;
		struct gpu_decoder_opts o = variants[vi].o;
		if (variants[vi].made == 2) {
			o = gpu_decoder_opts_default();
			o.hw_preallocate = variants[vi].o.hw_preallocate;
		}
		int rc = variants[vi].made == 1
				 ? gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 2, &d)
				 : gpu_decoder_create_opts(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 2, &o,
							   &d);
		if (rc < 0) {
			CHECK_MSG(variants[vi].made != 1, "%s", gp_errmsg());
			printf("    %s: not made here (%s)\n", variants[vi].name, gp_errmsg());
			continue;
		}
		double alone_dec = 1e30;
		for (int r = 0; r < 3; r++) {
			double t0 = gp_now_ms();
			CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0);
			alone_dec = fmin(alone_dec, gp_now_ms() - t0);
		}
		double step_alone = beside_step_ms(net, STEPS);
		struct decode_loop loop = { .d = d, .items = items, .n = BATCH, .failed = failed,
					    .launch = variants[vi].launch };
		pthread_t th;
		int started = pthread_create(&th, NULL, decode_loop_main, &loop) == 0;
		CHECK(started);
		double step_beside = beside_step_ms(net, STEPS);
		atomic_store(&loop.stop, 1);
		if (started)
			pthread_join(th, NULL);
		CHECK_MSG(loop.rc == 0, "%s", gp_errmsg());
		double dec_beside = loop.batches ? loop.ms / loop.batches : 0;
		printf("    %s: resnet50 bf16 step %.2f ms alone, %.2f ms beside the decode (%+.1f%%); "
		       "a batch decoded in %.1f ms alone, %.1f ms beside training (%d batches)\n",
		       variants[vi].name, step_alone, step_beside,
		       100.0 * (step_beside / step_alone - 1), alone_dec, dec_beside, loop.batches);
		if (variants[vi].made == 1 && variants[vi].launch)
			CHECK_MSG(dec_beside < step_beside,
				  "the decode does not keep up: %.1f ms a batch beside a %.1f ms step",
				  dec_beside, step_beside);
		gpu_decoder_destroy(d);
	}
	free(x);
	free(y);
	net_free(net);
	jpegs_close(ds, &ctx, &f);
}

/* What decoding costs mobilenet_v2 bf16's training at batch 256 (the model whose step
 * the decode paces, issue 21), printed as step time per decoded batch with the decode
 * rate: one decoder; two decoders on two threads at once (whether nvJPEG's batched
 * call waits, so that two in flight overlap their waits, or the JPEG engines are
 * full); one that does nvJPEG's work alone (the rest is what the colour and augment
 * kernels cost); one that decodes whole images instead of the crops' regions; one
 * that converts the planes and augments in two passes, not the one-pass kernel. Held to
 * it: every decoder's batches but nvJPEG-alone's, whole images too, are the lone
 * decoder's bit for bit, and the two at once decode a batch in less time than one
 * alone. With CUDA's default 8 hardware queues they took 85-127 ms a batch against
 * 34-45 for one (H100, s15): their copies waited behind the step's kernels queued on
 * the same hardware queue; gpu_process_defaults' 32 queues are what this holds. */
TEST(gpu_decode_costs_beside_mobilenet_v2_training)
{
	if (!gpu_decode_ready())
		return;
	/* decoders: 0 and 1 the default, 2 nvJPEG's work alone (no colour or augment
	 * kernels), 3 whole images, 4 the colour and augment kernels in two passes */
	enum { BATCH = 256, STEPS = 40, DECODERS = 5 };
	static const struct {
		const char *name;
		int first, count;
	} runs[] = {
		{ "1 decoder", 0, 1 },
		{ "2 decoders at once", 0, 2 },
		{ "1 decoder, nvJPEG only", 2, 1 },
		{ "1 decoder, whole images", 3, 1 },
		{ "1 decoder, two passes", 4, 1 },
	};
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH];
	static unsigned char failed[2][BATCH];
	items_repeat(&f, BATCH, 11, items);
	size_t bytes = (size_t)BATCH * 3 * SIZE * SIZE * 2;
	uint16_t *want = malloc(bytes), *got = malloc(bytes);
	float *x = NULL;
	int32_t *y = NULL;
	struct gpu_decoder *d[DECODERS] = { 0 };
	CHECK(want && got);
	struct net *net = beside_net("mobilenet_v2", BATCH, &x, &y);
	for (int k = 0; k < DECODERS && !test_failed(); k++) {
		struct gpu_decoder_opts o = gpu_decoder_opts_default();
		o.nvjpeg_only = k == 2;
		o.whole_images = k == 3;
		o.two_pass = k == 4;
		CHECK_MSG(gpu_decoder_create_opts(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 2, &o, &d[k]) ==
				  0, "%s", gp_errmsg());
	}
	if (test_failed())
		goto out;
	for (int k = 0; k < DECODERS && !test_failed(); k++) /* warm: the buffers made */
		CHECK_EQ_INT(gpu_decoder_run(d[k], 0, items, BATCH, failed[0]), 0);
	CHECK(cudaMemcpy(want, gpu_decoder_output(d[0], 0), bytes, cudaMemcpyDeviceToHost) ==
	      cudaSuccess);
	double step_alone = beside_step_ms(net, STEPS), per_batch[5] = { 0 };
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]) && !test_failed(); r++) {
		int first = runs[r].first, used = runs[r].count;
		struct decode_loop loop[2];
		pthread_t th[2];
		int started[2] = { 0 };
		for (int k = 0; k < used; k++) {
			loop[k] = (struct decode_loop){ .d = d[first + k], .items = items, .n = BATCH,
							.failed = failed[k], .launch = 1 };
			started[k] = pthread_create(&th[k], NULL, decode_loop_main, &loop[k]) == 0;
			CHECK(started[k]);
		}
		double step_beside = beside_step_ms(net, STEPS);
		int batches = 0;
		double ms = 0;
		for (int k = 0; k < used; k++) {
			atomic_store(&loop[k].stop, 1);
			if (started[k])
				pthread_join(th[k], NULL);
			CHECK_MSG(loop[k].rc == 0, "%s", gp_errmsg());
			batches += loop[k].batches;
			ms = fmax(ms, loop[k].ms);
		}
		per_batch[r] = batches ? ms / batches : 1e30;
		printf("    %s: mobilenet_v2 bf16 step %.2f ms alone, %.2f ms beside (%+.1f%%, %.2f "
		       "ms of step a decoded batch); %.1f ms a batch over %d batches (%.0f img/s)\n",
		       runs[r].name, step_alone, step_beside, 100.0 * (step_beside / step_alone - 1),
		       batches ? (step_beside - step_alone) * STEPS / batches : 0,
		       batches ? ms / batches : 0, batches, ms > 0 ? 1000.0 * batches * BATCH / ms : 0);
		for (int k = 0; k < used && first != 2 && !test_failed(); k++)
			for (int b = 0; b < 2; b++) {
				CHECK(cudaMemcpy(got, gpu_decoder_output(d[first + k], b), bytes,
						 cudaMemcpyDeviceToHost) == cudaSuccess);
				CHECK_MSG(!memcmp(want, got, bytes), "%s: decoder %d, buffer %d differs",
					  runs[r].name, k, b);
			}
	}
	if (!test_failed())
		CHECK_MSG(per_batch[1] < per_batch[0],
			  "two decoders at once: %.1f ms a batch, one alone %.1f (CUDA_DEVICE_MAX_"
			  "CONNECTIONS=%s)", per_batch[1], per_batch[0],
			  getenv("CUDA_DEVICE_MAX_CONNECTIONS") ? getenv("CUDA_DEVICE_MAX_CONNECTIONS")
								: "unset");
out:
	for (int k = 0; k < DECODERS; k++)
		gpu_decoder_destroy(d[k]);
	free(want);
	free(got);
	free(x);
	free(y);
	net_free(net);
	jpegs_close(ds, &ctx, &f);
}

/* --decode-threads: CPU threads decode a share of each batch with TurboJPEG while
 * nvJPEG decodes the rest; the batch is the one nvJPEG alone makes, bit for bit (both
 * give TurboJPEG's pixels, data/ycc.h), batch after batch while the split moves from
 * its first guess (nb / 8) to the two sides' rates. */
TEST(gpu_decode_cpu_share_gives_the_same_batch)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 256, RUNS = 4 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH];
	static unsigned char failed[BATCH];
	items_repeat(&f, BATCH, 11, items);
	size_t bytes = (size_t)BATCH * 3 * SIZE * SIZE * 2;
	uint16_t *want = malloc(bytes), *got = malloc(bytes);
	struct gpu_decoder *alone = NULL, *shared = NULL;
	struct gpu_decoder_opts o = gpu_decoder_opts_default();
	o.cpu_threads = 4;
	CHECK_MSG(gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &alone) == 0, "%s",
		  gp_errmsg());
	CHECK_MSG(gpu_decoder_create_opts(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &o, &shared) == 0,
		  "%s", gp_errmsg());
	if (!want || !got || test_failed())
		goto out;
	CHECK_EQ_INT(gpu_decoder_run(alone, 0, items, BATCH, failed), 0);
	CHECK(cudaMemcpy(want, gpu_decoder_output(alone, 0), bytes, cudaMemcpyDeviceToHost) ==
	      cudaSuccess);
	long before = 0;
	for (int r = 0; r < RUNS && !test_failed(); r++) {
		double t0 = gp_now_ms();
		CHECK_EQ_INT(gpu_decoder_run(shared, 0, items, BATCH, failed), 0);
		double ms = gp_now_ms() - t0;
		for (int i = 0; i < BATCH; i++)
			CHECK_EQ_INT(failed[i], 0);
		CHECK(cudaMemcpy(got, gpu_decoder_output(shared, 0), bytes, cudaMemcpyDeviceToHost) ==
		      cudaSuccess);
		struct gpu_decode_stats st;
		gpu_decoder_get_stats(shared, &st);
		printf("    batch %d: %ld of %d by 4 CPU threads, %.1f ms\n", r, st.cpu_shared - before,
		       BATCH, ms);
		CHECK(st.cpu_shared - before >= 1 && st.cpu_shared - before < BATCH);
		before = st.cpu_shared;
		CHECK_MSG(!memcmp(want, got, bytes), "batch %d differs from nvJPEG's alone", r);
	}
	struct gpu_decode_stats st;
	gpu_decoder_get_stats(shared, &st);
	CHECK_EQ_INT(st.hw_decoded + st.cuda_decoded + st.cpu_fallback + st.cpu_shared,
		     (long)BATCH * RUNS);
out:
	gpu_decoder_destroy(alone);
	gpu_decoder_destroy(shared);
	free(want);
	free(got);
	jpegs_close(ds, &ctx, &f);
}
