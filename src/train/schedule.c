/* Learning-rate schedules (schedule.h says which torch construct each one equals). */
#include "train/schedule.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"

static const char *const schedule_names[] = { "constant", "step", "cosine", "onecycle" };

#define COUNT(a) ((int)(sizeof(a) / sizeof(a[0])))

/* OneCycleLR's defaults. */
#define ONECYCLE_PCT_START 0.3
#define ONECYCLE_DIV 25.0
#define ONECYCLE_FINAL_DIV 1e4
#define ONECYCLE_BASE_MOMENTUM 0.85
#define ONECYCLE_MAX_MOMENTUM 0.95

const char *lr_schedule_name_at(int i)
{
	return i >= 0 && i < COUNT(schedule_names) ? schedule_names[i] : NULL;
}

int lr_schedule_parse(const char *s, enum lr_schedule *out)
{
	char known[64];
	int i = s ? names_find(lr_schedule_name_at, s) : LR_CONSTANT;
	if (i < 0)
		return gp_error(GP_EINVAL, "--lr-schedule must be %s (got '%s')",
				names_join(known, sizeof(known), lr_schedule_name_at, ", ", " or "), s);
	*out = (enum lr_schedule)i;
	return 0;
}

struct lr_schedule_cfg lr_schedule_defaults(enum lr_schedule kind, double lr)
{
	return (struct lr_schedule_cfg){ .kind = kind, .lr = lr, .warmup_factor = 0.01, .gamma = 0.1,
					 .steps_per_epoch = 1, .total_steps = 1 };
}

long lr_schedule_epochs(const struct lr_schedule_cfg *c)
{
	long spe = c->steps_per_epoch > 0 ? c->steps_per_epoch : 1;
	return (c->total_steps + spe - 1) / spe;
}

/* The defaults that zero stands for. */
static double warmup_factor(const struct lr_schedule_cfg *c)
{
	return c->warmup_factor > 0 ? c->warmup_factor : 0.01;
}

static double step_gamma(const struct lr_schedule_cfg *c)
{
	return c->gamma > 0 ? c->gamma : 0.1;
}

int lr_schedule_check(const struct lr_schedule_cfg *c)
{
	long epochs = lr_schedule_epochs(c);
	if (!(c->lr > 0) || !isfinite(c->lr))
		return gp_error(GP_EINVAL, "the learning rate must be positive (got %g)", c->lr);
	if (c->steps_per_epoch < 1 || c->total_steps < 1)
		return gp_error(GP_EINVAL, "a schedule needs at least one step per epoch and one step");
	if (c->warmup_epochs < 0 || !(c->warmup_factor >= 0 && c->warmup_factor <= 1))
		return gp_error(GP_EINVAL, "--warmup-epochs %d with start factor %g: need >= 0 and a factor in (0, 1]",
				c->warmup_epochs, c->warmup_factor);
	if (c->kind == LR_ONECYCLE && c->warmup_epochs)
		return gp_error(GP_EINVAL, "--warmup-epochs does not combine with --lr-schedule onecycle "
				"(its first 30%% are the warmup)");
	if (c->kind != LR_STEP && c->step_epochs)
		return gp_error(GP_EINVAL, "--lr-step needs --lr-schedule step");
	if (c->kind == LR_STEP && c->step_epochs < 1)
		return gp_error(GP_EINVAL, "--lr-schedule step needs --lr-step N (epochs between decays)");
	if (c->kind == LR_STEP && !(c->gamma >= 0 && c->gamma <= 1))
		return gp_error(GP_EINVAL, "--lr-gamma must be in (0, 1] (got %g)", c->gamma);
	if (c->warmup_epochs && c->warmup_epochs >= epochs)
		return gp_error(GP_EINVAL, "--warmup-epochs %d leaves nothing of a run of %ld epochs",
				c->warmup_epochs, epochs);
	/* OneCycleLR's first phase ends at step pct_start * N - 1: it needs two steps */
	if (c->kind == LR_ONECYCLE && c->total_steps < 2)
		return gp_error(GP_EINVAL, "--lr-schedule onecycle needs at least 2 steps");
	return 0;
}

int lr_schedule_varies(const struct lr_schedule_cfg *c)
{
	return c->kind != LR_CONSTANT || c->warmup_epochs > 0;
}

/* OneCycleLR's cosine annealing from start to end as pct goes from 0 to 1. */
static double anneal_cos(double start, double end, double pct)
{
	double cos_out = cos(M_PI * pct) + 1;
	return end + (start - end) / 2.0 * cos_out;
}

/* OneCycleLR's two phases: the phase and its fraction done at step. */
static double onecycle_pct(const struct lr_schedule_cfg *c, long step, int *phase)
{
	double end1 = ONECYCLE_PCT_START * (double)c->total_steps - 1, end2 = (double)c->total_steps - 1;
	if ((double)step <= end1) {
		*phase = 0;
		return (double)step / end1;
	}
	*phase = 1;
	return ((double)step - end1) / (end2 - end1);
}

double lr_schedule_lr(const struct lr_schedule_cfg *c, long step)
{
	if (c->kind == LR_ONECYCLE) {
		int phase;
		double pct = onecycle_pct(c, step, &phase), initial = c->lr / ONECYCLE_DIV;
		return phase == 0 ? anneal_cos(initial, c->lr, pct)
				  : anneal_cos(c->lr, initial / ONECYCLE_FINAL_DIV, pct);
	}
	long e = step / (c->steps_per_epoch > 0 ? c->steps_per_epoch : 1), w = c->warmup_epochs;
	if (e < w)
		return c->lr * (warmup_factor(c) + (1.0 - warmup_factor(c)) * (double)e / (double)w);
	e -= w; /* SequentialLR restarts the next schedule at the milestone */
	switch (c->kind) {
	case LR_STEP:
		return c->lr * pow(step_gamma(c), (double)(e / c->step_epochs));
	case LR_COSINE: {
		long t_max = lr_schedule_epochs(c) - w;
		return c->lr * (1 + cos(M_PI * (double)e / (double)t_max)) / 2;
	}
	default:
		return c->lr;
	}
}

int lr_schedule_momentum(const struct lr_schedule_cfg *c, long step, double *m)
{
	if (c->kind != LR_ONECYCLE)
		return 0;
	int phase;
	double pct = onecycle_pct(c, step, &phase);
	*m = phase == 0 ? anneal_cos(ONECYCLE_MAX_MOMENTUM, ONECYCLE_BASE_MOMENTUM, pct)
			: anneal_cos(ONECYCLE_BASE_MOMENTUM, ONECYCLE_MAX_MOMENTUM, pct);
	return 1;
}
