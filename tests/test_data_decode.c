/* `--decode cpu|gpu|auto` on a machine where GPU decoding may be missing: the option,
 * the nvJPEG loader's report of a missing library, the clear error line of
 * `--decode gpu`, and the sample geometry that both decode paths share. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/tuning.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/gpu_loader.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/nvjpeg.h"
#include "data/transform.h"
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

/* cpu never probes; gpu without nvJPEG is EINVAL (exit 2) naming why; auto falls back;
 * gpu where the command cannot take GPU batches is EINVAL even with a GPU. */
TEST(decode_resolve_without_nvjpeg)
{
	nvjpeg_point_at(MISSING_NVJPEG);
	int use_gpu = 7;
	CHECK_EQ_INT(decode_resolve(DECODE_CPU, 1, "loader", &use_gpu), 0);
	CHECK_EQ_INT(use_gpu, 0);
	use_gpu = 7;
	CHECK_EQ_INT(decode_resolve(DECODE_AUTO, 1, "loader", &use_gpu), 0);
	CHECK_EQ_INT(use_gpu, 0);
	CHECK_EQ_INT(decode_resolve(DECODE_GPU, 1, "loader", &use_gpu), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "--decode gpu needs a CUDA GPU and nvJPEG: ") == gp_errmsg(),
		  "%s", gp_errmsg());
	CHECK_EQ_INT(use_gpu, 0);
	nvjpeg_point_at(NULL);
	char why[300];
	if (decode_gpu_probe(why, sizeof(why))) {
		CHECK_EQ_INT(decode_resolve(DECODE_GPU, 0, "train", &use_gpu), GP_EINVAL);
		CHECK_MSG(strstr(gp_errmsg(), "train does not take GPU-decoded batches"), "%s",
			  gp_errmsg());
		CHECK_EQ_INT(decode_resolve(DECODE_AUTO, 0, "train", &use_gpu), 0);
		CHECK_EQ_INT(use_gpu, 0);
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
	test_check_bad("workers --data tests/data/bad --decode gpu", "--decode gpu");
	test_check_bad("profile --decode gpu", "--decode gpu");
	test_check_bad("advise --decode gpu", "--decode gpu");
	test_check_bad("loader --data tests/data/bad --decode gpu", "--decode gpu needs");
	test_check_bad("loader --data tests/data/bad --decode fast", "--decode must be cpu, gpu or auto");
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
