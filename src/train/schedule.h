/* Learning-rate schedules as torch.optim.lr_scheduler gives them, for the learning rate
 * of each optimizer step. The per-epoch schedules (constant, step, cosine, and the
 * linear warmup before them) are stepped once per epoch, as torchvision's reference
 * recipe steps them: the rate is constant within an epoch. OneCycleLR is stepped per
 * iteration. Exactly:
 *
 *   constant            the base rate;            + warmup W: LinearLR(start_factor=f,
 *                                                    total_iters=W) alone
 *   step                StepLR(step_size, gamma);  + warmup W: SequentialLR([LinearLR(
 *                                                    start_factor=f, total_iters=W),
 *                                                    StepLR(...)], milestones=[W])
 *   cosine              CosineAnnealingLR(T_max=E, eta_min=0); + warmup W: SequentialLR(
 *                                                    [LinearLR(...), CosineAnnealingLR(
 *                                                    T_max=E-W)], milestones=[W])
 *   onecycle            OneCycleLR(max_lr=lr, total_steps=N) with its defaults:
 *                       pct_start 0.3, anneal_strategy 'cos', div_factor 25,
 *                       final_div_factor 1e4, three_phase False, cycle_momentum True
 *                       (base_momentum 0.85, max_momentum 0.95: SGD's momentum or
 *                       AdamW's beta1 follows it)
 *
 * where E is the number of epochs, W the warmup epochs, f the warmup's start factor
 * (torchvision's --lr-warmup-decay, 0.01) and N the number of optimizer steps. The
 * closed forms below equal torch's chained (recursive) forms to rounding (1e-15). */
#ifndef GP_SCHEDULE_H
#define GP_SCHEDULE_H

enum lr_schedule { LR_CONSTANT = 0, LR_STEP, LR_COSINE, LR_ONECYCLE };

/* The names --lr-schedule takes, in enum order, NULL past the last (core/names.h). */
const char *lr_schedule_name_at(int i);
int lr_schedule_parse(const char *s, enum lr_schedule *out);

struct lr_schedule_cfg {
	enum lr_schedule kind;
	double lr;              /* the base rate (OneCycleLR's max_lr) */
	int warmup_epochs;      /* linear warmup epochs before the schedule (0: none) */
	double warmup_factor;   /* LinearLR's start_factor, in (0, 1] (0 means 0.01) */
	int step_epochs;        /* StepLR's step_size */
	double gamma;           /* StepLR's gamma, in (0, 1] (0 means 0.1) */
	int steps_per_epoch;    /* optimizer steps per epoch */
	long total_steps;       /* optimizer steps of the whole run */
};

/* A configuration with torch's defaults for the given schedule and base rate. */
struct lr_schedule_cfg lr_schedule_defaults(enum lr_schedule kind, double lr);
/* Epochs of the run: total_steps / steps_per_epoch rounded up. */
long lr_schedule_epochs(const struct lr_schedule_cfg *c);
/* Is the configuration one the schedules define? One error line naming the option if
 * not (a warmup as long as the run, onecycle with a warmup, step without a step...). */
int lr_schedule_check(const struct lr_schedule_cfg *c);
/* Does the rate (or momentum) change during the run? */
int lr_schedule_varies(const struct lr_schedule_cfg *c);
/* The learning rate of optimizer step `step` (from 0). */
double lr_schedule_lr(const struct lr_schedule_cfg *c, long step);
/* OneCycleLR's momentum (SGD) or beta1 (AdamW) at step: 1 and *m set where the
 * schedule cycles it, 0 where the optimizer's own value stands. */
int lr_schedule_momentum(const struct lr_schedule_cfg *c, long step, double *m);

#endif
