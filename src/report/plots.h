/* Charts drawn from a result document (docs/results.md), so that a command can draw
 * right after writing its result and `gpuperf plot` can redraw them anywhere. */
#ifndef GP_PLOTS_H
#define GP_PLOTS_H

#include <jansson.h>

/* Draw the charts for result's "command" into out_dir (created if needed).
 * GP_EUNSUPPORTED for a command without charts, GP_EFORMAT for a result whose
 * measurements lack what the chart needs. */
int plots_draw(json_t *result, const char *out_dir);
/* The file plots_draw writes for command ("batch_size_memory_usage.png"), NULL
 * when the command has no charts. */
const char *plots_chart_name(const char *command);

#endif
