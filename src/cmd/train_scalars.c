/* TensorBoard scalars and CSV logs of a training run (train_scalars.h). Tags: per
 * logged step train/loss, train/top1, train/lr, train/img_s, train/data_wait_pct and
 * gpu/memory_mib (the backend's own count of what it holds; on the CPU backend, its
 * host memory); per epoch epoch/train_loss, epoch/train_top1, epoch/val_loss,
 * epoch/val_top1, epoch/val_top5, epoch/lr and epoch/img_s, at the epoch's number. */
#include "cmd/train_scalars.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "core/file.h"
#include "core/memstat.h"
#include "report/tb_events.h"
#include "train/trainer.h"

#define STEPS_HEADER "step,loss,top1,lr,img_s,data_wait_pct,memory_mib\n"
#define EPOCHS_HEADER "epoch,step,time_s,lr,train_loss,train_top1,val_loss,val_top1,val_top5,val_img_s,img_s," \
		      "data_wait_pct\n"

/* Append a formatted row to a growing buffer. */
static int buf_printf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return gp_error(GP_EINVAL, "cannot format a CSV row");
	if (*len + (size_t)n + 1 > *cap) {
		size_t want = (*cap ? *cap * 2 : 4096) + (size_t)n;
		char *p = realloc(*buf, want);
		if (!p)
			return gp_error(GP_ENOMEM, "no memory for the CSV log");
		*buf = p;
		*cap = want;
	}
	va_start(ap, fmt);
	vsnprintf(*buf + *len, *cap - *len, fmt, ap);
	va_end(ap);
	*len += (size_t)n;
	return 0;
}

/* Keep one scalar for the event file, stamped now. */
static int scalar_add(struct train_scalars *s, const char *tag, double value, long long step)
{
	if (s->n_events == s->cap_events) {
		size_t cap = s->cap_events ? 2 * s->cap_events : 256;
		struct train_scalar *p = realloc(s->events, cap * sizeof(*p));
		if (!p)
			return gp_error(GP_ENOMEM, "no memory for the TensorBoard scalars");
		s->events = p;
		s->cap_events = cap;
	}
	s->events[s->n_events++] = (struct train_scalar){ tag, value, gp_wall_s(), step };
	return 0;
}

/* A CSV field: the number, or empty when it is not one (no validation, a NaN loss). */
static const char *csv_num(char *b, size_t cap, double v)
{
	if (isfinite(v))
		snprintf(b, cap, "%.9g", v);
	else
		b[0] = 0;
	return b;
}

static int scalars_on_log(void *user, struct net *net, const struct train_log_point *p)
{
	struct train_scalars *s = user;
	char f[7][40];
	GP_TRY(scalar_add(s, "train/loss", p->loss, p->step));
	GP_TRY(scalar_add(s, "train/top1", 100 * p->accuracy, p->step));
	GP_TRY(scalar_add(s, "train/lr", p->lr, p->step));
	GP_TRY(scalar_add(s, "train/img_s", p->img_s, p->step));
	GP_TRY(scalar_add(s, "train/data_wait_pct", p->data_wait_pct, p->step));
	GP_TRY(scalar_add(s, "gpu/memory_mib", p->mem_bytes / GP_MIB, p->step));
	GP_TRY(buf_printf(&s->steps_csv, &s->steps_len, &s->steps_cap, "%d,%s,%s,%s,%s,%s,%s\n", p->step,
			  csv_num(f[0], 40, p->loss), csv_num(f[1], 40, 100 * p->accuracy), csv_num(f[2], 40, p->lr),
			  csv_num(f[3], 40, p->img_s), csv_num(f[4], 40, p->data_wait_pct),
			  csv_num(f[5], 40, p->mem_bytes / GP_MIB)));
	return s->inner && s->inner->on_log ? s->inner->on_log(s->inner->user, net, p) : 0;
}

static int scalars_on_epoch(void *user, struct net *net, const struct train_epoch_summary *e)
{
	struct train_scalars *s = user;
	char f[11][40];
	GP_TRY(scalar_add(s, "epoch/train_loss", e->train_loss, e->epoch));
	GP_TRY(scalar_add(s, "epoch/train_top1", e->train_top1, e->epoch));
	if (e->has_val) {
		GP_TRY(scalar_add(s, "epoch/val_loss", e->val_loss, e->epoch));
		GP_TRY(scalar_add(s, "epoch/val_top1", e->val_top1, e->epoch));
		GP_TRY(scalar_add(s, "epoch/val_top5", e->val_top5, e->epoch));
	}
	GP_TRY(scalar_add(s, "epoch/lr", e->lr, e->epoch));
	GP_TRY(scalar_add(s, "epoch/img_s", e->img_s, e->epoch));
	double none = NAN;
	GP_TRY(buf_printf(&s->epochs_csv, &s->epochs_len, &s->epochs_cap, "%d,%ld,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
			  e->epoch, e->step, csv_num(f[0], 40, e->time_s), csv_num(f[1], 40, e->lr),
			  csv_num(f[2], 40, e->train_loss), csv_num(f[3], 40, e->train_top1),
			  csv_num(f[4], 40, e->has_val ? e->val_loss : none),
			  csv_num(f[5], 40, e->has_val ? e->val_top1 : none),
			  csv_num(f[6], 40, e->has_val ? e->val_top5 : none),
			  csv_num(f[7], 40, e->has_val ? e->val_img_s : none), csv_num(f[8], 40, e->img_s),
			  csv_num(f[9], 40, e->data_wait_pct)));
	return s->inner && s->inner->on_epoch ? s->inner->on_epoch(s->inner->user, net, e) : 0;
}

/* The inner observer's other callbacks, passed on as they come. */
static int fwd_after_setup(void *user, struct net *net)
{
	const struct train_observer *in = ((struct train_scalars *)user)->inner;
	return in->after_setup(in->user, net);
}

static int fwd_after_step(void *user, struct net *net, int step, int steps, double elapsed_s)
{
	const struct train_observer *in = ((struct train_scalars *)user)->inner;
	return in->after_step(in->user, net, step, steps, elapsed_s);
}

static int fwd_step_begin(void *user, struct net *net, int epoch, int step_in_epoch, int step)
{
	const struct train_observer *in = ((struct train_scalars *)user)->inner;
	return in->step_begin(in->user, net, epoch, step_in_epoch, step);
}

static int fwd_stage(void *user, enum train_stage stage, int begin)
{
	const struct train_observer *in = ((struct train_scalars *)user)->inner;
	return in->stage(in->user, stage, begin);
}

static int fwd_step_end(void *user, struct net *net, int64_t data_wait_ns)
{
	const struct train_observer *in = ((struct train_scalars *)user)->inner;
	return in->step_end(in->user, net, data_wait_ns);
}

int train_scalars_open(struct train_scalars *s, const char *tb_dir, const char *csv_dir)
{
	memset(s, 0, sizeof(*s));
	if (strlen(csv_dir) + 20 >= sizeof(s->csv_dir) || strlen(tb_dir) >= sizeof(s->tb_dir))
		return gp_error(GP_EINVAL, "folder name too long: '%s'", strlen(tb_dir) >= sizeof(s->tb_dir) ?
				tb_dir : csv_dir);
	snprintf(s->csv_dir, sizeof(s->csv_dir), "%s", csv_dir);
	snprintf(s->tb_dir, sizeof(s->tb_dir), "%s", tb_dir);
	/* tried now, written at the end: the folder, or the one it would be made in */
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s", tb_dir);
	size_t len = strlen(parent);
	while (len > 1 && parent[len - 1] == '/') /* "dir/": no separator of a parent */
		parent[--len] = 0;
	char *slash = strrchr(parent, '/');
	if (access(tb_dir, F_OK) == 0)
		snprintf(parent, sizeof(parent), "%s", tb_dir);
	else if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else
		slash[slash == parent] = 0; /* "/tb": the root */
	if (access(parent, W_OK | X_OK) != 0)
		return gp_error(GP_EIO, "cannot create '%s': %s", tb_dir, strerror(errno));
	int rc = buf_printf(&s->steps_csv, &s->steps_len, &s->steps_cap, "%s", STEPS_HEADER);
	if (rc == 0)
		rc = buf_printf(&s->epochs_csv, &s->epochs_len, &s->epochs_cap, "%s", EPOCHS_HEADER);
	if (rc < 0) {
		free(s->steps_csv);
		free(s->epochs_csv);
		memset(s, 0, sizeof(*s));
	}
	return rc;
}

const struct train_observer *train_scalars_observer(struct train_scalars *s, const struct train_observer *inner)
{
	s->inner = inner;
	s->self = (struct train_observer){ .on_log = scalars_on_log, .on_epoch = scalars_on_epoch, .user = s };
	if (inner) {
		s->self.after_setup = inner->after_setup ? fwd_after_setup : NULL;
		s->self.after_step = inner->after_step ? fwd_after_step : NULL;
		s->self.step_begin = inner->step_begin ? fwd_step_begin : NULL;
		s->self.stage = inner->stage ? fwd_stage : NULL;
		s->self.step_end = inner->step_end ? fwd_step_end : NULL;
	}
	return &s->self;
}

/* The kept scalars as one event file in s->tb_dir. */
static int scalars_write_events(const struct train_scalars *s)
{
	struct tb_writer *w;
	GP_TRY(tb_writer_open(&w, s->tb_dir));
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < s->n_events; i++) {
		const struct train_scalar *e = &s->events[i];
		rc = tb_add_scalar_at(w, e->tag, e->value, e->step, e->wall_time);
	}
	int rc_close = tb_writer_close(w);
	return rc < 0 ? rc : rc_close;
}

int train_scalars_close(struct train_scalars *s)
{
	char path[4200];
	int rc = 0;
	if (s->steps_len > strlen(STEPS_HEADER)) { /* nothing trained: nothing written */
		rc = scalars_write_events(s);
		snprintf(path, sizeof(path), "%s/train_log.csv", s->csv_dir);
		if (rc == 0)
			rc = atomic_file_write(path, s->steps_csv, s->steps_len);
		snprintf(path, sizeof(path), "%s/train_epochs.csv", s->csv_dir);
		if (rc == 0 && s->epochs_len > strlen(EPOCHS_HEADER))
			rc = atomic_file_write(path, s->epochs_csv, s->epochs_len);
	}
	free(s->events);
	free(s->steps_csv);
	free(s->epochs_csv);
	memset(s, 0, sizeof(*s));
	return rc;
}
