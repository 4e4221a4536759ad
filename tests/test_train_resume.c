/* Training checkpoints (train/train_state.h): a run stopped by SIGINT after epoch 2 and
 * resumed from its last checkpoint ends bit for bit as the run that was never stopped
 * (weights, optimizer state and loss history), with loader threads, under SGD with
 * momentum and a cosine schedule and under AdamW; a checkpoint of another run, a
 * missing one and a corrupt one are refused in one line; Ctrl-C on the command line
 * writes the checkpoint and train.json and exits 130, and a second one leaves no
 * temporary files. */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/file.h"
#include "core/interrupt.h"
#include "train/schedule.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "test.h"

/* 48 images of 3 classes: 6 batches of 8 per epoch. */
static const char *dataset_make(char *buf, size_t cap)
{
	char cmd[1024], out[4096];
	snprintf(buf, cap, "%s/ds", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 3 --images 48 --size 40x40 --threads 1",
		 test_bin(), buf);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	return buf;
}

static struct train_opts resume_opts(const char *data, enum optim_kind kind)
{
	struct train_opts o = train_opts_default();
	o.data = data;
	o.classes = 0;
	o.size = 32;
	o.batch = 8;
	o.epochs = 4;
	o.workers = 2;
	o.log_every = 1;
	o.keep_log = 1;
	o.seed = 5;
	if (kind == OPTIM_ADAMW)
		o.sgd = (struct sgd_args){ .kind = OPTIM_ADAMW, .lr = 2e-3, .beta1 = 0.9, .beta2 = 0.999,
					   .eps = 1e-8, .weight_decay = 0.01 };
	else
		o.sgd = (struct sgd_args){ .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4 };
	o.schedule = lr_schedule_defaults(LR_COSINE, o.sgd.lr);
	o.schedule.warmup_epochs = 1;
	return o;
}

/* Raise SIGINT during step `at` (from 1): the trainer finishes the step and stops. */
struct stop_at {
	int at;
};

static int raise_at(void *user, struct net *net, int step, int steps, double elapsed_s)
{
	const struct stop_at *s = user;
	if (step == s->at)
		raise(SIGINT);
	return 0;
}

static int files_equal(const char *a, const char *b)
{
	char *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;
	int same = file_read_all(a, &x, &nx) == 0 && file_read_all(b, &y, &ny) == 0 && nx == ny &&
		   !memcmp(x, y, nx);
	free(x);
	free(y);
	return same;
}

static void check_resume_exact(enum optim_kind kind)
{
	char ds[512], whole[600], part[600], a[700], b[700];
	dataset_make(ds, sizeof(ds));
	if (test_failed())
		return;
	snprintf(whole, sizeof(whole), "%s/whole", test_tmpdir());
	snprintf(part, sizeof(part), "%s/part", test_tmpdir());

	struct train_opts o = resume_opts(ds, kind);
	struct train_result r_whole, r_stop, r_resumed;
	o.checkpoint_dir = whole;
	CHECK_MSG(train_run(&o, &r_whole, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(r_whole.steps, 24);

	/* stopped by SIGINT at the end of epoch 2 (step 12) */
	struct stop_at s = { 12 };
	struct train_observer ob = { .after_step = raise_at, .user = &s };
	o.checkpoint_dir = part;
	CHECK(interrupt_catch() == 0);
	int rc = train_run_observed(&o, &ob, &r_stop, NULL);
	interrupt_release();
	/* the caught signal stays readable (main's exit status) until the next catch */
	CHECK_EQ_INT(interrupt_signal(), SIGINT);
	CHECK(interrupt_catch() == 0);
	interrupt_release();
	CHECK_EQ_INT(interrupt_signal(), 0);
	CHECK_MSG(rc == GP_EINTR, "rc %d: %s", rc, gp_errmsg());
	CHECK(strstr(gp_errmsg(), "resume with --resume") != NULL);
	CHECK_EQ_INT(r_stop.interrupted, 1);
	CHECK_EQ_INT(r_stop.steps, 12);

	struct train_state st;
	snprintf(a, sizeof(a), "%s/last", part);
	CHECK_MSG(train_state_read(a, &st) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(st.step, 12);
	CHECK_EQ_INT(st.epoch, 2);
	CHECK_EQ_INT(st.interrupted, 1);
	CHECK_EQ_INT(st.loader_batch, 12);
	CHECK_EQ_INT(st.n_log, 12);
	train_state_free(&st);

	/* resumed, into another folder: every step from 13 on as the whole run's */
	o.resume = a;
	snprintf(b, sizeof(b), "%s/part2", test_tmpdir());
	o.checkpoint_dir = b;
	CHECK_MSG(train_run(&o, &r_resumed, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(r_resumed.resumed_step, 12);
	CHECK_EQ_INT(r_resumed.n_log, r_whole.n_log);
	for (int i = 0; i < r_whole.n_log && i < r_resumed.n_log; i++) {
		const struct train_log_point *p = &r_whole.log[i], *q = &r_resumed.log[i];
		CHECK_MSG(p->step == q->step && p->loss == q->loss && p->accuracy == q->accuracy && p->lr == q->lr,
			  "step %d: loss %.17g uninterrupted, %.17g resumed", p->step, p->loss, q->loss);
	}
	CHECK(r_resumed.last_loss == r_whole.last_loss);
	char wa[800], wb[800];
	snprintf(wa, sizeof(wa), "%s/last/" TRAIN_STATE_WEIGHTS, whole);
	snprintf(wb, sizeof(wb), "%s/last/" TRAIN_STATE_WEIGHTS, b);
	CHECK_MSG(files_equal(wa, wb), "weights differ: %s and %s", wa, wb);
	/* the optimizer buffers too: the state files differ only in the metadata */
	struct train_state sa, sb;
	CHECK(train_state_read(whole, &sa) != 0); /* the folder of checkpoints is none itself */
	snprintf(wa, sizeof(wa), "%s/last", whole);
	snprintf(wb, sizeof(wb), "%s/last", b);
	CHECK(train_state_read(wa, &sa) == 0 && train_state_read(wb, &sb) == 0);
	CHECK_EQ_INT(sa.step, 24);
	CHECK_EQ_INT(sb.step, 24);
	CHECK_EQ_INT(sa.sgd_steps, sb.sgd_steps);
	train_state_free(&sa);
	train_state_free(&sb);
	/* the interrupted run differs from the whole one at step 12: the check can fail */
	snprintf(wa, sizeof(wa), "%s/last/" TRAIN_STATE_WEIGHTS, whole);
	snprintf(wb, sizeof(wb), "%s/last/" TRAIN_STATE_WEIGHTS, part);
	CHECK(!files_equal(wa, wb));
	train_result_free(&r_whole);
	train_result_free(&r_stop);
	train_result_free(&r_resumed);
}

/* With validation, stopped inside an epoch: the resumed run's history is the whole
 * run's (every figure but the clock's), the epoch cut in two included, and best is
 * the epoch with the highest val top-1. */
TEST(train_resume_mid_epoch_keeps_the_history)
{
	char ds[512], cmd[1200], out[4096], whole[600], part[600], a[800], b[700];
	snprintf(ds, sizeof(ds), "%s/dsv", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 3 --images 64 --size 40x40 "
		 "--threads 1 --val-fraction 0.25", test_bin(), ds);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	snprintf(whole, sizeof(whole), "%s/vwhole", test_tmpdir());
	snprintf(part, sizeof(part), "%s/vpart", test_tmpdir());
	snprintf(b, sizeof(b), "%s/vpart2", test_tmpdir());
	struct train_opts o = resume_opts(ds, OPTIM_SGD);
	o.eval_every = 1;
	struct train_result rw, rs, rr;
	o.checkpoint_dir = whole;
	CHECK_MSG(train_run(&o, &rw, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(rw.n_history, 4);
	/* SIGINT in the middle of epoch 3 (steps 13..18) */
	struct stop_at s = { 15 };
	struct train_observer ob = { .after_step = raise_at, .user = &s };
	o.checkpoint_dir = part;
	CHECK(interrupt_catch() == 0);
	CHECK_EQ_INT(train_run_observed(&o, &ob, &rs, NULL), GP_EINTR);
	interrupt_release();
	CHECK(interrupt_catch() == 0);
	interrupt_release();
	CHECK_EQ_INT(rs.n_history, 2);
	snprintf(a, sizeof(a), "%s/last", part);
	o.resume = a;
	o.checkpoint_dir = b;
	CHECK_MSG(train_run(&o, &rr, NULL) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(rr.n_history, 4);
	double best = -1;
	int best_epoch = 0;
	for (int i = 0; i < 4 && i < rr.n_history && i < rw.n_history; i++) {
		const struct train_epoch_summary *p = &rw.history[i], *q = &rr.history[i];
		CHECK_MSG(p->epoch == q->epoch && p->step == q->step && p->lr == q->lr &&
			  p->train_loss == q->train_loss && p->train_top1 == q->train_top1 &&
			  p->has_val && q->has_val && p->val_loss == q->val_loss &&
			  p->val_top1 == q->val_top1 && p->val_top5 == q->val_top5 &&
			  p->val_images == 16 && q->val_images == 16,
			  "epoch %d: train loss %.17g / %.17g, val loss %.17g / %.17g", p->epoch,
			  p->train_loss, q->train_loss, p->val_loss, q->val_loss);
		CHECK(q->time_s >= (i ? rr.history[i - 1].time_s : 0));
		if (p->val_top1 > best)
			best = p->val_top1, best_epoch = p->epoch;
	}
	struct train_state st;
	snprintf(a, sizeof(a), "%s/best", b);
	if (best_epoch > 2) { /* best came after the resume: written by the resumed run */
		CHECK_MSG(train_state_read(a, &st) == 0, "%s", gp_errmsg());
		CHECK_EQ_INT(st.epoch, best_epoch);
		CHECK(st.val_top1 == best && st.best_val_top1 == best);
		train_state_free(&st);
	}
	snprintf(a, sizeof(a), "%s/best", whole);
	CHECK_MSG(train_state_read(a, &st) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(st.epoch, best_epoch);
	CHECK(st.best_val_top1 == best);
	CHECK_EQ_INT(st.n_history, best_epoch);
	train_state_free(&st);
	train_result_free(&rw);
	train_result_free(&rs);
	train_result_free(&rr);
}

TEST(train_resume_sgd_cosine_is_bit_identical)
{
	check_resume_exact(OPTIM_SGD);
}

TEST(train_resume_adamw_is_bit_identical)
{
	check_resume_exact(OPTIM_ADAMW);
}

/* --save-every 1 over 2 epochs: epoch_1, epoch_2 and last (the same files as epoch_2,
 * linked); no best without a validation. */
TEST(train_resume_checkpoint_folders)
{
	char ds[512], whole[600];
	dataset_make(ds, sizeof(ds));
	if (test_failed())
		return;
	snprintf(whole, sizeof(whole), "%s/whole", test_tmpdir());
	struct train_opts o = resume_opts(ds, OPTIM_SGD);
	o.epochs = 2;
	o.save_every = 1;
	o.checkpoint_dir = whole;
	struct train_result r;
	CHECK_MSG(train_run(&o, &r, NULL) == 0, "%s", gp_errmsg());
	train_result_free(&r);
	char a[800], b[800];
	snprintf(a, sizeof(a), "%s/epoch_2/" TRAIN_STATE_WEIGHTS, whole);
	snprintf(b, sizeof(b), "%s/last/" TRAIN_STATE_WEIGHTS, whole);
	CHECK(files_equal(a, b));
	snprintf(a, sizeof(a), "%s/epoch_1/" TRAIN_STATE_WEIGHTS, whole);
	CHECK(!files_equal(a, b));
	struct train_state st;
	snprintf(a, sizeof(a), "%s/epoch_1", whole);
	CHECK_MSG(train_state_read(a, &st) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(st.epoch, 1);
	CHECK_EQ_INT(st.step, 6);
	CHECK_EQ_INT(st.loader_batch, 6);
	CHECK_EQ_INT(st.interrupted, 0);
	CHECK(!strcmp(st.model, "simple_cnn") && st.classes == 3 && st.in_h == 32);
	CHECK(isnan(st.best_val_top1));
	train_state_free(&st);
	snprintf(a, sizeof(a), "%s/best", whole);
	FILE *f = fopen(a, "r");
	CHECK(f == NULL);
	if (f)
		fclose(f);
}

/* Another model, size or optimizer; a missing and a corrupt checkpoint: one line. */
TEST(train_resume_refuses_another_run)
{
	char cmd[2048], out[8192], ck[600];
	const char *dir = test_tmpdir();
	snprintf(ck, sizeof(ck), "%s/ck", dir);
	snprintf(cmd, sizeof(cmd), "%s train --device cpu --model simple_cnn --batch 2 --size 16 --classes 10 "
		 "--steps 4 --epoch-steps 2 --checkpoint-dir %s --out %s/o", test_bin(), ck, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	CHECK(strstr(out, "checkpoint: epoch 2 (step 4)") != NULL);
	static const char *const bad[][2] = {
		{ "--model resnet18", "model simple_cnn (this run: resnet18)" },
		{ "--size 32", "input 3x16x16 (this run: 3x32x32)" },
		{ "--classes 5", "10 classes (this run: 5)" },
		{ "--optimizer adamw", "optimizer sgd (this run: adamw)" },
		{ "--batch 4", "batch 2 x 1 micro-batches (this run: 4 x 1)" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char args[1024];
		snprintf(args, sizeof(args), "train --device cpu --model simple_cnn --batch 2 --size 16 --classes 10 "
			 "--steps 8 --epoch-steps 2 --resume %s/last --out %s/r%zu %s", ck, dir, i, bad[i][0]);
		test_check_bad(args, bad[i][1]);
	}
	char args[1024];
	snprintf(args, sizeof(args), "train --device cpu --batch 2 --size 16 --classes 10 --steps 8 "
		 "--epoch-steps 2 --resume %s/nothing --out %s/m", ck, dir);
	test_check_bad(args, "cannot open checkpoint");
	snprintf(args, sizeof(args), "train --device cpu --batch 2 --size 16 --classes 10 --steps 4 "
		 "--epoch-steps 2 --resume %s/last --out %s/n", ck, dir);
	test_check_bad(args, "nothing left to train");
	snprintf(cmd, sizeof(cmd), "f=%s/last/" TRAIN_STATE_FILE "; head -c 300 $f > $f.x && mv $f.x $f", ck);
	CHECK(test_run(cmd, out, sizeof(out)) == 0);
	snprintf(args, sizeof(args), "train --device cpu --batch 2 --size 16 --classes 10 --steps 8 "
		 "--epoch-steps 2 --resume %s/last --out %s/c", ck, dir);
	test_check_bad(args, "train_state.safetensors");
	snprintf(args, sizeof(args), "train --device cpu --batch 2 --size 16 --classes 10 --steps 8 "
		 "--save-every 2 --out %s/s", dir);
	test_check_bad(args, "--save-every needs --checkpoint-dir");
	snprintf(args, sizeof(args), "train --device cpu --batch 2 --size 16 --classes 10 --steps 8 "
		 "--resume %s/last --load x.safetensors --out %s/l", ck, dir);
	test_check_bad(args, "--resume brings its own weights");
	snprintf(args, sizeof(args), "train --device cpu --batch 2 --size 16 --classes 10 --steps 8 "
		 "--checkpoint-dir %s/last/model.safetensors --out %s/f", ck, dir);
	test_check_bad(args, "is not a folder");
}

/* The weights of a checkpoint are --save's file: --load takes them strictly. */
TEST(train_resume_weights_load_as_saved_weights)
{
	char cmd[2048], out[8192];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "G=$(realpath %s) && cd %s && $G train --device cpu --batch 2 --size 16 --classes 10 "
		 "--steps 2 --checkpoint-dir ck --save w.safetensors --out o && cmp w.safetensors ck/last/"
		 TRAIN_STATE_WEIGHTS " && $G train --device cpu --batch 2 --size 16 --classes 10 --steps 1 --load ck/last/"
		 TRAIN_STATE_WEIGHTS " --out o2", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
}

/* Ctrl-C after the first epoch's checkpoint: exit 130, last marked interrupted,
 * train.json with what was done, and a resume from it runs to the end. */
#define STARTED_CAUGHT "for i in $(seq 400); do m=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$p/status " \
		       "2>/dev/null); [ -n \"$m\" ] && [ $((0x$m & 2)) -ne 0 ] && break; sleep 0.05; done; "
TEST(train_resume_sigint_writes_checkpoint_and_result)
{
	char cmd[4096], out[16384];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd),
		 "G=$(realpath %s); cd %s || exit 9; $G train --device cpu --batch 2 --size 16 --classes 10 --steps 100000 "
		 "--epoch-steps 3 --log-every 1 --checkpoint-dir ck --out o > log 2>&1 & p=$!; " STARTED_CAUGHT
		 "i=0; while [ ! -d ck/last ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done; "
		 "kill -INT $p; wait $p; echo \"exit $?\"; cat log",
		 test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && strstr(out, "exit 130"), "%s", out);
	CHECK_MSG(strstr(out, "interrupted by SIGINT after step") != NULL, "%s", out);
	CHECK(strstr(out, "resume with --resume ck/last") != NULL);
	char path[700];
	snprintf(path, sizeof(path), "%s/o/train.json", dir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	CHECK_MSG(j != NULL, "%s: %s", path, err.text);
	json_t *m = json_object_get(j, "measurements");
	CHECK(json_is_true(json_object_get(m, "interrupted")));
	int steps = (int)json_integer_value(json_object_get(m, "steps"));
	CHECK(steps >= 3 && steps < 100000);
	CHECK_EQ_INT(json_array_size(json_object_get(m, "log")), steps);
	json_decref(j);
	struct train_state st;
	snprintf(path, sizeof(path), "%s/ck/last", dir);
	CHECK_MSG(train_state_read(path, &st) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(st.step, steps);
	CHECK_EQ_INT(st.interrupted, 1);
	train_state_free(&st);
	/* the resume runs to the end of the epoch after, with the whole history */
	snprintf(cmd, sizeof(cmd), "G=$(realpath %s) && cd %s && $G train --device cpu --batch 2 --size 16 --classes 10 "
		 "--steps %d --epoch-steps 3 --log-every 1 --resume ck/last --checkpoint-dir ck --out o2",
		 test_bin(), dir, (steps / 3 + 2) * 3);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && strstr(out, "resumed from ck/last"), "%s", out);
	snprintf(path, sizeof(path), "%s/o2/train.json", dir);
	j = json_load_file(path, 0, &err);
	m = json_object_get(j, "measurements");
	CHECK_EQ_INT(json_array_size(json_object_get(m, "log")), (steps / 3 + 2) * 3);
	CHECK(json_is_false(json_object_get(m, "interrupted")));
	json_decref(j);
}

/* A second Ctrl-C while the checkpoint of a large net is written stops at once: no
 * temporary folder or file stays, and no checkpoint is half there. */
TEST(train_resume_second_sigint_leaves_no_temporary_files)
{
	char cmd[4096], out[16384];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd),
		 "G=$(realpath %s); cd %s || exit 9; $G train --model resnet50 --device cpu --batch 1 --size 32 --classes 10 "
		 "--steps 1000 --epoch-steps 1 --checkpoint-dir ck --out o > log 2>&1 & p=$!; " STARTED_CAUGHT
		 "i=0; while ! ls -a ck 2>/dev/null | grep -q '^\\.last\\.tmp' && kill -0 $p 2>/dev/null && "
		 "[ $i -lt 3000 ]; do sleep 0.002; i=$((i+1)); done; [ $i -lt 3000 ] && echo during; "
		 "kill -INT $p; sleep 0.05; kill -INT $p; "
		 "wait $p; echo \"exit $?\"; sleep 0.2; echo left: $(find . -name '.*tmp*'); "
		 "[ ! -e ck/last ] || [ $(ls ck/last | wc -l) = 2 ] && echo whole; cat log",
		 test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && strstr(out, "exit 130"), "%s", out);
	CHECK_MSG(strstr(out, "during") != NULL, "%s", out); /* the signals came during a write */
	CHECK_MSG(strstr(out, "left:\n") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "whole") != NULL, "%s", out);
	CHECK_MSG(!strstr(out, "wrote o/train.json"), "%s", out);
}

/* kill -9 leaves a checkpoint's temporary folder: the next write into that folder of
 * checkpoints removes it once it is a minute old and its process is gone. */
TEST(train_resume_stale_temporary_folder_is_swept)
{
	char cmd[2048], out[8192];
	snprintf(cmd, sizeof(cmd),
		 "G=$(realpath %s); cd %s || exit 9; mkdir -p ck/.last.tmp.999999 ck/.fresh.tmp.999999 && "
		 "echo x > ck/.last.tmp.999999/model.safetensors && touch -d '-2 minutes' ck/.last.tmp.999999/* "
		 "ck/.last.tmp.999999 && $G train --device cpu --batch 2 --size 16 --classes 10 --steps 2 "
		 "--checkpoint-dir ck --out o > log 2>&1; echo \"exit $?\"; ls -a ck",
		 test_bin(), test_tmpdir());
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && strstr(out, "exit 0"), "%s", out);
	CHECK_MSG(!strstr(out, ".last.tmp.999999"), "%s", out);
	CHECK_MSG(strstr(out, ".fresh.tmp.999999") != NULL, "%s", out); /* not a minute old */
	CHECK(strstr(out, "last") != NULL);
}
