/* The two charts of a profile, drawn from its analysis (so `gpuperf profile` and
 * `gpuperf analyze DIR` draw the same): stage_breakdown.png, stacked bars of each
 * step's device time by stage with idle on top, and memory_timeline.png, live
 * memory by category along the step from the plan (memory_trend.png, the allocated
 * total over the recorded time, for a trace without a plan). */
#ifndef GP_PROFILE_CHARTS_H
#define GP_PROFILE_CHARTS_H

#include <stdio.h>

#include "report/analysis.h"

#define PROFILE_CHART_W 900
#define PROFILE_CHART_H 520

int profile_chart_stages(const struct analysis *a, const char *path);
/* GP_ENOTFOUND when the trace has no memory events (a torch trace without
 * profile_memory): there is nothing to draw. */
int profile_chart_memory(const struct analysis *a, const char *path);
/* Both charts into dir: stage_breakdown.png, then memory_timeline.png when the
 * analysis has the plan's timeline, else memory_trend.png from the trace's memory
 * events (a trace without them gets a note on log instead). */
int profile_charts_draw(const struct analysis *a, const char *dir, FILE *log);

#endif
