/* gpuperf monitor: a live NVML view of one GPU (utilization, memory, power,
 * temperature, clocks, throttle reasons), one line per interval, until --count
 * samples, Ctrl-C or SIGTERM; the samples become a JSON result like any measurement. */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/timeutil.h"
#include "gpu/nvml.h"
#include "report/result.h"

static volatile sig_atomic_t monitor_stop;

static void monitor_on_signal(int sig)
{
	(void)sig;
	monitor_stop = 1;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };
	nanosleep(&ts, NULL);
}

static json_t *sample_json(const struct nvml_sample *s, double t0)
{
	char why[160];
	return json_pack("{s:o, s:i, s:i, s:o, s:o, s:o, s:i, s:i, s:i, s:s}", "t_s", result_real(s->t_s - t0),
			 "util_gpu_pct", s->util_gpu_pct, "util_mem_pct", s->util_mem_pct,
			 "mem_used_mib", result_real(s->mem_used_bytes / GP_MIB), "mem_total_mib",
			 result_real(s->mem_total_bytes / GP_MIB), "power_w", result_real(s->power_mw / 1000.0), "temp_c",
			 s->temp_c, "sm_clock_mhz", s->sm_clock_mhz, "mem_clock_mhz", s->mem_clock_mhz,
			 "throttle", nvml_throttle_reason_str(s->throttle_reasons, why, sizeof(why)));
}

int cmd_monitor(int argc, char **argv)
{
	double interval = 1.0;
	int count = 0, dev = 0, help = 0, overwrite = 0;
	const char *out = NULL;
	struct opt opts[] = {
		{ "interval", OPT_DOUBLE, &interval, "seconds between samples (1)", 0, 0, .min_d = 0.01, .max_d = 3600, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		{ "count", OPT_INT, &count, "stop after this many samples (default: until Ctrl-C)", 1, ARGS_MAX_STEPS },
		{ "gpu", OPT_INT, &dev, "NVML device index (0)", 0, 63 },
		OPT_OUT(&out, "monitor.json", "monitor"),
		OPT_OVERWRITE(&overwrite, "monitor.json"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf monitor [--interval S] [--count N] [--gpu I] [--out DIR]", opts);
		return 0;
	}
	GP_TRY(nvml_open());
	int rc, n_dev = 0;
	struct nvml_static_info info;
	json_t *res = NULL, *samples = json_array();
	if ((rc = nvml_device_count(&n_dev)) < 0)
		goto out;
	if (dev < 0 || dev >= n_dev) {
		rc = gp_error(GP_EINVAL, "--gpu %d: NVML sees %d GPU(s)", dev, n_dev);
		goto out;
	}
	if ((rc = nvml_static_info(dev, &info)) < 0)
		goto out;
	char run_dir[4096];
	if ((rc = result_dir_prepare("monitor", "monitor", out, overwrite, run_dir,
				     sizeof(run_dir))) < 0)
		goto out;
	out = run_dir;
	printf("%s (driver %s), %.0f MiB, power limit %.0f W%s\n", info.name, info.driver_version,
	       info.mem_total_bytes / GP_MIB, info.power_limit_mw / 1000.0,
	       count ? "" : "; Ctrl-C to stop");
	printf("%8s %6s %6s %17s %9s %6s %9s %9s  %s\n", "time s", "gpu %", "mem %", "memory MiB",
	       "power W", "temp C", "SM MHz", "mem MHz", "throttle");
	/* SIGTERM (timeout, job schedulers) ends the run as Ctrl-C does: the samples so
	 * far are written. The handlers before (main's temporary-file cleanup) return
	 * after the loop. */
	struct sigaction stop, old_int, old_term;
	memset(&stop, 0, sizeof(stop));
	stop.sa_handler = monitor_on_signal;
	sigemptyset(&stop.sa_mask);
	monitor_stop = 0;
	sigaction(SIGINT, &stop, &old_int);
	sigaction(SIGTERM, &stop, &old_term);
	double t0 = gp_now_s();
	for (int i = 0; (!count || i < count) && !monitor_stop; i++) {
		if (i)
			sleep_s(interval);
		if (monitor_stop)
			break;
		struct nvml_sample s;
		if ((rc = nvml_sample(dev, &s)) < 0)
			break;
		char why[160];
		printf("%8.1f %6u %6u %8.0f/%-8.0f %9.1f %6u %9u %9u  %s\n", s.t_s - t0, s.util_gpu_pct,
		       s.util_mem_pct, s.mem_used_bytes / GP_MIB, s.mem_total_bytes / GP_MIB,
		       s.power_mw / 1000.0, s.temp_c, s.sm_clock_mhz, s.mem_clock_mhz,
		       nvml_throttle_reason_str(s.throttle_reasons, why, sizeof(why)));
		fflush(stdout);
		json_array_append_new(samples, sample_json(&s, t0));
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (rc < 0)
		goto out;
	res = result_new("monitor", argc, argv);
	if (!res) {
		rc = gp_error(GP_ENOMEM, "out of memory writing the result");
		goto out;
	}
	result_set_gpu(res, result_gpu_from_nvml(&info));
	json_object_set_new(res, "settings", json_pack("{s:o, s:i}", "interval_s", result_real(interval), "gpu", dev));
	json_object_set_new(res, "measurements", json_pack("{s:O}", "samples", samples));
	char path[4096];
	if ((rc = result_write(res, out, "monitor", path, sizeof(path))) == 0)
		printf("wrote %s\n", path);
out:
	json_decref(samples);
	json_decref(res);
	nvml_close();
	return rc;
}
