/* `workers`'s recommendation, apart from the runs so that tests can hand it rows.
 *
 * Eligible: a run within 5% of the best throughput and, where GPU utilization was
 * measured for it and for the fastest run, within 2 points of the fastest run's
 * mean utilization (so that a run whose GPU waits is not picked for its CPU
 * savings). Among the eligible, the fewest workers whose CPU cost (cores this
 * process kept busy) is within 25% of the cheapest eligible run's: fewer workers
 * win unless more workers cost much less CPU. Without CPU figures (cpu_cores < 0)
 * the fewest eligible workers. */
#ifndef GP_CMD_WORKERS_RULE_H
#define GP_CMD_WORKERS_RULE_H

#define WORKERS_NEAR_BEST 0.95   /* "as good as the best": within 5% of its img/s */
#define WORKERS_UTIL_POINTS 2.0  /* "as busy as the best": within 2 points of its util */
#define WORKERS_CPU_SLACK 1.25   /* "not much more CPU": within 25% of the cheapest */

struct workers_row {
	int workers;
	double img_s;
	int util_ok;      /* mean_util was measured */
	double mean_util; /* % */
	double cpu_cores; /* < 0: not measured */
};

/* The recommended row's index; *best_i gets the fastest row's. n >= 1. */
int workers_recommend(const struct workers_row *rows, int n, int *best_i);

#endif
