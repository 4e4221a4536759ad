/* `--decode cpu|gpu|auto` on a machine where GPU decoding may be missing: the option,
 * the nvJPEG loader's report of a missing library, the clear error line of
 * `--decode gpu`, and the sample geometry that both decode paths share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/train_json.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tuning.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/decode_split.h"
#include "data/decode_probe.h"
#include "data/gpu_loader.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/nvjpeg.h"
#include "data/transform.h"
#include "loader_standin.h"
#include "test.h"

#define MISSING_NVJPEG "/nonexistent/libnvjpeg.so.13"

static void nvjpeg_point_at(const char *path)
{
	if (path)
		setenv("GPUPERF_NVJPEG_LIB", path, 1);
	else
		unsetenv("GPUPERF_NVJPEG_LIB");
	tuning_reload(); /* read once otherwise */
}

TEST(decode_mode_names_and_parse)
{
	enum decode_mode m = DECODE_GPU;
	CHECK_EQ_INT(decode_mode_parse("cpu", &m), 0);
	CHECK_EQ_INT(m, DECODE_CPU);
	CHECK_EQ_INT(decode_mode_parse("gpu", &m), 0);
	CHECK_EQ_INT(m, DECODE_GPU);
	CHECK_EQ_INT(decode_mode_parse("auto", &m), 0);
	CHECK_EQ_INT(m, DECODE_AUTO);
	CHECK_EQ_INT(decode_mode_parse("GPU", &m), GP_EINVAL);
	CHECK_MSG(!strcmp(gp_errmsg(), "--decode must be cpu, gpu or auto (got 'GPU')"), "%s",
		  gp_errmsg());
	CHECK(!strcmp(decode_mode_name_at(2), "auto") && !decode_mode_name_at(3));
}

TEST(nvjpeg_missing_library_is_enodev)
{
	nvjpeg_point_at(MISSING_NVJPEG);
	const struct nvjpeg_api *api = NULL;
	CHECK_EQ_INT(nvjpeg_open(&api), GP_ENODEV);
	CHECK(api == NULL);
	CHECK_MSG(strstr(gp_errmsg(), "nvJPEG not available: ") == gp_errmsg(), "%s", gp_errmsg());
	CHECK_MSG(strstr(gp_errmsg(), MISSING_NVJPEG) != NULL, "%s", gp_errmsg());
	CHECK_MSG(!strchr(gp_errmsg(), '\n'), "message has a newline: %s", gp_errmsg());
	/* the tuning table shows the setting */
	char buf[TUNING_PATH_MAX];
	int found = 0;
	for (int i = 0; i < tuning_table_len; i++)
		if (!strcmp(tuning_table[i].name, "GPUPERF_NVJPEG_LIB")) {
			tuning_value_str(tuning_get(), i, buf, sizeof(buf));
			CHECK_MSG(!strcmp(buf, MISSING_NVJPEG), "shown as %s", buf);
			found = 1;
		}
	CHECK(found);
	nvjpeg_point_at(NULL);
	/* a library without nvJPEG's symbols is named with the first one missing */
	nvjpeg_point_at("libm.so.6");
	CHECK_EQ_INT(nvjpeg_open(&api), GP_ENODEV);
	CHECK_MSG(strstr(gp_errmsg(), "libm.so.6 lacks nvjpegCreateEx") != NULL, "%s", gp_errmsg());
	nvjpeg_point_at(NULL);
	CHECK(!strcmp(nvjpeg_status_name(3), "NVJPEG_STATUS_BAD_JPEG"));
	CHECK(!strcmp(nvjpeg_status_name(99), "NVJPEG_STATUS_UNKNOWN"));
}

/* cpu never probes; gpu without nvJPEG is EINVAL (exit 2) naming why; auto falls back
 * to cpu without measuring anything; gpu where the command cannot take GPU batches is
 * EINVAL even with a GPU, and auto there is cpu. */
TEST(decode_resolve_without_nvjpeg)
{
	nvjpeg_point_at(MISSING_NVJPEG);
	enum decode_mode m = DECODE_GPU;
	CHECK_EQ_INT(decode_resolve(DECODE_CPU, 1, "loader", &m), 0);
	CHECK_EQ_INT(m, DECODE_CPU);
	m = DECODE_GPU;
	CHECK_EQ_INT(decode_resolve(DECODE_AUTO, 1, "loader", &m), 0);
	CHECK_EQ_INT(m, DECODE_CPU);
	CHECK_EQ_INT(decode_resolve(DECODE_GPU, 1, "loader", &m), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "--decode gpu needs a CUDA GPU and nvJPEG: ") == gp_errmsg(),
		  "%s", gp_errmsg());
	CHECK_EQ_INT(m, DECODE_CPU);
	nvjpeg_point_at(NULL);
	char why[300];
	if (decode_gpu_probe(why, sizeof(why))) {
		CHECK_EQ_INT(decode_resolve(DECODE_GPU, 0, "train", &m), GP_EINVAL);
		CHECK_MSG(strstr(gp_errmsg(), "train decodes on the GPU only from a folder of JPEG "
				  "files onto a CUDA device"), "%s", gp_errmsg());
		CHECK_EQ_INT(decode_resolve(DECODE_AUTO, 0, "train", &m), 0);
		CHECK_EQ_INT(m, DECODE_CPU);
		/* both can run: left for the probe once the data is open */
		CHECK_EQ_INT(decode_resolve(DECODE_AUTO, 1, "train", &m), 0);
		CHECK_EQ_INT(m, DECODE_AUTO);
	} else {
		CHECK_MSG(why[0] != 0, "a probe that says no says why");
	}
}

/* `--decode gpu` where it cannot run: one line, exit 2, before any work (train would
 * otherwise print its device note first; loader would start reading). */
TEST(decode_gpu_option_is_one_clear_line)
{
	nvjpeg_point_at(MISSING_NVJPEG);
	test_check_bad("train --model simple_cnn --decode gpu --steps 1", "--decode gpu");
	test_check_bad("train --model simple_cnn --data tests/data/bad --decode gpu --steps 1",
		       "--decode gpu needs");
	test_check_bad("workers --data tests/data/bad --decode gpu --steps 1", "--decode gpu needs");
	test_check_bad("profile --data tests/data/bad --decode gpu", "--decode gpu needs");
	test_check_bad("advise --data tests/data/bad --decode gpu", "--decode gpu needs");
	test_check_bad("workers --data tests/data/bad --decode gpu", "--decode gpu");
	test_check_bad("profile --decode gpu", "--decode gpu");
	test_check_bad("advise --decode gpu", "--decode gpu");
	test_check_bad("loader --data tests/data/bad --decode gpu", "--decode gpu needs");
	test_check_bad("loader --data tests/data/bad --decode fast", "--decode must be cpu, gpu or auto");
	test_check_bad("train --model simple_cnn --data tests/data/bad --decode-threads 2 --steps 1",
		       "--decode-threads is for --decode gpu");
	test_check_bad("loader --data tests/data/bad --decode cpu --decode-threads 2",
		       "--decode-threads is for --decode gpu");
	test_check_bad("train --model simple_cnn --data tests/data/bad --decode gpu "
		       "--decode-threads -1 --steps 1", "--decode-threads");
	char cmd[512], out[8192];
	snprintf(cmd, sizeof(cmd), "%s loader --data tests/data/bad --decode gpu --batches 1 "
		 "--workers 0 2>/dev/null; echo rc=$?", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "rc=2"), "%s", out);
	/* auto without nvJPEG is the CPU path, one row per worker count */
	snprintf(cmd, sizeof(cmd), "%s loader --data tests/data/bad --decode auto --batches 2 "
		 "--batch 4 --size 16 --workers 0,1", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "\n       0 ") && strstr(out, "\n       1 "), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s train --help", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "--decode") && strstr(out, "cpu | gpu | auto"), "%s", out);
	nvjpeg_point_at(NULL);
}

/* The geometry both decoders take: train is RandomResizedCrop then the coin, drawn
 * from rng_seed(seed, 0) as the CPU path always drew them; eval is Resize + CenterCrop. */
TEST(decode_sample_geometry_matches_cpu_draws)
{
	int flips = 0, w = 500, h = 375, size = 224;
	for (uint64_t i = 0; i < 64; i++) {
		uint64_t seed = sample_seed(1, (int)(i % 3), (int)i);
		struct sample_geometry g;
		sample_geometry_make(1, size, seed, w, h, &g);
		struct rng r;
		struct crop_box c;
		struct resample_box b;
		rng_seed(&r, seed, 0);
		rrc_get_params(&r, w, h, &c);
		int flip = rng_uniform(&r) < 0.5;
		crop_resample_box(&c, &b);
		CHECK(!memcmp(&g.box, &b, sizeof(b)));
		CHECK_EQ_INT(g.flip, flip);
		CHECK(g.need_w == (double)w * size / c.w && g.need_h == (double)h * size / c.h);
		CHECK(c.w >= 1 && c.x + c.w <= w && c.y + c.h <= h);
		flips += g.flip;
	}
	CHECK(flips > 10 && flips < 54);
	/* eval: 500x375 -> 298x256 (Resize 256 of the short side), centre 224 */
	struct sample_geometry e;
	sample_geometry_make(0, size, 12345, w, h, &e);
	CHECK_EQ_INT(e.flip, 0);
	CHECK(e.need_w == 341 && e.need_h == 256);
	CHECK(e.box.wx0 == 0 && e.box.wx1 == w && e.box.wy0 == 0 && e.box.wy1 == h);
	CHECK(fabs(e.box.x0 - 58 * 500.0 / 341) < 1e-12 && fabs(e.box.y0 - 16 * 375.0 / 256) < 1e-12);
	/* and the loader's replacement rule is the one the GPU loader calls */
	CHECK_EQ_INT(loader_replacement(99, 2, 1000), (int)(mix64(99 + 3) % 1000));
	int32_t p1[50], p2[50];
	loader_epoch_order(7, 1, 50, 3, p1);
	loader_epoch_order(7, 1, 50, 3, p2);
	CHECK(!memcmp(p1, p2, sizeof(p1)));
	long sum = 0;
	for (int i = 0; i < 50; i++)
		sum += p1[i];
	CHECK_EQ_INT(sum, 49 * 50 / 2);
	loader_epoch_order(7, 0, 50, 3, p1);
	for (int i = 0; i < 50; i++)
		CHECK_EQ_INT(p1[i], i);
}

/* The GPU loader takes files only, and says so; without a GPU or nvJPEG it is
 * GP_ENODEV with the reason (the batches themselves are tested in tests/gpu/). */
TEST(gpu_loader_refuses_what_it_cannot_decode)
{
	struct dataset *ds;
	struct gpu_loader *l = NULL;
	struct gpu_loader_config cfg = { .batch = 4, .size = 16, .train = 1, .seed = 1 };
	CHECK_EQ_INT(dataset_open("synthetic:32", 1, 16, &ds), 0);
	if (test_failed())
		return;
	CHECK_EQ_INT(gpu_loader_create(ds, &cfg, &l), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "needs a folder of JPEG files"), "%s", gp_errmsg());
	dataset_close(ds);
	CHECK_EQ_INT(dataset_open("tests/data/bad", 1, 16, &ds), 0);
	if (test_failed())
		return;
	cfg.size = 24;
	CHECK_EQ_INT(gpu_loader_create(ds, &cfg, &l), GP_EINVAL);
	cfg.size = 16;
	char why[300];
	int rc = gpu_loader_create(ds, &cfg, &l);
	if (decode_gpu_probe(why, sizeof(why))) {
		CHECK_MSG(rc == 0, "%s", gp_errmsg());
		gpu_loader_destroy(l);
	} else {
		CHECK_EQ_INT(rc, GP_ENODEV);
		CHECK(l == NULL);
	}
	dataset_close(ds);
}

/* 24 JPEGs of 500x375 (`dataset make`), made once: big enough that decoding them on
 * the CPU is far slower than a decoder that decodes nothing, and far faster than one
 * that sleeps 300 ms a batch. */
static const char *probe_folder(void)
{
	static char dir[600];
	if (dir[0])
		return dir;
	char cmd[1400], out[4096];
	snprintf(dir, sizeof(dir), "%s/probe_jpegs", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s' --classes 2 --images 24 "
		 "--size 500x375 --threads 1", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "dataset make: %s", out);
	return dir;
}

#define PROBE_BATCH 8
#define PROBE_SIZE 64
#define PROBE_START 3 /* a resumed run's position: the run starts there, not at 0 */

static struct decode_probe_config probe_config(void)
{
	return (struct decode_probe_config){
		.cpu = { .batch = PROBE_BATCH, .workers = 0, .prefetch = 1, .size = PROBE_SIZE,
			 .train = 1, .drop_last = 1, .seed = 5, .start_batch = PROBE_START },
		.gpu = { .batch = PROBE_BATCH, .size = PROBE_SIZE, .train = 1, .drop_last = 1,
			 .seed = 5, .start_batch = PROBE_START },
		.cap_s = 0.5,
	};
}

/* The batches of the mode picked, made as the run makes them (afresh, at its start
 * batch) on a dataset the probe has been through, against the same mode on a dataset
 * no probe touched: the same order, crops, labels, positions and counts. */
static void probe_check_run_batches(struct dataset *probed, const char *dir, int use_gpu)
{
	struct decode_probe_config pc = probe_config();
	struct dataset *fresh;
	CHECK_EQ_INT(dataset_open(dir, 1, PROBE_SIZE, &fresh), 0);
	if (test_failed())
		return;
	struct dataset *ds[2] = { probed, fresh };
	struct cpu_decoder cd[2];
	struct gpu_loader_decoder ops[2];
	struct loader *cl[2] = { 0 };
	struct gpu_loader *gl[2] = { 0 };
	for (int k = 0; k < 2; k++) {
		CHECK_EQ_INT(cpu_decoder_init(&cd[k], PROBE_BATCH, PROBE_SIZE), 0);
		ops[k] = (struct gpu_loader_decoder){ &cd[k], cpu_decoder_run, cpu_decoder_error,
						      cpu_decoder_output };
		int rc = use_gpu ? gpu_loader_create_with(ds[k], &pc.gpu, &ops[k], 1, &gl[k])
				 : loader_create(ds[k], &pc.cpu, &cl[k]);
		CHECK_MSG(rc == 0, "%s", gp_errmsg());
	}
	size_t floats = (size_t)3 * PROBE_SIZE * PROBE_SIZE;
	for (int b = 0; !test_failed() && b < 5; b++) {
		int32_t *labels[2];
		float *x[2];
		int n[2], epoch[2], index[2];
		struct batch *cb[2] = { 0 };
		struct gpu_batch gb[2];
		for (int k = 0; k < 2; k++) {
			if (use_gpu) {
				CHECK_MSG(gpu_loader_next(gl[k], &gb[k]) == 0, "%s", gp_errmsg());
				x[k] = gb[k].x, labels[k] = gb[k].labels, n[k] = gb[k].n;
				epoch[k] = gb[k].epoch, index[k] = gb[k].index;
			} else {
				CHECK_MSG(loader_next(cl[k], &cb[k]) == 0, "%s", gp_errmsg());
				x[k] = cb[k]->x, labels[k] = cb[k]->labels, n[k] = cb[k]->n;
				epoch[k] = cb[k]->epoch, index[k] = cb[k]->index;
			}
		}
		if (test_failed())
			break;
		CHECK_EQ_INT(n[0], n[1]);
		CHECK_EQ_INT(epoch[0], epoch[1]);
		CHECK_EQ_INT(index[0], index[1]);
		/* the run's first batch is its start batch, not the probe's last */
		if (b == 0)
			CHECK_EQ_INT(epoch[0] * 3 + index[0], PROBE_START);
		CHECK_MSG(!memcmp(labels[0], labels[1], sizeof(int32_t) * n[0]),
			  "gpu %d batch %d: labels differ", use_gpu, b);
		CHECK_MSG(!memcmp(x[0], x[1], sizeof(float) * floats * n[0]),
			  "gpu %d batch %d: pixels differ", use_gpu, b);
		for (int k = 0; k < 2 && !use_gpu; k++)
			loader_release(cl[k], cb[k]);
	}
	for (int k = 0; k < 2; k++) {
		gpu_loader_destroy(gl[k]);
		loader_destroy(cl[k]);
		cpu_decoder_free(&cd[k]);
	}
	dataset_close(fresh);
}

/* auto measures both and takes the faster: a GPU stand-in that sleeps 300 ms a batch
 * loses to the CPU loader, one that decodes nothing wins; each rate is real, the slow
 * one within what its sleep allows, and the cap stops the slow path after one timed
 * batch (warm-up 0.3 s, then one batch past the 0.5 s cap). The run's batches are
 * then those of the mode picked. */
TEST(decode_probe_picks_the_faster_path)
{
	const char *dir = probe_folder();
	if (test_failed())
		return;
	for (int fast = 0; fast <= 1 && !test_failed(); fast++) {
		struct dataset *ds;
		CHECK_EQ_INT(dataset_open(dir, 1, PROBE_SIZE, &ds), 0);
		if (test_failed())
			return;
		CHECK_EQ_INT(dataset_count(ds), 24);
		struct cpu_decoder cd;
		CHECK_EQ_INT(cpu_decoder_init(&cd, PROBE_BATCH, PROBE_SIZE), 0);
		cd.delay_ms = fast ? 0 : 300;
		cd.skip = fast;
		struct gpu_loader_decoder ops = cpu_decoder_ops(&cd);
		struct decode_probe_config pc = probe_config();
		struct decode_probe p;
		CHECK_MSG(decode_probe_run_with(ds, &pc, &ops, &p) == 0, "%s", gp_errmsg());
		CHECK_MSG(p.cpu_img_s > 0 && p.gpu_img_s > 0, "cpu %g gpu %g", p.cpu_img_s, p.gpu_img_s);
		CHECK_MSG(!p.note[0], "%s", p.note);
		CHECK_EQ_INT(p.cpu_workers, 0);
		CHECK_MSG(p.use_gpu == fast, "fast %d: gpu %.0f img/s, cpu %.0f img/s", fast,
			  p.gpu_img_s, p.cpu_img_s);
		if (!fast) {
			CHECK_MSG(p.gpu_img_s <= PROBE_BATCH / 0.3, "%g", p.gpu_img_s);
			/* warm-up batch and one timed batch, then the cap (the thread may
			 * have begun one more); uncapped, four would have been taken */
			CHECK_MSG(cd.full_runs >= 2 && cd.full_runs <= 3, "%d runs", cd.full_runs);
		} else {
			/* warm-up and DECODE_PROBE_BATCHES timed, plus what the thread ran ahead */
			CHECK_MSG(cd.full_runs >= 1 + DECODE_PROBE_BATCHES &&
				  cd.full_runs <= 1 + DECODE_PROBE_BATCHES + tuning_get()->decode_buffers,
				  "%d runs", cd.full_runs);
		}
		char line[512], want[64];
		decode_probe_describe(&p, line, sizeof(line));
		snprintf(want, sizeof(want), "gpu %.0f img/s, cpu ", p.gpu_img_s);
		CHECK_MSG(strstr(line, "decode auto: ") == line && strstr(line, want) &&
			  strstr(line, "img/s (0 workers) -> ") &&
			  !strcmp(line + strlen(line) - 3, fast ? "gpu" : "cpu"), "%s", line);
		cpu_decoder_free(&cd);
		probe_check_run_batches(ds, dir, p.use_gpu);
		dataset_close(ds);
	}
}

/* A GPU loader that fails in the probe leaves cpu with the reason, not an error. */
TEST(decode_probe_gpu_failure_stays_cpu)
{
	const char *dir = probe_folder();
	struct dataset *ds;
	if (test_failed())
		return;
	CHECK_EQ_INT(dataset_open(dir, 1, PROBE_SIZE, &ds), 0);
	if (test_failed())
		return;
	struct cpu_decoder cd;
	CHECK_EQ_INT(cpu_decoder_init(&cd, PROBE_BATCH, PROBE_SIZE), 0);
	cd.fail_batch = 0;
	cd.skip = 1;
	struct gpu_loader_decoder ops = cpu_decoder_ops(&cd);
	struct decode_probe_config pc = probe_config();
	struct decode_probe p;
	CHECK_MSG(decode_probe_run_with(ds, &pc, &ops, &p) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(p.use_gpu, 0);
	CHECK(p.gpu_img_s == 0 && p.cpu_img_s > 0);
	CHECK_MSG(strstr(p.note, "injected failure at batch 0"), "%s", p.note);
	char line[512];
	decode_probe_describe(&p, line, sizeof(line));
	CHECK_MSG(strstr(line, "decode auto: gpu did not run (") == line &&
		  strstr(line, "injected failure") && strstr(line, "-> cpu"), "%s", line);
	/* and the real GPU loader, where none can run, is a reason too */
	if (!decode_gpu_probe(line, sizeof(line))) {
		CHECK_MSG(decode_probe_run(ds, &pc, &p) == 0, "%s", gp_errmsg());
		CHECK(!p.use_gpu && p.note[0] && p.cpu_img_s > 0);
	}
	cpu_decoder_free(&cd);
	dataset_close(ds);
}

/* Without a GPU, train --decode auto is the CPU path with no probe: settings say
 * "decode": "cpu" and "decode_probe": null, and the log has no probe line. */
TEST(decode_auto_train_without_gpu_is_cpu)
{
	char why[300];
	if (decode_gpu_probe(why, sizeof(why))) {
		test_skip("a GPU decodes here: tests/gpu covers auto's probe");
		return;
	}
	const char *dir = test_tmpdir();
	char cmd[1200], out[16384], path[700];
	snprintf(cmd, sizeof(cmd), "%s train --model simple_cnn --data tests/data/bad --decode auto "
		 "--steps 2 --batch 2 --size 16 --eval-every 0 --out '%s/auto_train'", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK_MSG(!strstr(out, "decode auto:"), "%s", out);
	snprintf(path, sizeof(path), "%s/auto_train/train.json", dir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err), *st = json_object_get(j, "settings");
	CHECK_MSG(j, "%s: %s", path, err.text);
	CHECK(!strcmp(json_string_value(json_object_get(st, "decode")), "cpu"));
	CHECK(json_is_null(json_object_get(st, "decode_probe")));
	json_decref(j);
}

/* The settings' record of a probe: both rates and the workers, or the GPU's reason. */
TEST(decode_probe_json_fields)
{
	struct train_result r;
	memset(&r, 0, sizeof(r));
	json_t *j = train_decode_probe_json(&r);
	CHECK(json_is_null(j));
	json_decref(j);
	r.decode_probed = 1;
	r.decode_probe = (struct decode_probe){ .cpu_img_s = 8007, .gpu_img_s = 12440,
						.cpu_workers = 16, .use_gpu = 1 };
	j = train_decode_probe_json(&r);
	CHECK_NEAR(json_real_value(json_object_get(j, "gpu_img_s")), 12440, 1e-9);
	CHECK_NEAR(json_real_value(json_object_get(j, "cpu_img_s")), 8007, 1e-9);
	CHECK_EQ_INT(json_integer_value(json_object_get(j, "cpu_workers")), 16);
	CHECK(json_is_null(json_object_get(j, "gpu_note")));
	json_decref(j);
	snprintf(r.decode_probe.note, sizeof(r.decode_probe.note), "no memory");
	j = train_decode_probe_json(&r);
	CHECK(json_is_null(json_object_get(j, "gpu_img_s")));
	CHECK(!strcmp(json_string_value(json_object_get(j, "gpu_note")), "no memory"));
	json_decref(j);
	char line[256];
	r.decode_probe.note[0] = 0;
	decode_probe_describe(&r.decode_probe, line, sizeof(line));
	CHECK_MSG(!strcmp(line, "decode auto: gpu 12440 img/s, cpu 8007 img/s (16 workers) -> gpu"),
		  "%s", line);
}

/* --decode-threads' split: nb / 8 until both sides are measured, then each side's
 * share of the images in proportion to its rate, so both finish together; the moving
 * averages follow a change (the GPU slowed down by a training step beside it). */
TEST(decode_split_balances_the_two_rates)
{
	struct decode_split s = { 0 };
	CHECK_EQ_INT(decode_split_cpu_count(&s, 256, 8), 32);
	CHECK_EQ_INT(decode_split_cpu_count(&s, 256, 0), 0);
	CHECK_EQ_INT(decode_split_cpu_count(&s, 1, 8), 0);
	decode_split_update(&s, 20.0, 224, 0, 0); /* the first batch: GPU measured only */
	CHECK_EQ_INT(decode_split_cpu_count(&s, 256, 8), 32);
	decode_split_update(&s, 0, 0, 32 * 2.0, 32);
	CHECK(fabs(s.gpu_ms_img - 20.0 / 224) < 1e-12 && fabs(s.cpu_ms_img - 2.0) < 1e-12);
	/* GPU 11.2 img/ms, 8 threads at 2 ms an image 4 img/ms: 256 x 4 / 15.2 = 67.4 */
	CHECK_EQ_INT(decode_split_cpu_count(&s, 256, 8), 67);
	/* both finish together: 189 images at 20/224 ms = 16.9 ms, 67 x 2 / 8 = 16.75 ms */
	for (int i = 0; i < 40; i++) /* the GPU twice as slow: the CPU's share grows */
		decode_split_update(&s, 40.0, 224, 0, 0);
	CHECK(fabs(s.gpu_ms_img - 40.0 / 224) < 1e-6);
	CHECK_EQ_INT(decode_split_cpu_count(&s, 256, 8), 107); /* 256 x 4 / (5.6 + 4) = 106.7 */
	decode_split_update(&s, 1000.0, 1, 0, 0); /* never all to one side */
	CHECK_EQ_INT(decode_split_cpu_count(&s, 256, 64), 255);
}
