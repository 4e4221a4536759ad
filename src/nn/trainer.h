/* The training loop shared by train, compare and maxbatch. */
#ifndef GP_TRAINER_H
#define GP_TRAINER_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "nn/net.h"

/* The stages of a step, in the order of analysis.h's enum analysis_stage. */
enum train_stage { TRAIN_STAGE_DATA = 0, TRAIN_STAGE_FORWARD, TRAIN_STAGE_BACKWARD,
		   TRAIN_STAGE_OPTIMIZER };

/* An observer of the training loop (the profiler). With one set, every step also
 * re-uploads its batch inside the data stage, where a loader's batch would arrive.
 * A negative return stops training with that error. */
struct train_observer {
	int (*step_begin)(void *user, struct net *net, int epoch, int step_in_epoch, int step);
	int (*stage)(void *user, enum train_stage stage, int begin);
	/* data_wait_ns: how long the step waited for its batch (0 for synthetic data). */
	int (*step_end)(void *user, struct net *net, int64_t data_wait_ns);
	void *user;
};

struct train_opts {
	const char *model;
	int batch, size, classes, steps;
	int warmup;      /* steps left out of the timing; -1: 10% of steps, at most 10 */
	int log_every;   /* 0: about 20 lines */
	double dropout;  /* < 0: the model's own */
	uint64_t seed;
	enum backend_kind backend;
	enum precision precision;
	struct sgd_args sgd;
	const char *load, *save;
	/* An epoch of synthetic data is epoch_steps steps (0: steps); training runs
	 * epochs (0: 1) of them. */
	int epochs, epoch_steps;
	const struct train_observer *observer; /* NULL: the plain loop */
};

struct train_result {
	int steps, timed_steps;
	double first_loss, last_loss;
	double ms_per_step, img_s, total_s;
	size_t params;
	struct mem_plan plan;
	struct mem_stats mem;
};

struct train_opts train_opts_default(void);
int train_run(const struct train_opts *o, struct train_result *res, FILE *log);
json_t *train_result_json(const struct train_opts *o, const struct train_result *r);

/* "cpu", "cuda" or "auto"/NULL (cuda when a GPU is present, else cpu with a note). */
int train_pick_device(const char *device, enum backend_kind *out, int quiet);
int train_parse_precision(const char *s, enum precision *out);
int train_synthetic_batch(int batch, int c, int h, int w, int classes, uint64_t seed, float **x,
			  int32_t **labels);

#endif
