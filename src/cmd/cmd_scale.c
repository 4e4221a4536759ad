/* gpuperf scale: data-parallel training at several GPU counts (1, 2, 4, 8 ranks, one
 * GPU each), each a `train` run of its own started as --nproc would start it, and the
 * scaling report: img/s in total and per GPU, efficiency against N x one GPU, step
 * time, the gradient all-reduce timed alone and how much of it backward hides, and
 * the slowest rank. Result scale.json, table, chart scaling.png (and scaling.csv with
 * --csv). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/dp.h"
#include "cmd/launch.h"
#include "cmd/train_json.h"
#include "core/error.h"
#include "core/names.h"
#include "nn/models.h"
#include "report/chart.h"
#include "report/mfu.h"
#include "report/result.h"
#include "report/table.h"
#include "train/trainer.h"

static const char *const nccl_transport_names[] = { "auto", "socket" };

static const char *nccl_transport_at(int i)
{
	return i >= 0 && i < 2 ? nccl_transport_names[i] : NULL;
}

struct scale_row {
	int gpus;
	double img_s, img_s_per_gpu, ms_per_step, efficiency;
	double allreduce_ms, exposed_ms, hidden_pct; /* hidden_pct < 0: not known */
	int slowest_rank;
	double slowest_ms, fastest_ms;
	json_t *train; /* the run's measurements */
	struct mfu mfu; /* their model FLOPs figures (all ranks together) */
};

/* One GPU count: `train` with n ranks into dir/gpus_<n>, then its measurements. */
static int scale_one(int n, char **train_argv, int train_argc, const char *dir, struct scale_row *row)
{
	char sub[4200], path[4300];
	snprintf(sub, sizeof(sub), "%s/gpus_%d", dir, n);
	GP_TRY(path_mkdirs(sub));
	char **v = malloc(sizeof(char *) * ((size_t)train_argc + 3));
	if (!v)
		return gp_error(GP_ENOMEM, "out of memory");
	memcpy(v, train_argv, sizeof(char *) * (size_t)train_argc);
	v[train_argc] = (char *)"--out";
	v[train_argc + 1] = sub;
	v[train_argc + 2] = NULL;
	int rc = launch_local(n, train_argc + 2, v, &(struct launch_opts){ 0 });
	free(v);
	if (rc < 0)
		return gp_error(rc, "%d GPU%s: %s", n, n == 1 ? "" : "s", gp_errmsg());
	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/train.json", sub);
	GP_TRY(result_read(path, &res));
	json_t *m = json_object_get(res, "measurements");
	if (!json_is_object(m)) {
		json_decref(res);
		return gp_error(GP_EFORMAT, "%s: no measurements", path);
	}
	row->gpus = n;
	row->img_s = json_number_value(json_object_get(m, "img_s"));
	row->ms_per_step = json_number_value(json_object_get(m, "ms_per_step"));
	row->img_s_per_gpu = row->img_s / n;
	row->allreduce_ms = json_number_value(json_object_get(m, "allreduce_ms"));
	row->slowest_rank = (int)json_integer_value(json_object_get(m, "slowest_rank"));
	json_t *ranks = json_object_get(m, "rank_ms_per_step");
	row->slowest_ms = row->fastest_ms = row->ms_per_step;
	for (size_t k = 0; k < json_array_size(ranks); k++) {
		double v2 = json_number_value(json_array_get(ranks, k));
		row->fastest_ms = v2 < row->fastest_ms ? v2 : row->fastest_ms;
		row->slowest_ms = v2 > row->slowest_ms ? v2 : row->slowest_ms;
	}
	mfu_from_json(&row->mfu, m);
	row->train = json_incref(m);
	json_decref(res);
	return 0;
}

static int scale_chart(const struct scale_row *rows, int n, const char *path, const char *title,
		       const char *x_label)
{
	struct chart_figure *fig = chart_figure_new(1, 2, 0, 0, title);
	if (!fig)
		return gp_error(GP_ENOMEM, "cannot make the chart");
	double x[ARGS_LIST_MAX], img[ARGS_LIST_MAX], ideal[ARGS_LIST_MAX], eff[ARGS_LIST_MAX];
	for (int i = 0; i < n; i++) {
		x[i] = rows[i].gpus;
		img[i] = rows[i].img_s;
		ideal[i] = rows[0].img_s * rows[i].gpus;
		eff[i] = 100 * rows[i].efficiency;
	}
	struct chart_panel *p = chart_figure_panel(fig, 0);
	chart_panel_set_title(p, "throughput");
	chart_panel_set_labels(p, x_label, "img/s (all ranks)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	chart_panel_add_line(p, x, ideal, n, (struct chart_line_style){ CHART_GREY, 0, 1, 0 }, "ideal (N x 1 GPU)");
	chart_panel_add_line(p, x, img, n, (struct chart_line_style){ CHART_BLUE, 0, 0, 1 }, "measured");
	p = chart_figure_panel(fig, 1);
	chart_panel_set_title(p, "scaling efficiency");
	chart_panel_set_labels(p, x_label, "efficiency (%)");
	chart_panel_set_x_scale(p, CHART_LOG2);
	double lo = 100;
	for (int i = 0; i < n; i++)
		lo = eff[i] < lo ? eff[i] : lo;
	chart_panel_set_y_range(p, lo < 85 ? floor((lo - 5) / 10) * 10 : 80, 102);
	chart_panel_add_hline(p, 100, CHART_GREY, 1, "ideal");
	chart_panel_add_line(p, x, eff, n, (struct chart_line_style){ CHART_ORANGE, 0, 0, 1 }, "measured");
	int rc = chart_figure_save(fig, path);
	chart_figure_free(fig);
	return rc;
}

int cmd_scale(int argc, char **argv)
{
	const char *model = "resnet50", *device = "auto", *precision = NULL, *out = NULL;
	const char *transport = "auto", *layout = NULL;
	int csv = 0, batch = 256, steps = 60, help = 0, json = 0, overwrite = 0, sync_bn = 0, size = 0;
	int bucket_mb = 0;
	struct int_list gpus = { 0 };
	struct opt opts[] = {
		OPT_MODEL(&model, "(resnet50)"),
		OPT_DEVICE(&device),
		OPT_PRECISION(&precision, "(bf16 on the GPU; the CPU computes in fp32)"),
		OPT_LAYOUT(&layout, "(GPU activations; default nhwc under fp16/bf16)"),
		OPT_BATCH(&batch, "batch size per GPU (256)"),
		OPT_SIZE(&size),
		OPT_STEPS(&steps, "training steps per GPU count (60; the first 10% are warm-up)"),
		{ "gpus", OPT_INT_LIST, &gpus, "GPU counts to run (1,2,4,8 up to the GPUs there are; 1 is always run)", 1, ARGS_MAX_RANKS },
		{ "transport", OPT_STR, &transport, "NCCL's path between GPUs: auto, or socket (no P2P or shared memory: rehearses a run across hosts)", .choices = nccl_transport_at },
		{ "sync-bn", OPT_FLAG, &sync_bn, "batch-norm statistics over every rank (SyncBatchNorm)", 0 },
		{ "bucket-mb", OPT_INT, &bucket_mb, "gradient all-reduce bucket size in MiB (25, as DDP)", 1, 1024 },
		OPT_OUT(&out, "scale.json, scaling.png and one train run per GPU count", "scale"),
		OPT_OVERWRITE(&overwrite, "scale.json"),
		OPT_CSV(&csv, "the table (scaling.csv)"),
		OPT_JSON(&json, "print the JSON summary"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf scale [--model resnet50] [--precision bf16] [--gpus 1,2,4,8] "
				"[--batch 256] [--transport auto|socket]", opts);
		return 0;
	}
	enum backend_kind backend;
	enum precision prec;
	enum layout lay;
	GP_TRY(model_name_check(model));
	GP_TRY(train_pick_device(device, &backend, 0));
	if (!precision)
		precision = backend == BACKEND_CUDA ? "bf16" : "fp32";
	GP_TRY(train_parse_precision(precision, &prec));
	if (backend == BACKEND_CPU && prec != PREC_FP32)
		return gp_error(GP_EINVAL, "--precision %s needs the CUDA backend", precision);
	GP_TRY(train_parse_layout(layout, &lay));
	if (cmd_dist_launched())
		return gp_error(GP_EINVAL, "scale starts its own ranks: run it alone, not under a launcher");
	int have = 0;
	if (backend == BACKEND_CUDA) {
		have = cmd_dist_gpu_count();
	} else {
		have = 8; /* CPU ranks: processes on this machine */
	}
	/* the GPU counts: given, or powers of two up to what there is; 1 first, always */
	struct int_list g = { .n = 1, .v = { 1 } };
	if (gpus.n) {
		for (int i = 0; i < gpus.n; i++) {
			if (gpus.v[i] > have && backend == BACKEND_CUDA)
				return gp_error(GP_ENODEV, "--gpus %d: this machine has %d GPU%s", gpus.v[i],
						have, have == 1 ? "" : "s");
			int dup = 0;
			for (int k = 0; k < g.n; k++)
				dup |= g.v[k] == gpus.v[i];
			if (!dup)
				g.v[g.n++] = gpus.v[i];
		}
	} else {
		for (int n = 2; n <= have && n <= 8; n *= 2)
			g.v[g.n++] = n;
	}
	for (int i = 1; i < g.n; i++) /* ascending */
		for (int k = i; k > 0 && g.v[k] < g.v[k - 1]; k--) {
			int t = g.v[k];
			g.v[k] = g.v[k - 1];
			g.v[k - 1] = t;
		}
	int nccl_socket = !strcmp(transport, "socket");
	if (nccl_socket && backend != BACKEND_CUDA)
		return gp_error(GP_EINVAL, "--transport socket is NCCL's: it needs --device cuda");
	char dir[4096];
	GP_TRY(result_dir_prepare("scale", "scale", out, overwrite, dir, sizeof(dir)));
	if (nccl_socket) {
		/* NCCL reads these when the ranks make their communicators */
		setenv("NCCL_P2P_DISABLE", "1", 1);
		setenv("NCCL_SHM_DISABLE", "1", 1);
	}
	char b_s[16], st_s[16], sz_s[16], bm_s[16];
	snprintf(b_s, sizeof(b_s), "%d", batch);
	snprintf(st_s, sizeof(st_s), "%d", steps);
	snprintf(sz_s, sizeof(sz_s), "%d", size);
	snprintf(bm_s, sizeof(bm_s), "%d", bucket_mb);
	char *targv[24];
	int targc = 0;
	targv[targc++] = (char *)"train";
	targv[targc++] = (char *)"--model";
	targv[targc++] = (char *)model;
	targv[targc++] = (char *)"--device";
	targv[targc++] = (char *)train_device_name(backend);
	targv[targc++] = (char *)"--batch";
	targv[targc++] = b_s;
	targv[targc++] = (char *)"--steps";
	targv[targc++] = st_s;
	targv[targc++] = (char *)"--log-every"; /* the first and the last step */
	targv[targc++] = st_s;
	if (backend == BACKEND_CUDA) {
		targv[targc++] = (char *)"--precision";
		targv[targc++] = (char *)precision;
		if (layout) {
			targv[targc++] = (char *)"--layout";
			targv[targc++] = (char *)layout;
		}
	}
	if (size) {
		targv[targc++] = (char *)"--size";
		targv[targc++] = sz_s;
	}
	if (sync_bn)
		targv[targc++] = (char *)"--sync-bn";
	if (bucket_mb) {
		targv[targc++] = (char *)"--bucket-mb";
		targv[targc++] = bm_s;
	}
	targv[targc] = NULL;

	struct scale_row rows[ARGS_LIST_MAX] = { 0 };
	int rc = 0, done = 0;
	printf("scale: %s %s, batch %d per GPU, GPU counts", model, precision, batch);
	for (int i = 0; i < g.n; i++)
		printf(" %d", g.v[i]);
	printf("%s\n", nccl_socket ? " (NCCL over sockets)" : "");
	fflush(stdout);
	for (int i = 0; i < g.n && rc == 0; i++) {
		printf("  %d GPU%s ...\n", g.v[i], g.v[i] == 1 ? "" : "s");
		fflush(stdout);
		rc = scale_one(g.v[i], targv, targc, dir, &rows[i]);
		if (rc == 0)
			done++;
	}
	if (done == 0) {
		result_run_dir_abandon();
		return rc;
	}
	char late[1024] = "";
	if (rc < 0)
		snprintf(late, sizeof(late), "%s", gp_errmsg());
	struct table t;
	table_init(&t);
	table_add_col(&t, "GPUs", TABLE_RIGHT);
	table_add_col(&t, "img/s", TABLE_RIGHT);
	table_add_col(&t, "img/s/GPU", TABLE_RIGHT);
	table_add_col(&t, "efficiency", TABLE_RIGHT);
	table_add_col(&t, "ms/step", TABLE_RIGHT);
	table_add_col(&t, "all-reduce ms", TABLE_RIGHT);
	table_add_col(&t, "hidden", TABLE_RIGHT);
	table_add_col(&t, "slowest rank", TABLE_RIGHT);
	table_add_col(&t, "TFLOP/s", TABLE_RIGHT);
	table_add_col(&t, "MFU", TABLE_RIGHT);
	table_add_col(&t, "J/img", TABLE_RIGHT);
	json_t *arr = json_array();
	for (int i = 0; i < done; i++) {
		struct scale_row *r = &rows[i];
		r->efficiency = r->img_s / (rows[0].img_s * r->gpus);
		r->exposed_ms = r->ms_per_step - rows[0].ms_per_step;
		if (r->exposed_ms < 0)
			r->exposed_ms = 0;
		r->hidden_pct = r->gpus > 1 && r->allreduce_ms > 0
					? 100 * (1 - fmin(r->exposed_ms, r->allreduce_ms) / r->allreduce_ms) : -1;
		char hidden[16] = "-", slow[48] = "-", ar[24] = "-";
		if (r->gpus > 1)
			snprintf(ar, sizeof(ar), "%.2f", r->allreduce_ms);
		if (r->hidden_pct >= 0)
			snprintf(hidden, sizeof(hidden), "%.0f%%", r->hidden_pct);
		if (r->gpus > 1)
			snprintf(slow, sizeof(slow), "%d (%.2f vs %.2f ms)", r->slowest_rank, r->slowest_ms,
				 r->fastest_ms);
		char mfu[32], joule[32];
		table_add_row(&t, "%d\t%.1f\t%.1f\t%.1f%%\t%.2f\t%s\t%s\t%s\t%.2f\t%s\t%s", r->gpus, r->img_s,
			      r->img_s_per_gpu, 100 * r->efficiency, r->ms_per_step,
			      ar, hidden, slow, r->mfu.tflops,
			      mfu_pct_str(&r->mfu, backend == BACKEND_CUDA, mfu, sizeof(mfu)),
			      mfu_energy_str(&r->mfu, joule, sizeof(joule)));
		json_t *o = json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:O}", "gpus", r->gpus,
				      "img_s", result_real(r->img_s), "img_s_per_gpu", result_real(r->img_s_per_gpu),
				      "efficiency", result_real(r->efficiency), "ms_per_step", result_real(r->ms_per_step),
				      "allreduce_ms", result_real(r->allreduce_ms),
				      "exposed_comm_ms", result_real(r->exposed_ms),
				      "allreduce_hidden_pct", r->hidden_pct >= 0 ? result_real(r->hidden_pct) : json_null(),
				      "slowest_rank", r->slowest_rank, "train", r->train);
		mfu_json_set(o, &r->mfu);
		json_array_append_new(arr, o);
	}
	table_print(&t, stdout);
	json_t *res = result_new("scale", argc, argv);
	json_object_set_new(res, "settings", json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:b, s:i}", "model", model,
			    "device", train_device_name(backend), "precision", precision, "batch_per_gpu", batch,
			    "steps", steps, "nccl_transport", transport, "sync_bn", sync_bn,
			    "bucket_mb", bucket_mb ? bucket_mb : 25));
	json_t *gpu = train_gpu_json(backend, 0);
	if (gpu)
		result_set_gpu(res, gpu);
	json_object_set_new(res, "measurements", json_pack("{s:o}", "runs", arr));
	char path[4096], png[4200], title[256], csv_path[4200] = "";
	int rc_w = result_write(res, dir, "scale", path, sizeof(path));
	if (rc_w == 0) {
		snprintf(png, sizeof(png), "%s/scaling.png", dir);
		snprintf(title, sizeof(title), "%s %s, batch %d per GPU", model, precision, batch);
		rc_w = scale_chart(rows, done, png, title,
				   backend == BACKEND_CUDA ? "GPUs" : "ranks (CPU processes)");
	}
	if (rc_w == 0 && csv)
		rc_w = table_write_csv_in(&t, dir, "scaling.csv", csv_path, sizeof(csv_path));
	if (rc_w == 0 && json) {
		char *s = json_dumps(json_object_get(res, "measurements"), JSON_INDENT(2));
		if (s)
			printf("%s\n", s);
		free(s);
	}
	if (rc_w == 0)
		printf("wrote %s and %s\n", path, png);
	if (rc_w == 0 && csv)
		printf("wrote %s\n", csv_path);
	json_decref(res);
	table_free(&t);
	for (int i = 0; i < done; i++)
		json_decref(rows[i].train);
	if (rc_w < 0)
		return rc_w;
	return rc < 0 ? gp_error(rc, "%s", late) : 0;
}
