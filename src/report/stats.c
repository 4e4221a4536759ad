#include "report/stats.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "report/result.h"

void stats_summarize(const double *v, int n, struct stat_summary *out)
{
	double sum = 0;
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < n; i++) {
		if (!isfinite(v[i]))
			continue;
		if (out->n == 0 || v[i] < out->min)
			out->min = v[i];
		if (out->n == 0 || v[i] > out->max)
			out->max = v[i];
		sum += v[i];
		out->n++;
	}
	if (out->n == 0)
		return;
	out->mean = sum / out->n;
	/* two passes: the squares of differences from the mean, not of the values,
	 * keep the precision when the spread is small beside the mean */
	double ss = 0;
	for (int i = 0; i < n; i++)
		if (isfinite(v[i]))
			ss += (v[i] - out->mean) * (v[i] - out->mean);
	out->std = out->n > 1 ? sqrt(ss / (out->n - 1)) : 0;
}

json_t *stats_json(const struct stat_summary *s, const double *v, int n)
{
	json_t *j = json_pack("{s:o, s:o, s:o, s:o, s:i}", "mean", result_real(s->mean), "std",
			      result_real(s->std), "min", result_real(s->min), "max",
			      result_real(s->max), "n", s->n);
	if (!j || !v)
		return j;
	json_t *a = json_array();
	for (int i = 0; a && i < n; i++)
		if (json_array_append_new(a, result_real(v[i])) < 0) {
			json_decref(a);
			a = NULL;
		}
	if (!a || json_object_set_new(j, "values", a) < 0) {
		json_decref(j);
		return NULL;
	}
	return j;
}

int stats_is_summary(json_t *j)
{
	return json_is_object(j) && json_object_get(j, "mean") && json_object_get(j, "std") &&
	       json_object_get(j, "n");
}

int stats_read(json_t *j, struct stat_summary *out)
{
	json_t *mean = json_object_get(j, "mean"), *std = json_object_get(j, "std"),
	       *min = json_object_get(j, "min"), *max = json_object_get(j, "max"),
	       *n = json_object_get(j, "n");
	if (!json_is_number(mean) || !json_is_number(std) || !json_is_number(min) ||
	    !json_is_number(max) || !json_is_integer(n))
		return gp_error(GP_EFORMAT, "a spread needs numbers mean, std, min, max and an integer n");
	out->mean = json_number_value(mean);
	out->std = json_number_value(std);
	out->min = json_number_value(min);
	out->max = json_number_value(max);
	if (json_integer_value(n) < 1 || json_integer_value(n) > 1000000000 || !(out->std >= 0))
		return gp_error(GP_EFORMAT, "a spread needs n >= 1 and std >= 0");
	out->n = (int)json_integer_value(n);
	return 0;
}
