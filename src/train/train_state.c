/* Training checkpoints: a folder written atomically (core/file.h's atomic_dir), the
 * weights through nn/checkpoint.c as --save writes them, the rest beside them. */
#include "train/train_state.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "nn/checkpoint.h"
#include "train/trainer.h"

#define STATE_FORMAT "gpuperf-train-state-1"
#define META_MAX 40

/* --- the metadata: one table of scalars, written and read alike ----------------------- */

enum meta_kind { M_INT, M_LONG, M_U64, M_LLONG, M_DOUBLE, M_STR };
struct meta_field {
	const char *key;
	enum meta_kind kind;
	size_t offset, size;
};
#define F(key, kind, field) { key, kind, offsetof(struct train_state, field), sizeof(((struct train_state *)0)->field) }
static const struct meta_field meta_fields[] = {
	F("model", M_STR, model),
	F("classes", M_INT, classes),
	F("in_channels", M_INT, in_c),
	F("in_height", M_INT, in_h),
	F("in_width", M_INT, in_w),
	F("precision", M_STR, precision),
	F("optimizer", M_STR, optimizer),
	F("batch", M_INT, batch),
	F("grad_accum", M_INT, grad_accum),
	F("epoch", M_INT, epoch),
	F("step", M_LONG, step),
	F("optimizer_steps", M_LONG, sgd_steps),
	F("loader_batch", M_LONG, loader_batch),
	F("steps_per_epoch", M_INT, steps_per_epoch),
	F("total_steps", M_LONG, total_steps),
	F("seed", M_U64, seed),
	F("scaler_enabled", M_INT, scaler.enabled),
	F("scaler_scale", M_DOUBLE, scaler.scale),
	F("scaler_growth_factor", M_DOUBLE, scaler.growth_factor),
	F("scaler_backoff_factor", M_DOUBLE, scaler.backoff_factor),
	F("scaler_growth_interval", M_INT, scaler.growth_interval),
	F("scaler_growth_tracker", M_INT, scaler.growth_tracker),
	F("scaler_skipped_steps", M_LLONG, scaler.skipped_steps),
	F("val_top1", M_DOUBLE, val_top1),
	F("best_val_top1", M_DOUBLE, best_val_top1),
	F("interrupted", M_INT, interrupted),
	F("first_loss", M_DOUBLE, first_loss),
};
#undef F
#define N_META ((int)(sizeof(meta_fields) / sizeof(meta_fields[0])))

/* Doubles as %.17g read back bit for bit; NaN as "nan", which strtod reads. */
static void meta_format(const struct train_state *st, const struct meta_field *m, char *buf, size_t cap)
{
	const char *p = (const char *)st + m->offset;
	switch (m->kind) {
	case M_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
	case M_LONG: snprintf(buf, cap, "%ld", *(const long *)p); break;
	case M_LLONG: snprintf(buf, cap, "%lld", *(const long long *)p); break;
	case M_U64: snprintf(buf, cap, "%" PRIu64, *(const uint64_t *)p); break;
	case M_DOUBLE: snprintf(buf, cap, "%.17g", *(const double *)p); break;
	case M_STR: snprintf(buf, cap, "%s", p); break;
	}
}

struct meta_read {
	struct train_state *st;
	const char *path;
	unsigned char seen[N_META];
	int format_ok;
};

static int meta_parse(void *user, const char *key, const char *value)
{
	struct meta_read *r = user;
	if (!strcmp(key, "format")) {
		r->format_ok = value && !strcmp(value, STATE_FORMAT);
		return 0;
	}
	for (int i = 0; i < N_META; i++) {
		const struct meta_field *m = &meta_fields[i];
		if (strcmp(key, m->key))
			continue;
		char *p = (char *)r->st + m->offset, *end = NULL;
		errno = 0;
		switch (m->kind) {
		case M_INT: *(int *)p = (int)strtol(value, &end, 10); break;
		case M_LONG: *(long *)p = strtol(value, &end, 10); break;
		case M_LLONG: *(long long *)p = strtoll(value, &end, 10); break;
		case M_U64: *(uint64_t *)p = strtoull(value, &end, 10); break;
		case M_DOUBLE: *(double *)p = strtod(value, &end); break;
		case M_STR:
			if (strlen(value) >= m->size)
				return gp_error(GP_EFORMAT, "'%s': \"%s\" is too long", r->path, key);
			strcpy(p, value);
			end = p + strlen(p);
			break;
		}
		if (m->kind != M_STR && (end == value || *end || errno))
			return gp_error(GP_EFORMAT, "'%s': \"%s\" is '%s', not a number", r->path, key, value);
		r->seen[i] = 1;
	}
	return 0;
}

/* --- writing ------------------------------------------------------------------------------ */

/* An epoch's summary as a row of history.epochs, and back. */
#define STATE_EPOCH_COLS 14
static void epoch_to_row(const struct train_epoch_summary *e, double *r)
{
	double v[STATE_EPOCH_COLS] = { e->epoch, (double)e->step, e->time_s, e->lr, e->train_loss,
				       e->train_top1, e->has_val, (double)e->val_images, e->val_loss,
				       e->val_top1, e->val_top5, e->val_img_s, e->img_s, e->data_wait_pct };
	memcpy(r, v, sizeof(v));
}

static void epoch_from_row(const double *r, struct train_epoch_summary *e)
{
	*e = (struct train_epoch_summary){
		.epoch = (int)r[0], .step = (long)r[1], .time_s = r[2], .lr = r[3], .train_loss = r[4],
		.train_top1 = r[5], .has_val = (int)r[6], .val_images = (long)r[7], .val_loss = r[8],
		.val_top1 = r[9], .val_top5 = r[10], .val_img_s = r[11], .img_s = r[12],
		.data_wait_pct = r[13],
	};
}

/* Into the files of an open atomic folder. */
static int state_files_write(struct atomic_dir *ad, struct net *net, const struct train_state *st)
{
	char weights[4200], state[4200];
	float *m = NULL, *v = NULL;
	double *hist = NULL, *epochs = NULL;
	int rc, adamw = net->optim.kind == OPTIM_ADAMW;
	GP_TRY(atomic_dir_file(ad, TRAIN_STATE_WEIGHTS, weights, sizeof(weights)));
	GP_TRY(atomic_dir_file(ad, TRAIN_STATE_FILE, state, sizeof(state)));
	GP_TRY(net_sync_to_host(net));
	GP_TRY(checkpoint_save(net, weights));
	size_t p = net->params_count ? net->params_count : 1;
	m = malloc(p * sizeof(float));
	v = adamw ? malloc(p * sizeof(float)) : NULL;
	hist = malloc(((size_t)st->n_log * 4 + 1) * sizeof(double));
	epochs = malloc(((size_t)st->n_history * STATE_EPOCH_COLS + 1) * sizeof(double));
	if (!m || (adamw && !v) || !hist || !epochs) {
		rc = gp_error(GP_ENOMEM, "out of memory writing a checkpoint");
		goto out;
	}
	if ((rc = net_optim_state_to_host(net, m, v)) < 0)
		goto out;
	for (int i = 0; i < st->n_log; i++) {
		hist[4 * i] = st->log[i].step;
		hist[4 * i + 1] = st->log[i].loss;
		hist[4 * i + 2] = st->log[i].accuracy;
		hist[4 * i + 3] = st->log[i].lr;
	}
	for (int i = 0; i < st->n_history; i++)
		epoch_to_row(&st->history[i], epochs + (size_t)STATE_EPOCH_COLS * i);
	struct ckpt_blob t[5] = {
		{ "history.log", CKPT_F64, 2, { st->n_log, 4 }, hist },
		{ "history.epochs", CKPT_F64, 2, { st->n_history, STATE_EPOCH_COLS }, epochs },
		{ "epoch.acc", CKPT_F64, 1, { TRAIN_STATE_ACC }, (void *)st->acc },
		{ "optimizer.momentum", CKPT_F32, 1, { (int64_t)net->params_count }, m },
		{ "optimizer.exp_avg_sq", CKPT_F32, 1, { (int64_t)net->params_count }, v },
	};
	static char values[N_META][128];
	const char *meta[2 * (N_META + 2)];
	int k = 0;
	meta[k++] = "format";
	meta[k++] = STATE_FORMAT;
	meta[k++] = "producer";
	meta[k++] = "gpuperf";
	for (int i = 0; i < N_META; i++) {
		meta_format(st, &meta_fields[i], values[i], sizeof(values[i]));
		meta[k++] = meta_fields[i].key;
		meta[k++] = values[i];
	}
	rc = checkpoint_write_tensors(state, t, adamw ? 5 : 4, meta, k / 2);
out:
	free(m);
	free(v);
	free(hist);
	free(epochs);
	return rc;
}

int train_state_save(const char *path, struct net *net, const struct train_state *st)
{
	struct atomic_dir ad;
	GP_TRY(atomic_dir_open(&ad, path));
	int rc = state_files_write(&ad, net, st);
	if (rc < 0) {
		atomic_dir_abort(&ad);
		return rc;
	}
	return atomic_dir_commit(&ad);
}

/* The checkpoint in folder src again as folder path: hard links to its files (it is
 * never written again in place), or a fresh write where links are refused. */
static int state_publish(const char *src, const char *path, struct net *net, const struct train_state *st)
{
	static const char *const files[] = { TRAIN_STATE_WEIGHTS, TRAIN_STATE_FILE };
	struct atomic_dir ad;
	char from[4200], to[4200];
	int linked = 1;
	GP_TRY(atomic_dir_open(&ad, path));
	for (int i = 0; i < 2 && linked; i++) {
		snprintf(from, sizeof(from), "%s/%s", src, files[i]);
		int rc = atomic_dir_file(&ad, files[i], to, sizeof(to));
		if (rc < 0) {
			atomic_dir_abort(&ad);
			return rc;
		}
		linked = link(from, to) == 0;
	}
	if (!linked) {
		atomic_dir_abort(&ad);
		return train_state_save(path, net, st);
	}
	return atomic_dir_commit(&ad);
}

/* --- reading --------------------------------------------------------------------------- */

static int state_path(char *buf, size_t cap, const char *dir, const char *file)
{
	if ((size_t)snprintf(buf, cap, "%s/%s", dir, file) >= cap)
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", dir);
	return 0;
}

/* The folder exists and is one: a single line otherwise. */
static int state_dir_check(const char *path)
{
	struct stat s;
	if (stat(path, &s) != 0)
		return gp_error(GP_EIO, "--resume: cannot open checkpoint '%s': %s", path, strerror(errno));
	if (!S_ISDIR(s.st_mode))
		return gp_error(GP_EFORMAT, "--resume: '%s' is not a checkpoint folder (one holds %s and %s)",
				path, TRAIN_STATE_WEIGHTS, TRAIN_STATE_FILE);
	return 0;
}

int train_state_read(const char *path, struct train_state *st)
{
	char file[4200];
	memset(st, 0, sizeof(*st));
	GP_TRY(state_dir_check(path));
	GP_TRY(state_path(file, sizeof(file), path, TRAIN_STATE_FILE));
	struct meta_read r = { .st = st, .path = file };
	struct ckpt_blob b[3] = {
		{ "history.log", CKPT_F64, 2, { -1, 4 }, NULL },
		{ "history.epochs", CKPT_F64, 2, { -1, STATE_EPOCH_COLS }, NULL },
		{ "epoch.acc", CKPT_F64, 1, { TRAIN_STATE_ACC }, st->acc },
	};
	struct ckpt_blob hist = b[0];
	int rc = checkpoint_read_tensors(file, b, 3, meta_parse, &r);
	hist = b[0];
	if (rc < 0) {
		free(b[0].data);
		free(b[1].data);
		return gp_error_wrap(rc, "--resume: ");
	}
	st->n_history = (int)b[1].dims[0];
	st->history = calloc((size_t)st->n_history + 1, sizeof(*st->history));
	for (int i = 0; st->history && i < st->n_history; i++)
		epoch_from_row((const double *)b[1].data + (size_t)STATE_EPOCH_COLS * i, &st->history[i]);
	free(b[1].data);
	if (!st->history) {
		free(hist.data);
		return gp_error(GP_ENOMEM, "out of memory reading '%s'", file);
	}
	if (!r.format_ok) {
		free(hist.data);
		return gp_error(GP_EFORMAT, "--resume: '%s' is not a gpuperf training state (format %s)", file,
				STATE_FORMAT);
	}
	for (int i = 0; i < N_META; i++)
		if (!r.seen[i]) {
			free(hist.data);
			return gp_error(GP_EFORMAT, "--resume: '%s' lacks \"%s\"", file, meta_fields[i].key);
		}
	st->n_log = (int)hist.dims[0];
	st->log = calloc((size_t)st->n_log + 1, sizeof(*st->log));
	if (!st->log) {
		free(hist.data);
		return gp_error(GP_ENOMEM, "out of memory reading '%s'", file);
	}
	const double *h = hist.data;
	for (int i = 0; i < st->n_log; i++)
		st->log[i] = (struct train_log_point){ (int)h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3] };
	free(hist.data);
	if (st->step < 0 || st->loader_batch < 0 || st->sgd_steps < 0 || st->sgd_steps > st->step)
		return gp_error(GP_EFORMAT, "--resume: '%s' holds an impossible position (step %ld, "
				"optimizer steps %ld, batch %ld)", file, st->step, st->sgd_steps, st->loader_batch);
	return 0;
}

void train_state_free(struct train_state *st)
{
	free(st->log);
	st->log = NULL;
	st->n_log = 0;
	free(st->history);
	st->history = NULL;
	st->n_history = 0;
}

int train_state_check(const char *path, const struct train_state *have, const struct train_state *want)
{
	char diff[1024] = "";
	size_t n = 0;
#define DIFF(...) (n += snprintf(diff + n, n < sizeof(diff) ? sizeof(diff) - n : 0, __VA_ARGS__))
	if (strcmp(have->model, want->model))
		DIFF("%smodel %s (this run: %s)", n ? ", " : "", have->model, want->model);
	if (have->in_c != want->in_c || have->in_h != want->in_h || have->in_w != want->in_w)
		DIFF("%sinput %dx%dx%d (this run: %dx%dx%d)", n ? ", " : "", have->in_c, have->in_h,
		     have->in_w, want->in_c, want->in_h, want->in_w);
	if (have->classes != want->classes)
		DIFF("%s%d classes (this run: %d)", n ? ", " : "", have->classes, want->classes);
	if (strcmp(have->optimizer, want->optimizer))
		DIFF("%soptimizer %s (this run: %s)", n ? ", " : "", have->optimizer, want->optimizer);
	if (strcmp(have->precision, want->precision))
		DIFF("%sprecision %s (this run: %s)", n ? ", " : "", have->precision, want->precision);
	if (have->batch != want->batch || have->grad_accum != want->grad_accum)
		DIFF("%sbatch %d x %d micro-batches (this run: %d x %d)", n ? ", " : "", have->batch,
		     have->grad_accum, want->batch, want->grad_accum);
	if (have->steps_per_epoch != want->steps_per_epoch)
		DIFF("%s%d steps per epoch (this run: %d)", n ? ", " : "", have->steps_per_epoch,
		     want->steps_per_epoch);
#undef DIFF
	if (n)
		return gp_error(GP_EINVAL, "--resume: checkpoint '%s' is of another run: %s", path, diff);
	return 0;
}

int train_state_load_weights(const char *path, struct net *net)
{
	char file[4200];
	GP_TRY(state_path(file, sizeof(file), path, TRAIN_STATE_WEIGHTS));
	int rc = checkpoint_load(net, file);
	return rc < 0 ? gp_error_wrap(rc, "--resume: ") : 0;
}

int train_state_restore(const char *path, struct net *net, const struct train_state *st)
{
	char file[4200];
	int adamw = net->optim.kind == OPTIM_ADAMW, rc;
	GP_TRY(state_path(file, sizeof(file), path, TRAIN_STATE_FILE));
	size_t p = net->params_count ? net->params_count : 1;
	float *m = malloc(p * sizeof(float)), *v = adamw ? malloc(p * sizeof(float)) : NULL;
	if (!m || (adamw && !v)) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", file);
		goto out;
	}
	struct ckpt_blob t[2] = {
		{ "optimizer.momentum", CKPT_F32, 1, { (int64_t)net->params_count }, m },
		{ "optimizer.exp_avg_sq", CKPT_F32, 1, { (int64_t)net->params_count }, v },
	};
	if ((rc = checkpoint_read_tensors(file, t, adamw ? 2 : 1, NULL, NULL)) < 0) {
		rc = gp_error_wrap(rc, "--resume: ");
		goto out;
	}
	net->sgd_steps = (int)st->sgd_steps;
	if (st->scaler.enabled)
		net->scaler = st->scaler;
	rc = net_optim_state_from_host(net, m, v);
out:
	free(m);
	free(v);
	return rc;
}

/* --- the run's checkpoints ------------------------------------------------------------- */

static int ckpt_path(char *buf, size_t cap, const char *dir, const char *name)
{
	return state_path(buf, cap, dir, name);
}

int train_checkpoint_epoch_end(struct train_ckpt *ck, struct net *net, int epoch, long step,
			       double val_top1)
{
	if (!ck || !ck->dir)
		return 0;
	char written[4200], path[4200], name[32];
	struct train_state *st = &ck->st;
	if (mkdir(ck->dir, 0755) != 0 && errno != EEXIST)
		return gp_error(GP_EIO, "--checkpoint-dir: cannot create '%s': %s", ck->dir, strerror(errno));
	st->epoch = epoch;
	st->step = step;
	st->val_top1 = val_top1;
	int best = !isnan(val_top1) && (isnan(st->best_val_top1) || val_top1 > st->best_val_top1);
	if (best)
		st->best_val_top1 = val_top1;
	if (ck->save_every > 0 && epoch % ck->save_every == 0) {
		snprintf(name, sizeof(name), "epoch_%d", epoch);
		GP_TRY(ckpt_path(written, sizeof(written), ck->dir, name));
		GP_TRY(train_state_save(written, net, st));
		GP_TRY(ckpt_path(path, sizeof(path), ck->dir, "last"));
		GP_TRY(state_publish(written, path, net, st));
	} else {
		GP_TRY(ckpt_path(written, sizeof(written), ck->dir, "last"));
		GP_TRY(train_state_save(written, net, st));
	}
	if (best) {
		GP_TRY(ckpt_path(path, sizeof(path), ck->dir, "best"));
		GP_TRY(state_publish(written, path, net, st));
	}
	if (ck->log) {
		fprintf(ck->log, "checkpoint: epoch %d (step %ld) in %s%s%s\n", epoch, step, written,
			strcmp(written + strlen(written) - 4, "last") ? " and last" : "", best ? " and best" : "");
		fflush(ck->log);
	}
	return 0;
}

int train_checkpoint_interrupted(struct train_ckpt *ck, struct net *net)
{
	if (!ck || !ck->dir)
		return 0;
	char path[4200];
	if (mkdir(ck->dir, 0755) != 0 && errno != EEXIST)
		return gp_error(GP_EIO, "--checkpoint-dir: cannot create '%s': %s", ck->dir, strerror(errno));
	ck->st.interrupted = 1;
	ck->st.val_top1 = NAN;
	GP_TRY(ckpt_path(path, sizeof(path), ck->dir, "last"));
	GP_TRY(train_state_save(path, net, &ck->st));
	if (ck->log) {
		fprintf(ck->log, "checkpoint: interrupted at step %ld (epoch %d, %ld steps into it) in %s\n",
			ck->st.step, ck->st.epoch + 1, ck->st.step - (long)ck->st.epoch * ck->st.steps_per_epoch, path);
		fflush(ck->log);
	}
	return 0;
}
