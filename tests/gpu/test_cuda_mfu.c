/* MFU, energy and the roofline on the GPU (issue 24): a bf16 training run reports its
 * model FLOPs, TFLOP/s, MFU against the peaks table and NVML's energy per image; the
 * roofline of a bf16 profile finds every convolution type above its bound (the bound
 * is a lower bound: exact FLOPs, each tensor moved once). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "net_util.h"
#include "report/mfu.h"
#include "report/result.h"

static double json_num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : -1;
}

TEST(cuda_train_reports_mfu_and_energy)
{
	NEED_GPU();
	static char out[65536];
	char dir[512], cmd[1024], path[600];
	snprintf(cmd, sizeof(cmd), "%s info --model resnet18 --size 64 --classes 10 --json", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	json_t *info = json_loads(out, 0, NULL);
	CHECK(info != NULL);
	double macs = json_num(info, "forward_macs_per_image");
	json_decref(info);
	snprintf(dir, sizeof(dir), "%s/cuda_mfu", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s train --model resnet18 --size 64 --classes 10 --batch 64 "
		 "--steps 300 --precision bf16 --device cuda --out '%s'", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train failed (%d): %.3000s", rc, out);
	CHECK_MSG(strstr(out, "model FLOPs ") != NULL, "no summary line: %.3000s", out);
	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/train.json", dir);
	if (rc || result_read(path, &res) < 0)
		return;
	json_t *m = json_object_get(res, "measurements");
	double img_s = json_num(m, "img_s"), tflops = json_num(m, "tflops");
	CHECK_NEAR(json_num(m, "flops_per_image"), 6 * macs, 0);
	CHECK_NEAR(tflops, 6 * macs * img_s / 1e12, 1e-8 * tflops);
	const char *name = json_string_value(json_object_get(json_object_get(res, "gpu"), "name"));
	const struct gpu_peaks *g = gpu_peaks_find(name);
	if (g) {
		CHECK_NEAR(json_num(m, "peak_tflops"), g->bf16_tflops, 0);
		double mfu = json_num(m, "mfu");
		CHECK_NEAR(mfu, tflops / g->bf16_tflops, 1e-8);
		CHECK_MSG(mfu > 0.001 && mfu < 1, "MFU %g on %s", mfu, name);
		/* every GPU of the table counts energy (Volta and later) where NVML runs: the
		 * gpu object has a uuid only when it came from NVML */
		if (json_object_get(json_object_get(res, "gpu"), "uuid")) {
			double j = json_num(m, "energy_j_per_image"), w = json_num(m, "power_w");
			CHECK_MSG(j > 0 && j < 10, "J/image %g", j);
			CHECK_MSG(w > 20 && w < 1500, "mean power %g W", w);
			CHECK_NEAR(j, w / img_s, 0.2 * j); /* J/image = W / (img/s), same interval */
		}
	} else {
		CHECK(json_object_get(m, "mfu") == NULL);
		printf("    %s is not in the peaks table: MFU unknown\n", name ? name : "?");
	}
	json_decref(res);
}

TEST(cuda_roofline_resnet18_bf16)
{
	NEED_GPU();
	static char out[262144];
	char dir[512], cmd[1024], path[600];
	snprintf(dir, sizeof(dir), "%s/cuda_roofline", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s roofline --model resnet18 --size 112 --batch 64 --steps 3 "
		 "--precision bf16 --device cuda --out '%s'", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "roofline failed (%d): %.3000s", rc, out);
	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/roofline.json", dir);
	if (rc || result_read(path, &res) < 0)
		return;
	json_t *m = json_object_get(res, "measurements");
	CHECK(!strcmp(json_string_value(json_object_get(m, "layer_times")), "gpu"));
	json_t *total = json_object_get(m, "total");
	double ms = json_num(total, "ms"), step = json_num(m, "profile_step_ms");
	CHECK_MSG(ms > 0 && ms <= 1.05 * step, "layers %g ms of a %g ms step", ms, step);
	json_t *types = json_object_get(m, "types"), *t;
	size_t i;
	int convs = 0;
	int known = !json_is_null(json_object_get(json_object_get(res, "settings"), "peak_source"));
	json_array_foreach(types, i, t) {
		const char *op = json_string_value(json_object_get(t, "op"));
		if (strncmp(op, "conv2d ", 7))
			continue;
		convs++;
		CHECK(json_num(t, "ms") > 0);
		if (known)
			CHECK_MSG(json_num(t, "gap") >= 1, "%s: %g ms under its bound %g ms", op,
				  json_num(t, "ms"), json_num(t, "bound_ms"));
	}
	CHECK_EQ_INT(convs, 2);
	json_decref(res);
}
