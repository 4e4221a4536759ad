/* gpuperf analyze PATH: read the trace `gpuperf profile` left in a folder (or one from
 * torch.profiler, or a trace file given directly), print the breakdown and write
 * profile_report.md and analysis.json next to it or in --output-dir. A folder of
 * profile_epoch_* folders (train --profile-epochs) is analysed folder by folder and
 * compared side by side. Needs no GPU. */
#include <dirent.h>
#include <libgen.h>
#include <stdlib.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "core/file.h"
#include "core/sort.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
#include "report/mem_report.h"
#include "report/profile_charts.h"
#include "report/profiler.h"
#include "report/result.h"

/* Whatever sits at path counts: a FIFO or a folder there is refused when read, in
 * one line that names it, rather than passed over. */
static int file_exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* DIR/profiler_trace.json, else the first by name of profiler_logs/NAME.pt.trace.json. */
static int trace_find(const char *dir, char *path, size_t cap)
{
	snprintf(path, cap, "%s/profiler_trace.json", dir);
	if (file_exists(path))
		return 0;
	char logs[4096], best[256] = "";
	snprintf(logs, sizeof(logs), "%s/profiler_logs", dir);
	DIR *d = opendir(logs);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);
			if (n > 14 && !strcmp(e->d_name + n - 14, ".pt.trace.json") &&
			    n < sizeof(best) && (!best[0] || strcmp(e->d_name, best) < 0))
				snprintf(best, sizeof(best), "%s", e->d_name);
		}
		closedir(d);
	}
	if (!best[0])
		return gp_error(GP_ENOTFOUND,
				"no profiler_trace.json or profiler_logs/*.pt.trace.json in '%s'", dir);
	if (snprintf(path, cap, "%s/%s", logs, best) >= (int)cap)
		return gp_error(GP_EINVAL, "path too long: '%s/%s'", logs, best);
	return 0;
}

/* The trace holds no step times of unprofiled steps: the overhead section of
 * profile_report.md comes back from the result.json that `profile` (or a profiled
 * `train` window) left beside it. *found is 0 for a folder without one (a
 * torch.profiler trace), which gets no such section. */
static int report_read_overhead(const char *dir, struct profile_overhead *ov,
				long long *trace_bytes, int *found, struct analysis *a)
{
	char path[4096];
	json_t *res = NULL;
	*found = 0;
	snprintf(path, sizeof(path), "%s/result.json", dir);
	if (!file_exists(path))
		return 0;
	GP_TRY(result_read(path, &res));
	json_t *m = json_object_get(res, "measurements");
	json_t *prof_ms = json_object_get(m, "profiled_ms_per_step");
	if (json_is_number(prof_ms)) {
		*ov = (struct profile_overhead){
			.baseline_ms = json_number_value(json_object_get(m, "baseline_ms_per_step")),
			.baseline_steps = (int)json_integer_value(json_object_get(m, "baseline_steps")),
			.profiled_ms = json_number_value(prof_ms),
			.profiled_steps = (int)json_integer_value(json_object_get(m, "profiled_steps")),
			.ratio = json_number_value(json_object_get(m, "overhead_ratio")),
		};
		*trace_bytes = (long long)json_integer_value(json_object_get(m, "trace_bytes"));
		*found = 1;
	}
	/* the memory timeline comes from the plan, which the trace does not hold */
	json_t *tl_json = json_object_get(json_object_get(m, "analysis"), "memory_timeline");
	int rc = 0;
	if (tl_json) {
		struct mem_timeline tl;
		rc = mem_timeline_from_json(tl_json, &tl);
		if (rc == 0) {
			rc = analysis_set_mem_timeline(a, &tl);
			mem_timeline_free(&tl);
		}
		if (rc < 0)
			gp_error_wrap(rc, "'%s'", path);
	}
	json_decref(res);
	return rc;
}

/* The figures of one analysis set side by side with the others' (the comparison
 * table of a folder of profile_epoch_* folders). */
struct headline {
	char name[256];
	int steps;
	double step_ms, gpu_busy, data_wait, device_ms[DSTAGE_COUNT], peak_mib;
	long kernels;
	char advice[128];
};

static void headline_fill(const struct analysis *a, const char *name, struct headline *h)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->steps = a->n_steps;
	h->step_ms = a->mean.dur_ms;
	h->gpu_busy = 100 * a->gpu_busy_share;
	h->data_wait = 100 * a->data_wait_share;
	for (int d = 0; d < DSTAGE_COUNT; d++)
		h->device_ms[d] = a->mean.device_ms[d];
	h->peak_mib = a->mem_peak_bytes / (1 << 20);
	h->kernels = a->n_kernels;
	size_t len = 0;
	for (int i = 0; i < a->n_advice && len < sizeof(h->advice); i++) {
		int w = snprintf(h->advice + len, sizeof(h->advice) - len, "%s%s", i ? " " : "",
				 a->advice[i].rule);
		len += w > 0 ? (size_t)w : 0;
	}
}

/* Analyse the trace at trace_path; result.json is looked for in src_dir, outputs go
 * to out_dir (prepared by the caller). */
static int analyze_one(const char *trace_path, const char *src_dir, const char *out_dir,
		       const char *sort, const char *name, struct headline *h)
{
	char path[4096];
	struct trace t;
	struct analysis a;
	int rc;
	GP_TRY(chrome_trace_read(trace_path, &t));
	rc = analysis_run(&t, &a);
	if (rc < 0) {
		gp_error_wrap(rc, "'%s'", trace_path);
		goto free_trace;
	}
	struct profile_overhead ov;
	long long trace_bytes = 0;
	int have_ov;
	rc = report_read_overhead(src_dir, &ov, &trace_bytes, &have_ov, &a);
	if (rc < 0)
		goto free_analysis;
	if (sort)
		analysis_sort_ops(&a, !strcmp(sort, "gpu"));
	if (name)
		printf("\n=== %s\n", name);
	analysis_print(&a, stdout);
	snprintf(path, sizeof(path), "%s/profile_report.md", out_dir);
	rc = profile_report_write(&a, path, have_ov ? &ov : NULL, trace_bytes);
	if (rc < 0)
		goto free_analysis;
	rc = profile_charts_draw(&a, out_dir, stdout);
	if (rc < 0)
		goto free_analysis;
	json_t *j = analysis_to_json(&a);
	if (!j) {
		rc = gp_error(GP_ENOMEM, "cannot build the analysis summary");
		goto free_analysis;
	}
	snprintf(path, sizeof(path), "%s/analysis.json", out_dir);
	rc = json_write_atomic(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
	json_decref(j);
	if (rc == 0)
		printf("\nwrote %s/profile_report.md, %s/analysis.json, %s/stage_breakdown.png and "
		       "%s/%s\n", out_dir, out_dir, out_dir, out_dir,
		       a.have_mem_tl ? "memory_timeline.png"
				     : "memory_trend.png (when the trace has memory events)");
	if (rc == 0 && h)
		headline_fill(&a, name ? name : out_dir, h);
free_analysis:
	analysis_free(&a);
free_trace:
	trace_free(&t);
	return rc;
}

static int is_trace_file(const char *p)
{
	size_t n = strlen(p);
	return (n > 5 && !strcmp(p + n - 5, ".json")) || (n > 8 && !strcmp(p + n - 8, ".json.gz"));
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The profile_epoch_* folders of dir, sorted by name (epoch numbers compare as text
 * only up to 10 epochs; the timestamp suffix keeps equal epochs apart). */
static int epoch_dirs(const char *dir, char ***names, size_t *n)
{
	*names = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return gp_error(GP_EIO, "cannot read '%s': %s", dir, strerror(errno));
	size_t cap = 0;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(d)) && rc == 0) {
		char path[4096];
		struct stat st;
		if (strncmp(e->d_name, "profile_epoch_", 14))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			char **v = realloc(*names, cap * sizeof(*v));
			if (!v) {
				rc = gp_error(GP_ENOMEM, "out of memory");
				break;
			}
			*names = v;
		}
		if (!((*names)[*n] = strdup(e->d_name)))
			rc = gp_error(GP_ENOMEM, "out of memory");
		else
			(*n)++;
	}
	closedir(d);
	if (*n > 1)
		gp_qsort(*names, *n, sizeof(**names), name_cmp);
	return rc;
}

static void comparison_print(FILE *f, const struct headline *h, size_t n, int md)
{
	static const char *const cols[] = { "steps", "step ms", "GPU busy %", "data wait %",
					    "kernels", "fwd ms", "bwd ms", "optim ms",
					    "idle ms", "peak MiB", "advice" };
	if (md) {
		fprintf(f, "# Profiles compared\n\nMean per step over each folder's recorded steps; "
			   "fwd, bwd, optim and idle are GPU time by stage (the compute thread's on "
			   "the CPU).\n\n| folder |");
		for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
			fprintf(f, " %s |", cols[c]);
		fprintf(f, "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
	} else {
		fprintf(f, "\nprofiles compared (mean per step)\n  %-40s %5s %9s %7s %7s %7s %8s %8s %8s %8s %9s  %s\n",
			"folder", "steps", "step ms", "busy%", "wait%", "kernels", "fwd", "bwd",
			"optim", "idle", "peak MiB", "advice");
	}
	for (size_t i = 0; i < n; i++) {
		const struct headline *x = &h[i];
		if (md)
			fprintf(f, "| `%s` | %d | %.3f | %.1f | %.1f | %ld | %.3f | %.3f | %.3f | %.3f | %.1f | %s |\n",
				x->name, x->steps, x->step_ms, x->gpu_busy, x->data_wait, x->kernels,
				x->device_ms[DSTAGE_FORWARD], x->device_ms[DSTAGE_BACKWARD],
				x->device_ms[DSTAGE_OPTIMIZER], x->device_ms[DSTAGE_IDLE], x->peak_mib,
				x->advice[0] ? x->advice : "-");
		else
			fprintf(f, "  %-40.40s %5d %9.3f %7.1f %7.1f %7ld %8.3f %8.3f %8.3f %8.3f %9.1f  %s\n",
				x->name, x->steps, x->step_ms, x->gpu_busy, x->data_wait, x->kernels,
				x->device_ms[DSTAGE_FORWARD], x->device_ms[DSTAGE_BACKWARD],
				x->device_ms[DSTAGE_OPTIMIZER], x->device_ms[DSTAGE_IDLE], x->peak_mib,
				x->advice[0] ? x->advice : "-");
	}
}

static json_t *comparison_json(const struct headline *h, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		const struct headline *x = &h[i];
		json_t *dev = json_object();
		for (int d = 0; dev && d < DSTAGE_COUNT; d++)
			json_object_set_new(dev, analysis_dstage_name(d), result_real(x->device_ms[d]));
		json_array_append_new(arr, json_pack("{s:s, s:i, s:o, s:o, s:o, s:I, s:o, s:o, s:s}",
						     "folder", x->name, "steps", x->steps,
						     "mean_step_ms", result_real(x->step_ms),
						     "gpu_busy_pct", result_real(x->gpu_busy),
						     "data_wait_pct", result_real(x->data_wait),
						     "kernels", (json_int_t)x->kernels,
						     "device_stage_ms", dev ? dev : json_null(),
						     "memory_peak_mib", result_real(x->peak_mib),
						     "advice", x->advice));
	}
	return arr;
}

/* Every profile_epoch_* folder of parent analysed (outputs in each, or in
 * out_dir/NAME), then the comparison printed and written to comparison.md and
 * comparison.json in out_dir (else parent). */
static int analyze_epochs(const char *parent, char **names, size_t n, const char *out_dir,
			  const char *sort)
{
	struct headline *h = calloc(n, sizeof(*h));
	char src[4096], out[4096], trace[4096], path[4096];
	int rc = 0;
	if (!h)
		return gp_error(GP_ENOMEM, "out of memory");
	/* every folder's trace is found before any is analysed: a bad one fails first */
	for (size_t i = 0; i < n && rc == 0; i++) {
		snprintf(src, sizeof(src), "%s/%s", parent, names[i]);
		rc = trace_find(src, trace, sizeof(trace));
	}
	const char *dest = out_dir ? out_dir : parent;
	if (rc == 0)
		rc = path_dir_prepare(dest);
	for (size_t i = 0; i < n && rc == 0; i++) {
		snprintf(src, sizeof(src), "%s/%s", parent, names[i]);
		snprintf(out, sizeof(out), "%s/%s", dest, names[i]);
		rc = trace_find(src, trace, sizeof(trace));
		if (rc == 0)
			rc = path_dir_prepare(out);
		if (rc == 0)
			rc = analyze_one(trace, src, out, sort, names[i], &h[i]);
	}
	if (rc == 0) {
		comparison_print(stdout, h, n, 0);
		struct atomic_file af;
		snprintf(path, sizeof(path), "%s/comparison.md", dest);
		rc = atomic_file_open(&af, path);
		if (rc == 0) {
			comparison_print(af.f, h, n, 1);
			rc = atomic_file_commit(&af);
		}
	}
	if (rc == 0) {
		json_t *j = json_pack("{s:o}", "profiles", comparison_json(h, n));
		snprintf(path, sizeof(path), "%s/comparison.json", dest);
		rc = j ? json_write_atomic(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6))
		       : gp_error(GP_ENOMEM, "out of memory");
		json_decref(j);
		if (rc == 0)
			printf("\nwrote %s/comparison.md and %s/comparison.json\n", dest, dest);
	}
	free(h);
	return rc;
}

int cmd_analyze(int argc, char **argv)
{
	int help = 0;
	const char *sort = NULL, *out_dir = NULL;
	const struct opt opts[] = {
		{ "sort", OPT_STR, &sort, "op tables by gpu or cpu time (gpu when kernels ran)",
		  .choices = analysis_sort_name_at },
		{ "output-dir", OPT_STR, &out_dir, "write the report, analysis.json and charts here (default: beside the trace)" },
		OPT_HELP(&help),
		OPT_END(),
	};
	const char *usage = "gpuperf analyze DIR|TRACE [--sort gpu|cpu] [--output-dir OUT]";
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		args_print_help(usage, opts);
		printf("\nDIR: a folder that gpuperf profile (or train --profile-epochs) wrote, or one\n"
		       "holding torch.profiler's profiler_logs/*.pt.trace.json; or a parent folder of\n"
		       "profile_epoch_* folders (train --profile-epochs), each analysed, then compared\n"
		       "side by side in comparison.md and comparison.json. TRACE: a trace file given\n"
		       "directly (.json, .json.gz, .pt.trace.json).\n\n"
		       "Reads DIR/profiler_trace.json (else the first profiler_logs/*.pt.trace.json),\n"
		       "prints the step breakdown, top ops and advice, and writes profile_report.md\n"
		       "(with the profiler overhead kept from DIR/result.json), analysis.json,\n"
		       "stage_breakdown.png and memory_timeline.png (the plan's memory over\n"
		       "the step, kept in DIR/result.json; memory_trend.png from the trace's memory\n"
		       "events for a trace without one) in DIR, the trace's folder or --output-dir.\n"
		       "Needs no GPU.\n");
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-')
		return gp_error(GP_EINVAL, "usage: %s", usage);
	GP_TRY(args_parse(argc, argv, 2, opts));
	GP_TRY(analysis_sort_check(sort));
	const char *dir = argv[1];
	if (!*dir) /* it would read the current folder's name as "" */
		return gp_error(GP_EINVAL, "DIR: empty path");
	if (out_dir && !*out_dir)
		return gp_error(GP_EINVAL, "--output-dir: empty path");
	struct stat st;
	char path[4096];
	if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) {
		if (!is_trace_file(dir))
			return gp_error(GP_EFORMAT, "'%s' is not a trace file (.json, .json.gz) or a directory", dir);
		char copy[4096];
		snprintf(copy, sizeof(copy), "%s", dir);
		const char *src = dirname(copy);
		const char *dest = out_dir ? out_dir : src;
		GP_TRY(path_dir_prepare(dest));
		return analyze_one(dir, src, dest, sort, NULL, NULL);
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return gp_error(GP_ENOTFOUND, "'%s' is not a directory or a trace file", dir);
	int rc = trace_find(dir, path, sizeof(path));
	if (rc == GP_ENOTFOUND) {
		char **names;
		size_t n;
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", gp_errmsg());
		GP_TRY(epoch_dirs(dir, &names, &n));
		rc = n ? analyze_epochs(dir, names, n, out_dir, sort)
		       : gp_error(GP_ENOTFOUND, "%s, and no profile_epoch_* folders", msg);
		for (size_t i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return rc;
	}
	if (rc < 0)
		return rc;
	const char *dest = out_dir ? out_dir : dir;
	GP_TRY(path_dir_prepare(dest));
	return analyze_one(path, dir, dest, sort, NULL, NULL);
}
