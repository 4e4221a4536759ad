/* gpuperf amp: FP32 against mixed precision. For each batch size, train the same model
 * on one fixed synthetic batch once per precision (fp32, tf32, fp16, bf16) and set
 * their time, throughput, speed-up over fp32 and peak memory side by side. Running out
 * of memory in one cell is recorded ("oom") and the others go on. */
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
#include "report/plots.h"
#include "report/result.h"
#include "report/stats.h"
#include "report/table.h"

#define AMP_MAX_PRECISIONS 4
#define AMP_MAX_CELLS (ARGS_LIST_MAX * AMP_MAX_PRECISIONS)

struct amp_cell {
	int batch;
	enum precision prec;
	enum layout layout; /* the layout it ran in: LAYOUT_NCHW or LAYOUT_NHWC */
	int oom;
	struct train_result res;
	double speedup;     /* img/s over fp32's at the same batch; < 0: no fp32 to compare */
	char error[256];    /* the out-of-memory message */
	/* --repeat N > 1: the spread of img/s and ms/step over the runs (res holds
	 * their means) */
	struct stat_summary img_s_spread, ms_spread;
	struct mfu mfu; /* the model FLOPs figures of res, once the GPU is known */
};

/* What the observer needs while one cell trains. */
struct amp_watch {
	const struct amp_cell *cell;
	int tty; /* progress redrawn on one line, else a line per quarter */
	struct train_energy *energy;
};

static int watch_timed(void *user, int begin)
{
	const struct amp_watch *w = user;
	return train_energy_timed(w->energy, begin);
}

static int watch_after_step(void *user, struct net *net, int step, int steps, double elapsed_s)
{
	const struct amp_watch *w = user;
	const struct amp_cell *c = w->cell;
	double img_s = elapsed_s > 0 ? step * (double)c->batch / elapsed_s : 0;
	int quarter = steps / 4 > 0 ? steps / 4 : 1;
	if (w->tty) {
		printf("\rbatch %d %s: step %d/%d  %.0f img/s   ", c->batch,
		       train_precision_name(c->prec), step, steps, img_s);
		if (step == steps)
			printf("\n");
	} else if (step % quarter == 0 || step == steps) {
		printf("batch %d %s: step %d/%d  %.0f img/s\n", c->batch,
		       train_precision_name(c->prec), step, steps, img_s);
	}
	fflush(stdout);
	return 0;
}

/* "fp32,fp16" into precisions, each once; NULL: every precision, in table order. */
static int parse_precisions(const char *list, enum precision *out, int *n)
{
	const char *p = list;
	char known[64];
	*n = 0;
	if (!list) {
		while (train_precision_name_at(*n) && *n < AMP_MAX_PRECISIONS) {
			out[*n] = (enum precision)*n;
			(*n)++;
		}
		return 0;
	}
	names_join(known, sizeof(known), train_precision_name_at, ", ", ", ");
	for (;;) {
		size_t len = strcspn(p, ",");
		char name[16];
		enum precision prec;
		if (len == 0 || len >= sizeof(name))
			return gp_error(GP_EINVAL, "--precisions '%s': expected names separated by commas "
					"(%s)", list, known);
		memcpy(name, p, len);
		name[len] = 0;
		if (train_parse_precision(name, &prec) < 0)
			return gp_error(GP_EINVAL, "--precisions: unknown precision '%s' (known: %s)",
					name, known);
		for (int i = 0; i < *n; i++)
			if (out[i] == prec)
				return gp_error(GP_EINVAL, "--precisions: '%s' is given twice", name);
		out[(*n)++] = prec;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

/* The layout a cell runs in: NHWC exists only under fp16/bf16 on the GPU, so fp32
 * and tf32 always run NCHW; fp16/bf16 take --layout, by default NHWC. */
static enum layout cell_layout(enum precision prec, enum layout asked)
{
	if (!precision_is_amp(prec))
		return LAYOUT_NCHW;
	return asked == LAYOUT_NCHW ? LAYOUT_NCHW : LAYOUT_NHWC;
}

static int is_oom(enum backend_kind backend, int rc)
{
	return rc == GP_EDEVOOM || (backend == BACKEND_CPU && rc == GP_ENOMEM);
}

static double peak_mib(const struct amp_cell *c)
{
	return c->res.mem.total_peak_bytes / GP_MIB;
}

/* Speed-up of each cell over fp32 at the same batch, where fp32 trained there. */
static void speedups_fill(struct amp_cell *cells, int n)
{
	for (int i = 0; i < n; i++) {
		cells[i].speedup = -1;
		if (cells[i].oom)
			continue;
		for (int k = 0; k < n; k++)
			if (cells[k].batch == cells[i].batch && cells[k].prec == PREC_FP32 &&
			    !cells[k].oom && cells[k].res.img_s > 0)
				cells[i].speedup = cells[i].res.img_s / cells[k].res.img_s;
	}
}

static int table_fill(struct table *t, const struct amp_cell *cells, int n, int on_gpu)
{
	static const char *cols[] = { "batch", "precision", "ms/step", "img/s", "speed-up vs fp32",
				      "peak MiB", "TFLOP/s", "MFU", "J/img" };
	for (int c = 0; c < 9; c++)
		GP_TRY(table_add_col(t, cols[c], c == 1 ? TABLE_LEFT : TABLE_RIGHT));
	for (int i = 0; i < n; i++) {
		const struct amp_cell *c = &cells[i];
		const char *prec = train_precision_name(c->prec);
		char speedup[32];
		if (c->oom) {
			GP_TRY(table_add_row(t, "%d\t%s\toom\toom\t-\t-\t-\t-\t-", c->batch, prec));
			continue;
		}
		if (c->speedup >= 0)
			snprintf(speedup, sizeof(speedup), "%.2fx", c->speedup);
		else
			snprintf(speedup, sizeof(speedup), "-");
		char mfu[32], joule[32];
		GP_TRY(table_add_row(t, "%d\t%s\t%.2f\t%.1f\t%s\t%.1f\t%.2f\t%s\t%s", c->batch, prec,
				     c->res.ms_per_step, c->res.img_s, speedup, peak_mib(c), c->mfu.tflops,
				     mfu_pct_str(&c->mfu, on_gpu, mfu, sizeof(mfu)),
				     mfu_energy_str(&c->mfu, joule, sizeof(joule))));
	}
	return 0;
}

/* One cell, trained repeat times from a fresh net each: res keeps the last run with
 * img/s and ms/step the means, the spreads beside them. */
static int cell_run(const struct train_opts *o, const struct train_observer *obs,
		    struct amp_cell *c, int repeat)
{
	double img_s[100], ms[100];
	for (int i = 0; i < repeat && i < 100; i++) {
		GP_TRY(train_run_observed(o, obs, &c->res, NULL));
		img_s[i] = c->res.img_s;
		ms[i] = c->res.ms_per_step;
	}
	if (repeat > 1) {
		stats_summarize(img_s, repeat, &c->img_s_spread);
		stats_summarize(ms, repeat, &c->ms_spread);
		c->res.img_s = c->img_s_spread.mean;
		c->res.ms_per_step = c->ms_spread.mean;
	}
	return 0;
}

static json_t *real_or_null(int ok, double v)
{
	return ok ? result_real(v) : json_null();
}

static json_t *cell_json(const struct amp_cell *c)
{
	int ok = !c->oom;
	json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i}",
		"batch", c->batch, "precision", train_precision_name(c->prec),
		"layout", train_layout_name(c->layout), "status", ok ? "ok" : "oom",
		"ms_per_step", real_or_null(ok, c->res.ms_per_step),
		"img_s", real_or_null(ok, c->res.img_s),
		"speedup", real_or_null(ok && c->speedup >= 0, c->speedup),
		"peak_mib", real_or_null(ok, peak_mib(c)),
		"first_loss", real_or_null(ok, c->res.first_loss),
		"last_loss", real_or_null(ok, c->res.last_loss),
		"nonfinite_loss_step", ok && c->res.nonfinite_step ? json_integer(c->res.nonfinite_step)
								    : json_null(),
		"timed_steps", ok ? c->res.timed_steps : 0);
	if (j && c->oom && json_object_set_new(j, "error", json_string(c->error)) < 0) {
		json_decref(j);
		j = NULL;
	}
	if (j && ok && mfu_json_set(j, &c->mfu) < 0) {
		json_decref(j);
		j = NULL;
	}
	if (j && ok && c->img_s_spread.n > 1 &&
	    json_object_set_new(j, "repeat", json_pack("{s:i, s:o, s:o}", "n", c->img_s_spread.n,
			"img_s", stats_json(&c->img_s_spread, NULL, 0),
			"ms_per_step", stats_json(&c->ms_spread, NULL, 0))) < 0) {
		json_decref(j);
		j = NULL;
	}
	return j;
}

struct amp_settings {
	const char *model, *layout, *device_name;
	int size, steps;
	enum backend_kind backend;
	const struct int_list *batches;
	const enum precision *precs;
	int n_precs;
};

/* The result document (docs/amp.md): settings, the cells, the GPU. */
static json_t *amp_result(int argc, char **argv, const struct amp_settings *s,
			  const struct amp_cell *cells, int n)
{
	json_t *res = result_new("amp", argc, argv);
	json_t *batches = json_array(), *precs = json_array(), *arr = json_array();
	if (!res || !batches || !precs || !arr)
		goto fail;
	for (int i = 0; i < s->batches->n; i++)
		if (json_array_append_new(batches, json_integer(s->batches->v[i])) < 0)
			goto fail;
	for (int i = 0; i < s->n_precs; i++)
		if (json_array_append_new(precs, json_string(train_precision_name(s->precs[i]))) < 0)
			goto fail;
	for (int i = 0; i < n; i++)
		if (json_array_append_new(arr, cell_json(&cells[i])) < 0)
			goto fail;
	const char *device = train_device_name(s->backend);
	json_t *settings = json_pack("{s:s, s:O, s:O, s:i, s:i, s:s, s:s, s:s}", "model", s->model,
				     "batches", batches, "precisions", precs, "steps", s->steps,
				     "size", s->size, "layout", s->layout, "device", device,
				     "data", "synthetic");
	json_t *m = json_pack("{s:s, s:i, s:s, s:i, s:O}", "model", s->model, "size", s->size,
			      "device", s->device_name, "steps", s->steps, "cells", arr);
	if (!settings || !m) {
		json_decref(settings);
		json_decref(m);
		goto fail;
	}
	/* json_object_set_new takes the reference even when it fails */
	if (json_object_set_new(res, "settings", settings) < 0) {
		json_decref(m);
		goto fail;
	}
	if (json_object_set_new(res, "measurements", m) < 0)
		goto fail;
	json_decref(batches);
	json_decref(precs);
	json_decref(arr);
	return res;
fail:
	json_decref(batches);
	json_decref(precs);
	json_decref(arr);
	json_decref(res);
	return NULL;
}

int cmd_amp(int argc, char **argv)
{
	const char *model = "resnet50", *device = "auto", *precisions = NULL;
	const char *layout = NULL, *out_dir = NULL;
	struct int_list batches = { 4, { 64, 128, 256, 512 } };
	int steps = 30, size = 0, csv = 0, help = 0, overwrite = 0, repeat = 1;
	struct opt opts[] = {
		OPT_MODEL(&model, "(resnet50)"),
		{ "batches", OPT_INT_LIST, &batches, "batch sizes (64,128,256,512)", 1, ARGS_MAX_BATCH },
		{ "precisions", OPT_STR, &precisions, "(comma-separated; all of them by default)",
		  .choices = train_precision_name_at },
		OPT_STEPS(&steps, "training steps per cell, the first 10% (at most 10) untimed (30)"),
		{ "repeat", OPT_INT, &repeat, "train each cell this many times: img/s and ms/step are "
		  "their means, with the spread in the result (1)", 1, 100 },
		OPT_SIZE(&size),
		OPT_LAYOUT(&layout, "for fp16/bf16 (default nhwc; fp32/tf32 run nchw)"),
		OPT_DEVICE(&device),
		OPT_OUT(&out_dir, "amp.json and the chart", "amp"),
		OPT_OVERWRITE(&overwrite, "amp.json"),
		OPT_CSV(&csv, "the table"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf amp [--model M] [--batches B,..] [--precisions P,..] "
				"[--steps N] [--size S] [--layout L] [--device D] [--out DIR] [--csv]",
				opts);
		return 0;
	}
	enum precision precs[AMP_MAX_PRECISIONS];
	enum layout asked_layout;
	enum backend_kind backend;
	int n_precs = 0, any_amp = 0;
	GP_TRY(model_name_check(model));
	if (batches.n == 0)
		return gp_error(GP_EINVAL, "--batches: give at least one batch size (e.g. 64,128,256,512)");
	GP_TRY(parse_precisions(precisions, precs, &n_precs));
	GP_TRY(train_parse_layout(layout, &asked_layout));
	for (int i = 0; i < n_precs; i++)
		any_amp |= precision_is_amp(precs[i]);
	/* With fp16/bf16 asked for, the CPU fallback's note would only precede the error. */
	GP_TRY(train_pick_device(device, &backend, any_amp));
	if (backend == BACKEND_CPU && any_amp)
		return gp_error(GP_ENODEV, "amp needs a CUDA GPU for fp16 and bf16 (device: cpu%s); "
				"on the CPU only --precisions fp32,tf32 run",
				!strcmp(device, "cpu") ? "" : ", no GPU found");
	if (!size)
		size = model_defaults(model).size;
	char run_dir[4096];
	GP_TRY(result_dir_prepare("amp", "amp", out_dir, overwrite, run_dir, sizeof(run_dir)));
	out_dir = run_dir;

	int n_cells = batches.n * n_precs, nvml_ok = 0, gpu_dev = 0, n_oom = 0, rc = 0;
	struct amp_cell *cells = calloc(n_cells, sizeof(*cells));
	struct table table;
	json_t *res = NULL;
	char path[4096], device_name[128];
	if (!cells)
		return gp_error(GP_ENOMEM, "no memory for %d cells", n_cells);
	table_init(&table);
	snprintf(device_name, sizeof(device_name), "cpu");
	if (backend == BACKEND_CUDA) {
		nvml_ok = nvml_open() == 0;
		if (!nvml_ok)
			gp_error_clear(); /* the result's gpu comes from devinfo then */
	}
	printf("%s, %dx%d, %d steps per cell on %s: %d batch sizes x %d precisions\n", model, size,
	       size, steps, train_device_name(backend), batches.n, n_precs);
	fflush(stdout);
	for (int b = 0; b < batches.n; b++) {
		for (int p = 0; p < n_precs; p++) {
			struct amp_cell *c = &cells[b * n_precs + p];
			struct train_opts o = train_opts_default();
			c->batch = batches.v[b];
			c->prec = precs[p];
			c->layout = backend == BACKEND_CPU ? LAYOUT_NCHW : cell_layout(c->prec, asked_layout);
			o.model = model;
			o.batch = c->batch;
			o.steps = steps;
			o.size = size;
			o.backend = backend;
			o.precision = c->prec;
			o.layout = backend == BACKEND_CPU ? LAYOUT_AUTO : c->layout;
			o.data = "synthetic";
			struct amp_watch w = { .cell = c, .tty = isatty(STDOUT_FILENO) };
			struct train_energy energy;
			w.energy = &energy;
			struct train_observer obs = { .after_step = watch_after_step,
						      .timed = watch_timed, .user = &w };
			train_energy_start(&energy, backend, 0);
			rc = cell_run(&o, &obs, c, repeat);
			c->res.energy_j = energy.energy_j;
			c->res.energy_s = energy.seconds;
			train_energy_stop(&energy);
			if (rc < 0 && is_oom(backend, rc)) {
				c->oom = 1;
				n_oom++;
				snprintf(c->error, sizeof(c->error), "%s", gp_errmsg());
				gp_error_clear();
				memset(&c->res, 0, sizeof(c->res));
				printf("batch %d %s: out of memory (%s)\n", c->batch,
				       train_precision_name(c->prec), c->error);
				fflush(stdout);
				rc = 0;
			} else if (rc < 0) {
				gp_error_wrap(rc, "batch %d, %s", c->batch, train_precision_name(c->prec));
				goto cleanup;
			}
		}
	}
	speedups_fill(cells, n_cells);
	if (nvml_ok) {
		size_t held;
		if (train_process_gpu_mem(&held, &gpu_dev) < 0)
			gp_error_clear(); /* the GPU we ran on is not known: NVML's first */
	}

	json_t *gpu = train_gpu_json(backend, gpu_dev);
	const char *gpu_name = json_string_value(json_object_get(gpu, "name"));
	if (gpu_name)
		snprintf(device_name, sizeof(device_name), "%s", gpu_name);
	for (int i = 0; i < n_cells; i++) {
		struct amp_cell *c = &cells[i];
		mfu_compute(&c->mfu, c->res.fwd_macs_per_image, c->res.img_s, c->prec,
			    backend == BACKEND_CUDA, gpu_name, 1);
		mfu_set_energy(&c->mfu, c->res.energy_j, c->res.energy_s,
			       (double)c->batch * c->res.timed_steps);
	}
	if ((rc = table_fill(&table, cells, n_cells, backend == BACKEND_CUDA)) < 0) {
		json_decref(gpu);
		goto cleanup;
	}
	printf("\n");
	table_print(&table, stdout);
	struct amp_settings s = { .model = model, .layout = layout ? layout : "auto",
				  .device_name = device_name, .size = size, .steps = steps,
				  .backend = backend, .batches = &batches, .precs = precs,
				  .n_precs = n_precs };
	res = amp_result(argc, argv, &s, cells, n_cells);
	if (!res) {
		json_decref(gpu);
		rc = gp_error(GP_ENOMEM, "out of memory building the amp result");
		goto cleanup;
	}
	if (gpu && (rc = result_set_gpu(res, gpu)) < 0)
		goto cleanup;
	if ((rc = result_write(res, out_dir, "amp", path, sizeof(path))) < 0)
		goto cleanup;
	printf("\nwrote %s\n", path);
	if (csv) {
		if ((rc = table_write_csv_in(&table, out_dir, "amp.csv", path, sizeof(path))) < 0)
			goto cleanup;
		printf("wrote %s\n", path);
	}
	if (n_oom == n_cells) {
		rc = gp_error(GP_EDEVOOM, "%s ran out of memory at every batch size and precision", model);
		goto cleanup;
	}
	if ((rc = plots_draw(res, out_dir)) < 0)
		goto cleanup;
	printf("wrote %s/%s\n", out_dir, plots_chart_name("amp"));
cleanup:
	json_decref(res);
	table_free(&table);
	free(cells);
	if (nvml_ok)
		nvml_close();
	return rc;
}
