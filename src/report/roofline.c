/* The roofline's arithmetic, table and JSON (report/roofline.h). */
#include "report/roofline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"
#include "report/result.h"

static double row_math_tflops(const struct roofline_row *r, const struct roofline_peak *pk)
{
	return r->tensor ? pk->tensor_tflops : pk->cuda_tflops;
}

double roofline_bound_ms(const struct roofline_row *r, const struct roofline_peak *pk)
{
	double peak = row_math_tflops(r, pk);
	if (!(peak > 0) || !(pk->mem_gb_s > 0))
		return -1;
	double math_ms = r->flops / (peak * 1e9); /* TFLOP/s = 1e9 FLOP per ms */
	double mem_ms = r->bytes / (pk->mem_gb_s * 1e6);
	return math_ms > mem_ms ? math_ms : mem_ms;
}

int roofline_memory_bound(const struct roofline_row *r, const struct roofline_peak *pk)
{
	double peak = row_math_tflops(r, pk);
	if (!(peak > 0) || !(pk->mem_gb_s > 0))
		return 0;
	return r->bytes / (pk->mem_gb_s * 1e6) > r->flops / (peak * 1e9);
}

static int type_by_time(const void *a, const void *b)
{
	const struct roofline_type *x = a, *y = b;
	double kx = x->ms >= 0 ? x->ms : x->bound_ms, ky = y->ms >= 0 ? y->ms : y->bound_ms;
	if (kx != ky)
		return kx < ky ? 1 : -1;
	return strcmp(x->op, y->op);
}

/* A sum where any unknown part (< 0) makes the whole unknown. */
static void add_known(double *sum, double v)
{
	*sum = *sum < 0 || v < 0 ? -1 : *sum + v;
}

int roofline_by_type(const struct roofline_row *rows, int n, const struct roofline_peak *pk,
		     struct roofline_type **out, int *n_out)
{
	struct roofline_type *t = calloc(n > 0 ? (size_t)n : 1, sizeof(*t));
	int m = 0;
	if (!t)
		return gp_error(GP_ENOMEM, "roofline: no memory for %d rows", n);
	for (int i = 0; i < n; i++) {
		const struct roofline_row *r = &rows[i];
		int k = 0;
		while (k < m && strcmp(t[k].op, r->op))
			k++;
		if (k == m) {
			snprintf(t[m].op, sizeof(t[m].op), "%s", r->op);
			m++;
		}
		double bound = roofline_bound_ms(r, pk);
		t[k].rows++;
		t[k].flops += r->flops;
		t[k].bytes += r->bytes;
		add_known(&t[k].ms, r->ms);
		add_known(&t[k].bound_ms, bound);
		add_known(&t[k].mem_bound_ms, bound < 0 ? -1 : roofline_memory_bound(r, pk) ? bound : 0);
	}
	gp_qsort(t, (size_t)m, sizeof(*t), type_by_time);
	*out = t;
	*n_out = m;
	return 0;
}

/* The derived figures of one type (or the total): unknown ones are negative. */
struct type_figures {
	double gap, above_ms, tflops, gb_s, intensity;
	const char *bound_by;
};

static struct type_figures type_figures(const struct roofline_type *t)
{
	struct type_figures f = { -1, -1, -1, -1, -1, "?" };
	if (t->bytes > 0)
		f.intensity = t->flops / t->bytes;
	if (t->ms > 0) {
		f.tflops = t->flops / (t->ms * 1e9);
		f.gb_s = t->bytes / (t->ms * 1e6);
	}
	if (t->bound_ms > 0 && t->ms >= 0) {
		f.gap = t->ms / t->bound_ms;
		f.above_ms = t->ms - t->bound_ms;
	}
	if (t->bound_ms > 0)
		f.bound_by = 2 * t->mem_bound_ms >= t->bound_ms ? "memory" : "math";
	return f;
}

static struct roofline_type types_total(const struct roofline_type *types, int n)
{
	struct roofline_type all = { .op = "total" };
	for (int i = 0; i < n; i++) {
		all.rows += types[i].rows;
		all.flops += types[i].flops;
		all.bytes += types[i].bytes;
		add_known(&all.ms, types[i].ms);
		add_known(&all.bound_ms, types[i].bound_ms);
		add_known(&all.mem_bound_ms, types[i].mem_bound_ms);
	}
	return all;
}

static const char *num_or_dash(char *buf, size_t cap, const char *fmt, double v)
{
	if (v >= 0)
		snprintf(buf, cap, fmt, v);
	else
		snprintf(buf, cap, "-");
	return buf;
}

static int table_row(struct table *t, const struct roofline_type *ty)
{
	struct type_figures f = type_figures(ty);
	char ms[32], bound[32], gap[32], above[32], tf[32], gb[32], ai[32];
	return table_add_row(t, "%s\t%d\t%s\t%s\t%s\t%s\t%.2f\t%.1f\t%s\t%s\t%s\t%s", ty->op, ty->rows,
			     num_or_dash(ms, sizeof(ms), "%.3f", ty->ms),
			     num_or_dash(bound, sizeof(bound), "%.3f", ty->bound_ms),
			     num_or_dash(gap, sizeof(gap), "%.2fx", f.gap),
			     num_or_dash(above, sizeof(above), "%.3f", f.above_ms),
			     ty->flops / 1e9, ty->bytes / 1e6,
			     num_or_dash(tf, sizeof(tf), "%.2f", f.tflops),
			     num_or_dash(gb, sizeof(gb), "%.0f", f.gb_s),
			     num_or_dash(ai, sizeof(ai), "%.1f", f.intensity),
			     ty->bound_ms > 0 ? f.bound_by : "-");
}

int roofline_table(struct table *t, const struct roofline_type *types, int n)
{
	static const char *cols[] = { "op type", "layers", "ms/step", "bound ms", "gap",
				      "above bound ms", "GFLOP", "MB", "TFLOP/s", "GB/s",
				      "FLOP/byte", "bound by" };
	for (int c = 0; c < 12; c++)
		GP_TRY(table_add_col(t, cols[c], c == 0 || c == 11 ? TABLE_LEFT : TABLE_RIGHT));
	for (int i = 0; i < n; i++)
		GP_TRY(table_row(t, &types[i]));
	struct roofline_type all = types_total(types, n);
	return table_row(t, &all);
}

static json_t *known(double v)
{
	return v >= 0 ? result_real(v) : json_null();
}

static json_t *type_json(const struct roofline_type *ty)
{
	struct type_figures f = type_figures(ty);
	return json_pack("{s:s, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "op", ty->op,
			 "layers", ty->rows, "flops", result_real(ty->flops), "bytes",
			 result_real(ty->bytes), "ms", known(ty->ms), "bound_ms", known(ty->bound_ms),
			 "gap", known(f.gap), "above_bound_ms", known(f.above_ms), "tflops",
			 known(f.tflops), "gb_s", known(f.gb_s), "flop_per_byte", known(f.intensity),
			 "bound_by", ty->bound_ms > 0 ? json_string(f.bound_by) : json_null());
}

json_t *roofline_json(const struct roofline_type *types, int n, const struct roofline_row *rows,
		      int n_rows, const struct roofline_peak *pk)
{
	json_t *j = json_object(), *ta = json_array(), *la = json_array();
	if (!j || !ta || !la)
		goto fail;
	for (int i = 0; i < n; i++)
		if (json_array_append_new(ta, type_json(&types[i])) < 0)
			goto fail;
	for (int i = 0; i < n_rows; i++) {
		const struct roofline_row *r = &rows[i];
		double bound = roofline_bound_ms(r, pk);
		json_t *o = json_pack("{s:s, s:s, s:b, s:o, s:o, s:o, s:o, s:o}", "layer", r->layer,
				      "op", r->op, "tensor_cores", r->tensor, "flops", result_real(r->flops),
				      "bytes", result_real(r->bytes), "ms", known(r->ms), "bound_ms",
				      known(bound), "gap", r->ms >= 0 && bound > 0 ? result_real(r->ms / bound)
									   : json_null());
		if (json_array_append_new(la, o) < 0)
			goto fail;
	}
	struct roofline_type all = types_total(types, n);
	json_t *peak = json_pack("{s:o, s:o, s:o}", "tensor_tflops", known(pk->tensor_tflops > 0 ? pk->tensor_tflops : -1),
				 "cuda_tflops", known(pk->cuda_tflops > 0 ? pk->cuda_tflops : -1),
				 "mem_gb_s", known(pk->mem_gb_s > 0 ? pk->mem_gb_s : -1));
	if (json_object_set_new(j, "peak", peak) < 0 || json_object_set_new(j, "types", ta) < 0 ||
	    json_object_set_new(j, "layers", la) < 0 ||
	    json_object_set_new(j, "total", type_json(&all)) < 0) {
		json_decref(j);
		return NULL;
	}
	return j;
fail:
	json_decref(j);
	json_decref(ta);
	json_decref(la);
	return NULL;
}
