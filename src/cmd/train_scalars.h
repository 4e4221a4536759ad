/* The scalars of a training run for TensorBoard and as CSV: an observer of the
 * training loop (which knows nothing of files) that keeps every logged step and
 * every epoch, and writes them when training ends. */
#ifndef GP_TRAIN_SCALARS_H
#define GP_TRAIN_SCALARS_H

#include <stddef.h>

#include "nn/observer.h"

struct tb_writer;

struct train_scalars {
	struct tb_writer *tb;
	char csv_dir[4096], tb_dir[4096];
	int made_dir; /* tb_dir was not there before: taken away again if nothing was logged */
	char *steps_csv, *epochs_csv; /* the rows so far, header first */
	size_t steps_len, steps_cap, epochs_len, epochs_cap;
	const struct train_observer *inner; /* also told everything (the profiler), or NULL */
	struct train_observer self;
};

/* Start the event file in tb_dir (created) and the CSV logs for csv_dir
 * (train_log.csv, train_epochs.csv). Nothing is left behind on failure. */
int train_scalars_open(struct train_scalars *s, const char *tb_dir, const char *csv_dir);
/* The observer to hand the training loop; it passes each call on to inner (may be
 * NULL), and takes on only the callbacks inner has besides its own, so the loop
 * keeps its fast path. Valid while s lives. */
const struct train_observer *train_scalars_observer(struct train_scalars *s, const struct train_observer *inner);
/* Write the event file and the CSV files into place and free s (also on error);
 * when no step was logged, leave nothing behind instead. */
int train_scalars_close(struct train_scalars *s);

#endif
