/* gpuperf amp on the CPU: bad input is one clear line, mixed precision without a GPU
 * is refused up front, and an fp32 run at tiny sizes writes the result, the CSV and
 * the chart. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "report/result.h"
#include "test.h"

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	CHECK_MSG(json_is_number(v), "\"%s\" is missing or not a number", key);
	return json_number_value(v);
}

static const char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	CHECK_MSG(s != NULL, "\"%s\" is missing or not a string", key);
	return s ? s : "";
}

TEST(amp_command_bad_input_one_clear_line)
{
	test_check_bad("amp --device cpu --precisions fp32,fp8", "unknown precision 'fp8'");
	test_check_bad("amp --device cpu --precisions fp32,,tf32", "--precisions");
	test_check_bad("amp --device cpu --precisions fp32,fp32", "'fp32' is given twice");
	test_check_bad("amp --device cpu --precisions fp32 --batches ,", "--batches: give at least one");
	test_check_bad("amp --device cpu --precisions fp32 --batches ''", "--batches: give at least one");
	test_check_bad("amp --device cpu --precisions fp32 --batches 64,0", "--batches must be between 1 and 65536 (got 0)");
	test_check_bad("amp --device cpu --precisions fp32 --steps 0", "--steps must be between 1 and 10000000 (got 0)");
	test_check_bad("amp --device cpu --model vgg16", "unknown model 'vgg16'");
	test_check_bad("amp --device cpu --precisions fp32 --layout chwn", "--layout must be");
	/* mixed precision needs the CUDA backend: said once, before anything runs */
	test_check_bad("amp --device cpu --precisions fp32,fp16", "amp needs a CUDA GPU");
	test_check_bad("amp --device cpu --precisions bf16", "amp needs a CUDA GPU");
	test_check_bad("amp --device cpu", "amp needs a CUDA GPU");
}

/* Without a GPU the default device (auto) falls back to the CPU, where the default
 * precisions include fp16: still one line, no note before it. */
TEST(amp_command_no_gpu_default_is_one_line)
{
	char out[4096];
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s info", test_bin());
	test_run(cmd, out, sizeof(out));
	if (strstr(out, "GPU             none") == NULL)
		SKIP("a GPU is present");
	test_check_bad("amp --model simple_cnn", "amp needs a CUDA GPU");
}

TEST(amp_command_cpu_fp32_result_csv_and_chart)
{
	char dir[512], cmd[2048], out[16384], path[600];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s amp --model simple_cnn --size 32 --batches 2,4 "
		 "--precisions fp32 --steps 2 --device cpu --out %s --csv", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "amp exited %d: %s", rc, out);
	/* a progress line per cell, then the table */
	CHECK(strstr(out, "batch 2 fp32: step 2/2") != NULL);
	CHECK(strstr(out, "batch 4 fp32: step 2/2") != NULL);
	CHECK(strstr(out, "speed-up vs fp32") != NULL);
	CHECK(strstr(out, "1.00x") != NULL);
	snprintf(path, sizeof(path), "%s/amp.json", dir);
	CHECK(strstr(out, path) != NULL);

	json_t *res = NULL;
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	CHECK(!strcmp(str(res, "command"), "amp"));
	CHECK(json_is_null(json_object_get(res, "gpu")));
	json_t *set = json_object_get(res, "settings");
	CHECK(!strcmp(str(set, "model"), "simple_cnn"));
	CHECK_EQ_INT(num(set, "steps"), 2);
	CHECK_EQ_INT(num(set, "size"), 32);
	CHECK(!strcmp(str(set, "device"), "cpu"));
	CHECK(!strcmp(str(set, "layout"), "auto"));
	json_t *batches = json_object_get(set, "batches");
	CHECK_EQ_INT(json_array_size(batches), 2);
	CHECK_EQ_INT(json_integer_value(json_array_get(batches, 1)), 4);
	json_t *precs = json_object_get(set, "precisions");
	CHECK_EQ_INT(json_array_size(precs), 1);
	CHECK(!strcmp(json_string_value(json_array_get(precs, 0)), "fp32"));

	json_t *m = json_object_get(res, "measurements");
	CHECK(!strcmp(str(m, "model"), "simple_cnn"));
	CHECK(!strcmp(str(m, "device"), "cpu"));
	json_t *cells = json_object_get(m, "cells");
	CHECK_EQ_INT(json_array_size(cells), 2);
	for (size_t i = 0; i < json_array_size(cells) && i < 2; i++) {
		json_t *c = json_array_get(cells, i);
		int batch = i == 0 ? 2 : 4;
		CHECK_EQ_INT(num(c, "batch"), batch);
		CHECK(!strcmp(str(c, "precision"), "fp32"));
		CHECK(!strcmp(str(c, "layout"), "nchw"));
		CHECK(!strcmp(str(c, "status"), "ok"));
		double ms = num(c, "ms_per_step"), img_s = num(c, "img_s");
		CHECK(ms > 0);
		CHECK_NEAR(img_s, batch * 1e3 / ms, 1e-6 * img_s);
		CHECK_NEAR(num(c, "speedup"), 1.0, 1e-12);
		CHECK(num(c, "peak_mib") > 0);
		CHECK(num(c, "first_loss") > 0);
		CHECK(num(c, "last_loss") > 0);
		CHECK_EQ_INT(num(c, "timed_steps"), 2); /* 10% of 2 steps: no warm-up */
		CHECK(json_object_get(c, "error") == NULL);
		/* simple_cnn at 32x32, 1000 classes: conv 884,736 + 4,718,592 + 4,718,592, fc
		 * 524,288 + 256,000 = 11,102,208 MACs forward, x 2 x 3 for training */
		CHECK_NEAR(num(c, "flops_per_image"), 66613248.0, 0);
		CHECK_NEAR(num(c, "tflops"), 66613248.0 * img_s / 1e12, 1e-9 * num(c, "tflops"));
		/* the CPU has no peak and no energy counter: no MFU, no energy, not zeros */
		CHECK(json_object_get(c, "mfu") == NULL);
		CHECK(json_object_get(c, "peak_tflops") == NULL);
		CHECK(json_object_get(c, "energy_j_per_image") == NULL);
	}
	/* the larger batch needs more memory */
	CHECK(num(json_array_get(cells, 1), "peak_mib") > num(json_array_get(cells, 0), "peak_mib"));
	json_decref(res);

	char csv[4096];
	snprintf(path, sizeof(path), "%s/amp.csv", dir);
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL);
	if (f) {
		size_t n = fread(csv, 1, sizeof(csv) - 1, f);
		csv[n] = 0;
		fclose(f);
		const char *head = "batch,precision,ms/step,img/s,speed-up vs fp32,peak MiB,TFLOP/s,MFU,J/img\r\n";
		CHECK_MSG(!strncmp(csv, head, strlen(head)), "csv: %s", csv);
		CHECK_EQ_INT(test_count_lines(csv), 3);
		CHECK(strstr(csv, "\r\n4,fp32,") != NULL);
	}

	struct test_pixel_counts pc;
	snprintf(path, sizeof(path), "%s/amp_speedup.png", dir);
	CHECK(strstr(out, path) != NULL);
	test_check_png(path, 1400, 560, &pc);
}
