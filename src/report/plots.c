/* One function per command that has charts; each reads its measurements as laid
 * out in docs/results.md and checks every field it uses. */
#include "report/plots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "report/chart.h"
#include "report/result.h"

#define IDLE_THRESHOLD_PCT 10.0

/* A number field of obj, or GP_EFORMAT naming where it was missing. */
static int json_number_get(json_t *obj, const char *key, const char *where, double *out)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_number(v))
		return gp_error(GP_EFORMAT, "%s: \"%s\" is missing or not a number", where, key);
	*out = json_number_value(v);
	return 0;
}

struct trial {
	double batch, peak_alloc_mib, process_mib, predicted_mib;
	int ok;
};

static int trial_by_batch(const void *a, const void *b)
{
	const struct trial *x = a, *y = b;
	return (x->batch > y->batch) - (x->batch < y->batch);
}

static int plot_maxbatch(json_t *m, const char *path)
{
	json_t *trials = json_object_get(m, "trials");
	const char *model = json_string_value(json_object_get(m, "model"));
	const char *precision = json_string_value(json_object_get(m, "precision"));
	size_t n = json_array_size(trials);
	double capacity_mib = 0, max_batch = 0;
	struct trial *t = NULL;
	double *x_ok = NULL, *peak = NULL, *proc = NULL, *pred = NULL;
	struct chart_figure *fig = NULL;
	int rc, n_ok = 0, n_pred = 0, oom = -1;
	char title[160], label[96];

	GP_TRY(json_number_get(m, "capacity_mib", "maxbatch measurements", &capacity_mib));
	GP_TRY(json_number_get(m, "max_batch", "maxbatch measurements", &max_batch));
	if (!json_is_array(trials) || n == 0)
		return gp_error(GP_EFORMAT, "maxbatch measurements: \"trials\" is missing or empty");
	t = calloc(n, sizeof(*t));
	x_ok = calloc(n, sizeof(double));
	peak = calloc(n, sizeof(double));
	proc = calloc(n, sizeof(double));
	pred = calloc(n, sizeof(double));
	if (!t || !x_ok || !peak || !proc || !pred) {
		rc = gp_error(GP_ENOMEM, "no memory for %zu trials", n);
		goto free_all;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *tr = json_array_get(trials, i);
		char where[48];
		snprintf(where, sizeof(where), "maxbatch trial %zu", i);
		if ((rc = json_number_get(tr, "batch", where, &t[i].batch)) < 0)
			goto free_all;
		if (!json_is_boolean(json_object_get(tr, "ok"))) {
			rc = gp_error(GP_EFORMAT, "%s: \"ok\" is missing or not true/false", where);
			goto free_all;
		}
		t[i].ok = json_is_true(json_object_get(tr, "ok"));
		/* A failed trial has no peak to report; a trial without a prediction
		 * just leaves the predicted line out. */
		t[i].predicted_mib = -1;
		json_number_get(tr, "predicted_mib", where, &t[i].predicted_mib);
		if (t[i].ok && ((rc = json_number_get(tr, "peak_alloc_mib", where,
						      &t[i].peak_alloc_mib)) < 0 ||
				(rc = json_number_get(tr, "process_mib", where,
						      &t[i].process_mib)) < 0))
			goto free_all;
	}
	gp_error_clear();
	qsort(t, n, sizeof(*t), trial_by_batch);
	for (size_t i = 0; i < n; i++) {
		if (t[i].ok) {
			x_ok[n_ok] = t[i].batch;
			peak[n_ok] = t[i].peak_alloc_mib;
			proc[n_ok++] = t[i].process_mib;
		} else if (oom < 0) {
			oom = (int)i;
		}
		if (t[i].predicted_mib >= 0)
			n_pred++;
	}

	snprintf(title, sizeof(title), "%s%s%s: largest batch %.0f", model ? model : "model",
		 precision ? ", " : "", precision ? precision : "", max_batch);
	fig = chart_figure_new(1, 1, 900, 560, title);
	if (!fig) {
		rc = gp_error(GP_ENOMEM, "no memory for a chart");
		goto free_all;
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_title(p, "GPU memory by batch size");
	chart_panel_set_labels(p, "batch size", "memory (MiB)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	if ((rc = chart_panel_add_line(p, x_ok, peak, n_ok,
				       (struct chart_line_style){ .color = CHART_BLUE, .markers = 1 },
				       "peak allocated")) < 0 ||
	    (rc = chart_panel_add_line(p, x_ok, proc, n_ok,
				       (struct chart_line_style){ .color = CHART_GREEN, .markers = 1 },
				       "process memory (nvidia-smi)")) < 0)
		goto free_fig;
	if (n_pred > 0) {
		/* Predictions exist for failed trials too: draw them over all batches. */
		int k = 0;
		for (size_t i = 0; i < n; i++) {
			if (t[i].predicted_mib < 0)
				continue;
			x_ok[k] = t[i].batch;
			pred[k++] = t[i].predicted_mib;
		}
		rc = chart_panel_add_line(p, x_ok, pred, k,
					  (struct chart_line_style){ .color = CHART_GREY, .dashed = 1,
								     .width_px = 1.5 },
					  "predicted by the memory plan");
		if (rc < 0)
			goto free_fig;
	}
	snprintf(label, sizeof(label), "GPU capacity %.0f MiB", capacity_mib);
	if ((rc = chart_panel_add_hline(p, capacity_mib, CHART_PURPLE, 1, label)) < 0)
		goto free_fig;
	if (oom >= 0) {
		snprintf(label, sizeof(label), "out of memory at batch %.0f", t[oom].batch);
		/* At the capacity line, or above it where the plan predicted more. */
		double y = t[oom].predicted_mib > capacity_mib ? t[oom].predicted_mib : capacity_mib;
		if ((rc = chart_panel_add_point(p, t[oom].batch, y, CHART_RED, label)) < 0)
			goto free_fig;
	}
	rc = chart_figure_save(fig, path);
free_fig:
	chart_figure_free(fig);
free_all:
	free(t);
	free(x_ok);
	free(peak);
	free(proc);
	free(pred);
	return rc;
}

/* One run's utilization samples [[t_s, pct], ...] into x and y (caller frees). */
static int workers_samples(json_t *samples, const char *where, double **x, double **y, int *n)
{
	size_t count = json_array_size(samples);
	*n = 0;
	if (!json_is_array(samples))
		return gp_error(GP_EFORMAT, "%s: \"samples\" is missing or not an array", where);
	*x = malloc((count ? count : 1) * sizeof(double));
	*y = malloc((count ? count : 1) * sizeof(double));
	if (!*x || !*y)
		return gp_error(GP_ENOMEM, "no memory for %zu samples", count);
	for (size_t i = 0; i < count; i++) {
		json_t *s = json_array_get(samples, i);
		json_t *ts = json_array_get(s, 0), *pct = json_array_get(s, 1);
		if (json_array_size(s) != 2 || !json_is_number(ts) || !json_is_number(pct))
			return gp_error(GP_EFORMAT, "%s: sample %zu is not [t_s, util_pct]", where, i);
		(*x)[i] = json_number_value(ts);
		(*y)[i] = json_number_value(pct);
	}
	*n = (int)count;
	return 0;
}

static int plot_workers(json_t *m, const char *path)
{
	json_t *runs = json_object_get(m, "runs");
	int n_runs = (int)json_array_size(runs), rc = 0;
	json_t *rec = json_object_get(m, "recommended_workers");
	char title[160], label[96];

	if (!json_is_array(runs) || n_runs == 0)
		return gp_error(GP_EFORMAT, "workers measurements: \"runs\" is missing or empty");
	if (n_runs > CHART_MAX_PANELS)
		return gp_error(GP_EFORMAT, "workers measurements: %d runs, charts hold at most %d",
				n_runs, CHART_MAX_PANELS);
	int cols = n_runs <= 3 ? n_runs : n_runs <= 4 ? 2 : n_runs <= 9 ? 3 : 4;
	int rows = (n_runs + cols - 1) / cols;
	if (json_is_integer(rec))
		snprintf(title, sizeof(title),
			 "GPU utilization by data-loader workers (recommended: %lld)",
			 (long long)json_integer_value(rec));
	else
		snprintf(title, sizeof(title), "GPU utilization by data-loader workers");
	struct chart_figure *fig = chart_figure_new(rows, cols, 0, 0, title);
	if (!fig)
		return gp_error(GP_ENOMEM, "no memory for a chart");
	for (int i = 0; i < n_runs; i++) {
		json_t *run = json_array_get(runs, i);
		struct chart_panel *p = chart_figure_panel(fig, i);
		double workers = 0, mean = 0, idle = 0, *x = NULL, *y = NULL;
		char where[48];
		int n;
		snprintf(where, sizeof(where), "workers run %d", i);
		if ((rc = json_number_get(run, "workers", where, &workers)) < 0 ||
		    (rc = json_number_get(run, "mean_util", where, &mean)) < 0 ||
		    (rc = json_number_get(run, "idle_share", where, &idle)) < 0)
			goto free_fig;
		rc = workers_samples(json_object_get(run, "samples"), where, &x, &y, &n);
		if (rc == 0)
			rc = chart_panel_add_line(p, x, y, n,
						  (struct chart_line_style){ .color = CHART_BLUE,
									     .width_px = 1.6 },
						  "GPU utilization");
		free(x);
		free(y);
		if (rc < 0)
			goto free_fig;
		snprintf(label, sizeof(label), "%.0f worker%s: idle %.0f%% of the time", workers,
			 workers == 1 ? "" : "s", idle * 100);
		chart_panel_set_title(p, label);
		chart_panel_set_labels(p, "time (s)", "GPU utilization (%)");
		chart_panel_set_y_range(p, 0, 105);
		snprintf(label, sizeof(label), "mean %.1f%%", mean);
		if ((rc = chart_panel_add_hline(p, mean, CHART_RED, 1, label)) < 0)
			goto free_fig;
		snprintf(label, sizeof(label), "idle threshold %.0f%%", IDLE_THRESHOLD_PCT);
		if ((rc = chart_panel_add_hline(p, IDLE_THRESHOLD_PCT, CHART_ORANGE, 1, label)) < 0)
			goto free_fig;
	}
	rc = chart_figure_save(fig, path);
free_fig:
	chart_figure_free(fig);
	return rc;
}

static const struct {
	const char *command;
	const char *chart;
	int (*draw)(json_t *measurements, const char *path);
} plotters[] = {
	{ "maxbatch", "batch_size_memory_usage.png", plot_maxbatch },
	{ "workers", "gpu_utilization_comparison.png", plot_workers },
};

const char *plots_chart_name(const char *command)
{
	for (size_t i = 0; i < sizeof(plotters) / sizeof(plotters[0]); i++)
		if (!strcmp(plotters[i].command, command))
			return plotters[i].chart;
	return NULL;
}

int plots_draw(json_t *result, const char *out_dir)
{
	const char *command = json_string_value(json_object_get(result, "command"));
	json_t *m = json_object_get(result, "measurements");
	char path[4096];

	if (!command)
		return gp_error(GP_EFORMAT, "result has no \"command\"");
	if (!json_is_object(m))
		return gp_error(GP_EFORMAT, "result has no \"measurements\" object");
	for (size_t i = 0; i < sizeof(plotters) / sizeof(plotters[0]); i++) {
		if (strcmp(plotters[i].command, command))
			continue;
		GP_TRY(path_mkdirs(out_dir));
		if (snprintf(path, sizeof(path), "%s/%s", out_dir, plotters[i].chart) >=
		    (int)sizeof(path))
			return gp_error(GP_EINVAL, "output directory name too long");
		return plotters[i].draw(m, path);
	}
	return gp_error(GP_EUNSUPPORTED, "no charts for results of '%s'", command);
}
