/* The analysis as text (analyze's output), JSON (analysis.json) and Markdown
 * (profile_report.md). */
#include "report/analysis_priv.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/file.h"
#include "report/mem_report.h"
#include "report/result.h"

static void print_ops(FILE *f, const char *title, const struct analysis_op *ops, int n,
		      int bytes)
{
	fprintf(f, "\n%s\n  %-40s %7s %12s %12s\n", title, "name", "count",
		bytes ? "total MiB" : "total ms", bytes ? "mean MiB" : "mean ms");
	for (int i = 0; i < n; i++) {
		double s = bytes ? 1.0 / (1 << 20) : 1.0;
		fprintf(f, "  %-40.40s %7ld %12.3f %12.4f\n", ops[i].name, ops[i].count,
			ops[i].total * s, ops[i].mean * s);
	}
}

static double pct(double part, double whole)
{
	return whole > 0 ? 100 * part / whole : 0;
}

/* An op table as torch.profiler prints one; rows past max are left out. */
static void print_oprows(FILE *f, const struct analysis *a, const char *title,
			 const struct analysis_oprow *r, int n, int max, int shapes)
{
	fprintf(f, "\n%s (sorted by %s time; %% of the step time)\n  %-34s %6s %10s %10s %6s %10s %6s %9s %9s%s\n",
		title, a->sort_by_gpu ? "GPU" : "CPU total", "name", "calls", "self CPU", "CPU total",
		"CPU%", "GPU ms", "GPU%", "CPU mean", "GPU mean", shapes ? "  input shapes" : "");
	for (int i = 0; i < n && i < max; i++) {
		long c = r[i].calls ? r[i].calls : r[i].gpu_calls;
		if (r[i].calls)
			fprintf(f, "  %-34.34s %6ld %10.3f %10.3f %5.1f%%", r[i].name, r[i].calls,
				r[i].cpu_self_ms, r[i].cpu_total_ms,
				pct(r[i].cpu_total_ms, a->steps_total_ms));
		else
			fprintf(f, "  %-34.34s %6s %10s %10s %6s", r[i].name, "-", "-", "-", "-");
		fprintf(f, " %10.3f %5.1f%% %9.4f %9.4f", r[i].gpu_ms, pct(r[i].gpu_ms, a->steps_total_ms),
			r[i].calls ? r[i].cpu_total_ms / r[i].calls : 0, c ? r[i].gpu_ms / c : 0);
		if (shapes)
			fprintf(f, "  %s", r[i].shapes);
		fputc('\n', f);
	}
	if (n > max)
		fprintf(f, "  ... %d more in analysis.json\n", n - max);
}

static void occ_text(double v, char *buf, size_t cap)
{
	if (v < 0)
		snprintf(buf, cap, "n/a");
	else
		snprintf(buf, cap, "%.0f%%", 100 * v);
}

static void print_kconf(FILE *f, const struct analysis *a, int md)
{
	if (md)
		fprintf(f, "\n## Top kernels by launch configuration\n\nOccupancy is estimated from "
			   "the registers and shared memory CUPTI records and the compute "
			   "capability's limits (est.: no more blocks per SM than the grid gives "
			   "each); n/a where either is unknown.\n\n| kernel | calls | total ms | mean us "
			   "| grid | block | regs/thread | shared B | theoretical occ. | est. achieved occ. |\n"
			   "|---|---:|---:|---:|---|---|---:|---:|---:|---:|\n");
	else
		fprintf(f, "\ntop kernels by launch configuration (occupancy estimated)\n  %-36s %6s %10s %9s %15s %13s %5s %8s %6s %6s\n",
			"kernel", "calls", "total ms", "mean us", "grid", "block", "regs", "shared",
			"theor", "est.");
	for (int i = 0; i < a->n_kconf; i++) {
		const struct analysis_kconf *k = &a->kconf[i];
		char grid[48], block[48], th[16], ach[16];
		snprintf(grid, sizeof(grid), "%dx%dx%d", k->grid[0], k->grid[1], k->grid[2]);
		snprintf(block, sizeof(block), "%dx%dx%d", k->block[0], k->block[1], k->block[2]);
		occ_text(k->theoretical_occupancy, th, sizeof(th));
		occ_text(k->achieved_occupancy, ach, sizeof(ach));
		if (md)
			fprintf(f, "| `%s` | %ld | %.3f | %.1f | %s | %s | %d | %d | %s | %s |\n", k->name,
				k->calls, k->total_ms, k->mean_us, grid, block, k->registers,
				k->shared_bytes, th, ach);
		else
			fprintf(f, "  %-36.36s %6ld %10.3f %9.1f %15s %13s %5d %8d %6s %6s\n", k->name,
				k->calls, k->total_ms, k->mean_us, grid, block, k->registers,
				k->shared_bytes, th, ach);
	}
}

static void md_oprows(FILE *f, const struct analysis *a, const char *title,
		      const struct analysis_oprow *r, int n, int max, int shapes)
{
	fprintf(f, "\n## %s\n\nSorted by %s time; %% of the step time summed over the steps. Self "
		   "CPU leaves out the CUDA runtime calls inside (their own row).\n\n| name | calls "
		   "| self CPU ms | CPU total ms | CPU %% | GPU ms | GPU %% | CPU mean ms | GPU mean "
		   "ms |%s\n|---|---:|---:|---:|---:|---:|---:|---:|---:|%s\n",
		title, a->sort_by_gpu ? "GPU" : "CPU total", shapes ? " input shapes |" : "",
		shapes ? "---|" : "");
	for (int i = 0; i < n && i < max; i++) {
		long c = r[i].calls ? r[i].calls : r[i].gpu_calls;
		if (r[i].calls)
			fprintf(f, "| `%s` | %ld | %.3f | %.3f | %.1f | ", r[i].name, r[i].calls,
				r[i].cpu_self_ms, r[i].cpu_total_ms,
				pct(r[i].cpu_total_ms, a->steps_total_ms));
		else
			fprintf(f, "| `%s` | - | - | - | - | ", r[i].name);
		fprintf(f, "%.3f | %.1f | %.4f | %.4f |", r[i].gpu_ms,
			pct(r[i].gpu_ms, a->steps_total_ms),
			r[i].calls ? r[i].cpu_total_ms / r[i].calls : 0, c ? r[i].gpu_ms / c : 0);
		if (shapes)
			fprintf(f, " %s |", r[i].shapes[0] ? r[i].shapes : "");
		fputc('\n', f);
	}
	if (n > max)
		fprintf(f, "\n%d more rows in analysis.json.\n", n - max);
}

/* The text table's row i: step i, or the mean after the last; starts the line with
 * its label and total and returns the row. */
static const struct analysis_step *step_row_begin(FILE *f, const struct analysis *a, int i)
{
	const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
	if (i < a->n_steps)
		fprintf(f, "  %6d %9.3f", s->step, s->dur_ms);
	else
		fprintf(f, "  %6s %9.3f", "mean", s->dur_ms);
	return s;
}

static json_t *oprows_json(const struct analysis *a, const struct analysis_oprow *r, int n)
{
	json_t *arr = json_array();
	for (int i = 0; arr && i < n; i++) {
		json_t *o = json_pack("{s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "name", r[i].name,
				      "calls", (json_int_t)r[i].calls, "gpu_calls",
				      (json_int_t)r[i].gpu_calls, "self_cpu_ms",
				      result_real(r[i].cpu_self_ms), "cpu_total_ms",
				      result_real(r[i].cpu_total_ms), "gpu_ms", result_real(r[i].gpu_ms),
				      "cpu_pct_of_step", result_real(pct(r[i].cpu_total_ms, a->steps_total_ms)),
				      "gpu_pct_of_step", result_real(pct(r[i].gpu_ms, a->steps_total_ms)));
		if (o && r[i].shapes[0])
			json_object_set_new(o, "input_shapes", json_string(r[i].shapes));
		json_array_append_new(arr, o);
	}
	return arr;
}

static json_t *kconf_json(const struct analysis *a)
{
	json_t *arr = json_array();
	for (int i = 0; arr && i < a->n_kconf; i++) {
		const struct analysis_kconf *k = &a->kconf[i];
		json_array_append_new(
			arr, json_pack("{s:s, s:I, s:o, s:o, s:[i,i,i], s:[i,i,i], s:i, s:i, s:o, s:o}",
				       "name", k->name, "calls", (json_int_t)k->calls, "total_ms",
				       result_real(k->total_ms), "mean_us", result_real(k->mean_us),
				       "grid", k->grid[0], k->grid[1], k->grid[2], "block", k->block[0],
				       k->block[1], k->block[2], "registers_per_thread", k->registers,
				       "shared_memory_bytes", k->shared_bytes, "theoretical_occupancy",
				       k->theoretical_occupancy < 0 ? json_null()
								    : result_real(k->theoretical_occupancy),
				       "est_achieved_occupancy",
				       k->achieved_occupancy < 0 ? json_null()
								 : result_real(k->achieved_occupancy)));
	}
	return arr;
}

void analysis_print(const struct analysis *a, FILE *f)
{
	fprintf(f, "profile: model %s, batch %d, precision %s, GPU %s\n",
		a->meta.model[0] ? a->meta.model : "?", a->meta.batch, a->meta.precision,
		a->meta.gpu_name[0] ? a->meta.gpu_name : "none");
	fprintf(f, "\nstep breakdown (ms)\n  %6s %9s", "step", "total");
	for (int p = 0; p < PART_COUNT; p++)
		fprintf(f, " %8s", analysis_part_names[p]);
	fputc('\n', f);
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = step_row_begin(f, a, i);
		for (int p = 0; p < PART_COUNT; p++)
			fprintf(f, " %8.3f", s->part_ms[p]);
		fputc('\n', f);
	}
	fprintf(f, "\n%s time by stage (ms; sums to the step)\n  %6s %9s",
		a->device_from_host ? "compute thread" : "GPU", "step", "total");
	for (int d = 0; d < DSTAGE_COUNT; d++)
		fprintf(f, " %9.9s", d == DSTAGE_COMM ? "comm" : analysis_dstage_names[d]);
	fputc('\n', f);
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = step_row_begin(f, a, i);
		for (int d = 0; d < DSTAGE_COUNT; d++)
			fprintf(f, " %9.3f", s->device_ms[d]);
		fputc('\n', f);
	}
	fprintf(f, "host stages, mean per step (ms):");
	for (int st = 0; st < STAGE_COUNT; st++)
		fprintf(f, " %s %.3f", analysis_stage_names[st], a->mean.stage_ms[st]);
	fprintf(f, "\nGPU busy %.1f%%, data wait %.1f%%, %ld kernels (median %.1f us, total %.3f ms)\n",
		100 * a->gpu_busy_share, 100 * a->data_wait_share, a->n_kernels,
		a->kernel_median_us, a->kernel_total_ms);
	print_ops(f, "top ops by CPU time", a->top_cpu, a->n_top_cpu, 0);
	print_ops(f, "top layers by GPU time", a->top_gpu, a->n_top_gpu, 0);
	print_ops(f, "top kernels by GPU time", a->top_kernels, a->n_top_kernels, 0);
	print_oprows(f, a, "ops by type", a->op_types, a->n_op_types, 40, 0);
	print_oprows(f, a, "ops by layer", a->op_layers, a->n_op_layers, ANALYSIS_TOP,
		     a->have_shapes);
	if (a->n_kconf)
		print_kconf(f, a, 0);
	analysis_hta_print(&a->hta, f, 0);
	print_ops(f, "top layers by memory allocated", a->top_mem, a->n_top_mem, 1);
	if (a->have_mem_tl)
		mem_timeline_print(&a->mem_tl, f);
	fprintf(f, "\nadvice\n");
	if (!a->n_advice)
		fprintf(f, "  none: no rule fired\n");
	for (int i = 0; i < a->n_advice; i++)
		fprintf(f, "  [%s] %s (estimated %.2fx)\n", a->advice[i].rule, a->advice[i].text,
			a->advice[i].est_speedup);
}

static json_t *ops_json(const struct analysis_op *ops, int n, const char *unit)
{
	json_t *arr = json_array();
	char total[32], mean[32];
	snprintf(total, sizeof(total), "total_%s", unit);
	snprintf(mean, sizeof(mean), "mean_%s", unit);
	for (int i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:s, s:I, s:o, s:o}", "name", ops[i].name,
						     "count", (json_int_t)ops[i].count, total,
						     result_real(ops[i].total), mean, result_real(ops[i].mean)));
	return arr;
}

static json_t *step_json(const struct analysis_step *s)
{
	json_t *o = json_pack("{s:i, s:o, s:o, s:o}", "step", s->step, "dur_ms", result_real(s->dur_ms),
			      "gpu_busy_ms", result_real(s->gpu_busy_ms), "data_wait_ms", result_real(s->data_wait_ms));
	char key[32];
	for (int p = 0; o && p < PART_COUNT; p++) {
		snprintf(key, sizeof(key), "%s_ms", analysis_part_names[p]);
		json_object_set_new(o, key, result_real(s->part_ms[p]));
	}
	for (int st = 0; o && st < STAGE_COUNT; st++) {
		snprintf(key, sizeof(key), "stage_%s_ms", analysis_stage_names[st]);
		json_object_set_new(o, key, result_real(s->stage_ms[st]));
	}
	json_t *dev = json_object();
	for (int d = 0; dev && d < DSTAGE_COUNT; d++)
		json_object_set_new(dev, analysis_dstage_names[d], result_real(s->device_ms[d]));
	if (o && dev)
		json_object_set_new(o, "device_stage_ms", dev);
	else
		json_decref(dev);
	return o;
}

json_t *analysis_to_json(const struct analysis *a)
{
	json_t *steps = json_array(), *advice = json_array();
	for (int i = 0; steps && i < a->n_steps; i++)
		json_array_append_new(steps, step_json(&a->steps[i]));
	for (int i = 0; advice && i < a->n_advice; i++)
		json_array_append_new(advice, json_pack("{s:s, s:o, s:o, s:o, s:s}", "rule",
							a->advice[i].rule, "value",
							result_real(a->advice[i].value), "threshold",
							result_real(a->advice[i].threshold),
							"est_speedup",
							result_real(a->advice[i].est_speedup), "text",
							a->advice[i].text));
	json_t *j = json_pack("{s:{s:s, s:i, s:s, s:s}, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, "
			 "s:o, s:o, s:o, s:o, s:o, s:o}",
			 "meta", "model", a->meta.model, "batch", a->meta.batch, "precision",
			 a->meta.precision, "gpu", a->meta.gpu_name,
			 "steps", steps, "mean_step", step_json(&a->mean),
			 "gpu_busy_share", result_real(a->gpu_busy_share), "gpu_idle_share", result_real(a->gpu_idle_share),
			 "data_wait_share", result_real(a->data_wait_share),
			 "kernels", (json_int_t)a->n_kernels, "kernel_total_ms", result_real(a->kernel_total_ms),
			 "kernel_median_us", result_real(a->kernel_median_us),
			 "top_cpu_ops", ops_json(a->top_cpu, a->n_top_cpu, "ms"),
			 "top_gpu_layers", ops_json(a->top_gpu, a->n_top_gpu, "ms"),
			 "top_kernels", ops_json(a->top_kernels, a->n_top_kernels, "ms"),
			 "top_memory_layers", ops_json(a->top_mem, a->n_top_mem, "bytes"),
			 "memory_peak_bytes", result_real(a->mem_peak_bytes), "advice", advice);
	if (j)
		json_object_set_new(j, "device_time_source",
				    json_string(a->device_from_host ? "cpu_compute_thread" : "gpu"));
	if (j) {
		json_object_set_new(j, "op_sort", json_string(a->sort_by_gpu ? "gpu" : "cpu"));
		json_object_set_new(j, "op_types", oprows_json(a, a->op_types, a->n_op_types));
		json_object_set_new(j, "op_layers", oprows_json(a, a->op_layers, a->n_op_layers));
		json_object_set_new(j, "kernel_configs", kconf_json(a));
		json_object_set_new(j, "hta", analysis_hta_json(&a->hta));
	}
	if (j && a->have_mem_tl)
		json_object_set_new(j, "memory_timeline", mem_timeline_to_json(&a->mem_tl));
	return j;
}

/* The report's per-step rows (and the mean): the step's parts (device 0) or its
 * device stages (1), then its host stages. */
static void md_step_rows(FILE *f, const struct analysis *a, int device)
{
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
		if (i < a->n_steps)
			fprintf(f, "| %d | %.3f |", s->step, s->dur_ms);
		else
			fprintf(f, "| mean | %.3f |", s->dur_ms);
		for (int p = 0; p < (device ? DSTAGE_COUNT : PART_COUNT); p++)
			fprintf(f, " %.3f |", device ? s->device_ms[p] : s->part_ms[p]);
		for (int st = 0; st < STAGE_COUNT; st++)
			fprintf(f, " %.3f |", s->stage_ms[st]);
		fputc('\n', f);
	}
}

static void md_ops(FILE *f, const char *title, const struct analysis_op *ops, int n, int bytes)
{
	fprintf(f, "\n## %s\n\n| name | count | total %s | mean %s |\n|---|---:|---:|---:|\n",
		title, bytes ? "MiB" : "ms", bytes ? "MiB" : "ms");
	double s = bytes ? 1.0 / (1 << 20) : 1.0;
	for (int i = 0; i < n; i++)
		fprintf(f, "| `%s` | %ld | %.3f | %.4f |\n", ops[i].name, ops[i].count,
			ops[i].total * s, ops[i].mean * s);
}

void analysis_markdown_print(const struct analysis *a, FILE *f)
{
	fprintf(f, "# Profile report\n\nModel **%s**, batch %d, precision %s, GPU %s.\n\n",
		a->meta.model[0] ? a->meta.model : "?", a->meta.batch, a->meta.precision,
		a->meta.gpu_name[0] ? a->meta.gpu_name : "none");
	fprintf(f, "## Key figures\n\n- steps analysed: %d, mean step %.3f ms\n"
		   "- GPU busy: %.1f%% of the step (idle %.1f%%)\n- data wait: %.1f%% of the step\n"
		   "- kernels: %ld, median %.1f us, total %.3f ms\n- peak memory allocated: %.1f MiB\n",
		a->n_steps, a->mean.dur_ms, 100 * a->gpu_busy_share, 100 * a->gpu_idle_share,
		100 * a->data_wait_share, a->n_kernels, a->kernel_median_us, a->kernel_total_ms,
		a->mem_peak_bytes / (1 << 20));
	fprintf(f, "\n## Step breakdown (ms)\n\n| step | total |");
	for (int p = 0; p < PART_COUNT; p++)
		fprintf(f, " %s |", analysis_part_names[p]);
	for (int st = 0; st < STAGE_COUNT; st++)
		fprintf(f, " stage %s |", analysis_stage_names[st]);
	fprintf(f, "\n|---:|---:|");
	for (int p = 0; p < PART_COUNT + STAGE_COUNT; p++)
		fprintf(f, "---:|");
	fputc('\n', f);
	md_step_rows(f, a, 0);
	fprintf(f, "\n## %s time by stage (ms)\n\nEach instant of the step goes to the stage whose "
		   "%s then (forward, backward, optimizer, communication, data, other first), "
		   "the rest is idle: the columns sum to the step. Host time in each stage's "
		   "annotation is the last four columns.\n\n| step | total |",
		a->device_from_host ? "Compute thread" : "GPU",
		a->device_from_host ? "annotation covers the compute thread"
				    : "kernels, copies or memsets ran");
	for (int d = 0; d < DSTAGE_COUNT; d++)
		fprintf(f, " %s |", analysis_dstage_names[d]);
	for (int st = 0; st < STAGE_COUNT; st++)
		fprintf(f, " host %s |", analysis_stage_names[st]);
	fprintf(f, "\n|---:|---:|");
	for (int p = 0; p < DSTAGE_COUNT + STAGE_COUNT; p++)
		fprintf(f, "---:|");
	fputc('\n', f);
	md_step_rows(f, a, 1);
	md_ops(f, "Top ops by CPU time", a->top_cpu, a->n_top_cpu, 0);
	md_ops(f, "Top layers by GPU time", a->top_gpu, a->n_top_gpu, 0);
	md_ops(f, "Top kernels by GPU time", a->top_kernels, a->n_top_kernels, 0);
	md_oprows(f, a, "Ops by type", a->op_types, a->n_op_types, 40, 0);
	md_oprows(f, a, "Ops by layer", a->op_layers, a->n_op_layers, 30, a->have_shapes);
	if (a->n_kconf)
		print_kconf(f, a, 1);
	analysis_hta_print(&a->hta, f, 1);
	md_ops(f, "Top layers by memory allocated", a->top_mem, a->n_top_mem, 1);
	if (a->have_mem_tl)
		mem_timeline_markdown(&a->mem_tl, f);
	fprintf(f, "\n## Advice\n\n");
	if (!a->n_advice)
		fprintf(f, "No rule fired.\n");
	for (int i = 0; i < a->n_advice; i++)
		fprintf(f, "- **%s** (measured %.3g, threshold %.3g, estimated %.2fx): %s\n",
			a->advice[i].rule, a->advice[i].value, a->advice[i].threshold,
			a->advice[i].est_speedup, a->advice[i].text);
}

int analysis_write_markdown(const struct analysis *a, const char *path)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	analysis_markdown_print(a, af.f);
	return atomic_file_commit(&af);
}
