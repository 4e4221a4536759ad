#include "report/scale_report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "report/result.h"

double scale_ratio(double ours, double theirs)
{
	if (!(ours > 0) || !(theirs > 0) || !isfinite(ours) || !isfinite(theirs))
		return NAN;
	return ours / theirs;
}

void scale_rows_derive(struct scale_row *rows, int n)
{
	const struct scale_torch *t1 = n > 0 && rows[0].torch.state == SCALE_TORCH_OK
				       ? &rows[0].torch : NULL;
	for (int i = 0; i < n; i++) {
		struct scale_row *r = &rows[i];
		r->efficiency = r->img_s / (rows[0].img_s * r->gpus);
		r->exposed_ms = r->ms_per_step - rows[0].ms_per_step;
		if (r->exposed_ms < 0)
			r->exposed_ms = 0;
		r->hidden_pct = r->gpus > 1 && r->allreduce_ms > 0
					? 100 * (1 - fmin(r->exposed_ms, r->allreduce_ms) / r->allreduce_ms) : -1;
		struct scale_torch *t = &r->torch;
		t->ratio = t->efficiency = NAN;
		if (t->state != SCALE_TORCH_OK)
			continue;
		t->ratio = scale_ratio(r->img_s, t->img_s);
		if (t1)
			t->efficiency = scale_ratio(t->img_s, t1->img_s * r->gpus);
	}
}

int scale_table_fill(struct table *t, const struct scale_row *rows, int n, int on_gpu, int torch,
		     int data)
{
	static const char *const cols[] = { "GPUs", "img/s", "img/s/GPU", "efficiency", "ms/step",
					    "all-reduce ms", "hidden", "slowest rank", "TFLOP/s",
					    "MFU", "J/img" };
	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		GP_TRY(table_add_col(t, cols[i], TABLE_RIGHT));
	if (data)
		GP_TRY(table_add_col(t, "data wait", TABLE_RIGHT));
	if (torch) {
		GP_TRY(table_add_col(t, "torch img/s", TABLE_RIGHT));
		GP_TRY(table_add_col(t, "x torch", TABLE_RIGHT));
	}
	for (int i = 0; i < n; i++) {
		const struct scale_row *r = &rows[i];
		char hidden[16] = "-", slow[64] = "-", ar[24] = "-", mfu[32], joule[32];
		char tcols[64] = "", dcol[24] = "";
		if (data && r->data_wait_pct >= 0)
			snprintf(dcol, sizeof(dcol), "\t%.1f%%", r->data_wait_pct);
		else if (data)
			snprintf(dcol, sizeof(dcol), "\t-");
		if (r->gpus > 1)
			snprintf(ar, sizeof(ar), "%.2f", r->allreduce_ms);
		if (r->hidden_pct >= 0)
			snprintf(hidden, sizeof(hidden), "%.0f%%", r->hidden_pct);
		if (r->gpus > 1)
			snprintf(slow, sizeof(slow), "%d (%.2f vs %.2f ms)", r->slowest_rank, r->slowest_ms,
				 r->fastest_ms);
		if (torch && r->torch.state == SCALE_TORCH_OK && isfinite(r->torch.ratio))
			snprintf(tcols, sizeof(tcols), "\t%.1f\t%.2fx", r->torch.img_s, r->torch.ratio);
		else if (torch)
			snprintf(tcols, sizeof(tcols), "\t%s\t-",
				 r->torch.state == SCALE_TORCH_FAILED ? "failed" : "-");
		GP_TRY(table_add_row(t, "%d\t%.1f\t%.1f\t%.1f%%\t%.2f\t%s\t%s\t%s\t%.2f\t%s\t%s%s%s",
				     r->gpus, r->img_s, r->img_s_per_gpu, 100 * r->efficiency,
				     r->ms_per_step, ar, hidden, slow, r->mfu.tflops,
				     mfu_pct_str(&r->mfu, on_gpu, mfu, sizeof(mfu)),
				     mfu_energy_str(&r->mfu, joule, sizeof(joule)), dcol, tcols));
	}
	return 0;
}

static json_t *torch_json(const struct scale_torch *t)
{
	if (t->state != SCALE_TORCH_OK)
		return json_pack("{s:s, s:s}", "status", t->state == SCALE_TORCH_FAILED ? "failed" : "not run",
				 "note", t->note);
	return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o}", "status", "ok",
			 "img_s", result_real(t->img_s), "img_s_per_gpu", result_real(t->img_s_per_gpu),
			 "ms_per_step", result_real(t->ms_per_step),
			 "peak_reserved_mib", result_real(t->peak_reserved_mib),
			 "efficiency", result_real(t->efficiency), "ratio", result_real(t->ratio));
}

json_t *scale_runs_json(const struct scale_row *rows, int n, int torch)
{
	json_t *arr = json_array();
	if (!arr)
		return NULL;
	for (int i = 0; i < n; i++) {
		const struct scale_row *r = &rows[i];
		json_t *o = json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:o}", "gpus", r->gpus,
				      "img_s", result_real(r->img_s), "img_s_per_gpu", result_real(r->img_s_per_gpu),
				      "efficiency", result_real(r->efficiency), "ms_per_step", result_real(r->ms_per_step),
				      "allreduce_ms", result_real(r->allreduce_ms),
				      "exposed_comm_ms", result_real(r->exposed_ms),
				      "allreduce_hidden_pct", r->hidden_pct >= 0 ? result_real(r->hidden_pct) : json_null(),
				      "slowest_rank", r->slowest_rank,
				      "data_wait_pct", r->data_wait_pct >= 0 ? result_real(r->data_wait_pct)
									 : json_null());
		if (!o || json_array_append_new(arr, o) < 0)
			goto oom;
		if (r->train && json_object_set(o, "train", r->train) < 0)
			goto oom;
		if (mfu_json_set(o, &r->mfu) < 0)
			goto oom;
		if (torch && json_object_set_new(o, "torch", torch_json(&r->torch)) < 0)
			goto oom;
	}
	return arr;
oom:
	json_decref(arr);
	return NULL;
}

void scale_summary(const struct scale_row *rows, int n, char *buf, size_t cap)
{
	size_t len;
	buf[0] = 0;
	if (n <= 0)
		return;
	const struct scale_row *last = &rows[n - 1];
	snprintf(buf, cap, "summary: %d GPU%s %.1f img/s, %.1f%% efficiency", last->gpus,
		 last->gpus == 1 ? "" : "s", last->img_s, 100 * last->efficiency);
	int any = 0;
	for (int i = 0; i < n; i++)
		any |= rows[i].torch.state == SCALE_TORCH_OK && isfinite(rows[i].torch.ratio);
	if (!any)
		return;
	len = strlen(buf);
	snprintf(buf + len, cap - len, "; gpuperf / PyTorch DDP img/s:");
	for (int i = 0; i < n; i++) {
		const struct scale_torch *t = &rows[i].torch;
		len = strlen(buf);
		if (t->state == SCALE_TORCH_OK && isfinite(t->ratio))
			snprintf(buf + len, cap - len, "%s %.2fx at %d", i ? "," : "", t->ratio,
				 rows[i].gpus);
		else
			snprintf(buf + len, cap - len, "%s - at %d", i ? "," : "", rows[i].gpus);
	}
}

/* A positive finite number field of o, or 0 with a note naming it. */
static int torch_field(json_t *o, const char *key, double *v, struct scale_torch *t)
{
	json_t *j = json_object_get(o, key);
	*v = json_number_value(j);
	if (json_is_number(j) && *v > 0 && isfinite(*v))
		return 1;
	snprintf(t->note, sizeof(t->note), "torch_ddp.py's line has no positive \"%s\"", key);
	return 0;
}

void scale_torch_read(const char *path, int world, struct scale_torch *t, char *version, size_t cap)
{
	char line[4096];
	json_t *best = NULL;
	memset(t, 0, sizeof(*t));
	t->state = SCALE_TORCH_FAILED;
	t->ratio = t->efficiency = NAN;
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(t->note, sizeof(t->note), "no output from torch_ddp.py");
		return;
	}
	/* the last line that is a JSON object with img_s_total: rank 0's measurement */
	while (fgets(line, sizeof(line), f)) {
		if (line[0] != '{')
			continue;
		json_t *j = json_loads(line, 0, NULL);
		if (json_is_object(j) && json_object_get(j, "img_s_total")) {
			json_decref(best);
			best = j;
		} else {
			json_decref(j);
		}
	}
	fclose(f);
	if (!best) {
		snprintf(t->note, sizeof(t->note), "torch_ddp.py printed no measurement");
		return;
	}
	json_t *w = json_object_get(best, "world");
	if (json_is_integer(w) && json_integer_value(w) != world) {
		snprintf(t->note, sizeof(t->note), "torch_ddp.py ran %lld ranks, not %d",
			 (long long)json_integer_value(w), world);
	} else if (torch_field(best, "img_s_total", &t->img_s, t) &&
		   torch_field(best, "ms_per_step", &t->ms_per_step, t)) {
		json_t *pg = json_object_get(best, "img_s_per_gpu");
		json_t *mib = json_object_get(best, "peak_reserved_mib");
		t->img_s_per_gpu = json_is_number(pg) ? json_number_value(pg) : t->img_s / world;
		t->peak_reserved_mib = json_is_number(mib) ? json_number_value(mib) : NAN;
		t->state = SCALE_TORCH_OK;
		t->note[0] = 0;
	}
	const char *v = json_string_value(json_object_get(best, "torch"));
	if (v && version)
		snprintf(version, cap, "%s", v);
	json_decref(best);
}
