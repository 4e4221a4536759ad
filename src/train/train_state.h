/* Training checkpoints that resume exactly (docs/checkpoints.md). A checkpoint is a
 * folder: model.safetensors, the weights with torchvision's names exactly as --save
 * writes them (torch and --load read it strictly), and train_state.safetensors, the
 * optimizer's buffers and the loss history as tensors with everything else (epoch,
 * step, schedule position, loader position, RNG seed, loss scaler, what the run was)
 * as string metadata. Every random draw of a run (loader order, crops, dropout masks)
 * derives from the seed and counters (epoch, sample, optimizer step), so those
 * counters are the RNG state. */
#ifndef GP_TRAIN_STATE_H
#define GP_TRAIN_STATE_H

#include <stdint.h>
#include <stdio.h>

#include "nn/net.h"
#include "train/trainer.h"

#define TRAIN_STATE_WEIGHTS "model.safetensors"
#define TRAIN_STATE_FILE "train_state.safetensors"

/* What train_state.acc holds, in order: the epoch's loss sum, hits, images whose loss
 * was read, images trained, loss reads, seconds into the epoch, data-wait ms in the
 * epoch, and the run's wall time so far. */
enum { TRAIN_STATE_ACC = 8 };

/* What a checkpoint holds beyond the tensors. */
struct train_state {
	/* what the run was: a resume must match these */
	char model[32];
	int classes, in_c, in_h, in_w;
	char precision[8], optimizer[8];
	int batch, grad_accum;
	/* where it was */
	int epoch;            /* epochs completed */
	long step;            /* optimizer steps of the loop done: the schedule's position */
	long sgd_steps;       /* steps the optimizer took (AdamW's count; fewer where fp16 skipped) */
	long loader_batch;    /* batches the loader delivered (its next, over all epochs) */
	int steps_per_epoch;
	long total_steps;
	uint64_t seed;
	struct grad_scaler scaler;
	double val_top1;      /* this epoch's validation top-1, NaN without */
	double best_val_top1; /* the best so far, NaN without validation */
	int interrupted;      /* written when SIGINT or SIGTERM stopped the run */
	double first_loss;
	/* the logged steps so far (train_result's log): a resumed run's history is whole */
	struct train_log_point *log;
	int n_log;
	/* the epochs summed up so far (train_result's history) */
	struct train_epoch_summary *history;
	int n_history;
	/* the epoch under way when the run stopped inside one (its sums, so that its
	 * summary after the resume counts every step once) and the run's wall time */
	double acc[TRAIN_STATE_ACC];
};

/* Everything a run checkpoints into, set up by the trainer. */
struct train_ckpt {
	const char *dir;      /* --checkpoint-dir (NULL: none) */
	int save_every;       /* epoch_<n> every this many epochs (0: none, only last/best) */
	struct train_state st;
	FILE *log;
};

/* Write the checkpoint of net (set up, between steps) and st into folder path, atomically. */
int train_state_save(const char *path, struct net *net, const struct train_state *st);
/* Read the metadata and history of the checkpoint in folder path (no net needed; free
 * with train_state_free). Missing or corrupt: one line, GP_EIO or GP_EFORMAT. */
int train_state_read(const char *path, struct train_state *st);
void train_state_free(struct train_state *st);
/* Does the checkpoint fit this run? One line naming every difference if not. */
int train_state_check(const char *path, const struct train_state *have, const struct train_state *want);
/* Load the weights into net's host master (before net_setup). */
int train_state_load_weights(const char *path, struct net *net);
/* After net_setup: the optimizer buffers, step count and loss scaler into net. */
int train_state_restore(const char *path, struct net *net, const struct train_state *st);

/* At the end of epoch `epoch` (counted from 1), after its validation (val_top1 NaN
 * without one): D/last always, D/epoch_<epoch> every save_every epochs, D/best when
 * val_top1 is the best so far. ck->st holds the run's position (the caller keeps it
 * current). */
int train_checkpoint_epoch_end(struct train_ckpt *ck, struct net *net, int epoch, long step,
			       double val_top1);
/* The run stops early (SIGINT, SIGTERM): D/last marked interrupted, where it is. */
int train_checkpoint_interrupted(struct train_ckpt *ck, struct net *net);

#endif
