/* What `gpuperf monitor` concludes from its samples: the statistics of a run
 * (utilization, memory, power, temperature, clock-event reasons, GPM activity), a
 * verdict against the healthy-run checklist, and the monitor.png chart drawn from the
 * result document (so that `gpuperf plot` redraws it). */
#ifndef GP_MONITOR_REPORT_H
#define GP_MONITOR_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "gpu/nvml.h"

/* The healthy-run checklist: busy, steady and cool. */
#define MONITOR_UTIL_MIN_PCT 85.0 /* mean utilization above this */
#define MONITOR_UTIL_STD_MAX 10.0 /* its standard deviation (points) below this */
#define MONITOR_TEMP_MAX_C 85.0   /* peak temperature below this */
#define MONITOR_IDLE_PCT 10.0     /* a sample under this counts as idle */

struct monitor_reason {
	unsigned long long bit; /* one NVML clocks-event reason bit */
	char name[32];          /* "sw_power_cap" */
	double share;           /* of the samples that had it, 0..1 */
};

struct monitor_check {
	const char *name; /* "utilization", "fluctuation", "temperature" */
	double value, limit;
	int pass;
};

struct monitor_summary {
	int n;
	double duration_s;
	double util_mean, util_std, util_min, util_max; /* % (std: sample, n - 1) */
	double util_idle_share;                         /* samples under 10 %, 0..1 */
	double mem_peak_mib, mem_total_mib;
	double power_mean_w, power_limit_w, power_pct_of_limit; /* NaN without a limit */
	double temp_peak_c;
	double sm_clock_mean_mhz, sm_clock_min_mhz;
	int n_reasons;
	struct monitor_reason reasons[64];
	/* GPM means over the samples that had them; gpm_n 0: none (every mean NaN) */
	int gpm_n;
	double sm_util_mean, sm_occupancy_mean, tensor_util_mean, dram_bw_util_mean;
	struct monitor_check checks[3];
	int healthy; /* every check passed */
};

/* Summarize s[0..n) taken with power limit power_limit_mw (0: unknown); gpm is NULL
 * or holds one entry per sample (NaN fields where a metric was absent). */
void monitor_summarize(const struct nvml_sample *s, const struct nvml_gpm_metrics *gpm,
		       int n, unsigned power_limit_mw, struct monitor_summary *out);
/* {"samples", "duration_s", "utilization": {mean, std, min, max, idle_share}, ...,
 * "verdict": {"healthy", "checks": [{name, value, limit, pass}]}}; NULL when out of
 * memory. */
json_t *monitor_summary_json(const struct monitor_summary *m);
/* The summary and verdict as the lines monitor prints at the end. */
void monitor_summary_print(FILE *f, const struct monitor_summary *m);

/* monitor.png from a monitor result's "measurements": utilization (and the GPM
 * activity figures when present), memory, power (with the limit) and clocks over
 * time. GP_EFORMAT when there are no samples. */
int monitor_plot(json_t *measurements, const char *path);

#endif
