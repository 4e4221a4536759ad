/* gpuperf scale: data-parallel training at several GPU counts (1, 2, 4, 8 ranks, one
 * GPU each), each a `train` run of its own started as --nproc would start it, and the
 * scaling report: img/s in total and per GPU, efficiency against N x one GPU, step
 * time, the gradient all-reduce timed alone and how much of it backward hides, and
 * the slowest rank. With --data DIR every rank reads its shard through the loader
 * (--workers, --decode), and the table says how long the step waited for data. Result scale.json, table, chart scaling.png (and scaling.csv with
 * --csv). With --torch, PyTorch DDP (tools/torch_ddp.py under torchrun) runs right
 * after each count on the same settings, and its img/s stands beside gpuperf's. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/dp.h"
#include "cmd/launch.h"
#include "cmd/train_json.h"
#include "cmd/yardstick.h"
#include "core/error.h"
#include "core/names.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "nn/models.h"
#include "report/mfu.h"
#include "report/plots.h"
#include "report/result.h"
#include "report/scale_report.h"
#include "report/table.h"
#include "train/trainer.h"

static const char *const nccl_transport_names[] = { "auto", "socket" };

static const char *nccl_transport_at(int i)
{
	return i >= 0 && i < 2 ? nccl_transport_names[i] : NULL;
}

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
	json_t *dw = json_object_get(m, "data_wait_pct");
	row->data_wait_pct = json_is_number(dw) ? json_number_value(dw) : -1;
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

/* --torch: tools/torch_ddp.py under torchrun (python3 -m torch.distributed.run, the
 * module torchrun starts, so that it is the python3 the probe found) at each count. */
struct scale_torch_run {
	int on;          /* --torch, and it can run here */
	char why[256];   /* why it cannot */
	char script[4096], version[64], nproc[16];
	char *argv[40];  /* the count is argv[NPROC_AT] */
	int argc;
	const char *env[4];
	char args[6][32];
};
#define NPROC_AT 5

/* Decide whether the yardstick runs, and its command line: the model, precision,
 * batch per GPU, size, steps (the same warm-up: 10% of them, at most 10, as train),
 * bucket size and --sync-bn of gpuperf's own runs. The same checks as bench --torch,
 * in the same order: the device, then python3 and torch, then the script. */
static void scale_torch_plan(struct scale_torch_run *t, int cuda, const char *model,
			     const char *precision, int batch, int size, int steps, int bucket_mb,
			     int sync_bn, int nccl_socket)
{
	if (!cuda)
		snprintf(t->why, sizeof(t->why), "tools/torch_ddp.py runs on CUDA GPUs only, not with --device cpu");
	else if (!strcmp(model, "simple_cnn"))
		snprintf(t->why, sizeof(t->why), "torchvision has no simple_cnn");
	else if (yardstick_usable(t->why, sizeof(t->why))) {
		t->on = yardstick_find("torch_ddp.py", t->script, sizeof(t->script));
		if (!t->on)
			snprintf(t->why, sizeof(t->why), "tools/torch_ddp.py was not found");
	}
	if (!t->on)
		return;
	int warmup = steps / 10 < 10 ? steps / 10 : 10;
	if (warmup >= steps)
		warmup = steps - 1;
	snprintf(t->args[0], sizeof(t->args[0]), "%d", batch);
	snprintf(t->args[1], sizeof(t->args[1]), "%d", steps - warmup);
	snprintf(t->args[2], sizeof(t->args[2]), "%d", warmup);
	snprintf(t->args[3], sizeof(t->args[3]), "%d", size);
	snprintf(t->args[4], sizeof(t->args[4]), "%d", bucket_mb);
	char **v = t->argv;
	int n = 0;
	v[n++] = (char *)"python3";
	v[n++] = (char *)"-m";
	v[n++] = (char *)"torch.distributed.run";
	v[n++] = (char *)"--standalone";
	v[n++] = (char *)"--nproc-per-node";
	v[n++] = t->nproc;
	v[n++] = t->script;
	v[n++] = (char *)"--model";
	v[n++] = (char *)model;
	v[n++] = (char *)"--precision";
	v[n++] = (char *)precision;
	v[n++] = (char *)"--batch";
	v[n++] = t->args[0];
	v[n++] = (char *)"--steps";
	v[n++] = t->args[1];
	v[n++] = (char *)"--warmup";
	v[n++] = t->args[2];
	if (size) {
		v[n++] = (char *)"--size";
		v[n++] = t->args[3];
	}
	if (bucket_mb) {
		v[n++] = (char *)"--bucket-mb";
		v[n++] = t->args[4];
	}
	if (sync_bn)
		v[n++] = (char *)"--sync-bn";
	v[n] = NULL;
	t->argc = n;
	/* never NVLink SHARP (NVLS): these machines keep multicast off; with --transport
	 * socket PyTorch's NCCL takes the same path as gpuperf's ranks */
	int e = 0;
	t->env[e++] = "NCCL_NVLS_ENABLE=0";
	if (nccl_socket) {
		t->env[e++] = "NCCL_P2P_DISABLE=1";
		t->env[e++] = "NCCL_SHM_DISABLE=1";
	}
	t->env[e] = NULL;
}

/* The command as a string, "N" for the count: what scale.json records. */
static void scale_torch_command(const struct scale_torch_run *t, char *buf, size_t cap)
{
	buf[0] = 0;
	for (int i = 0; t->env[i]; i++)
		snprintf(buf + strlen(buf), cap - strlen(buf), "%s ", t->env[i]);
	for (int i = 0; i < t->argc; i++)
		snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? " " : "",
			 i == NPROC_AT ? "N" : t->argv[i]);
}

/* PyTorch DDP at n GPUs into dir/gpus_<n>/torch.jsonl (its log beside); allowed 4x
 * the time gpuperf's run at that count took, and at least 2 minutes (PyTorch's import,
 * cuDNN's benchmark and NCCL's set-up come first). A failure is the row's note. */
static int scale_torch_one(struct scale_torch_run *t, int n, const char *dir, double gp_seconds,
			   struct scale_torch *row)
{
	char out[4300], log[4300];
	snprintf(t->nproc, sizeof(t->nproc), "%d", n);
	snprintf(out, sizeof(out), "%s/gpus_%d/torch.jsonl", dir, n);
	snprintf(log, sizeof(log), "%s/gpus_%d/torch_log.txt", dir, n);
	int fd_out = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int fd_log = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd_out < 0 || fd_log < 0) {
		if (fd_out >= 0)
			close(fd_out);
		if (fd_log >= 0)
			close(fd_log);
		return gp_error(GP_EIO, "cannot write in '%s/gpus_%d'", dir, n);
	}
	struct child_run c = {
		.argv = t->argv, .env = t->env, .fd_out = fd_out, .fd_log = fd_log,
		.limit_s = 4 * gp_seconds > 120 ? 4 * gp_seconds : 120,
	};
	int rc = child_run(&c);
	close(fd_out);
	close(fd_log);
	if (rc < 0)
		return rc;
	memset(row, 0, sizeof(*row));
	row->state = SCALE_TORCH_FAILED;
	if (c.killed) {
		snprintf(row->note, sizeof(row->note), "stopped after %.0f s", c.limit_s);
	} else if (!child_run_ok(&c)) {
		char last[200];
		yardstick_error_line(log, last, sizeof(last));
		if (*last)
			snprintf(row->note, sizeof(row->note), "%s", last);
		else
			snprintf(row->note, sizeof(row->note), "torchrun exited with status %d",
				 WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1);
	} else {
		scale_torch_read(out, n, row, t->version, sizeof(t->version));
	}
	return 0;
}

int cmd_scale(int argc, char **argv)
{
	const char *model = "resnet50", *device = "auto", *precision = NULL, *out = NULL;
	const char *transport = "auto", *layout = NULL, *data = "synthetic", *decode = "cpu";
	int csv = 0, batch = 256, steps = 60, help = 0, json = 0, overwrite = 0, sync_bn = 0, size = 0;
	int bucket_mb = 0, torch = 0, workers = -1;
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
		OPT_DATA(&data, "synthetic (one fixed batch, the default) | DIR (ImageFolder) | cifar10:DIR: "
			 "each rank reads its shard, and the table gives the step's data wait"),
		OPT_WORKERS(&workers, "data-loader threads per rank with --data (4)"),
		OPT_DECODE(&decode, "where each rank decodes JPEGs with --data DIR: cpu (its loader "
			   "threads) | gpu (its GPU's nvJPEG) | auto (cpu over several ranks)"),
		{ "torch", OPT_FLAG, &torch, "after each count, PyTorch DDP (tools/torch_ddp.py under torchrun) "
		  "on the same settings, its img/s and the ratio beside (needs python3, torch and GPUs)", 0 },
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
				"[--batch 256] [--transport auto|socket] [--torch]", opts);
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
	/* the data, checked here so that a bad one is one line before any run */
	int synthetic = !strcmp(data, "synthetic");
	if (synthetic && workers >= 0)
		return gp_error(GP_EINVAL, "--workers needs --data DIR or cifar10:DIR");
	enum decode_mode dmode = DECODE_CPU;
	GP_TRY(args_decode_pick(decode, args_data_is_files(data) && backend == BACKEND_CUDA, "scale",
				&dmode));
	if (!synthetic) {
		struct dataset *ds = NULL;
		GP_TRY(dataset_open(data, 1, size ? size : model_defaults(model).size, &ds));
		dataset_close(ds);
	}
	char dir[4096];
	GP_TRY(result_dir_prepare("scale", "scale", out, overwrite, dir, sizeof(dir)));
	if (nccl_socket) {
		/* NCCL reads these when the ranks make their communicators */
		setenv("NCCL_P2P_DISABLE", "1", 1);
		setenv("NCCL_SHM_DISABLE", "1", 1);
	}
	char b_s[16], st_s[16], sz_s[16], bm_s[16], w_s[16];
	snprintf(w_s, sizeof(w_s), "%d", workers >= 0 ? workers : 4);
	snprintf(b_s, sizeof(b_s), "%d", batch);
	snprintf(st_s, sizeof(st_s), "%d", steps);
	snprintf(sz_s, sizeof(sz_s), "%d", size);
	snprintf(bm_s, sizeof(bm_s), "%d", bucket_mb);
	char *targv[32];
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
	if (overwrite) /* the runs of an earlier scale in this folder are replaced too */
		targv[targc++] = (char *)"--overwrite";
	if (!synthetic) {
		targv[targc++] = (char *)"--data";
		targv[targc++] = (char *)data;
		targv[targc++] = (char *)"--workers";
		targv[targc++] = w_s;
		targv[targc++] = (char *)"--decode";
		targv[targc++] = (char *)decode_mode_name_at((int)dmode);
	}
	targv[targc] = NULL;

	static struct scale_torch_run tr;
	memset(&tr, 0, sizeof(tr));
	if (torch) {
		scale_torch_plan(&tr, backend == BACKEND_CUDA, model, precision, batch, size, steps,
				 bucket_mb, sync_bn, nccl_socket);
		if (!tr.on)
			printf("PyTorch DDP yardstick skipped: %s\n", tr.why);
	}
	struct scale_row rows[ARGS_LIST_MAX] = { 0 };
	int rc = 0, done = 0;
	printf("scale: %s %s, batch %d per GPU, GPU counts", model, precision, batch);
	for (int i = 0; i < g.n; i++)
		printf(" %d", g.v[i]);
	printf("%s%s\n", nccl_socket ? " (NCCL over sockets)" : "", tr.on ? ", PyTorch DDP after each" : "");
	fflush(stdout);
	for (int i = 0; i < g.n && rc == 0; i++) {
		printf("  %d GPU%s ...\n", g.v[i], g.v[i] == 1 ? "" : "s");
		fflush(stdout);
		double t0 = gp_now_s();
		rc = scale_one(g.v[i], targv, targc, dir, &rows[i]);
		if (rc < 0)
			break;
		if (synthetic)
			rows[i].data_wait_pct = -1;
		done++;
		if (!tr.on)
			continue;
		printf("  %d GPU%s, PyTorch DDP ...\n", g.v[i], g.v[i] == 1 ? "" : "s");
		fflush(stdout);
		if ((rc = scale_torch_one(&tr, g.v[i], dir, gp_now_s() - t0, &rows[i].torch)) < 0)
			break;
		if (rows[i].torch.state == SCALE_TORCH_OK)
			printf("  %d GPU%s: gpuperf %.1f img/s, PyTorch DDP %.1f img/s\n", g.v[i],
			       g.v[i] == 1 ? "" : "s", rows[i].img_s, rows[i].torch.img_s);
		else
			printf("  PyTorch DDP at %d GPU%s failed: %s\n", g.v[i], g.v[i] == 1 ? "" : "s",
			       rows[i].torch.note);
	}
	if (done == 0) {
		result_run_dir_abandon();
		return rc;
	}
	char late[1024] = "";
	if (rc < 0)
		snprintf(late, sizeof(late), "%s", gp_errmsg());
	int on_gpu = backend == BACKEND_CUDA;
	scale_rows_derive(rows, done);
	struct table t;
	table_init(&t);
	int rc_w = scale_table_fill(&t, rows, done, on_gpu, tr.on, !synthetic);
	json_t *arr = rc_w == 0 ? scale_runs_json(rows, done, tr.on) : NULL;
	json_t *res = arr ? result_new("scale", argc, argv) : NULL;
	if (rc_w == 0 && !res) {
		json_decref(arr);
		rc_w = gp_error(GP_ENOMEM, "no memory for the scale result");
	}
	char path[4096] = "", csv_path[4200] = "", cmd[2048], summary[512];
	if (rc_w == 0) {
		table_print(&t, stdout);
		json_object_set_new(res, "settings", json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:b, s:i, s:b, s:s, s:o, s:o}",
				    "model", model, "device", train_device_name(backend), "precision", precision,
				    "batch_per_gpu", batch, "steps", steps, "nccl_transport", transport,
				    "sync_bn", sync_bn, "bucket_mb", bucket_mb ? bucket_mb : 25, "torch", torch,
				    "data", data, "workers", synthetic ? json_null() : json_integer(workers >= 0 ? workers : 4),
				    "decode", synthetic ? json_null() : json_string(decode_mode_name_at((int)dmode))));
		json_t *gpu = train_gpu_json(backend, 0);
		if (gpu)
			result_set_gpu(res, gpu);
		json_t *m = json_pack("{s:o}", "runs", arr);
		if (torch && tr.on) {
			scale_torch_command(&tr, cmd, sizeof(cmd));
			json_object_set_new(m, "pytorch", json_pack("{s:s, s:o, s:s, s:s}", "status", "ran",
					    "torch", *tr.version ? json_string(tr.version) : json_null(),
					    "script", tr.script, "command", cmd));
		} else if (torch) {
			json_object_set_new(m, "pytorch", json_pack("{s:s, s:s}", "status", "skipped",
								  "note", tr.why));
		}
		json_object_set_new(res, "measurements", m);
		rc_w = result_write(res, dir, "scale", path, sizeof(path));
	}
	if (rc_w == 0)
		rc_w = plots_draw(res, dir);
	if (rc_w == 0 && csv)
		rc_w = table_write_csv_in(&t, dir, "scaling.csv", csv_path, sizeof(csv_path));
	if (rc_w == 0 && json) {
		char *js = json_dumps(json_object_get(res, "measurements"), JSON_INDENT(2));
		if (js)
			printf("%s\n", js);
		free(js);
	}
	if (rc_w == 0) {
		scale_summary(rows, done, summary, sizeof(summary));
		printf("%s\nwrote %s and %s/%s\n", summary, path, dir, plots_chart_name("scale"));
		if (csv)
			printf("wrote %s\n", csv_path);
	}
	json_decref(res);
	table_free(&t);
	for (int i = 0; i < done; i++)
		json_decref(rows[i].train);
	if (rc_w < 0)
		return rc_w;
	return rc < 0 ? gp_error(rc, "%s", late) : 0;
}
