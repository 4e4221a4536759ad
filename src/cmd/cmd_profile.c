/* gpuperf profile: time some unprofiled steps, then record a few steps with the
 * profiler (torch.profiler's wait/warmup/active schedule) and write the trace,
 * TensorBoard scalars, the analysis, two charts and a result JSON. With --data DIR the
 * loader's wait for each batch is recorded in the data stage. */
#include <stdio.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "report/analysis.h"
#include "report/result.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/profiler.h"

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
		OPT_DECODE(&decode, "where JPEGs are decoded: cpu (loader threads) | gpu (nvJPEG + GPU augmentation) | auto (gpu where it can run)"),
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
				"profile", &o.decode_gpu));
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
	if (s.settings && o.data)
		json_object_set_new(s.settings, "workers", json_integer(workers));
	if (!s.settings)
		return gp_error(GP_ENOMEM, "cannot build the settings");
	struct train_observer ob = profile_session_observer(&s);
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
	profile_session_free(&s);
	json_decref(s.settings);
	if (rc == 0 && s.windows_written != 1)
		rc = gp_error(GP_EINVAL, "profile: the recorded window did not complete");
	return rc;
}
