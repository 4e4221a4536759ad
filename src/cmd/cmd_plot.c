/* gpuperf plot RESULT.json|RUN_DIR... [--out DIR]: redraw a result's charts, on any
 * machine; a run folder's result, or every stage of a bench folder and its report.
 * Train results (one or several, gpuperf's and PyTorch's tests/torch/tta.py's) give
 * the chart of val top-1 against wall time, one line per run. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "report/bench_report.h"
#include "report/plots.h"
#include "report/result.h"

#define PLOT_USAGE "gpuperf plot RESULT.json|RUN_DIR [TRAIN.json...] [--out DIR]"
#define PLOT_MAX_RUNS 16

/* A bench folder: each stage's charts into its own folder, then the reports. */
static int plot_bench(const char *dir)
{
	char path[4200];
	json_t *bench;
	snprintf(path, sizeof(path), "%s/bench.json", dir);
	GP_TRY(result_read(path, &bench));
	json_t *stages = json_object_get(json_object_get(bench, "measurements"), "stages"), *st;
	size_t i;
	int rc = 0;
	json_array_foreach(stages, i, st) {
		const char *rel = json_string_value(json_object_get(st, "result"));
		json_t *res;
		char stage_dir[4200];
		if (!rel || strstr(rel, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, rel);
		if (result_read(path, &res) < 0) {
			gp_error_clear(); /* a stage that failed, or info's plain JSON */
			continue;
		}
		const char *chart = plots_chart_name(json_string_value(json_object_get(res, "command")));
		snprintf(stage_dir, sizeof(stage_dir), "%s", path);
		/* a stage whose result cannot be charted (workers on the CPU has no
		 * utilization) keeps the others and the report from being redrawn */
		if (chart && plots_draw(res, dirname(stage_dir)) == 0) {
			printf("wrote %s/%s\n", stage_dir, chart);
		} else if (chart) {
			printf("%s: no chart: %s\n", stage_dir, gp_errmsg());
			gp_error_clear();
		}
		json_decref(res);
	}
	if ((rc = bench_report_write(dir)) == 0)
		printf("wrote %s/report.html\nwrote %s/report.md\n", dir, dir);
	json_decref(bench);
	return rc;
}

/* A result file, or the one result in a run folder (found gets its path). */
static int plot_resolve(const char *arg, char *found, size_t cap, const char **path)
{
	struct stat st;
	if (!*arg)
		return gp_error(GP_EINVAL, "RESULT.json: empty path");
	*path = arg;
	if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
		GP_TRY(result_find_in_dir(arg, found, cap));
		*path = found;
	}
	return 0;
}

/* Several train results (or one): val top-1 against time, one line per run. */
static int plot_histories(char **args, int n, const char *out_dir)
{
	json_t *res[PLOT_MAX_RUNS] = { 0 };
	char found[PLOT_MAX_RUNS][4096], dir_buf[4096], out[4200];
	const char *paths[PLOT_MAX_RUNS];
	int rc = 0, got = 0;
	for (; got < n && rc == 0; got++) {
		const char *cmd;
		rc = plot_resolve(args[got], found[got], sizeof(found[got]), &paths[got]);
		if (rc == 0)
			rc = result_read(paths[got], &res[got]);
		if (rc == 0 && (!(cmd = json_string_value(json_object_get(res[got], "command"))) ||
				strcmp(cmd, "train")))
			rc = gp_error(GP_EINVAL, "'%s' is a %s result: several results are charted "
				      "together only when each is a train result", paths[got],
				      cmd ? cmd : "(no command)");
	}
	if (rc == 0 && !out_dir) {
		snprintf(dir_buf, sizeof(dir_buf), "%s", paths[0]);
		out_dir = dirname(dir_buf);
	}
	if (rc == 0)
		rc = path_dir_prepare(out_dir);
	if (rc == 0) {
		snprintf(out, sizeof(out), "%s/%s", out_dir, PLOTS_HISTORY_CHART);
		rc = plots_draw_history(res, paths, n, out);
	}
	if (rc == 0)
		printf("wrote %s\n", out);
	for (int i = 0; i < got; i++)
		json_decref(res[i]);
	return rc;
}

int cmd_plot(int argc, char **argv)
{
	const char *out_dir = NULL;
	int help = 0;
	const struct opt opts[] = {
		{ "out", OPT_PATH, &out_dir, "directory for the charts (default: the (first) result's)", 0 },
		OPT_HELP(&help),
		OPT_END(),
	};
	json_t *res = NULL;
	char dir_buf[4096];
	int rc;

	if (argc >= 2 && !strcmp(argv[1], "--help")) {
		args_print_help(PLOT_USAGE, opts);
		return 0;
	}
	if (argc < 2 || !strncmp(argv[1], "--", 2))
		return gp_error(GP_EINVAL, "which result? usage: %s", PLOT_USAGE);
	if (!*argv[1])
		return gp_error(GP_EINVAL, "RESULT.json: empty path");
	int runs = 1;
	while (1 + runs < argc && strncmp(argv[1 + runs], "--", 2))
		runs++;
	if (runs > PLOT_MAX_RUNS)
		return gp_error(GP_EINVAL, "at most %d results in one chart (got %d)", PLOT_MAX_RUNS,
				runs);
	GP_TRY(args_parse(argc, argv, 1 + runs, opts));
	if (help) {
		args_print_help(PLOT_USAGE, opts);
		return 0;
	}
	if (runs > 1)
		return plot_histories(argv + 1, runs, out_dir);
	const char *path = argv[1];
	char found[4096];
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (bench_dir_is(path)) {
			if (out_dir)
				return gp_error(GP_EINVAL, "--out: a bench folder is redrawn in place");
			return plot_bench(path);
		}
		GP_TRY(result_find_in_dir(path, found, sizeof(found)));
		path = found;
	}
	GP_TRY(result_read(path, &res));
	const char *command = json_string_value(json_object_get(res, "command"));
	if (command && !strcmp(command, "train")) {
		json_decref(res);
		return plot_histories((char **)&path, 1, out_dir);
	}
	if (!out_dir) {
		snprintf(dir_buf, sizeof(dir_buf), "%s", path);
		out_dir = dirname(dir_buf);
	}
	if ((rc = path_dir_prepare(out_dir)) == 0)
		rc = plots_draw(res, out_dir);
	if (rc == 0)
		printf("wrote %s/%s\n", out_dir,
		       plots_chart_name(json_string_value(json_object_get(res, "command"))));
	json_decref(res);
	return rc;
}
