/* The training loop shared by train, compare, maxbatch and workers: build a model,
 * set it up on a backend, train on a fixed synthetic batch or on batches from a
 * data loader, time it (and the data wait), report memory. */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpuload.h"
#include "core/error.h"
#include "core/names.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "dist/dist.h"
#include "data/gpu_loader.h"
#include "data/loader.h"
#include "gpu/devinfo.h"
#include "backend/backend.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "train/evaluate.h"
#ifdef GP_HAVE_CUDA
#include "data/pinned.h"
#endif

/* The names that --device and --layout take and results record, one table each
 * (precisions: ops/graph.c); messages, help texts and the menu derive from them.
 * Devices are indexed by enum backend_kind, then "auto"; layouts by enum layout. */
static const char *const device_names[] = { "cpu", "cuda", "auto" };
static const char *const layout_names[] = { "auto", "nchw", "nhwc" };
static const char *const optimizer_names[] = { "sgd", "adamw" };

#define COUNT(a) ((int)(sizeof(a) / sizeof(a[0])))

const char *train_device_choice_at(int i)
{
	return i >= 0 && i < COUNT(device_names) ? device_names[i] : NULL;
}

const char *train_device_name(enum backend_kind b)
{
	return device_names[b];
}

/* "auto" is taken, and is what no --layout means, but not offered: the choices are
 * the layouts themselves. */
const char *train_layout_choice_at(int i)
{
	return i >= 0 && i + LAYOUT_NCHW < COUNT(layout_names) ? layout_names[i + LAYOUT_NCHW] : NULL;
}

const char *train_layout_name(enum layout l)
{
	return layout_names[l];
}

int train_pick_device(const char *device, enum backend_kind *out, int quiet)
{
	struct gp_devinfo d;
	char known[64];
	int i = device ? names_find(train_device_choice_at, device) : COUNT(device_names) - 1;
	if (i < 0)
		return gp_error(GP_EINVAL, "--device must be %s (got '%s')",
				names_join(known, sizeof(known), train_device_choice_at, ", ", " or "),
				device);
	devinfo_query(&d);
	if (i == COUNT(device_names) - 1) {
		*out = d.gpu_count > 0 ? BACKEND_CUDA : BACKEND_CPU;
		if (!d.gpu_count && !quiet)
			fprintf(stderr, "note: no GPU (%s); running on the CPU backend\n", d.note);
		return 0;
	}
	if (i == BACKEND_CUDA && !d.gpu_count)
		return gp_error(GP_ENODEV, "--device cuda: %s", d.note);
	*out = (enum backend_kind)i;
	return 0;
}

const char *train_optimizer_name_at(int i)
{
	return i >= 0 && i < COUNT(optimizer_names) ? optimizer_names[i] : NULL;
}

int train_parse_optimizer(const char *s, enum optim_kind *out)
{
	char known[64];
	int i = s ? names_find(train_optimizer_name_at, s) : OPTIM_SGD;
	if (i < 0)
		return gp_error(GP_EINVAL, "--optimizer must be %s (got '%s')",
				names_join(known, sizeof(known), train_optimizer_name_at, ", ", " or "), s);
	*out = (enum optim_kind)i;
	return 0;
}

int train_parse_layout(const char *s, enum layout *out)
{
	char known[64];
	if (!s || !strcmp(s, train_layout_name(LAYOUT_AUTO))) {
		*out = LAYOUT_AUTO;
		return 0;
	}
	int i = names_find(train_layout_choice_at, s);
	if (i < 0)
		return gp_error(GP_EINVAL, "--layout must be %s (got '%s')",
				names_join(known, sizeof(known), train_layout_choice_at, ", ", " or "),
				s);
	*out = (enum layout)(i + LAYOUT_NCHW);
	return 0;
}

/* A fixed synthetic batch: normal pixels, uniform labels, from the seed. */
int train_synthetic_batch(int batch, int c, int h, int w, int classes, uint64_t seed, float **x,
			  int32_t **labels)
{
	size_t n = (size_t)batch * c * h * w;
	*x = malloc(n * sizeof(float));
	*labels = malloc((size_t)batch * sizeof(int32_t));
	if (!*x || !*labels) {
		free(*x);
		free(*labels);
		*x = NULL;
		*labels = NULL;
		return gp_error(GP_ENOMEM, "cannot allocate a batch of %d images", batch);
	}
	struct rng r;
	rng_seed(&r, seed, 99);
	for (size_t i = 0; i < n; i++)
		(*x)[i] = (float)rng_normal(&r);
	for (int i = 0; i < batch; i++)
		(*labels)[i] = (int32_t)rng_below(&r, (uint32_t)classes);
	return 0;
}

struct train_opts train_opts_default(void)
{
	struct train_opts o = {
		.model = "simple_cnn", .batch = 32, .classes = 1000, .steps = 20, .warmup = -1,
		.dropout = -1, .backend = BACKEND_CPU, .precision = PREC_FP32,
		.sgd = { .lr = 0.01, .momentum = 0.9 },
	};
	return o;
}

static int observe_stage(const struct train_observer *ob, enum train_stage st, int begin)
{
	return ob && ob->stage ? ob->stage(ob->user, st, begin) : 0;
}

int train_run(const struct train_opts *o, struct train_result *res, FILE *log)
{
	return train_run_observed(o, NULL, res, log);
}

/* --- the batch source ---------------------------------------------------------------
 * A dataset and its loader, for a run that reads a new batch every step: the CPU
 * loader (ld), or with --decode gpu the GPU loader (gl), whose batches nvJPEG decodes
 * and a kernel augments on the net's GPU in the net's input format; and the
 * validation set (read by a CPU loader of its own at each validation). */
struct train_data {
	struct dataset *ds, *val;
	struct loader *ld;
	struct gpu_loader *gl;
	enum gp_dtype gl_dtype; /* the GPU batches' format: the net's, or float NCHW */
	int gl_nhwc;
	struct batch *held; /* staged batch whose host memory the copy may still read */
	double wait_ms_total, copy_ms_total;
};

static int train_data_on(const struct train_data *d)
{
	return d->ld || d->gl;
}

/* A GPU batch into the net. The loop "waits" for the decode of the next batch, which
 * runs while the GPU still computes the step before; the copy in waits for that step
 * to end, so its time is not counted as data time. */
static int train_gpu_data_next(struct train_data *d, struct net *net, int64_t *wait_ns)
{
	struct gpu_batch b;
	double t0 = gp_now_s();
	GP_TRY(gpu_loader_next(d->gl, &b));
	double ms = 1e3 * (gp_now_s() - t0);
	d->wait_ms_total += ms;
	if (wait_ns)
		*wait_ns = (int64_t)(ms * 1e6);
	return net_set_batch_device(net, b.x, d->gl_dtype, d->gl_nhwc, b.labels);
}

int train_uses_dataset(const struct train_opts *o)
{
	return o->data && strcmp(o->data, "synthetic");
}

/* Take the next batch and stage it into the net: on the GPU its copy runs on a copy
 * stream while the previous step still computes, so the loop only waits for the
 * loader. The previous batch's buffer goes back once its own copy is done (staging
 * waits for that). Adds how long the loop waited and how long staging took. */
static int train_data_next(struct train_data *d, struct net *net, int64_t *wait_ns)
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
static int train_data_open(const struct train_opts *o, int size, struct train_data *d,
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
static int train_val_open(const struct train_opts *o, int size, struct train_data *d)
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
static int train_val_check(const struct train_opts *o, int classes, struct train_data *d)
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

/* Start the loader and settle the step count (epochs win over steps). Batch
 * buffers are pinned on the CUDA backend so the copy in runs at full speed. */
static int train_data_start(const struct train_opts *o, int size, struct train_data *d,
			    struct net *net, int *steps, struct train_result *res)
{
	if (o->decode_gpu) {
		/* straight into the net's 16-bit NHWC input where it takes one, else floats */
		GP_TRY(net_input_format(net, &d->gl_dtype, &d->gl_nhwc));
		enum gpu_batch_layout layout = GPU_BATCH_NCHW_F32;
		if (d->gl_nhwc && d->gl_dtype == GP_BF16)
			layout = GPU_BATCH_NHWC_BF16;
		else if (d->gl_nhwc && d->gl_dtype == GP_F16)
			layout = GPU_BATCH_NHWC_F16;
		if (layout == GPU_BATCH_NCHW_F32) {
			d->gl_dtype = GP_F32;
			d->gl_nhwc = 0;
		}
		if (dist_world(o->dist) > 1)
			return gp_error(GP_EINVAL, "--decode gpu does not shard a dataset over ranks "
					"yet: use --decode cpu with data parallelism");
		struct gpu_loader_config gc = { .batch = o->batch, .size = size, .train = 1,
						.drop_last = 1, .seed = o->seed, .device = o->device,
						.layout = layout };
		GP_TRY(gpu_loader_create(d->ds, &gc, &d->gl));
		res->batches_per_epoch = gpu_loader_batches_per_epoch(d->gl);
		goto epochs;
	}
#ifdef GP_HAVE_CUDA
	if (o->backend == BACKEND_CUDA)
		GP_TRY(data_use_pinned_memory());
#endif
	struct loader_config lc = {
		/* one batch stays held while its copy runs: the ring needs two at least */
		.batch = o->batch, .workers = o->workers,
		.prefetch = o->prefetch > 1 || (o->prefetch == 1 && o->workers > 1) ? o->prefetch : 2,
		.size = size, .train = 1, .drop_last = 1, .seed = o->seed,
		.shard = dist_rank(o->dist), .shards = dist_world(o->dist),
	};
	GP_TRY(loader_create(d->ds, &lc, &d->ld));
	res->batches_per_epoch = loader_batches_per_epoch(d->ld);
epochs:
	if (o->epochs > 0) {
		long long n = (long long)o->epochs * res->batches_per_epoch;
		if (n > 1000000000)
			return gp_error(GP_EINVAL, "--epochs %d: %lld steps is too many", o->epochs, n);
		*steps = (int)n;
	}
	return 0;
}

/* One training step with an observer: each stage is announced (op by op, no graph
 * replay) and the data stage takes the loader's next batch, or uploads the fixed
 * synthetic batch again, so that it has a cost to show. */
static int train_step_observed(struct net *net, const struct sgd_args *sgd, int k,
			       const struct train_observer *ob, struct train_data *data, const float *x,
			       const int32_t *labels, double *loss, int *correct)
{
	int64_t data_wait_ns = 0;
	double sum = 0;
	int right = 0;
	for (int m = 0; m < k; m++) {
		double l = 0;
		int c = 0;
		int64_t wait_ns = 0;
		GP_TRY(observe_stage(ob, TRAIN_STAGE_DATA, 1));
		if (data)
			GP_TRY(train_data_next(data, net, &wait_ns));
		else
			GP_TRY(net_set_batch_data(net, x, labels));
		data_wait_ns += wait_ns;
		GP_TRY(observe_stage(ob, TRAIN_STAGE_DATA, 0));
		GP_TRY(observe_stage(ob, TRAIN_STAGE_FORWARD, 1));
		GP_TRY(net_forward(net, 1));
		GP_TRY(net_loss(net, loss ? &l : NULL, correct ? &c : NULL));
		GP_TRY(observe_stage(ob, TRAIN_STAGE_FORWARD, 0));
		GP_TRY(observe_stage(ob, TRAIN_STAGE_BACKWARD, 1));
		GP_TRY(net_backward(net));
		GP_TRY(net_grad_accumulate(net, m, k));
		GP_TRY(observe_stage(ob, TRAIN_STAGE_BACKWARD, 0));
		sum += l;
		right += c;
	}
	if (loss)
		*loss = sum / k;
	if (correct)
		*correct = right;
	GP_TRY(observe_stage(ob, TRAIN_STAGE_OPTIMIZER, 1));
	GP_TRY(net_sgd_step(net, sgd));
	GP_TRY(observe_stage(ob, TRAIN_STAGE_OPTIMIZER, 0));
	return ob->step_end ? ob->step_end(ob->user, net, data_wait_ns) : 0;
}

/* Every rank's step time and data wait, in rank order, into res on every rank; the
 * run's step time is the slowest rank's (they wait for each other at each all-reduce,
 * so the figures differ little; the slowest names where to look). */
static int gather_rank_times(struct dist *d, struct train_result *res)
{
	int world = dist_world(d), rank = dist_rank(d);
	res->world = world;
	snprintf(res->transport, sizeof(res->transport), "%s", dist_transport_name(d));
	memset(res->rank_ms_per_step, 0, sizeof(double) * world);
	memset(res->rank_data_wait_ms, 0, sizeof(double) * world);
	res->rank_ms_per_step[rank] = res->ms_per_step;
	res->rank_data_wait_ms[rank] = res->data_wait_ms;
	if (world > 1) {
		GP_TRY(dist_allreduce_sum(d, res->rank_ms_per_step, (size_t)world, GP_F64));
		GP_TRY(dist_allreduce_sum(d, res->rank_data_wait_ms, (size_t)world, GP_F64));
	}
	res->slowest_rank = 0;
	for (int r = 1; r < world; r++)
		if (res->rank_ms_per_step[r] > res->rank_ms_per_step[res->slowest_rank])
			res->slowest_rank = r;
	res->ms_per_step = res->rank_ms_per_step[res->slowest_rank];
	return 0;
}

/* K micro-batches, each forward, loss and backward with its gradients kept, then one
 * optimizer step (sgd's grad_scale 1/K): as dividing each micro-batch's loss by K.
 * loss is their mean, correct their sum. */
static int train_step_accum(struct net *net, const struct sgd_args *sgd, int k, struct train_data *data,
			    double *loss, int *correct)
{
	double sum = 0;
	int right = 0;
	for (int m = 0; m < k; m++) {
		double l = 0;
		int c = 0;
		if (data)
			GP_TRY(train_data_next(data, net, NULL));
		GP_TRY(net_forward(net, 1));
		GP_TRY(net_loss(net, loss ? &l : NULL, correct ? &c : NULL));
		GP_TRY(net_backward(net));
		GP_TRY(net_grad_accumulate(net, m, k));
		sum += l;
		right += c;
	}
	if (loss)
		*loss = sum / k;
	if (correct)
		*correct = right;
	return net_sgd_step(net, sgd);
}

/* The optimizer's arguments for step `step` (from 0): the schedule's rate (and
 * OneCycleLR's momentum, or AdamW's beta1), the accumulation's gradient scale. */
static struct sgd_args train_step_args(const struct train_opts *o, const struct lr_schedule_cfg *sched,
				       int k, long step)
{
	struct sgd_args a = o->sgd;
	double m;
	a.lr = lr_schedule_lr(sched, step);
	if (lr_schedule_momentum(sched, step, &m)) {
		if (a.kind == OPTIM_ADAMW)
			a.beta1 = m;
		else
			a.momentum = m;
	}
	if (k > 1)
		a.grad_scale = 1.0 / k;
	return a;
}

/* The recipe's line in the log, where it is more than constant-rate SGD. */
static void train_log_recipe(FILE *log, const struct train_opts *o, const struct lr_schedule_cfg *c, int k)
{
	const struct sgd_args *a = &o->sgd;
	if (a->kind == OPTIM_ADAMW)
		fprintf(log, "optimizer: AdamW lr %g betas (%g, %g) eps %g weight decay %g", a->lr, a->beta1, a->beta2,
			a->eps, a->weight_decay);
	else
		fprintf(log, "optimizer: SGD lr %g momentum %g weight decay %g%s", a->lr, a->momentum,
			a->weight_decay, a->nesterov ? " nesterov" : "");
	fprintf(log, "; schedule %s", lr_schedule_name_at(c->kind));
	if (c->kind == LR_STEP)
		fprintf(log, " every %d epochs x %g", c->step_epochs, c->gamma > 0 ? c->gamma : 0.1);
	if (c->warmup_epochs)
		fprintf(log, " after %d warmup epochs from %g x lr", c->warmup_epochs,
			c->warmup_factor > 0 ? c->warmup_factor : 0.01);
	fprintf(log, " (%d steps per epoch)", c->steps_per_epoch);
	if (o->label_smoothing > 0)
		fprintf(log, "; label smoothing %g", o->label_smoothing);
	if (k > 1)
		fprintf(log, "; %d micro-batches of %d per step", k, o->batch);
	if (a->clip_norm > 0)
		fprintf(log, "; gradient norm clipped to %g", a->clip_norm);
	fputc('\n', log);
}

void train_result_free(struct train_result *res)
{
	free(res->log);
	res->log = NULL;
	res->n_log = 0;
	free(res->history);
	res->history = NULL;
	res->n_history = 0;
}

/* What an epoch has gathered so far: the loss and hits of the steps whose loss was
 * read (images: theirs), the images it trained on (all ranks), when it began, and
 * the data wait at that moment. */
struct epoch_acc {
	double loss_sum, correct, images, trained;
	int reads;
	double t0, wait_ms0;
};

/* Validate (when this epoch is due), fill the epoch's summary, print its line and
 * tell the observer. t_epoch_end: when its last step ended; *val_s gets the time
 * validation took. */
static int train_epoch_end(const struct train_opts *o, const struct train_observer *obs, struct net *net,
			   struct train_data *data, int epoch, int n_epochs, long step, double lr,
			   const struct epoch_acc *ea, double t_run0, double t_epoch_end, struct train_result *res,
			   double *val_s, FILE *log)
{
	struct train_epoch_summary *e = &res->history[res->n_history];
	int every = o->eval_every > 0 ? o->eval_every : 1;
	double train_s = t_epoch_end - ea->t0;
	*val_s = 0;
	*e = (struct train_epoch_summary){ .epoch = epoch + 1, .step = step, .lr = lr };
	e->train_loss = ea->reads ? ea->loss_sum / ea->reads : NAN;
	e->train_top1 = ea->images > 0 ? 100.0 * ea->correct / ea->images : NAN;
	if (data->val && ((epoch + 1) % every == 0 || epoch + 1 == n_epochs)) {
		struct eval_opts eo = { .workers = o->workers, .prefetch = o->prefetch, .seed = o->seed };
		struct eval_result r;
		GP_TRY(evaluate_net(net, data->val, &eo, &r));
		e->has_val = 1;
		e->val_images = r.counts.images;
		e->val_loss = r.loss;
		e->val_top1 = r.top1;
		e->val_top5 = r.top5;
		e->val_img_s = r.img_s;
		*val_s = r.seconds;
	}
	double wait_ms = data->wait_ms_total + data->copy_ms_total - ea->wait_ms0;
	e->img_s = train_s > 0 ? ea->trained / train_s : 0;
	e->data_wait_pct = train_s > 0 ? 100 * wait_ms / (1e3 * train_s) : 0;
	e->time_s = gp_now_s() - t_run0;
	res->n_history++;
	if (log) {
		fprintf(log, "epoch %3d/%d  train loss %7.4f top-1 %5.1f%%  ", e->epoch, n_epochs, e->train_loss, e->train_top1);
		if (e->has_val)
			fprintf(log, "val loss %7.4f top-1 %5.1f%% top-5 %5.1f%%  ", e->val_loss, e->val_top1,
				e->val_top5);
		else
			fprintf(log, "val %-34s", "-");
		fprintf(log, "lr %9.3e  %7.1f img/s  data %4.1f%%  %7.1f s\n", e->lr, e->img_s, e->data_wait_pct,
			e->time_s);
		fflush(log);
	}
	return obs && obs->on_epoch ? obs->on_epoch(obs->user, net, e) : 0;
}

int train_run_observed(const struct train_opts *o, const struct train_observer *obs,
		       struct train_result *res, FILE *log)
{
	double t_run0 = gp_now_s();
	if (!obs)
		obs = o->observer;
	memset(res, 0, sizeof(*res));
	struct model_opts mo = model_defaults(o->model);
	struct train_data data = { 0 };
	struct net *net = NULL;
	float *x = NULL;
	int32_t *labels = NULL;
	int classes = o->classes, steps = o->steps, rc = 0;
	int k = o->grad_accum > 1 ? o->grad_accum : 1;
	struct lr_schedule_cfg sched = o->schedule;
	mo.batch = o->batch;
	mo.seed = o->seed;
	mo.dropout = o->dropout;
	if (o->size)
		mo.size = o->size;
	if (o->val_data && (rc = train_val_open(o, mo.size, &data)) < 0)
		goto out;
	if (train_uses_dataset(o)) {
		if ((rc = train_data_open(o, mo.size, &data, &classes)) < 0)
			goto out;
	} else if (!classes) {
		classes = 1000;
	}
	if (!o->val_data && (rc = train_val_open(o, mo.size, &data)) < 0)
		goto out;
	if (data.val && (rc = train_val_check(o, classes, &data)) < 0)
		goto out;
	mo.classes = classes;
	res->classes = classes;
	int rank = dist_rank(o->dist), world = dist_world(o->dist);
	if (world > TRAIN_MAX_RANKS) {
		rc = gp_error(GP_EINVAL, "%d ranks: at most %d", world, TRAIN_MAX_RANKS);
		goto out;
	}
	if ((rc = model_build(o->model, &mo, &net)) < 0)
		goto out;
	if (o->dist && (rc = net_set_dist(net, o->dist, o->sync_bn, o->bucket_bytes)) < 0)
		goto out;
	if (o->load && (rc = checkpoint_load(net, o->load)) < 0)
		goto out;
	net->device = o->backend == BACKEND_CUDA ? o->device : 0;
	net->use_graphs = !o->no_graphs;
	net->recompute = o->recompute;
	net->layout = o->layout;
	net->optim = (struct optim_setup){ .kind = o->sgd.kind, .grad_accum = k,
					   .dynamic = lr_schedule_varies(&sched) };
	net->label_smoothing = o->label_smoothing;
	rc = net_setup(net, o->backend, GP_F32, o->precision);
	if (rc < 0)
		goto out;
	/* fp16's range needs dynamic loss scaling, as torch.amp.GradScaler gives it */
	if (o->precision == PREC_FP16)
		net_enable_loss_scaling(net);
	res->mem_after_setup = net->mem;
	if (data.ds) {
		if ((rc = train_data_start(o, mo.size, &data, net, &steps, res)) < 0)
			goto out;
	} else {
		rc = train_synthetic_batch(o->batch * world, 3, mo.size, mo.size, classes, o->seed, &x,
					   &labels);
		if (rc == 0 && rank > 0) { /* this rank's rows of the batch of all ranks */
			size_t row = (size_t)3 * mo.size * mo.size;
			memmove(x, x + row * o->batch * rank, row * o->batch * sizeof(float));
			memmove(labels, labels + (size_t)o->batch * rank, o->batch * sizeof(int32_t));
		}
		if (rc < 0 || (rc = net_set_batch_data(net, x, labels)) < 0)
			goto out;
	}
	if (obs && obs->after_setup && (rc = obs->after_setup(obs->user, net)) < 0)
		goto out;
	/* with K micro-batches an optimizer step reads K batches: an epoch has 1/K as many */
	if (data.ds && k > 1 && res->batches_per_epoch < k) {
		rc = gp_error(GP_EINVAL, "--grad-accum %d is more than the %d batches of an epoch", k,
			      res->batches_per_epoch);
		goto out;
	}
	if (data.ds && k > 1 && o->epochs > 0)
		steps = o->epochs * (res->batches_per_epoch / k);
	int epoch_steps = o->epoch_steps > 0 ? o->epoch_steps :
			  data.ds ? res->batches_per_epoch / k : o->steps;
	if (!data.ds && o->epochs > 0) {
		long long n = (long long)o->epochs * epoch_steps;
		if (n > 1000000000LL) {
			rc = gp_error(GP_EINVAL, "--epochs %d x %d steps is too many", o->epochs, epoch_steps);
			goto out;
		}
		steps = (int)n;
	}
	sched.lr = o->sgd.lr;
	sched.steps_per_epoch = epoch_steps;
	sched.total_steps = steps;
	if ((rc = lr_schedule_check(&sched)) < 0)
		goto out;
	int warmup = o->warmup >= 0 ? o->warmup : (steps / 10 < 10 ? steps / 10 : 10);
	if (warmup >= steps)
		warmup = steps - 1;
	int every = o->log_every ? o->log_every : (steps + 19) / 20;
	if (o->keep_log && !(res->log = calloc((size_t)(steps / every + 3), sizeof(*res->log)))) {
		rc = gp_error(GP_ENOMEM, "cannot allocate the log of %d steps", steps);
		goto out;
	}
	/* A run in epochs, or one that validates, sums up each epoch; one in epochs over a
	 * dataset reads the loss of every step for the epoch's means (as torchvision's
	 * reference reads loss.item() at each step), others (the synthetic batch, whose
	 * epochs the profiler windows) at the logged steps and each epoch's last. */
	int per_epoch = o->epochs > 0 || data.val, read_every = o->epochs > 0 && data.ds;
	int n_epochs = (steps + epoch_steps - 1) / epoch_steps;
	if (per_epoch && !(res->history = calloc((size_t)n_epochs, sizeof(*res->history)))) {
		rc = gp_error(GP_ENOMEM, "cannot allocate the history of %d epochs", n_epochs);
		goto out;
	}
	if (data.val)
		res->val_images = dataset_count(data.val);
	if (log) {
		fprintf(log, "training %s on %s (%s), batch %d, %dx%d, %d steps, ", o->model,
			train_device_name(o->backend), train_precision_name(o->precision), o->batch, mo.size,
			mo.size, steps);
		if (o->sgd.kind == OPTIM_ADAMW)
			fprintf(log, "AdamW lr %g\n", o->sgd.lr);
		else
			fprintf(log, "SGD lr %g momentum %g\n", o->sgd.lr, o->sgd.momentum);
		if (o->sgd.kind != OPTIM_SGD || lr_schedule_varies(&sched) || k > 1 || o->label_smoothing > 0 ||
		    o->sgd.clip_norm > 0)
			train_log_recipe(log, o, &sched, k);
		if (world > 1)
			fprintf(log, "data parallel: %d ranks (%s), batch %d per rank, %d in all%s\n",
				world, dist_transport_name(o->dist), o->batch, o->batch * world,
				o->sync_bn ? ", synchronized batch norm" : "");
		if (data.ld)
			fprintf(log, "data: %s, %d images, %d classes, %d batches per epoch, %d workers\n",
				o->data, dataset_count(data.ds), dataset_classes(data.ds),
				res->batches_per_epoch, o->workers);
		else if (data.gl)
			fprintf(log, "data: %s, %d images, %d classes, %d batches per epoch, decoded "
				"and augmented on the GPU (%s %s batches)\n", o->data,
				dataset_count(data.ds), dataset_classes(data.ds), res->batches_per_epoch,
				dtype_name(data.gl_dtype), data.gl_nhwc ? "NHWC" : "NCHW");
		if (data.val)
			fprintf(log, "validation: %d images every %d epochs and after the last, eval mode, "
				"batches of %d (the last padded)\n", dataset_count(data.val),
				o->eval_every > 0 ? o->eval_every : 1, o->batch);
	}
	const struct train_observer *ob = obs && (obs->step_begin || obs->stage || obs->step_end) ? obs : NULL;
	double t0 = gp_now_s(), t_timed = t0, val_timed_s = 0;
	struct epoch_acc ea = { .t0 = t0 };
	struct cpu_mark cpu0, cpu1; /* CPU load over the timed steps, as their rate */
	cpu_mark_now(&cpu0);
	for (int step = 0; step < steps; step++) {
		if (step == warmup) {
			if ((rc = net_wait(net)) < 0)
				goto out;
			t_timed = gp_now_s();
			cpu_mark_now(&cpu0);
		}
		int epoch_last = (step + 1) % epoch_steps == 0 || step == steps - 1;
		int want_line = step == 0 || step == steps - 1 || (step + 1) % every == 0;
		int want_loss = want_line || (per_epoch && (read_every || epoch_last));
		double loss = 0;
		int correct = 0;
		if (ob && ob->step_begin &&
		    (rc = ob->step_begin(ob->user, net, step / epoch_steps, step % epoch_steps, step)) < 0)
			goto out;
		struct sgd_args sgd = train_step_args(o, &sched, k, step);
		res->last_lr = sgd.lr;
		if (ob)
			rc = train_step_observed(net, &sgd, k, ob, train_data_on(&data) ? &data : NULL, x, labels,
						 want_loss ? &loss : NULL, want_loss ? &correct : NULL);
		else if (k > 1)
			rc = train_step_accum(net, &sgd, k, train_data_on(&data) ? &data : NULL, want_loss ? &loss : NULL,
					      want_loss ? &correct : NULL);
		else if (!train_data_on(&data) || (rc = train_data_next(&data, net, NULL)) == 0)
			rc = net_train_step(net, &sgd, want_loss ? &loss : NULL, want_loss ? &correct : NULL);
		if (rc < 0)
			goto out;
		if (want_loss && world > 1) { /* the mean loss and the accuracy of all ranks */
			double v[2] = { loss, correct };
			if ((rc = dist_allreduce_sum(o->dist, v, 2, GP_F64)) < 0)
				goto out;
			loss = v[0] / world;
			correct = (int)v[1];
		}
		if (step == 0)
			res->first_loss = loss;
		if (want_loss && !isfinite(loss) && !res->nonfinite_step) {
			/* said once, on stderr, so that it shows also when the log is off */
			res->nonfinite_step = step + 1;
			fprintf(stderr, "warning: the loss became %s at step %d: training diverged "
				"(try a smaller --lr); results record it as null\n",
				isnan(loss) ? "NaN" : "infinite", step + 1);
		}
		double images = (double)o->batch * k;
		ea.trained += images * world;
		if (want_loss) {
			res->last_loss = loss;
			ea.loss_sum += loss;
			ea.correct += correct;
			ea.images += images * world;
			ea.reads++;
		}
		if (want_line) {
			double train_el = gp_now_s() - t0 - res->val_s; /* validation left out */
			struct train_log_point pt = {
				step + 1, loss, correct / (images * world), sgd.lr,
				.img_s = train_el > 0 ? (step + 1) * images * world / train_el : 0,
				.data_wait_pct = train_el > 0 ? (data.wait_ms_total + data.copy_ms_total) /
								 (10 * train_el) : 0,
				.mem_bytes = net->mem.total_bytes,
			};
			if (res->log)
				res->log[res->n_log++] = pt;
			if (obs && obs->on_log && (rc = obs->on_log(obs->user, net, &pt)) < 0)
				goto out;
			if (log) {
				fprintf(log, "step %5d/%d  loss %8.4f  acc %5.1f%%  lr %9.3e  %7.1f img/s  %6.1f ms/step  eta %5.1f s\n",
					step + 1, steps, loss, 100.0 * correct / (images * world), sgd.lr,
					pt.img_s, 1e3 * train_el / (step + 1), train_el / (step + 1) * (steps - step - 1));
				fflush(log);
			}
		}
		if (obs && obs->after_step &&
		    (rc = obs->after_step(obs->user, net, step + 1, steps, gp_now_s() - t0)) < 0)
			goto out;
		if (per_epoch && epoch_last) {
			double val_s = 0;
			rc = train_epoch_end(o, obs, net, &data, step / epoch_steps, n_epochs, step + 1,
					     sgd.lr, &ea, t_run0, gp_now_s(), res, &val_s, log);
			res->val_s += val_s;
			if (step >= warmup)
				val_timed_s += val_s;
			if (rc < 0)
				goto out;
			ea = (struct epoch_acc){ .t0 = gp_now_s(),
						 .wait_ms0 = data.wait_ms_total + data.copy_ms_total };
		}
	}
	double t_end = gp_now_s();
	cpu_mark_now(&cpu1);
	cpu_load_between(&cpu0, &cpu1, &res->cpu);
	int timed = steps - warmup;
	res->steps = steps;
	res->timed_steps = timed;
	res->total_s = t_end - t0;
	res->ms_per_step = 1e3 * (t_end - t_timed - val_timed_s) / timed;
	if (train_data_on(&data))
		res->data_wait_ms = (data.wait_ms_total + data.copy_ms_total) / steps;
	if ((rc = gather_rank_times(o->dist, res)) < 0)
		goto out;
	res->buckets = net->buckets.n;
	if (world > 1 && (rc = net_dist_time_allreduce(net, 10, &res->allreduce_ms)) < 0)
		goto out;
	res->img_s = (double)o->batch * k * world * 1e3 / res->ms_per_step;
	res->img_s_per_rank = res->img_s / world;
	res->params = net->params_count;
	res->plan = net->plan;
	res->mem = net->mem;
	if (log)
		fprintf(log, "done: %.1f img/s, %.2f ms/step over the last %d steps; loss %.4f -> %.4f\n",
			res->img_s, res->ms_per_step, timed, res->first_loss, res->last_loss);
	if (log) {
		fprintf(log, "cpu: this process kept %.1f cores busy", res->cpu.proc_cores);
		if (res->cpu.machine_pct >= 0)
			fprintf(log, "; the machine %.0f%% of its %d cores (%.1f busy)",
				res->cpu.machine_pct, res->cpu.cores, res->cpu.machine_cores);
		fputc('\n', log);
	}
	if (train_data_on(&data)) {
		struct loader_stats st;
		struct gpu_decode_stats gs;
		if (data.gl)
			gpu_loader_get_stats(data.gl, &st, &gs);
		else
			loader_get_stats(data.ld, &st);
		if (data.gl && log)
			fprintf(log, "decode: on the GPU, nvJPEG %s backend: %ld hardware, %ld CUDA, "
				"%ld on the CPU (nvJPEG refused them)\n", gpu_loader_backend(data.gl),
				gs.hw_decoded, gs.cuda_decoded, gs.cpu_fallback);
		res->images = st.images;
		res->skipped_corrupt = st.skipped_corrupt;
		res->copy_ms = data.copy_ms_total / steps;
		res->data_wait_pct = res->total_s > res->val_s ? 100 * res->data_wait_ms * steps /
							(1e3 * (res->total_s - res->val_s)) : 0;
		if (log)
			fprintf(log, "data: %.2f ms per step waiting for batches (%.1f%% of step time, "
				"copy in %.2f ms), %ld corrupt images skipped\n", res->data_wait_ms,
				res->data_wait_pct, res->copy_ms, res->skipped_corrupt);
	}
	if (o->save && rank == 0) {
		if ((rc = net_sync_to_host(net)) < 0 || (rc = checkpoint_save(net, o->save)) < 0)
			goto out;
		if (log)
			fprintf(log, "saved %s\n", o->save);
	}
out:
	/* a rank that failed says so before its net (and its NCCL communicator) goes,
	 * so that no rank waits for it in a collective */
	if (rc < 0 && o->dist && !dist_failed(o->dist)) {
		char why[1024];
		snprintf(why, sizeof(why), "%s", gp_errmsg());
		dist_abort(o->dist, why);
		gp_error(rc, "%s", why);
	}
	if (data.held) {
		/* the last staged copy may still read the batch: wait before handing it back */
		if (net)
			net_wait(net);
		loader_release(data.ld, data.held);
	}
	loader_destroy(data.ld);
	gpu_loader_destroy(data.gl);
	dataset_close(data.ds);
	dataset_close(data.val);
	free(x);
	free(labels);
	net_free(net);
	return rc;
}

int train_plan_total(struct net *net, enum backend_kind backend, size_t workspace_bytes,
		     size_t *bytes)
{
	size_t ws = backend == BACKEND_CPU ? backend_cpu_ops.workspace_bytes(net) : workspace_bytes;
	GP_TRY(net_plan_memory(net, 1, net_act_elem_bytes(backend, GP_F32, net->precision), ws));
	*bytes = net->plan.total_bytes;
	return 0;
}
