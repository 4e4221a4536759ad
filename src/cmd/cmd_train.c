/* gpuperf train: train a model on synthetic data (one fixed batch, as the PyTorch
 * yardstick does) or on a dataset through the data loader, printing the loss as it
 * goes and img/s (and, with a dataset, the data wait) at the end. */
#include <jansson.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/dp.h"
#include "cmd/launch.h"
#include "cmd/cmds.h"
#include "cmd/train_json.h"
#include "cmd/train_scalars.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/result.h"
#include "report/profiler.h"
#include "report/stats.h"

/* Train with a profile window at the start of each listed epoch; every other step
 * is timed (with the device idle at its end, as the profiled ones) for the overhead
 * ratio, which compares each window with the unprofiled steps before it. */
static int train_run_profiled(struct train_opts *o, const struct int_list *epochs, int steps,
			      const char *out, const char *precision, int argc, char **argv,
			      struct train_scalars *scalars, struct train_result *res)
{
	int epoch_steps = o->epoch_steps > 0 ? o->epoch_steps : o->steps;
	int active = steps > 0 && steps < epoch_steps ? steps : epoch_steps;
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d_%H%M%S", &tm);
	struct profile_session s;
	profile_session_init(&s);
	for (int i = 0; i < epochs->n; i++) {
		struct profile_window *w = &s.w[s.n_windows++];
		*w = (struct profile_window){ .first = epochs->v[i] * epoch_steps, .active = active,
					      .epoch = epochs->v[i] };
		snprintf(w->dir, sizeof(w->dir), "%s/profile_epoch_%d_%s", out, epochs->v[i], stamp);
	}
	s.baseline_steps = -1;
	s.backend = o->backend;
	s.command = "train";
	s.argc = argc;
	s.argv = argv;
	s.settings = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i}", "model", o->model, "device",
			       train_device_name(o->backend), "precision", precision,
			       "batch", o->batch, "size", o->size, "epochs", o->epochs > 0 ? o->epochs : 1,
			       "epoch_steps", epoch_steps);
	if (!s.settings)
		return gp_error(GP_ENOMEM, "cannot build the settings");
	struct train_observer ob = profile_session_observer(&s);
	o->observer = scalars ? train_scalars_observer(scalars, &ob) : &ob;
	int rc = train_run(o, res, stdout);
	o->observer = NULL;
	profile_session_free(&s);
	json_decref(s.settings);
	if (rc == 0 && s.windows_written != epochs->n)
		rc = gp_error(GP_EINVAL, "train: %d of %d profile windows completed",
			      s.windows_written, epochs->n);
	return rc;
}

/* --repeat N: N whole runs, each from a fresh net; res is the last, with img/s,
 * ms/step and the total time the means over all, and *repeat_out their spread
 * ({"n", "img_s", "ms_per_step", "total_s"}), what diff weighs a change against. */
static int train_run_repeated(struct train_opts *o, int repeat, struct train_result *res,
			      json_t **repeat_out, FILE *log)
{
	double *img_s = calloc(repeat, sizeof(double)), *ms = calloc(repeat, sizeof(double));
	double *total = calloc(repeat, sizeof(double));
	int rc = 0;
	if (!img_s || !ms || !total) {
		rc = gp_error(GP_ENOMEM, "no memory for %d repeats", repeat);
		goto out;
	}
	for (int i = 0; i < repeat; i++) {
		if (log)
			fprintf(log, "repeat %d/%d\n", i + 1, repeat);
		train_result_free(res); /* the log of the run before: the last one's is kept */
		memset(res, 0, sizeof(*res));
		if ((rc = train_run(o, res, log)) < 0)
			goto out;
		img_s[i] = res->img_s;
		ms[i] = res->ms_per_step;
		total[i] = res->total_s;
	}
	struct stat_summary si, sm, st;
	stats_summarize(img_s, repeat, &si);
	stats_summarize(ms, repeat, &sm);
	stats_summarize(total, repeat, &st);
	res->img_s = si.mean;
	res->ms_per_step = sm.mean;
	res->total_s = st.mean;
	if (log)
		fprintf(log, "over %d repeats: %.1f img/s (std %.2f, %.1f to %.1f), %.3f ms/step (std %.3f)\n",
			repeat, si.mean, si.std, si.min, si.max, sm.mean, sm.std);
	*repeat_out = json_pack("{s:i, s:o, s:o, s:o}", "n", repeat, "img_s",
				stats_json(&si, img_s, repeat), "ms_per_step", stats_json(&sm, ms, repeat),
				"total_s", stats_json(&st, total, repeat));
	if (!*repeat_out)
		rc = gp_error(GP_ENOMEM, "no memory for the spread");
out:
	free(img_s);
	free(ms);
	free(total);
	return rc;
}

/* Every measuring command leaves a result: <out>/train.json (atomically), and with
 * --json the measurements on stdout too. */
static int train_write_result(const struct train_opts *o, const struct train_result *r, const char *out,
			      int print, json_t *repeat, int argc, char **argv)
{
	json_t *m = train_result_json(o, r), *res = result_new("train", argc, argv);
	if (m && repeat)
		json_object_set(m, "repeat", repeat);
	char path[4096];
	int rc = 0;
	if (!m || !res) {
		rc = gp_error(GP_ENOMEM, "out of memory writing the result");
		goto out;
	}
	json_t *gpu = train_gpu_json(o->backend, 0);
	if (gpu)
		result_set_gpu(res, gpu); /* res holds gpu from here on */
	struct mfu mfu;
	train_mfu(o, r, gpu, &mfu);
	if ((rc = mfu_json_set(m, &mfu)) < 0)
		goto out;
	train_mfu_print(stdout, &mfu, o->precision, o->backend == BACKEND_CUDA);
	json_object_set(res, "measurements", m);
	/* what the run was, so that a result says how to repeat it */
	json_t *settings = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:i, s:s, s:i, s:o, s:I, s:i, s:o, s:o}",
				     "model", o->model, "device", train_device_name(o->backend),
				     "precision", train_precision_name(o->precision),
				     "layout", train_layout_name(o->layout), "batch", o->batch,
				     "size", o->size, "steps", r->steps, "epochs", o->epochs,
				     "data", o->data ? o->data : "synthetic", "workers", o->workers,
				     "decode", r->decode_gpu ? "gpu" : "cpu",
				     "decode_threads", r->decode_gpu ? o->decode_threads : 0,
				     "decode_probe", train_decode_probe_json(r), "seed", (json_int_t)o->seed,
				     "eval_every", o->eval_every,
				     "checkpoint_dir", o->checkpoint_dir ? json_string(o->checkpoint_dir) : json_null(),
				     "resume", o->resume ? json_string(o->resume) : json_null());
	json_t *recipe = train_recipe_json(o);
	if (!settings || !recipe || json_object_update(settings, recipe) < 0) {
		json_decref(settings);
		json_decref(recipe);
		rc = gp_error(GP_ENOMEM, "out of memory writing the result");
		goto out;
	}
	json_decref(recipe);
	json_object_set_new(res, "settings", settings);
	if ((rc = result_write(res, out, "train", path, sizeof(path))) < 0)
		goto out;
	if (print) {
		char *s = json_dumps(m, JSON_INDENT(2));
		if (!s) {
			rc = gp_error(GP_ENOMEM, "out of memory writing the JSON summary");
			goto out;
		}
		printf("%s\n", s);
		free(s);
	}
	printf("wrote %s\n", path);
out:
	json_decref(m);
	json_decref(res);
	return rc;
}

/* The optimizer and schedule options into o, checked together: each option belongs to
 * one optimizer or schedule, and a wrong pairing is one error line. */
static int train_parse_recipe(struct train_opts *o, const char *optimizer, const char *schedule,
			      const char *betas, double eps, int warmup_epochs, double warmup_factor,
			      int lr_step, double gamma)
{
	struct sgd_args *a = &o->sgd;
	struct lr_schedule_cfg *c = &o->schedule;
	GP_TRY(train_parse_optimizer(optimizer, &a->kind));
	GP_TRY(lr_schedule_parse(schedule, &c->kind));
	if (a->kind == OPTIM_ADAMW) {
		if (a->momentum >= 0 || a->nesterov)
			return gp_error(GP_EINVAL, "--momentum and --nesterov are SGD's: AdamW takes --betas");
		a->momentum = 0;
		a->beta1 = 0.9;
		a->beta2 = 0.999;
		a->eps = eps > 0 ? eps : 1e-8;
		a->weight_decay = a->weight_decay >= 0 ? a->weight_decay : 0.01;
		if (betas) {
			char *end1 = NULL, *end2 = NULL;
			a->beta1 = strtod(betas, &end1);
			if (end1 == betas || *end1 != ',' || (a->beta2 = strtod(end1 + 1, &end2), end2 == end1 + 1) ||
			    *end2 || !(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1))
				return gp_error(GP_EINVAL, "--betas must be B1,B2 with each in [0, 1) (got '%s')", betas);
		}
	} else {
		if (betas || eps > 0)
			return gp_error(GP_EINVAL, "--betas and --eps are AdamW's: add --optimizer adamw");
		a->momentum = a->momentum >= 0 ? a->momentum : 0.9;
		a->weight_decay = a->weight_decay >= 0 ? a->weight_decay : 0;
		if (a->nesterov && !(a->momentum > 0))
			return gp_error(GP_EINVAL, "--nesterov needs a positive --momentum");
	}
	if (warmup_factor > 0 && !warmup_epochs)
		return gp_error(GP_EINVAL, "--warmup-factor needs --warmup-epochs");
	if (gamma > 0 && c->kind != LR_STEP)
		return gp_error(GP_EINVAL, "--lr-gamma needs --lr-schedule step");
	c->warmup_epochs = warmup_epochs;
	c->warmup_factor = warmup_factor > 0 ? warmup_factor : 0.01;
	c->step_epochs = lr_step;
	c->gamma = gamma > 0 ? gamma : 0.1;
	/* what does not depend on the run's length; the trainer checks the rest */
	struct lr_schedule_cfg probe = *c;
	probe.lr = a->lr;
	probe.steps_per_epoch = 1;
	probe.total_steps = 2000000000L;
	return lr_schedule_check(&probe);
}

int cmd_train(int argc, char **argv)
{
	struct train_opts o = train_opts_default();
	const char *device = "auto", *precision = "fp32", *load = NULL, *save = NULL, *data = "synthetic", *decode = "cpu";
	const char *layout = NULL;
	int help = 0, json = 0, size = 0, warmup = -1, log_every = 0, recompute_blocks = 0;
	int overwrite = 0, nproc = 0, bucket_mb = 0, repeat = 1;
	struct cmd_dist_opts dopt = { 0 };
	/* 0 until given: the dataset's class count, 1000 for the synthetic batch */
	o.classes = 0;
	long long seed = 0;
	int epochs = 0, epoch_steps = 0, profile_steps = 0;
	const char *val_data = NULL, *tensorboard = NULL;
	o.eval_every = 1;
	/* the recipe's options; negative: not given (defaults depend on the optimizer) */
	const char *optimizer = "sgd", *schedule = "constant", *betas = NULL;
	double eps = -1, warmup_factor = -1, gamma = -1;
	int warmup_epochs = 0, lr_step = 0;
	o.sgd.momentum = -1;
	o.sgd.weight_decay = -1;
	struct int_list profile_epochs = { 0 };
	const char *out = NULL;
	o.dropout = -1; /* the model's own; the option's range refuses negative values */
	struct opt opts[] = {
		OPT_MODEL(&o.model, "(simple_cnn)"),
		OPT_DEVICE(&device),
		OPT_PRECISION(&precision, "(fp32; GPU; fp16/bf16: mixed precision)"),
		OPT_LAYOUT(&layout, "(GPU activations; default nhwc under fp16/bf16)"),
		OPT_BATCH(&o.batch, "batch size (32)"),
		OPT_SIZE(&size),
		OPT_CLASSES(&o.classes, "output classes (default: the dataset's; 1000 for synthetic)"),
		OPT_STEPS(&o.steps, "training steps (20)"),
		{ "warmup", OPT_INT, &warmup, "steps left out of the img/s figure (default: 10% of steps, at most 10)", 0, ARGS_MAX_STEPS },
		{ "epochs", OPT_INT, &epochs, "train this many epochs instead of --steps", 1, 1000000 },
		{ "epoch-steps", OPT_INT, &epoch_steps, "steps per epoch (default: one pass over the data; --steps for synthetic data)", 1, ARGS_MAX_STEPS },
		{ "profile-epochs", OPT_INT_LIST, &profile_epochs, "profile the first steps of these epochs (from 0)", 0, 1000000 },
		{ "profile-steps", OPT_INT, &profile_steps, "steps profiled per listed epoch (default: the whole epoch)", 1, ARGS_MAX_STEPS },
		OPT_OUT(&out, "train.json and profile_epoch_<e>_<timestamp>/", "train"),
		OPT_OVERWRITE(&overwrite, "train.json"),
		{ "optimizer", OPT_STR, &optimizer, "(sgd; adamw as torch.optim.AdamW)", .choices = train_optimizer_name_at },
		OPT_LR(&o.sgd.lr, "learning rate (0.01)"),
		{ "lr-schedule", OPT_STR, &schedule, "(constant; per epoch: step, cosine; per step: onecycle, with --lr as max_lr)",
		  .choices = lr_schedule_name_at },
		{ "warmup-epochs", OPT_INT, &warmup_epochs, "linear warmup epochs before the schedule (0)", 0, 1000000 },
		{ "warmup-factor", OPT_DOUBLE, &warmup_factor, "the warmup's first rate as a fraction of --lr (0.01)",
		  .min_d = 0, .max_d = 1, .range = OPT_MIN_EXCL | OPT_MAX_INCL },
		{ "lr-step", OPT_INT, &lr_step, "--lr-schedule step: epochs between decays", 1, 1000000 },
		{ "lr-gamma", OPT_DOUBLE, &gamma, "--lr-schedule step: decay factor (0.1)", .min_d = 0, .max_d = 1,
		  .range = OPT_MIN_EXCL | OPT_MAX_INCL },
		OPT_MOMENTUM(&o.sgd.momentum, "SGD momentum (0.9)"),
		OPT_WEIGHT_DECAY(&o.sgd.weight_decay, "weight decay (SGD 0, L2 in the gradient; AdamW 0.01, decoupled)"),
		{ "nesterov", OPT_FLAG, &o.sgd.nesterov, "Nesterov momentum", 0 },
		{ "betas", OPT_STR, &betas, "AdamW's B1,B2 (0.9,0.999)" },
		{ "eps", OPT_DOUBLE, &eps, "AdamW's epsilon (1e-8)", .min_d = 0, .max_d = 1,
		  .range = OPT_MIN_EXCL | OPT_MAX_EXCL },
		{ "label-smoothing", OPT_DOUBLE, &o.label_smoothing, "cross-entropy label smoothing (0)", .min_d = 0,
		  .max_d = 1, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		{ "grad-accum", OPT_INT, &o.grad_accum, "micro-batches of --batch per optimizer step (1)", 1, 1024 },
		{ "clip-grad-norm", OPT_DOUBLE, &o.sgd.clip_norm, "clip the gradients' total L2 norm to this",
		  .min_d = 0, .range = OPT_MIN_EXCL },
		{ "dropout", OPT_DOUBLE, &o.dropout, "override the model's dropout probability (0 disables)", 0, 0, .min_d = 0, .max_d = 1, .range = OPT_MIN_INCL | OPT_MAX_EXCL },
		OPT_SEED(&seed, "seed for initialization and data (0)"),
		OPT_DATA(&data, "synthetic (one fixed batch, the default) | DIR (ImageFolder) | cifar10:DIR"),
		{ "val-data", OPT_PATH, &val_data, "validation set (DIR or cifar10:DIR; default: --data's val/ beside "
		  "train/, or CIFAR-10's test batch)", 0 },
		{ "eval-every", OPT_INT, &o.eval_every, "validate every N epochs and after the last (1; 0: never)", 0,
		  1000000 },
		{ "tensorboard", OPT_PATH, &tensorboard, "TensorBoard scalars into this folder (default: "
		  "tensorboard/ in the run folder, beside train_log.csv and train_epochs.csv)", 0 },
		OPT_WORKERS(&o.workers, "data-loader threads (0: decode in the training thread)"),
		OPT_DECODE(&decode, "where JPEGs are decoded: cpu (loader threads) | gpu (nvJPEG + GPU augmentation) | auto (the faster of the two, timed at the start)"),
		OPT_DECODE_THREADS(&o.decode_threads),
		OPT_PREFETCH(&o.prefetch, "batches in flight per loader worker (2)"),
		{ "load", OPT_PATH, &load, "load weights (safetensors, torchvision names) before training", 0 },
		{ "save", OPT_PATH, &save, "save weights after training", 0 },
		{ "checkpoint-dir", OPT_PATH, &o.checkpoint_dir, "write training checkpoints here: last (each epoch), "
		  "best (by val top-1), epoch_<n> (--save-every)", 0 },
		{ "save-every", OPT_INT, &o.save_every, "--checkpoint-dir: keep epoch_<n> every N epochs (0: none)", 0, 1000000 },
		{ "resume", OPT_PATH, &o.resume, "continue the run of a checkpoint folder (DIR/last) exactly", 0 },
		{ "log-every", OPT_INT, &log_every, "print the loss every N steps (default: about 20 lines)", 1, ARGS_MAX_STEPS },
		{ "no-graphs", OPT_FLAG, &o.no_graphs, "run each step op by op (no CUDA graph replay)", 0 },
		{ "deterministic", OPT_FLAG, &o.deterministic, "GPU: deterministic convolution algorithms only, "
		  "so that a resumed run repeats an uninterrupted one", 0 },
		{ "recompute", OPT_FLAG, &o.recompute, "recompute BN+ReLU outputs in backward instead of keeping them", 0 },
		{ "recompute-blocks", OPT_FLAG, &recompute_blocks,
		  "--recompute, and residual blocks' outputs too (all but each stage's first)", 0 },
		{ "nproc", OPT_INT, &nproc, "data parallel: start N ranks here, one GPU each (as torchrun)", 1, ARGS_MAX_RANKS },
		{ "sync-bn", OPT_FLAG, &o.sync_bn, "data parallel: batch-norm statistics over every rank (SyncBatchNorm)", 0 },
		{ "bucket-mb", OPT_INT, &bucket_mb, "data parallel: gradient all-reduce bucket size in MiB (25, as DDP)", 1, 1024 },
		{ "rendezvous", OPT_STR, &dopt.transport, "data parallel: how ranks meet and talk on the host (auto: MPI under mpirun, else TCP)", .choices = cmd_dist_transport_at },
		{ "dist-timeout", OPT_DOUBLE, &dopt.timeout_s, "data parallel: seconds a rank waits for the others (300)", 0, 0, .min_d = 1, .max_d = 86400, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		{ "repeat", OPT_INT, &repeat, "train this many times; img/s and ms/step become the mean, "
		  "with their spread in the result (1)", 1, 1000 },
		OPT_JSON(&json, "print a JSON summary at the end"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (o.save_every && !o.checkpoint_dir)
		return gp_error(GP_EINVAL, "--save-every needs --checkpoint-dir");
	if ((o.checkpoint_dir || o.resume) && (repeat > 1 || nproc || cmd_dist_launched()))
		return gp_error(GP_EINVAL, "--checkpoint-dir and --resume are for one run of one process "
				"(not with --repeat or several ranks yet)");
	if (o.resume && load)
		return gp_error(GP_EINVAL, "--resume brings its own weights: leave out --load");
	if (repeat > 1 && profile_epochs.n)
		return gp_error(GP_EINVAL, "--repeat and --profile-epochs cannot go together");
	if (recompute_blocks)
		o.recompute = 2;
	if (help) {
		args_print_help("gpuperf train --model NAME [--device D] [--batch B] [--size S] "
				"[--steps N] [--data synthetic|DIR|cifar10:DIR] [--workers N] [--prefetch K] "
				"[--epochs E]", opts);
		return 0;
	}
	int synthetic = !strcmp(data, "synthetic");
	if (synthetic && (o.workers || o.prefetch))
		return gp_error(GP_EINVAL, "--workers and --prefetch need --data DIR or cifar10:DIR");
	o.data = data;
	o.val_data = val_data;
	if (val_data && !o.eval_every)
		return gp_error(GP_EINVAL, "--val-data with --eval-every 0: nothing would read it");
	if (tensorboard && repeat > 1)
		return gp_error(GP_EINVAL, "--tensorboard and --repeat cannot go together (one run's scalars)");
	GP_TRY(train_parse_recipe(&o, optimizer, schedule, betas, eps, warmup_epochs, warmup_factor,
				  lr_step, gamma));
	if (epochs > 0 && warmup_epochs >= epochs)
		return gp_error(GP_EINVAL, "--warmup-epochs %d leaves nothing of --epochs %d", warmup_epochs, epochs);
	o.seed = (uint64_t)seed;
	o.size = size;
	o.warmup = warmup;
	o.log_every = log_every;
	o.load = load;
	o.save = save;
	o.epochs = epochs;
	o.epoch_steps = epoch_steps;
	if (profile_steps && !profile_epochs.n)
		return gp_error(GP_EINVAL, "--profile-steps needs --profile-epochs");
	for (int i = 0; i < profile_epochs.n; i++) {
		if (profile_epochs.v[i] >= (epochs > 0 ? epochs : 1))
			return gp_error(GP_EINVAL, "--profile-epochs %d is beyond --epochs %d (epochs count from 0)",
					profile_epochs.v[i], epochs);
		for (int k = 0; k < i; k++)
			if (profile_epochs.v[k] == profile_epochs.v[i])
				return gp_error(GP_EINVAL, "--profile-epochs lists epoch %d twice",
						profile_epochs.v[i]);
	}
	GP_TRY(model_name_check(o.model));
	GP_TRY(args_decode_pick(decode, args_data_is_files(data) && strcmp(device, "cpu"), "train",
				&o.decode));
	if (o.decode_threads && o.decode == DECODE_CPU)
		return gp_error(GP_EINVAL, "--decode-threads is for --decode gpu (or auto): the CPU "
				"path's threads are --workers");
	GP_TRY(train_pick_device(device, &o.backend, 0));
	GP_TRY(train_parse_precision(precision, &o.precision));
	GP_TRY(train_parse_layout(layout, &o.layout));
	o.bucket_bytes = (size_t)bucket_mb << 20;
	int launched = cmd_dist_launched();
	if ((o.sync_bn || bucket_mb || dopt.transport || dopt.timeout_s > 0) && !nproc && !launched)
		return gp_error(GP_EINVAL, "--sync-bn, --bucket-mb, --rendezvous and --dist-timeout are for "
				"data-parallel runs (--nproc N, or under torchrun, mpirun or srun)");
	if (nproc && profile_epochs.n)
		return gp_error(GP_EINVAL, "--profile-epochs is not supported with several ranks yet");
	/* every output is tried before the first step (rank 0 writes them); the folder's
	 * path leaves room for the profile windows' names inside it */
	char dir[3900];
	if (nproc) {
		GP_TRY(cmd_dist_check_nproc(nproc, o.backend));
		if (save)
			GP_TRY(path_file_prepare(save));
		/* the ranks write into the folder this launch settles */
		GP_TRY(result_dir_prepare("train", "train", out, overwrite, dir, sizeof(dir)));
		int cargc;
		char **cargv;
		GP_TRY(cmd_dist_child_argv(argc, argv, dir, &cargc, &cargv));
		int rc = launch_local(nproc, cargc, cargv, &(struct launch_opts){ 0 });
		free(cargv);
		return rc;
	}
	GP_TRY(cmd_dist_join(o.backend, &dopt, &o.dist, &o.device));
	int rank0 = dist_rank(o.dist) == 0;
	int rc = 0;
	if (rank0 && save)
		rc = path_file_prepare(save);
	if (rc == 0 && rank0)
		rc = result_dir_prepare("train", "train", out, overwrite, dir, sizeof(dir));
	struct stat ck_st;
	if (rc == 0 && o.checkpoint_dir && mkdir(o.checkpoint_dir, 0755) != 0 && errno != EEXIST)
		rc = gp_error(GP_EIO, "--checkpoint-dir: cannot create '%s': %s", o.checkpoint_dir, strerror(errno));
	else if (rc == 0 && o.checkpoint_dir && (stat(o.checkpoint_dir, &ck_st) != 0 || !S_ISDIR(ck_st.st_mode)))
		rc = gp_error(GP_EIO, "--checkpoint-dir: '%s' is not a folder", o.checkpoint_dir);
	if (rc < 0) {
		dist_abort(o.dist, gp_errmsg());
		dist_close(o.dist);
		return rc;
	}
	struct train_result res = { 0 };
	json_t *repeat_json = NULL;
	/* the scalars of one run, written by rank 0: beside train.json unless told */
	struct train_scalars scalars, *sc = NULL;
	if (rc == 0 && rank0 && repeat == 1) {
		char tb[4096];
		snprintf(tb, sizeof(tb), "%s/tensorboard", dir);
		if ((rc = train_scalars_open(&scalars, tensorboard ? tensorboard : tb, dir)) < 0) {
			dist_abort(o.dist, gp_errmsg());
			dist_close(o.dist);
			return rc;
		}
		sc = &scalars;
	}
	o.keep_log = 1;
	/* one process alone stops gracefully on SIGINT or SIGTERM: ranks would wait for
	 * each other in a collective, so there the first signal still ends the run */
	int graceful = dist_world(o.dist) == 1 && repeat == 1;
	if (graceful && (rc = interrupt_catch()) < 0) {
		dist_close(o.dist);
		return rc;
	}
	/* the energy counter around the timed steps (a profiled run has its own observer,
	 * and its timing is not the plain step's: no energy there) */
	struct train_energy energy;
	struct train_observer energy_obs = { .timed = train_energy_timed, .user = &energy };
	train_energy_start(&energy, o.backend, o.device);
	if (repeat > 1) {
		o.observer = &energy_obs;
		rc = train_run_repeated(&o, repeat, &res, &repeat_json, rank0 ? stdout : NULL);
		o.observer = NULL;
	} else if (!profile_epochs.n) {
		o.observer = sc ? train_scalars_observer(sc, &energy_obs) : &energy_obs;
		rc = train_run(&o, &res, rank0 ? stdout : NULL);
		o.observer = NULL;
	} else {
		rc = train_run_profiled(&o, &profile_epochs, profile_steps, dir, precision, argc,
					argv, sc, &res);
	}
	/* the scalars so far also when training stopped part-way */
	if (sc) {
		char why[1024];
		snprintf(why, sizeof(why), "%s", gp_errmsg());
		int rc_sc = train_scalars_close(sc);
		if (rc < 0)
			gp_error(rc, "%s", why);
		else
			rc = rc_sc;
	}
	/* a signal after the last step (during --save, say) still ends in its exit status */
	if (graceful && rc == 0 && interrupt_signal()) {
		res.interrupted = 1;
		rc = gp_error(GP_EINTR, "interrupted after the last step");
	}
	if (graceful)
		interrupt_release();
	res.energy_j = energy.energy_j;
	res.energy_s = energy.seconds;
	train_energy_stop(&energy);
	if (rc < 0)
		dist_abort(o.dist, gp_errmsg());
	dist_close(o.dist);
	/* res.steps is set once training ended: what failed after it (--save, a profile
	 * window) still leaves the measurements; rank 0 writes them */
	if (!rank0 || (rc < 0 && res.steps == 0)) {
		train_result_free(&res);
		json_decref(repeat_json);
		return rc;
	}
	char late_error[1024] = "";
	if (rc < 0)
		snprintf(late_error, sizeof(late_error), "%s", gp_errmsg());
	int rc_result = train_write_result(&o, &res, dir, json, repeat_json, argc, argv);
	json_decref(repeat_json);
	train_result_free(&res);
	if (rc_result < 0)
		return rc_result;
	return rc < 0 ? gp_error(rc, "%s", late_error) : 0;
}

