/* gpuperf monitor on a real GPU (issue 22 item 8): two seconds with nothing running.
 * On Hopper and newer NVML's GPM gives SM, tensor and DRAM activity, which an idle
 * GPU shows near zero; the coarse utilization is low too, so the verdict fails its
 * utilization check. Skips without a GPU, and before Hopper (no GPM there). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../test.h"
#include "ops/cuda/device.h"

TEST(cuda_monitor_gpm_fields_on_hopper)
{
	char why[256], dir[512], cmd[2048], path[600];
	static char out[16384];
	if (!cuda_available(why, sizeof(why)))
		SKIP("no CUDA device");
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		SKIP("cudaGetDeviceProperties failed");
	if (prop.major < 9)
		SKIP("GPM needs Hopper (compute capability 9.0) or newer");
	snprintf(dir, sizeof(dir), "%s/cuda_monitor", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s monitor --duration 2 --out '%s' --csv '%s/m.csv'", test_bin(),
		 dir, dir);
	int rc = test_run(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK_MSG(rc == 0, "monitor failed (%d): %.3000s", rc, out);
	if (rc)
		return;
	CHECK(strstr(out, "ended by: duration") != NULL);
	CHECK(strstr(out, "no GPM figures") == NULL);
	snprintf(path, sizeof(path), "%s/monitor.json", dir);
	json_t *doc = json_load_file(path, 0, NULL);
	CHECK(doc != NULL);
	if (!doc)
		return;
	json_t *m = json_object_get(doc, "measurements");
	CHECK(json_is_true(json_object_get(m, "gpm")));
	json_t *samples = json_object_get(m, "samples");
	CHECK_EQ_INT(json_array_size(samples), 3); /* at 0, 1 and 2 s */
	json_t *last = json_array_get(samples, json_array_size(samples) - 1);
	static const char *const keys[] = { "sm_activity_pct", "sm_occupancy_pct",
					    "tensor_activity_pct", "dram_bw_util_pct" };
	for (int k = 0; k < 4; k++) {
		json_t *v = json_object_get(last, keys[k]);
		CHECK_MSG(json_is_number(v), "last sample lacks %s", keys[k]);
		/* nothing runs: each activity is near zero (another tenant would show) */
		CHECK_MSG(json_number_value(v) >= 0 && json_number_value(v) < 10,
			  "%s = %g on an idle GPU", keys[k], json_number_value(v));
	}
	json_t *gpm = json_object_get(json_object_get(m, "summary"), "gpm");
	CHECK_EQ_INT(json_integer_value(json_object_get(gpm, "samples")), 2);
	json_t *verdict = json_object_get(json_object_get(m, "summary"), "verdict");
	CHECK(json_is_false(json_object_get(verdict, "healthy")));
	json_decref(doc);
	snprintf(path, sizeof(path), "%s/monitor.png", dir);
	struct test_pixel_counts pc;
	test_check_png(path, 1280, 880, &pc);
}

/* workers and profile show GPM's means beside their own figures on Hopper: over a
 * worker count's training steps (workers.json runs[].gpm and the table's columns) and
 * over profile's unprofiled steps (result.json measurements.gpm). Training ran, so
 * the SMs were busy some of the time. */
TEST(cuda_workers_and_profile_gpm_on_hopper)
{
	char why[256], cmd[2048], path[700], data[600], wdir[600], pdir[600];
	static char out[65536];
	if (!cuda_available(why, sizeof(why)))
		SKIP("no CUDA device");
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
		SKIP("cudaGetDeviceProperties failed");
	if (prop.major < 9)
		SKIP("GPM needs Hopper (compute capability 9.0) or newer");
	snprintf(data, sizeof(data), "%s/gpm_jpegs", test_tmpdir());
	snprintf(wdir, sizeof(wdir), "%s/gpm_workers", test_tmpdir());
	snprintf(pdir, sizeof(pdir), "%s/gpm_profile", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out '%s' --classes 2 --images 256 --size 64x64 && "
		 "%s workers --data '%s' --workers 2 --steps 100 --model resnet18 --size 64 --batch 32 "
		 "--device cuda --out '%s'", test_bin(), data, test_bin(), data, wdir);
	int rc = test_run(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK_MSG(rc == 0, "workers failed (%d): %.3000s", rc, out);
	CHECK(strstr(out, "SM active %") != NULL);
	snprintf(path, sizeof(path), "%s/workers.json", wdir);
	json_t *doc = json_load_file(path, 0, NULL);
	CHECK(doc != NULL);
	if (doc) {
		json_t *run = json_array_get(json_object_get(json_object_get(doc, "measurements"), "runs"), 0);
		json_t *sm = json_object_get(json_object_get(run, "gpm"), "sm_activity_pct");
		CHECK_MSG(json_is_number(sm) && json_number_value(sm) > 0 && json_number_value(sm) <= 100,
			  "workers' SM activity %g", json_number_value(sm));
		json_decref(doc);
	}
	snprintf(cmd, sizeof(cmd), "%s profile --model resnet18 --size 64 --batch 32 --classes 10 "
		 "--steps 2 --baseline-steps 60 --device cuda --out '%s'", test_bin(), pdir);
	rc = test_run(cmd, out, sizeof(out));
	printf("%s", out);
	CHECK_MSG(rc == 0, "profile failed (%d): %.3000s", rc, out);
	CHECK(strstr(out, "GPM over the 60 unprofiled steps: SM activity") != NULL);
	snprintf(path, sizeof(path), "%s/result.json", pdir);
	doc = json_load_file(path, 0, NULL);
	CHECK(doc != NULL);
	if (doc) {
		json_t *gpm = json_object_get(json_object_get(doc, "measurements"), "gpm");
		json_t *sm = json_object_get(gpm, "sm_activity_pct");
		CHECK_MSG(json_is_number(sm) && json_number_value(sm) > 0 && json_number_value(sm) <= 100,
			  "profile's SM activity %g", json_number_value(sm));
		CHECK_EQ_INT(json_integer_value(json_object_get(gpm, "steps")), 60);
		json_decref(doc);
	}
}
