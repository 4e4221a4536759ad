/* diff: flatten two results' measurements into named numbers, pair them by name and
 * judge each change against the runs' spread and the threshold. */
#include "report/diff.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "report/html.h"
#include "report/result.h"

/* Fields that say what was measured, not how fast or how big: they name the
 * elements of an array and are not metrics themselves. */
static const char *const identity_keys[] = { "model", "precision", "layout", "device", "batch",
					     "workers", "stage", "name", "op", "category", NULL };
/* Numbers that are settings or counts of the run, or depend on its random start. */
static const char *const skipped_keys[] = { "batch", "steps", "size", "classes", "workers",
					    "timed_steps", "epochs", "epoch_steps", "seed", "n",
					    "batches_per_epoch", "nonfinite_loss_step", "first_loss",
					    "last_loss", "rank", "pid", "world_size", NULL };

static int in_list(const char *const *list, const char *s)
{
	for (int i = 0; list[i]; i++)
		if (!strcmp(list[i], s))
			return 1;
	return 0;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

/* The direction one path component names, or neutral. */
static enum diff_direction direction_of_word(const char *w)
{
	if (ends_with(w, "_ms") || !strncmp(w, "ms_", 3) || !strcmp(w, "ms"))
		return DIFF_LOWER_BETTER;
	if (strstr(w, "img_s") || strstr(w, "speedup") || strstr(w, "util") ||
	    strstr(w, "throughput") || ends_with(w, "_per_s") || strstr(w, "flops") ||
	    ends_with(w, "_batch"))
		return DIFF_HIGHER_BETTER;
	if (strstr(w, "bytes") || strstr(w, "mib") || strstr(w, "gib") || ends_with(w, "_s") ||
	    strstr(w, "wait") || strstr(w, "idle") || strstr(w, "overhead") ||
	    strstr(w, "latency") || strstr(w, "seconds"))
		return DIFF_LOWER_BETTER;
	return DIFF_NEUTRAL;
}

enum diff_direction diff_direction_of(const char *name)
{
	/* the last component first ("img_s"), then the ones above it
	 * ("peak_bytes_by_category.weights" is memory) */
	char buf[DIFF_NAME_MAX];
	snprintf(buf, sizeof(buf), "%s", name);
	for (;;) {
		char *dot = strrchr(buf, '.'), *slash = strrchr(buf, '/');
		char *cut = dot > slash ? dot : slash;
		char *word = cut ? cut + 1 : buf;
		char *bracket = strchr(word, '[');
		if (bracket)
			*bracket = 0;
		enum diff_direction d = direction_of_word(word);
		if (d != DIFF_NEUTRAL || !cut)
			return d;
		*cut = 0;
	}
}

int diff_beyond_noise(const struct diff_metric *a, const struct diff_metric *b, double *se)
{
	double delta = fabs(b->value - a->value), s;
	if (a->has_spread && b->has_spread)
		s = sqrt(a->spread.std * a->spread.std / a->spread.n +
			 b->spread.std * b->spread.std / b->spread.n);
	else if (a->has_spread)
		s = a->spread.std * sqrt(1.0 / a->spread.n + 1.0);
	else if (b->has_spread)
		s = b->spread.std * sqrt(1.0 / b->spread.n + 1.0);
	else
		s = NAN;
	*se = s;
	if (isnan(s))
		return delta > 0;
	return delta > 2 * s;
}

static int run_add(struct diff_run *run, const char *name, double value)
{
	if (run->n == run->cap) {
		if (run->cap >= DIFF_MAX_METRICS)
			return gp_error(GP_EFORMAT, "'%s': more than %d metrics", run->path,
					DIFF_MAX_METRICS);
		int cap = run->cap ? run->cap * 2 : 64;
		struct diff_metric *m = realloc(run->m, cap * sizeof(*m));
		if (!m)
			return gp_error(GP_ENOMEM, "no memory for %d metrics", cap);
		run->m = m;
		run->cap = cap;
	}
	struct diff_metric *m = &run->m[run->n++];
	memset(m, 0, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->value = value;
	return 0;
}

static struct diff_metric *run_find(const struct diff_run *run, const char *name)
{
	for (int i = 0; i < run->n; i++)
		if (!strcmp(run->m[i].name, name))
			return &run->m[i];
	return NULL;
}

/* "[model=resnet18,batch=64]" from an array element's identity fields, "[i]"
 * without any. */
static void element_label(json_t *el, size_t i, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = 0;
	for (int k = 0; json_is_object(el) && identity_keys[k]; k++) {
		json_t *v = json_object_get(el, identity_keys[k]);
		char val[64];
		if (json_is_string(v))
			snprintf(val, sizeof(val), "%s", json_string_value(v));
		else if (json_is_integer(v))
			snprintf(val, sizeof(val), "%lld", (long long)json_integer_value(v));
		else
			continue;
		if (len >= cap)
			break;
		len += snprintf(buf + len, cap - len, "%s%s=%s", len ? "," : "[", identity_keys[k], val);
	}
	if (len == 0)
		snprintf(buf, cap, "[%zu]", i);
	else if (len < cap)
		snprintf(buf + len, cap - len, "]");
}

static int collect(struct diff_run *run, json_t *j, const char *path, int depth);

static int collect_object(struct diff_run *run, json_t *obj, const char *path, int depth)
{
	const char *key;
	json_t *v;
	char sub[DIFF_NAME_MAX];
	json_object_foreach(obj, key, v) {
		if (!strcmp(key, "repeat") || in_list(skipped_keys, key) ||
		    (json_is_number(v) && in_list(identity_keys, key)))
			continue;
		snprintf(sub, sizeof(sub), "%s%s%s", path, *path && path[strlen(path) - 1] != '/' ? "." : "", key);
		GP_TRY(collect(run, v, sub, depth + 1));
	}
	/* the spreads of repeated measurements, beside the means they belong to */
	json_t *rep = json_object_get(obj, "repeat");
	json_object_foreach(rep, key, v) {
		struct stat_summary s;
		if (!stats_is_summary(v))
			continue;
		if (stats_read(v, &s) < 0)
			return gp_error_wrap(GP_EFORMAT, "'%s': repeat.%s", run->path, key);
		snprintf(sub, sizeof(sub), "%s%s%s", path, *path && path[strlen(path) - 1] != '/' ? "." : "", key);
		struct diff_metric *m = run_find(run, sub);
		if (!m) {
			GP_TRY(run_add(run, sub, s.mean));
			m = &run->m[run->n - 1];
		}
		m->spread = s;
		m->has_spread = s.n >= 2;
	}
	return 0;
}

static int collect(struct diff_run *run, json_t *j, const char *path, int depth)
{
	char sub[DIFF_NAME_MAX];
	if (depth > 16)
		return 0;
	if (json_is_number(j))
		return run_add(run, path, json_number_value(j));
	if (json_is_object(j) && !stats_is_summary(j))
		return collect_object(run, j, path, depth);
	if (json_is_array(j)) {
		size_t i;
		json_t *el;
		json_array_foreach(j, i, el) {
			char label[160];
			/* series of numbers (samples, curves) are not metrics */
			if (!json_is_object(el))
				continue;
			element_label(el, i, label, sizeof(label));
			/* elements whose identity fields agree (the largest tensors of one
			 * category) are told apart by their order among themselves */
			size_t same = 0;
			for (size_t k = 0; k < i; k++) {
				char other[160];
				json_t *ok = json_array_get(j, k);
				if (!json_is_object(ok))
					continue;
				element_label(ok, k, other, sizeof(other));
				same += !strcmp(other, label);
			}
			size_t ll = strlen(label);
			if (same && ll && label[ll - 1] == ']')
				snprintf(label + ll - 1, sizeof(label) - (ll - 1), "#%zu]", same);
			snprintf(sub, sizeof(sub), "%s%s", path, label);
			GP_TRY(collect(run, el, sub, depth + 1));
		}
	}
	return 0;
}

int diff_run_collect(struct diff_run *run, json_t *measurements, const char *prefix)
{
	if (!json_is_object(measurements))
		return gp_error(GP_EFORMAT, "'%s': no \"measurements\" object", run->path);
	return collect(run, measurements, prefix, 0);
}

void diff_run_free(struct diff_run *run)
{
	free(run->m);
	run->m = NULL;
	run->n = run->cap = 0;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A bench: each stage's result, its metrics under "<stage>/". */
static int bench_collect(struct diff_run *run, json_t *bench, const char *dir)
{
	json_t *stages = json_object_get(json_object_get(bench, "measurements"), "stages");
	size_t i;
	json_t *st;
	json_array_foreach(stages, i, st) {
		const char *stage = json_string_value(json_object_get(st, "stage"));
		const char *file = json_string_value(json_object_get(st, "result"));
		char p[4096], prefix[128];
		json_t *res;
		if (!stage || !file || strstr(file, ".."))
			continue;
		if (snprintf(p, sizeof(p), "%s/%s", dir, file) >= (int)sizeof(p))
			continue;
		if (result_read(p, &res) < 0) {
			gp_error_clear(); /* a stage that failed left no result */
			continue;
		}
		snprintf(prefix, sizeof(prefix), "%s/", stage);
		int rc = diff_run_collect(run, json_object_get(res, "measurements"), prefix);
		json_decref(res);
		GP_TRY(rc);
	}
	return 0;
}

int diff_run_load(struct diff_run *run, const char *path)
{
	json_t *res;
	char dir[4096];
	memset(run, 0, sizeof(*run));
	if (access(path, F_OK) != 0)
		return gp_error(GP_EINVAL, "'%s': %s", path, strerror(errno));
	if (is_dir(path)) {
		snprintf(dir, sizeof(dir), "%s", path);
		GP_TRY(result_find_in_dir(path, run->path, sizeof(run->path)));
	} else {
		snprintf(run->path, sizeof(run->path), "%s", path);
		const char *slash = strrchr(path, '/');
		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	}
	char msg[1024];
	int rc = result_read(run->path, &res);
	if (rc < 0) {
		/* bad input for diff: exit 2, the message kept */
		snprintf(msg, sizeof(msg), "%s", gp_errmsg());
		return gp_error(GP_EINVAL, "%s", msg);
	}
	snprintf(run->command, sizeof(run->command), "%s",
		 json_string_value(json_object_get(res, "command")));
	if (!strcmp(run->command, "bench"))
		rc = bench_collect(run, res, dir);
	else
		rc = diff_run_collect(run, json_object_get(res, "measurements"), "");
	json_decref(res);
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "%s", gp_errmsg());
		diff_run_free(run);
		return gp_error(GP_EINVAL, "%s", msg);
	}
	return 0;
}

const char *diff_verdict_name(enum diff_verdict v)
{
	static const char *const names[] = { "within noise", "improved", "worse",
					     "regressed", "changed" };
	return names[v];
}

const char *diff_direction_name(enum diff_direction d)
{
	static const char *const names[] = { "neutral", "higher", "lower" };
	return names[d];
}

int diff_compare(const struct diff_run *a, const struct diff_run *b, double threshold_pct,
		 struct diff_report *out)
{
	memset(out, 0, sizeof(*out));
	out->threshold_pct = threshold_pct;
	out->rows = calloc(a->n ? a->n : 1, sizeof(*out->rows));
	if (!out->rows)
		return gp_error(GP_ENOMEM, "no memory for %d rows", a->n);
	for (int i = 0; i < a->n; i++) {
		const struct diff_metric *ma = &a->m[i], *mb = run_find(b, ma->name);
		if (!mb) {
			out->n_only_a++;
			continue;
		}
		struct diff_row *r = &out->rows[out->n++];
		r->a = ma;
		r->b = mb;
		r->dir = diff_direction_of(ma->name);
		r->change_pct = ma->value != 0 ? (mb->value - ma->value) / fabs(ma->value) * 100
			       : mb->value == 0 ? 0 : NAN;
		r->beyond_noise = diff_beyond_noise(ma, mb, &r->se);
		int better = r->dir == DIFF_HIGHER_BETTER ? mb->value > ma->value
			   : mb->value < ma->value;
		if (!r->beyond_noise)
			r->verdict = DIFF_WITHIN_NOISE;
		else if (r->dir == DIFF_NEUTRAL)
			r->verdict = DIFF_CHANGED;
		else if (better)
			r->verdict = DIFF_IMPROVED;
		else if (isnan(r->change_pct) || fabs(r->change_pct) > threshold_pct)
			r->verdict = DIFF_REGRESSED;
		else
			r->verdict = DIFF_WORSE;
		out->n_regressed += r->verdict == DIFF_REGRESSED;
		out->n_worse += r->verdict == DIFF_WORSE;
		out->n_improved += r->verdict == DIFF_IMPROVED;
		out->n_within += r->verdict == DIFF_WITHIN_NOISE;
	}
	for (int i = 0; i < b->n; i++)
		out->n_only_b += run_find(a, b->m[i].name) == NULL;
	return 0;
}

void diff_report_free(struct diff_report *r)
{
	free(r->rows);
	r->rows = NULL;
}

static void value_str(const struct diff_metric *m, char *buf, size_t cap)
{
	if (m->has_spread)
		snprintf(buf, cap, "%.4g ± %.2g (n=%d)", m->value, m->spread.std, m->spread.n);
	else
		snprintf(buf, cap, "%.4g", m->value);
}

static void change_str(const struct diff_row *r, char *buf, size_t cap)
{
	if (isnan(r->change_pct))
		snprintf(buf, cap, "n/a");
	else
		snprintf(buf, cap, "%+.2f%%", r->change_pct);
}

int diff_print_text(const struct diff_report *r, const struct diff_run *a,
		    const struct diff_run *b, FILE *f)
{
	fprintf(f, "A: %s\nB: %s\n", a->path, b->path);
	fprintf(f, "%-56s %24s %24s %9s  %-6s %s\n", "metric", "A", "B", "change", "better",
		"verdict");
	for (int i = 0; i < r->n; i++) {
		const struct diff_row *w = &r->rows[i];
		char va[64], vb[64], ch[32];
		value_str(w->a, va, sizeof(va));
		value_str(w->b, vb, sizeof(vb));
		change_str(w, ch, sizeof(ch));
		fprintf(f, "%-56s %24s %24s %9s  %-6s %s%s\n", w->a->name, va, vb, ch,
			diff_direction_name(w->dir), diff_verdict_name(w->verdict),
			w->beyond_noise && isnan(w->se) ? " (no spread)" : "");
	}
	fprintf(f, "%d metrics: %d regressed beyond noise and the %.3g%% threshold, %d worse within "
		   "it, %d improved, %d within noise",
		r->n, r->n_regressed, r->threshold_pct, r->n_worse, r->n_improved, r->n_within);
	if (r->n_only_a || r->n_only_b)
		fprintf(f, "; %d only in A, %d only in B", r->n_only_a, r->n_only_b);
	fprintf(f, "\n");
	return ferror(f) ? gp_error(GP_EIO, "cannot write the table") : 0;
}

static json_t *metric_json(const struct diff_metric *m)
{
	json_t *j = json_pack("{s:o}", "value", result_real(m->value));
	if (j && m->has_spread)
		json_object_set_new(j, "spread", stats_json(&m->spread, NULL, 0));
	return j;
}

json_t *diff_report_json(const struct diff_report *r, const struct diff_run *a,
			 const struct diff_run *b)
{
	json_t *rows = json_array();
	for (int i = 0; rows && i < r->n; i++) {
		const struct diff_row *w = &r->rows[i];
		json_t *row = json_pack("{s:s, s:o, s:o, s:o, s:o, s:b, s:s, s:s}",
			"metric", w->a->name, "a", metric_json(w->a), "b", metric_json(w->b),
			"change_pct", result_real(w->change_pct), "standard_error", result_real(w->se),
			"beyond_noise", w->beyond_noise, "better", diff_direction_name(w->dir),
			"verdict", diff_verdict_name(w->verdict));
		if (json_array_append_new(rows, row) < 0) {
			json_decref(rows);
			return NULL;
		}
	}
	return json_pack("{s:s, s:s, s:s, s:o, s:i, s:i, s:i, s:i, s:i, s:i, s:o}",
		"command", a->command, "a", a->path, "b", b->path,
		"threshold_pct", result_real(r->threshold_pct), "regressed", r->n_regressed,
		"worse_within_threshold", r->n_worse, "improved", r->n_improved,
		"within_noise", r->n_within, "only_in_a", r->n_only_a, "only_in_b", r->n_only_b,
		"rows", rows);
}

int diff_write_html(const struct diff_report *r, const struct diff_run *a,
		    const struct diff_run *b, const char *path)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	FILE *f = af.f;
	char title[160];
	snprintf(title, sizeof(title), "gpuperf diff: %s", a->command);
	html_begin(f, title);
	fputs("<h1>", f);
	html_escape(f, title);
	fputs("</h1>\n<div class=\"summary\"><p>A: <code>", f);
	html_escape(f, a->path);
	fputs("</code><br>B: <code>", f);
	html_escape(f, b->path);
	fprintf(f, "</code></p><p><span class=\"%s\">%d regressed</span> beyond noise and the "
		   "%.3g%% threshold, %d worse within it, <span class=\"good\">%d improved</span>, "
		   "%d within noise, of %d shared metrics.</p>\n",
		r->n_regressed ? "bad" : "good", r->n_regressed, r->threshold_pct, r->n_worse,
		r->n_improved, r->n_within, r->n);
	fputs("<p class=\"note\">Beyond noise: |B - A| &gt; 2 x the combined standard error of "
	      "the two runs' repeats (docs/diff.md); without repeats every change counts.</p>"
	      "</div>\n", f);
	/* the largest changes of metrics with a direction, as a chart */
	struct html_bar bars[12];
	int nb = 0;
	for (int i = 0; i < r->n && nb < 12; i++) {
		const struct diff_row *w = &r->rows[i];
		if (w->verdict == DIFF_REGRESSED || w->verdict == DIFF_IMPROVED)
			bars[nb++] = (struct html_bar){ w->a->name, fabs(w->change_pct),
							w->verdict == DIFF_REGRESSED };
	}
	if (nb)
		html_svg_bars(f, "changes beyond noise (orange: regressed)", "|change| (%)", "%.1f%%",
			      bars, nb, a->path);
	fputs("<table>\n<tr><th>metric</th><th>A</th><th>B</th><th>change</th><th>better</th>"
	      "<th>verdict</th></tr>\n", f);
	for (int i = 0; i < r->n; i++) {
		const struct diff_row *w = &r->rows[i];
		char va[64], vb[64], ch[32];
		value_str(w->a, va, sizeof(va));
		value_str(w->b, vb, sizeof(vb));
		change_str(w, ch, sizeof(ch));
		fputs("<tr><td>", f);
		html_escape(f, w->a->name);
		fputs("</td><td>", f);
		html_escape(f, va);
		fputs("</td><td>", f);
		html_escape(f, vb);
		fprintf(f, "</td><td>%s</td><td>%s</td><td class=\"%s\">%s</td></tr>\n", ch,
			diff_direction_name(w->dir),
			w->verdict == DIFF_REGRESSED ? "bad" : w->verdict == DIFF_IMPROVED ? "good" : "",
			diff_verdict_name(w->verdict));
	}
	fputs("</table>\n", f);
	html_end(f);
	if (ferror(f)) {
		atomic_file_abort(&af);
		return gp_error(GP_EIO, "cannot write '%s'", path);
	}
	return atomic_file_commit(&af);
}
