/* The training loop shared by train, compare, maxbatch and workers: build a model,
 * set it up on a backend, train on a fixed synthetic batch or on batches from a
 * data loader, time it (and the data wait), report memory. */
#include "train/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cpuload.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/names.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "dist/dist.h"
#include "data/gpu_loader.h"
#include "data/loader.h"
#ifdef GP_HAVE_CUDA
#include "data/pinned.h"
#endif
#include "gpu/devinfo.h"
#include "backend/backend.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "train/batch_source.h"
#include "train/epochs.h"
#include "train/train_state.h"

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

int train_run_observed(const struct train_opts *o, const struct train_observer *obs,
		       struct train_result *res, FILE *log)
{
	double t_run0 = gp_now_s();
	if (!obs)
		obs = o->observer;
	/* the stages are announced (train_step_observed) only to an observer of them */
	const struct train_observer *ob = obs && (obs->step_begin || obs->stage || obs->step_end) ? obs : NULL;
	memset(res, 0, sizeof(*res));
	struct model_opts mo = model_defaults(o->model);
	struct train_data data = { 0 };
	struct net *net = NULL;
	float *x = NULL;
	int32_t *labels = NULL;
#ifdef GP_HAVE_CUDA
	int x_pinned = 0; /* x page-locked (data_pin) */
#endif
	int classes = o->classes, steps = o->steps, rc = 0;
	int k = o->grad_accum > 1 ? o->grad_accum : 1;
	struct lr_schedule_cfg sched = o->schedule;
	struct train_state rs = { 0 };
	struct train_ckpt ck = { .dir = o->checkpoint_dir, .save_every = o->save_every, .log = log,
				 .st = { .best_val_top1 = NAN, .val_top1 = NAN } };
	long start = 0;
	if (o->resume && (rc = train_state_read(o->resume, &rs)) < 0)
		goto out;
	start = rs.step;
	ck.st.best_val_top1 = o->resume ? rs.best_val_top1 : NAN;
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
#ifdef GP_HAVE_CUDA
	/* deterministic algorithms, chosen by cuDNN's heuristics: timing them could choose
	 * another one in the resuming process, which rounds differently */
	if (o->deterministic) {
		backend_cuda_set_conv_policy(net, 0, 1);
		backend_cuda_set_conv_heuristics(net, 1);
	}
#endif
	rc = net_setup(net, o->backend, GP_F32, o->precision);
	if (rc < 0)
		goto out;
	/* fp16's range needs dynamic loss scaling, as torch.amp.GradScaler gives it */
	if (o->precision == PREC_FP16)
		net_enable_loss_scaling(net);
	res->mem_after_setup = net->mem;
	if (data.ds) {
		if ((rc = train_data_start(o, mo.size, &data, net, &steps, res, rs.loader_batch)) < 0)
			goto out;
	} else {
		rc = train_synthetic_batch(o->batch * world, 3, mo.size, mo.size, classes, o->seed, &x,
					   &labels);
		if (rc == 0 && rank > 0) { /* this rank's rows of the batch of all ranks */
			size_t row = (size_t)3 * mo.size * mo.size;
			memmove(x, x + row * o->batch * rank, row * o->batch * sizeof(float));
			memmove(labels, labels + (size_t)o->batch * rank, o->batch * sizeof(int32_t));
		}
#ifdef GP_HAVE_CUDA
		/* An observed step uploads the batch again (its data stage): from page-locked
		 * memory, as the loader's batches come. From malloc's pages the copy ran at 9
		 * GB/s against 55, 18 of resnet18 bf16's 28.7 ms profiled step at batch 256
		 * against 10 ms a step in train (s27-5). */
		if (rc == 0 && ob && o->backend == BACKEND_CUDA) {
			if (data_pin(x, (size_t)o->batch * 3 * mo.size * mo.size * sizeof(float)) == 0)
				x_pinned = 1;
			else
				fprintf(stderr, "warning: %s; the data stage's copies run from pageable memory\n",
					gp_errmsg());
		}
#endif
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
	/* warmup and timing count this process's steps, from the resumed one */
	int run_steps = steps - (int)start;
	int warmup = o->warmup >= 0 ? o->warmup : (run_steps / 10 < 10 ? run_steps / 10 : 10);
	if (warmup >= run_steps)
		warmup = run_steps - 1;
	int every = o->log_every ? o->log_every : (steps + 19) / 20;
	if (o->keep_log && !(res->log = calloc((size_t)(steps / every + 3 + rs.n_log), sizeof(*res->log)))) {
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
	ckpt_describe(&ck.st, o, net, k, epoch_steps, steps);
	if (o->resume && (rc = ckpt_resume(o, net, &rs, &ck.st, res)) < 0)
		goto out;
	if (warmup < 0)
		warmup = 0;
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
		if (res->decode_probed) {
			char line[512];
			decode_probe_describe(&res->decode_probe, line, sizeof(line));
			fprintf(log, "%s\n", line);
		}
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
	if (log && o->resume)
		fprintf(log, "resumed from %s: epoch %d, step %ld of %d\n", o->resume, rs.epoch, start, steps);
	double t0 = gp_now_s(), t_timed = t0, val_timed_s = 0;
	struct epoch_acc ea = { .t0 = t0 };
	if (o->resume) { /* the epoch under way at the checkpoint goes on, as does the clock */
		ea = (struct epoch_acc){ .loss_sum = rs.acc[0], .correct = rs.acc[1], .images = rs.acc[2],
					 .trained = rs.acc[3], .reads = (int)rs.acc[4],
					 .t0 = t0 - rs.acc[5], .wait_ms0 = -rs.acc[6] };
		t_run0 = t0 - rs.acc[7];
	}
	struct cpu_mark cpu0, cpu1; /* CPU load over the timed steps, as their rate */
	cpu_mark_now(&cpu0);
	int done = steps; /* steps done when the loop ends: fewer when a signal stops it */
	for (int step = (int)start; step < steps; step++) {
		if (step == start + warmup) {
			if ((rc = net_wait(net)) < 0)
				goto out;
			if (obs && obs->timed && (rc = obs->timed(obs->user, 1)) < 0)
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
					pt.img_s, 1e3 * train_el / (step + 1 - start),
					train_el / (step + 1 - start) * (steps - step - 1));
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
			if (step >= start + warmup)
				val_timed_s += val_s;
			if (rc < 0)
				goto out;
			ea = (struct epoch_acc){ .t0 = gp_now_s(),
						 .wait_ms0 = data.wait_ms_total + data.copy_ms_total };
		}
		if ((step + 1) % epoch_steps == 0 && ck.dir) {
			const struct train_epoch_summary *e = res->n_history ? &res->history[res->n_history - 1] : NULL;
			ckpt_position(&ck, net, res, step + 1, k, &ea, &data, t_run0);
			if ((rc = train_checkpoint_epoch_end(&ck, net, (step + 1) / epoch_steps, step + 1,
							     e && e->has_val ? e->val_top1 : NAN)) < 0)
				goto out;
		}
		/* SIGINT or SIGTERM: this step is done; keep what it has and stop */
		if (interrupt_signal() && step + 1 < steps) {
			done = step + 1;
			res->interrupted = 1;
			if (log)
				fprintf(log, "interrupted by %s after step %d of %d\n",
					interrupt_signal() == SIGTERM ? "SIGTERM" : "SIGINT", done, steps);
			ckpt_position(&ck, net, res, done, k, &ea, &data, t_run0);
			if (ck.dir && (rc = train_checkpoint_interrupted(&ck, net)) < 0)
				goto out;
			break;
		}
	}
	double t_end = gp_now_s();
	cpu_mark_now(&cpu1);
	cpu_load_between(&cpu0, &cpu1, &res->cpu);
	if (obs && obs->timed && ((rc = net_wait(net)) < 0 || (rc = obs->timed(obs->user, 0)) < 0))
		goto out;
	if (done - start <= warmup) /* stopped in the warmup: time every step */
		t_timed = t0, warmup = 0;
	int timed = done - (int)start - warmup;
	steps = done;
	res->steps = steps;
	res->timed_steps = timed;
	res->total_s = t_end - t0;
	res->ms_per_step = 1e3 * (t_end - t_timed - val_timed_s) / timed;
	if (train_data_on(&data))
		res->data_wait_ms = (data.wait_ms_total + data.copy_ms_total) / (steps - start);
	if ((rc = gather_rank_times(o->dist, res)) < 0)
		goto out;
	res->buckets = net->buckets.n;
	if (world > 1 && (rc = net_dist_time_allreduce(net, 10, &res->allreduce_ms)) < 0)
		goto out;
	res->img_s = (double)o->batch * k * world * 1e3 / res->ms_per_step;
	res->img_s_per_rank = res->img_s / world;
	res->params = net->params_count;
	res->fwd_macs_per_image = net_total_macs(net) / o->batch;
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
			fprintf(log, "decode: on the GPU, nvJPEG %s backend: %ld hardware (%ld as "
				"the crop's region, %.0f%% of their pixels), %ld CUDA, "
				"%ld on the CPU (nvJPEG refused them), %ld by %d CPU threads beside "
				"it; per batch %.1f ms decoding (%.1f ms of it reading headers, %ld%% "
				"read ahead), %.1f ms of GPU time converting and augmenting (%ld images "
				"in one pass); %d decoders, %d batch buffers\n",
				gpu_loader_backend(data.gl), gs.hw_decoded, gs.region_decoded,
				gs.region_full_pixels > 0
					? 100 * gs.region_pixels / gs.region_full_pixels : 0,
				gs.cuda_decoded, gs.cpu_fallback, gs.cpu_shared, o->decode_threads,
				st.images ? gs.decode_ms * o->batch / st.images : 0,
				st.images ? gs.parse_ms * o->batch / st.images : 0,
				st.images ? 100 * gs.parsed_ahead / st.images : 0,
				st.images ? gs.augment_ms * o->batch / st.images : 0, gs.one_pass,
				gpu_loader_decoders(data.gl), gpu_loader_outputs(data.gl));
		res->images = st.images;
		res->skipped_corrupt = st.skipped_corrupt;
		res->copy_ms = data.copy_ms_total / (steps - start);
		res->data_wait_pct = res->total_s > res->val_s ? 100 * res->data_wait_ms * (steps - start) /
							(1e3 * (res->total_s - res->val_s)) : 0;
		if (log)
			fprintf(log, "data: %.2f ms per step waiting for batches (%.1f%% of step time, "
				"copy in %.2f ms), %ld corrupt images skipped\n", res->data_wait_ms,
				res->data_wait_pct, res->copy_ms, res->skipped_corrupt);
	}
	if (res->interrupted) {
		if (ck.dir)
			rc = gp_error(GP_EINTR, "interrupted after step %d; resume with --resume %s/last", steps,
				      ck.dir);
		else
			rc = gp_error(GP_EINTR, "interrupted after step %d", steps);
		goto out;
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
	train_data_close(&data, net);
	train_state_free(&rs);
#ifdef GP_HAVE_CUDA
	if (x_pinned)
		data_unpin(x);
#endif
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
