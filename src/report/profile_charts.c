#include "report/profile_charts.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/memstat.h"
#include "report/chart.h"
#include "report/mem_report.h"

int profile_chart_stages(const struct analysis *a, const char *path)
{
	if (a->n_steps < 1)
		return gp_error(GP_EINVAL, "stage chart: the analysis has no steps");
	/* More steps than bars fit: each bar is the mean of a run of consecutive steps. */
	int group = (a->n_steps + CHART_MAX_BARS - 1) / CHART_MAX_BARS;
	int n_bars = (a->n_steps + group - 1) / group;
	double values[CHART_MAX_BARS * DSTAGE_COUNT] = { 0 };
	char labels[CHART_MAX_BARS][32];
	const char *bar_labels[CHART_MAX_BARS], *stage_labels[DSTAGE_COUNT];
	for (int b = 0; b < n_bars; b++) {
		int lo = b * group, hi = lo + group < a->n_steps ? lo + group : a->n_steps;
		for (int i = lo; i < hi; i++)
			for (int d = 0; d < DSTAGE_COUNT; d++)
				values[b * DSTAGE_COUNT + d] += a->steps[i].device_ms[d] / (hi - lo);
		if (hi - lo == 1)
			snprintf(labels[b], sizeof(labels[b]), "%d", a->steps[lo].step);
		else
			snprintf(labels[b], sizeof(labels[b]), "%d-%d", a->steps[lo].step,
				 a->steps[hi - 1].step);
		bar_labels[b] = labels[b];
	}
	for (int d = 0; d < DSTAGE_COUNT; d++)
		stage_labels[d] = analysis_dstage_name(d);
	/* idle last, on top, in a pale grey: the height of a bar is the step */
	const struct chart_color colors[DSTAGE_COUNT] = {
		CHART_BROWN, CHART_BLUE, CHART_ORANGE, CHART_GREEN, CHART_RED, CHART_PURPLE,
		{ 0.82, 0.82, 0.82 },
	};
	char title[160];
	snprintf(title, sizeof(title), "%s, batch %d: %s time per step by stage (idle on top)",
		 a->meta.model, a->meta.batch, a->device_from_host ? "compute thread" : "GPU");
	struct chart_figure *fig = chart_figure_new(1, 1, PROFILE_CHART_W, PROFILE_CHART_H, title);
	if (!fig)
		return gp_error(GP_ENOMEM, "cannot create the stage chart");
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_labels(p, group > 1 ? "step (mean of a run of steps)" : "step",
			       "time (ms)");
	int rc = chart_panel_set_bars(p, n_bars, bar_labels, DSTAGE_COUNT, stage_labels, colors,
				      values);
	if (rc == 0)
		rc = chart_figure_save(fig, path);
	chart_figure_free(fig);
	return rc;
}

int profile_chart_memory(const struct analysis *a, const char *path)
{
	if (a->n_mem < 1)
		return gp_error(GP_ENOTFOUND, "memory chart: the trace has no memory events");
	double *mib = malloc((size_t)a->n_mem * sizeof(double));
	if (!mib)
		return gp_error(GP_ENOMEM, "memory chart: out of memory");
	double peak = 0;
	for (int i = 0; i < a->n_mem; i++) {
		mib[i] = a->mem_total_bytes[i] / GP_MIB;
		if (mib[i] > peak)
			peak = mib[i];
	}
	char title[128];
	snprintf(title, sizeof(title), "%s, batch %d: memory allocated (peak %.1f MiB)",
		 a->meta.model, a->meta.batch, peak);
	int rc = 0;
	struct chart_figure *fig = chart_figure_new(1, 1, PROFILE_CHART_W, PROFILE_CHART_H, title);
	if (!fig) {
		rc = gp_error(GP_ENOMEM, "cannot create the memory chart");
		goto free_mib;
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_labels(p, "time since the first step (ms)", "allocated (MiB)");
	/* From zero, so a flat total (a planned arena) reads as flat, not as noise. */
	chart_panel_set_y_range(p, 0, peak > 0 ? peak * 1.15 : 1);
	rc = chart_panel_add_line(p, a->mem_t_ms, mib, a->n_mem,
				  (struct chart_line_style){ .color = CHART_BLUE }, "allocated");
	if (rc == 0)
		rc = chart_figure_save(fig, path);
	chart_figure_free(fig);
free_mib:
	free(mib);
	return rc;
}

int profile_charts_draw(const struct analysis *a, const char *dir, FILE *log)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/stage_breakdown.png", dir);
	GP_TRY(profile_chart_stages(a, path));
	if (a->have_mem_tl) {
		snprintf(path, sizeof(path), "%s/memory_timeline.png", dir);
		return mem_timeline_chart(&a->mem_tl, a->meta.model, a->meta.batch, path);
	}
	snprintf(path, sizeof(path), "%s/memory_trend.png", dir);
	if (a->n_mem < 1) {
		if (log)
			fprintf(log, "note: no memory events in the trace; memory_trend.png not drawn\n");
		return 0;
	}
	return profile_chart_memory(a, path);
}
