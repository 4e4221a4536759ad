#include "report/mem_report.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/memstat.h"
#include "report/chart.h"
#include "report/profile_charts.h"

json_t *mem_timeline_to_json(const struct mem_timeline *tl)
{
	json_t *cats = json_array(), *points = json_array(), *top = json_array();
	for (int c = 0; cats && c < MTL_NCAT; c++)
		json_array_append_new(cats, json_string(mem_tl_cat_name(c)));
	for (int k = 0; points && k < tl->n_points; k++) {
		const struct mem_tl_point *p = &tl->points[k];
		json_t *b = json_array();
		for (int c = 0; b && c < MTL_NCAT; c++)
			json_array_append_new(b, json_integer((json_int_t)p->bytes[c]));
		json_array_append_new(points, json_pack("{s:s, s:i, s:o, s:I}", "label", p->label,
							"plan_step", p->plan_step, "bytes",
							b ? b : json_null(), "total_bytes",
							(json_int_t)p->total));
	}
	for (int i = 0; top && i < tl->n_top; i++) {
		const struct mem_tl_tensor *x = &tl->top[i];
		json_array_append_new(top, json_pack("{s:s, s:s, s:I, s:i, s:i}", "tensor", x->what,
						     "category", mem_tl_cat_name(x->cat), "bytes",
						     (json_int_t)x->bytes, "first_step",
						     x->first_step, "last_step", x->last_step));
	}
	const struct mem_tl_point *pk = tl->n_points ? &tl->points[tl->peak] : NULL;
	return json_pack("{s:s, s:o, s:o, s:{s:i, s:s, s:I}, s:o, s:I, s:I}", "source", "plan",
			 "categories", cats ? cats : json_null(), "points",
			 points ? points : json_null(), "peak", "index", tl->peak, "label",
			 pk ? pk->label : "", "total_bytes", (json_int_t)(pk ? pk->total : 0),
			 "largest_at_peak", top ? top : json_null(), "plan_total_bytes",
			 (json_int_t)tl->plan_total_bytes, "arena_bytes",
			 (json_int_t)tl->arena_bytes);
}

static int bad(const char *what)
{
	return gp_error(GP_EFORMAT, "memory_timeline: %s missing or malformed", what);
}

static int cat_index(const char *name)
{
	for (int c = 0; name && c < MTL_NCAT; c++)
		if (!strcmp(name, mem_tl_cat_name(c)))
			return c;
	return -1;
}

static int json_size(json_t *v, size_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (size_t)json_integer_value(v);
	return 0;
}

int mem_timeline_from_json(json_t *j, struct mem_timeline *out)
{
	memset(out, 0, sizeof(*out));
	json_t *cats = json_object_get(j, "categories"), *points = json_object_get(j, "points");
	json_t *top = json_object_get(j, "largest_at_peak");
	int map[MTL_NCAT];
	if (!json_is_array(cats) || json_array_size(cats) != MTL_NCAT)
		return bad("categories");
	for (int c = 0; c < MTL_NCAT; c++)
		if ((map[c] = cat_index(json_string_value(json_array_get(cats, c)))) < 0)
			return bad("categories");
	size_t n = json_array_size(points);
	if (!json_is_array(points) || n == 0 || n > 4 * GP_MAX_NODES)
		return bad("points");
	out->points = calloc(n, sizeof(*out->points));
	if (!out->points)
		return gp_error(GP_ENOMEM, "memory_timeline: out of memory");
	out->n_points = (int)n;
	for (size_t k = 0; k < n; k++) {
		json_t *p = json_array_get(points, k), *b = json_object_get(p, "bytes");
		struct mem_tl_point *pt = &out->points[k];
		const char *label = json_string_value(json_object_get(p, "label"));
		if (!label || !json_is_integer(json_object_get(p, "plan_step")) ||
		    !json_is_array(b) || json_array_size(b) != MTL_NCAT)
			goto malformed;
		snprintf(pt->label, sizeof(pt->label), "%s", label);
		pt->plan_step = (int)json_integer_value(json_object_get(p, "plan_step"));
		for (int c = 0; c < MTL_NCAT; c++) {
			if (json_size(json_array_get(b, c), &pt->bytes[map[c]]) < 0 ||
			    pt->total + pt->bytes[map[c]] < pt->total)
				goto malformed;
			pt->total += pt->bytes[map[c]];
		}
		if (pt->total > out->points[out->peak].total)
			out->peak = (int)k;
	}
	for (size_t i = 0; json_is_array(top) && i < json_array_size(top) && i < MEM_TL_TOP; i++) {
		json_t *x = json_array_get(top, i);
		struct mem_tl_tensor *t = &out->top[out->n_top];
		const char *what = json_string_value(json_object_get(x, "tensor"));
		int cat = cat_index(json_string_value(json_object_get(x, "category")));
		if (!what || cat < 0 || json_size(json_object_get(x, "bytes"), &t->bytes) < 0)
			goto malformed;
		snprintf(t->what, sizeof(t->what), "%s", what);
		t->cat = cat;
		t->first_step = (int)json_integer_value(json_object_get(x, "first_step"));
		t->last_step = (int)json_integer_value(json_object_get(x, "last_step"));
		out->n_top++;
	}
	json_size(json_object_get(j, "plan_total_bytes"), &out->plan_total_bytes);
	json_size(json_object_get(j, "arena_bytes"), &out->arena_bytes);
	return 0;
malformed:
	mem_timeline_free(out);
	return bad("a point or tensor");
}

int mem_timeline_copy(const struct mem_timeline *src, struct mem_timeline *dst)
{
	*dst = *src;
	dst->points = malloc(((size_t)src->n_points + 1) * sizeof(*dst->points));
	if (!dst->points) {
		memset(dst, 0, sizeof(*dst));
		return gp_error(GP_ENOMEM, "memory_timeline: out of memory");
	}
	memcpy(dst->points, src->points, (size_t)src->n_points * sizeof(*dst->points));
	return 0;
}

static void print_top(const struct mem_timeline *tl, FILE *f, int md)
{
	for (int i = 0; i < tl->n_top; i++) {
		const struct mem_tl_tensor *x = &tl->top[i];
		if (md)
			fprintf(f, "| `%s` | %s | %.2f | %d..%d |\n", x->what, mem_tl_cat_name(x->cat),
				x->bytes / GP_MIB, x->first_step, x->last_step);
		else
			fprintf(f, "  %-48.48s %-20s %10.2f  %d..%d\n", x->what,
				mem_tl_cat_name(x->cat), x->bytes / GP_MIB, x->first_step,
				x->last_step);
	}
}

void mem_timeline_print(const struct mem_timeline *tl, FILE *f)
{
	if (!tl->n_points)
		return;
	const struct mem_tl_point *pk = &tl->points[tl->peak];
	fprintf(f, "\nmemory over the step (plan): peak %.2f MiB at %s (plan step %d):",
		pk->total / GP_MIB, pk->label, pk->plan_step);
	for (int c = 0; c < MTL_NCAT; c++)
		if (pk->bytes[c])
			fprintf(f, " %s %.2f", mem_tl_cat_name(c), pk->bytes[c] / GP_MIB);
	fprintf(f, "\nlargest tensors alive at the peak\n  %-48s %-20s %10s  %s\n", "tensor",
		"category", "MiB", "plan steps");
	print_top(tl, f, 0);
}

void mem_timeline_markdown(const struct mem_timeline *tl, FILE *f)
{
	if (!tl->n_points)
		return;
	const struct mem_tl_point *pk = &tl->points[tl->peak];
	fprintf(f, "\n## Memory over the step (from the plan)\n\nLive MiB by category at each plan "
		   "step (forward of each layer, the loss, backward of each layer, the optimizer); "
		   "`memory_timeline.png` draws them all. Peak **%.2f MiB** at `%s` (plan step %d); "
		   "the plan allocates %.2f MiB (arena %.2f MiB).\n\n| plan step | at |",
		pk->total / GP_MIB, pk->label, pk->plan_step, tl->plan_total_bytes / GP_MIB,
		tl->arena_bytes / GP_MIB);
	for (int c = 0; c < MTL_NCAT; c++)
		fprintf(f, " %s |", mem_tl_cat_name(c));
	fprintf(f, " total |\n|---:|---|");
	for (int c = 0; c <= MTL_NCAT; c++)
		fprintf(f, "---:|");
	fputc('\n', f);
	/* up to 24 rows: evenly spaced, with the loss, the peak and the last */
	int stride = (tl->n_points + 20) / 21;
	for (int k = 0; k < tl->n_points; k++) {
		const struct mem_tl_point *p = &tl->points[k];
		int keep = k % stride == 0 || k == tl->peak || k == tl->n_points - 1 ||
			   !strcmp(p->label, "loss");
		if (!keep)
			continue;
		fprintf(f, "| %d | `%s`%s |", p->plan_step, p->label, k == tl->peak ? " **peak**" : "");
		for (int c = 0; c < MTL_NCAT; c++)
			fprintf(f, " %.2f |", p->bytes[c] / GP_MIB);
		fprintf(f, " %.2f |\n", p->total / GP_MIB);
	}
	fprintf(f, "\n### Largest tensors alive at the peak\n\n| tensor | category | MiB | plan steps |\n"
		   "|---|---|---:|---|\n");
	print_top(tl, f, 1);
}

/* Bottom to top: what stays all step first, then what the step grows and frees. */
static const int stack_order[MTL_NCAT] = { MTL_WEIGHTS, MTL_GRADS,  MTL_OPTIM,    MTL_INPUT,
					   MTL_WORKSPACE, MTL_ACTIV, MTL_ACT_GRADS };

int mem_timeline_chart(const struct mem_timeline *tl, const char *model, int batch,
		       const char *path)
{
	if (tl->n_points < 1)
		return gp_error(GP_EINVAL, "memory chart: the timeline is empty");
	int n = tl->n_points, rc = 0;
	double *x = malloc((size_t)n * sizeof(double));
	double *cum = calloc((size_t)n * MTL_NCAT, sizeof(double));
	struct chart_figure *fig = NULL;
	if (!x || !cum) {
		rc = gp_error(GP_ENOMEM, "memory chart: out of memory");
		goto out;
	}
	for (int k = 0; k < n; k++) {
		double run = 0;
		x[k] = k;
		for (int s = 0; s < MTL_NCAT; s++) {
			run += tl->points[k].bytes[stack_order[s]] / GP_MIB;
			cum[s * n + k] = run;
		}
	}
	const struct mem_tl_point *pk = &tl->points[tl->peak];
	char title[200], label[160];
	snprintf(title, sizeof(title), "%s, batch %d: live memory over one step, by category",
		 model, batch);
	fig = chart_figure_new(1, 1, PROFILE_CHART_W, PROFILE_CHART_H, title);
	if (!fig) {
		rc = gp_error(GP_ENOMEM, "cannot create the memory chart");
		goto out;
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_labels(p, "plan step (forward, loss, backward, optimizer)", "live (MiB)");
	chart_panel_set_y_range(p, 0, pk->total / GP_MIB * 1.75 + 1e-9);
	const struct chart_color colors[MTL_NCAT] = {
		CHART_GREY, CHART_OLIVE, CHART_BROWN, CHART_PINK, CHART_PURPLE, CHART_BLUE,
		CHART_ORANGE,
	};
	/* the tallest (the sum of all) first, each later one painted over it */
	for (int s = MTL_NCAT - 1; s >= 0 && rc == 0; s--)
		rc = chart_panel_add_line(p, x, cum + (size_t)s * n, n,
					  (struct chart_line_style){ .color = colors[s], .width_px = 1,
								     .fill = 1 },
					  mem_tl_cat_name(stack_order[s]));
	snprintf(label, sizeof(label), "peak %.1f MiB at %s", pk->total / GP_MIB, pk->label);
	if (rc == 0)
		rc = chart_panel_add_point(p, tl->peak, pk->total / GP_MIB, CHART_RED, label);
	if (rc == 0)
		rc = chart_figure_save(fig, path);
out:
	chart_figure_free(fig);
	free(x);
	free(cum);
	return rc;
}
