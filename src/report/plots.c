/* One function per command that has charts; each reads its measurements as laid
 * out in docs/results.md and checks every field it uses. */
#include "report/plots.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"
#include "core/sort.h"
#include "ops/graph.h"
#include "report/monitor_report.h"
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
	gp_qsort(t, n, sizeof(*t), trial_by_batch);
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

	/* The CPU backend's cap is host memory, and its process memory the resident set;
	 * results without "device" came from the GPU. */
	const char *device = json_string_value(json_object_get(m, "device"));
	int cpu = device && !strcmp(device, "cpu");
	/* The largest batch confirmed over several steps and the one that keeps the
	 * margin free; older results have only the search's max_batch. */
	double largest = max_batch, largest_mib = -1, rec = 0, rec_mib = -1, margin_pct = 0,
	       margin_mib = 0;
	json_number_get(m, "largest_batch", "", &largest);
	json_number_get(m, "largest_mib", "", &largest_mib);
	json_number_get(m, "recommended_batch", "", &rec);
	json_number_get(m, "recommended_mib", "", &rec_mib);
	json_number_get(m, "margin_pct", "", &margin_pct);
	json_number_get(m, "margin_mib", "", &margin_mib);
	gp_error_clear();
	if (rec > 0)
		snprintf(title, sizeof(title), "%s%s%s: largest batch %.0f, recommended %.0f (%g%% margin)",
			 model ? model : "model", precision ? ", " : "", precision ? precision : "",
			 largest, rec, margin_pct);
	else
		snprintf(title, sizeof(title), "%s%s%s: largest batch %.0f", model ? model : "model",
			 precision ? ", " : "", precision ? precision : "", largest);
	fig = chart_figure_new(1, 1, 900, 560, title);
	if (!fig) {
		rc = gp_error(GP_ENOMEM, "no memory for a chart");
		goto free_all;
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_title(p, cpu ? "host memory by batch size (CPU backend)"
				     : "GPU memory by batch size");
	chart_panel_set_labels(p, "batch size", "memory (MiB)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	if ((rc = chart_panel_add_line(p, x_ok, peak, n_ok,
				       (struct chart_line_style){ .color = CHART_BLUE, .markers = 1 },
				       "peak allocated")) < 0 ||
	    (rc = chart_panel_add_line(p, x_ok, proc, n_ok,
				       (struct chart_line_style){ .color = CHART_GREEN, .markers = 1 },
				       cpu ? "process memory (resident set)"
				       : "process memory (nvidia-smi)")) < 0)
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
	snprintf(label, sizeof(label), cpu ? "memory cap %.0f MiB" : "GPU capacity %.0f MiB",
		 capacity_mib);
	if ((rc = chart_panel_add_hline(p, capacity_mib, CHART_PURPLE, 1, label)) < 0)
		goto free_fig;
	if (margin_mib > 0) {
		snprintf(label, sizeof(label), "less the %g%% margin: %.0f MiB", margin_pct,
			 capacity_mib - margin_mib);
		if ((rc = chart_panel_add_hline(p, capacity_mib - margin_mib, CHART_GREY, 1, label)) < 0)
			goto free_fig;
	}
	/* The first failure sits right beside the largest batch on the log axis: one dot
	 * and one label say both. */
	int oom_folded = 0;
	if (largest > 0 && largest_mib > 0) {
		if (oom >= 0) {
			snprintf(label, sizeof(label), "largest %.0f (out of memory at %.0f)", largest,
				 t[oom].batch);
			oom_folded = 1;
		} else {
			snprintf(label, sizeof(label), "largest %.0f", largest);
		}
		if ((rc = chart_panel_add_point(p, largest, largest_mib, CHART_BROWN, label)) < 0)
			goto free_fig;
	}
	if (rec > 0 && rec_mib > 0 && rec != largest) {
		snprintf(label, sizeof(label), "recommended %.0f", rec);
		if ((rc = chart_panel_add_point(p, rec, rec_mib, CHART_CYAN, label)) < 0)
			goto free_fig;
	}
	if (oom >= 0 && !oom_folded) {
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

/* One precision's points of an amp result, sorted by batch. */
struct amp_series {
	char name[16];
	int n, n_speedup;
	double *batch, *img_s, *speedup_batch, *speedup;
	double oom_batch; /* smallest batch that ran out of memory; 0: none */
};

#define AMP_MAX_SERIES 8

struct xy {
	double x, y;
	int i;
};

/* By x, then by position: stable, as repeated batches keep their order. */
static int xy_by_x(const void *a, const void *b)
{
	const struct xy *p = a, *q = b;
	if (p->x != q->x)
		return p->x < q->x ? -1 : 1;
	return (p->i > q->i) - (p->i < q->i);
}

/* Sort the pairs (x[i], y[i]) by x; a result may hold any number of cells. */
static int pairs_sort(double *x, double *y, int n)
{
	struct xy *v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return gp_error(GP_ENOMEM, "no memory to sort %d points", n);
	for (int i = 0; i < n; i++)
		v[i] = (struct xy){ x[i], y[i], i };
	gp_qsort(v, n, sizeof(*v), xy_by_x);
	for (int i = 0; i < n; i++) {
		x[i] = v[i].x;
		y[i] = v[i].y;
	}
	free(v);
	return 0;
}

/* A fixed colour per precision (indexed by enum precision), so charts of different
 * runs read alike. */
static struct chart_color amp_color(const char *precision, int i)
{
	const struct chart_color colors[] = { CHART_BLUE, CHART_ORANGE, CHART_GREEN, CHART_PURPLE };
	int k = names_find(train_precision_name_at, precision);
	return k >= 0 && k < 4 ? colors[k] : chart_palette(4 + i);
}

static int plot_amp(json_t *m, const char *path)
{
	json_t *cells = json_object_get(m, "cells");
	const char *model = json_string_value(json_object_get(m, "model"));
	const char *device = json_string_value(json_object_get(m, "device"));
	json_t *size = json_object_get(m, "size");
	size_t n = json_array_size(cells);
	struct amp_series series[AMP_MAX_SERIES];
	struct chart_figure *fig = NULL;
	int n_series = 0, rc = 0, have_fp32 = 0;
	double top_speedup = 1;
	char title[192], label[CHART_LABEL_MAX], size_str[32] = "";

	if (!json_is_array(cells) || n == 0)
		return gp_error(GP_EFORMAT, "amp measurements: \"cells\" is missing or empty");
	memset(series, 0, sizeof(series));
	for (size_t i = 0; i < n; i++) {
		json_t *c = json_array_get(cells, i);
		const char *prec = json_string_value(json_object_get(c, "precision"));
		const char *status = json_string_value(json_object_get(c, "status"));
		char where[48];
		double batch = 0, v = 0;
		snprintf(where, sizeof(where), "amp cell %zu", i);
		if ((rc = json_number_get(c, "batch", where, &batch)) < 0)
			goto free_all;
		/* a batch is an int; larger values overflow the conversions below */
		if (!(batch >= 1 && batch <= INT_MAX)) {
			rc = gp_error(GP_EFORMAT, "%s: \"batch\" must be from 1 to %d (got %g)", where,
				      INT_MAX, batch);
			goto free_all;
		}
		if (!prec || strlen(prec) >= sizeof(series[0].name)) {
			rc = gp_error(GP_EFORMAT, "%s: \"precision\" is missing or not a short string", where);
			goto free_all;
		}
		if (!status || (strcmp(status, "ok") && strcmp(status, "oom"))) {
			rc = gp_error(GP_EFORMAT, "%s: \"status\" must be \"ok\" or \"oom\"", where);
			goto free_all;
		}
		int s = 0;
		while (s < n_series && strcmp(series[s].name, prec))
			s++;
		if (s == n_series) {
			if (n_series == AMP_MAX_SERIES) {
				rc = gp_error(GP_EFORMAT, "amp measurements: more than %d precisions",
					      AMP_MAX_SERIES);
				goto free_all;
			}
			struct amp_series *ns = &series[n_series++];
			snprintf(ns->name, sizeof(ns->name), "%s", prec);
			ns->batch = calloc(n, sizeof(double));
			ns->img_s = calloc(n, sizeof(double));
			ns->speedup_batch = calloc(n, sizeof(double));
			ns->speedup = calloc(n, sizeof(double));
			if (!ns->batch || !ns->img_s || !ns->speedup_batch || !ns->speedup) {
				rc = gp_error(GP_ENOMEM, "no memory for %zu cells", n);
				goto free_all;
			}
		}
		struct amp_series *sr = &series[s];
		have_fp32 |= !strcmp(prec, "fp32");
		if (!strcmp(status, "oom")) {
			if (sr->oom_batch == 0 || batch < sr->oom_batch)
				sr->oom_batch = batch;
			continue;
		}
		if ((rc = json_number_get(c, "img_s", where, &v)) < 0)
			goto free_all;
		sr->batch[sr->n] = batch;
		sr->img_s[sr->n++] = v;
		/* null where fp32 did not train at this batch */
		json_t *sp = json_object_get(c, "speedup");
		if (json_is_number(sp)) {
			sr->speedup_batch[sr->n_speedup] = batch;
			sr->speedup[sr->n_speedup++] = json_number_value(sp);
			if (json_number_value(sp) > top_speedup)
				top_speedup = json_number_value(sp);
		} else if (sp && !json_is_null(sp)) {
			rc = gp_error(GP_EFORMAT, "%s: \"speedup\" is not a number or null", where);
			goto free_all;
		}
	}

	/* Both panels over the same batches (out-of-memory ones included), and room
	 * above the lines for the legend. */
	double b_lo = 0, b_hi = 0, top_img_s = 0, ticks[32], step = 1;
	for (size_t i = 0; i < n; i++) {
		double b = json_number_value(json_object_get(json_array_get(cells, i), "batch"));
		b_lo = i == 0 || b < b_lo ? b : b_lo;
		b_hi = b > b_hi ? b : b_hi;
	}
	if (b_hi == b_lo) { /* one batch size: in the middle */
		b_lo /= 2;
		b_hi *= 2;
	}
	b_lo = exp2(floor(log2(b_lo)));
	b_hi = exp2(ceil(log2(b_hi)));
	for (int s = 0; s < n_series; s++)
		for (int k = 0; k < series[s].n; k++)
			top_img_s = fmax(top_img_s, series[s].img_s[k]);
	if (top_img_s > 0)
		chart_ticks_nice(0, top_img_s * 1.3, 6, ticks, 32, &step);
	top_img_s = top_img_s > 0 ? ceil(top_img_s * 1.3 / step) * step : 1;

	if (json_is_number(size))
		snprintf(size_str, sizeof(size_str), " %.0fx%.0f", json_number_value(size),
			 json_number_value(size));
	snprintf(title, sizeof(title), "%s%s%s%s: FP32 against mixed precision",
		 model ? model : "model", size_str, device ? " on " : "", device ? device : "");
	fig = chart_figure_new(1, 2, 1400, 560, title);
	if (!fig) {
		rc = gp_error(GP_ENOMEM, "no memory for a chart");
		goto free_all;
	}
	struct chart_panel *tp = chart_figure_panel(fig, 0), *sp = chart_figure_panel(fig, 1);
	chart_panel_set_title(tp, "training throughput by batch size");
	chart_panel_set_labels(tp, "batch size", "throughput (img/s)");
	chart_panel_set_x_scale(tp, CHART_LOG2);
	chart_panel_set_title(sp, have_fp32 ? "speed-up over fp32 at the same batch size"
					    : "speed-up over fp32 (fp32 not measured)");
	chart_panel_set_labels(sp, "batch size", "speed-up over fp32 (x)");
	chart_panel_set_x_scale(sp, CHART_LOG2);
	chart_panel_set_x_range(tp, b_lo, b_hi);
	chart_panel_set_x_range(sp, b_lo, b_hi);
	chart_panel_set_y_range(tp, 0, top_img_s);
	for (int s = 0; s < n_series; s++) {
		struct amp_series *sr = &series[s];
		struct chart_line_style st = { .color = amp_color(sr->name, s), .markers = 1 };
		if ((rc = pairs_sort(sr->batch, sr->img_s, sr->n)) < 0 ||
		    (rc = pairs_sort(sr->speedup_batch, sr->speedup, sr->n_speedup)) < 0)
			goto free_fig;
		if (sr->oom_batch > 0)
			snprintf(label, sizeof(label), "%.15s (out of memory at %.0f)", sr->name,
				 sr->oom_batch);
		else
			snprintf(label, sizeof(label), "%.15s", sr->name);
		if ((rc = chart_panel_add_line(tp, sr->batch, sr->img_s, sr->n, st, label)) < 0)
			goto free_fig;
		if (!strcmp(sr->name, "fp32"))
			continue; /* fp32 is the reference line at 1 */
		if ((rc = chart_panel_add_line(sp, sr->speedup_batch, sr->speedup, sr->n_speedup, st,
					       sr->n_speedup ? sr->name : NULL)) < 0)
			goto free_fig;
	}
	if (have_fp32 && (rc = chart_panel_add_hline(sp, 1.0, CHART_BLUE, 1, "fp32 (1.0x)")) < 0)
		goto free_fig;
	/* From zero, with room above the best speed-up and the reference line. */
	chart_panel_set_y_range(sp, 0, fmax(2, ceil(top_speedup * 1.3)));
	rc = chart_figure_save(fig, path);
free_fig:
	chart_figure_free(fig);
free_all:
	for (int s = 0; s < n_series; s++) {
		free(series[s].batch);
		free(series[s].img_s);
		free(series[s].speedup_batch);
		free(series[s].speedup);
	}
	return rc;
}

/* scale: img/s of all ranks against the GPU count (log2), the ideal N x one GPU
 * dashed, PyTorch DDP beside where the run has it (--torch); and the efficiency of
 * both. The title and the x axis's name come from the settings. */
static int plot_scale(json_t *res, const char *path)
{
	json_t *runs = json_object_get(json_object_get(res, "measurements"), "runs");
	json_t *settings = json_object_get(res, "settings");
	int n = (int)json_array_size(runs), nt = 0, nte = 0;
	if (!json_is_array(runs) || n == 0)
		return gp_error(GP_EFORMAT, "scale: \"measurements.runs\" is missing or empty");
	if (n > 64)
		return gp_error(GP_EFORMAT, "scale: %d runs, at most 64", n);
	double x[64], img[64], ideal[64], eff[64], tx[64], timg[64], tex[64], teff[64];
	for (int i = 0; i < n; i++) {
		json_t *r = json_array_get(runs, i), *t = json_object_get(r, "torch");
		char where[48];
		snprintf(where, sizeof(where), "scale run %d", i);
		GP_TRY(json_number_get(r, "gpus", where, &x[i]));
		GP_TRY(json_number_get(r, "img_s", where, &img[i]));
		GP_TRY(json_number_get(r, "efficiency", where, &eff[i]));
		if (!(x[i] >= 1))
			return gp_error(GP_EFORMAT, "%s: \"gpus\" must be 1 or more", where);
		ideal[i] = img[0] / x[0] * x[i];
		eff[i] *= 100;
		const char *st = json_string_value(json_object_get(t, "status"));
		double v = 0;
		if (st && !strcmp(st, "ok") && json_number_get(t, "img_s", where, &v) == 0) {
			tx[nt] = x[i];
			timg[nt++] = v;
			if (json_is_number(json_object_get(t, "efficiency"))) {
				tex[nte] = x[i];
				teff[nte++] = 100 * json_number_value(json_object_get(t, "efficiency"));
			}
		}
		gp_error_clear();
	}
	const char *model = json_string_value(json_object_get(settings, "model"));
	const char *prec = json_string_value(json_object_get(settings, "precision"));
	const char *device = json_string_value(json_object_get(settings, "device"));
	json_t *batch = json_object_get(settings, "batch_per_gpu");
	const char *x_label = device && !strcmp(device, "cpu") ? "ranks (CPU processes)" : "GPUs";
	const char *transport = json_string_value(json_object_get(settings, "nccl_transport"));
	char title[256];
	/* a socket run says so: its curve is not the machine's NVLink one */
	snprintf(title, sizeof(title), "%s %s, batch %lld per GPU%s", model ? model : "?",
		 prec ? prec : "?", (long long)json_integer_value(batch),
		 transport && !strcmp(transport, "socket") ? ", NCCL over sockets" : "");
	struct chart_figure *fig = chart_figure_new(1, 2, 0, 0, title);
	if (!fig)
		return gp_error(GP_ENOMEM, "cannot make the chart");
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_title(p, "throughput");
	chart_panel_set_labels(p, x_label, "img/s (all ranks)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	chart_panel_add_line(p, x, ideal, n, (struct chart_line_style){ CHART_GREY, 0, 1, 0, 0 },
			     "ideal (N x 1 GPU)");
	chart_panel_add_line(p, x, img, n, (struct chart_line_style){ CHART_BLUE, 0, 0, 1, 0 },
			     nt ? "gpuperf" : "measured");
	if (nt)
		chart_panel_add_line(p, tx, timg, nt, (struct chart_line_style){ CHART_ORANGE, 0, 0, 1, 0 },
				     "PyTorch DDP");
	p = chart_figure_panel(fig, 1);
	chart_panel_set_title(p, "scaling efficiency");
	chart_panel_set_labels(p, x_label, "efficiency (%)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	double lo = 100;
	for (int i = 0; i < n; i++)
		lo = eff[i] < lo ? eff[i] : lo;
	for (int i = 0; i < nte; i++)
		lo = teff[i] < lo ? teff[i] : lo;
	chart_panel_set_y_range(p, lo < 85 ? floor((lo - 5) / 10) * 10 : 80, 102);
	chart_panel_add_hline(p, 100, CHART_GREY, 1, "ideal");
	chart_panel_add_line(p, x, eff, n, (struct chart_line_style){ nt ? CHART_BLUE : CHART_ORANGE, 0, 0, 1, 0 },
			     nt ? "gpuperf" : "measured");
	if (nte)
		chart_panel_add_line(p, tex, teff, nte, (struct chart_line_style){ CHART_ORANGE, 0, 0, 1, 0 },
				     "PyTorch DDP");
	int rc = chart_figure_save(fig, path);
	chart_figure_free(fig);
	return rc;
}

static const struct {
	const char *command;
	const char *chart;
	int (*draw)(json_t *measurements, const char *path);
	int (*draw_result)(json_t *result, const char *path); /* one that reads the settings */
} plotters[] = {
	{ "maxbatch", "batch_size_memory_usage.png", plot_maxbatch },
	{ "workers", "gpu_utilization_comparison.png", plot_workers },
	{ "amp", "amp_speedup.png", plot_amp },
	{ "monitor", "monitor.png", monitor_plot },
	{ "scale", "scaling.png", NULL, plot_scale },
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
		return plotters[i].draw ? plotters[i].draw(m, path) : plotters[i].draw_result(result, path);
	}
	return gp_error(GP_EUNSUPPORTED, "no charts for results of '%s'", command);
}

/* A train result's per-epoch history: at the top level (train.json) or, in older
 * or other writers' documents, under "measurements". NULL when there is none. */
static json_t *history_of(json_t *result)
{
	json_t *h = json_object_get(result, "history");
	if (!json_is_array(h))
		h = json_object_get(json_object_get(result, "measurements"), "history");
	return json_is_array(h) ? h : NULL;
}

/* The settings that tell runs apart besides their seed, in this order: the first two
 * that differ between any two of the runs name the families in the legend. */
static const char *const history_keys[] = { "model",  "precision", "decode", "batch",
					    "size",   "optimizer", "epochs", "workers",
					    "layout", "lr" };
#define HISTORY_KEYS (sizeof(history_keys) / sizeof(history_keys[0]))

/* A setting of the run, an object by its "name" (older tests/torch/tta.py results
 * kept the optimizer and schedule as {"name": "sgd", ...}, gpuperf as "sgd"). */
static json_t *history_setting(json_t *result, const char *key)
{
	json_t *v = json_object_get(json_object_get(result, "settings"), key);
	json_t *name = json_is_object(v) ? json_object_get(v, "name") : NULL;
	return json_is_string(name) ? name : v;
}

/* The keys (indexes into history_keys) whose values differ between the runs. */
static int history_differing(json_t *const *results, int n, int *keys)
{
	int m = 0;
	for (size_t k = 0; k < HISTORY_KEYS && m < 2; k++) {
		json_t *first = history_setting(results[0], history_keys[k]);
		for (int i = 1; i < n; i++) {
			json_t *v = history_setting(results[i], history_keys[k]);
			if (!(first && v ? json_equal(first, v) : first == v)) {
				keys[m++] = (int)k;
				break;
			}
		}
	}
	return m;
}

void plots_history_label(json_t *const *results, const char *const *names, int n, int i,
			 char *label, size_t cap, char *family, size_t family_cap)
{
	const char *engine = json_string_value(json_object_get(results[i], "engine"));
	json_t *seed = history_setting(results[i], "seed");
	int keys[2], m = history_differing(results, n, keys);
	size_t len = (size_t)snprintf(family, family_cap, "%s", engine ? engine : "gpuperf");
	for (int k = 0; k < m && len < family_cap; k++) {
		json_t *v = history_setting(results[i], history_keys[keys[k]]);
		char val[48];
		if (json_is_string(v))
			snprintf(val, sizeof(val), "%s", json_string_value(v));
		else if (json_is_integer(v))
			snprintf(val, sizeof(val), "%lld", (long long)json_integer_value(v));
		else if (json_is_real(v))
			snprintf(val, sizeof(val), "%g", json_real_value(v));
		else
			snprintf(val, sizeof(val), "-");
		len += (size_t)snprintf(family + len, family_cap - len, ", %s %s",
					history_keys[keys[k]], val);
	}
	if (json_is_integer(seed))
		snprintf(label, cap, "%s, seed %lld", family, (long long)json_integer_value(seed));
	else if (m || engine)
		snprintf(label, cap, "%s", family);
	else
		snprintf(label, cap, "%s", names[i]);
}

/* One line per run, labelled by engine (gpuperf unless the result says otherwise, as
 * tests/torch/tta.py's "pytorch" does), the settings that differ between the runs
 * (plots_history_label) and seed. A family is an engine with those settings: its
 * seeds share a colour, gpuperf's first family blue, PyTorch's orange and dashed. */
int plots_draw_history(json_t *const *results, const char *const *names, int n,
		       const char *path)
{
	if (n < 1 || n > CHART_MAX_LINES)
		return gp_error(GP_EINVAL, "a history chart takes 1 to %d runs (got %d)",
				CHART_MAX_LINES, n);
	struct chart_figure *fig = chart_figure_new(1, 1, 800, 500,
						    "validation top-1 against wall time");
	if (!fig)
		return gp_error(GP_ENOMEM, "no memory for a chart");
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_labels(p, "wall time since the run began (s)", "val top-1 (%)");
	int rc = 0, n_families = 0;
	char families[CHART_MAX_LINES][CHART_LABEL_MAX];
	double t_max = 0;
	for (int i = 0; i < n && rc == 0; i++) {
		json_t *hist = history_of(results[i]);
		size_t len = json_array_size(hist), k = 0;
		double *x = malloc((len ? len : 1) * sizeof(double));
		double *y = malloc((len ? len : 1) * sizeof(double));
		if (!x || !y) {
			rc = gp_error(GP_ENOMEM, "no memory for %zu epochs", len);
		} else {
			for (size_t e = 0; e < len; e++) {
				json_t *h = json_array_get(hist, e);
				json_t *t = json_object_get(h, "time_s"), *a = json_object_get(h, "val_top1");
				if (!json_is_number(a)) /* an epoch without validation */
					continue;
				if (!json_is_number(t)) {
					rc = gp_error(GP_EFORMAT, "%s: epoch %zu has val_top1 but no time_s",
						      names[i], e + 1);
					break;
				}
				x[k] = json_number_value(t);
				y[k++] = json_number_value(a);
			}
			if (rc == 0 && k == 0)
				rc = gp_error(GP_EFORMAT, "%s: no validated epoch in \"history\" (a run "
					      "with --epochs and a val/ split has them)", names[i]);
		}
		if (rc == 0) {
			const char *engine = json_string_value(json_object_get(results[i], "engine"));
			char label[CHART_LABEL_MAX], family[CHART_LABEL_MAX];
			plots_history_label(results, names, n, i, label, sizeof(label), family,
					    sizeof(family));
			int torch = engine && !strcmp(engine, "pytorch"), f = 0;
			while (f < n_families && strcmp(families[f], family))
				f++;
			if (f == n_families)
				snprintf(families[n_families++], sizeof(families[0]), "%s", family);
			struct chart_line_style st = { .markers = 1, .dashed = torch };
			if (torch)
				st.color = CHART_ORANGE;
			else
				st.color = f == 0 ? CHART_BLUE : chart_palette(2 + f);
			for (size_t e = 0; e < k; e++)
				t_max = x[e] > t_max ? x[e] : t_max;
			rc = chart_panel_add_line(p, x, y, (int)k, st, label);
		}
		free(x);
		free(y);
	}
	if (rc == 0) {
		chart_panel_set_x_range(p, 0, t_max > 0 ? t_max * 1.02 : 1);
		chart_panel_set_y_range(p, 0, 100); /* an accuracy: not the fit's 0..120 */
		rc = chart_figure_save(fig, path);
	}
	chart_figure_free(fig);
	return rc;
}
