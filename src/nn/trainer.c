/* The training loop shared by train, compare and maxbatch: build a model, set it
 * up on a backend, train on a fixed synthetic batch, time it, report memory. */
#include "nn/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "gpu/devinfo.h"
#include "nn/checkpoint.h"
#include "nn/models.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int train_pick_device(const char *device, enum backend_kind *out, int quiet)
{
	struct gp_devinfo d;
	devinfo_query(&d);
	if (!device || !strcmp(device, "auto")) {
		*out = d.gpu_count > 0 ? BACKEND_CUDA : BACKEND_CPU;
		if (!d.gpu_count && !quiet)
			fprintf(stderr, "note: no GPU (%s); running on the CPU backend\n", d.note);
		return 0;
	}
	if (!strcmp(device, "cpu")) {
		*out = BACKEND_CPU;
		return 0;
	}
	if (!strcmp(device, "cuda")) {
		if (!d.gpu_count)
			return gp_error(GP_ENODEV, "--device cuda: %s", d.note);
		*out = BACKEND_CUDA;
		return 0;
	}
	return gp_error(GP_EINVAL, "--device must be cpu, cuda or auto (got '%s')", device);
}

int train_parse_precision(const char *s, enum precision *out)
{
	static const char *names[] = { "fp32", "tf32", "fp16", "bf16" };
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i])) {
			*out = (enum precision)i;
			return 0;
		}
	return gp_error(GP_EINVAL, "--precision must be fp32, tf32, fp16 or bf16 (got '%s')", s);
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

static const char *precision_name(enum precision p)
{
	static const char *names[] = { "fp32", "tf32", "fp16", "bf16" };
	return names[p];
}

static int observe_stage(const struct train_observer *ob, enum train_stage st, int begin)
{
	return ob ? ob->stage(ob->user, st, begin) : 0;
}

/* One training step. Without an observer it is exactly forward, loss, backward and
 * the optimizer; with one, each stage is announced and the batch is uploaded again
 * inside the data stage, the place where a data loader's batch (and the time the
 * step waited for it) comes in once --data/--workers feed the trainer. */
static int train_step(struct net *net, const struct sgd_args *sgd, const struct train_observer *ob,
		      const float *x, const int32_t *labels, double *loss, int *correct)
{
	int64_t data_wait_ns = 0; /* a loader's wait for its next batch goes here */
	if (ob) {
		GP_TRY(observe_stage(ob, TRAIN_STAGE_DATA, 1));
		GP_TRY(net_set_batch_data(net, x, labels));
		GP_TRY(observe_stage(ob, TRAIN_STAGE_DATA, 0));
	}
	GP_TRY(observe_stage(ob, TRAIN_STAGE_FORWARD, 1));
	GP_TRY(net_forward(net, 1));
	GP_TRY(net_loss(net, loss, correct));
	GP_TRY(observe_stage(ob, TRAIN_STAGE_FORWARD, 0));
	GP_TRY(observe_stage(ob, TRAIN_STAGE_BACKWARD, 1));
	GP_TRY(net_backward(net));
	GP_TRY(observe_stage(ob, TRAIN_STAGE_BACKWARD, 0));
	GP_TRY(observe_stage(ob, TRAIN_STAGE_OPTIMIZER, 1));
	GP_TRY(net_sgd_step(net, sgd));
	GP_TRY(observe_stage(ob, TRAIN_STAGE_OPTIMIZER, 0));
	return ob ? ob->step_end(ob->user, net, data_wait_ns) : 0;
}

int train_run(const struct train_opts *o, struct train_result *res, FILE *log)
{
	memset(res, 0, sizeof(*res));
	struct model_opts mo = model_defaults(o->model);
	mo.batch = o->batch;
	mo.classes = o->classes;
	mo.seed = o->seed;
	mo.dropout = o->dropout;
	if (o->size)
		mo.size = o->size;
	struct net *net = NULL;
	float *x = NULL;
	int32_t *labels = NULL;
	int rc = model_build(o->model, &mo, &net);
	if (rc < 0)
		return rc;
	if (o->load && (rc = checkpoint_load(net, o->load)) < 0)
		goto out;
	rc = net_setup(net, o->backend, GP_F32, o->precision);
	if (rc < 0)
		goto out;
	rc = train_synthetic_batch(o->batch, 3, mo.size, mo.size, o->classes, o->seed, &x, &labels);
	if (rc < 0)
		goto out;
	rc = net_set_batch_data(net, x, labels);
	if (rc < 0)
		goto out;
	int epoch_steps = o->epoch_steps > 0 ? o->epoch_steps : o->steps;
	int epochs = o->epochs > 0 ? o->epochs : 1;
	int total = epoch_steps * epochs;
	int warmup = o->warmup >= 0 ? o->warmup : (total / 10 < 10 ? total / 10 : 10);
	if (warmup >= total)
		warmup = total - 1;
	int every = o->log_every ? o->log_every : (total + 19) / 20;
	if (log)
		fprintf(log, "training %s on %s (%s), batch %d, %dx%d, %d steps, SGD lr %g momentum %g\n",
			o->model, o->backend == BACKEND_CUDA ? "cuda" : "cpu", precision_name(o->precision),
			o->batch, mo.size, mo.size, total, o->sgd.lr, o->sgd.momentum);
	const struct train_observer *ob = o->observer;
	double t0 = now_s(), t_timed = t0;
	for (int step = 0; step < total; step++) {
		if (step == warmup)
			t_timed = now_s();
		int want_loss = step == 0 || step == total - 1 || (step + 1) % every == 0;
		double loss = 0;
		int correct = 0;
		if (ob && (rc = ob->step_begin(ob->user, net, step / epoch_steps, step % epoch_steps,
					       step)) < 0)
			goto out;
		rc = train_step(net, &o->sgd, ob, x, labels, want_loss ? &loss : NULL,
				want_loss ? &correct : NULL);
		if (rc < 0)
			goto out;
		if (step == 0)
			res->first_loss = loss;
		if (want_loss) {
			res->last_loss = loss;
			double el = now_s() - t0;
			if (log) {
				fprintf(log, "step %5d/%d  loss %8.4f  acc %5.1f%%  %7.1f img/s  %6.1f ms/step  eta %5.1f s\n",
					step + 1, total, loss, 100.0 * correct / o->batch,
					(step + 1) * (double)o->batch / el, 1e3 * el / (step + 1),
					el / (step + 1) * (total - step - 1));
				fflush(log);
			}
		}
	}
	double t_end = now_s();
	int timed = total - warmup;
	res->steps = total;
	res->timed_steps = timed;
	res->total_s = t_end - t0;
	res->ms_per_step = 1e3 * (t_end - t_timed) / timed;
	res->img_s = o->batch * 1e3 / res->ms_per_step;
	res->params = net->params_count;
	res->plan = net->plan;
	res->mem = net->mem;
	if (log)
		fprintf(log, "done: %.1f img/s, %.2f ms/step over the last %d steps; loss %.4f -> %.4f\n",
			res->img_s, res->ms_per_step, timed, res->first_loss, res->last_loss);
	if (o->save) {
		if ((rc = net_sync_to_host(net)) < 0 || (rc = checkpoint_save(net, o->save)) < 0)
			goto out;
		if (log)
			fprintf(log, "saved %s\n", o->save);
	}
out:
	free(x);
	free(labels);
	net_free(net);
	return rc;
}

json_t *train_result_json(const struct train_opts *o, const struct train_result *r)
{
	json_t *mem = json_object();
	for (int c = 0; c < MEM_NCAT; c++)
		json_object_set_new(mem, mem_cat_name(c), json_integer((json_int_t)r->mem.peak_bytes[c]));
	return json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:o, s:I, s:I}",
		"model", o->model, "device", o->backend == BACKEND_CUDA ? "cuda" : "cpu",
		"precision", precision_name(o->precision), "batch", o->batch, "steps", r->steps,
		"ms_per_step", r->ms_per_step, "img_s", r->img_s, "total_s", r->total_s,
		"first_loss", r->first_loss, "last_loss", r->last_loss, "params", (json_int_t)r->params,
		"peak_bytes_by_category", mem, "peak_bytes", (json_int_t)r->mem.total_peak_bytes,
		"predicted_peak_bytes", (json_int_t)r->plan.total_bytes);
}
