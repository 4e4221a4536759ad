/* The batch source (batch_source.h): the CPU loader, or with --decode gpu the GPU
 * loader, the validation set, and their checks. */
#include "train/batch_source.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "data/decode_probe.h"
#include "data/gpu_loader.h"
#include "data/loader.h"
#include "dist/dist.h"
#ifdef GP_HAVE_CUDA
#include "data/pinned.h"
#endif

int train_data_on(const struct train_data *d)
{
	return d->ld || d->gl;
}

/* A GPU batch into the net. The loop waits for the loader's decode thread, which
 * made the batch while the GPU computed the step before; the copy in is queued behind
 * that step with the buffer's read event after it, so that the loader may take the
 * buffer back at the next call (its writes wait for the event) and the host queues
 * the next step without waiting for this one. */
static int train_gpu_data_next(struct train_data *d, struct net *net, int64_t *wait_ns)
{
	struct gpu_batch b;
	double t0 = gp_now_s();
	GP_TRY(gpu_loader_next(d->gl, &b));
	double ms = 1e3 * (gp_now_s() - t0);
	d->wait_ms_total += ms;
	if (wait_ns)
		*wait_ns = (int64_t)(ms * 1e6);
	return net_set_batch_device(net, b.x, d->gl_dtype, d->gl_nhwc, b.labels, b.read_event);
}

int train_uses_dataset(const struct train_opts *o)
{
	return o->data && strcmp(o->data, "synthetic");
}

/* Take the next batch and stage it into the net: on the GPU its copy runs on a copy
 * stream while the previous step still computes, so the loop only waits for the
 * loader. The previous batch's buffer goes back once its own copy is done (staging
 * waits for that). Adds how long the loop waited and how long staging took. */
int train_data_next(struct train_data *d, struct net *net, int64_t *wait_ns)
{
	if (d->gl)
		return train_gpu_data_next(d, net, wait_ns);
	struct batch *b = NULL;
	int rc = loader_next(d->ld, &b);
	if (rc < 0)
		return rc;
	d->wait_ms_total += b->wait_ms;
	if (wait_ns)
		*wait_ns = (int64_t)(b->wait_ms * 1e6);
	double t0 = gp_now_s();
	rc = net_stage_batch(net, b->x, b->labels);
	d->copy_ms_total += 1e3 * (gp_now_s() - t0);
	if (d->held)
		loader_release(d->ld, d->held);
	d->held = b;
	return rc;
}

/* Open the dataset (train mode, the model's input size) and settle the class count:
 * the dataset's unless the caller asked for at least as many. */
int train_data_open(const struct train_opts *o, int size, struct train_data *d,
		    int *classes)
{
	GP_TRY(dataset_open(o->data, 1, size, &d->ds));
	int have = dataset_classes(d->ds);
	if (!*classes)
		*classes = have;
	else if (*classes < have)
		return gp_error(GP_EINVAL, "--classes %d is fewer than the %d classes of '%s'",
				*classes, have, o->data);
	return 0;
}

/* The validation set, when the run validates (o->eval_every > 0): --val-data, else
 * the training spec's own split, else none. --val-data is opened before the training
 * set, so that a wrong one is the run's first and only line; the split after it, so
 * that the data layer's note on the layout names the training half. */
int train_val_open(const struct train_opts *o, int size, struct train_data *d)
{
	const char *spec = o->val_data;
	if (o->eval_every <= 0)
		return 0;
	if (!spec && train_uses_dataset(o) && dataset_has_val_split(o->data))
		spec = o->data;
	if (!spec)
		return 0;
	int rc = dataset_open(spec, 0, size, &d->val);
	if (rc < 0 && o->val_data) {
		char why[1024];
		snprintf(why, sizeof(why), "%s", gp_errmsg());
		return gp_error(rc, "--val-data: %s", why);
	}
	return rc;
}

/* Its classes must be the training set's, name for name (a class missing from val/
 * would shift every label after it), or fit the net's for synthetic training data. */
int train_val_check(const struct train_opts *o, int classes, struct train_data *d)
{
	const char *spec = o->val_data ? o->val_data : o->data;
	int have = dataset_classes(d->val);
	if (have > classes)
		return gp_error(GP_EINVAL, "validation set '%s' has %d classes, the net %d", spec, have, classes);
	if (d->ds && have != dataset_classes(d->ds))
		return gp_error(GP_EINVAL, "validation set '%s' has %d classes, the training set %d", spec, have,
				dataset_classes(d->ds));
	for (int c = 0; d->ds && c < have; c++)
		if (strcmp(dataset_class_name(d->val, c), dataset_class_name(d->ds, c)))
			return gp_error(GP_EINVAL, "validation set '%s': class %d is '%s', in the training set '%s'",
					spec, c, dataset_class_name(d->val, c), dataset_class_name(d->ds, c));
	return 0;
}

/* The GPU loader's batch layout: straight into the net's 16-bit NHWC input where it
 * takes one, else floats (NCHW). */
static int train_gpu_layout(struct net *net, struct train_data *d, enum gpu_batch_layout *layout)
{
	GP_TRY(net_input_format(net, &d->gl_dtype, &d->gl_nhwc));
	*layout = GPU_BATCH_NCHW_F32;
	if (d->gl_nhwc && d->gl_dtype == GP_BF16)
		*layout = GPU_BATCH_NHWC_BF16;
	else if (d->gl_nhwc && d->gl_dtype == GP_F16)
		*layout = GPU_BATCH_NHWC_F16;
	if (*layout == GPU_BATCH_NCHW_F32) {
		d->gl_dtype = GP_F32;
		d->gl_nhwc = 0;
	}
	return 0;
}

/* Start the loader and settle the step count (epochs win over steps). Batch
 * buffers are pinned on the CUDA backend so the copy in runs at full speed. With
 * --decode auto both loaders are timed first (decode_probe_run), each in the form
 * the run would create it; the one picked is then created here at start_batch, so
 * the run's batches are those of that mode. auto without a GPU run is cpu without a
 * probe, and so is auto across ranks: each rank would time its own probe and could
 * pick otherwise than the rest. Either loader reads the rank's shard. */
int train_data_start(const struct train_opts *o, int size, struct train_data *d,
		     struct net *net, int *steps, struct train_result *res, long start_batch)
{
	enum decode_mode mode = o->decode;
	if (mode == DECODE_AUTO && (o->backend != BACKEND_CUDA || dist_world(o->dist) > 1))
		mode = DECODE_CPU;
	enum gpu_batch_layout layout = GPU_BATCH_NCHW_F32;
	if (mode != DECODE_CPU)
		GP_TRY(train_gpu_layout(net, d, &layout));
#ifdef GP_HAVE_CUDA
	if (o->backend == BACKEND_CUDA && mode != DECODE_GPU)
		GP_TRY(data_use_pinned_memory());
#endif
	struct gpu_loader_config gc = { .batch = o->batch, .size = size, .train = 1,
					.drop_last = 1, .seed = o->seed, .device = o->device,
					.layout = layout, .start_batch = start_batch,
					.decode_threads = o->decode_threads,
					.shard = dist_rank(o->dist), .shards = dist_world(o->dist) };
	struct loader_config lc = {
		/* one batch stays held while its copy runs: the ring needs two at least */
		.batch = o->batch, .workers = o->workers,
		.prefetch = o->prefetch > 1 || (o->prefetch == 1 && o->workers > 1) ? o->prefetch : 2,
		.size = size, .train = 1, .drop_last = 1, .seed = o->seed,
		.shard = dist_rank(o->dist), .shards = dist_world(o->dist), .start_batch = start_batch,
	};
	if (mode == DECODE_AUTO) {
		struct decode_probe_config pc = { .cpu = lc, .gpu = gc };
		if (o->probe_workers > 0)
			pc.cpu.workers = o->probe_workers;
		GP_TRY(decode_probe_run(d->ds, &pc, &res->decode_probe));
		res->decode_probed = 1;
		mode = res->decode_probe.use_gpu ? DECODE_GPU : DECODE_CPU;
	}
	res->decode_gpu = mode == DECODE_GPU;
	if (res->decode_gpu) {
		GP_TRY(gpu_loader_create(d->ds, &gc, &d->gl));
		res->batches_per_epoch = gpu_loader_batches_per_epoch(d->gl);
	} else {
		GP_TRY(loader_create(d->ds, &lc, &d->ld));
		res->batches_per_epoch = loader_batches_per_epoch(d->ld);
	}
	if (o->epochs > 0) {
		long long n = (long long)o->epochs * res->batches_per_epoch;
		if (n > 1000000000)
			return gp_error(GP_EINVAL, "--epochs %d: %lld steps is too many", o->epochs, n);
		*steps = (int)n;
	}
	return 0;
}

void train_data_close(struct train_data *d, struct net *net)
{
	if (d->held) {
		/* the last staged copy may still read the batch: wait before handing it back */
		if (net)
			net_wait(net);
		loader_release(d->ld, d->held);
	}
	loader_destroy(d->ld);
	gpu_loader_destroy(d->gl);
	dataset_close(d->ds);
	dataset_close(d->val);
}
