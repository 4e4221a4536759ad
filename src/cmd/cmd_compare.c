/* gpuperf compare: train several models one after another on synthetic data with the
 * same settings and set their size, memory and speed side by side. Memory is seen
 * twice: what our allocator holds (by category, with the plan's prediction) and what
 * nvidia-smi shows for the process (CUDA context and libraries included). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/train_json.h"
#include "core/error.h"
#include "core/names.h"
#include "gpu/nvml.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/result.h"
#include "report/stats.h"
#include "report/table.h"

#define COMPARE_MAX_MODELS 8

struct compare_row {
	char model[32];
	int size, batch;
	struct train_result res;
	int process_setup_ok, process_peak_ok;
	size_t process_setup_bytes, process_peak_bytes;
	/* --repeat N > 1: the spread of img/s and ms/step (res holds their means) */
	struct stat_summary img_s_spread, ms_spread;
};

/* What the observer needs while one model trains. */
struct compare_watch {
	struct compare_row *row;
	int batch;
	int sample_gpu; /* CUDA backend with NVML loaded */
	int tty;        /* progress redrawn on one line, else a line per quarter */
};

static void watch_sample(struct compare_watch *w, int at_setup)
{
	size_t b = 0;
	if (!w->sample_gpu)
		return;
	if (train_process_gpu_mem(&b, NULL) < 0) {
		gp_error_clear(); /* shown as n/a; training goes on */
		return;
	}
	if (at_setup) {
		w->row->process_setup_ok = 1;
		w->row->process_setup_bytes = b;
	}
	if (!w->row->process_peak_ok || b > w->row->process_peak_bytes)
		w->row->process_peak_bytes = b;
	w->row->process_peak_ok = 1;
}

static int watch_after_setup(void *user, struct net *net)
{
	watch_sample(user, 1);
	return 0;
}

/* nvidia-smi's number after set-up, half-way and at the end: a handful of NVML
 * calls, so the timing does not feel them, and lazily loaded kernels are seen. */
static int watch_after_step(void *user, struct net *net, int step, int steps, double elapsed_s)
{
	struct compare_watch *w = user;
	if (step == (steps + 1) / 2 || step == steps)
		watch_sample(w, 0);
	double img_s = elapsed_s > 0 ? step * (double)w->batch / elapsed_s : 0;
	int quarter = steps / 4 > 0 ? steps / 4 : 1;
	if (w->tty) {
		printf("\r%s: step %d/%d  %.0f img/s   ", w->row->model, step, steps, img_s);
		if (step == steps)
			printf("\n");
	} else if (step % quarter == 0 || step == steps) {
		printf("%s: step %d/%d  %.0f img/s\n", w->row->model, step, steps, img_s);
	}
	fflush(stdout);
	return 0;
}

/* "a,b,c" into names checked against the known models. */
static int parse_models(const char *list, char names[][32], int *n)
{
	const char *p = list;
	*n = 0;
	for (;;) {
		size_t len = strcspn(p, ",");
		char name[32], known[256];
		if (len == 0 || len >= sizeof(name))
			return gp_error(GP_EINVAL, "--models '%s': expected names separated by commas (known: %s)",
					list, names_join(known, sizeof(known), model_name_at, ", ", ", "));
		memcpy(name, p, len);
		name[len] = 0;
		GP_TRY(model_name_check(name));
		if (*n == COMPARE_MAX_MODELS)
			return gp_error(GP_EINVAL, "--models: at most %d models", COMPARE_MAX_MODELS);
		snprintf(names[(*n)++], 32, "%s", name);
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

static json_t *mib_or_null(int ok, size_t bytes)
{
	return ok ? result_real(bytes / GP_MIB) : json_null();
}

static json_t *row_json_plain(const struct compare_row *r)
{
	const struct train_result *t = &r->res;
	json_t *cat = json_object();
	for (int c = 0; c < MEM_NCAT; c++)
		json_object_set_new(cat, mem_cat_name(c),
				    json_integer((json_int_t)t->mem_after_setup.cur_bytes[c]));
	return json_pack("{s:s, s:i, s:i, s:i, s:I, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:o, s:o, s:o,"
			 " s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
		"model", r->model, "size", r->size, "batch", r->batch, "steps", t->steps,
		"params", (json_int_t)t->params, "params_m", result_real(t->params / 1e6),
		"param_mib", result_real(t->params * sizeof(float) / GP_MIB),
		"process_setup_mib", mib_or_null(r->process_setup_ok, r->process_setup_bytes),
		"process_peak_mib", mib_or_null(r->process_peak_ok, r->process_peak_bytes),
		"alloc_bytes", (json_int_t)t->mem_after_setup.total_bytes,
		"alloc_peak_bytes", (json_int_t)t->mem.total_peak_bytes,
		"predicted_peak_bytes", (json_int_t)t->plan.total_bytes,
		"alloc_mib", result_real(t->mem_after_setup.total_bytes / GP_MIB),
		"alloc_peak_mib", result_real(t->mem.total_peak_bytes / GP_MIB),
		"predicted_peak_mib", result_real(t->plan.total_bytes / GP_MIB),
		"train_s", result_real(t->total_s), "ms_per_step", result_real(t->ms_per_step),
		"img_s", result_real(t->img_s),
		"first_loss", result_real(t->first_loss), "last_loss", result_real(t->last_loss),
		"nonfinite_loss_step", t->nonfinite_step ? json_integer(t->nonfinite_step) : json_null(),
		"category_bytes", cat);
}

static json_t *row_json(const struct compare_row *r)
{
	json_t *j = row_json_plain(r);
	if (j && r->img_s_spread.n > 1 &&
	    json_object_set_new(j, "repeat", json_pack("{s:i, s:o, s:o}", "n", r->img_s_spread.n,
			"img_s", stats_json(&r->img_s_spread, NULL, 0),
			"ms_per_step", stats_json(&r->ms_spread, NULL, 0))) < 0) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

/* One model, trained repeat times from a fresh net each: res keeps the last run
 * with img/s and ms/step the means, the spreads beside them. */
static int row_run(const struct train_opts *o, const struct train_observer *obs,
		   struct compare_row *r, int repeat)
{
	double img_s[100], ms[100];
	for (int i = 0; i < repeat && i < 100; i++) {
		GP_TRY(train_run_observed(o, obs, &r->res, NULL));
		img_s[i] = r->res.img_s;
		ms[i] = r->res.ms_per_step;
	}
	if (repeat > 1) {
		stats_summarize(img_s, repeat, &r->img_s_spread);
		stats_summarize(ms, repeat, &r->ms_spread);
		r->res.img_s = r->img_s_spread.mean;
		r->res.ms_per_step = r->ms_spread.mean;
	}
	return 0;
}

static void mib_cell(char *buf, size_t cap, int ok, size_t bytes)
{
	if (ok)
		snprintf(buf, cap, "%.1f", bytes / GP_MIB);
	else
		snprintf(buf, cap, "n/a");
}

static int tables_fill(struct table *main_t, struct table *cat_t, const struct compare_row *rows,
		       int n)
{
	static const char *main_cols[] = { "model", "size", "params (M)", "param MiB",
		"process MiB (setup)", "process MiB (peak)", "alloc MiB", "alloc peak MiB",
		"predicted MiB", "train s", "img/s" };
	for (size_t c = 0; c < sizeof(main_cols) / sizeof(main_cols[0]); c++)
		GP_TRY(table_add_col(main_t, main_cols[c], c == 0 ? TABLE_LEFT : TABLE_RIGHT));
	GP_TRY(table_add_col(cat_t, "model", TABLE_LEFT));
	for (int c = 0; c < MEM_NCAT; c++)
		GP_TRY(table_add_col(cat_t, mem_cat_name(c), TABLE_RIGHT));
	GP_TRY(table_add_col(cat_t, "total", TABLE_RIGHT));
	for (int i = 0; i < n; i++) {
		const struct compare_row *r = &rows[i];
		const struct train_result *t = &r->res;
		char ps[32], pp[32], cats[MEM_NCAT][32];
		mib_cell(ps, sizeof(ps), r->process_setup_ok, r->process_setup_bytes);
		mib_cell(pp, sizeof(pp), r->process_peak_ok, r->process_peak_bytes);
		GP_TRY(table_add_row(main_t, "%s\t%d\t%.2f\t%.1f\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f",
				     r->model, r->size, t->params / 1e6, t->params * sizeof(float) / GP_MIB,
				     ps, pp, t->mem_after_setup.total_bytes / GP_MIB,
				     t->mem.total_peak_bytes / GP_MIB, t->plan.total_bytes / GP_MIB,
				     t->total_s, t->img_s));
		for (int c = 0; c < MEM_NCAT; c++)
			snprintf(cats[c], sizeof(cats[c]), "%.1f", t->mem_after_setup.cur_bytes[c] / GP_MIB);
		_Static_assert(MEM_NCAT == 6, "the breakdown row lists six categories");
		GP_TRY(table_add_row(cat_t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f", r->model, cats[0],
				     cats[1], cats[2], cats[3], cats[4], cats[5],
				     t->mem_after_setup.total_bytes / GP_MIB));
	}
	return 0;
}

static int csv_write(const struct table *t, const char *dir, const char *name)
{
	char path[4096];
	GP_TRY(table_write_csv_in(t, dir, name, path, sizeof(path)));
	printf("wrote %s\n", path);
	return 0;
}

/* The result document: settings, one object per model, the GPU; written atomically. */
static int compare_write_result(int argc, char **argv, const struct compare_row *rows, int n,
				enum backend_kind backend, enum precision prec, int batch, int size,
				int steps, int classes, int gpu_dev, const char *out_dir, char *path, size_t cap)
{
	json_t *res = result_new("compare", argc, argv);
	json_t *models = json_array(), *names = json_array();
	int rc = gp_error(GP_ENOMEM, "out of memory building the compare result");
	if (!res || !models || !names)
		goto free_json;
	for (int i = 0; i < n; i++)
		if (json_array_append_new(models, row_json(&rows[i])) < 0 ||
		    json_array_append_new(names, json_string(rows[i].model)) < 0)
			goto free_json;
	json_t *settings = json_pack("{s:O, s:i, s:i, s:o, s:i, s:s, s:s}", "models", names,
				     "batch", batch, "steps", steps,
				     "size", size ? json_integer(size) : json_null(), "classes", classes,
				     "device", train_device_name(backend),
				     "precision", train_precision_name(prec));
	if (!settings || json_object_set_new(res, "settings", settings) < 0 ||
	    json_object_set(json_object_get(res, "measurements"), "models", models) < 0)
		goto free_json;
	json_t *gpu = train_gpu_json(backend, gpu_dev);
	if (gpu && (rc = result_set_gpu(res, gpu)) < 0)
		goto free_json;
	rc = result_write(res, out_dir, "compare", path, cap);
free_json:
	json_decref(names);
	json_decref(models);
	json_decref(res);
	return rc;
}

int cmd_compare(int argc, char **argv)
{
	const char *models = COMPARE_DEFAULT_MODELS, *device = "auto";
	const char *precision = "fp32", *out_dir = NULL;
	int batch = 32, steps = 100, size = 0, classes = 1000, csv = 0, help = 0, overwrite = 0;
	int repeat = 1;
	struct opt opts[] = {
		{ "models", OPT_STR, &models, "comma-separated models (" COMPARE_DEFAULT_MODELS ")", 0 },
		OPT_BATCH(&batch, "batch size (32)"),
		OPT_STEPS(&steps, "training steps per model (100)"),
		{ "repeat", OPT_INT, &repeat, "train each model this many times: img/s and ms/step are "
		  "their means, with the spread in the result (1)", 1, 100 },
		OPT_SIZE(&size),
		OPT_CLASSES(&classes, "output classes (1000)"),
		OPT_DEVICE(&device),
		OPT_PRECISION(&precision, "(fp32; GPU math mode, fp16/bf16: mixed precision)"),
		OPT_OUT(&out_dir, "compare.json", "compare"),
		OPT_OVERWRITE(&overwrite, "compare.json"),
		OPT_CSV(&csv, "the tables"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf compare [--models a,b,c] [--batch B] [--steps N] [--size S] "
				"[--device D] [--out DIR] [--csv]", opts);
		return 0;
	}
	char names[COMPARE_MAX_MODELS][32];
	int n_models = 0;
	enum backend_kind backend;
	enum precision prec;
	GP_TRY(parse_models(models, names, &n_models));
	GP_TRY(train_pick_device(device, &backend, 0));
	GP_TRY(train_parse_precision(precision, &prec));
	char run_dir[4096];
	GP_TRY(result_dir_prepare("compare", "compare", out_dir, overwrite, run_dir, sizeof(run_dir)));
	out_dir = run_dir;

	struct compare_row rows[COMPARE_MAX_MODELS];
	struct table main_t, cat_t;
	char path[4096];
	int nvml_ok = 0, gpu_dev = 0, rc = 0;
	memset(rows, 0, sizeof(rows));
	table_init(&main_t);
	table_init(&cat_t);
	/* Without NVML (no driver, or the CPU backend) the process columns read n/a. */
	if (backend == BACKEND_CUDA) {
		nvml_ok = nvml_open() == 0;
		if (!nvml_ok) {
			fprintf(stderr, "note: process memory n/a: %s\n", gp_errmsg());
			gp_error_clear();
		}
	}
	for (int i = 0; i < n_models; i++) {
		struct compare_row *r = &rows[i];
		struct train_opts o = train_opts_default();
		memcpy(r->model, names[i], sizeof(r->model));
		o.model = r->model;
		o.batch = batch;
		o.steps = steps;
		o.size = size;
		o.classes = classes;
		o.backend = backend;
		o.precision = prec;
		r->size = size ? size : model_defaults(r->model).size;
		r->batch = batch;
		struct compare_watch w = { .row = r, .batch = batch, .sample_gpu = nvml_ok,
					   .tty = isatty(STDOUT_FILENO) };
		struct train_observer obs = { .after_setup = watch_after_setup, .after_step = watch_after_step, .user = &w };
		if ((rc = row_run(&o, &obs, r, repeat)) < 0) {
			gp_error_wrap(rc, "%s", r->model);
			goto cleanup;
		}
	}
	size_t held;
	if (nvml_ok && train_process_gpu_mem(&held, &gpu_dev) < 0)
		gp_error_clear(); /* the GPU we ran on is not known: NVML's first */

	if ((rc = tables_fill(&main_t, &cat_t, rows, n_models)) < 0)
		goto cleanup;
	printf("\n");
	table_print(&main_t, stdout);
	printf("\nengine memory after set-up by category (MiB):\n");
	table_print(&cat_t, stdout);

	if ((rc = compare_write_result(argc, argv, rows, n_models, backend, prec, batch, size,
				       steps, classes, gpu_dev, out_dir, path, sizeof(path))) < 0)
		goto cleanup;
	printf("\nwrote %s\n", path);
	if (csv && ((rc = csv_write(&main_t, out_dir, "compare.csv")) < 0 ||
		    (rc = csv_write(&cat_t, out_dir, "compare_memory.csv")) < 0))
		goto cleanup;
	rc = 0;
cleanup:
	table_free(&main_t);
	table_free(&cat_t);
	if (nvml_ok)
		nvml_close();
	return rc;
}
