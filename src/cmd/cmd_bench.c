/* gpuperf bench: the suite that fits this machine in one run folder. The
 * environment is read in this process; every other stage is gpuperf itself run again
 * (/proc/self/exe) with its own arguments and --out <run>/<stage>, so that a stage
 * that fails, runs out of memory or hangs past its limit is reported and the rest
 * go on. bench.json lists the stages and what became of them; report.html and
 * report.md are drawn from it and the stages' results (report/bench_report.c). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/yardstick.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/timeutil.h"
#include "core/version.h"
#include "gpu/devinfo.h"
#include "gpu/nvml.h"
#include "nn/models.h"
#include "report/bench_report.h"
#include "report/result.h"
#ifdef GP_HAVE_CUDA
#include <nccl.h>
#include "ops/cuda/device.h"
#endif

#ifndef GPUPERF_COMMIT
#define GPUPERF_COMMIT "unknown"
#endif

#define BENCH_USAGE "gpuperf bench [--quick] [--models m1,m2] [--data DIR] [--precisions P,..] " \
		    "[--torch] [--repeat N] [--device D] [--out DIR]"
#define BENCH_MAX_STAGES 24
#define BENCH_MAX_ARGS 40

/* What each stage runs, by machine and --quick. Budgets are the seconds a stage is
 * expected to take there (the progress line's time left; --quick on an H100 adds
 * up to under 3 minutes, docs/bench.md); a stage is stopped at 4x its budget, and
 * never before a minute. */
struct bench_sizes {
	const char *models;
	int size; /* 0: each model's own */
	int compare_batch, compare_steps;
	const char *amp_batches, *amp_precisions;
	int amp_steps;
	int maxbatch_mem_limit_mib, maxbatch_confirm, maxbatch_start;
	const char *workers_list;
	int workers_steps, workers_batch, train_steps, train_workers;
	int profile_batch, profile_steps;
	int torch_iters;
	int scale_steps; /* steps per GPU count of the scale stage (GPU only) */
	double b_info, b_compare, b_amp, b_maxbatch, b_workers, b_train, b_profile, b_torch;
	double b_scale; /* per GPU count */
	double b_scale_torch; /* more per GPU count with --torch: PyTorch DDP after gpuperf */
};

static const struct bench_sizes bench_gpu = {
	.models = "resnet50,resnet18,mobilenet_v2", .compare_batch = 64, .compare_steps = 100,
	.amp_batches = "64,128,256,512", .amp_precisions = "fp32,tf32,fp16,bf16", .amp_steps = 30,
	.maxbatch_confirm = 5, .maxbatch_start = 8,
	.workers_list = "0,2,4,8", .workers_steps = 100, .workers_batch = 64, .train_steps = 200,
	.train_workers = 8, .profile_batch = 64, .profile_steps = 20, .torch_iters = 30,
	.scale_steps = 60,
	.b_info = 3, .b_compare = 90, .b_amp = 240, .b_maxbatch = 180, .b_workers = 150,
	.b_train = 60, .b_profile = 60, .b_torch = 240, .b_scale = 40, .b_scale_torch = 50,
};
static const struct bench_sizes bench_gpu_quick = {
	.models = "resnet50,resnet18", .compare_batch = 64, .compare_steps = 30,
	.amp_batches = "128,256", .amp_precisions = "fp32,bf16", .amp_steps = 20,
	.maxbatch_confirm = 2, .maxbatch_start = 64,
	.workers_list = "0,8", .workers_steps = 30, .workers_batch = 64, .train_steps = 50,
	.train_workers = 8, .profile_batch = 64, .profile_steps = 10, .torch_iters = 10,
	.scale_steps = 30,
	.b_info = 3, .b_compare = 25, .b_amp = 50, .b_maxbatch = 45, .b_workers = 20,
	.b_train = 10, .b_profile = 20, .b_torch = 110, .b_scale = 20, .b_scale_torch = 35,
};
static const struct bench_sizes bench_cpu = {
	.models = "simple_cnn,mobilenet_v2", .size = 32, .compare_batch = 16, .compare_steps = 20,
	.amp_batches = "8,16,32", .amp_precisions = "fp32", .amp_steps = 10,
	.maxbatch_mem_limit_mib = 64, .maxbatch_confirm = 2, .maxbatch_start = 8,
	.workers_list = "0,2", .workers_steps = 10, .workers_batch = 16, .train_steps = 20,
	.train_workers = 2, .profile_batch = 8, .profile_steps = 5,
	.b_info = 1, .b_compare = 10, .b_amp = 10, .b_maxbatch = 10, .b_workers = 20,
	.b_train = 10, .b_profile = 5,
};
static const struct bench_sizes bench_cpu_quick = {
	.models = "simple_cnn", .size = 32, .compare_batch = 8, .compare_steps = 5,
	.amp_batches = "8,16", .amp_precisions = "fp32", .amp_steps = 5,
	.maxbatch_mem_limit_mib = 32, .maxbatch_confirm = 1, .maxbatch_start = 8,
	.workers_list = "0,2", .workers_steps = 5, .workers_batch = 8, .train_steps = 10,
	.train_workers = 2, .profile_batch = 8, .profile_steps = 3,
	.b_info = 1, .b_compare = 3, .b_amp = 3, .b_maxbatch = 5, .b_workers = 10,
	.b_train = 5, .b_profile = 3,
};

struct bench_stage {
	char name[48];
	char *argv[BENCH_MAX_ARGS + 1];
	int argc;
	double budget_s;
	char result[128];     /* the result it writes, relative to the run folder */
	int stdout_is_result; /* info: its stdout is the JSON */
	int torch;            /* python3 with the yardstick, not gpuperf */
	/* after running */
	const char *status;   /* "ok", "failed", "skipped" */
	double seconds;
	char note[512];
};

struct bench {
	struct bench_stage st[BENCH_MAX_STAGES];
	int n;
	char dir[4096];
	int cuda, quick, tty;
	json_t *env;
	char torch_script[4096];
};

static int stage_arg(struct bench_stage *s, const char *fmt, ...) GP_PRINTF(2, 3);
static int stage_arg(struct bench_stage *s, const char *fmt, ...)
{
	va_list ap;
	char buf[4096];
	if (s->argc >= BENCH_MAX_ARGS)
		return gp_error(GP_EINVAL, "stage %s: too many arguments", s->name);
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(buf))
		return gp_error(GP_EINVAL, "stage %s: argument too long", s->name);
	if (!(s->argv[s->argc] = strdup(buf)))
		return gp_error(GP_ENOMEM, "no memory for an argument");
	s->argc++;
	return 0;
}

static struct bench_stage *stage_new(struct bench *b, const char *name, double budget_s,
				     const char *result)
{
	if (b->n >= BENCH_MAX_STAGES)
		return NULL;
	struct bench_stage *s = &b->st[b->n++];
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->result, sizeof(s->result), "%s/%s", name, result);
	s->budget_s = budget_s;
	s->status = "pending";
	return s;
}

static void bench_free(struct bench *b)
{
	for (int i = 0; i < b->n; i++)
		for (int k = 0; k < b->st[i].argc; k++)
			free(b->st[i].argv[k]);
	json_decref(b->env);
}

/* The common tail of a gpuperf stage: its device and its folder. */
static int stage_out(struct bench *b, struct bench_stage *s, const char *device)
{
	if (device)
		GP_TRY(stage_arg(s, "--device=%s", device));
	return stage_arg(s, "--out=%s/%s", b->dir, s->name);
}

/* The models' names one by one from "a,b,c", each checked. */
static int models_split(const char *list, char names[][32], int *n)
{
	*n = 0;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		if (len >= 32)
			return gp_error(GP_EINVAL, "--models: '%.*s' is not a model", (int)len, p);
		if (len) {
			if (*n >= 8)
				return gp_error(GP_EINVAL, "--models: at most 8 models");
			memcpy(names[*n], p, len);
			names[*n][len] = 0;
			GP_TRY(model_name_check(names[*n]));
			(*n)++;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	if (*n == 0)
		return gp_error(GP_EINVAL, "--models: no model named");
	return 0;
}

/* PyTorch's names for gpuperf's precisions: the 16-bit ones channels-last, as amp
 * runs them in NHWC. */
static const char *torch_mode(const char *precision)
{
	return !strcmp(precision, "fp16") ? "amp_fp16_cl" : !strcmp(precision, "bf16") ? "amp_bf16_cl"
	       : precision;
}

static int bench_plan(struct bench *b, const struct bench_sizes *z, const char *models_opt,
		      const char *precisions, const char *data, int torch, const char *device,
		      int repeat, int gpus)
{
	char models[8][32], list[512], size_arg[32] = "";
	int n_models;
	struct bench_stage *s;
	GP_TRY(models_split(models_opt ? models_opt : z->models, models, &n_models));
	list[0] = 0;
	for (int i = 0; i < n_models; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "", models[i]);
	if (z->size)
		snprintf(size_arg, sizeof(size_arg), "--size=%d", z->size);
	const char *amp_model = models[0];
	const char *mb_model = models[0];
	for (int i = 0; i < n_models; i++)
		if (!strcmp(models[i], "mobilenet_v2"))
			mb_model = models[i];

#define ARG(...) GP_TRY(stage_arg(s, __VA_ARGS__))
#define NEW(name, budget, result)                                                  \
	do {                                                                       \
		if (!(s = stage_new(b, name, budget, result)))                     \
			return gp_error(GP_EINVAL, "more than %d stages", BENCH_MAX_STAGES); \
		ARG("gpuperf");                                                    \
	} while (0)

	for (int i = 0; i < n_models; i++) {
		char name[48];
		snprintf(name, sizeof(name), "info_%.31s", models[i]);
		NEW(name, z->b_info, "info.json");
		ARG("info");
		ARG("--model=%s", models[i]);
		ARG("--batch=%d", z->compare_batch);
		if (*size_arg)
			ARG("%s", size_arg);
		ARG("--json");
		s->stdout_is_result = 1;
	}
	NEW("compare", z->b_compare * n_models / 2.0 * repeat, "compare.json");
	ARG("compare");
	if (repeat > 1)
		ARG("--repeat=%d", repeat);
	ARG("--models=%s", list);
	ARG("--batch=%d", z->compare_batch);
	ARG("--steps=%d", z->compare_steps);
	if (*size_arg)
		ARG("%s", size_arg);
	GP_TRY(stage_out(b, s, device));

	NEW("amp", z->b_amp * repeat, "amp.json");
	ARG("amp");
	if (repeat > 1)
		ARG("--repeat=%d", repeat);
	ARG("--model=%s", amp_model);
	ARG("--batches=%s", z->amp_batches);
	ARG("--precisions=%s", precisions ? precisions : z->amp_precisions);
	ARG("--steps=%d", z->amp_steps);
	if (*size_arg)
		ARG("%s", size_arg);
	GP_TRY(stage_out(b, s, device));

	NEW("maxbatch", z->b_maxbatch, "maxbatch.json");
	ARG("maxbatch");
	ARG("--model=%s", mb_model);
	ARG("--confirm-steps=%d", z->maxbatch_confirm);
	ARG("--start=%d", z->maxbatch_start);
	if (z->maxbatch_mem_limit_mib)
		ARG("--mem-limit-mib=%d", z->maxbatch_mem_limit_mib);
	if (*size_arg)
		ARG("%s", size_arg);
	GP_TRY(stage_out(b, s, device));

	if (data) {
		NEW("workers", z->b_workers, "workers.json");
		ARG("workers");
		ARG("--data=%s", data);
		ARG("--model=%s", mb_model);
		ARG("--workers=%s", z->workers_list);
		ARG("--steps=%d", z->workers_steps);
		ARG("--batch=%d", z->workers_batch);
		if (*size_arg)
			ARG("%s", size_arg);
		GP_TRY(stage_out(b, s, device));

		NEW("train", z->b_train, "train.json");
		ARG("train");
		ARG("--data=%s", data);
		ARG("--model=%s", mb_model);
		ARG("--workers=%d", z->train_workers);
		ARG("--steps=%d", z->train_steps);
		ARG("--batch=%d", z->workers_batch);
		if (*size_arg)
			ARG("%s", size_arg);
		GP_TRY(stage_out(b, s, device));
	}

	NEW("profile", z->b_profile, "result.json");
	ARG("profile");
	ARG("--model=%s", amp_model);
	ARG("--batch=%d", z->profile_batch);
	ARG("--steps=%d", z->profile_steps);
	if (*size_arg)
		ARG("%s", size_arg);
	GP_TRY(stage_out(b, s, device));

	/* data parallel over every GPU of the host: 1, 2, 4, ... and the count itself */
	if (b->cuda && gpus > 1) {
		char counts[64] = "1";
		int n_counts = 1;
		for (int g = 2; g < gpus; g *= 2, n_counts++)
			snprintf(counts + strlen(counts), sizeof(counts) - strlen(counts), ",%d", g);
		snprintf(counts + strlen(counts), sizeof(counts) - strlen(counts), ",%d", gpus);
		n_counts++;
		NEW("scale", (z->b_scale + (torch ? z->b_scale_torch : 0)) * n_counts, "scale.json");
		ARG("scale");
		ARG("--model=%s", amp_model);
		ARG("--gpus=%s", counts);
		ARG("--steps=%d", z->scale_steps);
		if (*size_arg)
			ARG("%s", size_arg);
		if (torch && strcmp(amp_model, "simple_cnn"))
			ARG("--torch"); /* PyTorch DDP after each count, the ratio beside */
		GP_TRY(stage_out(b, s, device));
	}

	if (torch) {
		/* the yardstick beside compare (fp32, its batch) and beside amp (each
		 * precision at amp's largest batch); torchvision has no simple_cnn */
		char tv[512] = "", amp_batch[16];
		for (int i = 0; i < n_models; i++)
			if (strcmp(models[i], "simple_cnn"))
				snprintf(tv + strlen(tv), sizeof(tv) - strlen(tv), "%s%s", *tv ? "," : "",
					 models[i]);
		const char *last = strrchr(z->amp_batches, ',');
		snprintf(amp_batch, sizeof(amp_batch), "%s", last ? last + 1 : z->amp_batches);
		NEW("torch_compare", z->b_torch / 2, "torch.json");
		s->torch = 1;
		ARG("train");
		ARG("--models=%s", *tv ? tv : "resnet18");
		ARG("--batch=%d", z->compare_batch);
		ARG("--modes=fp32");
		ARG("--iters=%d", z->torch_iters);
		if (z->size)
			ARG("--size=%d", z->size);
		NEW("torch_amp", z->b_torch / 2, "torch.json");
		s->torch = 1;
		ARG("train");
		ARG("--models=%s", strcmp(amp_model, "simple_cnn") ? amp_model : "resnet18");
		ARG("--batch=%s", amp_batch);
		char modes[128] = "";
		const char *p = precisions ? precisions : z->amp_precisions;
		while (*p) {
			char one[16];
			size_t len = strcspn(p, ",");
			snprintf(one, sizeof(one), "%.*s", (int)(len < 15 ? len : 15), p);
			if (*one)
				snprintf(modes + strlen(modes), sizeof(modes) - strlen(modes), "%s%s",
					 *modes ? "," : "", torch_mode(one));
			p += len;
			if (*p == ',')
				p++;
		}
		ARG("--modes=%s", modes);
		ARG("--iters=%d", z->torch_iters);
		if (z->size)
			ARG("--size=%d", z->size);
	}
#undef ARG
#undef NEW
	return 0;
}

/* "13.0" from 13000, "9.10.2" from cuDNN 9's 91002. */
static json_t *version_json(int v, int three)
{
	char buf[32];
	if (v <= 0)
		return json_null();
	if (three)
		snprintf(buf, sizeof(buf), "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
	else
		snprintf(buf, sizeof(buf), "%d.%d", v / 1000, v % 1000 / 10);
	return json_string(buf);
}

static void cpu_model(char *buf, size_t cap)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	snprintf(buf, cap, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (!strncmp(line, "model name", 10) && colon) {
			colon += 1 + (colon[1] == ' ');
			colon[strcspn(colon, "\n")] = 0;
			snprintf(buf, cap, "%s", colon);
			break;
		}
	}
	fclose(f);
}

/* The machine the bench ran on: GPU, driver and libraries, clocks and power limit
 * (NVML, where there is a driver), CPU, memory, gpuperf's version and commit. */
static json_t *bench_environment(void)
{
	struct gp_devinfo d;
	struct utsname u;
	char cpu[256], host[256] = "";
	devinfo_query(&d);
	cpu_model(cpu, sizeof(cpu));
	gethostname(host, sizeof(host) - 1);
	if (uname(&u) != 0)
		memset(&u, 0, sizeof(u));
	double mem_mib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / GP_MIB;
	json_t *env = json_pack("{s:s, s:s, s:s, s:{s:s, s:i}, s:o, s:s, s:b}",
		"gpuperf_version", GPUPERF_VERSION, "commit", GPUPERF_COMMIT, "host", host,
		"cpu", "model", cpu, "cores", (int)sysconf(_SC_NPROCESSORS_ONLN),
		"memory_mib", result_real(mem_mib), "os", u.sysname[0] ? u.release : "unknown",
		"cuda_built", d.cuda_built);
	if (!env)
		return NULL;
	json_t *gpu = json_pack("{s:i, s:s}", "count", d.gpu_count, "note", d.note);
	if (d.gpu_count > 0) {
		json_object_set_new(gpu, "name", json_string(d.gpu_name));
		json_object_set_new(gpu, "memory_mib", result_real(d.mem_total_bytes / GP_MIB));
		char cc[16];
		snprintf(cc, sizeof(cc), "%d.%d", d.cc_major, d.cc_minor);
		json_object_set_new(gpu, "compute_capability", json_string(cc));
		json_object_set_new(gpu, "sm_count", json_integer(d.sm_count));
		json_object_set_new(gpu, "cuda_runtime", version_json(d.cudart_version, 0));
		json_object_set_new(gpu, "cuda_driver", version_json(d.driver_version, 0));
	}
#ifdef GP_HAVE_CUDA
	if (d.gpu_count > 0) {
		struct cuda_versions v;
		int nccl = 0;
		if (cuda_versions_get(&v) == 0) {
			json_object_set_new(gpu, "cudnn", version_json((int)v.cudnn, 1));
			json_object_set_new(gpu, "cublas", version_json(v.cublas, 1));
		}
		gp_error_clear();
		if (ncclGetVersion(&nccl) == ncclSuccess)
			json_object_set_new(gpu, "nccl", version_json(nccl, 1));
	}
#endif
	/* NVML: the driver, clocks and power limit of each GPU */
	if (d.gpu_count > 0 && nvml_open() == 0) {
		json_t *devs = json_array();
		for (int i = 0; i < d.gpu_count && i < 16; i++) {
			struct nvml_static_info info;
			if (nvml_static_info(i, &info) == 0)
				json_array_append_new(devs, result_gpu_from_nvml(&info));
		}
		json_t *first = json_array_get(devs, 0);
		if (first)
			json_object_set(gpu, "driver_version", json_object_get(first, "driver_version"));
		json_object_set_new(gpu, "nvml", devs);
		nvml_close();
	}
	gp_error_clear();
	json_object_set_new(env, "gpu", gpu);
	return env;
}

/* The bench's own result: what ran, how it ended, and where each stage's result
 * lies; written again after every stage, so that an interrupted bench keeps what it
 * measured. */
static int bench_write(const struct bench *b, int argc, char **argv, const char *device)
{
	json_t *res = result_new("bench", argc, argv), *stages = json_array();
	int rc;
	if (!res || !stages) {
		json_decref(res);
		json_decref(stages);
		return gp_error(GP_ENOMEM, "no memory for the bench result");
	}
	for (int i = 0; i < b->n; i++) {
		const struct bench_stage *s = &b->st[i];
		char cmd[2048] = "";
		for (int k = 1; k < s->argc; k++)
			snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), "%s%s", *cmd ? " " : "",
				 s->argv[k]);
		json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:s, s:s}", "stage", s->name,
			"tool", s->torch ? "pytorch" : "gpuperf", "status", s->status,
			"seconds", result_real(s->seconds), "budget_s", result_real(s->budget_s),
			"result", s->result, "args", cmd, "note", s->note);
		if (json_array_append_new(stages, o) < 0) {
			json_decref(stages);
			json_decref(res);
			return gp_error(GP_ENOMEM, "no memory for the bench result");
		}
	}
	json_object_set_new(res, "settings", json_pack("{s:b, s:s}", "quick", b->quick, "device",
						      device ? device : b->cuda ? "cuda" : "cpu"));
	json_object_set_new(json_object_get(res, "measurements"), "environment", json_incref(b->env));
	json_object_set_new(json_object_get(res, "measurements"), "stages", stages);
	rc = result_write(res, b->dir, "bench", NULL, 0);
	json_decref(res);
	return rc;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(double s, char *buf, size_t cap)
{
	int t = (int)(s + 0.5);
	if (t >= 60)
		snprintf(buf, cap, "%dm%02ds", t / 60, t % 60);
	else
		snprintf(buf, cap, "%ds", t);
}

/* Time left: the budgets still ahead, scaled by how the finished stages compared
 * with theirs, plus what remains of the running stage's. */
static double bench_time_left(const struct bench *b, int cur, double cur_elapsed)
{
	double spent = 0, budget_done = 0, ahead = 0;
	for (int i = 0; i < cur; i++) {
		spent += b->st[i].seconds;
		budget_done += b->st[i].budget_s;
	}
	double scale = budget_done > 0 && spent > 0 ? spent / budget_done : 1;
	if (scale < 0.2)
		scale = 0.2;
	for (int i = cur + 1; i < b->n; i++)
		ahead += b->st[i].budget_s;
	double rest = b->st[cur].budget_s * scale - cur_elapsed;
	return ahead * scale + (rest > 0 ? rest : 0);
}

static void bench_progress(const struct bench *b, int cur, double elapsed, int final)
{
	char el[16], left[16];
	fmt_time(elapsed, el, sizeof(el));
	fmt_time(bench_time_left(b, cur, elapsed), left, sizeof(left));
	const struct bench_stage *s = &b->st[cur];
	int width = 24, filled = b->n ? (cur * width + width / 2) / b->n : 0;
	char bar[32];
	for (int i = 0; i < width; i++)
		bar[i] = i < filled ? '#' : '.';
	bar[width] = 0;
	if (final)
		printf("%s[%s] %d/%d %-16s %-7s %6s  %s\n", b->tty ? "\r" : "", bar, cur + 1, b->n,
		       s->name, s->status, el, s->note);
	else
		printf("\r[%s] %d/%d %-16s running %6s, about %s left   ", bar, cur + 1, b->n, s->name,
		       el, left);
	fflush(stdout);
}

struct stage_tick {
	const struct bench *b;
	int i;
};

static void stage_tick(void *ctx, double elapsed_s)
{
	const struct stage_tick *t = ctx;
	if (t->b->tty)
		bench_progress(t->b, t->i, elapsed_s, 0);
}

static int stage_run(struct bench *b, int i)
{
	struct bench_stage *s = &b->st[i];
	char dir[4200], log[4300], out[4300];
	snprintf(dir, sizeof(dir), "%s/%s", b->dir, s->name);
	snprintf(log, sizeof(log), "%s/log.txt", dir);
	snprintf(out, sizeof(out), "%s/%s", b->dir, s->result);
	GP_TRY(path_mkdirs(dir));
	/* what the stage prints is its result (info) or the yardstick's JSON lines */
	if (s->torch)
		snprintf(out, sizeof(out), "%s/torch.jsonl", dir);
	int fd_log = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int fd_out = s->stdout_is_result || s->torch
		     ? open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : fd_log;
	if (fd_log < 0 || fd_out < 0) {
		int err = errno;
		if (fd_log >= 0)
			close(fd_log);
		return gp_error(GP_EIO, "cannot write in '%s': %s", dir, strerror(err));
	}
	char *argv[BENCH_MAX_ARGS + 3];
	if (s->torch) {
		argv[0] = "python3";
		argv[1] = b->torch_script;
		for (int k = 1; k <= s->argc; k++)
			argv[k + 1] = s->argv[k];
	}
	struct stage_tick tick = { b, i };
	struct child_run c = {
		.argv = s->torch ? argv : s->argv, .exec_path = s->torch ? NULL : "/proc/self/exe",
		.fd_out = fd_out, .fd_log = fd_log,
		.limit_s = s->budget_s * 4 > 60 ? s->budget_s * 4 : 60,
		.tick = stage_tick, .ctx = &tick,
	};
	int rc = child_run(&c);
	close(fd_log);
	if (fd_out != fd_log)
		close(fd_out);
	if (rc < 0)
		return gp_error(rc, "stage %s: %s", s->name, gp_errmsg());
	s->seconds = c.seconds;
	int ok = child_run_ok(&c);
	if (ok && access(out, R_OK) != 0) {
		ok = 0;
		char what[sizeof(s->result)];
		memcpy(what, s->result, sizeof(what));
		snprintf(s->note, sizeof(s->note), "finished without writing %s", what);
	}
	s->status = ok ? "ok" : "failed";
	if (!ok && c.killed) {
		snprintf(s->note, sizeof(s->note), "stopped after %.0f s (4x its %.0f s budget)",
			 c.limit_s, s->budget_s);
	} else if (!ok && !*s->note) {
		char last[400];
		yardstick_last_line(log, last, sizeof(last));
		snprintf(s->note, sizeof(s->note), "%s", *last ? last : "failed without a message");
	}
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	const char *models = NULL, *data = NULL, *precisions = NULL, *out = NULL, *device = "auto";
	int quick = 0, torch = 0, help = 0, overwrite = 0, plan_only = 0, repeat = 1;
	struct opt opts[] = {
		{ "quick", OPT_FLAG, &quick, "the short suite (under 3 minutes on an H100)" },
		{ "models", OPT_STR, &models, "comma-separated models (GPU: resnet50,resnet18,mobilenet_v2; "
		  "--quick resnet50,resnet18; CPU: simple_cnn,mobilenet_v2); the first is amp's and "
		  "profile's, mobilenet_v2 (else the first) maxbatch's and workers'" },
		OPT_DATA(&data, "an ImageFolder (or cifar10:DIR): adds workers and end-to-end training"),
		{ "precisions", OPT_STR, &precisions, "amp's precisions (GPU: fp32,tf32,fp16,bf16; "
		  "--quick fp32,bf16; CPU: fp32)" },
		{ "torch", OPT_FLAG, &torch, "run the PyTorch yardsticks (tools/torch_baseline.py; "
		  "scale's tools/torch_ddp.py) on the same settings and set the ratios beside (needs "
		  "python3, torch and a GPU)" },
		{ "repeat", OPT_INT, &repeat, "train compare's models and amp's cells this many times "
		  "each, so that diff can tell changes from noise (1)", 1, 100 },
		OPT_DEVICE(&device),
		OPT_OUT(&out, "bench.json, the stages' folders and the reports", "bench"),
		OPT_OVERWRITE(&overwrite, "bench.json"),
		{ "plan", OPT_FLAG, &plan_only, "print the stages with their arguments and budgets, run none" },
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help(BENCH_USAGE, opts);
		return 0;
	}
	enum backend_kind backend;
	GP_TRY(train_pick_device(device, &backend, 1));
	if (data && strncmp(data, "cifar10:", 8) && access(data, R_OK) != 0)
		return gp_error(GP_EINVAL, "--data '%s': %s", data, strerror(errno));

	static struct bench b;
	memset(&b, 0, sizeof(b));
	b.cuda = backend == BACKEND_CUDA;
	b.quick = quick;
	b.tty = isatty(STDOUT_FILENO);
	const struct bench_sizes *z = b.cuda ? (quick ? &bench_gpu_quick : &bench_gpu)
				     : (quick ? &bench_cpu_quick : &bench_cpu);
	/* children get the device only when one was asked for: auto stays auto */
	const char *child_device = strcmp(device, "auto") ? device : NULL;
	int rc;
	char why[256] = "";
	int torch_ok = torch && b.cuda && yardstick_usable(why, sizeof(why)) &&
		       yardstick_find("torch_baseline.py", b.torch_script, sizeof(b.torch_script));
	if (torch && b.cuda && !torch_ok && !*why)
		snprintf(why, sizeof(why), "tools/torch_baseline.py was not found");
	if (torch && b.cuda && !torch_ok)
		snprintf(why + strlen(why), sizeof(why) - strlen(why), ": the yardstick was not run");
	if (torch && !b.cuda)
		snprintf(why, sizeof(why), "the PyTorch yardstick runs on a CUDA GPU: not run on the CPU");

	if (plan_only)
		snprintf(b.dir, sizeof(b.dir), "%s", out ? out : "results/bench_<timestamp>");
	else
		GP_TRY(result_dir_prepare("bench", "bench", out, overwrite, b.dir, sizeof(b.dir)));
	struct gp_devinfo di;
	devinfo_query(&di);
	if ((rc = bench_plan(&b, z, models, precisions, data, torch_ok, child_device, repeat,
			     b.cuda ? di.gpu_count : 0)) < 0)
		goto done;
	if (torch && !torch_ok) {
		struct bench_stage *s = stage_new(&b, "torch", 0, "torch.json");
		if (s) {
			s->status = "skipped";
			s->torch = 1;
			snprintf(s->note, sizeof(s->note), "%s", why);
		}
	}
	double total = 0;
	for (int i = 0; i < b.n; i++)
		total += b.st[i].budget_s;
	if (plan_only) {
		printf("bench on %s%s: %d stages, about %.0f s\n", b.cuda ? "the GPU" : "the CPU",
		       quick ? " (--quick)" : "", b.n, total);
		for (int i = 0; i < b.n; i++) {
			printf("  %-16s %5.0f s  %s", b.st[i].name, b.st[i].budget_s,
			       b.st[i].torch ? "python3 torch_baseline.py" : "gpuperf");
			for (int k = 1; k < b.st[i].argc; k++)
				printf(" %s", b.st[i].argv[k]);
			printf("%s%s\n", *b.st[i].note ? "  -- " : "", b.st[i].note);
		}
		goto done;
	}
	if (!(b.env = bench_environment())) {
		rc = gp_error(GP_ENOMEM, "no memory for the environment");
		goto done;
	}
	printf("bench on %s%s: %d stages, about %.0f s; in %s\n",
	       b.cuda ? json_string_value(json_object_get(json_object_get(b.env, "gpu"), "name"))
		      : "the CPU", quick ? " (--quick)" : "", b.n, total, b.dir);
	double t_bench0 = now_s();
	int n_failed = 0, n_run = 0;
	for (int i = 0; i < b.n; i++) {
		if (!strcmp(b.st[i].status, "skipped")) {
			bench_progress(&b, i, 0, 1);
			continue;
		}
		if (!b.tty)
			bench_progress(&b, i, 0, 0), printf("\n");
		if ((rc = stage_run(&b, i)) < 0)
			goto done;
		n_run++;
		n_failed += strcmp(b.st[i].status, "ok") != 0;
		bench_progress(&b, i, b.st[i].seconds, 1);
		if (b.st[i].torch && !strcmp(b.st[i].status, "ok") &&
		    bench_torch_to_result(b.dir, b.st[i].result, argc, argv) < 0) {
			b.st[i].status = "failed";
			snprintf(b.st[i].note, sizeof(b.st[i].note), "%s", gp_errmsg());
			gp_error_clear();
		}
		if ((rc = bench_write(&b, argc, argv, child_device)) < 0)
			goto done;
	}
	if ((rc = bench_write(&b, argc, argv, child_device)) < 0)
		goto done;
	if ((rc = bench_report_write(b.dir)) < 0)
		goto done;
	char el[16];
	fmt_time(now_s() - t_bench0, el, sizeof(el));
	printf("%d of %d stages ran in %s, %d failed\nwrote %s/bench.json\nwrote %s/report.html\n"
	       "wrote %s/report.md\n", n_run - n_failed, n_run, el, n_failed, b.dir, b.dir, b.dir);
	if (n_run > 0 && n_failed == n_run)
		rc = gp_error(GP_EIO, "every stage failed (their logs are in %s)", b.dir);
done:
	bench_free(&b);
	return rc;
}
