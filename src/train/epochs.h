/* The epochs of the training loop (trainer.c), private to train/: each epoch's
 * summary, and the checkpoint hooks (train_state.h) that record and resume a run. */
#ifndef GP_EPOCHS_H
#define GP_EPOCHS_H

#include <stdio.h>

#include "nn/net.h"
#include "nn/observer.h"
#include "train/batch_source.h"
#include "train/train_state.h"
#include "train/trainer.h"

/* What an epoch has gathered so far: the loss and hits of the steps whose loss was
 * read (images: theirs), the images it trained on (all ranks), when it began, and
 * the data wait at that moment. */
struct epoch_acc {
	double loss_sum, correct, images, trained;
	int reads;
	double t0, wait_ms0;
};

/* Validate (when this epoch is due), fill the epoch's summary, print its line and
 * tell the observer. */
int train_epoch_end(const struct train_opts *o, const struct train_observer *obs, struct net *net,
		    struct train_data *data, int epoch, int n_epochs, long step, double lr,
		    const struct epoch_acc *ea, double t_run0, double t_epoch_end, struct train_result *res,
		    double *val_s, FILE *log);
/* What this run is, as a checkpoint records it and a resume must match. */
void ckpt_describe(struct train_state *st, const struct train_opts *o, const struct net *net, int k,
		   int epoch_steps, long steps);
/* The run's position after `done` steps into ck->st. */
void ckpt_position(struct train_ckpt *ck, const struct net *net, const struct train_result *res, long done,
		   int k, const struct epoch_acc *ea, const struct train_data *data, double t_run0);
/* --resume: check the checkpoint's run against want, then load its state into net and res. */
int ckpt_resume(const struct train_opts *o, struct net *net, const struct train_state *rs,
		const struct train_state *want, struct train_result *res);

#endif
