/* gpuperf workers: train the same model on the same dataset once per data-loader
 * worker count while a background thread samples GPU utilization, and show how
 * the number of workers moves the data wait, the utilization and the throughput.
 * The result (docs/results.md, "workers") is written first; the table, the chart
 * and the recommendation are drawn from the same numbers. docs/workers.md. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/train_json.h"
#include "cmd/workers_rule.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "data/decode_probe.h"
#include "gpu/nvml.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/plots.h"
#include "report/result.h"
#include "report/table.h"

#define WORKERS_IDLE_PCT 10.0  /* a sample under this counts as idle (as the chart draws it) */
#define DRIVER_POLL_S 1.0      /* the driver keeps a short buffer: fetch it this often */

/* Utilization samples, t_s from the start of the run. */
struct util_series {
	double *t_s, *pct;
	int n, cap;
};

struct workers_run {
	int workers;
	int decode_gpu; /* made on the GPU (--decode gpu): workers are then the CPU
			 * threads that decode a share of each batch beside nvJPEG */
	struct train_result res;
	struct util_series sampler, driver;
	const struct util_series *util; /* the denser of the two, NULL without samples */
	const char *util_source;        /* "sampler" or "driver" */
	double mean_util, std_util, idle_share;
	/* GPM's means over the training steps (Hopper on): what the SMs, tensor cores and
	 * DRAM did, where utilization only says a kernel ran */
	struct nvml_gpm_metrics gpm;
	int has_gpm;
};

/* What the training observer needs while one worker count runs. */
struct workers_watch {
	struct workers_run *run;
	int nvml;        /* NVML is open and the run is on the GPU */
	int dev;         /* NVML index of the GPU the run uses */
	int batch;
	double interval_s;
	struct nvml_sampler *sampler;
	struct nvml_gpm *gpm; /* NULL where the GPU has no GPM */
	double t_start, t_end, t_polled;
	unsigned long long driver_ts_us;
	int driver_ok;   /* the driver's buffered samples are still worth asking for */
};

static int series_push(struct util_series *s, double t_s, double pct)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 256;
		double *t = realloc(s->t_s, cap * sizeof(double));
		if (!t)
			return gp_error(GP_ENOMEM, "no memory for %d utilization samples", cap);
		s->t_s = t;
		double *p = realloc(s->pct, cap * sizeof(double));
		if (!p)
			return gp_error(GP_ENOMEM, "no memory for %d utilization samples", cap);
		s->pct = p;
		s->cap = cap;
	}
	s->t_s[s->n] = t_s;
	s->pct[s->n++] = pct;
	return 0;
}

static void series_free(struct util_series *s)
{
	free(s->t_s);
	free(s->pct);
	memset(s, 0, sizeof(*s));
}

/* Fetch the driver's buffered samples that are newer than the last fetch and fall
 * inside the run. A driver without them is not an error: the sampler's series
 * then stands alone. */
static int watch_poll_driver(struct workers_watch *w)
{
	enum { CAP = 512 };
	double pct[CAP], t[CAP];
	int n = CAP;
	w->t_polled = gp_now_s();
	while (w->driver_ok && n == CAP) {
		if (nvml_util_samples(w->dev, &w->driver_ts_us, pct, t, CAP, &n) < 0) {
			gp_error_clear();
			w->driver_ok = 0;
			return 0;
		}
		for (int i = 0; i < n; i++)
			if (t[i] >= w->t_start && (!w->t_end || t[i] <= w->t_end))
				GP_TRY(series_push(&w->run->driver, t[i] - w->t_start, pct[i]));
	}
	return 0;
}

/* The net is set up and the loader started: find our GPU in NVML's numbering and
 * start sampling, so the series covers the training steps and nothing before. */
static int watch_after_setup(void *user, struct net *net)
{
	struct workers_watch *w = user;
	size_t bytes;
	if (!w->nvml)
		return 0;
	if (train_process_gpu_mem(&bytes, &w->dev) < 0) {
		gp_error_clear(); /* not found by pid (containers): NVML's first GPU */
		w->dev = 0;
	}
	w->t_start = gp_now_s();
	w->driver_ok = 1;
	GP_TRY(watch_poll_driver(w)); /* only advances the time stamp past older samples */
	/* Without the thread the driver's series may still do; training goes on. */
	if (nvml_sampler_start(&w->sampler, w->dev, w->interval_s) < 0) {
		fprintf(stderr, "note: no NVML sampler for %d workers: %s\n", w->run->workers,
			gp_errmsg());
		gp_error_clear();
		w->sampler = NULL;
	}
	/* GPM is a bonus: without it the table's GPM columns are left out. */
	if (nvml_gpm_open(w->dev, &w->gpm) < 0) {
		gp_error_clear();
		w->gpm = NULL;
	}
	return 0;
}

static int watch_after_step(void *user, struct net *net, int step, int steps, double elapsed_s)
{
	struct workers_watch *w = user;
	if (step == steps) {
		w->t_end = gp_now_s();
		if (w->gpm && nvml_gpm_read(w->gpm, &w->run->gpm) == 0)
			w->run->has_gpm = 1;
		gp_error_clear();
	}
	if (w->nvml && (step == steps || gp_now_s() - w->t_polled >= DRIVER_POLL_S))
		GP_TRY(watch_poll_driver(w));
	int quarter = steps / 4 > 0 ? steps / 4 : 1;
	if (step == steps || step % quarter == 0) {
		printf("%d %s: step %d/%d  %.0f img/s\n", w->run->workers,
		       w->run->decode_gpu ? "CPU threads beside nvJPEG" : "workers", step, steps,
		       elapsed_s > 0 ? step * (double)w->batch / elapsed_s : 0);
		fflush(stdout);
	}
	return 0;
}

/* Stop the sampler and keep its samples that fall inside the run. */
static int watch_stop_sampler(struct workers_watch *w)
{
	struct nvml_sample *s = NULL;
	int n = 0, rc;
	nvml_gpm_close(w->gpm);
	w->gpm = NULL;
	if (!w->sampler)
		return 0;
	if (nvml_sampler_stop(w->sampler, &s, &n) < 0) {
		fprintf(stderr, "note: the NVML sampler reported: %s\n", gp_errmsg());
		gp_error_clear();
	}
	w->sampler = NULL;
	for (int i = 0; i < n; i++)
		if (s[i].t_s >= w->t_start && s[i].t_s <= w->t_end &&
		    (rc = series_push(&w->run->sampler, s[i].t_s - w->t_start, s[i].util_gpu_pct)) < 0) {
			free(s);
			return rc;
		}
	free(s);
	return 0;
}

/* Keep the denser series and summarize it: mean, population standard deviation,
 * share of samples under the idle threshold. */
static void run_summarize(struct workers_run *r)
{
	const struct util_series *u = r->driver.n > r->sampler.n ? &r->driver : &r->sampler;
	if (u->n == 0)
		return;
	r->util = u;
	r->util_source = u == &r->driver ? "driver" : "sampler";
	double sum = 0, sq = 0;
	int idle = 0;
	for (int i = 0; i < u->n; i++) {
		sum += u->pct[i];
		idle += u->pct[i] < WORKERS_IDLE_PCT;
	}
	r->mean_util = sum / u->n;
	for (int i = 0; i < u->n; i++)
		sq += (u->pct[i] - r->mean_util) * (u->pct[i] - r->mean_util);
	r->std_util = sqrt(sq / u->n);
	r->idle_share = (double)idle / u->n;
}

int workers_recommend(const struct workers_row *r, int n, int *best_i)
{
	*best_i = 0;
	for (int i = 1; i < n; i++)
		if (r[i].img_s > r[*best_i].img_s)
			*best_i = i;
	const struct workers_row *b = &r[*best_i];
	unsigned char ok[ARGS_LIST_MAX];
	double cheapest = -1;
	for (int i = 0; i < n && i < ARGS_LIST_MAX; i++) {
		ok[i] = r[i].img_s >= WORKERS_NEAR_BEST * b->img_s &&
			(!r[i].util_ok || !b->util_ok ||
			 r[i].mean_util >= b->mean_util - WORKERS_UTIL_POINTS);
		if (ok[i] && r[i].cpu_cores >= 0 && (cheapest < 0 || r[i].cpu_cores < cheapest))
			cheapest = r[i].cpu_cores;
	}
	int rec = -1;
	for (int i = 0; i < n && i < ARGS_LIST_MAX; i++) {
		if (!ok[i] || (cheapest >= 0 && r[i].cpu_cores > WORKERS_CPU_SLACK * cheapest))
			continue;
		if (rec < 0 || r[i].workers < r[rec].workers)
			rec = i;
	}
	return rec >= 0 ? rec : *best_i;
}

static int recommend(const struct workers_run *runs, int n, int *best_i)
{
	struct workers_row rows[ARGS_LIST_MAX];
	for (int i = 0; i < n; i++)
		rows[i] = (struct workers_row){ runs[i].workers, runs[i].res.img_s,
						runs[i].util != NULL, runs[i].mean_util,
						runs[i].res.cpu.proc_cores };
	return workers_recommend(rows, n, best_i);
}

static json_t *real_or_null(int ok, double v)
{
	return ok ? result_real(v) : json_null();
}

static json_t *run_json(const struct workers_run *r)
{
	const struct train_result *t = &r->res;
	int ok = r->util != NULL;
	json_t *samples = json_array();
	for (int i = 0; ok && samples && i < r->util->n; i++)
		if (json_array_append_new(samples, json_pack("[o, o]", result_real(r->util->t_s[i]),
							     result_real(r->util->pct[i]))) < 0) {
			json_decref(samples);
			return NULL;
		}
	json_t *gpm = r->has_gpm
		? json_pack("{s:o, s:o, s:o, s:o}", "sm_activity_pct", result_real(r->gpm.sm_util_pct),
			    "sm_occupancy_pct", result_real(r->gpm.sm_occupancy_pct),
			    "tensor_activity_pct", result_real(r->gpm.tensor_util_pct),
			    "dram_bw_util_pct", result_real(r->gpm.dram_bw_util_pct))
		: json_null();
	return json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:i, s:o, "
			 "s:o, s:s, s:i}",
		"workers", r->workers, "gpm", gpm, "samples", samples,
		"mean_util", real_or_null(ok, r->mean_util), "std_util", real_or_null(ok, r->std_util),
		"idle_share", real_or_null(ok, r->idle_share), "total_s", result_real(t->total_s),
		"img_s", result_real(t->img_s), "data_wait_ms", result_real(t->data_wait_ms),
		"util_source", ok ? json_string(r->util_source) : json_null(),
		"data_wait_pct", result_real(t->data_wait_pct), "copy_ms", result_real(t->copy_ms),
		"skipped_corrupt", (json_int_t)t->skipped_corrupt, "steps", t->steps,
		"cpu_cores", result_real(t->cpu.proc_cores),
		"machine_cpu_pct", real_or_null(t->cpu.machine_pct >= 0, t->cpu.machine_pct),
		"decode", r->decode_gpu ? "gpu" : "cpu", "decode_threads",
		r->decode_gpu ? r->workers : 0);
}

static json_t *result_build(int argc, char **argv, const struct workers_run *runs, int n, int rec,
			    json_t *settings, json_t *gpu)
{
	json_t *res = result_new("workers", argc, argv), *arr = json_array();
	if (!res || !arr || !settings)
		goto fail;
	for (int i = 0; i < n; i++)
		if (json_array_append_new(arr, run_json(&runs[i])) < 0)
			goto fail;
	json_t *m = json_object_get(res, "measurements");
	if (json_object_set_new(m, "runs", arr) < 0)
		goto fail_arr_taken;
	if (json_object_set_new(m, "recommended_workers", json_integer(runs[rec].workers)) < 0 ||
	    json_object_set_new(res, "settings", settings) < 0)
		goto fail_settings_taken;
	if (gpu && result_set_gpu(res, gpu) < 0)
		goto fail_gpu_taken;
	return res;
fail:
	json_decref(arr);
fail_arr_taken:
	json_decref(settings);
fail_settings_taken:
	json_decref(gpu);
fail_gpu_taken:
	json_decref(res);
	gp_error(GP_ENOMEM, "out of memory building the workers result");
	return NULL;
}

static void gpm_cell(char *buf, size_t cap, double v)
{
	if (isfinite(v))
		snprintf(buf, cap, "%.1f", v);
	else
		snprintf(buf, cap, "n/a");
}

static int table_fill(struct table *t, const struct workers_run *runs, int n)
{
	static const char *cols[] = { "workers", "GPU util %", "std %", "idle %", "samples",
		"total s", "img/s", "data wait ms", "wait % of step", "CPU cores", "machine CPU %" };
	static const char *gpm_cols[] = { "SM active %", "tensor %", "DRAM bw %" };
	int any_gpm = 0;
	for (int i = 0; i < n; i++)
		any_gpm |= runs[i].has_gpm;
	for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
		GP_TRY(table_add_col(t, cols[c], TABLE_RIGHT));
	for (size_t c = 0; any_gpm && c < sizeof(gpm_cols) / sizeof(gpm_cols[0]); c++)
		GP_TRY(table_add_col(t, gpm_cols[c], TABLE_RIGHT));
	for (int i = 0; i < n; i++) {
		const struct workers_run *r = &runs[i];
		char mean[32] = "n/a", sd[32] = "n/a", idle[32] = "n/a", ns[48] = "n/a";
		if (r->util) {
			snprintf(mean, sizeof(mean), "%.1f", r->mean_util);
			snprintf(sd, sizeof(sd), "%.1f", r->std_util);
			snprintf(idle, sizeof(idle), "%.1f", 100 * r->idle_share);
			snprintf(ns, sizeof(ns), "%d %s", r->util->n, r->util_source);
		}
		char wk[24], mach[32] = "n/a";
		snprintf(wk, sizeof(wk), r->decode_gpu ? "gpu +%d" : "%d", r->workers);
		if (r->res.cpu.machine_pct >= 0)
			snprintf(mach, sizeof(mach), "%.0f", r->res.cpu.machine_pct);
		char sm[32] = "n/a", tc[32] = "n/a", dram[32] = "n/a";
		if (r->has_gpm) {
			gpm_cell(sm, sizeof(sm), r->gpm.sm_util_pct);
			gpm_cell(tc, sizeof(tc), r->gpm.tensor_util_pct);
			gpm_cell(dram, sizeof(dram), r->gpm.dram_bw_util_pct);
		}
		if (any_gpm)
			GP_TRY(table_add_row(t, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.1f\t%.2f\t%.1f\t%.1f\t%s"
					     "\t%s\t%s\t%s",
					     wk, mean, sd, idle, ns, r->res.total_s, r->res.img_s,
					     r->res.data_wait_ms, r->res.data_wait_pct,
					     r->res.cpu.proc_cores, mach, sm, tc, dram));
		else
			GP_TRY(table_add_row(t, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.1f\t%.2f\t%.1f\t%.1f\t%s",
					     wk, mean, sd, idle, ns, r->res.total_s, r->res.img_s,
					     r->res.data_wait_ms, r->res.data_wait_pct,
					     r->res.cpu.proc_cores, mach));
	}
	return 0;
}

/* Two to four sentences drawn from the numbers: the data wait at the fewest
 * workers against the fastest run, the utilization if measured, the throughput. */
static void reading_print(const struct workers_run *runs, int n, int best_i)
{
	int lo = 0, hi = best_i;
	for (int i = 1; i < n; i++)
		if (runs[i].workers < runs[lo].workers)
			lo = i;
	const struct workers_run *a = &runs[lo], *b = &runs[hi];
	const char *unit = a->decode_gpu ? "CPU threads beside nvJPEG" : "workers";
	printf("\nreading: ");
	if (lo == hi) {
		printf("with %d %s the training loop waited for data %.0f%% of each step "
		       "(%.2f ms) at %.0f img/s, the best of the counts tried",
		       a->workers, unit, a->res.data_wait_pct, a->res.data_wait_ms, a->res.img_s);
		if (a->util)
			printf(", and the GPU was %.0f%% busy on average (idle %.0f%% of the time)",
			       a->mean_util, 100 * a->idle_share);
		printf(". More %s did not help: decoding keeps up with training here.\n", unit);
		return;
	}
	printf("with %d %s the training loop waited for data %.0f%% of each step (%.2f ms); "
	       "with %d, the fastest run, %.0f%% (%.2f ms). ", a->workers, unit,
	       a->res.data_wait_pct, a->res.data_wait_ms, b->workers, b->res.data_wait_pct,
	       b->res.data_wait_ms);
	if (a->util && b->util)
		printf("GPU utilization went from %.0f%% to %.0f%% and the idle share from %.0f%% "
		       "to %.0f%%. ", a->mean_util, b->mean_util, 100 * a->idle_share,
		       100 * b->idle_share);
	printf("Throughput went from %.0f to %.0f img/s (%.2fx).\n", a->res.img_s, b->res.img_s,
	       a->res.img_s > 0 ? b->res.img_s / a->res.img_s : 0);
}

/* Parse and check the options that do not need the dataset. */
static int check_workers(const struct int_list *w)
{
	if (w->n == 0)
		return gp_error(GP_EINVAL, "--workers: give at least one worker count (e.g. 0,2,4,8)");
	for (int i = 0; i < w->n; i++)
		for (int j = 0; j < i; j++)
			if (w->v[i] == w->v[j])
				return gp_error(GP_EINVAL, "--workers lists %d twice", w->v[i]);
	return 0;
}

static int csv_write(const struct table *t, const char *dir)
{
	char path[4096];
	GP_TRY(table_write_csv_in(t, dir, "workers.csv", path, sizeof(path)));
	printf("wrote %s\n", path);
	return 0;
}

int cmd_workers(int argc, char **argv)
{
	const char *model = "mobilenet_v2", *device = "auto", *precision = "fp32";
	const char *data = NULL, *out_dir = NULL, *decode = "cpu";
	int batch = 64, steps = 100, size = 0, classes = 0, prefetch = 2, csv = 0, help = 0;
	int overwrite = 0;
	double interval_s = 0.5;
	long long seed = 0;
	struct int_list workers = { 4, { 0, 2, 4, 8 } };
	struct opt opts[] = {
		OPT_MODEL(&model, "(mobilenet_v2)"),
		OPT_DATA(&data, "dataset: DIR (ImageFolder) or cifar10:DIR (required)"),
		OPT_BATCH(&batch, "batch size (64)"),
		OPT_WORKER_LIST(&workers, "worker counts to try (0,2,4,8)"),
		OPT_DECODE(&decode, "where JPEGs are decoded: cpu (one run per worker count) | gpu "
			   "(nvJPEG + GPU augmentation; one run per count of CPU threads decoding a "
			   "share beside it, --decode-threads) | auto (the faster of the two, timed at "
			   "the most workers listed; one run if the GPU wins)"),
		OPT_STEPS(&steps, "training steps per worker count (100)"),
		{ "interval", OPT_DOUBLE, &interval_s, "NVML sampling interval in seconds (0.5)", 0, 0, .min_d = 0.01, .max_d = 60, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		OPT_PREFETCH(&prefetch, "batches in flight per worker (2)"),
		OPT_SIZE(&size),
		OPT_CLASSES(&classes, "output classes (default: the dataset's)"),
		OPT_SEED(&seed, "seed for initialization and data order (0)"),
		OPT_DEVICE(&device),
		OPT_PRECISION(&precision, "(fp32; GPU math mode, fp16/bf16: mixed precision)"),
		OPT_OUT(&out_dir, "workers.json and the chart", "workers"),
		OPT_OVERWRITE(&overwrite, "workers.json"),
		OPT_CSV(&csv, "the table"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf workers --data DIR [--model mobilenet_v2] [--batch 64] "
				"[--workers 0,2,4,8] [--steps 100] [--interval 0.5] [--device D] "
				"[--out DIR] [--csv]", opts);
		return 0;
	}
	if (!data || !strcmp(data, "synthetic"))
		return gp_error(GP_EINVAL, "--data DIR (an ImageFolder) or cifar10:DIR is required");
	GP_TRY(check_workers(&workers));
	enum backend_kind backend;
	enum precision prec;
	GP_TRY(model_name_check(model));
	enum decode_mode mode;
	GP_TRY(args_decode_pick(decode, args_data_is_files(data) && strcmp(device, "cpu"),
				"workers", &mode));
	GP_TRY(train_pick_device(device, &backend, 0));
	/* auto: the first run measures both paths, the CPU side at the most workers listed */
	int most_workers = 0;
	for (int i = 0; i < workers.n; i++)
		most_workers = workers.v[i] > most_workers ? workers.v[i] : most_workers;
	GP_TRY(train_parse_precision(precision, &prec));
	char run_dir[4096];
	GP_TRY(result_dir_prepare("workers", "workers", out_dir, overwrite, run_dir, sizeof(run_dir)));
	out_dir = run_dir;

	struct workers_run runs[ARGS_LIST_MAX];
	struct table t;
	char path[4096];
	json_t *res = NULL;
	int nvml_ok = 0, gpu_dev = 0, rc = 0;
	int decode_gpu = 0;
	json_t *probe_json = NULL;
	memset(runs, 0, sizeof(runs));
	table_init(&t);
	/* Without NVML (no driver, or the CPU backend) utilization is null; the rest is
	 * measured all the same. The note comes with the chart's, after the table. */
	char why_no_util[256] = "the CPU backend";
	if (backend == BACKEND_CUDA) {
		nvml_ok = nvml_open() == 0;
		if (!nvml_ok) {
			snprintf(why_no_util, sizeof(why_no_util), "%s", gp_errmsg());
			gp_error_clear();
		} else {
			snprintf(why_no_util, sizeof(why_no_util), "NVML returned none");
		}
	}
	for (int i = 0; i < workers.n; i++) {
		struct workers_run *r = &runs[i];
		struct train_opts o = train_opts_default();
		o.model = model;
		o.batch = batch;
		o.steps = steps;
		o.size = size;
		o.classes = classes;
		o.seed = (uint64_t)seed;
		o.backend = backend;
		o.precision = prec;
		o.data = data;
		/* on the GPU path the counts are CPU threads beside nvJPEG (--decode-threads) */
		o.workers = mode == DECODE_GPU ? 0 : workers.v[i];
		o.decode_threads = mode == DECODE_GPU ? workers.v[i] : 0;
		o.prefetch = prefetch;
		o.decode = mode;
		o.probe_workers = most_workers;
		r->workers = workers.v[i];
		r->decode_gpu = mode == DECODE_GPU; /* known after the run for auto */
		struct workers_watch w = { .run = r, .nvml = nvml_ok, .batch = batch,
					   .interval_s = interval_s };
		struct train_observer obs = { .after_setup = watch_after_setup, .after_step = watch_after_step, .user = &w };
		rc = train_run_observed(&o, &obs, &r->res, NULL);
		int stop_rc = watch_stop_sampler(&w);
		if (rc < 0) {
			gp_error_wrap(rc, "run with %d %s", r->workers,
				      r->decode_gpu ? "CPU decode threads" : "workers");
			goto cleanup;
		}
		if ((rc = stop_rc) < 0)
			goto cleanup;
		gpu_dev = w.dev;
		r->decode_gpu = r->res.decode_gpu;
		if (mode == DECODE_AUTO) {
			/* settled: the rest of the sweep runs on the path picked, and a
			 * GPU pick is the only run (no worker threads to count) */
			mode = r->res.decode_gpu ? DECODE_GPU : DECODE_CPU;
			probe_json = train_decode_probe_json(&r->res);
			if (r->res.decode_probed) {
				char line[512];
				decode_probe_describe(&r->res.decode_probe, line, sizeof(line));
				printf("%s\n", line);
			}
			if (mode == DECODE_GPU) {
				workers = (struct int_list){ 1, { 0 } };
				r->workers = 0;
			}
		}
		run_summarize(r);
	}
	decode_gpu = mode == DECODE_GPU;
	int best_i, rec = recommend(runs, workers.n, &best_i);

	json_t *settings = json_pack("{s:s, s:o, s:i, s:i, s:i, s:i, s:o, s:i, s:I, s:s, s:s}",
		"model", model, "data", result_string(data), "batch", batch, "steps", steps,
		"size", size ? size : model_defaults(model).size, "classes", runs[0].res.classes,
		"interval_s", result_real(interval_s), "prefetch", prefetch, "seed", (json_int_t)seed,
		"device", train_device_name(backend),
		"precision", train_precision_name(prec));
	if (settings) {
		json_object_set_new(settings, "decode", json_string(decode_gpu ? "gpu" : "cpu"));
		json_object_set(settings, "decode_probe", probe_json ? probe_json : json_null());
	}
	json_t *list = json_array();
	for (int i = 0; settings && list && i < workers.n; i++)
		json_array_append_new(list, json_integer(workers.v[i]));
	if (settings && list)
		json_object_set(settings, "workers", list);
	json_decref(list);
	res = result_build(argc, argv, runs, workers.n, rec, settings,
			   train_gpu_json(backend, gpu_dev));
	if (!res) {
		rc = GP_ENOMEM;
		goto cleanup;
	}
	if ((rc = result_write(res, out_dir, "workers", path, sizeof(path))) < 0 ||
	    (rc = table_fill(&t, runs, workers.n)) < 0)
		goto cleanup;
	printf("\n");
	table_print(&t, stdout);
	reading_print(runs, workers.n, best_i);
	const char *unit = decode_gpu ? "CPU threads beside nvJPEG (--decode-threads)" : "workers";
	if (rec == best_i)
		printf("recommended: %d %s, the fastest (%.0f img/s, %.1f CPU cores busy), and "
		       "no fewer come within 5%% of it at as busy a GPU and no more CPU\n",
		       runs[rec].workers, unit, runs[rec].res.img_s, runs[rec].res.cpu.proc_cores);
	else
		printf("recommended: %d %s: within 5%% of the best throughput (%.0f img/s "
		       "against %.0f with %d) and 2 points of its GPU utilization, at %.1f "
		       "CPU cores busy against %.1f (the fewest whose CPU cost is within 25%% "
		       "of the cheapest such run)\n", runs[rec].workers, unit, runs[rec].res.img_s,
		       runs[best_i].res.img_s, runs[best_i].workers, runs[rec].res.cpu.proc_cores,
		       runs[best_i].res.cpu.proc_cores);
	printf("\nwrote %s\n", path);
	if (csv && (rc = csv_write(&t, out_dir)) < 0)
		goto cleanup;
	int charted = 1;
	for (int i = 0; i < workers.n; i++)
		charted &= runs[i].util != NULL;
	if (charted) {
		if ((rc = plots_draw(res, out_dir)) < 0)
			goto cleanup;
		printf("wrote %s/%s\n", out_dir, plots_chart_name("workers"));
	} else {
		printf("note: GPU utilization n/a (%s), so no %s\n", why_no_util,
		       plots_chart_name("workers"));
	}
	rc = 0;
cleanup:
	json_decref(res);
	json_decref(probe_json);
	for (int i = 0; i < workers.n; i++) {
		series_free(&runs[i].sampler);
		series_free(&runs[i].driver);
	}
	table_free(&t);
	if (nvml_ok)
		nvml_close();
	return rc;
}
