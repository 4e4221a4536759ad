/* The batch source of the training loop (trainer.c), private to train/: a dataset and
 * its loader, for a run that reads a new batch every step, and the validation set. */
#ifndef GP_BATCH_SOURCE_H
#define GP_BATCH_SOURCE_H

#include <stdint.h>

#include "core/tensor.h"
#include "nn/net.h"
#include "train/trainer.h"

struct dataset;
struct loader;
struct gpu_loader;
struct batch;

/* --- the batch source ---------------------------------------------------------------
 * A dataset and its loader, for a run that reads a new batch every step: the CPU
 * loader (ld), or with --decode gpu the GPU loader (gl), whose batches nvJPEG decodes
 * and a kernel augments on the net's GPU in the net's input format; and the
 * validation set (read by a CPU loader of its own at each validation). */
struct train_data {
	struct dataset *ds, *val;
	struct loader *ld;
	struct gpu_loader *gl;
	enum gp_dtype gl_dtype; /* the GPU batches' format: the net's, or float NCHW */
	int gl_nhwc;
	struct batch *held; /* staged batch whose host memory the copy may still read */
	double wait_ms_total, copy_ms_total;
};

/* Does the run read its batches from a loader (rather than the fixed synthetic one)? */
int train_data_on(const struct train_data *d);
/* Take the next batch and stage it into the net; *wait_ns (when not NULL) gets how
 * long the loop waited for it. */
int train_data_next(struct train_data *d, struct net *net, int64_t *wait_ns);
/* Open the training set and settle the class count (*classes: 0 takes the dataset's). */
int train_data_open(const struct train_opts *o, int size, struct train_data *d, int *classes);
/* Open the validation set into d->val, when the run validates and has one. */
int train_val_open(const struct train_opts *o, int size, struct train_data *d);
/* Check the validation set's classes against the training set's and the net's. */
int train_val_check(const struct train_opts *o, int classes, struct train_data *d);
/* Start the loader (CPU, or GPU for --decode gpu) from batch start_batch, set
 * res->batches_per_epoch and, for a run in epochs, *steps. */
int train_data_start(const struct train_opts *o, int size, struct train_data *d, struct net *net,
		     int *steps, struct train_result *res, long start_batch);
/* Hand back the staged batch (once the net's copy of it is done) and close the loaders
 * and datasets; net may be NULL. */
void train_data_close(struct train_data *d, struct net *net);

#endif
