/* The training loop shared by train, compare and maxbatch. */
#ifndef GP_TRAINER_H
#define GP_TRAINER_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "nn/net.h"

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
