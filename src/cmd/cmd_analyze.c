/* gpuperf analyze DIR: read the trace `gpuperf profile` left in DIR (or one from
 * torch.profiler), print the breakdown and write profile_report.md and analysis.json
 * next to it. Needs no GPU. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
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

int cmd_analyze(int argc, char **argv)
{
	int help = 0;
	const char *sort = NULL;
	const struct opt opts[] = {
		{ "sort", OPT_STR, &sort, "op tables by gpu or cpu time (gpu when kernels ran)",
		  .choices = analysis_sort_name_at },
		OPT_HELP(&help),
		OPT_END(),
	};
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		args_print_help("gpuperf analyze DIR [--sort gpu|cpu]", opts);
		printf("\nDIR: a folder that gpuperf profile (or train --profile-epochs) wrote, or one\n"
		       "holding torch.profiler's profiler_logs/*.pt.trace.json.\n\n"
		       "Reads DIR/profiler_trace.json (else the first profiler_logs/*.pt.trace.json),\n"
		       "prints the step breakdown, top ops and advice, and writes DIR/profile_report.md\n"
		       "(with the profiler overhead kept from DIR/result.json), DIR/analysis.json,\n"
		       "DIR/stage_breakdown.png and DIR/memory_timeline.png (the plan's memory over\n"
		       "the step, kept in DIR/result.json; memory_trend.png from the trace's memory\n"
		       "events for a trace without one). Needs no GPU.\n");
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-')
		return gp_error(GP_EINVAL, "usage: gpuperf analyze DIR [--sort gpu|cpu]");
	GP_TRY(args_parse(argc, argv, 2, opts));
	GP_TRY(analysis_sort_check(sort));
	const char *dir = argv[1];
	if (!*dir) /* it would read the current folder's name as "" */
		return gp_error(GP_EINVAL, "DIR: empty path");
	struct stat st;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return gp_error(GP_ENOTFOUND, "'%s' is not a directory", dir);

	char path[4096];
	struct trace t;
	struct analysis a;
	int rc;
	GP_TRY(trace_find(dir, path, sizeof(path)));
	GP_TRY(path_dir_prepare(dir));
	GP_TRY(chrome_trace_read(path, &t));
	rc = analysis_run(&t, &a);
	if (rc < 0) {
		gp_error_wrap(rc, "'%s'", path);
		goto free_trace;
	}
	struct profile_overhead ov;
	long long trace_bytes = 0;
	int have_ov;
	rc = report_read_overhead(dir, &ov, &trace_bytes, &have_ov, &a);
	if (rc < 0)
		goto free_analysis;
	if (sort)
		analysis_sort_ops(&a, !strcmp(sort, "gpu"));
	analysis_print(&a, stdout);
	snprintf(path, sizeof(path), "%s/profile_report.md", dir);
	rc = profile_report_write(&a, path, have_ov ? &ov : NULL, trace_bytes);
	if (rc < 0)
		goto free_analysis;
	rc = profile_charts_draw(&a, dir, stdout);
	if (rc < 0)
		goto free_analysis;
	json_t *j = analysis_to_json(&a);
	if (!j) {
		rc = gp_error(GP_ENOMEM, "cannot build the analysis summary");
		goto free_analysis;
	}
	snprintf(path, sizeof(path), "%s/analysis.json", dir);
	rc = json_write_atomic(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
	json_decref(j);
	if (rc == 0)
		printf("\nwrote %s/profile_report.md, %s/analysis.json, %s/stage_breakdown.png and "
		       "%s/%s\n", dir, dir, dir, dir,
		       a.have_mem_tl ? "memory_timeline.png"
				     : "memory_trend.png (when the trace has memory events)");
free_analysis:
	analysis_free(&a);
free_trace:
	trace_free(&t);
	return rc;
}
