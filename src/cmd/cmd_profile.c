/* gpuperf profile: time some unprofiled steps, then record a few steps with the
 * profiler (torch.profiler's wait/warmup/active schedule) and write the trace,
 * TensorBoard scalars, the analysis, two charts and a result JSON. With --data DIR the
 * loader's wait for each batch is recorded in the data stage. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/train_json.h"
#include "core/error.h"
#include "data/decode_probe.h"
#include "gpu/nvml.h"
#include "report/analysis.h"
#include "report/result.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/profiler.h"

/* GPM (Hopper on) over the unprofiled, timed steps: what the SMs, tensor cores and
 * DRAM did while nothing but training ran. It wraps the profile session's observer;
 * both the step before the first timed one and the last timed one end with the
 * device idle (the session synchronizes), so the GPM interval covers their work. */
struct gpm_watch {
	struct train_observer inner;
	int first, last; /* the timed steps: [first, last] */
	int step, cuda;
	struct nvml_gpm *gpm;
	struct nvml_gpm_metrics m;
	int have;
	char why[256]; /* why there are no figures, when the read failed */
};

static int gw_step_begin(void *user, struct net *net, int epoch, int step_in_epoch, int step)
{
	struct gpm_watch *g = user;
	g->step = step;
	if (g->cuda && step == g->first && !g->gpm && nvml_open() == 0) {
		size_t bytes;
		int dev = 0;
		if (train_process_gpu_mem(&bytes, &dev) < 0)
			dev = 0; /* not found by pid (containers): NVML's first GPU */
		if (nvml_gpm_open(dev, &g->gpm) < 0)
			g->gpm = NULL; /* no GPM here: the summary leaves it out */
		nvml_close();      /* the reader holds its own reference */
		gp_error_clear();
	}
	return g->inner.step_begin(g->inner.user, net, epoch, step_in_epoch, step);
}

static int gw_stage(void *user, enum train_stage stage, int begin)
{
	struct gpm_watch *g = user;
	return g->inner.stage(g->inner.user, stage, begin);
}

static int gw_step_end(void *user, struct net *net, int64_t data_wait_ns)
{
	struct gpm_watch *g = user;
	int rc = g->inner.step_end(g->inner.user, net, data_wait_ns);
	if (g->gpm && g->step == g->last) {
		g->have = nvml_gpm_read(g->gpm, &g->m) == 0;
		if (!g->have) /* said in the summary: the steps were too short, say */
			snprintf(g->why, sizeof(g->why), "%s", gp_errmsg());
		gp_error_clear();
		nvml_gpm_close(g->gpm);
		g->gpm = NULL;
	}
	return rc;
}

/* Add GPM's figures to the result the session wrote and print them. */
static int gpm_report(const struct gpm_watch *g, const char *dir, int steps)
{
	char path[4200];
	json_t *res;
	if (!g->have) {
		if (*g->why)
			printf("GPM over the %d unprofiled steps: none (%s; more --baseline-steps "
			       "give an interval long enough)\n", steps, g->why);
		return 0;
	}
	printf("GPM over the %d unprofiled steps: SM activity %.1f %%, tensor activity %.1f %%, "
	       "DRAM bandwidth %.1f %%\n", steps, g->m.sm_util_pct, g->m.tensor_util_pct,
	       g->m.dram_bw_util_pct);
	snprintf(path, sizeof(path), "%s/result.json", dir);
	GP_TRY(result_read(path, &res));
	json_t *gpm = json_pack("{s:i, s:o, s:o, s:o, s:o}", "steps", steps, "sm_activity_pct",
				result_real(g->m.sm_util_pct), "sm_occupancy_pct",
				result_real(g->m.sm_occupancy_pct), "tensor_activity_pct",
				result_real(g->m.tensor_util_pct), "dram_bw_util_pct",
				result_real(g->m.dram_bw_util_pct));
	int rc = gpm ? 0 : gp_error(GP_ENOMEM, "out of memory adding GPM to the result");
	if (rc == 0 && json_object_set_new(json_object_get(res, "measurements"), "gpm", gpm) < 0)
		rc = gp_error(GP_EFORMAT, "%s has no measurements object", path);
	if (rc == 0)
		rc = json_write_atomic(res, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
	json_decref(res);
	return rc;
}

int cmd_profile(int argc, char **argv)
{
	struct train_opts o = train_opts_default();
	const char *device = "auto", *precision = "fp32", *out = NULL, *data = "synthetic", *decode = "cpu";
	const char *sort = NULL;
	int record_shapes = 0;
	int help = 0, size = 0, wait = 1, warmup = 1, baseline = -1, workers = 4, classes = 0;
	int overwrite = 0;
	long long seed = 0;
	o.model = "mobilenet_v2";
	o.batch = 64;
	struct opt opts[] = {
		OPT_MODEL(&o.model, "(mobilenet_v2)"),
		OPT_DEVICE(&device),
		OPT_PRECISION(&precision, "(fp32; GPU math mode, fp16/bf16: mixed precision)"),
		OPT_BATCH(&o.batch, "batch size (64)"),
		OPT_SIZE(&size),
		OPT_CLASSES(&classes, "output classes (default: the dataset's; 1000 for synthetic)"),
		OPT_STEPS(&o.steps, "recorded (active) steps (20)"),
		{ "wait", OPT_INT, &wait, "steps run first, neither timed nor recorded (1)", 0, ARGS_MAX_STEPS },
		{ "warmup", OPT_INT, &warmup, "steps recorded and dropped before the active ones (1)", 0, ARGS_MAX_STEPS },
		{ "baseline-steps", OPT_INT, &baseline, "unprofiled steps timed for the overhead ratio (default: --steps)", 1, ARGS_MAX_STEPS },
		OPT_SEED(&seed, "seed for initialization and data (0)"),
		OPT_DATA(&data, "synthetic | DIR (ImageFolder) | cifar10:DIR"),
		OPT_WORKERS(&workers, "data-loader threads with --data (4)"),
		OPT_DECODE(&decode, "where JPEGs are decoded: cpu (loader threads) | gpu (nvJPEG + GPU augmentation) | auto (the faster of the two, timed at the start)"),
		{ "record-shapes", OPT_FLAG, &record_shapes, "record each layer's input shapes (the op table by layer shows them)" },
		{ "sort", OPT_STR, &sort, "op tables by gpu or cpu time (gpu when kernels ran)", .choices = analysis_sort_name_at },
		OPT_OUT(&out, "the trace, logs, charts, report and result.json", "profile"),
		OPT_OVERWRITE(&overwrite, "result.json"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf profile [--model NAME] [--batch B] [--workers N] [--steps N] [--wait W] "
				"[--warmup W] [--data DIR] [--device D] [--record-shapes] [--sort gpu|cpu] "
				"[--out DIR]", opts);
		return 0;
	}
	if (strcmp(data, "synthetic")) {
		o.data = data;
		o.workers = workers;
	}
	o.classes = classes;
	if (baseline < 0)
		baseline = o.steps;
	GP_TRY(model_name_check(o.model)); /* before the plan is printed */
	GP_TRY(analysis_sort_check(sort));
	GP_TRY(args_decode_pick(decode, args_data_is_files(data) && strcmp(device, "cpu"),
				"profile", &o.decode));
	GP_TRY(train_pick_device(device, &o.backend, 0));
	GP_TRY(train_parse_precision(precision, &o.precision));
	o.seed = (uint64_t)seed;
	o.size = size;

	struct profile_session s;
	profile_session_init(&s);
	struct profile_window *w = &s.w[0];
	*w = (struct profile_window){ .first = wait + baseline, .warmup = warmup, .active = o.steps,
				      .epoch = -1 };
	/* the trace, charts and result.json go here: tried before the first step */
	GP_TRY(result_dir_prepare("profile", "result", out, overwrite, w->dir, sizeof(w->dir)));
	s.n_windows = 1;
	s.baseline_first = wait;
	s.baseline_steps = baseline;
	s.backend = o.backend;
	s.record_shapes = record_shapes;
	s.sort = sort;
	s.command = "profile";
	s.argc = argc;
	s.argv = argv;
	s.settings = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:o}", "model", o.model,
			       "device", train_device_name(o.backend), "precision",
			       precision, "batch", o.batch, "size", size, "wait", wait, "warmup_steps",
			       warmup, "steps", o.steps, "baseline_steps", baseline, "data", result_string(data));
	if (s.settings) {
		json_object_set_new(s.settings, "record_shapes", json_boolean(record_shapes));
		json_object_set_new(s.settings, "sort", sort ? json_string(sort) : json_null());
	}
	if (s.settings && o.data) {
		json_object_set_new(s.settings, "workers", json_integer(workers));
		/* where the pixels were made: "auto" stays itself here, as the pick is
		 * measured inside the run (its line in the log) */
		json_object_set_new(s.settings, "decode", json_string(decode_mode_name_at((int)o.decode)));
	}
	if (!s.settings)
		return gp_error(GP_ENOMEM, "cannot build the settings");
	struct gpm_watch gw = { .inner = profile_session_observer(&s), .first = wait,
				.last = wait + baseline - 1, .step = -1,
				.cuda = o.backend == BACKEND_CUDA };
	struct train_observer ob = { .step_begin = gw_step_begin, .stage = gw_stage,
				     .step_end = gw_step_end, .user = &gw };
	int total = wait + baseline + warmup + o.steps;
	o.steps = total;
	o.warmup = 0;
	o.log_every = total + 1; /* the loss only on the first and last step: no extra waits */
	o.observer = &ob;
	printf("profiling %s on %s (%s), batch %d: %d wait, %d unprofiled (timed), %d warm-up, "
	       "%d recorded steps\n",
	       o.model, train_device_name(o.backend), precision, o.batch, wait,
	       baseline, warmup, w->active);
	struct train_result res;
	int rc = train_run(&o, &res, NULL);
	nvml_gpm_close(gw.gpm); /* a run that failed before the last timed step */
	if (rc == 0 && res.decode_probed) {
		char line[512];
		decode_probe_describe(&res.decode_probe, line, sizeof(line));
		printf("%s\n", line);
	}
	profile_session_free(&s);
	json_decref(s.settings);
	if (rc == 0 && s.windows_written != 1)
		rc = gp_error(GP_EINVAL, "profile: the recorded window did not complete");
	if (rc == 0)
		rc = gpm_report(&gw, w->dir, baseline);
	return rc;
}
