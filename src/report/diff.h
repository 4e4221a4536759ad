/* Two runs side by side: every metric both results hold, the change, and whether it
 * is beyond the runs' noise (docs/diff.md states the rule). A metric is a number in
 * a result's "measurements", named by its path ("cells[batch=64,precision=fp16].img_s");
 * its spread, where the run was repeated, is the summary (report/stats.h) at
 * "repeat.<name>" in the same object. */
#ifndef GP_DIFF_H
#define GP_DIFF_H

#include <stdio.h>

#include <jansson.h>

#include "report/stats.h"

#define DIFF_NAME_MAX 256
#define DIFF_MAX_METRICS 20000

enum diff_direction { DIFF_NEUTRAL = 0, DIFF_HIGHER_BETTER, DIFF_LOWER_BETTER };

enum diff_verdict {
	DIFF_WITHIN_NOISE = 0,
	DIFF_IMPROVED,   /* better, beyond noise */
	DIFF_WORSE,      /* worse beyond noise, by no more than the threshold */
	DIFF_REGRESSED,  /* worse beyond noise and by more than the threshold */
	DIFF_CHANGED,    /* a metric without a better direction, beyond noise */
};

struct diff_metric {
	char name[DIFF_NAME_MAX];
	double value;
	struct stat_summary spread;
	int has_spread; /* spread read from repeat.<name>, with n >= 2 */
};

/* The metrics of one run, and which command made it. */
struct diff_run {
	char command[64];
	char path[4096];  /* the result file (a bench: its bench.json) */
	struct diff_metric *m;
	int n, cap;
};

struct diff_row {
	const struct diff_metric *a, *b;
	enum diff_direction dir;
	double change_pct; /* (b - a) / |a| in percent; NaN when a is 0 */
	double se;         /* the combined standard error; NaN: no spread on either side */
	int beyond_noise;
	enum diff_verdict verdict;
};

struct diff_report {
	struct diff_row *rows;
	int n;
	int n_only_a, n_only_b; /* metrics the other run lacks */
	int n_regressed, n_worse, n_improved, n_within;
	double threshold_pct;
};

/* Which way is better, from the metric's name: img/s, speed-ups, utilization and
 * batch sizes higher; times, memory, waits and idle shares lower; others neutral. */
enum diff_direction diff_direction_of(const char *name);
/* The noise rule: with spread on both sides the combined standard error is
 * se = sqrt(sa^2/na + sb^2/nb); with spread on one side only, that side's std
 * stands for both, se = s * sqrt(1/na + 1/nb); without any, se is NaN and every
 * change counts as beyond noise. Beyond noise: |b - a| > 2 se. */
int diff_beyond_noise(const struct diff_metric *a, const struct diff_metric *b, double *se);

/* Add the numbers of a result's measurements to run, names prefixed with prefix
 * ("" or "amp/"). */
int diff_run_collect(struct diff_run *run, json_t *measurements, const char *prefix);
/* Load a run: a result JSON file, a run folder holding one, or a bench folder
 * (bench.json and the results of its stages, each stage's metrics under
 * "<stage>/"). GP_EINVAL when path is missing or holds no result. */
int diff_run_load(struct diff_run *run, const char *path);
void diff_run_free(struct diff_run *run);

/* Pair the metrics both runs have (in a's order) and judge each. */
int diff_compare(const struct diff_run *a, const struct diff_run *b, double threshold_pct,
		 struct diff_report *out);
void diff_report_free(struct diff_report *r);
const char *diff_verdict_name(enum diff_verdict v);
const char *diff_direction_name(enum diff_direction d);

int diff_print_text(const struct diff_report *r, const struct diff_run *a,
		    const struct diff_run *b, FILE *f);
json_t *diff_report_json(const struct diff_report *r, const struct diff_run *a,
			 const struct diff_run *b);
/* The same as a self-contained HTML page, written atomically. */
int diff_write_html(const struct diff_report *r, const struct diff_run *a,
		    const struct diff_run *b, const char *path);

#endif
