/* The scalars of a training run for TensorBoard and as CSV: an observer of the
 * training loop (which knows nothing of files) that keeps every logged step and
 * every epoch in memory, and writes them when training ends: no file is open while
 * training runs, so a killed run leaves no partial one. */
#ifndef GP_TRAIN_SCALARS_H
#define GP_TRAIN_SCALARS_H

#include <stddef.h>

#include "nn/observer.h"

/* One TensorBoard scalar, kept until the end (tags are string literals). */
struct train_scalar {
	const char *tag;
	double value, wall_time;
	long long step;
};

struct train_scalars {
	struct train_scalar *events;
	size_t n_events, cap_events;
	char csv_dir[4096], tb_dir[4096];
	char *steps_csv, *epochs_csv; /* the rows so far, header first */
	size_t steps_len, steps_cap, epochs_len, epochs_cap;
	const struct train_observer *inner; /* also told everything (the profiler), or NULL */
	struct train_observer self;
};

/* Get ready to write the event file into tb_dir (made at the end if missing; its
 * parent must be there) and the CSV logs into csv_dir (train_log.csv,
 * train_epochs.csv). Writes nothing yet. */
int train_scalars_open(struct train_scalars *s, const char *tb_dir, const char *csv_dir);
/* The observer to hand the training loop; it passes each call on to inner (may be
 * NULL), and takes on only the callbacks inner has besides its own, so the loop
 * keeps its fast path. Valid while s lives. */
const struct train_observer *train_scalars_observer(struct train_scalars *s, const struct train_observer *inner);
/* Write the event file and the CSV files into place and free s (also on error);
 * nothing when no step was logged. */
int train_scalars_close(struct train_scalars *s);

#endif
