/* gpuperf advise: measure a training set-up, find what holds it back, and prove each
 * candidate fix by measuring it: more loader workers when the step waits for data,
 * TF32 when FP32 runs on a GPU with tensor cores, a larger batch when there is memory
 * for it. The fixes that pay are then measured together. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "data/decode_probe.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/analysis.h"
#include "report/result.h"
#include "report/table.h"

#define ADVISE_GAIN 1.05 /* a fix must bring at least 5% more img/s to be kept */
#define ADVISE_MAX 8

struct trial {
	char change[96], reason[160];
	struct train_opts o;
	struct train_result r;
	int kept;
	double est; /* the estimated speed-up (analysis.h's estimators), 0: none */
};

static int advise_measure(struct trial *t, int i, int n_planned)
{
	fprintf(stderr, "advise: [%d/%d] %s ...\n", i + 1, n_planned, t->change);
	int rc = train_run(&t->o, &t->r, NULL);
	if (rc == GP_EDEVOOM || rc == GP_ENOMEM) {
		/* a fix that does not fit is an answer, not a failure */
		snprintf(t->reason + strlen(t->reason), sizeof(t->reason) - strlen(t->reason),
			 "; out of memory: %s", gp_errmsg());
		t->r.img_s = 0;
		return 0;
	}
	return rc;
}

static json_t *trial_json(const struct trial *t, double base_img_s)
{
	return json_pack("{s:s, s:s, s:i, s:i, s:s, s:o, s:o, s:o, s:o, s:b}", "change", t->change,
			 "reason", t->reason, "batch", t->o.batch, "workers", t->o.workers,
			 "precision", train_precision_name(t->o.precision), "img_s", result_real(t->r.img_s),
			 "speedup", result_real(base_img_s > 0 ? t->r.img_s / base_img_s : 0.0),
			 "est_speedup", t->est > 0 ? result_real(t->est) : json_null(), "data_wait_pct",
			 result_real(t->r.data_wait_pct), "kept", t->kept);
}

/* The advice is the fastest of what the table keeps (each fix alone, or the kept
 * ones together), so the last line never names a change the table calls no gain. */
int advise_pick(const double *img_s, const int *kept, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (kept[i] && (best == 0 || img_s[i] > img_s[best]))
			best = i;
	return best;
}

int cmd_advise(int argc, char **argv)
{
	struct train_opts base = train_opts_default();
	const char *device = "auto", *precision = "fp32", *data = "synthetic", *out = NULL, *decode = "cpu";
	int help = 0, size = 0, overwrite = 0;
	base.model = "mobilenet_v2";
	base.batch = 64;
	base.steps = 30;
	struct opt opts[] = {
		OPT_MODEL(&base.model, "(mobilenet_v2)"),
		OPT_BATCH(&base.batch, "batch size (64)"),
		OPT_SIZE(&size),
		OPT_DATA(&data, "synthetic | DIR (ImageFolder) | cifar10:DIR"),
		OPT_WORKERS(&base.workers, "data-loader threads (0)"),
		OPT_DECODE(&decode, "where JPEGs are decoded: cpu (loader threads) | gpu (nvJPEG + GPU augmentation) | auto (the faster of the two, timed at the start)"),
		/* a measurement needs a step beyond its untimed warm-up */
		{ "steps", OPT_INT, &base.steps, "training steps per measurement (30)", 2, ARGS_MAX_STEPS },
		OPT_DEVICE(&device),
		OPT_PRECISION(&precision, "(fp32; on a GPU at fp32, tf32 is one of the fixes tried)"),
		OPT_OUT(&out, "advise.json", "advise"),
		OPT_OVERWRITE(&overwrite, "advise.json"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf advise [--model M] [--batch B] [--data DIR] [--workers N] [--steps N]", opts);
		return 0;
	}
	base.size = size;
	base.classes = 0;
	base.log_every = base.steps + 1;
	base.warmup = base.steps / 5;
	int has_data = strcmp(data, "synthetic") != 0;
	if (has_data)
		base.data = data;
	else if (base.workers)
		return gp_error(GP_EINVAL, "--workers needs --data DIR or cifar10:DIR");
	GP_TRY(model_name_check(base.model));
	GP_TRY(args_decode_pick(decode, args_data_is_files(data) && strcmp(device, "cpu"),
				"advise", &base.decode));
	GP_TRY(train_pick_device(device, &base.backend, 0));
	GP_TRY(train_parse_precision(precision, &base.precision));
	char run_dir[4096];
	GP_TRY(result_dir_prepare("advise", "advise", out, overwrite, run_dir, sizeof(run_dir)));
	out = run_dir;

	struct trial t[ADVISE_MAX];
	int n = 0, rc;
	memset(t, 0, sizeof(t));
	t[n].o = base;
	snprintf(t[n].change, sizeof(t[n].change), "baseline");
	snprintf(t[n].reason, sizeof(t[n].reason), "as given");
	if ((rc = advise_measure(&t[n], 0, 1)) < 0)
		return rc;
	if (t[0].r.img_s <= 0)
		return gp_error(GP_EDEVOOM, "the set-up as given does not fit: %s", t[0].reason);
	n++;
	/* auto is measured once, by the baseline: every trial keeps the path it took, so
	 * that a trial's gain is its own change's */
	if (t[0].r.decode_probed) {
		char line[512];
		decode_probe_describe(&t[0].r.decode_probe, line, sizeof(line));
		fprintf(stderr, "advise: %s\n", line);
	}
	base.decode = t[0].r.decode_gpu ? DECODE_GPU : DECODE_CPU;
	const struct train_result *b = &t[0].r;
	/* diagnose: each rule carries the number that triggered it */
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	/* advise has no trace: its estimates take the step outside the data wait as
	 * the device's work (docs/profile.md, "Advice rules") */
	double wait = b->data_wait_pct / 100 < 0 ? 0 : b->data_wait_pct / 100 > 1 ? 1 : b->data_wait_pct / 100;
	/* more workers: only where they decode (--decode gpu has no worker threads) */
	if (has_data && base.decode != DECODE_GPU && b->data_wait_pct >= 10) {
		int w = base.workers ? 2 * base.workers : 2;
		for (int k = 0; k < 2 && w <= 2 * cores && n < ADVISE_MAX; k++, w *= 2) {
			t[n].o = base;
			t[n].o.workers = w;
			snprintf(t[n].change, sizeof(t[n].change), "--workers %d", w);
			snprintf(t[n].reason, sizeof(t[n].reason),
				 "the step waited for data %.0f%% of its time", b->data_wait_pct);
			t[n].est = advice_est_removed(wait);
			n++;
		}
	}
	if (base.backend == BACKEND_CUDA && base.precision == PREC_FP32 && n < ADVISE_MAX) {
		t[n].o = base;
		t[n].o.precision = PREC_TF32;
		snprintf(t[n].change, sizeof(t[n].change), "--precision tf32");
		snprintf(t[n].reason, sizeof(t[n].reason), "FP32 math on a GPU whose tensor cores take TF32");
		t[n].est = advice_est_tensor_cores(1 - wait);
		n++;
	}
	if (n < ADVISE_MAX) {
		t[n].o = base;
		t[n].o.batch = 2 * base.batch;
		snprintf(t[n].change, sizeof(t[n].change), "--batch %d", 2 * base.batch);
		snprintf(t[n].reason, sizeof(t[n].reason), "%.2f ms per step: more work per launch and per copy",
			 b->ms_per_step);
		t[n].est = advice_est_bigger_batch(1 - wait);
		n++;
	}
	for (int i = 1; i < n; i++)
		if ((rc = advise_measure(&t[i], i, n)) < 0)
			return rc;
	/* keep what paid; the best of the worker counts only */
	struct train_opts combo = base;
	int kept = 0, best_workers = -1;
	double best_w_img_s = 0;
	for (int i = 1; i < n; i++) {
		if (t[i].r.img_s < ADVISE_GAIN * b->img_s)
			continue;
		if (t[i].o.workers != base.workers) {
			if (t[i].r.img_s > best_w_img_s) {
				best_w_img_s = t[i].r.img_s;
				best_workers = i;
			}
			continue;
		}
		t[i].kept = 1;
		kept++;
		combo.precision = t[i].o.precision;
		combo.batch = t[i].o.batch;
	}
	if (best_workers > 0) {
		t[best_workers].kept = 1;
		kept++;
		combo.workers = t[best_workers].o.workers;
	}
	int combined = 0;
	if (kept > 1 && n < ADVISE_MAX) {
		t[n].o = combo;
		snprintf(t[n].change, sizeof(t[n].change), "all kept changes together");
		snprintf(t[n].reason, sizeof(t[n].reason), "%d fixes paid on their own", kept);
		t[n].est = 1;
		for (int i = 1; i < n; i++)
			if (t[i].kept && t[i].est > 0)
				t[n].est *= t[i].est;
		if ((rc = advise_measure(&t[n], n, n + 1)) < 0)
			return rc;
		combined = n++;
	}

	struct table tab;
	table_init(&tab);
	table_add_col(&tab, "change", TABLE_LEFT);
	table_add_col(&tab, "img/s", TABLE_RIGHT);
	table_add_col(&tab, "speed-up", TABLE_LEFT);
	table_add_col(&tab, "data wait %", TABLE_RIGHT);
	table_add_col(&tab, "verdict", TABLE_LEFT);
	table_add_col(&tab, "why it was tried", TABLE_LEFT);
	for (int i = 0; i < n; i++) {
		char gain[64];
		if (t[i].est > 0)
			snprintf(gain, sizeof(gain), "estimated %.2fx, measured %.2fx", t[i].est,
				 t[i].r.img_s / b->img_s);
		else
			snprintf(gain, sizeof(gain), "%.2fx", t[i].r.img_s / b->img_s);
		table_add_row(&tab, "%s\t%.1f\t%s\t%.1f\t%s\t%s", t[i].change, t[i].r.img_s,
			      gain, t[i].r.data_wait_pct,
			      i == 0 ? "-" : t[i].kept ? "keep" : i == combined ? "combined"
			      : t[i].r.img_s >= ADVISE_GAIN * b->img_s ? "faster, not best" : "no gain",
			      t[i].reason);
	}
	printf("\n");
	table_print(&tab, stdout);
	table_free(&tab);
	double img_s[ADVISE_MAX];
	int chosen[ADVISE_MAX];
	for (int i = 0; i < n; i++) {
		img_s[i] = t[i].r.img_s;
		chosen[i] = t[i].kept || (i == combined && combined > 0);
	}
	const struct trial *best = &t[advise_pick(img_s, chosen, n)];
	if (best == &t[0])
		printf("\nadvice: keep the set-up as it is; no change brought %.0f%% more img/s\n",
		       100 * (ADVISE_GAIN - 1));
	else
		printf("\nadvice: %s: %.1f img/s, %.2fx the baseline's %.1f\n", best->change, best->r.img_s,
		       best->r.img_s / b->img_s, b->img_s);

	json_t *res = result_new("advise", argc, argv), *trials = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(trials, trial_json(&t[i], b->img_s));
	json_object_set_new(res, "settings", json_pack("{s:s, s:i, s:o, s:i, s:i}", "model", base.model,
			    "batch", base.batch, "data", result_string(data), "workers", base.workers, "steps", base.steps));
	json_object_set_new(res, "measurements", json_pack("{s:o, s:s, s:o}", "trials", trials, "best",
			    best->change, "best_img_s", result_real(best->r.img_s)));
	char path[4096];
	rc = result_write(res, out, "advise", path, sizeof(path));
	if (rc == 0)
		printf("wrote %s\n", path);
	json_decref(res);
	return rc;
}
