/* NVML through a fake libnvidia-ml.so built from tests/fake_nvml/fake_nvml.c: every
 * field must come through from the library's canned values. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/train_json.h"
#include "core/error.h"
#include "core/file.h"
#include "core/memstat.h"
#include "core/timeutil.h"
#include "core/tuning.h"
#include "gpu/nvml.h"
#include "report/monitor_report.h"
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
 * canned values, the summary, a result with every sample; without a driver one
 * error line. */
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
	/* three sample rows, each with the fake's memory figure */
	int rows = 0;
	for (const char *p = out; (p = strstr(p, "1177/81559")) != NULL; p++)
		rows++;
	CHECK_EQ_INT(rows, 3);
	CHECK(strstr(out, "summary over 3 samples") != NULL);
	CHECK(strstr(out, "ended by: count") != NULL);
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
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --interval 0.05 --duration 30 "
		 "--out '%s' > '%s/log' & pid=$!; while ! grep -q 'clock events' '%s/log'; "
		 "do sleep 0.05; done; sleep 0.3; kill -TERM $pid; wait $pid",
		 lib, test_bin(), dir, dir, dir);
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

/* ---- monitor's summary, verdict and GPM (issue 22 item 8) ---------------------- */

static struct nvml_sample mk_sample(double t, unsigned util, double mem_mib, double power_w,
				    unsigned temp, unsigned long long reasons)
{
	struct nvml_sample s;
	memset(&s, 0, sizeof(s));
	s.t_s = t;
	s.util_gpu_pct = util;
	s.mem_used_bytes = (size_t)(mem_mib * GP_MIB);
	s.mem_total_bytes = (size_t)(8000 * GP_MIB);
	s.power_mw = (unsigned)(power_w * 1000);
	s.temp_c = temp;
	s.sm_clock_mhz = 1500 + util;
	s.throttle_reasons = reasons;
	return s;
}

/* Five samples worked by hand: utilization 90, 80, 5, 100, 0 has mean 55, sample
 * std sqrt(9400 / 4) = 48.477, two of five under 10 %; power 300..200 W averages
 * 300 W, 42.857 % of 700 W; reasons sw_power_cap 3/5, sw_thermal 1/5, gpu_idle 1/5. */
TEST(monitor_summary_statistics_on_a_known_series)
{
	struct nvml_sample s[5] = {
		mk_sample(10.0, 90, 1000, 300, 60, 0x4),
		mk_sample(10.5, 80, 3000, 350, 70, 0x4 | 0x20),
		mk_sample(11.0, 5, 2000, 400, 86, 0),
		mk_sample(11.5, 100, 500, 250, 65, 0x1),
		mk_sample(12.0, 0, 100, 200, 50, 0x4),
	};
	struct nvml_gpm_metrics g[5];
	for (int i = 0; i < 5; i++)
		g[i] = (struct nvml_gpm_metrics){ NAN, NAN, NAN, NAN, NAN };
	g[1].sm_util_pct = 50;
	g[2].sm_util_pct = 70;
	g[4].sm_util_pct = 60;
	g[1].tensor_util_pct = 10;
	g[2].tensor_util_pct = 20;
	g[4].tensor_util_pct = 30;
	g[4].dram_bw_util_pct = 44;
	struct monitor_summary m;
	monitor_summarize(s, g, 5, 700000, &m);
	CHECK_EQ_INT(m.n, 5);
	CHECK_NEAR(m.duration_s, 2.0, 1e-12);
	CHECK_NEAR(m.util_mean, 55.0, 1e-12);
	CHECK_NEAR(m.util_std, sqrt(9400.0 / 4), 1e-9);
	CHECK_NEAR(m.util_min, 0, 1e-12);
	CHECK_NEAR(m.util_max, 100, 1e-12);
	CHECK_NEAR(m.util_idle_share, 0.4, 1e-12);
	CHECK_NEAR(m.mem_peak_mib, 3000, 1e-9);
	CHECK_NEAR(m.mem_total_mib, 8000, 1e-9);
	CHECK_NEAR(m.power_mean_w, 300, 1e-9);
	CHECK_NEAR(m.power_pct_of_limit, 300.0 / 700 * 100, 1e-9);
	CHECK_NEAR(m.temp_peak_c, 86, 1e-12);
	CHECK_NEAR(m.sm_clock_min_mhz, 1500, 1e-12);
	CHECK_EQ_INT(m.n_reasons, 3);
	/* in bit order: gpu_idle (0x1), sw_power_cap (0x4), sw_thermal (0x20) */
	if (m.n_reasons == 3) {
		CHECK(!strcmp(m.reasons[0].name, "gpu_idle"));
		CHECK_NEAR(m.reasons[0].share, 0.2, 1e-12);
		CHECK(!strcmp(m.reasons[1].name, "sw_power_cap"));
		CHECK_NEAR(m.reasons[1].share, 0.6, 1e-12);
		CHECK(!strcmp(m.reasons[2].name, "sw_thermal"));
		CHECK_NEAR(m.reasons[2].share, 0.2, 1e-12);
	}
	/* GPM means over the samples that had each metric; a metric never given is NaN */
	CHECK_EQ_INT(m.gpm_n, 3);
	CHECK_NEAR(m.sm_util_mean, 60, 1e-12);
	CHECK_NEAR(m.tensor_util_mean, 20, 1e-12);
	CHECK_NEAR(m.dram_bw_util_mean, 44, 1e-12);
	CHECK(isnan(m.sm_occupancy_mean));
	/* every check fails here, each with its figure */
	CHECK(!m.healthy);
	CHECK(!m.checks[0].pass && !m.checks[1].pass && !m.checks[2].pass);
	CHECK_NEAR(m.checks[0].value, 55, 1e-12);
	CHECK_NEAR(m.checks[2].value, 86, 1e-12);
	/* the JSON holds the same figures */
	json_t *j = monitor_summary_json(&m);
	CHECK(j != NULL);
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(j, "utilization"), "std_pct")),
		   sqrt(9400.0 / 4), 1e-6);
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(j, "power"), "pct_of_limit")),
		   42.857142857, 1e-6);
	CHECK_EQ_INT(json_array_size(json_object_get(j, "clock_event_reasons")), 3);
	CHECK(json_is_false(json_object_get(json_object_get(j, "verdict"), "healthy")));
	json_decref(j);
	/* no power limit: the share of it is unknown, not a division by zero */
	monitor_summarize(s, NULL, 5, 0, &m);
	CHECK(isnan(m.power_pct_of_limit));
	CHECK_EQ_INT(m.gpm_n, 0);
	CHECK(isnan(m.sm_util_mean));
}

static void summarize_utils(const unsigned *util, const unsigned *temp, int n,
			    struct monitor_summary *m)
{
	struct nvml_sample s[16];
	for (int i = 0; i < n; i++)
		s[i] = mk_sample(i, util[i], 100, 300, temp[i], 0);
	monitor_summarize(s, NULL, n, 700000, m);
}

/* The checklist: mean utilization above 85 %, its std below 10 points, peak
 * temperature below 85 C; each series below breaks exactly one of them. */
TEST(monitor_verdict_healthy_and_unhealthy_series)
{
	struct monitor_summary m;
	unsigned cool[6] = { 70, 72, 75, 80, 84, 79 };
	unsigned busy[6] = { 90, 92, 95, 91, 93, 94 };
	summarize_utils(busy, cool, 6, &m);
	CHECK(m.healthy);
	CHECK(m.checks[0].pass && m.checks[1].pass && m.checks[2].pass);

	unsigned low[6] = { 84, 85, 83, 86, 84, 85 }; /* mean 84.5 */
	summarize_utils(low, cool, 6, &m);
	CHECK(!m.healthy);
	CHECK(!m.checks[0].pass && m.checks[1].pass && m.checks[2].pass);
	CHECK_NEAR(m.checks[0].value, 84.5, 1e-12);

	unsigned jumpy[6] = { 100, 75, 100, 75, 100, 75 }; /* mean 87.5, std 13.69 */
	summarize_utils(jumpy, cool, 6, &m);
	CHECK(!m.healthy);
	CHECK(m.checks[0].pass && !m.checks[1].pass && m.checks[2].pass);
	CHECK_NEAR(m.checks[1].value, sqrt(6 * 156.25 / 5), 1e-9);

	unsigned hot[6] = { 70, 72, 85, 80, 84, 79 }; /* 85 C is not below 85 C */
	summarize_utils(busy, hot, 6, &m);
	CHECK(!m.healthy);
	CHECK(m.checks[0].pass && m.checks[1].pass && !m.checks[2].pass);

	/* no samples: nothing showed a healthy run */
	monitor_summarize(NULL, NULL, 0, 700000, &m);
	CHECK(!m.healthy);
	CHECK(!m.checks[0].pass && !m.checks[1].pass && !m.checks[2].pass);
}

TEST(nvml_gpm_metrics_through_the_fake)
{
	OPEN_FAKE_NVML();
	unsetenv("FAKE_NVML_GPM");
	struct nvml_gpm *g = NULL;
	CHECK_MSG(nvml_gpm_open(0, &g) == 0, "%s", gp_errmsg());
	if (g) {
		struct nvml_gpm_metrics m;
		/* under 100 ms after the last sample: no interval to read yet (the H100
		 * gave SM activity 0 and bandwidth NaN for 70 ms) */
		CHECK_EQ_INT(nvml_gpm_read(g, &m), GP_ENOTFOUND);
		CHECK_MSG(strstr(gp_errmsg(), "GPM needs 100 ms between samples") != NULL, "%s", gp_errmsg());
		CHECK(isnan(m.sm_util_pct));
		for (int k = 0; k < 2; k++) { /* each read pairs the newest two samples */
			usleep(110000);
			CHECK_MSG(nvml_gpm_read(g, &m) == 0, "%s", gp_errmsg());
			CHECK_NEAR(m.sm_util_pct, 62.5, 1e-12);
			CHECK_NEAR(m.sm_occupancy_pct, 31.25, 1e-12);
			CHECK_NEAR(m.tensor_util_pct, 41.5, 1e-12);
			CHECK_NEAR(m.dram_bw_util_pct, 27.75, 1e-12);
			CHECK(isnan(m.hmma_util_pct)); /* the fake says NOT_SUPPORTED for it */
		}
		nvml_gpm_close(g);
	}
	/* A device without GPM: unsupported, with the reason, and nothing held. */
	setenv("FAKE_NVML_GPM", "0", 1);
	g = (struct nvml_gpm *)1;
	CHECK_EQ_INT(nvml_gpm_open(0, &g), GP_EUNSUPPORTED);
	CHECK(g == NULL);
	CHECK_MSG(strstr(gp_errmsg(), "does not offer GPM") != NULL, "%s", gp_errmsg());
	unsetenv("FAKE_NVML_GPM");
	/* the reader's reference is gone: ours is the last */
	nvml_close();
	int n;
	CHECK_EQ_INT(nvml_device_count(&n), GP_EINVAL);
}

TEST(nvml_process_utilization_through_the_fake)
{
	OPEN_FAKE_NVML();
	setenv("FAKE_NVML_PID", "4100000000", 1);
	unsigned long long ts = 0;
	unsigned sm = 0, mem = 0;
	CHECK_MSG(nvml_process_util(0, 4100000000u, &ts, &sm, &mem) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(sm, 55);
	CHECK_EQ_INT(mem, 21);
	CHECK(ts > 0);
	CHECK_EQ_INT(nvml_process_util(0, 4100000001u, &ts, &sm, &mem), GP_ENOTFOUND);
	unsetenv("FAKE_NVML_PID");
	ts = 0;
	CHECK_EQ_INT(nvml_process_util(0, 4100000000u, &ts, &sm, &mem), GP_ENOTFOUND);
	nvml_close();
}

static json_t *load_measurements(const char *dir, json_t **doc)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/monitor.json", dir);
	json_error_t e;
	*doc = json_load_file(path, 0, &e);
	CHECK_MSG(*doc != NULL, "%s: %s", path, e.text);
	return *doc ? json_object_get(*doc, "measurements") : NULL;
}

/* --duration ends the run on time (not at the next sample, not later), with the
 * summary, exit 0, and monitor.png drawn. */
TEST(monitor_duration_ends_on_time_with_summary_and_chart)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192], png[700];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --duration 1 --interval 0.3 --out %s",
		 lib, test_bin(), dir);
	double t0 = gp_now_s();
	int rc = test_run(cmd, out, sizeof(out));
	double wall = gp_now_s() - t0;
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	/* samples at 0, 0.3, 0.6, 0.9, then the wait to 1.0 s; the upper bound leaves room
	 * for starting gpuperf on a loaded machine (an idle one takes about 1.1 s) */
	CHECK_MSG(wall >= 1.0 && wall < 8.0, "took %.2f s", wall);
	CHECK(strstr(out, "ended by: duration") != NULL);
	CHECK(strstr(out, "verdict: healthy") != NULL); /* the fake: 87 %, steady, 61 C */
	json_t *doc;
	json_t *m = load_measurements(dir, &doc);
	if (!m)
		return;
	CHECK_EQ_INT(json_array_size(json_object_get(m, "samples")), 4);
	CHECK(!strcmp(json_string_value(json_object_get(m, "ended_by")), "duration"));
	json_t *sum = json_object_get(m, "summary");
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(sum, "utilization"), "mean_pct")),
		   87, 1e-9);
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(sum, "power"), "pct_of_limit")),
		   312.345 / 700 * 100, 1e-6);
	json_decref(doc);
	snprintf(png, sizeof(png), "%s/monitor.png", dir);
	struct test_pixel_counts pc;
	test_check_png(png, 1280, 880, &pc);
	/* plot redraws the same chart from the result */
	snprintf(cmd, sizeof(cmd), "rm '%s' && %s plot '%s/monitor.json' && test -s '%s'", png,
		 test_bin(), dir, png);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "plot: %s", out);
}

/* Ctrl-C (SIGINT) ends the run as --duration does: summary, result, exit 0. */
TEST(monitor_sigint_ends_with_a_summary)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192], log[700];
	const char *dir = test_tmpdir();
	/* The signal goes once monitor has printed its header: its handler is in place
	 * then (before it, a background job ignores SIGINT, and a loaded machine can take
	 * longer than any fixed sleep to get there); --duration 30 ends a stuck run. */
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --interval 0.05 --duration 30 "
		 "--out '%s' > '%s/log' 2>&1 & pid=$!; while ! grep -q 'clock events' '%s/log'; "
		 "do sleep 0.05; done; sleep 0.3; kill -INT $pid; wait $pid",
		 lib, test_bin(), dir, dir, dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(log, sizeof(log), "%s/log", dir);
	char *text = NULL;
	size_t len;
	CHECK_EQ_INT(file_read_all(log, &text, &len), 0);
	if (!text)
		return;
	CHECK_MSG(strstr(text, "verdict: healthy") != NULL, "%s", text);
	CHECK(strstr(text, "ended by: signal") != NULL);
	CHECK(strstr(text, "monitor.png") != NULL);
	free(text);
	json_t *doc;
	json_t *m = load_measurements(dir, &doc);
	if (!m)
		return;
	CHECK(json_array_size(json_object_get(m, "samples")) >= 2);
	CHECK(json_is_object(json_object_get(json_object_get(m, "summary"), "verdict")));
	json_decref(doc);
}

/* --pid follows a process: its memory and SM share each sample, and the run ends when
 * it exits (a zombie its parent has not reaped yet counts as exited). A pid that does
 * not exist is one error line before any work. */
TEST(monitor_pid_follows_a_process_until_it_exits)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192];
	const char *dir = test_tmpdir();
	/* The followed process is killed 0.6 s after monitor printed its header, so that a
	 * slow start on a loaded machine does not eat the run. */
	snprintf(cmd, sizeof(cmd), "sleep 30 & p=$!; FAKE_NVML_PID=$p GPUPERF_NVML_LIB='%s' "
		 "timeout 20 %s monitor --pid $p --interval 0.1 --out '%s' > '%s/log' 2>&1 & m=$!; "
		 "while ! grep -q 'clock events' '%s/log'; do sleep 0.05; done; sleep 0.6; kill $p; "
		 "wait $m; rc=$?; cat '%s/log'; exit $rc", lib, test_bin(), dir, dir, dir, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "ended by: process exited") != NULL, "%s", out);
	json_t *doc;
	json_t *m = load_measurements(dir, &doc);
	if (!m)
		return;
	json_t *samples = json_object_get(m, "samples");
	/* 0.1 s apart for 0.6 s at least */
	CHECK_MSG(json_array_size(samples) >= 4, "%zu samples", json_array_size(samples));
	json_t *first = json_array_get(samples, 0);
	CHECK_NEAR(json_number_value(json_object_get(first, "pid_mem_mib")), 2048, 1e-9);
	CHECK_NEAR(json_number_value(json_object_get(first, "pid_sm_pct")), 55, 1e-9);
	json_t *ps = json_object_get(json_object_get(m, "summary"), "pid");
	CHECK_NEAR(json_number_value(json_object_get(ps, "mem_peak_mib")), 2048, 1e-9);
	CHECK_NEAR(json_number_value(json_object_get(ps, "sm_share_mean_pct")), 55, 1e-9);
	CHECK(strstr(out, "memory peak 2048 MiB, SM share mean 55.0 %") != NULL);
	json_decref(doc);
	test_check_bad("monitor --pid 2147483647", "--pid 2147483647: no such process");
}

/* --csv: a header and one row per sample, every row as wide as the header; the
 * clock-event reasons are joined with ';' so that they stay one column. */
TEST(monitor_csv_has_a_row_per_sample)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192], csv[700];
	const char *dir = test_tmpdir();
	snprintf(csv, sizeof(csv), "%s/sub/samples.csv", dir);
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --count 3 --interval 0.12 "
		 "--out '%s/run' --csv '%s'", lib, test_bin(), dir, csv);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	char *text = NULL;
	size_t len;
	CHECK_EQ_INT(file_read_all(csv, &text, &len), 0);
	if (!text)
		return;
	CHECK_EQ_INT(test_count_lines(text), 4);
	static const char head[] = "t_s,util_gpu_pct,util_mem_pct,mem_used_mib,";
	CHECK(strncmp(text, head, strlen(head)) == 0);
	CHECK(strstr(text, ",87,43,1177.4,81559.0,312.345,61,1755,2613,sw_power_cap;sw_thermal,") != NULL);
	CHECK(strstr(text, ",62.50,31.25,41.50,27.75\n") != NULL); /* GPM, from the 2nd row */
	CHECK(strstr(text, ",sm_activity_pct,sm_occupancy_pct,tensor_activity_pct,dram_bw_util_pct\n") != NULL);
	int header_commas = -1;
	for (char *line = text, *next; *line; line = next) {
		next = strchr(line, '\n');
		*next++ = 0;
		int commas = 0;
		for (char *p = line; *p; p++)
			commas += *p == ',';
		if (header_commas < 0)
			header_commas = commas;
		CHECK_MSG(commas == header_commas, "row '%s' has %d commas, the header %d", line,
			  commas, header_commas);
	}
	free(text);
	/* a CSV path that cannot be written is refused before sampling */
	snprintf(cmd, sizeof(cmd), "monitor --count 1 --csv %s", "/proc/nope/x.csv");
	snprintf(out, sizeof(out), "GPUPERF_NVML_LIB='%s' %s %s", lib, test_bin(), cmd);
	char res[8192];
	int rc = test_run(out, res, sizeof(res));
	CHECK_MSG(rc != 0 && test_count_lines(res) == 1, "exit %d: %s", rc, res);
}

/* GPM's columns and summary come through the fake; where the device has no GPM the
 * run goes on without them and says why once. */
TEST(monitor_gpm_figures_present_and_absent)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192], dir2[600];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --count 3 --interval 0.12 --out '%s/on'",
		 lib, test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "SM activity 62.5 %, SM occupancy 31.2 %, tensor activity 41.5 %, "
			  "DRAM bandwidth 27.8 %") != NULL);
	snprintf(dir2, sizeof(dir2), "%s/on", dir);
	json_t *doc;
	json_t *m = load_measurements(dir2, &doc);
	if (m) {
		json_t *gpm = json_object_get(json_object_get(m, "summary"), "gpm");
		CHECK_EQ_INT(json_integer_value(json_object_get(gpm, "samples")), 2);
		CHECK_NEAR(json_number_value(json_object_get(gpm, "tensor_activity_pct")), 41.5, 1e-12);
		json_t *s0 = json_array_get(json_object_get(m, "samples"), 0);
		json_t *s1 = json_array_get(json_object_get(m, "samples"), 1);
		CHECK(json_is_null(json_object_get(s0, "sm_activity_pct"))); /* no interval yet */
		CHECK_NEAR(json_number_value(json_object_get(s1, "dram_bw_util_pct")), 27.75, 1e-12);
		json_decref(doc);
	}
	snprintf(cmd, sizeof(cmd), "FAKE_NVML_GPM=0 GPUPERF_NVML_LIB='%s' %s monitor --count 3 "
		 "--interval 0.02 --out '%s/off'", lib, test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "no GPM figures: GPU 0 does not offer GPM metrics") != NULL);
	CHECK(strstr(out, "SM act") == NULL);
	CHECK(strstr(out, "verdict: healthy") != NULL);
	snprintf(dir2, sizeof(dir2), "%s/off", dir);
	m = load_measurements(dir2, &doc);
	if (m) {
		CHECK(json_is_null(json_object_get(json_object_get(m, "summary"), "gpm")));
		CHECK(json_object_get(json_array_get(json_object_get(m, "samples"), 0),
				      "sm_activity_pct") == NULL);
		CHECK(json_is_false(json_object_get(m, "gpm")));
		json_decref(doc);
	}
}

/* A scripted run that is busy in bursts and hot: the verdict fails the checks it
 * should, with the figures, and the reasons carry their shares. */
TEST(monitor_verdict_from_a_scripted_run)
{
	const char *why;
	const char *lib = fake_nvml_build(&why);
	if (!lib)
		SKIP(why);
	char cmd[2048], out[8192];
	const char *dir = test_tmpdir();
	/* util 100, 0, 100, 0: mean 50, std 57.7; 88 C at the peak; hw_slowdown in half */
	snprintf(cmd, sizeof(cmd), "FAKE_NVML_SERIES='100:400:80:8;0:100:88:0;100:400:84:8;0:100:70:1' "
		 "GPUPERF_NVML_LIB='%s' %s monitor --count 4 --interval 0.02 --out '%s'",
		 lib, test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "verdict: not healthy") != NULL, "%s", out);
	CHECK(strstr(out, "FAIL utilization  mean 50.0 %") != NULL);
	CHECK(strstr(out, "FAIL fluctuation  std 57.7 points") != NULL);
	CHECK(strstr(out, "FAIL temperature  peak 88 C") != NULL);
	CHECK(strstr(out, "clock events     gpu_idle 25 %, hw_slowdown 50 %") != NULL);
	CHECK(strstr(out, "50 % of samples under 10 %") != NULL);
	CHECK(strstr(out, "mean 250.0 W, 36 % of the 700 W limit") != NULL);
}

/* A driver without the GPM symbols (before 520): the reader says so, monitor goes on
 * without the figures. */
TEST(monitor_without_gpm_symbols)
{
	const char *why;
	if (!fake_nvml_build(&why))
		SKIP(why);
	char lib[600], cmd[2048], out[8192];
	const char *dir = test_tmpdir();
	snprintf(lib, sizeof(lib), "%s/libnvidia-ml-nogpm.so.1", dir);
	snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -O1 -DFAKE_NO_GPM -o '%s' " FAKE_SRC
		 " && ! nm -D '%s' | grep -q nvmlGpm", lib, lib);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "building the fake without GPM: %s", out);
	snprintf(cmd, sizeof(cmd), "GPUPERF_NVML_LIB='%s' %s monitor --count 2 --interval 0.02 --out '%s/run'",
		 lib, test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "no GPM figures: NVML lacks the GPM functions") != NULL, "%s", out);
	CHECK(strstr(out, "verdict: healthy") != NULL);
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
