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

/* The chart of val top-1 against wall time (time_s) for several train results,
 * one line per run (docs/training.md, time to accuracy): results[i] is a train.json
 * with a "history" (gpuperf's, or tests/torch/tta.py's with "engine": "pytorch"),
 * names[i] where it came from (for messages). Written to path (.png, .svg, .pdf). */
#define PLOTS_HISTORY_CHART "val_top1_vs_time.png"
/* Run i's legend label and its family (engine plus the settings, of model,
 * precision, decode, batch, size, optimizer, epochs, workers, layout and lr, the
 * first two that differ between the n runs): "gpuperf, decode gpu, seed 1" and
 * "gpuperf, decode gpu". */
void plots_history_label(json_t *const *results, const char *const *names, int n, int i,
			 char *label, size_t cap, char *family, size_t family_cap);
int plots_draw_history(json_t *const *results, const char *const *names, int n,
		       const char *path);

#endif
