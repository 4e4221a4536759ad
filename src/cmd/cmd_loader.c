/* gpuperf loader: data-loader throughput alone (no model), one row per worker
 * count, to compare with torchvision's DataLoader on the same images. The clock
 * runs from loader_create to the last batch, so worker start-up is included as it
 * is in a plain `for x, y in loader` loop. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/cpuload.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "data/dataset.h"
#include "data/decode_probe.h"
#include "data/gpu_loader.h"
#include "data/loader.h"

struct loader_run {
	double img_s, wait_ms_mean, total_ms;
	struct loader_stats st;
	struct cpu_load cpu; /* over the same clock */
};

/* The CPU columns of a row: this process's cores busy, the machine's busy share. */
static void print_cpu(const struct cpu_load *c)
{
	if (c->machine_pct >= 0)
		printf(" %9.1f %9.0f\n", c->proc_cores, c->machine_pct);
	else
		printf(" %9.1f %9s\n", c->proc_cores, "n/a");
}

static int loader_measure(struct dataset *ds, const struct loader_config *cfg,
			  int batches, struct loader_run *out)
{
	struct loader *l;
	struct cpu_mark m0, m1;
	cpu_mark_now(&m0);
	double t0 = gp_now_ms(), wait_ms = 0;
	long images = 0;
	GP_TRY(loader_create(ds, cfg, &l));
	int rc = 0;
	for (int i = 0; i < batches; i++) {
		struct batch *b;
		rc = loader_next(l, &b);
		if (rc < 0)
			goto out_destroy;
		wait_ms += b->wait_ms;
		images += b->n;
		loader_release(l, b);
	}
	out->total_ms = gp_now_ms() - t0;
	out->img_s = images / (out->total_ms / 1e3);
	out->wait_ms_mean = wait_ms / batches;
	cpu_mark_now(&m1);
	cpu_load_between(&m0, &m1, &out->cpu);
	loader_get_stats(l, &out->st);
out_destroy:
	loader_destroy(l);
	return rc;
}

/* --decode gpu: the same clock, batches made by nvJPEG and the augmentation kernel
 * (in the loader's decode thread, the files read by its reader; data/gpu_loader.h). */
static int loader_measure_gpu(struct dataset *ds, const struct gpu_loader_config *cfg,
			      int batches, struct loader_run *out, struct gpu_decode_stats *gs,
			      char *backend, size_t cap)
{
	struct gpu_loader *l;
	struct cpu_mark m0, m1;
	cpu_mark_now(&m0);
	double t0 = gp_now_ms();
	long images = 0;
	GP_TRY(gpu_loader_create(ds, cfg, &l));
	snprintf(backend, cap, "%s", gpu_loader_backend(l));
	int rc = 0;
	for (int i = 0; i < batches; i++) {
		struct gpu_batch b;
		rc = gpu_loader_next(l, &b);
		if (rc < 0)
			goto out_destroy;
		images += b.n;
	}
	out->total_ms = gp_now_ms() - t0;
	out->img_s = images / (out->total_ms / 1e3);
	out->wait_ms_mean = out->total_ms / batches;
	cpu_mark_now(&m1);
	cpu_load_between(&m0, &m1, &out->cpu);
	gpu_loader_get_stats(l, &out->st, gs);
out_destroy:
	gpu_loader_destroy(l);
	return rc;
}

/* fp32/tf32 nets take NCHW floats; fp16/bf16 nets NHWC 16-bit (docs/amp.md). */
static enum gpu_batch_layout layout_for_precision(const char *precision)
{
	if (!strcmp(precision, "bf16"))
		return GPU_BATCH_NHWC_BF16;
	if (!strcmp(precision, "fp16"))
		return GPU_BATCH_NHWC_F16;
	return GPU_BATCH_NCHW_F32;
}

int cmd_loader(int argc, char **argv)
{
	const char *data = NULL, *decode = "cpu", *precision = "fp32";
	int batch = 64, batches = 100, size = 224, prefetch = 2, eval = 0, help = 0;
	int decode_threads = 0;
	long long seed = 1;
	struct int_list workers = { 4, { 0, 2, 4, 8 } };
	const struct opt opts[] = {
		OPT_DATA(&data, "dataset: folder, cifar10:DIR or synthetic"),
		OPT_BATCH(&batch, "batch size (default 64)"),
		OPT_WORKER_LIST(&workers, "worker counts (default 0,2,4,8)"),
		{ "batches", OPT_INT, &batches, "batches per measurement (default 100)", 1, ARGS_MAX_STEPS },
		/* images, not a model: any side the transforms can make */
		{ "size", OPT_INT, &size, "image side (default 224)", 1, ARGS_MAX_SIZE },
		OPT_PREFETCH(&prefetch, "batches in flight per worker (default 2)"),
		OPT_SEED(&seed, "seed (default 1)"),
		{ "eval", OPT_FLAG, &eval, "eval transforms (Resize + CenterCrop), no shuffle", 0 },
		OPT_DECODE(&decode, "where JPEGs are decoded: cpu (default; one row per worker count) | "
			   "gpu (nvJPEG + GPU augmentation, one row; --workers ignored) | auto (the faster "
			   "of the two, timed at the most workers listed)"),
		OPT_PRECISION(&precision, "with --decode gpu: the batch's layout (fp32, tf32: NCHW "
			      "float; fp16, bf16: NHWC 16-bit)"),
		OPT_DECODE_THREADS(&decode_threads),
		OPT_HELP(&help),
		OPT_END(),
	};
	const char *usage = "gpuperf loader --data SPEC [--batch 64] [--workers 0,2,4,8] "
			    "[--batches 100] [--size 224] [--seed 1] [--decode cpu|gpu|auto]";
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help(usage, opts);
		return 0;
	}
	if (!data)
		return gp_error(GP_EINVAL, "--data SPEC is required");
	if (workers.n == 0)
		return gp_error(GP_EINVAL, "--workers: give at least one worker count (e.g. 0,2,4,8)");
	enum precision prec;
	GP_TRY(train_parse_precision(precision, &prec));
	/* the GPU path decodes files: synthetic and CIFAR-10 data stay on the CPU */
	int files = strcmp(data, "synthetic") && strncmp(data, "synthetic:", 10) &&
		    strncmp(data, "cifar10:", 8);
	enum decode_mode mode;
	GP_TRY(args_decode_pick(decode, files, "loader", &mode));
	if (decode_threads && mode == DECODE_CPU)
		return gp_error(GP_EINVAL, "--decode-threads is for --decode gpu (or auto): the CPU "
				"path's threads are --workers");
	struct dataset *ds;
	GP_TRY(dataset_open(data, !eval, size, &ds));
	printf("loader: %s, %d images, %d classes, batch %d, size %d, %s, %d batches per run\n",
	       data, dataset_count(ds), dataset_classes(ds), batch, size,
	       eval ? "eval" : "train", batches);
	struct gpu_loader_config gc = {
		.batch = batch, .size = size, .train = !eval, .drop_last = 0,
		.seed = (uint64_t)seed, .device = 0,
		.layout = layout_for_precision(precision), .decode_threads = decode_threads,
	};
	int rc = 0, use_gpu = mode == DECODE_GPU;
	if (mode == DECODE_AUTO) {
		/* the CPU side at the most workers listed: the rows that follow are the
		 * path picked */
		struct decode_probe_config pc = {
			.cpu = { .batch = batch, .prefetch = prefetch, .size = size, .train = !eval,
				 .seed = (uint64_t)seed },
			.gpu = gc,
		};
		for (int i = 0; i < workers.n; i++)
			if (workers.v[i] > pc.cpu.workers)
				pc.cpu.workers = workers.v[i];
		struct decode_probe p;
		if ((rc = decode_probe_run(ds, &pc, &p)) < 0) {
			dataset_close(ds);
			return rc;
		}
		char line[512];
		decode_probe_describe(&p, line, sizeof(line));
		printf("%s\n", line);
		use_gpu = p.use_gpu;
	}
	printf("%8s %10s %12s %14s %8s %12s %9s %9s\n", "workers", "img/s", "total ms",
	       "wait ms/batch", "skipped", "decode gain", "CPU cores", "machine %");
	if (use_gpu) {
		struct loader_run run;
		struct gpu_decode_stats gs;
		char backend[32];
		rc = loader_measure_gpu(ds, &gc, batches, &run, &gs, backend, sizeof(backend));
		if (rc == 0) {
			printf("%8s %10.1f %12.1f %14.2f %8ld %11.2fx", "gpu", run.img_s,
			       run.total_ms, run.wait_ms_mean, run.st.skipped_corrupt, 1.0);
			print_cpu(&run.cpu);
			long made = gs.hw_decoded + gs.cuda_decoded + gs.cpu_fallback + gs.cpu_shared;
			printf("gpu decode (%s backend): %ld by the JPEG engines (%ld as the crop's "
			       "region, %.0f%% of their pixels), %ld by CUDA, %ld on "
			       "the CPU, %ld by %d CPU threads beside them, %ld corrupt; decode %.1f ms, "
			       "augment %.1f ms of GPU time (%ld images in one pass), reading %.1f ms "
			       "(%.0f img/s decode + augment alone)\n",
			       backend, gs.hw_decoded, gs.region_decoded,
			       gs.region_full_pixels > 0
				       ? 100 * gs.region_pixels / gs.region_full_pixels : 0,
			       gs.cuda_decoded, gs.cpu_fallback, gs.cpu_shared,
			       decode_threads, gs.failed, gs.decode_ms, gs.augment_ms, gs.one_pass,
			       run.st.decode_ms_total, made / ((gs.decode_ms + gs.augment_ms) / 1e3));
		}
		dataset_close(ds);
		return rc;
	}
	for (int i = 0; i < workers.n; i++) {
		struct loader_config cfg = {
			.batch = batch, .workers = workers.v[i], .prefetch = prefetch,
			.size = size, .train = !eval, .drop_last = 0, .seed = (uint64_t)seed,
		};
		struct loader_run run;
		rc = loader_measure(ds, &cfg, batches, &run);
		if (rc < 0)
			break;
		double gain = run.st.decoded_pixels > 0
				      ? run.st.full_pixels / run.st.decoded_pixels : 1.0;
		printf("%8d %10.1f %12.1f %14.2f %8ld %11.2fx", workers.v[i], run.img_s,
		       run.total_ms, run.wait_ms_mean, run.st.skipped_corrupt, gain);
		print_cpu(&run.cpu);
	}
	dataset_close(ds);
	return rc;
}
