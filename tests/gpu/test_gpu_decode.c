/* GPU decoding (nvJPEG) and augmentation against the CPU path on the same files and
 * the same sample geometry: `dataset make`'s 500x375 JPEGs at 224, train (random crop
 * and flip) and eval (resize + centre crop). Issue 21's bounds, in 0..255 units: mean
 * absolute difference at most 1.5, no pixel off by more than 12. The CPU side decodes
 * at full size (the reference pixels; the loader's reduced-scale decode is a CPU
 * speed-up, docs/data.md). With nvJPEG's planes finished by data/ycc.h, only the two
 * IDCTs and float contraction in the resampler can differ: expect about 0. (nvJPEG's
 * own RGB repeats chroma samples: mean 0.767, max 65.6 on the H100, which
 * TJFLAG_FASTUPSAMPLE reproduces to the digit on the CPU.) What was measured is
 * printed, with the worst pixel's place. NHWC bf16 against the NCHW float batch;
 * corrupt files skipped and counted as the CPU loader does (tests/data/bad); and the
 * throughput of decode + augment alone. Skips without a GPU or nvJPEG. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <jansson.h>

#include "../test.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "core/tuning.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/decode_probe.h"
#include "data/gpu_decode.h"
#include "data/gpu_loader.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/transform.h"
#include "nn/models.h"
#include "nn/net.h"
#include "decode_util.h"

/* Items for the files with the geometry of (seed 1, epoch 0, index i). */
static void items_make(const struct files *f, int train, struct gpu_decode_item *items)
{
	for (int i = 0; i < N_FILES; i++) {
		items[i] = (struct gpu_decode_item){ .data = f->data[i], .len_bytes = f->len[i],
						     .kind = f->kind[i], .w = f->w[i], .h = f->h[i],
						     .dst = i };
		sample_geometry_make(train, SIZE, sample_seed(1, 0, i), f->w[i], f->h[i],
				     &items[i].geo);
	}
}

/* Differences in 0..255 units between normalized CHW batches of size x size, and
 * where the largest is: sample, output x and y, channel, both values. */
struct diff {
	double mean, max;
	int s, x, y, c;
	double got, want;
};

static double to_255(float v, int c)
{
	return ((double)v * imagenet_std[c] + imagenet_mean[c]) * 255.0;
}

static void diff_255(const float *got, const float *want, int n, int size, struct diff *r)
{
	size_t plane = (size_t)size * size;
	double sum = 0;
	memset(r, 0, sizeof(*r));
	for (int s = 0; s < n; s++)
		for (int c = 0; c < 3; c++)
			for (size_t p = 0; p < plane; p++) {
				size_t k = ((size_t)s * 3 + c) * plane + p;
				double d = fabs((double)got[k] - want[k]) * imagenet_std[c] * 255.0;
				sum += d;
				if (d > r->max) {
					*r = (struct diff){ .max = d, .s = s, .x = (int)(p % size),
							    .y = (int)(p / size), .c = c,
							    .got = to_255(got[k], c),
							    .want = to_255(want[k], c) };
				}
			}
	r->mean = sum / ((double)n * 3 * plane);
}

/* Where the worst pixel is, so that a failing run on the GPU says why. */
static void diff_print(const char *what, const struct diff *r, const char *path)
{
	printf("    %s: worst at %s, output x %d y %d, channel %c: GPU %.1f, CPU %.1f\n", what,
	       path ? path : "?", r->x, r->y, "RGB"[r->c], r->got, r->want);
}

static float bf16_f(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

TEST(gpu_decode_matches_cpu_path)
{
	if (!gpu_decode_ready())
		return;
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	size_t floats = (size_t)N_FILES * 3 * SIZE * SIZE;
	float *cpu = malloc(sizeof(float) * floats), *gpu = malloc(sizeof(float) * floats);
	uint16_t *h16 = malloc(2 * floats);
	struct gpu_decoder *d32 = NULL, *d16 = NULL;
	CHECK_MSG(gpu_decoder_create(0, N_FILES, SIZE, GPU_BATCH_NCHW_F32, 1, &d32) == 0, "%s",
		  gp_errmsg());
	CHECK_MSG(gpu_decoder_create(0, N_FILES, SIZE, GPU_BATCH_NHWC_BF16, 1, &d16) == 0, "%s",
		  gp_errmsg());
	if (test_failed())
		goto out;
	for (int train = 1; train >= 0; train--) {
		struct gpu_decode_item items[N_FILES];
		unsigned char failed[N_FILES];
		items_make(&f, train, items);
		/* the CPU path: full-size TurboJPEG decode, then image.c's resampler */
		for (int i = 0; i < N_FILES; i++) {
			struct image img;
			CHECK_EQ_INT(image_decode(&ctx, f.data[i], f.len[i], f.kind[i], f.w[i], f.h[i],
						  &img), 0);
			CHECK_EQ_INT(image_resample_chw(&ctx, &img, &items[i].geo.box, SIZE, SIZE,
							items[i].geo.flip, imagenet_mean, imagenet_std,
							cpu + (size_t)i * 3 * SIZE * SIZE), 0);
		}
		CHECK_MSG(gpu_decoder_run(d32, 0, items, N_FILES, failed) == 0, "%s", gp_errmsg());
		CHECK_MSG(gpu_decoder_run(d16, 0, items, N_FILES, failed) == 0, "%s", gp_errmsg());
		if (test_failed())
			goto out;
		for (int i = 0; i < N_FILES; i++)
			CHECK_EQ_INT(failed[i], 0);
		CHECK(cudaMemcpy(gpu, gpu_decoder_output(d32, 0), sizeof(float) * floats,
				 cudaMemcpyDeviceToHost) == cudaSuccess);
		CHECK(cudaMemcpy(h16, gpu_decoder_output(d16, 0), 2 * floats,
				 cudaMemcpyDeviceToHost) == cudaSuccess);
		struct diff df;
		diff_255(gpu, cpu, N_FILES, SIZE, &df);
		printf("    %s: GPU against CPU, 0..255 units: mean |diff| %.3f, max %.1f "
		       "(bounds 1.5, 12); backend %s\n", train ? "train" : "eval", df.mean, df.max,
		       gpu_decoder_backend(d32));
		diff_print(train ? "train" : "eval", &df, dataset_path(ds, df.s));
		CHECK_MSG(df.mean <= 1.5 && df.max <= 12.0, "%s: mean %.3f max %.1f",
			  train ? "train" : "eval", df.mean, df.max);
		/* NHWC bf16 against NCHW float: only bf16's rounding (8 bits of mantissa) */
		double worst = 0;
		for (int s = 0; s < N_FILES; s++)
			for (int y = 0; y < SIZE; y++)
				for (int x = 0; x < SIZE; x++)
					for (int c = 0; c < 3; c++) {
						float a = bf16_f(h16[(((size_t)s * SIZE + y) * SIZE + x) * 3 + c]);
						float b = gpu[(((size_t)s * 3 + c) * SIZE + y) * SIZE + x];
						double e = fabs((double)a - b) / (fabs(b) > 1 ? fabs(b) : 1);
						worst = e > worst ? e : worst;
					}
		printf("    %s: NHWC bf16 against NCHW float: worst relative %.2e (bound 4e-3)\n",
		       train ? "train" : "eval", worst);
		CHECK_MSG(worst <= 4e-3, "bf16 off by %.2e", worst);
	}
	struct gpu_decode_stats st;
	gpu_decoder_get_stats(d32, &st);
	printf("    decoded: %ld hardware, %ld CUDA, %ld CPU; %ld with nvJPEG's own chroma "
	       "upsampling\n", st.hw_decoded, st.cuda_decoded, st.cpu_fallback, st.nvjpeg_chroma);
	CHECK_EQ_INT(st.hw_decoded + st.cuda_decoded + st.cpu_fallback, 2 * N_FILES);
	CHECK_EQ_INT(st.failed, 0);
out:
	gpu_decoder_destroy(d32);
	gpu_decoder_destroy(d16);
	free(cpu);
	free(gpu);
	free(h16);
	jpegs_close(ds, &ctx, &f);
}

/* tests/data/bad holds a truncated JPEG and a text file named .jpg among six good
 * ones: the GPU loader must skip and count them as the CPU loader does, so the
 * batches hold the same samples (labels) in the same order, with the same pixels
 * within the decoders' bounds. */
/* The same with CPU threads taking a share of each batch (--decode-threads), where
 * a corrupt file may be one of theirs. */
static void skips_corrupt_like_cpu(int decode_threads)
{
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open("tests/data/bad", 1, 16, &ds), 0);
	if (test_failed())
		return;
	dataset_set_scaled_decode(ds, 0); /* nvJPEG decodes at full size */
	struct loader_config lc = { .batch = 4, .workers = 0, .prefetch = 1, .size = 16,
				    .train = 1, .seed = 42 };
	struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = 1, .seed = 42,
					.layout = GPU_BATCH_NCHW_F32,
					.decode_threads = decode_threads };
	struct loader *cl = NULL;
	struct gpu_loader *gl = NULL;
	CHECK_MSG(loader_create(ds, &lc, &cl) == 0, "%s", gp_errmsg());
	CHECK_MSG(gpu_loader_create(ds, &gc, &gl) == 0, "%s", gp_errmsg());
	if (test_failed())
		goto out;
	float got[4 * 3 * 16 * 16];
	for (int b = 0; b < 6; b++) {
		struct batch *cb;
		struct gpu_batch gb;
		CHECK_MSG(loader_next(cl, &cb) == 0, "%s", gp_errmsg());
		CHECK_MSG(gpu_loader_next(gl, &gb) == 0, "%s", gp_errmsg());
		if (test_failed())
			goto out;
		CHECK_EQ_INT(gb.n, cb->n);
		CHECK(!memcmp(gb.labels, cb->labels, sizeof(int32_t) * cb->n));
		CHECK(cudaMemcpy(got, gb.x, sizeof(float) * 3 * 16 * 16 * gb.n,
				 cudaMemcpyDeviceToHost) == cudaSuccess);
		struct diff df;
		diff_255(got, cb->x, gb.n, 16, &df);
		printf("    batch %d: mean |diff| %.3f, max %.1f\n", b, df.mean, df.max);
		if (df.max > 0) {
			char what[64];
			snprintf(what, sizeof(what), "batch %d sample %d (label %d)", b, df.s,
				 cb->labels[df.s]);
			diff_print(what, &df, NULL);
		}
		CHECK_MSG(df.mean <= 1.5 && df.max <= 12.0, "batch %d: mean %.3f max %.1f", b,
			  df.mean, df.max);
		loader_release(cl, cb);
	}
	struct loader_stats cs, gs;
	struct gpu_decode_stats ds_st;
	loader_get_stats(cl, &cs);
	gpu_loader_get_stats(gl, &gs, &ds_st);
	printf("    %d decode threads: skipped: CPU %ld, GPU %ld; GPU decoder: %ld hardware, "
	       "%ld CUDA, %ld CPU, %ld by the threads, %ld corrupt\n", decode_threads,
	       cs.skipped_corrupt, gs.skipped_corrupt, ds_st.hw_decoded, ds_st.cuda_decoded,
	       ds_st.cpu_fallback, ds_st.cpu_shared, ds_st.failed);
	if (decode_threads)
		CHECK(ds_st.cpu_shared > 0);
	CHECK(cs.skipped_corrupt >= 4);
	CHECK_EQ_INT(gs.skipped_corrupt, cs.skipped_corrupt);
	CHECK_EQ_INT(gs.images, cs.images);
out:
	gpu_loader_destroy(gl);
	loader_destroy(cl);
	dataset_close(ds);
}

TEST(gpu_loader_skips_corrupt_like_cpu)
{
	if (!gpu_decode_ready())
		return;
	skips_corrupt_like_cpu(0);
	skips_corrupt_like_cpu(2);
}

/* Decode + augment alone, files in memory: 256 samples a batch (the 16 files over
 * and over, each with its own geometry), NCHW float and NHWC bf16. The goal
 * is 10,000 img/s on one H100; printed for the lead, asserted only to be positive. */
TEST(gpu_decode_throughput)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 256, REPS = 10 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH];
	static unsigned char failed[BATCH];
	items_repeat(&f, BATCH, 3, items);
	const enum gpu_batch_layout layouts[2] = { GPU_BATCH_NCHW_F32, GPU_BATCH_NHWC_BF16 };
	for (int li = 0; li < 2; li++) {
		struct gpu_decoder *d = NULL;
		CHECK_MSG(gpu_decoder_create(0, BATCH, SIZE, layouts[li], 1, &d) == 0, "%s", gp_errmsg());
		if (test_failed())
			break;
		CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0); /* warm-up */
		double t0 = gp_now_ms();
		for (int r = 0; r < REPS; r++)
			CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0);
		double ms = gp_now_ms() - t0;
		struct gpu_decode_stats st;
		gpu_decoder_get_stats(d, &st);
		double img_s = BATCH * REPS / (ms / 1e3);
		printf("    decode + augment, %s, batch %d, 500x375 -> 224: %.0f img/s (%s "
		       "backend; %ld hardware, %ld CUDA, %ld CPU, %ld with nvJPEG's chroma; decode "
		       "%.1f ms, convert + augment %.1f ms in all)\n", li ? "NHWC bf16" : "NCHW f32",
		       BATCH, img_s, gpu_decoder_backend(d), st.hw_decoded, st.cuda_decoded,
		       st.cpu_fallback, st.nvjpeg_chroma, st.decode_ms, st.augment_ms);
		CHECK(img_s > 0);
		gpu_decoder_destroy(d);
	}
	jpegs_close(ds, &ctx, &f);
}

/* A device batch into a net (net_set_batch_device, what `train --decode gpu` does):
 * resnet18 at 64 x 64 under bf16 (NHWC input), the same 16 decoded samples given
 * three ways: as host floats (net_set_batch_data, the CPU loader's way), as device
 * floats (converted on the way) and as the decoder's NHWC bf16 straight in. The
 * logits of the first two must agree exactly, the third within bf16's input rounding. */
TEST(gpu_batch_into_net_matches_host_batch)
{
	if (!gpu_decode_ready())
		return;
	enum { S = 64 };
	const char *dir = folder_make();
	struct dataset *ds = NULL;
	struct image_ctx ctx;
	struct files f;
	CHECK_EQ_INT(dataset_open(dir, 1, S, &ds), 0);
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	if (test_failed())
		return;
	files_read(ds, &ctx, &f);
	struct gpu_decode_item items[N_FILES];
	unsigned char failed[N_FILES];
	int32_t labels[N_FILES];
	for (int i = 0; i < N_FILES; i++) {
		items[i] = (struct gpu_decode_item){ .data = f.data[i], .len_bytes = f.len[i],
						     .kind = f.kind[i], .w = f.w[i], .h = f.h[i],
						     .dst = i };
		sample_geometry_make(1, S, sample_seed(5, 0, i), f.w[i], f.h[i], &items[i].geo);
		labels[i] = dataset_label(ds, i);
	}
	struct model_opts mo = model_defaults("resnet18");
	mo.size = S;
	mo.batch = N_FILES;
	mo.classes = 2;
	struct net *net = NULL;
	struct gpu_decoder *d32 = NULL, *d16 = NULL;
	size_t nf = (size_t)N_FILES * 3 * S * S, nl = (size_t)N_FILES * 2;
	float *host = malloc(sizeof(float) * nf), *l_host = malloc(sizeof(float) * nl),
	      *l_dev32 = malloc(sizeof(float) * nl), *l_dev16 = malloc(sizeof(float) * nl);
	CHECK_EQ_INT(model_build("resnet18", &mo, &net), 0);
	CHECK_MSG(net && net_setup(net, BACKEND_CUDA, GP_F32, PREC_BF16) == 0, "%s", gp_errmsg());
	CHECK_MSG(gpu_decoder_create(0, N_FILES, S, GPU_BATCH_NCHW_F32, 1, &d32) == 0, "%s",
		  gp_errmsg());
	CHECK_MSG(gpu_decoder_create(0, N_FILES, S, GPU_BATCH_NHWC_BF16, 1, &d16) == 0, "%s",
		  gp_errmsg());
	if (test_failed())
		goto out;
	enum gp_dtype dt;
	int nhwc;
	CHECK_EQ_INT(net_input_format(net, &dt, &nhwc), 0);
	CHECK(dt == GP_BF16 && nhwc == 1);
	CHECK_EQ_INT(gpu_decoder_run(d32, 0, items, N_FILES, failed), 0);
	CHECK_EQ_INT(gpu_decoder_run(d16, 0, items, N_FILES, failed), 0);
	CHECK(cudaMemcpy(host, gpu_decoder_output(d32, 0), sizeof(float) * nf,
			 cudaMemcpyDeviceToHost) == cudaSuccess);
	CHECK_EQ_INT(net_set_batch_data(net, host, labels), 0);
	CHECK_EQ_INT(net_forward(net, 0), 0);
	CHECK_EQ_INT(net_logits_to_host(net, l_host), 0);
	CHECK_EQ_INT(net_set_batch_device(net, gpu_decoder_output(d32, 0), GP_F32, 0, labels, NULL), 0);
	CHECK_EQ_INT(net_forward(net, 0), 0);
	CHECK_EQ_INT(net_logits_to_host(net, l_dev32), 0);
	/* with its read event: queued, nothing waited for on the host */
	CHECK_EQ_INT(net_set_batch_device(net, gpu_decoder_output(d16, 0), GP_BF16, 1, labels,
					  gpu_decoder_output_event(d16, 0)), 0);
	CHECK_EQ_INT(net_forward(net, 0), 0);
	CHECK_EQ_INT(net_logits_to_host(net, l_dev16), 0);
	/* a format the net does not take is refused */
	CHECK_EQ_INT(net_set_batch_device(net, gpu_decoder_output(d16, 0), GP_F16, 1, labels, NULL),
		     GP_EINVAL);
	double worst32 = 0, worst16 = 0, scale = 0;
	for (size_t k = 0; k < nl; k++) {
		worst32 = fmax(worst32, fabs((double)l_dev32[k] - l_host[k]));
		worst16 = fmax(worst16, fabs((double)l_dev16[k] - l_host[k]));
		scale = fmax(scale, fabs((double)l_host[k]));
	}
	printf("    logits: device floats off host floats by %.3g, NHWC bf16 by %.3g "
	       "(largest logit %.3g)\n", worst32, worst16, scale);
	CHECK(worst32 == 0);
	CHECK(worst16 <= 0.02 * (scale > 1 ? scale : 1));
out:
	gpu_decoder_destroy(d32);
	gpu_decoder_destroy(d16);
	net_free(net);
	free(host);
	free(l_host);
	free(l_dev32);
	free(l_dev16);
	jpegs_close(ds, &ctx, &f);
}

/* `train --decode gpu` end to end: a few bf16 steps of resnet18 from the JPEG folder,
 * the decode line in the log, a finite loss. */
TEST(gpu_decode_train_runs)
{
	if (!gpu_decode_ready())
		return;
	const char *dir = folder_make();
	char cmd[1600], out[16384];
	snprintf(cmd, sizeof(cmd), "%s train --model resnet18 --size 64 --batch 8 --steps 4 "
		 "--precision bf16 --data %s --decode gpu --out %s/train_gpu", test_bin(), dir,
		 test_tmpdir());
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK_MSG(strstr(out, "decode: on the GPU, nvJPEG"), "%s", out);
	CHECK_MSG(strstr(out, "(BF16 NHWC batches)"), "%s", out);
	CHECK_MSG(strstr(out, "\ncpu: this process kept "), "%s", out);
	CHECK_MSG(!strstr(out, "nan") && !strstr(out, "inf "), "%s", out);
}

/* workers --decode gpu: one run per count of CPU threads beside nvJPEG (rows "gpu +N"),
 * each run's decode_threads in workers.json, and a recommendation among them. */
TEST(gpu_decode_workers_sweeps_cpu_threads)
{
	if (!gpu_decode_ready())
		return;
	const char *dir = folder_make();
	char cmd[1600], out[32768], path[700], tmp[512];
	/* one folder: each test_tmpdir() call makes a new one */
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s workers --model resnet18 --size 64 --batch 8 --steps 4 "
		 "--data %s --decode gpu --workers 0,2 --out %s/workers_gpu", test_bin(), dir, tmp);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK_MSG(strstr(out, "gpu +0") && strstr(out, "gpu +2"), "%s", out);
	CHECK_MSG(strstr(out, "recommended: ") && strstr(out, "CPU threads beside nvJPEG"), "%s",
		  out);
	snprintf(path, sizeof(path), "%s/workers_gpu/workers.json", tmp);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	CHECK_MSG(j, "%s: %s", path, err.text);
	json_t *runs = json_object_get(json_object_get(j, "measurements"), "runs");
	CHECK_EQ_INT((int)json_array_size(runs), 2);
	for (int i = 0; i < 2 && !test_failed(); i++) {
		json_t *r = json_array_get(runs, i);
		CHECK(!strcmp(json_string_value(json_object_get(r, "decode")), "gpu"));
		CHECK_EQ_INT((int)json_integer_value(json_object_get(r, "decode_threads")), 2 * i);
		CHECK(json_real_value(json_object_get(r, "img_s")) > 0);
	}
	json_decref(j);
}

/* The loader's decode thread against the decoder called directly (the synchronous
 * path) on the same files and geometry: each batch bit for bit, over two epochs. And
 * what `train --decode gpu` relies on: a held batch stays as it was while the thread
 * decodes the next on the GPU, and once net_set_batch_device has queued its copy with
 * the batch's read event behind it, the buffer may go back to the thread (the next
 * gpu_loader_next) while the net computes on its copy: the logits are those of the
 * same pixels given from the host. */
TEST(gpu_loader_thread_matches_decoder_run)
{
	if (!gpu_decode_ready())
		return;
	enum { S = 64, B = 4, BATCHES = 8, SEED = 9 };
	const char *dir = folder_make();
	struct dataset *ds = NULL;
	struct image_ctx ctx;
	struct files f;
	CHECK_EQ_INT(dataset_open(dir, 1, S, &ds), 0);
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	if (test_failed())
		return;
	files_read(ds, &ctx, &f);
	struct model_opts mo = model_defaults("resnet18");
	mo.size = S;
	mo.batch = B;
	mo.classes = 2;
	struct net *net = NULL;
	struct gpu_decoder *ref = NULL;
	struct gpu_loader *gl = NULL;
	struct gpu_loader_config gc = { .batch = B, .size = S, .train = 1, .drop_last = 1,
					.seed = SEED, .layout = GPU_BATCH_NCHW_F32 };
	enum { NF = B * 3 * S * S, NL = B * 2 };
	static float held[NF], later[NF], want[NF], prev[NF];
	float l_dev[NL], l_host[NL];
	int32_t prev_labels[B], perm[N_FILES];
	CHECK_EQ_INT(model_build("resnet18", &mo, &net), 0);
	CHECK_MSG(net && net_setup(net, BACKEND_CUDA, GP_F32, PREC_BF16) == 0, "%s", gp_errmsg());
	CHECK_MSG(gpu_decoder_create(0, B, S, GPU_BATCH_NCHW_F32, 1, &ref) == 0, "%s",
		  gp_errmsg());
	CHECK_MSG(gpu_loader_create(ds, &gc, &gl) == 0, "%s", gp_errmsg());
	for (int b = 0; !test_failed() && b < BATCHES; b++) {
		struct gpu_batch gb;
		CHECK_MSG(gpu_loader_next(gl, &gb) == 0, "%s", gp_errmsg());
		if (test_failed())
			break;
		CHECK_EQ_INT(gb.n, B);
		CHECK_EQ_INT(gb.epoch * (N_FILES / B) + gb.index, b);
		/* the batch before was staged and handed back: the net's copy of it is whole */
		if (b > 0) {
			CHECK_EQ_INT(net_forward(net, 0), 0);
			CHECK_EQ_INT(net_logits_to_host(net, l_dev), 0);
			CHECK_EQ_INT(net_set_batch_data(net, prev, prev_labels), 0);
			CHECK_EQ_INT(net_forward(net, 0), 0);
			CHECK_EQ_INT(net_logits_to_host(net, l_host), 0);
			CHECK_MSG(!memcmp(l_dev, l_host, sizeof(l_dev)),
				  "batch %d: the net's copy changed after the buffer went back", b - 1);
		}
		CHECK(cudaMemcpy(held, gb.x, sizeof(held), cudaMemcpyDeviceToHost) == cudaSuccess);
		struct timespec nap = { 0, 50 * 1000 * 1000 }; /* the thread decodes b + 1 */
		nanosleep(&nap, NULL);
		CHECK(cudaMemcpy(later, gb.x, sizeof(later), cudaMemcpyDeviceToHost) == cudaSuccess);
		CHECK_MSG(!memcmp(held, later, sizeof(held)), "batch %d: overwritten while held", b);
		/* the same batch from the decoder itself */
		struct gpu_decode_item items[B];
		unsigned char failed[B];
		loader_epoch_order(SEED, 1, N_FILES, gb.epoch, perm);
		for (int i = 0; i < B; i++) {
			int k = perm[gb.index * B + i];
			items[i] = (struct gpu_decode_item){ .data = f.data[k], .len_bytes = f.len[k],
							     .kind = f.kind[k], .w = f.w[k],
							     .h = f.h[k], .dst = i };
			sample_geometry_make(1, S, sample_seed(SEED, gb.epoch, k), f.w[k], f.h[k],
					     &items[i].geo);
			CHECK_EQ_INT(gb.labels[i], dataset_label(ds, k));
		}
		CHECK_EQ_INT(gpu_decoder_run(ref, 0, items, B, failed), 0);
		CHECK(cudaMemcpy(want, gpu_decoder_output(ref, 0), sizeof(want),
				 cudaMemcpyDeviceToHost) == cudaSuccess);
		CHECK_MSG(!memcmp(held, want, sizeof(held)),
			  "batch %d: the thread's pixels differ from the decoder's", b);
		CHECK(gb.read_event != NULL);
		CHECK_EQ_INT(net_set_batch_device(net, gb.x, GP_F32, 0, gb.labels, gb.read_event), 0);
		memcpy(prev, held, sizeof(prev));
		memcpy(prev_labels, gb.labels, sizeof(prev_labels));
	}
	struct loader_stats st;
	struct gpu_decode_stats gs;
	gpu_loader_get_stats(gl, &st, &gs);
	printf("    %ld images delivered: %ld hardware, %ld CUDA, %ld CPU; decode %.1f ms, "
	       "augment %.1f ms\n", st.images, gs.hw_decoded, gs.cuda_decoded, gs.cpu_fallback,
	       gs.decode_ms, gs.augment_ms);
	CHECK_EQ_INT(st.images, BATCHES * B);
	CHECK_EQ_INT(gs.hw_decoded + gs.cuda_decoded + gs.cpu_fallback, BATCHES * B);
	/* on the JPEG engines, two decoders took the batches in turn */
	printf("    %d decoders (%s backend), %d buffers\n", gpu_loader_decoders(gl),
	       gpu_loader_backend(gl), gpu_loader_outputs(gl));
	if (!tuning_get()->decoders)
		CHECK_EQ_INT(gpu_loader_decoders(gl),
			     strcmp(gpu_loader_backend(gl), "hardware") ? 1 : 2);
	/* every header was read by the reading thread */
	CHECK_EQ_INT(gs.parsed_ahead, BATCHES * B);
	gpu_loader_destroy(gl);
	gpu_decoder_destroy(ref);
	net_free(net);
	jpegs_close(ds, &ctx, &f);
}

/* `--decode auto` where both paths run: 128 JPEGs of 500x375 at 224, batch 32, the
 * CPU side at 4 workers. Which path wins depends on the machine, so only that both
 * were measured, the pick agrees with the rates and with the path the run took, and
 * what train.json records. Then at the data level: after the probe, the loader of
 * the mode picked, created afresh at a resumed position, gives the batches of one
 * that no probe preceded (labels, positions and pixels). */
TEST(gpu_decode_auto_probes_both)
{
	if (!gpu_decode_ready())
		return;
	static char dir[700], tmp[600];
	char cmd[1600], out[16384], path[700];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir()); /* each call makes another */
	snprintf(dir, sizeof(dir), "%s/jpegs_auto", tmp);
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 4 --images 128 "
		 "--size 500x375", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "dataset make: %s", out);
	snprintf(cmd, sizeof(cmd), "%s train --model resnet18 --batch 32 --steps 4 --workers 4 "
		 "--precision bf16 --data %s --decode auto --eval-every 0 --out %s/train_auto",
		 test_bin(), dir, tmp);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	const char *line = strstr(out, "decode auto: gpu ");
	CHECK_MSG(line && strstr(line, " img/s (4 workers) -> "), "%s", out);
	printf("    %.*s\n", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
	snprintf(path, sizeof(path), "%s/train_auto/train.json", tmp);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err), *st = json_object_get(j, "settings");
	json_t *p = json_object_get(st, "decode_probe");
	CHECK_MSG(j && json_is_object(p), "%s: %s; train said:\n%s", path, err.text, out);
	if (test_failed()) {
		json_decref(j);
		return;
	}
	double g = json_real_value(json_object_get(p, "gpu_img_s"));
	double c = json_real_value(json_object_get(p, "cpu_img_s"));
	const char *used = json_string_value(json_object_get(st, "decode"));
	CHECK_MSG(g > 0 && c > 0, "gpu %g cpu %g", g, c);
	CHECK(json_is_null(json_object_get(p, "gpu_note")));
	CHECK_EQ_INT(json_integer_value(json_object_get(p, "cpu_workers")), 4);
	CHECK_MSG(used && !strcmp(used, g > c ? "gpu" : "cpu"), "gpu %g cpu %g took %s", g, c, used);
	CHECK_MSG(line && strstr(line, g > c ? "-> gpu" : "-> cpu"), "%s", out);
	CHECK_MSG(strstr(out, g > c ? "decoded and augmented on the GPU" : "batches per epoch, 4 workers"),
		  "%s", out);
	json_decref(j);

	struct dataset *ds, *fresh;
	CHECK_EQ_INT(dataset_open(dir, 1, SIZE, &ds), 0);
	CHECK_EQ_INT(dataset_open(dir, 1, SIZE, &fresh), 0);
	if (test_failed())
		return;
	struct decode_probe_config pc = {
		.cpu = { .batch = 32, .workers = 4, .prefetch = 2, .size = SIZE, .train = 1,
			 .drop_last = 1, .seed = 3, .start_batch = 5 },
		.gpu = { .batch = 32, .size = SIZE, .train = 1, .drop_last = 1, .seed = 3,
			 .layout = GPU_BATCH_NCHW_F32, .start_batch = 5 },
	};
	struct decode_probe pr;
	CHECK_MSG(decode_probe_run(ds, &pc, &pr) == 0, "%s", gp_errmsg());
	CHECK_MSG(pr.gpu_img_s > 0 && pr.cpu_img_s > 0 && !pr.note[0], "%s", pr.note);
	CHECK_EQ_INT(pr.use_gpu, pr.gpu_img_s > pr.cpu_img_s);
	size_t floats = (size_t)32 * 3 * SIZE * SIZE;
	float *hx[2] = { malloc(floats * sizeof(float)), malloc(floats * sizeof(float)) };
	struct dataset *dss[2] = { ds, fresh };
	struct loader *cl[2] = { 0 };
	struct gpu_loader *gl[2] = { 0 };
	for (int k = 0; k < 2; k++)
		CHECK_MSG((pr.use_gpu ? gpu_loader_create(dss[k], &pc.gpu, &gl[k])
				      : loader_create(dss[k], &pc.cpu, &cl[k])) == 0, "%s", gp_errmsg());
	for (int b = 0; !test_failed() && b < 3; b++) {
		int32_t labels[2][32];
		int n[2], pos[2];
		struct batch *cb[2];
		for (int k = 0; k < 2; k++) {
			if (pr.use_gpu) {
				struct gpu_batch gb;
				CHECK_MSG(gpu_loader_next(gl[k], &gb) == 0, "%s", gp_errmsg());
				if (test_failed())
					break;
				CHECK_EQ_INT(cudaMemcpy(hx[k], gb.x, floats * sizeof(float),
							cudaMemcpyDeviceToHost), cudaSuccess);
				memcpy(labels[k], gb.labels, sizeof(int32_t) * gb.n);
				n[k] = gb.n, pos[k] = gb.epoch * 4 + gb.index;
			} else {
				CHECK_MSG(loader_next(cl[k], &cb[k]) == 0, "%s", gp_errmsg());
				if (test_failed())
					break;
				memcpy(hx[k], cb[k]->x, floats * sizeof(float));
				memcpy(labels[k], cb[k]->labels, sizeof(int32_t) * cb[k]->n);
				n[k] = cb[k]->n, pos[k] = cb[k]->epoch * 4 + cb[k]->index;
				loader_release(cl[k], cb[k]);
			}
		}
		if (test_failed())
			break;
		CHECK_EQ_INT(n[0], 32);
		CHECK_EQ_INT(n[1], 32);
		CHECK_EQ_INT(pos[0], 5 + b);
		CHECK_EQ_INT(pos[1], 5 + b);
		CHECK(!memcmp(labels[0], labels[1], sizeof(labels[0])));
		CHECK_MSG(!memcmp(hx[0], hx[1], floats * sizeof(float)), "batch %d: pixels differ", b);
	}
	for (int k = 0; k < 2; k++) {
		gpu_loader_destroy(gl[k]);
		loader_destroy(cl[k]);
		free(hx[k]);
	}
	dataset_close(ds);
	dataset_close(fresh);
}

/* Options that change how the decoder runs, never what it makes, give the default
 * decoder's batch bit for bit, batch after batch: nvJPEG's own allocators instead of
 * the decoder's stream-ordered ones (also the fallback where the device has no memory
 * pools or nvJPEG refuses ours; they free and take again between batches), whole
 * images instead of the default's region decodes (on the JPEG engines the default
 * decodes every image of the batch as the region its crop reads, and must say so),
 * and the colour and augment kernels in two passes instead of the default's one. */
TEST(gpu_decode_options_give_the_same_batch)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 64, RUNS = 3 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH];
	static unsigned char failed[BATCH];
	items_repeat(&f, BATCH, 5, items);
	size_t bytes = (size_t)BATCH * 3 * SIZE * SIZE * 2;
	uint16_t *want = malloc(bytes), *got = malloc(bytes);
	struct gpu_decoder *dflt = NULL;
	CHECK_MSG(gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &dflt) == 0, "%s",
		  gp_errmsg());
	if (!want || !got || test_failed())
		goto out;
	CHECK_EQ_INT(gpu_decoder_run(dflt, 0, items, BATCH, failed), 0);
	CHECK(cudaMemcpy(want, gpu_decoder_output(dflt, 0), bytes, cudaMemcpyDeviceToHost) ==
	      cudaSuccess);
	struct gpu_decode_stats ds0;
	gpu_decoder_get_stats(dflt, &ds0);
	if (!strcmp(gpu_decoder_backend(dflt), "hardware")) {
		CHECK_MSG(ds0.region_decoded == BATCH, "%ld of %d images decoded as regions",
			  ds0.region_decoded, BATCH);
		double share = ds0.region_pixels / ds0.region_full_pixels;
		printf("    regions: %ld images, %.1f%% of their pixels\n", ds0.region_decoded,
		       100 * share);
		CHECK(share > 0.05 && share < 1.0);
	}
	/* the planes it decodes go through the one-pass kernel */
	printf("    one pass: %ld of %d images\n", ds0.one_pass, BATCH);
	CHECK_EQ_INT(ds0.one_pass, ds0.hw_decoded + ds0.cuda_decoded - ds0.nvjpeg_chroma);
	for (int v = 0; v < 3 && !test_failed(); v++) {
		const char *what = v == 0 ? "nvJPEG's allocators" : v == 1 ? "whole images" : "two passes";
		struct gpu_decoder_opts o = gpu_decoder_opts_default();
		o.default_allocators = v == 0;
		o.whole_images = v == 1;
		o.two_pass = v == 2;
		struct gpu_decoder *d = NULL;
		CHECK_MSG(gpu_decoder_create_opts(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &o, &d) == 0,
			  "%s: %s", what, gp_errmsg());
		for (int r = 0; d && r < RUNS && !test_failed(); r++) {
			CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0);
			for (int i = 0; i < BATCH; i++)
				CHECK_EQ_INT(failed[i], 0);
			CHECK(cudaMemcpy(got, gpu_decoder_output(d, 0), bytes,
					 cudaMemcpyDeviceToHost) == cudaSuccess);
			CHECK_MSG(!memcmp(want, got, bytes), "%s: batch %d differs from the default's",
				  what, r);
		}
		struct gpu_decode_stats st;
		if (d) {
			gpu_decoder_get_stats(d, &st);
			if (v == 1)
				CHECK_EQ_INT(st.region_decoded, 0);
			if (v == 2)
				CHECK_EQ_INT(st.one_pass, 0);
		}
		gpu_decoder_destroy(d);
	}
out:
	gpu_decoder_destroy(dflt);
	free(want);
	free(got);
	jpegs_close(ds, &ctx, &f);
}

/* Headers read ahead by a parser on another thread (what the GPU loader's reading
 * thread does) route every item as gpu_decoder_run's own reading does: the same
 * batch bit for bit, the same count on each path. A parse runs on a second thread
 * while the decoder decodes, as in the loader (nvJPEG's handle is shared, each
 * thread with its own stream). */
struct parse_job {
	struct gpu_decode_parser *p;
	struct gpu_decode_item *items;
	int n;
};

static void *parse_main(void *arg)
{
	struct parse_job *j = arg;
	gpu_decoder_parse(j->p, j->items, j->n);
	return NULL;
}

TEST(gpu_decode_parse_ahead_routes_the_same)
{
	if (!gpu_decode_ready())
		return;
	enum { BATCH = 64 };
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	static struct gpu_decode_item items[BATCH], ahead[BATCH];
	static unsigned char failed[BATCH], failed_ahead[BATCH];
	items_repeat(&f, BATCH, 21, items);
	memcpy(ahead, items, sizeof(items));
	size_t bytes = (size_t)BATCH * 3 * SIZE * SIZE * 2;
	uint16_t *want = malloc(bytes), *got = malloc(bytes);
	struct gpu_decoder *d = NULL;
	struct gpu_decode_parser *p = NULL;
	CHECK_MSG(gpu_decoder_create(0, BATCH, SIZE, GPU_BATCH_NHWC_BF16, 1, &d) == 0, "%s",
		  gp_errmsg());
	CHECK_MSG(d && gpu_decode_parser_create(d, &p) == 0, "%s", gp_errmsg());
	if (!want || !got || test_failed())
		goto out;
	struct gpu_decode_stats s0, s1, s2;
	gpu_decoder_get_stats(d, &s0);
	/* the parse of `ahead` on a thread while the decoder decodes `items` */
	struct parse_job job = { p, ahead, BATCH };
	pthread_t th;
	CHECK_EQ_INT(pthread_create(&th, NULL, parse_main, &job), 0);
	CHECK_EQ_INT(gpu_decoder_run(d, 0, items, BATCH, failed), 0);
	pthread_join(th, NULL);
	CHECK(cudaMemcpy(want, gpu_decoder_output(d, 0), bytes, cudaMemcpyDeviceToHost) ==
	      cudaSuccess);
	gpu_decoder_get_stats(d, &s1);
	for (int i = 0; i < BATCH; i++)
		CHECK_MSG(ahead[i].hdr.parsed && ahead[i].hdr.info_ok, "item %d not parsed", i);
	CHECK_EQ_INT(gpu_decoder_run(d, 0, ahead, BATCH, failed_ahead), 0);
	CHECK(cudaMemcpy(got, gpu_decoder_output(d, 0), bytes, cudaMemcpyDeviceToHost) ==
	      cudaSuccess);
	gpu_decoder_get_stats(d, &s2);
	CHECK_EQ_INT(s1.parsed_ahead - s0.parsed_ahead, 0);
	CHECK_EQ_INT(s2.parsed_ahead - s1.parsed_ahead, BATCH);
	CHECK_EQ_INT(s2.hw_decoded - s1.hw_decoded, s1.hw_decoded - s0.hw_decoded);
	CHECK_EQ_INT(s2.cuda_decoded - s1.cuda_decoded, s1.cuda_decoded - s0.cuda_decoded);
	CHECK_EQ_INT(s2.cpu_fallback - s1.cpu_fallback, s1.cpu_fallback - s0.cpu_fallback);
	CHECK(!memcmp(failed, failed_ahead, sizeof(failed)));
	CHECK_MSG(!memcmp(want, got, bytes), "the batch differs with headers read ahead");
	printf("    %ld hardware, %ld CUDA, %ld CPU per run; reading headers %.2f ms in the run, "
	       "%.2f ms with them read ahead\n", s1.hw_decoded - s0.hw_decoded,
	       s1.cuda_decoded - s0.cuda_decoded, s1.cpu_fallback - s0.cpu_fallback,
	       s1.parse_ms - s0.parse_ms, s2.parse_ms - s1.parse_ms);
out:
	gpu_decode_parser_destroy(p);
	gpu_decoder_destroy(d);
	free(want);
	free(got);
	jpegs_close(ds, &ctx, &f);
}

/* A JPEG cut short after the part its crop reads fails on the GPU path as on the CPU
 * path (libjpeg's "premature end" makes it corrupt there), although a region decode
 * of the crop alone would need none of the missing data: a file without its end
 * marker is decoded whole. The intact file beside it decodes (one by one, once the
 * batched call with the bad file has failed). */
TEST(gpu_decode_truncated_file_fails_with_regions)
{
	if (!gpu_decode_ready())
		return;
	struct dataset *ds;
	struct image_ctx ctx;
	struct files f;
	if (jpegs_open(&ds, &ctx, &f) < 0)
		return;
	struct gpu_decoder *d = NULL;
	CHECK_MSG(gpu_decoder_create(0, 2, SIZE, GPU_BATCH_NHWC_BF16, 1, &d) == 0, "%s", gp_errmsg());
	struct gpu_decode_item items[2];
	unsigned char failed[2] = { 9, 9 };
	for (int i = 0; i < 2 && d; i++) {
		items[i] = (struct gpu_decode_item){ .data = f.data[0], .len_bytes = f.len[0],
						     .kind = f.kind[0], .w = f.w[0], .h = f.h[0], .dst = i };
		/* a crop in the top-left corner: its MCUs come first in the file */
		items[i].geo.box = (struct resample_box){ 8, 8, 108, 88, 0, 0, f.w[0], f.h[0] };
	}
	items[0].len_bytes = f.len[0] * 6 / 10;
	if (d) {
		CHECK_EQ_INT(gpu_decoder_run(d, 0, items, 2, failed), 0);
		CHECK_MSG(failed[0] == 1, "the truncated file was decoded (failed = %d)", failed[0]);
		CHECK_EQ_INT(failed[1], 0);
		struct gpu_decode_stats st;
		gpu_decoder_get_stats(d, &st);
		printf("    truncated: %s; %ld decoded as regions, %ld on the CPU, %ld failed\n",
		       gpu_decoder_error(d, 0), st.region_decoded, st.cpu_fallback, st.failed);
	}
	gpu_decoder_destroy(d);
	jpegs_close(ds, &ctx, &f);
}
