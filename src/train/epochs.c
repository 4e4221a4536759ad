/* The epochs of the training loop (epochs.h): each epoch's summary line and history
 * entry, with validation when it is due, and the checkpoint hooks. */
#include "train/epochs.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "train/evaluate.h"

/* Validate (when this epoch is due), fill the epoch's summary, print its line and
 * tell the observer. t_epoch_end: when its last step ended; *val_s gets the time
 * validation took. */
int train_epoch_end(const struct train_opts *o, const struct train_observer *obs, struct net *net,
		    struct train_data *data, int epoch, int n_epochs, long step, double lr,
		    const struct epoch_acc *ea, double t_run0, double t_epoch_end, struct train_result *res,
		    double *val_s, FILE *log)
{
	struct train_epoch_summary *e = &res->history[res->n_history];
	int every = o->eval_every > 0 ? o->eval_every : 1;
	double train_s = t_epoch_end - ea->t0;
	*val_s = 0;
	*e = (struct train_epoch_summary){ .epoch = epoch + 1, .step = step, .lr = lr };
	e->train_loss = ea->reads ? ea->loss_sum / ea->reads : NAN;
	e->train_top1 = ea->images > 0 ? 100.0 * ea->correct / ea->images : NAN;
	if (data->val && ((epoch + 1) % every == 0 || epoch + 1 == n_epochs)) {
		struct eval_opts eo = { .workers = o->workers, .prefetch = o->prefetch, .seed = o->seed };
		struct eval_result r;
		GP_TRY(evaluate_net(net, data->val, &eo, &r));
		e->has_val = 1;
		e->val_images = r.counts.images;
		e->val_loss = r.loss;
		e->val_top1 = r.top1;
		e->val_top5 = r.top5;
		e->val_img_s = r.img_s;
		*val_s = r.seconds;
	}
	double wait_ms = data->wait_ms_total + data->copy_ms_total - ea->wait_ms0;
	e->img_s = train_s > 0 ? ea->trained / train_s : 0;
	e->data_wait_pct = train_s > 0 ? 100 * wait_ms / (1e3 * train_s) : 0;
	e->time_s = gp_now_s() - t_run0;
	res->n_history++;
	if (log) {
		fprintf(log, "epoch %3d/%d  train loss %7.4f top-1 %5.1f%%  ", e->epoch, n_epochs, e->train_loss, e->train_top1);
		if (e->has_val)
			fprintf(log, "val loss %7.4f top-1 %5.1f%% top-5 %5.1f%%  ", e->val_loss, e->val_top1,
				e->val_top5);
		else
			fprintf(log, "val %-34s", "-");
		fprintf(log, "lr %9.3e  %7.1f img/s  data %4.1f%%  %7.1f s\n", e->lr, e->img_s, e->data_wait_pct,
			e->time_s);
		fflush(log);
	}
	return obs && obs->on_epoch ? obs->on_epoch(obs->user, net, e) : 0;
}

/* --- checkpoints (train_state.h): the hooks of the loop in trainer.c --------------- */

/* What this run is, as a checkpoint records it and a resume must match. */
void ckpt_describe(struct train_state *st, const struct train_opts *o, const struct net *net,
		   int k, int epoch_steps, long steps)
{
	snprintf(st->model, sizeof(st->model), "%s", net->model);
	st->classes = net->classes;
	st->in_c = net->in_c;
	st->in_h = net->in_h;
	st->in_w = net->in_w;
	snprintf(st->precision, sizeof(st->precision), "%s", train_precision_name(o->precision));
	snprintf(st->optimizer, sizeof(st->optimizer), "%s", train_optimizer_name_at(o->sgd.kind));
	st->batch = o->batch;
	st->grad_accum = k;
	st->steps_per_epoch = epoch_steps;
	st->total_steps = steps;
	st->seed = o->seed;
}

/* The run's position after `done` steps into ck->st, where a checkpoint takes it: with
 * the epochs summed up so far and the sums of the one under way. */
void ckpt_position(struct train_ckpt *ck, const struct net *net, const struct train_result *res,
		   long done, int k, const struct epoch_acc *ea, const struct train_data *data,
		   double t_run0)
{
	struct train_state *st = &ck->st;
	double now = gp_now_s();
	st->step = done;
	st->epoch = (int)(done / st->steps_per_epoch);
	st->sgd_steps = net->sgd_steps;
	st->loader_batch = done * k;
	st->scaler = net->scaler;
	st->first_loss = res->first_loss;
	st->log = res->log;
	st->n_log = res->n_log;
	st->history = res->history;
	st->n_history = res->n_history;
	double acc[TRAIN_STATE_ACC] = { ea->loss_sum, ea->correct, ea->images, ea->trained, ea->reads,
					now - ea->t0, data->wait_ms_total + data->copy_ms_total - ea->wait_ms0,
					now - t_run0 };
	memcpy(st->acc, acc, sizeof(acc));
}
/* --resume: the checkpoint's run must be this one; then its weights, optimizer state
 * and history take the place of the fresh ones. */
int ckpt_resume(const struct train_opts *o, struct net *net, const struct train_state *rs,
		const struct train_state *want, struct train_result *res)
{
	GP_TRY(train_state_check(o->resume, rs, want));
	if (rs->step >= want->total_steps)
		return gp_error(GP_EINVAL, "--resume: checkpoint '%s' is at step %ld of %ld: nothing left to "
				"train (raise --epochs)", o->resume, rs->step, want->total_steps);
	GP_TRY(train_state_load_weights(o->resume, net));
	GP_TRY(net_sync_from_host(net));
	GP_TRY(train_state_restore(o->resume, net, rs));
	res->resumed_step = (int)rs->step;
	res->resumed_epoch = rs->epoch;
	res->first_loss = rs->first_loss;
	if (res->log) {
		memcpy(res->log, rs->log, sizeof(*res->log) * rs->n_log);
		res->n_log = rs->n_log;
	}
	if (res->history && rs->n_history > 0) {
		memcpy(res->history, rs->history, sizeof(*res->history) * rs->n_history);
		res->n_history = rs->n_history;
	}
	return 0;
}
