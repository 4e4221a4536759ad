/* The spread of a repeated measurement: what `--repeat N` records beside each mean,
 * as {"mean", "std", "min", "max", "n", "values"}, and what `diff` reads back to
 * tell a change from noise. */
#ifndef GP_STATS_H
#define GP_STATS_H

#include <jansson.h>

struct stat_summary {
	double mean, std, min, max; /* std: the sample standard deviation (n - 1) */
	int n;
};

/* The summary of v[0..n) (n >= 1; std is 0 for one value). Non-finite values are
 * left out; n counts those kept (0: all NaN, every field 0). */
void stats_summarize(const double *v, int n, struct stat_summary *out);
/* The summary as JSON, with the values themselves (v may be NULL to leave them
 * out); NULL when out of memory. */
json_t *stats_json(const struct stat_summary *s, const double *v, int n);
/* Read a summary written by stats_json: GP_EFORMAT unless mean, std, min, max are
 * numbers, n an integer >= 1 and std >= 0. */
int stats_read(json_t *j, struct stat_summary *out);
/* Is j an object shaped like a summary (has "mean", "std" and "n")? */
int stats_is_summary(json_t *j);

#endif
