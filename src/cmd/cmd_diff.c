/* gpuperf diff RUN_A RUN_B: every metric two runs share, the change and whether it
 * is beyond their noise; exit status 1 when one regressed beyond noise by more than
 * the threshold, so that CI can gate on it (docs/diff.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "report/diff.h"
#include "report/result.h"

#define DIFF_USAGE "gpuperf diff RUN_A RUN_B [--threshold PCT] [--json] [--html FILE]"

int cmd_diff(int argc, char **argv)
{
	double threshold = 3;
	const char *html = NULL;
	int json = 0, help = 0;
	const struct opt opts[] = {
		{ "threshold", OPT_DOUBLE, &threshold,
		  "a worse metric beyond noise fails the diff when it changed by more than this "
		  "many percent (3)", .min_d = 0, .max_d = 1e6, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		OPT_JSON(&json, "print the comparison as JSON instead of a table"),
		{ "html", OPT_PATH, &html, "also write the comparison as a self-contained HTML page" },
		OPT_HELP(&help),
		OPT_END(),
	};
	const char *paths[2] = { NULL, NULL };
	int n_paths = 0, rc;

	/* the two runs may stand anywhere among the options */
	char **rest = calloc(argc + 1, sizeof(char *));
	if (!rest)
		return gp_error(GP_ENOMEM, "no memory for the arguments");
	int n_rest = 0;
	rest[n_rest++] = argv[0];
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--", 2)) {
			rest[n_rest++] = argv[i];
			/* an option's separate value stays with it */
			if (!strchr(argv[i], '=') && i + 1 < argc && strncmp(argv[i + 1], "--", 2) &&
			    (!strcmp(argv[i], "--threshold") || !strcmp(argv[i], "--html")))
				rest[n_rest++] = argv[++i];
		} else if (n_paths < 2) {
			paths[n_paths++] = argv[i];
		} else {
			free(rest);
			return gp_error(GP_EINVAL, "unexpected argument '%s' (usage: %s)", argv[i],
					DIFF_USAGE);
		}
	}
	rc = args_parse(n_rest, rest, 1, opts);
	free(rest);
	GP_TRY(rc);
	if (help) {
		args_print_help(DIFF_USAGE, opts);
		printf("\nRUN is a result JSON file or a run folder (a bench folder compares every stage).\n"
		       "Exit status: 0 no regression, 1 a metric regressed beyond noise by more than\n"
		       "--threshold, 2 bad input.\n");
		return 0;
	}
	if (n_paths < 2)
		return gp_error(GP_EINVAL, "which two runs? usage: %s", DIFF_USAGE);
	for (int i = 0; i < 2; i++)
		if (!*paths[i])
			return gp_error(GP_EINVAL, "RUN_%c: empty path", 'A' + i);
	if (html)
		GP_TRY(path_file_prepare(html));

	struct diff_run a, b;
	struct diff_report r = { 0 };
	GP_TRY(diff_run_load(&a, paths[0]));
	if ((rc = diff_run_load(&b, paths[1])) < 0)
		goto free_a;
	if (strcmp(a.command, b.command)) {
		rc = gp_error(GP_EINVAL, "'%s' holds a %s result and '%s' one of %s: diff compares "
				 "two runs of one command", a.path, a.command, b.path, b.command);
		goto free_b;
	}
	if ((rc = diff_compare(&a, &b, threshold, &r)) < 0)
		goto free_b;
	if (r.n == 0) {
		rc = gp_error(GP_EINVAL, "'%s' and '%s' share no metric", a.path, b.path);
		goto free_r;
	}
	if (json) {
		json_t *j = diff_report_json(&r, &a, &b);
		char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
		json_decref(j);
		if (!s) {
			rc = gp_error(GP_ENOMEM, "out of memory writing the JSON");
			goto free_r;
		}
		printf("%s\n", s);
		free(s);
	} else if ((rc = diff_print_text(&r, &a, &b, stdout)) < 0) {
		goto free_r;
	}
	if (html) {
		if ((rc = diff_write_html(&r, &a, &b, html)) < 0)
			goto free_r;
		if (!json)
			printf("wrote %s\n", html);
	}
	rc = r.n_regressed > 0 ? 1 : 0;
free_r:
	diff_report_free(&r);
free_b:
	diff_run_free(&b);
free_a:
	diff_run_free(&a);
	return rc;
}
