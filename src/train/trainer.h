/* The training loop shared by train, compare and maxbatch. */
#ifndef GP_TRAINER_H
#define GP_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "core/cpuload.h"
#include "data/decode.h"
#include "data/decode_probe.h"
#include "nn/net.h"
#include "nn/observer.h"
#include "train/schedule.h"

struct train_opts {
	const char *model;
	int batch, size, classes, steps;
	int warmup;      /* steps left out of the timing; -1: 10% of steps, at most 10 */
	int log_every;   /* 0: about 20 lines */
	double dropout;  /* < 0: the model's own */
	uint64_t seed;
	enum backend_kind backend;
	enum precision precision;
	/* The optimizer (sgd.kind: SGD or AdamW, with their settings and sgd.clip_norm);
	 * sgd.lr is the schedule's base rate. */
	struct sgd_args sgd;
	/* The learning-rate schedule (schedule.h); its lr, steps_per_epoch and total_steps
	 * are filled in by the run. Zero: constant. */
	struct lr_schedule_cfg schedule;
	double label_smoothing; /* CrossEntropyLoss(label_smoothing=) */
	int grad_accum;         /* micro-batches of `batch` per optimizer step (0, 1: one) */
	int keep_log;           /* record every logged step in res->log (train_result_free) */
	const char *load, *save;
	/* Training checkpoints (train_state.h, docs/checkpoints.md): last (and best) in
	 * checkpoint_dir at each epoch's end, epoch_<n> every save_every epochs; resume
	 * continues the checkpoint folder's run where it stopped, exactly. */
	const char *checkpoint_dir, *resume;
	int save_every;
	int no_graphs;   /* run every step op by op instead of replaying a CUDA graph */
	int deterministic; /* CUDA: only deterministic convolution algorithms, from cuDNN's
			    * heuristics (a resumed run then repeats an uninterrupted one) */
	int recompute;   /* 1: recompute BN+ReLU outputs in backward (less memory); 2: and
			  * residual blocks' outputs (net.h's recompute) */
	enum layout layout; /* LAYOUT_AUTO: NHWC under fp16/bf16, else NCHW */
	/* Where batches come from: NULL or "synthetic" trains on one fixed synthetic
	 * batch; anything else is a dataset spec (data/dataset.h) read by a loader in
	 * train mode at the model's input size, a new batch every step. classes 0
	 * then means the dataset's class count (1000 for the fixed batch). */
	const char *data;
	/* Validation (evaluate.h): val_data is a dataset spec read in eval mode; NULL
	 * takes data's own split where it has one (DIR/val beside DIR/train, CIFAR-10's
	 * test batch), else none. Every eval_every epochs and after the last; 0 (as
	 * train_opts_default leaves it): never. */
	const char *val_data;
	int eval_every;
	int workers;  /* loader threads (0: decode in the training thread) */
	/* Where batches are decoded, as the command resolved --decode (decode_resolve):
	 * DECODE_GPU decodes and augments on the GPU (data/gpu_loader.h; workers and
	 * prefetch unused); DECODE_AUTO, left only where both paths can run, times both
	 * once the data is open (data/decode_probe.h) and takes the faster. The path
	 * taken is the result's decode_gpu. */
	enum decode_mode decode;
	int decode_threads; /* --decode gpu: CPU threads taking a share of each batch */
	int probe_workers; /* DECODE_AUTO: the probe's CPU side runs this many workers (0: workers) */
	int prefetch; /* batches in flight per worker (0: 2) */
	/* An epoch is epoch_steps steps (0: one pass over the dataset, or steps for
	 * synthetic data); epochs > 0 trains that many epochs instead of steps. */
	int epochs, epoch_steps;
	const struct train_observer *observer; /* NULL: the plain loop */
	/* Data parallelism (dist/dist.h; NULL: alone): this process is one rank; batch is
	 * per rank. Each reads its shard of the dataset, or rows [rank x batch, (rank + 1)
	 * x batch) of the synthetic batch of all ranks, so that N ranks at batch B compute
	 * what one computes at N x B. The log should be given on rank 0 only; the save
	 * happens there only. */
	struct dist *dist;
	int device;           /* the GPU (CUDA; each rank its own) */
	int sync_bn;          /* SyncBatchNorm over the ranks */
	size_t bucket_bytes;  /* gradient buckets (0: net.h's default, DDP's 25 MB) */
};

#define TRAIN_MAX_RANKS 1024
/* One logged step: its loss (mean over its micro-batches), accuracy and rate; the
 * speed (img/s of all ranks) and data wait (% of the time) since the run's first
 * step, and the memory the backend holds (bytes, its own count). */
struct train_log_point {
	int step; /* from 1 */
	double loss, accuracy, lr;
	double img_s, data_wait_pct;
	size_t mem_bytes;
};

/* One epoch's summary, what the per-epoch line, train.json's "history" and the
 * observers' on_epoch see. train_* are means over the epoch's steps (the loss is
 * read at every step of a run given in epochs, at logged steps otherwise);
 * has_val says whether this epoch was validated (else val_* are 0). */
struct train_epoch_summary {
	int epoch;       /* from 1 */
	long step;       /* optimizer steps done by its end */
	double time_s;   /* wall time since train_run began (set-up, data and validation
			  * included) at the end of this epoch, after its validation */
	double lr;       /* the rate of its last step */
	double train_loss, train_top1;           /* top-1 in percent */
	int has_val;
	long val_images; /* images validated: every one of the set, once */
	double val_loss, val_top1, val_top5;     /* plain cross-entropy; percent */
	double val_img_s;
	double img_s;          /* training images per second over the epoch (all ranks) */
	double data_wait_pct;  /* share of the epoch's training time waiting for data */
};

struct train_result {
	int steps, timed_steps;
	double first_loss, last_loss;
	/* The first step (from 1) whose loss read NaN or infinite, 0 if none did; the
	 * loss is read at the logged steps (every step when --log-every 1). */
	int nonfinite_step;
	double ms_per_step, img_s, total_s;
	size_t params;
	struct mem_plan plan;
	struct mem_stats mem;
	struct mem_stats mem_after_setup; /* what the engine held before the first step */
	int classes;          /* the net's output classes */
	/* With a dataset (all 0 for the fixed batch): means over every step. data_wait_ms
	 * is the loader's wait for the batch plus copy_ms, the copy into the net;
	 * data_wait_pct is data_wait_ms as a share of the mean step time. */
	int batches_per_epoch;
	double data_wait_ms, copy_ms, data_wait_pct;
	/* The decode path used (1: GPU), and with --decode auto, whether it was measured
	 * (decode_probed) and what the probe saw. */
	int decode_gpu, decode_probed;
	struct decode_probe decode_probe;
	/* CPU load over the timed steps: this process's cores busy and the machine's */
	struct cpu_load cpu;
	long images, skipped_corrupt;
	/* Data parallelism: ranks, each rank's mean step time and data wait (ms) in rank
	 * order, and the slowest rank. ms_per_step is the slowest rank's, img_s the total
	 * of every rank (world x batch per step) and img_s_per_rank its share; with one
	 * process world is 1 and the arrays hold its own values. */
	int world, slowest_rank;
	double img_s_per_rank;
	/* The gradient all-reduce timed alone after training (ms per step's worth of
	 * buckets; 0 with one rank), and how many buckets carry it. */
	double allreduce_ms;
	int buckets;
	char transport[8];    /* the group's host transport (dist_transport_name) */
	double rank_ms_per_step[TRAIN_MAX_RANKS], rank_data_wait_ms[TRAIN_MAX_RANKS];
	double last_lr;              /* the rate of the last step */
	/* steps and epochs done by the run of a --resume checkpoint before this one (0),
	 * and whether SIGINT or SIGTERM stopped this one early (GP_EINTR) */
	int resumed_step, resumed_epoch;
	int interrupted;
	double fwd_macs_per_image;   /* the model's forward multiply-accumulates per image */
	/* Energy this rank's GPU used over the timed steps (J, 0 when unknown) and their
	 * wall time (s): filled by whoever observes the timed steps with an energy counter
	 * (cmd/, through the observer's timed callback), never by the loop. */
	double energy_j, energy_s;
	struct train_log_point *log; /* with keep_log: n_log points; train_result_free */
	int n_log;
	/* Runs given in epochs, or with validation: one summary per epoch
	 * (train_result_free); val_images is the validation set's size (0: none). */
	struct train_epoch_summary *history;
	int n_history;
	long val_images;
	double val_s;  /* wall time spent validating, left out of ms_per_step */
};

void train_result_free(struct train_result *res);

/* Watchers of a training run, called on the host after set-up and after each step
 * (step counts from 1; elapsed_s since the first step began; work may still be
 * queued on a GPU). Either may be NULL; a negative return stops the run with it. */

struct train_opts train_opts_default(void);
int train_run(const struct train_opts *o, struct train_result *res, FILE *log);
/* train_run with an observer (obs may be NULL: then o->observer, if any). */
int train_run_observed(const struct train_opts *o, const struct train_observer *obs,
		       struct train_result *res, FILE *log);
/* Does the run read a dataset (o->data other than NULL or "synthetic")? */
int train_uses_dataset(const struct train_opts *o);

/* Bytes that net_setup would plan on backend at the net's current batch: the memory
 * plan for training in fp32, plus workspace_bytes on CUDA (measured at set-up, so
 * the caller passes what it knows) or the CPU backend's own scratch. */
int train_plan_total(struct net *net, enum backend_kind backend, size_t workspace_bytes,
		     size_t *bytes);

/* A device name (cpu, cuda, or auto/NULL: cuda when a GPU is present, else cpu with a
 * note unless quiet). */
int train_pick_device(const char *device, enum backend_kind *out, int quiet);
/* A layout name, or auto/NULL (NHWC under fp16/bf16 on the GPU). */
int train_parse_layout(const char *s, enum layout *out);
/* The names these take, in table order, NULL past the last (core/names.h): devices
 * with auto, the layouts without auto (precisions: ops/graph.h). */
const char *train_device_choice_at(int i);
const char *train_layout_choice_at(int i);
/* The optimizers --optimizer takes, in enum optim_kind order, NULL past the last. */
const char *train_optimizer_name_at(int i);
int train_parse_optimizer(const char *s, enum optim_kind *out);
/* The names that results record. */
const char *train_device_name(enum backend_kind b);
const char *train_layout_name(enum layout l);
int train_synthetic_batch(int batch, int c, int h, int w, int classes, uint64_t seed, float **x,
			  int32_t **labels);

#endif
