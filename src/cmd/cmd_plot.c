/* gpuperf plot RESULT.json|RUN_DIR [--out DIR]: redraw a result's charts, on any
 * machine; a run folder's result, or every stage of a bench folder and its report. */
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

#define PLOT_USAGE "gpuperf plot RESULT.json|RUN_DIR [--out DIR]"

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

int cmd_plot(int argc, char **argv)
{
	const char *out_dir = NULL;
	int help = 0;
	const struct opt opts[] = {
		{ "out", OPT_PATH, &out_dir, "directory for the charts (default: the result's)", 0 },
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
	GP_TRY(args_parse(argc, argv, 2, opts));
	if (help) {
		args_print_help(PLOT_USAGE, opts);
		return 0;
	}
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
	if (!out_dir) {
		snprintf(dir_buf, sizeof(dir_buf), "%s", path);
		out_dir = dirname(dir_buf);
	}
	GP_TRY(result_read(path, &res));
	if ((rc = path_dir_prepare(out_dir)) == 0)
		rc = plots_draw(res, out_dir);
	if (rc == 0)
		printf("wrote %s/%s\n", out_dir,
		       plots_chart_name(json_string_value(json_object_get(res, "command"))));
	json_decref(res);
	return rc;
}
