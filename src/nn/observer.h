/* The interface between the training loop (train/) and what watches it (the
 * profiler in report/, compare's memory samples): defined below both, so that cmd/
 * attaches one to the other and neither includes its sibling. */
#ifndef GP_OBSERVER_H
#define GP_OBSERVER_H

#include <stdint.h>

#include "ops/graph.h"

/* Defined by the training loop (train/trainer.h); observers only get pointers. */
struct train_log_point;
struct train_epoch_summary;

/* The stages of a step, in the order of analysis.h's enum analysis_stage. */
enum train_stage { TRAIN_STAGE_DATA = 0, TRAIN_STAGE_FORWARD, TRAIN_STAGE_BACKWARD,
		   TRAIN_STAGE_OPTIMIZER };

/* Optional callbacks around the training loop (each may be NULL; a negative return
 * stops training with that error): compare samples memory after set-up and per step;
 * the profiler marks steps and stages; the scalar writers take logged steps and
 * epochs. With step_begin, stage or step_end set, every step runs op by op and
 * re-uploads its batch inside the data stage, where a loader's batch would arrive;
 * the others leave the step as it is. */
struct train_observer {
	int (*after_setup)(void *user, struct net *net);
	int (*after_step)(void *user, struct net *net, int step, int steps, double elapsed_s);
	int (*step_begin)(void *user, struct net *net, int epoch, int step_in_epoch, int step);
	int (*stage)(void *user, enum train_stage stage, int begin);
	/* data_wait_ns: how long the step waited for its batch (0 for synthetic data). */
	int (*step_end)(void *user, struct net *net, int64_t data_wait_ns);
	/* At each logged step, with its loss, accuracy, rate, speed and memory. */
	int (*on_log)(void *user, struct net *net, const struct train_log_point *p);
	/* At each epoch's end, after its validation: the one place to act on an epoch
	 * (TensorBoard's epoch scalars, a checkpoint of the best so far). */
	int (*on_epoch)(void *user, struct net *net, const struct train_epoch_summary *e);
	void *user;
};

#endif
