/* One writer feeds both reports: every heading, paragraph, table and chart goes to
 * the Markdown and the HTML file at once, so the two cannot say different things. */
#include "report/bench_report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/error.h"
#include "core/file.h"
#include "report/html.h"
#include "report/result.h"

#define REP_MAX_COLS 12
#define REP_MAX_BARS 64

struct rep {
	FILE *md, *html;
	const char *dir;
};

static void rep_vtext(struct rep *r, const char *fmt, va_list ap, char *buf, size_t cap)
{
	(void)r;
	vsnprintf(buf, cap, fmt, ap);
}

static void rep_h(struct rep *r, int level, const char *id, const char *fmt, ...) GP_PRINTF(4, 5);
static void rep_h(struct rep *r, int level, const char *id, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	rep_vtext(r, fmt, ap, buf, sizeof(buf));
	va_end(ap);
	fprintf(r->md, "\n%.*s %s\n\n", level, "######", buf);
	if (id)
		fprintf(r->html, "<h%d id=\"%s\">", level, id);
	else
		fprintf(r->html, "<h%d>", level);
	html_escape(r->html, buf);
	fprintf(r->html, "</h%d>\n", level);
}

/* A paragraph; cls styles it in HTML ("note", "source"), NULL for plain. */
static void rep_p(struct rep *r, const char *cls, const char *fmt, ...) GP_PRINTF(3, 4);
static void rep_p(struct rep *r, const char *cls, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	rep_vtext(r, fmt, ap, buf, sizeof(buf));
	va_end(ap);
	fprintf(r->md, cls && !strcmp(cls, "source") ? "_%s_\n\n" : "%s\n\n", buf);
	if (cls)
		fprintf(r->html, "<p class=\"%s\">", cls);
	else
		fputs("<p>", r->html);
	html_escape(r->html, buf);
	fputs("</p>\n", r->html);
}

static void rep_list_begin(struct rep *r, int ordered)
{
	fputs(ordered ? "<ol>\n" : "<ul>\n", r->html);
}

static void rep_item(struct rep *r, int ordered, int i, const char *text)
{
	fprintf(r->md, ordered ? "%d. %s\n" : "- %.0d%s\n", ordered ? i + 1 : 0, text);
	fputs("<li>", r->html);
	html_escape(r->html, text);
	fputs("</li>\n", r->html);
}

static void rep_list_end(struct rep *r, int ordered)
{
	fputs(ordered ? "</ol>\n" : "</ul>\n", r->html);
	fputs("\n", r->md);
}

struct rep_table {
	int n_cols;
};

/* Columns as "a\tb\tc". */
static void rep_table_begin(struct rep *r, struct rep_table *t, const char *cols)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", cols);
	t->n_cols = 0;
	fputs("<table>\n<tr>", r->html);
	fputs("|", r->md);
	for (char *c = strtok(buf, "\t"); c; c = strtok(NULL, "\t")) {
		fputs("<th>", r->html);
		html_escape(r->html, c);
		fputs("</th>", r->html);
		fprintf(r->md, " %s |", c);
		t->n_cols++;
	}
	fputs("</tr>\n", r->html);
	fputs("\n|", r->md);
	for (int i = 0; i < t->n_cols; i++)
		fputs(i ? "---:|" : "---|", r->md);
	fputs("\n", r->md);
}

static void rep_row(struct rep *r, struct rep_table *t, const char *fmt, ...) GP_PRINTF(3, 4);
static void rep_row(struct rep *r, struct rep_table *t, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fputs("<tr>", r->html);
	fputs("|", r->md);
	char *p = buf;
	for (int i = 0; i < t->n_cols; i++) {
		char *tab = strchr(p, '\t');
		if (tab)
			*tab = 0;
		fputs("<td>", r->html);
		html_escape(r->html, p);
		fputs("</td>", r->html);
		for (char *q = p; *q; q++)
			if (*q == '|')
				*q = '/';
		fprintf(r->md, " %s |", p);
		p = tab ? tab + 1 : p + strlen(p);
	}
	fputs("</tr>\n", r->html);
	fputs("\n", r->md);
}

static void rep_table_end(struct rep *r, const char *source)
{
	fputs("</table>\n", r->html);
	fputs("\n", r->md);
	if (source)
		rep_p(r, "source", "from %s", source);
}

/* A chart: inline SVG in the HTML; in Markdown the PNG the command drew (png, may be
 * NULL) or nothing, the table beside it carrying the numbers. */
static void rep_chart(struct rep *r, const char *title, const char *unit, const char *format,
		      const struct html_bar *bars, int n, const char *source, const char *png)
{
	html_svg_bars(r->html, title, unit, format, bars, n, source);
	if (png) {
		char path[4500];
		snprintf(path, sizeof(path), "%s/%s", r->dir, png);
		if (access(path, R_OK) == 0)
			fprintf(r->md, "![%s](%s)\n\n", title, png);
	}
}

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

/* "12.3" or "n/a" */
static const char *fmt_num(char *buf, size_t cap, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(buf, cap, fmt, v);
	else
		snprintf(buf, cap, "n/a");
	return buf;
}

/* A stage's result (NULL when it failed or is missing; the caller frees). */
static json_t *stage_load(const char *dir, json_t *stage, int raw)
{
	char path[4500];
	json_t *j = NULL;
	if (strcmp(str(stage, "status"), "ok") || strstr(str(stage, "result"), ".."))
		return NULL;
	snprintf(path, sizeof(path), "%s/%s", dir, str(stage, "result"));
	if (raw)
		j = json_load_file(path, 0, NULL);
	else if (result_read(path, &j) < 0)
		gp_error_clear();
	return j;
}

static json_t *meas(json_t *res)
{
	return json_object_get(res, "measurements");
}

/* What the summary says: headline figures and findings, gathered while the
 * sections are written, printed first. */
#define REP_MAX_LINES 16
struct summary {
	char head[REP_MAX_LINES][320];
	int n_head;
	char find[REP_MAX_LINES][400];
	int prio[REP_MAX_LINES];
	int n_find;
};

static void sum_head(struct summary *s, const char *fmt, ...) GP_PRINTF(2, 3);
static void sum_head(struct summary *s, const char *fmt, ...)
{
	va_list ap;
	if (s->n_head >= REP_MAX_LINES)
		return;
	va_start(ap, fmt);
	vsnprintf(s->head[s->n_head++], sizeof(s->head[0]), fmt, ap);
	va_end(ap);
}

/* A finding; the three of lowest prio make the summary. */
static void sum_find(struct summary *s, int prio, const char *fmt, ...) GP_PRINTF(3, 4);
static void sum_find(struct summary *s, int prio, const char *fmt, ...)
{
	va_list ap;
	if (s->n_find >= REP_MAX_LINES)
		return;
	s->prio[s->n_find] = prio;
	va_start(ap, fmt);
	vsnprintf(s->find[s->n_find++], sizeof(s->find[0]), fmt, ap);
	va_end(ap);
}

static void section_info(struct rep *r, json_t *stage, json_t *info)
{
	struct rep_table t;
	char a[32], b[32], c[32], d[32];
	json_t *tb = json_object_get(info, "training_bytes");
	rep_h(r, 3, NULL, "%s", str(info, "model"));
	rep_table_begin(r, &t, "figure\tvalue");
	rep_row(r, &t, "parameters\t%.0f", num(info, "params"));
	rep_row(r, &t, "forward GMACs per image (%dx%d)\t%s", (int)num(info, "size"),
		(int)num(info, "size"), fmt_num(a, sizeof(a), "%.3f", num(info, "forward_macs_per_image") / 1e9));
	rep_row(r, &t, "weights + gradients + optimizer (MiB)\t%s",
		fmt_num(b, sizeof(b), "%.1f", (num(tb, "weights") + num(tb, "gradients") +
					       num(tb, "optimizer")) / (1024.0 * 1024)));
	rep_row(r, &t, "activations kept for backward at batch %d (MiB)\t%s", (int)num(info, "batch"),
		fmt_num(c, sizeof(c), "%.1f", num(tb, "activations_kept_for_backward") / (1024.0 * 1024)));
	rep_row(r, &t, "activation arena peak (MiB)\t%s",
		fmt_num(d, sizeof(d), "%.1f", num(tb, "activation_arena_peak") / (1024.0 * 1024)));
	rep_table_end(r, str(stage, "result"));
}

static void section_compare(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *models = json_object_get(meas(res), "models"), *m;
	struct html_bar bars[REP_MAX_BARS], mem[REP_MAX_BARS];
	int n = 0, best = -1;
	size_t i;
	struct rep_table t;
	char a[32], b[32], c[32], d[32], e[32];
	rep_table_begin(r, &t, "model\tparameters (M)\tbatch\tms/step\timg/s\tpeak (MiB)\tpredicted (MiB)");
	json_array_foreach(models, i, m) {
		rep_row(r, &t, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s", str(m, "model"),
			fmt_num(a, sizeof(a), "%.2f", num(m, "params_m")), num(m, "batch"),
			fmt_num(b, sizeof(b), "%.2f", num(m, "ms_per_step")),
			fmt_num(c, sizeof(c), "%.1f", num(m, "img_s")),
			fmt_num(d, sizeof(d), "%.1f", num(m, "alloc_peak_mib")),
			fmt_num(e, sizeof(e), "%.1f", num(m, "predicted_peak_mib")));
		if (n < REP_MAX_BARS) {
			bars[n] = (struct html_bar){ str(m, "model"), num(m, "img_s"), 0 };
			mem[n] = (struct html_bar){ str(m, "model"), num(m, "alloc_peak_mib"), 0 };
			if (best < 0 || num(m, "img_s") > bars[best].value)
				best = n;
			n++;
		}
	}
	rep_table_end(r, str(stage, "result"));
	rep_chart(r, "training throughput by model", "img/s", "%.1f", bars, n, str(stage, "result"), NULL);
	rep_chart(r, "peak engine memory by model", "MiB", "%.1f", mem, n, str(stage, "result"), NULL);
	for (int k = 0; k < n && k < 4; k++)
		sum_head(s, "%s trains at %.1f img/s (batch %.0f, fp32; compare)", bars[k].label,
			 bars[k].value, num(json_array_get(models, k), "batch"));
}

static void section_amp(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *m = meas(res), *cells = json_object_get(m, "cells"), *c;
	struct html_bar bars[REP_MAX_BARS];
	char labels[REP_MAX_BARS][48];
	int n = 0, best = -1, best_sp = -1;
	size_t i;
	struct rep_table t;
	char a[32], b[32], d[32], e[32], f[32], g[32], h[32];
	rep_p(r, NULL, "%s, %.0fx%.0f, %.0f steps per cell on %s.", str(m, "model"), num(m, "size"),
	      num(m, "size"), num(m, "steps"), str(m, "device"));
	rep_table_begin(r, &t, "batch\tprecision\tstatus\tms/step\timg/s\tspeed-up over fp32\tpeak (MiB)"
			"\tTFLOP/s\tMFU (%)\tJ/image");
	json_array_foreach(cells, i, c) {
		json_t *rep = json_object_get(c, "repeat");
		char spread[48] = "";
		if (rep)
			snprintf(spread, sizeof(spread), " ± %.1f", num(json_object_get(rep, "img_s"), "std"));
		rep_row(r, &t, "%.0f\t%s\t%s\t%s\t%s%s\t%s\t%s\t%s\t%s\t%s", num(c, "batch"),
			str(c, "precision"), str(c, "status"),
			fmt_num(a, sizeof(a), "%.2f", num(c, "ms_per_step")),
			fmt_num(b, sizeof(b), "%.1f", num(c, "img_s")), spread,
			fmt_num(d, sizeof(d), "%.2fx", num(c, "speedup")),
			fmt_num(e, sizeof(e), "%.1f", num(c, "peak_mib")),
			fmt_num(f, sizeof(f), "%.2f", num(c, "tflops")),
			fmt_num(g, sizeof(g), "%.1f", 100 * num(c, "mfu")),
			fmt_num(h, sizeof(h), "%.3f", num(c, "energy_j_per_image")));
		if (n < REP_MAX_BARS) {
			snprintf(labels[n], sizeof(labels[n]), "batch %.0f %s", num(c, "batch"),
				 str(c, "precision"));
			bars[n] = (struct html_bar){ labels[n], num(c, "img_s"), 0 };
			if (isfinite(bars[n].value) && (best < 0 || bars[n].value > bars[best].value))
				best = n;
			if (isfinite(num(c, "speedup")) && strcmp(str(c, "precision"), "fp32") &&
			    (best_sp < 0 || num(c, "speedup") > num(json_array_get(cells, best_sp), "speedup")))
				best_sp = (int)i;
			n++;
		}
	}
	rep_table_end(r, str(stage, "result"));
	if (best >= 0)
		bars[best].highlight = 1;
	rep_chart(r, "img/s by batch size and precision (orange: the fastest)", "img/s", "%.1f", bars,
		  n, str(stage, "result"), "amp/amp_speedup.png");
	if (best >= 0) {
		json_t *bc = json_array_get(cells, best);
		char mfu[48] = "";
		if (isfinite(num(bc, "mfu")))
			snprintf(mfu, sizeof(mfu), ", MFU %.1f%%", 100 * num(bc, "mfu"));
		sum_head(s, "fastest amp cell: %s at batch %.0f, %.1f img/s%s (%s; amp)",
			 str(bc, "precision"), num(bc, "batch"), num(bc, "img_s"), mfu, str(m, "model"));
	}
	if (best_sp >= 0) {
		json_t *bc = json_array_get(cells, best_sp);
		double sp = num(bc, "speedup");
		if (sp > 1.1)
			sum_find(s, 1, "Mixed precision pays: %s trains %s %.2fx as fast as fp32 at batch "
				 "%.0f (%.1f img/s); train with --precision %s.", str(m, "model"),
				 str(bc, "precision"), sp, num(bc, "batch"), num(bc, "img_s"),
				 str(bc, "precision"));
		else
			sum_find(s, 5, "No precision beat fp32 by more than 10%% on %s (best %.2fx, %s at "
				 "batch %.0f).", str(m, "model"), sp, str(bc, "precision"), num(bc, "batch"));
	}
}

static void section_maxbatch(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *m = meas(res), *trials = json_object_get(m, "trials"), *t1;
	struct html_bar bars[REP_MAX_BARS];
	char labels[REP_MAX_BARS][32];
	int n = 0;
	size_t i;
	struct rep_table t;
	char a[32], b[32], c[32];
	rep_p(r, NULL, "%s, %s, on %s: capacity %.0f MiB; largest batch %.0f (%s), recommended %.0f "
	      "(leaves %.0f%% free).", str(m, "model"), str(m, "precision"), str(m, "device"),
	      num(m, "capacity_mib"), num(m, "largest_batch"),
	      json_is_true(json_object_get(m, "confirmed")) ? "confirmed" : "not confirmed",
	      num(m, "recommended_batch"), num(m, "margin_pct"));
	rep_table_begin(r, &t, "batch\ttrains\tpeak (MiB)\tpredicted (MiB)\tms/step");
	json_array_foreach(trials, i, t1) {
		int ok = json_is_true(json_object_get(t1, "ok"));
		rep_row(r, &t, "%.0f\t%s\t%s\t%s\t%s", num(t1, "batch"), ok ? "yes" : "out of memory",
			fmt_num(a, sizeof(a), "%.1f", num(t1, "peak_alloc_mib")),
			fmt_num(b, sizeof(b), "%.1f", num(t1, "predicted_mib")),
			fmt_num(c, sizeof(c), "%.2f", num(t1, "step_ms")));
		if (n < REP_MAX_BARS && ok) {
			snprintf(labels[n], sizeof(labels[n]), "batch %.0f", num(t1, "batch"));
			bars[n] = (struct html_bar){ labels[n], num(t1, "peak_alloc_mib"),
						     num(t1, "batch") == num(m, "largest_batch") };
			n++;
		}
	}
	rep_table_end(r, str(stage, "result"));
	rep_chart(r, "peak memory of each batch that trained", "MiB", "%.1f", bars, n,
		  str(stage, "result"), "maxbatch/batch_size_memory_usage.png");
	sum_head(s, "largest batch of %s (%s): %.0f; recommended %.0f (maxbatch)", str(m, "model"),
		 str(m, "precision"), num(m, "largest_batch"), num(m, "recommended_batch"));
	sum_find(s, 3, "The largest batch that trains %s in %s is %.0f; %.0f leaves %.0f%% of the "
		 "memory free: %s", str(m, "model"), str(m, "precision"), num(m, "largest_batch"),
		 num(m, "recommended_batch"), num(m, "margin_pct"), str(m, "train_command"));
}

static void section_workers(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *m = meas(res), *runs = json_object_get(m, "runs"), *w;
	struct html_bar bars[REP_MAX_BARS];
	char labels[REP_MAX_BARS][32];
	int n = 0;
	size_t i;
	struct rep_table t;
	char a[32], b[32], c[32], d[32];
	rep_table_begin(r, &t, "workers\tmean GPU utilization (%)\tidle share\timg/s\tdata wait (ms)");
	json_array_foreach(runs, i, w) {
		rep_row(r, &t, "%.0f\t%s\t%s\t%s\t%s", num(w, "workers"),
			fmt_num(a, sizeof(a), "%.1f", num(w, "mean_util")),
			fmt_num(b, sizeof(b), "%.2f", num(w, "idle_share")),
			fmt_num(c, sizeof(c), "%.1f", num(w, "img_s")),
			fmt_num(d, sizeof(d), "%.2f", num(w, "data_wait_ms")));
		if (n < REP_MAX_BARS) {
			snprintf(labels[n], sizeof(labels[n]), "%.0f workers", num(w, "workers"));
			bars[n] = (struct html_bar){ labels[n], num(w, "img_s"),
						     num(w, "workers") == num(m, "recommended_workers") };
			n++;
		}
	}
	rep_table_end(r, str(stage, "result"));
	rep_chart(r, "img/s by data-loader workers (orange: recommended)", "img/s", "%.1f", bars, n,
		  str(stage, "result"), "workers/gpu_utilization_comparison.png");
	if (isfinite(num(m, "recommended_workers"))) {
		sum_head(s, "recommended data-loader workers: %.0f (workers)", num(m, "recommended_workers"));
		/* the recommended run against the one without workers */
		json_t *rec = NULL, *zero = NULL;
		json_array_foreach(runs, i, w) {
			if (num(w, "workers") == num(m, "recommended_workers"))
				rec = w;
			if (num(w, "workers") == 0)
				zero = w;
		}
		if (rec && zero && rec != zero)
			sum_find(s, 4, "%.0f data-loader workers train at %.1f img/s against %.1f with "
				 "none (data wait %.2f ms per step against %.2f).",
				 num(m, "recommended_workers"), num(rec, "img_s"), num(zero, "img_s"),
				 num(rec, "data_wait_ms"), num(zero, "data_wait_ms"));
		else
			sum_find(s, 4, "%.0f data-loader workers keep the training fed.",
				 num(m, "recommended_workers"));
	}
}

static void section_train(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *m = meas(res);
	struct rep_table t;
	char a[32], b[32], c[32], d[32], e[32], f[32];
	rep_table_begin(r, &t, "model\tworkers\timg/s\tms/step\tdata wait (% of the step)\tTFLOP/s"
			"\tMFU (%)\tJ/image");
	rep_row(r, &t, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s", str(m, "model"), num(m, "workers"),
		fmt_num(a, sizeof(a), "%.1f", num(m, "img_s")),
		fmt_num(b, sizeof(b), "%.2f", num(m, "ms_per_step")),
		fmt_num(c, sizeof(c), "%.1f", num(m, "data_wait_pct")),
		fmt_num(d, sizeof(d), "%.2f", num(m, "tflops")),
		fmt_num(e, sizeof(e), "%.1f", 100 * num(m, "mfu")),
		fmt_num(f, sizeof(f), "%.3f", num(m, "energy_j_per_image")));
	rep_table_end(r, str(stage, "result"));
	sum_head(s, "end-to-end training on the data: %.1f img/s, data wait %.1f%% of the step (train)",
		 num(m, "img_s"), num(m, "data_wait_pct"));
}

/* PyTorch DDP's figures of a scale run (scale --torch): its "torch" object when it
 * measured, else NULL. */
static json_t *scale_torch_ok(json_t *run)
{
	json_t *t = json_object_get(run, "torch");
	return !strcmp(str(t, "status"), "ok") ? t : NULL;
}

/* Data parallel over the host's GPUs: throughput, per-GPU rate and scaling efficiency
 * by GPU count, and PyTorch DDP's img/s with gpuperf's ratio where bench ran it
 * (--torch); the summary names the efficiency at the largest count (and the ratio). */
static void section_scale(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *runs = json_object_get(meas(res), "runs"), *run;
	struct rep_table t;
	size_t i;
	struct html_bar bars[16];
	char labels[16][32];
	int n = 0, torch = 0;
	const char *model = str(json_object_get(res, "settings"), "model");
	json_array_foreach(runs, i, run)
		torch |= scale_torch_ok(run) != NULL;
	rep_table_begin(r, &t, torch ? "GPUs\timg/s\timg/s per GPU\tscaling efficiency\tms/step\t"
				       "exposed communication (ms)\tPyTorch DDP img/s\tgpuperf / PyTorch DDP"
				     : "GPUs\timg/s\timg/s per GPU\tscaling efficiency\tms/step\t"
				       "exposed communication (ms)");
	json_array_foreach(runs, i, run) {
		char a[32], b[32], c[32], d[32], e[32], f[32] = "-", g[32] = "-";
		json_t *tr = scale_torch_ok(run);
		if (tr) {
			fmt_num(f, sizeof(f), "%.1f", num(tr, "img_s"));
			fmt_num(g, sizeof(g), "%.2fx", num(tr, "ratio"));
		}
		rep_row(r, &t, "%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s", num(run, "gpus"),
			fmt_num(a, sizeof(a), "%.1f", num(run, "img_s")),
			fmt_num(b, sizeof(b), "%.1f", num(run, "img_s_per_gpu")),
			fmt_num(c, sizeof(c), "%.1f%%", 100 * num(run, "efficiency")),
			fmt_num(d, sizeof(d), "%.2f", num(run, "ms_per_step")),
			fmt_num(e, sizeof(e), "%.2f", num(run, "exposed_comm_ms")), f, g);
		if (n < 16) {
			snprintf(labels[n], sizeof(labels[n]), "%.0f GPUs", num(run, "gpus"));
			bars[n] = (struct html_bar){ labels[n], num(run, "img_s"), 0 };
			n++;
		}
	}
	rep_table_end(r, str(stage, "result"));
	if (n > 0)
		rep_chart(r, "training throughput by GPU count", "img/s", "%.0f", bars, n,
			  str(stage, "result"), "scale/scaling.png");
	if (n > 1) {
		json_t *last = json_array_get(runs, json_array_size(runs) - 1);
		json_t *tr = scale_torch_ok(last);
		char beside[96] = "";
		if (tr && isfinite(num(tr, "ratio")))
			snprintf(beside, sizeof(beside), ", %.2fx PyTorch DDP's %.1f img/s", num(tr, "ratio"),
				 num(tr, "img_s"));
		sum_head(s, "%s on %.0f GPUs: %.1f img/s, %.1f%% scaling efficiency%s (scale)", model,
			 num(last, "gpus"), num(last, "img_s"), 100 * num(last, "efficiency"), beside);
		if (num(last, "efficiency") < 0.9)
			sum_find(s, 1, "data parallel loses %.0f%% to communication and stragglers on "
				 "%.0f GPUs: see the scale table's exposed communication (scale)",
				 100 * (1 - num(last, "efficiency")), num(last, "gpus"));
	}
}

static void section_profile(struct rep *r, struct summary *s, json_t *stage, json_t *res)
{
	json_t *m = meas(res), *an = json_object_get(m, "analysis");
	json_t *mean = json_object_get(an, "mean_step"), *meta = json_object_get(an, "meta");
	json_t *advice = json_object_get(an, "advice"), *op;
	struct html_bar bars[4];
	struct rep_table t;
	size_t i;
	char a[32], b[32];
	const char *src = str(stage, "result");
	int gpu = num(an, "kernels") > 0;
	char busy[64] = "";
	if (gpu)
		snprintf(busy, sizeof(busy), ", GPU busy %.0f%% of the step",
			 num(an, "gpu_busy_share") * 100);
	rep_p(r, NULL, "%s, batch %.0f, %s: %.2f ms per step profiled (%.2f ms without the "
	      "profiler)%s.", str(meta, "model"), num(meta, "batch"), str(meta, "precision"),
	      num(m, "profiled_ms_per_step"), num(m, "baseline_ms_per_step"), busy);
	bars[0] = (struct html_bar){ "data", num(mean, "stage_data_ms"), 0 };
	bars[1] = (struct html_bar){ "forward", num(mean, "stage_forward_ms"), 0 };
	bars[2] = (struct html_bar){ "backward", num(mean, "stage_backward_ms"), 0 };
	bars[3] = (struct html_bar){ "optimizer", num(mean, "stage_optimizer_ms"), 0 };
	rep_chart(r, "where a step's time goes", "ms per step", "%.2f", bars, 4, src,
		  "profile/stage_breakdown.png");
	json_t *top = json_array_size(json_object_get(an, "top_kernels"))
		      ? json_object_get(an, "top_kernels") : json_object_get(an, "top_cpu_ops");
	rep_h(r, 3, NULL, "%s", json_array_size(json_object_get(an, "top_kernels"))
	      ? "top kernels by GPU time" : "top ops by CPU time");
	rep_table_begin(r, &t, "name\tcalls\ttotal (ms)\tmean (ms)");
	json_array_foreach(top, i, op) {
		if (i >= 10)
			break;
		rep_row(r, &t, "%s\t%.0f\t%s\t%s", str(op, "name"), num(op, "count"),
			fmt_num(a, sizeof(a), "%.3f", num(op, "total_ms")),
			fmt_num(b, sizeof(b), "%.4f", num(op, "mean_ms")));
	}
	rep_table_end(r, src);
	rep_h(r, 3, NULL, "advice");
	if (json_array_size(advice) == 0)
		rep_p(r, "note", "The profile's rules found nothing to fix.");
	rep_list_begin(r, 0);
	json_array_foreach(advice, i, op) {
		rep_item(r, 0, (int)i, str(op, "text"));
		sum_find(s, 2, "%s (profile)", str(op, "text"));
	}
	rep_list_end(r, 0);
	sum_head(s, "%s batch %.0f: %.2f ms per step%s (profile)", str(meta, "model"),
		 num(meta, "batch"), num(m, "baseline_ms_per_step"), busy);
}

/* The yardstick beside gpuperf: compare's fp32 models and amp's cells at the
 * yardstick's batch, as ratios gpuperf / PyTorch. */
static void section_torch(struct rep *r, struct summary *s, json_t *stage, json_t *res,
			  json_t *compare, json_t *amp)
{
	json_t *runs = json_object_get(meas(res), "runs"), *t1;
	struct rep_table t;
	size_t i;
	char a[32], b[32], c[32];
	rep_table_begin(r, &t, "model\tbatch\tmode\tPyTorch img/s\tgpuperf img/s\tgpuperf / PyTorch\t"
			       "PyTorch peak (MiB)");
	json_array_foreach(runs, i, t1) {
		const char *model = str(t1, "model"), *mode = str(t1, "mode");
		double ours = NAN, batch = num(t1, "batch");
		json_t *x;
		size_t k;
		if (!strcmp(mode, "fp32"))
			json_array_foreach(json_object_get(meas(compare), "models"), k, x)
				if (!strcmp(str(x, "model"), model) && num(x, "batch") == batch)
					ours = num(x, "img_s");
		if (!isfinite(ours) && !strcmp(str(meas(amp), "model"), model)) {
			char prec[16];
			snprintf(prec, sizeof(prec), "%s", !strncmp(mode, "amp_", 4) ? mode + 4 : mode);
			prec[strcspn(prec, "_")] = 0;
			json_array_foreach(json_object_get(meas(amp), "cells"), k, x)
				if (!strcmp(str(x, "precision"), prec) && num(x, "batch") == batch)
					ours = num(x, "img_s");
		}
		double ratio = ours / num(t1, "img_s");
		rep_row(r, &t, "%s\t%.0f\t%s\t%s\t%s\t%s\t%.1f", model, batch, mode,
			fmt_num(a, sizeof(a), "%.1f", num(t1, "img_s")),
			fmt_num(b, sizeof(b), "%.1f", ours), fmt_num(c, sizeof(c), "%.2fx", ratio),
			num(t1, "peak_alloc_mib"));
		if (isfinite(ratio))
			sum_head(s, "%s %s batch %.0f: gpuperf %.2fx PyTorch's img/s (%s)", model, mode,
				 batch, ratio, str(stage, "stage"));
	}
	rep_table_end(r, str(stage, "result"));
}

static void section_env(struct rep *r, json_t *env, const char *src)
{
	json_t *gpu = json_object_get(env, "gpu"), *cpu = json_object_get(env, "cpu");
	struct rep_table t;
	char a[32];
	rep_table_begin(r, &t, "what\tvalue");
	if (num(gpu, "count") > 0) {
		json_t *nv = json_array_get(json_object_get(gpu, "nvml"), 0);
		rep_row(r, &t, "GPU\t%.0f x %s, %.0f MiB, compute %s, %.0f SMs", num(gpu, "count"),
			str(gpu, "name"), num(gpu, "memory_mib"), str(gpu, "compute_capability"),
			num(gpu, "sm_count"));
		rep_row(r, &t, "driver\t%s (CUDA %s)", *str(gpu, "driver_version") ? str(gpu, "driver_version")
			: "n/a", str(gpu, "cuda_driver"));
		rep_row(r, &t, "CUDA runtime, cuDNN, cuBLAS, NCCL\t%s, %s, %s, %s", str(gpu, "cuda_runtime"),
			str(gpu, "cudnn"), str(gpu, "cublas"), str(gpu, "nccl"));
		if (nv)
			rep_row(r, &t, "clocks (max SM / memory), power limit\t%.0f / %.0f MHz, %.0f W",
				num(nv, "max_sm_clock_mhz"), num(nv, "max_mem_clock_mhz"),
				num(nv, "power_limit_w"));
	} else {
		rep_row(r, &t, "GPU\tnone (%s)", str(gpu, "note"));
	}
	rep_row(r, &t, "CPU\t%s, %.0f cores", str(cpu, "model"), num(cpu, "cores"));
	rep_row(r, &t, "memory\t%s MiB", fmt_num(a, sizeof(a), "%.0f", num(env, "memory_mib")));
	rep_row(r, &t, "host, kernel\t%s, %s", str(env, "host"), str(env, "os"));
	rep_row(r, &t, "gpuperf\t%s (commit %s)", str(env, "gpuperf_version"), str(env, "commit"));
	rep_table_end(r, src);
}

static int finding_cmp_prio(const struct summary *s, int a, int b)
{
	return s->prio[a] - s->prio[b];
}

/* The summary: written to its own buffers first, as the sections fill it. */
static void summary_write(struct rep *r, const struct summary *s)
{
	int order[REP_MAX_LINES];
	for (int i = 0; i < s->n_find; i++)
		order[i] = i;
	/* stable insertion sort by priority */
	for (int i = 1; i < s->n_find; i++)
		for (int k = i; k > 0 && finding_cmp_prio(s, order[k - 1], order[k]) > 0; k--) {
			int tmp = order[k];
			order[k] = order[k - 1];
			order[k - 1] = tmp;
		}
	fputs("<div class=\"summary\" id=\"summary\">\n", r->html);
	rep_h(r, 2, NULL, "Summary");
	rep_list_begin(r, 0);
	for (int i = 0; i < s->n_head; i++)
		rep_item(r, 0, i, s->head[i]);
	rep_list_end(r, 0);
	rep_h(r, 3, NULL, "Findings");
	if (s->n_find == 0)
		rep_p(r, "note", "No finding: see the sections below.");
	rep_list_begin(r, 1);
	for (int i = 0; i < s->n_find && i < 3; i++)
		rep_item(r, 1, i, s->find[order[i]]);
	rep_list_end(r, 1);
	fputs("</div>\n", r->html);
}

static int stage_is(json_t *stage, const char *name)
{
	return !strcmp(str(stage, "stage"), name);
}

static json_t *stage_find(json_t *stages, const char *name)
{
	size_t i;
	json_t *st;
	json_array_foreach(stages, i, st)
		if (stage_is(st, name))
			return st;
	return NULL;
}

/* Sections go to temporary memory streams so that the summary, gathered from them,
 * can come first. */
static int report_build(const char *dir, json_t *bench, FILE *md, FILE *html)
{
	json_t *m = meas(bench), *stages = json_object_get(m, "stages"), *st;
	json_t *env = json_object_get(m, "environment");
	struct summary s;
	char *md_body = NULL, *html_body = NULL;
	size_t md_len = 0, html_len = 0;
	size_t i;
	memset(&s, 0, sizeof(s));
	struct rep body = { open_memstream(&md_body, &md_len), open_memstream(&html_body, &html_len), dir };
	if (!body.md || !body.html) {
		if (body.md)
			fclose(body.md);
		if (body.html)
			fclose(body.html);
		free(md_body);
		free(html_body);
		return gp_error(GP_ENOMEM, "no memory for the report");
	}
	json_t *gpu = json_object_get(env, "gpu");
	int has_gpu = num(gpu, "count") > 0;
	sum_head(&s, "machine: %s; %s, %.0f cores", has_gpu ? str(gpu, "name") : "no GPU (CPU backend)",
		 str(json_object_get(env, "cpu"), "model"), num(json_object_get(env, "cpu"), "cores"));

	rep_h(&body, 2, "environment", "Environment");
	section_env(&body, env, "bench.json (measurements.environment)");

	rep_h(&body, 2, "stages", "Stages");
	struct rep_table t;
	rep_table_begin(&body, &t, "stage\tstatus\tseconds\tbudget (s)\tresult\tnote");
	json_array_foreach(stages, i, st) {
		char a[32];
		rep_row(&body, &t, "%s\t%s\t%s\t%.0f\t%s\t%s", str(st, "stage"), str(st, "status"),
			fmt_num(a, sizeof(a), "%.1f", num(st, "seconds")), num(st, "budget_s"),
			str(st, "result"), str(st, "note"));
		if (!strcmp(str(st, "status"), "failed"))
			sum_find(&s, 0, "Stage %s failed: %s (its log: %s/log.txt).", str(st, "stage"),
				 str(st, "note"), str(st, "stage"));
	}
	rep_table_end(&body, "bench.json (measurements.stages)");

	int info_done = 0;
	json_t *compare = NULL, *amp = NULL;
	json_array_foreach(stages, i, st) {
		const char *name = str(st, "stage");
		int is_info = !strncmp(name, "info_", 5);
		json_t *res = stage_load(dir, st, is_info);
		if (is_info && !info_done) {
			rep_h(&body, 2, "info", "Models (info)");
			info_done = 1;
		}
		if (!res) {
			if (!is_info)
				rep_h(&body, 2, name, "%s", name);
			rep_p(&body, "note", "%s: %s%s%s", name, str(st, "status"),
			      *str(st, "note") ? ": " : "", str(st, "note"));
			continue;
		}
		if (is_info) {
			section_info(&body, st, res);
		} else if (stage_is(st, "compare")) {
			rep_h(&body, 2, name, "Models side by side (compare)");
			section_compare(&body, &s, st, res);
			compare = json_incref(res);
		} else if (stage_is(st, "amp")) {
			rep_h(&body, 2, name, "Mixed precision (amp)");
			section_amp(&body, &s, st, res);
			amp = json_incref(res);
		} else if (stage_is(st, "maxbatch")) {
			rep_h(&body, 2, name, "Largest batch (maxbatch)");
			section_maxbatch(&body, &s, st, res);
		} else if (stage_is(st, "workers")) {
			rep_h(&body, 2, name, "Data-loader workers (workers)");
			section_workers(&body, &s, st, res);
		} else if (stage_is(st, "train")) {
			rep_h(&body, 2, name, "End-to-end training on the data (train)");
			section_train(&body, &s, st, res);
		} else if (stage_is(st, "scale")) {
			rep_h(&body, 2, name, "Data parallel over the GPUs (scale)");
			section_scale(&body, &s, st, res);
		} else if (stage_is(st, "profile")) {
			rep_h(&body, 2, name, "Where the time goes (profile)");
			section_profile(&body, &s, st, res);
		} else if (!strncmp(name, "torch", 5)) {
			rep_h(&body, 2, name, "PyTorch yardstick (%s)", name);
			section_torch(&body, &s, st, res, compare, amp);
		}
		json_decref(res);
	}
	json_decref(compare);
	json_decref(amp);
	if (!stage_find(stages, "workers"))
		rep_p(&body, "note", "workers and end-to-end training run with --data DIR.");
	fclose(body.md);
	fclose(body.html);

	/* the page: title, summary, then the sections */
	char title[256];
	snprintf(title, sizeof(title), "gpuperf bench: %s, %s", has_gpu ? str(gpu, "name") : "CPU",
		 str(bench, "started_utc"));
	struct rep out = { md, html, dir };
	html_begin(html, title);
	fputs("<h1>", html);
	html_escape(html, title);
	fputs("</h1>\n", html);
	fprintf(md, "# %s\n\n", title);
	rep_p(&out, "source", "Every figure names the JSON it came from, relative to this folder; "
	      "the stages' own charts (PNG) and logs are in their folders. Settings: %s.",
	      json_is_true(json_object_get(json_object_get(bench, "settings"), "quick")) ? "--quick"
	      : "the full suite");
	summary_write(&out, &s);
	fwrite(md_body, 1, md_len, md);
	fwrite(html_body, 1, html_len, html);
	html_end(html);
	free(md_body);
	free(html_body);
	return 0;
}

int bench_dir_is(const char *dir)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/bench.json", dir);
	return access(path, R_OK) == 0;
}

int bench_report_write(const char *dir)
{
	char path[4200];
	json_t *bench;
	struct atomic_file md, html;
	int rc;
	snprintf(path, sizeof(path), "%s/bench.json", dir);
	GP_TRY(result_read(path, &bench));
	if (strcmp(str(bench, "command"), "bench")) {
		json_decref(bench);
		return gp_error(GP_EFORMAT, "'%s' is not a bench result", path);
	}
	snprintf(path, sizeof(path), "%s/report.md", dir);
	if ((rc = atomic_file_open(&md, path)) < 0)
		goto free_bench;
	snprintf(path, sizeof(path), "%s/report.html", dir);
	if ((rc = atomic_file_open(&html, path)) < 0) {
		atomic_file_abort(&md);
		goto free_bench;
	}
	rc = report_build(dir, bench, md.f, html.f);
	if (rc == 0 && (ferror(md.f) || ferror(html.f)))
		rc = gp_error(GP_EIO, "cannot write the report in '%s'", dir);
	if (rc < 0) {
		atomic_file_abort(&md);
		atomic_file_abort(&html);
		goto free_bench;
	}
	if ((rc = atomic_file_commit(&md)) < 0) {
		atomic_file_abort(&html);
		goto free_bench;
	}
	rc = atomic_file_commit(&html);
free_bench:
	json_decref(bench);
	return rc;
}

int bench_torch_to_result(const char *dir, const char *result_rel, int argc, char **argv)
{
	char path[4200], line[4096];
	const char *slash = strrchr(result_rel, '/');
	snprintf(path, sizeof(path), "%s/%.*s/torch.jsonl", dir, slash ? (int)(slash - result_rel) : 0,
		 result_rel);
	FILE *f = fopen(path, "r");
	if (!f)
		return gp_error(GP_EIO, "cannot read '%s'", path);
	json_t *res = result_new("torch", argc, argv), *runs = json_array();
	int rc = 0;
	if (!res || !runs) {
		rc = gp_error(GP_ENOMEM, "no memory for the yardstick's result");
		goto out;
	}
	while (fgets(line, sizeof(line), f)) {
		json_t *j = json_loads(line, 0, NULL);
		if (json_is_object(j) && json_object_get(j, "img_s"))
			json_array_append(runs, j);
		else if (json_is_object(j) && json_object_get(j, "torch"))
			json_object_set(json_object_get(res, "settings"), "pytorch", j);
		json_decref(j);
	}
	if (json_array_size(runs) == 0) {
		rc = gp_error(GP_EFORMAT, "'%s' holds no measurement", path);
		goto out;
	}
	json_object_set(json_object_get(res, "measurements"), "runs", runs);
	snprintf(path, sizeof(path), "%s/%.*s", dir, slash ? (int)(slash - result_rel) : 0, result_rel);
	rc = result_write(res, path, "torch", NULL, 0);
out:
	fclose(f);
	json_decref(runs);
	json_decref(res);
	return rc;
}
