/* gpuperf maxbatch: the largest batch that completes one full training step
 * (forward, loss, backward, SGD), found in one process: double from --start until a
 * step runs out of memory, then bisect between the last success and the first
 * failure. Out of memory is an ordinary error here: the trial records it and the
 * search goes on. One net is built once and re-planned per batch, so a trial costs a
 * set-up, one step and a teardown. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/train_json.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "gpu/nvml.h"
#include "backend/backend.h"
#include "nn/models.h"
#include "train/trainer.h"
#ifdef GP_HAVE_CUDA
#include "ops/cuda/device.h"
#endif
#include "report/plots.h"
#include "report/result.h"
#include "report/table.h"

/* Doubling gives up here: a step this large that still fits means no cap works. */
#define MAXBATCH_LARGEST (1 << 22)
/* Doubling and bisection up to MAXBATCH_LARGEST take at most 2 * 23 trials. */
#define MAXBATCH_TRIALS 64
/* Trials of several steps after the search: stepping the largest batch down, then
 * closing in on the recommended one. */
#define MAXBATCH_CONFIRM_TRIES 8
#define MAXBATCH_CONFIRMS (2 * MAXBATCH_CONFIRM_TRIES)
/* Distinct synthetic images; larger batches repeat them (content does not matter
 * for memory or speed, and generating gigabytes of normals would). */
#define MAXBATCH_UNIQUE_IMAGES 16

struct trial {
	int batch, ok, steps;
	double predicted_mib, peak_alloc_mib, process_mib, step_ms;
	char error[256];
};

struct search {
	struct net *net;
	enum backend_kind backend;
	enum precision prec;
	int nvml_ok;
	size_t workspace_bytes; /* largest cuDNN workspace measured so far (CUDA) */
	float *seed_x;          /* MAXBATCH_UNIQUE_IMAGES images and their labels */
	int32_t *seed_labels;
	float *x, *logits;      /* host batch, grown as batches grow */
	int32_t *labels;
	int buf_batch;
	struct trial trials[MAXBATCH_TRIALS];
	int n_trials;
	struct trial confirms[MAXBATCH_CONFIRMS]; /* several steps each, after the search */
	const char *confirm_purpose[MAXBATCH_CONFIRMS];
	int n_confirms;
	int recompute, measure_algos;
	int peak_is_process;    /* compare process memory with the capacity, not the peak */
};

static size_t image_floats(const struct net *net)
{
	return (size_t)net->in_c * net->in_h * net->in_w;
}

/* Host input, labels and logits for batch, tiled from the seed images. */
static int host_batch_grow(struct search *s, int batch)
{
	if (batch <= s->buf_batch)
		return 0;
	size_t img = image_floats(s->net);
	float *x = realloc(s->x, (size_t)batch * img * sizeof(float));
	if (x)
		s->x = x;
	int32_t *labels = realloc(s->labels, (size_t)batch * sizeof(int32_t));
	if (labels)
		s->labels = labels;
	float *logits = realloc(s->logits, (size_t)batch * s->net->classes * sizeof(float));
	if (logits)
		s->logits = logits;
	if (!x || !labels || !logits)
		return gp_error(GP_ENOMEM, "cannot allocate a host batch of %d images", batch);
	for (int i = s->buf_batch; i < batch; i++) {
		int k = i % MAXBATCH_UNIQUE_IMAGES;
		memcpy(s->x + (size_t)i * img, s->seed_x + (size_t)k * img, img * sizeof(float));
		s->labels[i] = s->seed_labels[k];
	}
	s->buf_batch = batch;
	return 0;
}

static int is_oom(const struct search *s, int rc)
{
	return rc == GP_EDEVOOM || (s->backend == BACKEND_CPU && rc == GP_ENOMEM);
}

/* The process's memory while the net is set up: nvidia-smi's number on the GPU (the
 * device's used memory when NVML is missing), the resident set on the CPU. */
static double process_mib(const struct search *s)
{
	size_t bytes = 0;
	if (s->backend == BACKEND_CPU) {
		long pages_total = 0, pages_rss = 0;
		FILE *f = fopen("/proc/self/statm", "r");
		if (f) {
			if (fscanf(f, "%ld %ld", &pages_total, &pages_rss) != 2)
				pages_rss = 0;
			fclose(f);
		}
		return (double)pages_rss * sysconf(_SC_PAGESIZE) / GP_MIB;
	}
	if (s->nvml_ok && train_process_gpu_mem(&bytes, NULL) == 0)
		return bytes / GP_MIB;
	gp_error_clear();
#ifdef GP_HAVE_CUDA
	size_t free_b = 0, total_b = 0;
	if (cuda_mem_info(&free_b, &total_b) == 0)
		return (total_b - free_b) / GP_MIB;
	gp_error_clear();
#endif
	return 0;
}

/* steps training steps at batch, from set-up to teardown. Running out of memory is
 * recorded in the trial; anything else is returned. Afterwards the net holds nothing. */
static int trial_run(struct search *s, int batch, int steps, struct trial *t)
{
	static const struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	struct net *net = s->net;
	size_t predicted = 0;
	double loss = 0;
	memset(t, 0, sizeof(*t));
	t->batch = batch;
	t->steps = steps;
	GP_TRY(net_set_batch(net, batch));
	GP_TRY(train_plan_total(net, s->backend, s->workspace_bytes, &predicted));
	t->predicted_mib = predicted / GP_MIB;
	GP_TRY(host_batch_grow(s, batch));

	mem_stats_reset_peak(&net->mem);
	int rc = net_setup(net, s->backend, GP_F32, s->prec);
	if (rc == 0)
		rc = net_set_batch_data(net, s->x, s->labels);
	double t0 = gp_now_s();
	/* Reading the logits back after the SGD step waits for the whole step. */
	for (int i = 0; i < steps && rc == 0; i++)
		if ((rc = net_forward(net, 1)) == 0 && (rc = net_loss(net, &loss, NULL)) == 0 &&
		    (rc = net_backward(net)) == 0 && (rc = net_sgd_step(net, &sgd)) == 0)
			rc = net_logits_to_host(net, s->logits);
	if (rc == 0) {
		t->step_ms = 1e3 * (gp_now_s() - t0) / steps;
		t->peak_alloc_mib = net->mem.total_peak_bytes / GP_MIB;
		t->process_mib = process_mib(s);
		if (s->backend == BACKEND_CUDA && net->mem.cur_bytes[MEM_WORKSPACE] > s->workspace_bytes)
			s->workspace_bytes = net->mem.cur_bytes[MEM_WORKSPACE];
		t->ok = 1;
	}
	net_teardown(net);
	if (net->mem.total_bytes != 0)
		return gp_error(GP_EDEVICE, "batch %d: %zu bytes still held after teardown", batch,
				net->mem.total_bytes);
	mem_stats_reset_peak(&net->mem);
	if (rc < 0 && !is_oom(s, rc))
		return gp_error_wrap(rc, "batch %d", batch);
	if (rc < 0) {
		snprintf(t->error, sizeof(t->error), "%s", gp_errmsg());
		gp_error_clear();
	}
	return 0;
}

static int search_try(struct search *s, int batch, int *ok)
{
	if (s->n_trials == MAXBATCH_TRIALS)
		return gp_error(GP_EINVAL, "more than %d trials", MAXBATCH_TRIALS);
	struct trial *t = &s->trials[s->n_trials];
	GP_TRY(trial_run(s, batch, 1, t));
	s->n_trials++;
	if (t->ok)
		printf("batch %6d  ok    peak %9.1f MiB  process %9.1f MiB  step %8.1f ms\n", batch,
		       t->peak_alloc_mib, t->process_mib, t->step_ms);
	else
		printf("batch %6d  OOM   %s\n", batch, t->error);
	fflush(stdout);
	*ok = t->ok;
	return 0;
}

/* Double from start until a step fails, then bisect to the largest that trains;
 * *max_batch is 0 when even batch 1 does not fit. */
static int search_run(struct search *s, int start, int *max_batch)
{
	int lo = 0, hi = 0, ok;
	for (int b = start; !hi; b *= 2) {
		GP_TRY(search_try(s, b, &ok));
		if (!ok)
			hi = b;
		else if (b > MAXBATCH_LARGEST / 2)
			return gp_error(GP_EINVAL, "batch %d still trains; give a --mem-limit-mib", b);
		else
			lo = b;
	}
	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2;
		GP_TRY(search_try(s, mid, &ok));
		if (ok)
			lo = mid;
		else
			hi = mid;
	}
	*max_batch = lo;
	return 0;
}

/* The memory a trial holds against the capacity: the engine's peak where the cap
 * counts the engine's bytes (the CPU, --mem-limit-mib), else nvidia-smi's process
 * memory, which adds the CUDA context, library code and handles. */
static double trial_used_mib(const struct search *s, const struct trial *t)
{
	if (s->peak_is_process && t->process_mib > t->peak_alloc_mib)
		return t->process_mib;
	return t->peak_alloc_mib;
}

/* What a user can use: the largest batch that ran several steps, and the largest
 * that keeps margin_mib of the capacity free. */
struct answer {
	int steps;              /* steps per confirmation; 0: none */
	int largest, confirmed;
	double largest_mib;
	int recommended, rec_confirmed;
	double recommended_mib, capacity_mib, margin_pct, margin_mib, target_mib;
};

static int confirm_try(struct search *s, int batch, int steps, const char *purpose,
		       struct trial **out)
{
	if (s->n_confirms == MAXBATCH_CONFIRMS)
		return gp_error(GP_EINVAL, "more than %d confirmation trials", MAXBATCH_CONFIRMS);
	struct trial *t = &s->confirms[s->n_confirms];
	GP_TRY(trial_run(s, batch, steps, t));
	s->confirm_purpose[s->n_confirms++] = purpose;
	if (t->ok)
		printf("batch %6d  ok    peak %9.1f MiB  process %9.1f MiB  step %8.1f ms  (%d steps, %s)\n",
		       batch, t->peak_alloc_mib, t->process_mib, t->step_ms, steps, purpose);
	else
		printf("batch %6d  OOM   within %d steps (%s): %s\n", batch, steps, purpose, t->error);
	fflush(stdout);
	*out = t;
	return 0;
}

/* A batch that fits one step can still run out later (allocations that grow after
 * the first step, fragmentation): run a.steps steps at the answer, stepping down by
 * about 3% while that runs out of memory. */
static int confirm_largest(struct search *s, int max_batch, struct answer *a)
{
	a->largest = max_batch;
	for (int i = 0; i < s->n_trials; i++)
		if (s->trials[i].ok && s->trials[i].batch == max_batch)
			a->largest_mib = trial_used_mib(s, &s->trials[i]);
	if (a->steps == 0 || max_batch == 0)
		return 0;
	for (int i = 0, b = max_batch; i < MAXBATCH_CONFIRM_TRIES && b > 0; i++) {
		struct trial *t;
		GP_TRY(confirm_try(s, b, a->steps, "largest", &t));
		if (t->ok) {
			a->largest = b;
			a->confirmed = 1;
			a->largest_mib = trial_used_mib(s, t);
			return 0;
		}
		int down = b - (b / 32 > 1 ? b / 32 : 1);
		printf("batch %d ran out of memory within %d steps: stepping down to %d\n", b, a->steps,
		       down);
		b = down;
	}
	printf("no batch held for %d steps after %d tries: the largest batch %d is not confirmed\n",
	       a->steps, MAXBATCH_CONFIRM_TRIES, max_batch);
	return 0;
}

/* The largest measured batch below hi (0: any) that stays under the target, from
 * the search and from the confirmations that held. */
static int bracket_low(const struct search *s, const struct answer *a, int hi, double *mib)
{
	int lo = 0;
	for (int k = 0; k < s->n_trials + s->n_confirms; k++) {
		const struct trial *t = k < s->n_trials ? &s->trials[k] : &s->confirms[k - s->n_trials];
		double used = trial_used_mib(s, t);
		if (t->ok && (hi == 0 || t->batch < hi) && used <= a->target_mib && t->batch > lo) {
			lo = t->batch;
			*mib = used;
		}
	}
	return lo;
}

/* The recommended batch: the largest whose measured memory stays under capacity less
 * the margin. Memory grows about linearly with the batch, so the guess is the
 * straight line between the measured batches on either side of the target; a trial
 * of a.steps steps confirms it, and one over the target or out of memory becomes the
 * upper side of the next guess. */
static int recommend(struct search *s, struct answer *a)
{
	if (a->largest > 0 && a->largest_mib <= a->target_mib) {
		a->recommended = a->largest;
		a->rec_confirmed = a->confirmed;
		a->recommended_mib = a->largest_mib;
		return 0;
	}
	/* the smallest measured batch above the target: the largest batch's own trial
	 * at least */
	int hi = 0;
	double hi_mib = 0, lo_mib = 0;
	for (int k = 0; k < s->n_trials + s->n_confirms; k++) {
		const struct trial *t = k < s->n_trials ? &s->trials[k] : &s->confirms[k - s->n_trials];
		double used = trial_used_mib(s, t);
		if (t->ok && used > a->target_mib && (hi == 0 || t->batch < hi)) {
			hi = t->batch;
			hi_mib = used;
		}
	}
	if (hi == 0)
		return 0;
	int lo = bracket_low(s, a, hi, &lo_mib);
	for (int i = 0; i < MAXBATCH_CONFIRM_TRIES && lo > 0; i++) {
		int b = lo + (int)((a->target_mib - lo_mib) * (hi - lo) / (hi_mib - lo_mib));
		b = b < lo ? lo : b >= hi ? hi - 1 : b;
		if (a->steps == 0) {
			a->recommended = b;
			a->recommended_mib = lo_mib + (hi_mib - lo_mib) * (b - lo) / (hi - lo);
			return 0;
		}
		struct trial *t;
		GP_TRY(confirm_try(s, b, a->steps, "recommended", &t));
		if (t->ok && trial_used_mib(s, t) <= a->target_mib) {
			a->recommended = b;
			a->rec_confirmed = 1;
			a->recommended_mib = trial_used_mib(s, t);
			return 0;
		}
		hi = b;
		hi_mib = t->ok ? trial_used_mib(s, t) : a->capacity_mib;
		if (hi_mib <= a->target_mib)
			hi_mib = a->capacity_mib;
		lo = bracket_low(s, a, hi, &lo_mib);
	}
	/* tries spent: the last batch measured under the target, for one step */
	a->recommended = lo;
	a->recommended_mib = lo ? lo_mib : 0;
	return 0;
}

/* The largest batch whose planned bytes fit in budget, by the same doubling and
 * bisection on the plan alone (the plan grows with the batch); nothing is allocated. */
static int predict_max_batch(struct search *s, size_t budget, int *out)
{
	int lo = 0, hi = 0;
	size_t bytes;
	for (int b = 1; !hi && b <= MAXBATCH_LARGEST; b *= 2) {
		GP_TRY(net_set_batch(s->net, b));
		GP_TRY(train_plan_total(s->net, s->backend, s->workspace_bytes, &bytes));
		if (bytes > budget)
			hi = b;
		else
			lo = b;
	}
	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2;
		GP_TRY(net_set_batch(s->net, mid));
		GP_TRY(train_plan_total(s->net, s->backend, s->workspace_bytes, &bytes));
		if (bytes > budget)
			hi = mid;
		else
			lo = mid;
	}
	*out = lo;
	return 0;
}

static json_t *trial_json(const struct trial *t)
{
	if (t->ok)
		return json_pack("{s:i, s:b, s:o, s:o, s:o, s:o}", "batch", t->batch, "ok", 1,
				 "peak_alloc_mib", result_real(t->peak_alloc_mib), "process_mib", result_real(t->process_mib),
				 "predicted_mib", result_real(t->predicted_mib), "step_ms", result_real(t->step_ms));
	return json_pack("{s:i, s:b, s:o, s:s}", "batch", t->batch, "ok", 0, "predicted_mib",
			 result_real(t->predicted_mib), "error", t->error);
}

static int trials_table(const struct search *s, struct table *t)
{
	static const char *cols[] = { "batch", "result", "predicted MiB", "peak alloc MiB",
				      "process MiB", "step ms" };
	for (int c = 0; c < 6; c++)
		GP_TRY(table_add_col(t, cols[c], c == 1 ? TABLE_LEFT : TABLE_RIGHT));
	for (int i = 0; i < s->n_trials; i++) {
		const struct trial *tr = &s->trials[i];
		if (tr->ok)
			GP_TRY(table_add_row(t, "%d\tok\t%.1f\t%.1f\t%.1f\t%.1f", tr->batch,
					     tr->predicted_mib, tr->peak_alloc_mib, tr->process_mib,
					     tr->step_ms));
		else
			GP_TRY(table_add_row(t, "%d\tOOM\t%.1f\t-\t-\t-", tr->batch, tr->predicted_mib));
	}
	return 0;
}

/* The result in the layout of docs/results.md ("maxbatch measurements"). */
static json_t *search_result(const struct search *s, int argc, char **argv, const char *model,
			     int size, int start, double capacity_mib, size_t limit_bytes,
			     int max_batch, int predicted, double search_s, const struct answer *a)
{
	json_t *res = result_new("maxbatch", argc, argv);
	json_t *trials = json_array(), *confirms = json_array(), *answer = NULL;
	if (!res || !trials || !confirms)
		goto fail;
	for (int i = 0; i < s->n_trials; i++)
		if (json_array_append_new(trials, trial_json(&s->trials[i])) < 0)
			goto fail;
	for (int i = 0; i < s->n_confirms; i++) {
		json_t *c = trial_json(&s->confirms[i]);
		if (!c || json_object_set_new(c, "steps", json_integer(s->confirms[i].steps)) < 0 ||
		    json_object_set_new(c, "purpose", json_string(s->confirm_purpose[i])) < 0 ||
		    json_array_append_new(confirms, c) < 0)
			goto fail;
	}
	const char *prec = train_precision_name(s->prec);
	json_t *settings = json_pack("{s:s, s:s, s:i, s:i, s:s, s:o, s:s, s:b, s:s}", "model", model,
		"precision", prec, "image_size", size, "start", start,
		"device", train_device_name(s->backend),
		"mem_limit_mib", limit_bytes ? result_real(limit_bytes / GP_MIB) : json_null(),
		"search", "double from start, then bisect to the exact batch",
		"recompute", s->recompute, "conv_algorithms", s->measure_algos ? "measured" : "heuristic");
	json_t *m = json_pack("{s:s, s:s, s:s, s:o, s:O, s:i, s:i, s:o}", "model", model,
		"precision", prec, "device", train_device_name(s->backend),
		"capacity_mib", result_real(capacity_mib), "trials", trials, "max_batch", max_batch,
		"predicted_max_batch", predicted, "search_s", result_real(search_s));
	answer = json_pack("{s:i, s:b, s:o, s:i, s:O, s:i, s:b, s:o, s:o, s:o, s:s}",
		"largest_batch", a->largest, "confirmed", a->confirmed,
		"largest_mib", a->largest_mib > 0 ? result_real(a->largest_mib) : json_null(),
		"confirm_steps", a->steps, "confirmations", confirms,
		"recommended_batch", a->recommended, "recommended_confirmed", a->rec_confirmed,
		"recommended_mib", a->recommended_mib > 0 ? result_real(a->recommended_mib) : json_null(),
		"margin_pct", result_real(a->margin_pct), "margin_mib", result_real(a->margin_mib),
		"memory_compared", s->peak_is_process ? "process_mib" : "peak_alloc_mib");
	if (!settings || !m || !answer || json_object_update(m, answer) < 0 ||
	    json_object_set_new(res, "settings", settings) < 0 ||
	    json_object_set_new(res, "measurements", m) < 0)
		goto fail;
	json_decref(answer);
	json_decref(trials);
	json_decref(confirms);
	return res;
fail:
	json_decref(answer);
	json_decref(trials);
	json_decref(confirms);
	json_decref(res);
	return NULL;
}

/* The two answers side by side: the largest batch and the recommended one. */
static int answer_print(const struct answer *a, int process)
{
	struct table t;
	int rc = 0;
	table_init(&t);
	static const char *cols[] = { "answer", "batch", "steps", "result", "MiB", "of capacity" };
	for (int c = 0; c < 6 && rc == 0; c++)
		rc = table_add_col(&t, cols[c], c == 0 || c == 3 ? TABLE_LEFT : TABLE_RIGHT);
	const char *held = a->steps ? "held" : "one step";
	if (rc == 0)
		rc = table_add_row(&t, "largest\t%d\t%d\t%s\t%.1f\t%.1f%%", a->largest,
				   a->confirmed ? a->steps : 1, a->confirmed ? held : "not confirmed",
				   a->largest_mib, 100 * a->largest_mib / a->capacity_mib);
	if (rc == 0 && a->recommended > 0)
		rc = table_add_row(&t, "recommended (%g%% margin)\t%d\t%d\t%s\t%.1f\t%.1f%%",
				   a->margin_pct, a->recommended, a->rec_confirmed ? a->steps : 1,
				   a->rec_confirmed ? held : a->steps ? "not confirmed" : "interpolated",
				   a->recommended_mib, 100 * a->recommended_mib / a->capacity_mib);
	if (rc == 0) {
		printf("\n");
		table_print(&t, stdout);
		printf("MiB: %s, against %.0f MiB\n", process ? "process memory (nvidia-smi)"
		       : "peak allocated", a->capacity_mib);
		if (a->recommended > 0)
			printf("recommended batch %d: %.1f of %.0f MiB, %.1f MiB free (margin asked: "
			       "%g%%, %.1f MiB)\n", a->recommended, a->recommended_mib, a->capacity_mib,
			       a->capacity_mib - a->recommended_mib, a->margin_pct, a->margin_mib);
		else
			printf("no measured batch keeps a %g%% margin (%.0f MiB)\n", a->margin_pct,
			       a->margin_mib);
	}
	table_free(&t);
	return rc;
}

static void search_free(struct search *s)
{
	free(s->seed_x);
	free(s->seed_labels);
	free(s->x);
	free(s->labels);
	free(s->logits);
	net_free(s->net);
}

/* Free device memory, to show that trials give back what they take; 0 on the CPU. */
static size_t device_free_bytes(enum backend_kind backend)
{
#ifdef GP_HAVE_CUDA
	size_t free_b = 0, total_b = 0;
	if (backend == BACKEND_CUDA && cuda_mem_info(&free_b, &total_b) < 0)
		gp_error_clear();
	return free_b;
#else
	(void)backend;
	return 0;
#endif
}

/* Device memory: capacity and what is free for the prediction. The CPU has no
 * device; its cap is the limit, or the memory the host has available, so that the
 * search ends in a clean out-of-memory instead of swapping. */
static int budget_get(enum backend_kind backend, size_t limit, size_t *budget, size_t *capacity)
{
	if (backend == BACKEND_CUDA) {
#ifdef GP_HAVE_CUDA
		size_t free_b, total_b;
		GP_TRY(cuda_mem_info(&free_b, &total_b));
		*budget = limit && limit < free_b ? limit : free_b;
		*capacity = limit ? limit : total_b;
		return 0;
#else
		return gp_error(GP_ENODEV, "this gpuperf was built without CUDA");
#endif
	}
	if (!limit) {
		limit = (size_t)sysconf(_SC_AVPHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
		printf("note: no --mem-limit-mib on the CPU: capped at the available host memory, %.0f MiB\n",
		       limit / GP_MIB);
	}
	*budget = *capacity = limit;
	return 0;
}

int cmd_maxbatch(int argc, char **argv)
{
	const char *model = "mobilenet_v2", *device = "auto", *precision = "fp32";
	const char *out_dir = NULL;
	int start = 8, size = 0, classes = 1000, limit_mib = 0, csv = 0, help = 0, recompute = 0;
	int overwrite = 0;
	int no_recompute = 0, measure_algos = 0, confirm_steps = 5;
	double margin_pct = 5;
	struct opt opts[] = {
		OPT_MODEL(&model, "(mobilenet_v2)"),
		{ "start", OPT_INT, &start, "first batch tried; doubled until out of memory (8)", 1, ARGS_MAX_BATCH },
		OPT_PRECISION(&precision, "(fp32; GPU math mode, fp16/bf16: mixed precision)"),
		OPT_SIZE(&size),
		OPT_CLASSES(&classes, "output classes (1000)"),
		OPT_DEVICE(&device),
		{ "mem-limit-mib", OPT_INT, &limit_mib, "fail allocations past this many MiB, as if the memory were this small", 1, 16777216 },
		{ "margin", OPT_DOUBLE, &margin_pct, "percent of the memory the recommended batch leaves free (5)", 0, 0 },
		{ "confirm-steps", OPT_INT, &confirm_steps, "steps run at the answer and at the recommended batch to confirm them; 0 skips (5)", 0, 1000 },
		OPT_OUT(&out_dir, "maxbatch.json and the chart", "maxbatch"),
		OPT_OVERWRITE(&overwrite, "maxbatch.json"),
		OPT_CSV(&csv, "the trials table"),
		{ "recompute", OPT_FLAG, &recompute, "recompute BN+ReLU outputs in backward (the default)", 0 },
		{ "no-recompute", OPT_FLAG, &no_recompute, "keep BN+ReLU outputs for backward (as PyTorch does)", 0 },
		{ "measure-algos", OPT_FLAG, &measure_algos, "time cuDNN's algorithms at every batch (slower search) instead of its heuristics", 0 },
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf maxbatch [--model NAME] [--start B] [--size S] [--device D] "
				"[--mem-limit-mib N] [--margin PCT] [--confirm-steps N] [--no-recompute] "
				"[--measure-algos] [--out DIR] [--csv]", opts);
		return 0;
	}
	if (!(margin_pct >= 0 && margin_pct < 100))
		return gp_error(GP_EINVAL, "--margin must be a percent from 0 to below 100 (got %g)", margin_pct);
	if (recompute && no_recompute)
		return gp_error(GP_EINVAL, "--recompute and --no-recompute contradict each other");
	/* The largest batch the engine trains: by default with its memory savings on
	 * (recomputing BN+ReLU outputs gives the same gradients, bit for bit). */
	recompute = !no_recompute;
	struct search s = { 0 };
	struct table table;
	json_t *res = NULL;
	char path[4096];
	size_t limit = (size_t)limit_mib << 20, budget = 0, capacity = 0;
	int predicted = 0, max_batch = 0, gpu_dev = 0, rc;
	GP_TRY(model_name_check(model));
	GP_TRY(train_pick_device(device, &s.backend, 0));
	GP_TRY(train_parse_precision(precision, &s.prec));
	struct model_opts mo = model_defaults(model);
	mo.batch = start;
	mo.classes = classes;
	if (size)
		mo.size = size;
	GP_TRY(model_build(model, &mo, &s.net));
	char run_dir[4096];
	if ((rc = result_dir_prepare("maxbatch", "maxbatch", out_dir, overwrite, run_dir,
				     sizeof(run_dir))) < 0) {
		net_free(s.net);
		return rc;
	}
	out_dir = run_dir;
	s.net->recompute = recompute;
	s.recompute = recompute;
	s.measure_algos = measure_algos;
#ifdef GP_HAVE_CUDA
	if (s.backend == BACKEND_CUDA)
		backend_cuda_set_conv_heuristics(s.net, !measure_algos);
#endif
	table_init(&table);
	if (s.backend == BACKEND_CUDA) {
		s.nvml_ok = nvml_open() == 0;
		if (!s.nvml_ok) {
			fprintf(stderr, "note: NVML not available (%s): process memory is the device's used memory\n",
				gp_errmsg());
			gp_error_clear();
		}
	}
	if ((rc = train_synthetic_batch(MAXBATCH_UNIQUE_IMAGES, 3, mo.size, mo.size, classes, 0,
					&s.seed_x, &s.seed_labels)) < 0 ||
	    (rc = budget_get(s.backend, limit, &budget, &capacity)) < 0)
		goto cleanup;
	s.net->mem_limit_bytes = s.backend == BACKEND_CPU ? capacity : limit;
	s.peak_is_process = s.backend == BACKEND_CUDA && !limit;

	if ((rc = predict_max_batch(&s, budget, &predicted)) < 0)
		goto cleanup;
	printf("%s, %dx%d, %s on %s: the memory plan predicts a largest batch of %d "
	       "(%.0f MiB available%s)\n", model, mo.size, mo.size, train_precision_name(s.prec),
	       train_device_name(s.backend), predicted, budget / GP_MIB,
	       s.backend == BACKEND_CUDA ? ", cuDNN workspace measured at set-up, not counted" : "");

	size_t free_before = device_free_bytes(s.backend);
	double t0 = gp_now_s();
	if ((rc = search_run(&s, start, &max_batch)) < 0)
		goto cleanup;
	double search_s = gp_now_s() - t0;
	struct answer ans = { .steps = confirm_steps, .capacity_mib = capacity / GP_MIB,
			      .margin_pct = margin_pct };
	ans.margin_mib = ans.capacity_mib * margin_pct / 100;
	ans.target_mib = ans.capacity_mib - ans.margin_mib;
	if ((rc = confirm_largest(&s, max_batch, &ans)) < 0 ||
	    (max_batch > 0 && (rc = recommend(&s, &ans)) < 0))
		goto cleanup;
	if (s.backend == BACKEND_CUDA)
		printf("device memory free: %.0f MiB before the search, %.0f MiB after (the context keeps "
		       "its library handles and a %.0f MiB cuDNN workspace)\n", free_before / GP_MIB,
		       device_free_bytes(s.backend) / GP_MIB, s.workspace_bytes / GP_MIB);
	if (s.nvml_ok && train_process_gpu_mem(&free_before, &gpu_dev) < 0)
		gp_error_clear(); /* the GPU we ran on is not known: NVML's first */

	printf("\n");
	if ((rc = trials_table(&s, &table)) < 0)
		goto cleanup;
	table_print(&table, stdout);
	printf("\nlargest batch %d (search %.1f s, %d trials)\n", max_batch, search_s, s.n_trials);
	if (max_batch > 0)
		printf("prediction %d vs found %d: off by %+d batches (%+.1f%%)\n", predicted,
		       max_batch, predicted - max_batch, 100.0 * (predicted - max_batch) / max_batch);
	if (max_batch > 0 && (rc = answer_print(&ans, s.peak_is_process)) < 0)
		goto cleanup;
	/* The answer holds for the memory savings the search used: without --recompute,
	 * train at 2,608 (mobilenet_v2, H100) asks for 134 GB of activations. */
	char train_cmd[512] = "";
	int train_batch = ans.recommended > 0 ? ans.recommended : max_batch;
	if (train_batch > 0) {
		snprintf(train_cmd, sizeof(train_cmd), "gpuperf train --model %s --device %s "
			 "--precision %s --size %d --classes %d --batch %d%s", model,
			 s.backend == BACKEND_CUDA ? "cuda" : "cpu", train_precision_name(s.prec),
			 mo.size, classes, train_batch, recompute ? " --recompute" : "");
		printf("train at it with the same memory savings: %s\n", train_cmd);
	}

	res = search_result(&s, argc, argv, model, mo.size, start, capacity / GP_MIB, limit,
			    max_batch, predicted, search_s, &ans);
	if (!res) {
		rc = gp_error(GP_ENOMEM, "out of memory building the maxbatch result");
		goto cleanup;
	}
	if (train_cmd[0] && json_object_set_new(json_object_get(res, "measurements"), "train_command",
						json_string(train_cmd)) < 0) {
		rc = gp_error(GP_ENOMEM, "out of memory building the maxbatch result");
		goto cleanup;
	}
	json_t *gpu = train_gpu_json(s.backend, gpu_dev);
	if (gpu && (rc = result_set_gpu(res, gpu)) < 0)
		goto cleanup;
	if ((rc = result_write(res, out_dir, "maxbatch", path, sizeof(path))) < 0)
		goto cleanup;
	printf("wrote %s\n", path);
	if (csv) {
		if ((rc = table_write_csv_in(&table, out_dir, "maxbatch.csv", path, sizeof(path))) < 0)
			goto cleanup;
		printf("wrote %s\n", path);
	}
	if (max_batch == 0) {
		rc = gp_error(GP_EDEVOOM, "%s does not train even at batch 1 in %.0f MiB", model,
			      capacity / GP_MIB);
		goto cleanup;
	}
	if ((rc = plots_draw(res, out_dir)) < 0)
		goto cleanup;
	printf("wrote %s/%s\n", out_dir, plots_chart_name("maxbatch"));
cleanup:
	json_decref(res);
	table_free(&table);
	search_free(&s);
	if (s.nvml_ok)
		nvml_close();
	return rc;
}
