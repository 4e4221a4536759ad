/* gpuperf plot RESULT.json [--out DIR]: redraw a result's charts, on any machine. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "report/plots.h"
#include "report/result.h"

#define PLOT_USAGE "gpuperf plot RESULT.json [--out DIR]"

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
	if (!out_dir) {
		snprintf(dir_buf, sizeof(dir_buf), "%s", argv[1]);
		out_dir = dirname(dir_buf);
	}
	GP_TRY(result_read(argv[1], &res));
	if ((rc = path_dir_prepare(out_dir)) == 0)
		rc = plots_draw(res, out_dir);
	if (rc == 0)
		printf("wrote %s/%s\n", out_dir,
		       plots_chart_name(json_string_value(json_object_get(res, "command"))));
	json_decref(res);
	return rc;
}
