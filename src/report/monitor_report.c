/* monitor's summary, verdict and chart. */
#include "report/monitor_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/memstat.h"
#include "report/chart.h"
#include "report/result.h"
#include "report/stats.h"

static double mean_finite(const double *v, int n, int *kept)
{
	double sum = 0;
	*kept = 0;
	for (int i = 0; i < n; i++) {
		if (!isfinite(v[i]))
			continue;
		sum += v[i];
		(*kept)++;
	}
	return *kept ? sum / *kept : NAN;
}

static void set_check(struct monitor_check *c, const char *name, double value, double limit,
		      int pass)
{
	c->name = name;
	c->value = value;
	c->limit = limit;
	c->pass = pass;
}

void monitor_summarize(const struct nvml_sample *s, const struct nvml_gpm_metrics *gpm,
		       int n, unsigned power_limit_mw, struct monitor_summary *out)
{
	memset(out, 0, sizeof(*out));
	out->n = n;
	out->power_limit_w = power_limit_mw / 1000.0;
	out->power_pct_of_limit = NAN;
	out->sm_util_mean = out->sm_occupancy_mean = out->tensor_util_mean =
		out->dram_bw_util_mean = NAN;
	double *util = n > 0 ? calloc((size_t)n, sizeof(*util)) : NULL;
	if (n > 0 && util) {
		struct stat_summary st;
		int idle = 0;
		double power = 0, clock = 0;
		out->duration_s = s[n - 1].t_s - s[0].t_s;
		out->sm_clock_min_mhz = s[0].sm_clock_mhz;
		for (int i = 0; i < n; i++) {
			util[i] = s[i].util_gpu_pct;
			idle += s[i].util_gpu_pct < MONITOR_IDLE_PCT;
			out->mem_peak_mib = fmax(out->mem_peak_mib, s[i].mem_used_bytes / GP_MIB);
			out->mem_total_mib = fmax(out->mem_total_mib, s[i].mem_total_bytes / GP_MIB);
			power += s[i].power_mw / 1000.0;
			out->temp_peak_c = fmax(out->temp_peak_c, s[i].temp_c);
			clock += s[i].sm_clock_mhz;
			out->sm_clock_min_mhz = fmin(out->sm_clock_min_mhz, s[i].sm_clock_mhz);
		}
		stats_summarize(util, n, &st);
		out->util_mean = st.mean;
		out->util_std = st.std;
		out->util_min = st.min;
		out->util_max = st.max;
		out->util_idle_share = (double)idle / n;
		out->power_mean_w = power / n;
		if (power_limit_mw)
			out->power_pct_of_limit = 100.0 * out->power_mean_w / out->power_limit_w;
		out->sm_clock_mean_mhz = clock / n;
		/* Each reason bit on its own, with the share of samples it was set in. */
		for (int b = 0; b < 64; b++) {
			unsigned long long bit = 1ULL << b;
			int k = 0;
			for (int i = 0; i < n; i++)
				k += (s[i].throttle_reasons & bit) != 0;
			if (!k)
				continue;
			struct monitor_reason *r = &out->reasons[out->n_reasons++];
			r->bit = bit;
			nvml_throttle_reason_str(bit, r->name, sizeof(r->name));
			r->share = (double)k / n;
		}
		if (gpm) {
			double *v = util; /* reused: one metric at a time */
			int kept;
			double *dst[4] = { &out->sm_util_mean, &out->sm_occupancy_mean,
					   &out->tensor_util_mean, &out->dram_bw_util_mean };
			for (int m = 0; m < 4; m++) {
				for (int i = 0; i < n; i++) {
					const struct nvml_gpm_metrics *g = &gpm[i];
					v[i] = m == 0 ? g->sm_util_pct
					       : m == 1 ? g->sm_occupancy_pct
					       : m == 2 ? g->tensor_util_pct
							: g->dram_bw_util_pct;
				}
				*dst[m] = mean_finite(v, n, &kept);
				if (kept > out->gpm_n)
					out->gpm_n = kept;
			}
		}
	}
	free(util);
	/* No samples (or no memory to summarize them) fail every check: nothing showed a
	 * healthy run. */
	int ok = n > 0 && util;
	set_check(&out->checks[0], "utilization", out->util_mean, MONITOR_UTIL_MIN_PCT,
		  ok && out->util_mean > MONITOR_UTIL_MIN_PCT);
	set_check(&out->checks[1], "fluctuation", out->util_std, MONITOR_UTIL_STD_MAX,
		  ok && out->util_std < MONITOR_UTIL_STD_MAX);
	set_check(&out->checks[2], "temperature", out->temp_peak_c, MONITOR_TEMP_MAX_C,
		  ok && out->temp_peak_c < MONITOR_TEMP_MAX_C);
	out->healthy = out->checks[0].pass && out->checks[1].pass && out->checks[2].pass;
}

json_t *monitor_summary_json(const struct monitor_summary *m)
{
	json_t *reasons = json_array(), *checks = json_array();
	for (int i = 0; i < m->n_reasons; i++)
		json_array_append_new(reasons, json_pack("{s:s, s:I, s:o}", "name", m->reasons[i].name,
							 "bit", (json_int_t)m->reasons[i].bit,
							 "share", result_real(m->reasons[i].share)));
	for (int i = 0; i < 3; i++) {
		const struct monitor_check *c = &m->checks[i];
		json_array_append_new(checks, json_pack("{s:s, s:o, s:o, s:b}", "name", c->name,
							"value", result_real(c->value), "limit",
							result_real(c->limit), "pass", c->pass));
	}
	json_t *gpm = m->gpm_n ? json_pack("{s:i, s:o, s:o, s:o, s:o}", "samples", m->gpm_n,
					    "sm_activity_pct", result_real(m->sm_util_mean),
					    "sm_occupancy_pct", result_real(m->sm_occupancy_mean),
					    "tensor_activity_pct", result_real(m->tensor_util_mean),
					    "dram_bw_util_pct", result_real(m->dram_bw_util_mean))
			       : json_null();
	return json_pack("{s:i, s:o, s:{s:o, s:o, s:o, s:o, s:o}, s:{s:o, s:o}, "
			 "s:{s:o, s:o, s:o}, s:{s:o}, s:{s:o, s:o}, s:o, s:o, s:{s:b, s:o}}",
			 "samples", m->n, "duration_s", result_real(m->duration_s),
			 "utilization", "mean_pct", result_real(m->util_mean), "std_pct",
			 result_real(m->util_std), "min_pct", result_real(m->util_min), "max_pct",
			 result_real(m->util_max), "idle_share", result_real(m->util_idle_share),
			 "memory", "peak_mib", result_real(m->mem_peak_mib), "total_mib",
			 result_real(m->mem_total_mib),
			 "power", "mean_w", result_real(m->power_mean_w), "limit_w",
			 result_real(m->power_limit_w > 0 ? m->power_limit_w : NAN), "pct_of_limit",
			 result_real(m->power_pct_of_limit),
			 "temperature", "peak_c", result_real(m->temp_peak_c),
			 "sm_clock", "mean_mhz", result_real(m->sm_clock_mean_mhz), "min_mhz",
			 result_real(m->sm_clock_min_mhz),
			 "clock_event_reasons", reasons, "gpm", gpm,
			 "verdict", "healthy", m->healthy, "checks", checks);
}

void monitor_summary_print(FILE *f, const struct monitor_summary *m)
{
	if (m->n == 0) {
		fprintf(f, "summary: no samples\n");
		return;
	}
	fprintf(f, "\nsummary over %d samples, %.1f s\n", m->n, m->duration_s);
	fprintf(f, "  GPU utilization  mean %.1f %%, std %.1f, min %.0f %%, max %.0f %%; "
		   "%.0f %% of samples under %.0f %%\n", m->util_mean, m->util_std, m->util_min,
		m->util_max, 100 * m->util_idle_share, MONITOR_IDLE_PCT);
	fprintf(f, "  memory peak      %.0f of %.0f MiB\n", m->mem_peak_mib, m->mem_total_mib);
	if (isfinite(m->power_pct_of_limit))
		fprintf(f, "  power            mean %.1f W, %.0f %% of the %.0f W limit\n",
			m->power_mean_w, m->power_pct_of_limit, m->power_limit_w);
	else
		fprintf(f, "  power            mean %.1f W (limit unknown)\n", m->power_mean_w);
	fprintf(f, "  temperature peak %.0f C\n", m->temp_peak_c);
	fprintf(f, "  SM clock         mean %.0f MHz, min %.0f MHz\n", m->sm_clock_mean_mhz,
		m->sm_clock_min_mhz);
	fprintf(f, "  clock events     ");
	if (!m->n_reasons)
		fprintf(f, "none");
	for (int i = 0; i < m->n_reasons; i++)
		fprintf(f, "%s%s %.0f %%", i ? ", " : "", m->reasons[i].name,
			100 * m->reasons[i].share);
	fprintf(f, "\n");
	if (m->gpm_n)
		fprintf(f, "  GPM              SM activity %.1f %%, SM occupancy %.1f %%, tensor "
			   "activity %.1f %%, DRAM bandwidth %.1f %%\n", m->sm_util_mean,
			m->sm_occupancy_mean, m->tensor_util_mean, m->dram_bw_util_mean);
	fprintf(f, "verdict: %s\n", m->healthy ? "healthy" : "not healthy");
	fprintf(f, "  %s utilization  mean %.1f %% (needs > %.0f %%)\n",
		m->checks[0].pass ? "pass" : "FAIL", m->checks[0].value, m->checks[0].limit);
	fprintf(f, "  %s fluctuation  std %.1f points (needs < %.0f)\n",
		m->checks[1].pass ? "pass" : "FAIL", m->checks[1].value, m->checks[1].limit);
	fprintf(f, "  %s temperature  peak %.0f C (needs < %.0f C)\n",
		m->checks[2].pass ? "pass" : "FAIL", m->checks[2].value, m->checks[2].limit);
}

/* One column of the samples as doubles (NaN where absent or null). */
static double *sample_column(json_t *samples, const char *key, int *any)
{
	size_t n = json_array_size(samples);
	double *v = malloc((n ? n : 1) * sizeof(*v));
	*any = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_object_get(json_array_get(samples, i), key);
		v[i] = json_is_number(x) ? json_number_value(x) : NAN;
		*any |= json_is_number(x);
	}
	return v;
}

int monitor_plot(json_t *measurements, const char *path)
{
	static const char *const keys[] = {
		"t_s", "util_gpu_pct", "util_mem_pct", "sm_activity_pct", "tensor_activity_pct",
		"dram_bw_util_pct", "mem_used_mib", "power_w", "sm_clock_mhz", "mem_clock_mhz",
	};
	enum { T, UTIL, UMEM, SMA, TENS, DRAM, MEM, POWER, SMCLK, MEMCLK, NCOL };
	json_t *samples = json_object_get(measurements, "samples");
	int n = (int)json_array_size(samples), rc = 0;
	double *col[NCOL] = { 0 };
	int any[NCOL];
	struct chart_figure *fig = NULL;

	if (n == 0)
		return gp_error(GP_EFORMAT, "monitor result has no samples to chart");
	for (int k = 0; k < NCOL; k++)
		if (!(col[k] = sample_column(samples, keys[k], &any[k]))) {
			rc = gp_error(GP_ENOMEM, "no memory for the monitor chart");
			goto free_cols;
		}
	if (!any[T] || !any[UTIL]) {
		rc = gp_error(GP_EFORMAT, "monitor samples lack t_s or util_gpu_pct");
		goto free_cols;
	}
	fig = chart_figure_new(2, 2, 0, 0, "gpuperf monitor");
	if (!fig) {
		rc = gp_error(GP_ENOMEM, "no memory for the monitor chart");
		goto free_cols;
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_title(p, "utilization");
	chart_panel_set_labels(p, "time (s)", "utilization (%)");
	chart_panel_set_y_range(p, 0, 105);
	static const struct {
		int col;
		const char *label;
	} lines[] = { { UTIL, "GPU (kernel running)" }, { UMEM, "memory controller" },
		      { SMA, "SM activity (GPM)" }, { TENS, "tensor activity (GPM)" },
		      { DRAM, "DRAM bandwidth (GPM)" } };
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]) && rc >= 0; i++)
		if (any[lines[i].col])
			rc = chart_panel_add_line(p, col[T], col[lines[i].col], n,
						  (struct chart_line_style){ chart_palette((int)i) },
						  lines[i].label);
	if (rc >= 0)
		rc = chart_panel_add_hline(p, MONITOR_UTIL_MIN_PCT, CHART_GREY, 1, "healthy: 85 %");

	p = chart_figure_panel(fig, 1);
	chart_panel_set_title(p, "memory");
	chart_panel_set_labels(p, "time (s)", "used (MiB)");
	if (rc >= 0)
		rc = chart_panel_add_line(p, col[T], col[MEM], n,
					  (struct chart_line_style){ CHART_BLUE }, "used");
	json_t *total = json_object_get(json_array_get(samples, 0), "mem_total_mib");
	if (rc >= 0 && json_is_number(total))
		rc = chart_panel_add_hline(p, json_number_value(total), CHART_GREY, 1, "total");

	p = chart_figure_panel(fig, 2);
	chart_panel_set_title(p, "power");
	chart_panel_set_labels(p, "time (s)", "power (W)");
	if (rc >= 0)
		rc = chart_panel_add_line(p, col[T], col[POWER], n,
					  (struct chart_line_style){ CHART_ORANGE }, "draw");
	json_t *limit = json_object_get(json_object_get(json_object_get(measurements, "summary"),
							"power"), "limit_w");
	if (rc >= 0 && json_is_number(limit))
		rc = chart_panel_add_hline(p, json_number_value(limit), CHART_RED, 1, "limit");

	p = chart_figure_panel(fig, 3);
	chart_panel_set_title(p, "clocks");
	chart_panel_set_labels(p, "time (s)", "clock (MHz)");
	if (rc >= 0)
		rc = chart_panel_add_line(p, col[T], col[SMCLK], n,
					  (struct chart_line_style){ CHART_GREEN }, "SM");
	if (rc >= 0)
		rc = chart_panel_add_line(p, col[T], col[MEMCLK], n,
					  (struct chart_line_style){ CHART_PURPLE }, "memory");
	if (rc >= 0)
		rc = chart_figure_save(fig, path);
	chart_figure_free(fig);
free_cols:
	for (int k = 0; k < NCOL; k++)
		free(col[k]);
	return rc;
}
