/* NVML through a fake libnvidia-ml.so built from tests/fake_nvml/fake_nvml.c: every
 * field must come through from the library's canned values. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/train_json.h"
#include "core/error.h"
#include "core/tuning.h"
#include "gpu/nvml.h"
#include "test.h"

#define FAKE_SRC "tests/fake_nvml/fake_nvml.c"

/* Build the fake once per run; returns its path or NULL (with the reason in why). */
static const char *fake_nvml_build(const char **why)
{
	static char lib[512];
	static const char *fail;
	if (lib[0] || fail) {
		*why = fail;
		return fail ? NULL : lib;
	}
	char cmd[1200], out[2048];
	if (access(FAKE_SRC, R_OK) != 0) {
		*why = fail = "tests/fake_nvml/fake_nvml.c not found (run from the repository root)";
		return NULL;
	}
	if (test_run("command -v cc", out, sizeof(out)) != 0) {
		*why = fail = "no C compiler to build the fake NVML";
		return NULL;
	}
	snprintf(lib, sizeof(lib), "%s/libnvidia-ml.so.1", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -O1 -o '%s' " FAKE_SRC, lib);
	if (test_run(cmd, out, sizeof(out)) != 0) {
		printf("    %s\n", out);
		lib[0] = 0;
		*why = fail = "building the fake NVML failed";
		return NULL;
	}
	*why = NULL;
	return lib;
}

/* Point GPUPERF_NVML_LIB at the fake and open it; SKIPs the calling test if the
 * fake cannot be built. */
#define OPEN_FAKE_NVML()                                                      \
	do {                                                                  \
		const char *why_;                                             \
		const char *lib_ = fake_nvml_build(&why_);                    \
		if (!lib_)                                                    \
			SKIP(why_);                                           \
		setenv("GPUPERF_NVML_LIB", lib_, 1);                          \
		tuning_reload();                                              \
		int rc_ = nvml_open();                                        \
		CHECK_MSG(rc_ == 0, "nvml_open: %s", gp_errmsg());            \
		if (rc_ < 0)                                                  \
			return;                                               \
	} while (0)

TEST(nvml_missing_library_is_enodev)
{
	setenv("GPUPERF_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
	tuning_reload(); /* read once otherwise */
	int rc = nvml_open();
	CHECK_EQ_INT(rc, GP_ENODEV);
	CHECK_MSG(strstr(gp_errmsg(), "NVML not available: ") == gp_errmsg(), "message: %s",
		  gp_errmsg());
	CHECK_MSG(strstr(gp_errmsg(), "/nonexistent/libnvidia-ml.so.1") != NULL, "message: %s",
		  gp_errmsg());
	CHECK_MSG(strstr(gp_errmsg(), "\n") == NULL, "message has a newline: %s", gp_errmsg());
	/* A failed open holds no reference: using NVML now is a usage error. */
	int n = -1;
	CHECK_EQ_INT(nvml_device_count(&n), GP_EINVAL);
	unsetenv("GPUPERF_NVML_LIB");
	tuning_reload();
}

TEST(nvml_static_info_fields)
{
	OPEN_FAKE_NVML();
	int n = 0;
	CHECK_EQ_INT(nvml_device_count(&n), 0);
	CHECK_EQ_INT(n, 2);
	struct nvml_static_info info;
	CHECK_EQ_INT(nvml_static_info(0, &info), 0);
	CHECK(!strcmp(info.name, "NVIDIA H100 80GB HBM3"));
	CHECK(!strcmp(info.uuid, "GPU-12345678-abcd-ef01-2345-6789abcdef01"));
	CHECK(!strcmp(info.driver_version, "550.54.15"));
	CHECK_EQ_INT(info.cuda_driver_version, 12040);
	CHECK_EQ_INT(info.mem_total_bytes, 85520809984LL);
	CHECK_EQ_INT(info.power_limit_mw, 700000);
	CHECK_EQ_INT(info.max_sm_clock_mhz, 1980);
	CHECK_EQ_INT(info.max_mem_clock_mhz, 2619);
	CHECK_EQ_INT(nvml_static_info(1, &info), 0);
	CHECK(!strcmp(info.name, "Fake GPU B"));
	/* A device that does not exist is a device error with NVML's words. */
	int rc = nvml_static_info(5, &info);
	CHECK_EQ_INT(rc, GP_EDEVICE);
	CHECK_MSG(strstr(gp_errmsg(), "Invalid Argument") != NULL, "message: %s", gp_errmsg());
	nvml_close();
}

TEST(nvml_sample_fields)
{
	OPEN_FAKE_NVML();
	struct nvml_sample s;
	CHECK_EQ_INT(nvml_sample(0, &s), 0);
	CHECK(s.t_s > 0);
	CHECK_EQ_INT(s.util_gpu_pct, 87);
	CHECK_EQ_INT(s.util_mem_pct, 43);
	CHECK_EQ_INT(s.mem_used_bytes, 1234567168LL);
	CHECK_EQ_INT(s.mem_total_bytes, 85520809984LL);
	CHECK_EQ_INT(s.power_mw, 312345);
	CHECK_EQ_INT(s.temp_c, 61);
	CHECK_EQ_INT(s.sm_clock_mhz, 1755);
	CHECK_EQ_INT(s.mem_clock_mhz, 2613);
	CHECK_EQ_INT(s.throttle_reasons, 0x24);
	nvml_close();
}

TEST(nvml_process_memory)
{
	OPEN_FAKE_NVML();
	size_t bytes = 0;
	/* 71 processes: more than the first buffer holds, so the retry path runs. */
	CHECK_EQ_INT(nvml_process_mem_bytes(0, (unsigned)getpid(), &bytes), 0);
	CHECK_EQ_INT(bytes, 1536LL << 20);
	/* the fake's other processes are 4000000000 + i, beyond any real pid */
	CHECK_EQ_INT(nvml_process_mem_bytes(0, 4000000005u, &bytes), 0);
	CHECK_EQ_INT(bytes, 6LL << 20);
	CHECK_EQ_INT(nvml_process_mem_bytes(0, 3999999999u, &bytes), GP_ENOTFOUND);
	CHECK(strstr(gp_errmsg(), "process 3999999999") != NULL);
	nvml_close();
}

TEST(nvml_util_samples_sorted_and_incremental)
{
	OPEN_FAKE_NVML();
	unsigned long long last = 0;
	double pct[8], t[8];
	int n = -1;
	CHECK_EQ_INT(nvml_util_samples(0, &last, pct, t, 8, &n), 0);
	CHECK_EQ_INT(n, 5);
	for (int i = 0; i < n && i < 5; i++)
		CHECK_NEAR(pct[i], 10.0 * (i + 1), 1e-12);
	for (int i = 1; i < n && i < 5; i++)
		CHECK_NEAR(t[i] - t[i - 1], 0.1, 1e-5);
	CHECK(last > 0);
	/* Nothing newer than what we saw. */
	CHECK_EQ_INT(nvml_util_samples(0, &last, pct, t, 8, &n), 0);
	CHECK_EQ_INT(n, 0);
	/* A small buffer keeps the newest. */
	unsigned long long from_start = 0;
	CHECK_EQ_INT(nvml_util_samples(0, &from_start, pct, t, 2, &n), 0);
	CHECK_EQ_INT(n, 2);
	CHECK_NEAR(pct[0], 40, 1e-12);
	CHECK_NEAR(pct[1], 50, 1e-12);
	CHECK_EQ_INT(from_start, last);
	nvml_close();
}

TEST(nvml_open_is_reference_counted)
{
	OPEN_FAKE_NVML();
	CHECK_EQ_INT(nvml_open(), 0);
	nvml_close();
	int n = 0;
	CHECK_EQ_INT(nvml_device_count(&n), 0); /* still open: one reference left */
	nvml_close();
	CHECK_EQ_INT(nvml_device_count(&n), GP_EINVAL);
}

TEST(nvml_sampler_interval)
{
	OPEN_FAKE_NVML();
	struct nvml_sampler *s = NULL;
	CHECK_EQ_INT(nvml_sampler_start(&s, 0, 0.05), 0);
	if (!s) {
		nvml_close();
		return;
	}
	usleep(300000);
	struct nvml_sample *samples = NULL;
	int n = 0;
	CHECK_EQ_INT(nvml_sampler_stop(s, &samples, &n), 0);
	/* One at the start and one per 50 ms: 7 on an idle machine; a busy CI box
	 * may lose one or two wake-ups but never gains samples. */
	CHECK_MSG(n >= 5 && n <= 8, "%d samples over 0.3 s at 0.05 s", n);
	for (int i = 1; i < n; i++) {
		double dt = samples[i].t_s - samples[i - 1].t_s;
		CHECK_MSG(dt > 0.03 && dt < 0.2, "sample %d came %.3f s after the one before", i,
			  dt);
	}
	if (n > 0)
		CHECK_EQ_INT(samples[n - 1].util_gpu_pct, 87);
	free(samples);
	CHECK_EQ_INT(nvml_sampler_start(&s, 0, 0), GP_EINVAL);
	nvml_close();
}

TEST(nvml_sampler_reports_errors)
{
	OPEN_FAKE_NVML();
	struct nvml_sampler *s = NULL;
	/* Device 7 does not exist: the first sample fails and stop reports why. */
	CHECK_EQ_INT(nvml_sampler_start(&s, 7, 0.01), 0);
	if (!s) {
		nvml_close();
		return;
	}
	usleep(30000);
	struct nvml_sample *samples = NULL;
	int n = -1;
	CHECK_EQ_INT(nvml_sampler_stop(s, &samples, &n), GP_EDEVICE);
	CHECK_EQ_INT(n, 0);
	CHECK_MSG(strstr(gp_errmsg(), "NVML sampler: ") == gp_errmsg(), "message: %s",
		  gp_errmsg());
	free(samples);
	nvml_close();
}

TEST(nvml_throttle_reason_names)
{
	char buf[128];
	CHECK(!strcmp(nvml_throttle_reason_str(0, buf, sizeof(buf)), "none"));
	CHECK(!strcmp(nvml_throttle_reason_str(0x24, buf, sizeof(buf)), "sw_power_cap,sw_thermal"));
	CHECK(!strcmp(nvml_throttle_reason_str(0x1001, buf, sizeof(buf)), "gpu_idle,0x1000"));
	char small[8];
	nvml_throttle_reason_str(0x24, small, sizeof(small));
	CHECK_EQ_INT(strlen(small), 7);
}

/* gpuperf monitor against the fake driver: a header, one line per sample with the
 * canned values, a result with every sample; without a driver one error line. */
TEST(monitor_command_prints_and_records_samples)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192], res[700];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --count 3 --interval 0.02 --out %s",
		 lib, test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "NVIDIA H100 80GB HBM3") != NULL);
	CHECK_EQ_INT(test_count_lines(out), 2 + 3 + 1); /* device, header, samples, "wrote" */
	CHECK(strstr(out, "1177/81559") != NULL);
	snprintf(res, sizeof(res), "%s/monitor.json", dir);
	json_error_t e;
	json_t *j = json_load_file(res, 0, &e);
	CHECK_MSG(j != NULL, "%s: %s", res, e.text);
	if (!j)
		return;
	json_t *samples = json_object_get(json_object_get(j, "measurements"), "samples");
	CHECK_EQ_INT(json_array_size(samples), 3);
	CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(samples, 0), "util_gpu_pct")), 87);
	json_decref(j);
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB=/nonexistent/libnvidia-ml.so.1 %s monitor --count 1",
		 test_bin());
	CHECK(test_run(cmd, out, sizeof(out)) != 0);
	CHECK_EQ_INT(test_count_lines(out), 1);
	CHECK(strstr(out, "NVML not available") != NULL);
}

/* monitor's output folder is tried before the first sample: a file in its place and
 * an earlier monitor.json are each one error line, with nothing sampled. */
TEST(monitor_tries_its_output_before_sampling)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "touch %s/afile && GPUPERF_NVML_LIB='%s' %s monitor --count 1000 "
		 "--interval 1 --out %s/afile", dir, lib, test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 1 && test_count_lines(out) == 1, "exit %d: %s", rc, out);
	CHECK(strstr(out, "cannot create directory") != NULL);
	snprintf(cmd, sizeof(cmd), "touch %s/monitor.json && GPUPERF_NVML_LIB='%s' %s monitor "
		 "--count 1000 --interval 1 --out %s", dir, lib, test_bin(), dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 2 && test_count_lines(out) == 1, "exit %d: %s", rc, out);
	CHECK(strstr(out, "monitor.json' holds an earlier result") != NULL);
}

/* SIGTERM (what timeout and job schedulers send) stops monitor as Ctrl-C does: the
 * samples so far are written, and the exit is clean. */
TEST(monitor_sigterm_writes_samples)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192], res[700];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --interval 0.05 --out '%s' "
		 "> '%s/log' & pid=$!; sleep 0.6; kill -TERM $pid; wait $pid",
		 lib, test_bin(), dir, dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(res, sizeof(res), "%s/monitor.json", dir);
	json_error_t e;
	json_t *j = json_load_file(res, 0, &e);
	CHECK_MSG(j != NULL, "%s: %s", res, e.text);
	if (!j)
		return;
	json_t *samples = json_object_get(json_object_get(j, "measurements"), "samples");
	CHECK_MSG(json_array_size(samples) >= 2, "%zu samples", json_array_size(samples));
	CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(samples, 0), "util_gpu_pct")), 87);
	json_decref(j);
}

TEST(nvml_energy_counter)
{
	OPEN_FAKE_NVML();
	unsigned long long a = 0, b = 0;
	CHECK_EQ_INT(nvml_energy_mj(0, &a), 0);
	CHECK_EQ_INT(nvml_energy_mj(0, &b), 0);
	CHECK_MSG(a >= 5000000ULL, "first reading %llu", a);
	CHECK_EQ_INT(b - a, 250000);
	/* a device without the counter says so, and the reading stays 0 */
	unsigned long long c = 7;
	CHECK_EQ_INT(nvml_energy_mj(1, &c), GP_EUNSUPPORTED);
	CHECK_EQ_INT(c, 0);
	nvml_close();
}

/* train's energy meter around the timed steps (cmd/train_json.c): two counter readings
 * 250 J apart, on the device NVML lists this process on. */
TEST(nvml_train_energy_meter)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	setenv("GPUPERF_NVML_LIB", lib, 1);
	tuning_reload();
	struct train_energy e;
	train_energy_start(&e, BACKEND_CUDA, 0);
	CHECK(e.open);
	CHECK_EQ_INT(train_energy_timed(&e, 1), 0);
	CHECK(e.started);
	CHECK_EQ_INT(train_energy_timed(&e, 0), 0);
	CHECK_NEAR(e.energy_j, 250.0, 0);
	CHECK(e.seconds >= 0);
	train_energy_stop(&e);
	/* the CPU backend reads nothing */
	train_energy_start(&e, BACKEND_CPU, 0);
	CHECK(!e.open);
	CHECK_EQ_INT(train_energy_timed(&e, 1), 0);
	CHECK_EQ_INT(train_energy_timed(&e, 0), 0);
	CHECK_NEAR(e.energy_j, 0, 0);
	unsetenv("GPUPERF_NVML_LIB");
	tuning_reload();
}
