/* gpuperf monitor: a live NVML view of one GPU (utilization, memory, power,
 * temperature, clocks, clock-event reasons, and GPM's SM, tensor and DRAM activity
 * where the GPU has it), one line per interval, until --count samples, --duration
 * seconds, the --pid process exits, Ctrl-C or SIGTERM. Every way of ending prints
 * the summary and the healthy-run verdict, and writes monitor.json, monitor.png
 * and the --csv file. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "core/file.h"
#include "core/memstat.h"
#include "core/timeutil.h"
#include "gpu/nvml.h"
#include "report/monitor_report.h"
#include "report/result.h"

static volatile sig_atomic_t monitor_stop;

static void monitor_on_signal(int sig)
{
	(void)sig;
	monitor_stop = 1;
}

/* One row: the device sample, GPM's figures (NaN when absent) and, with --pid, the
 * process's memory and SM share (NaN when the driver has none for it). */
struct monitor_row {
	struct nvml_sample s;
	struct nvml_gpm_metrics gpm;
	double proc_mem_mib, proc_sm_pct;
};

/* Is pid still running? A zombie has exited: its parent just has not reaped it. */
static int process_alive(int pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return kill(pid, 0) == 0 || errno == EPERM;
	size_t len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = 0;
	/* "pid (comm) S ...": the state follows the last ')' (comm may hold one). */
	char *close = strrchr(buf, ')');
	return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

/* Sleep until monotonic time until_s, waking early for a signal and, with a pid to
 * follow, every 0.1 s to see whether it has exited. Returns 1 when the process has. */
static int sleep_until(double until_s, int pid)
{
	for (;;) {
		double left = until_s - gp_now_s();
		if (left <= 0 || monitor_stop)
			return 0;
		if (pid && !process_alive(pid))
			return 1;
		if (pid && left > 0.1)
			left = 0.1;
		struct timespec ts = { (time_t)left, (long)((left - (time_t)left) * 1e9) };
		nanosleep(&ts, NULL); /* EINTR: the loop looks at monitor_stop */
	}
}

static json_t *row_json(const struct monitor_row *r, double t0, int gpm, int pid)
{
	char why[160];
	const struct nvml_sample *s = &r->s;
	json_t *j = json_pack("{s:o, s:i, s:i, s:o, s:o, s:o, s:i, s:i, s:i, s:s, s:I}", "t_s",
			      result_real(s->t_s - t0), "util_gpu_pct", s->util_gpu_pct,
			      "util_mem_pct", s->util_mem_pct, "mem_used_mib",
			      result_real(s->mem_used_bytes / GP_MIB), "mem_total_mib",
			      result_real(s->mem_total_bytes / GP_MIB), "power_w",
			      result_real(s->power_mw / 1000.0), "temp_c", s->temp_c, "sm_clock_mhz",
			      s->sm_clock_mhz, "mem_clock_mhz", s->mem_clock_mhz, "throttle",
			      nvml_throttle_reason_str(s->throttle_reasons, why, sizeof(why)),
			      "throttle_mask", (json_int_t)s->throttle_reasons);
	if (j && gpm) {
		json_object_set_new(j, "sm_activity_pct", result_real(r->gpm.sm_util_pct));
		json_object_set_new(j, "sm_occupancy_pct", result_real(r->gpm.sm_occupancy_pct));
		json_object_set_new(j, "tensor_activity_pct", result_real(r->gpm.tensor_util_pct));
		json_object_set_new(j, "dram_bw_util_pct", result_real(r->gpm.dram_bw_util_pct));
	}
	if (j && pid) {
		json_object_set_new(j, "pid_mem_mib", result_real(r->proc_mem_mib));
		json_object_set_new(j, "pid_sm_pct", result_real(r->proc_sm_pct));
	}
	return j;
}

/* A number for the table and the CSV, "-" / empty when absent. */
static const char *fmt_num(char *buf, size_t cap, double v, const char *fmt, const char *none)
{
	if (isfinite(v))
		snprintf(buf, cap, fmt, v);
	else
		snprintf(buf, cap, "%s", none);
	return buf;
}

static int write_csv(const char *path, const struct monitor_row *rows, int n, double t0,
		     int gpm, int pid)
{
	struct atomic_file af;
	char why[160], a[32], b[32], c[32], d[32];
	GP_TRY(atomic_file_open(&af, path));
	fprintf(af.f, "t_s,util_gpu_pct,util_mem_pct,mem_used_mib,mem_total_mib,power_w,temp_c,"
		      "sm_clock_mhz,mem_clock_mhz,throttle%s%s\n",
		gpm ? ",sm_activity_pct,sm_occupancy_pct,tensor_activity_pct,dram_bw_util_pct" : "",
		pid ? ",pid_mem_mib,pid_sm_pct" : "");
	for (int i = 0; i < n; i++) {
		const struct nvml_sample *s = &rows[i].s;
		/* The reasons are joined by ';' so that the row keeps its columns. */
		nvml_throttle_reason_str(s->throttle_reasons, why, sizeof(why));
		for (char *p = why; *p; p++)
			if (*p == ',')
				*p = ';';
		fprintf(af.f, "%.3f,%u,%u,%.1f,%.1f,%.3f,%u,%u,%u,%s", s->t_s - t0, s->util_gpu_pct,
			s->util_mem_pct, s->mem_used_bytes / GP_MIB, s->mem_total_bytes / GP_MIB,
			s->power_mw / 1000.0, s->temp_c, s->sm_clock_mhz, s->mem_clock_mhz, why);
		if (gpm)
			fprintf(af.f, ",%s,%s,%s,%s",
				fmt_num(a, sizeof(a), rows[i].gpm.sm_util_pct, "%.2f", ""),
				fmt_num(b, sizeof(b), rows[i].gpm.sm_occupancy_pct, "%.2f", ""),
				fmt_num(c, sizeof(c), rows[i].gpm.tensor_util_pct, "%.2f", ""),
				fmt_num(d, sizeof(d), rows[i].gpm.dram_bw_util_pct, "%.2f", ""));
		if (pid)
			fprintf(af.f, ",%s,%s", fmt_num(a, sizeof(a), rows[i].proc_mem_mib, "%.1f", ""),
				fmt_num(b, sizeof(b), rows[i].proc_sm_pct, "%.0f", ""));
		fputc('\n', af.f);
	}
	return atomic_file_commit(&af);
}

int cmd_monitor(int argc, char **argv)
{
	double interval = 1.0, duration = 0;
	int count = 0, dev = 0, pid = 0, help = 0, overwrite = 0;
	const char *out = NULL, *csv = NULL;
	struct opt opts[] = {
		{ "interval", OPT_DOUBLE, &interval, "seconds between samples (1)", 0, 0, .min_d = 0.01, .max_d = 3600, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		{ "duration", OPT_DOUBLE, &duration, "stop after this many seconds (default: until Ctrl-C)", 0, 0, .min_d = 0, .max_d = 31536000, .range = OPT_MIN_EXCL | OPT_MAX_INCL },
		{ "count", OPT_INT, &count, "stop after this many samples (default: until Ctrl-C)", 1, ARGS_MAX_STEPS },
		{ "pid", OPT_INT, &pid, "follow this process: its GPU memory and SM share; stop when it exits", 1, 2147483647 },
		{ "csv", OPT_PATH, &csv, "also write every sample as a CSV row to this file" },
		{ "gpu", OPT_INT, &dev, "NVML device index (0)", 0, 63 },
		OPT_OUT(&out, "monitor.json", "monitor"),
		OPT_OVERWRITE(&overwrite, "monitor.json"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf monitor [--interval S] [--duration S] [--count N] [--pid P] "
				"[--csv FILE] [--gpu I] [--out DIR]", opts);
		return 0;
	}
	if (pid && !process_alive(pid))
		return gp_error(GP_EINVAL, "--pid %d: no such process", pid);
	GP_TRY(nvml_open());
	int rc, n_dev = 0, n = 0, cap = 0;
	struct nvml_static_info info;
	struct nvml_gpm *gpm = NULL;
	struct monitor_row *rows = NULL;
	json_t *res = NULL, *samples = json_array();
	if ((rc = nvml_device_count(&n_dev)) < 0)
		goto out;
	if (dev < 0 || dev >= n_dev) {
		rc = gp_error(GP_EINVAL, "--gpu %d: NVML sees %d GPU(s)", dev, n_dev);
		goto out;
	}
	if ((rc = nvml_static_info(dev, &info)) < 0)
		goto out;
	if (csv && (rc = path_file_prepare(csv)) < 0)
		goto out;
	char run_dir[4096];
	if ((rc = result_dir_prepare("monitor", "monitor", out, overwrite, run_dir,
				     sizeof(run_dir))) < 0)
		goto out;
	out = run_dir;
	/* GPM is a bonus: where the GPU or driver lacks it, say why once and go on. */
	char gpm_note[300] = "";
	if (nvml_gpm_open(dev, &gpm) < 0) {
		snprintf(gpm_note, sizeof(gpm_note), "%s", gp_errmsg());
		gp_error_clear();
	}
	printf("%s (driver %s), %.0f MiB, power limit %.0f W%s\n", info.name, info.driver_version,
	       info.mem_total_bytes / GP_MIB, info.power_limit_mw / 1000.0,
	       count || duration > 0 || pid ? "" : "; Ctrl-C to stop");
	if (!gpm)
		printf("no GPM figures: %s\n", gpm_note);
	printf("%8s %6s %6s %17s %9s %6s %9s %9s", "time s", "gpu %", "mem %", "memory MiB",
	       "power W", "temp C", "SM MHz", "mem MHz");
	if (gpm)
		printf(" %6s %8s %6s", "SM act", "tensor %", "DRAM %");
	if (pid)
		printf(" %8s %6s", "pid MiB", "pid SM");
	printf("  %s\n", "clock events");
	/* SIGTERM (timeout, job schedulers) ends the run as Ctrl-C does: the summary is
	 * printed and the samples so far are written. The handlers before (main's
	 * temporary-file cleanup) return after the loop. */
	struct sigaction stop, old_int, old_term;
	memset(&stop, 0, sizeof(stop));
	stop.sa_handler = monitor_on_signal;
	sigemptyset(&stop.sa_mask);
	monitor_stop = 0;
	sigaction(SIGINT, &stop, &old_int);
	sigaction(SIGTERM, &stop, &old_term);
	const char *ended = "signal";
	unsigned long long proc_ts = 0;
	int gpm_ok = gpm != NULL;
	double t0 = gp_now_s();
	for (int i = 0;; i++) {
		if (count && i >= count) {
			ended = "count";
			break;
		}
		/* Samples at t0 + i * interval, none past the duration. */
		double due = t0 + i * interval;
		if (duration > 0 && due - t0 > duration + 1e-9) {
			sleep_until(t0 + duration, 0); /* end on time, not at the next sample */
			ended = monitor_stop ? "signal" : "duration";
			break;
		}
		if (i && sleep_until(due, pid)) {
			ended = "process exited";
			break;
		}
		if (monitor_stop)
			break;
		if (n == cap) {
			int grown_cap = cap ? cap * 2 : 256;
			struct monitor_row *grown = realloc(rows, grown_cap * sizeof(*grown));
			if (!grown) {
				rc = gp_error(GP_ENOMEM, "no memory for %d samples", grown_cap);
				break;
			}
			rows = grown;
			cap = grown_cap;
		}
		struct monitor_row *r = &rows[n];
		if ((rc = nvml_sample(dev, &r->s)) < 0)
			break;
		/* The first row has no GPM interval behind it yet (the reader opened
		 * microseconds before); each later one covers the interval since the last. */
		r->gpm = (struct nvml_gpm_metrics){ NAN, NAN, NAN, NAN, NAN };
		int gpm_rc = gpm_ok && i > 0 ? nvml_gpm_read(gpm, &r->gpm) : 0;
		if (gpm_rc == GP_ENOTFOUND) {
			gp_error_clear(); /* samples under 100 ms apart: GPM every few rows */
		} else if (gpm_rc < 0) {
			/* A failing read (a reset, MIG enabled meanwhile) ends the GPM figures,
			 * not the run. */
			printf("no more GPM figures: %s\n", gp_errmsg());
			gp_error_clear();
			gpm_ok = 0;
		}
		r->proc_mem_mib = r->proc_sm_pct = NAN;
		if (pid) {
			size_t bytes;
			unsigned sm, mem;
			/* No context yet (or any more) reads as 0 MiB: the process is alive. */
			r->proc_mem_mib = nvml_process_mem_bytes(dev, (unsigned)pid, &bytes) == 0
						  ? bytes / GP_MIB : 0;
			if (nvml_process_util(dev, (unsigned)pid, &proc_ts, &sm, &mem) == 0)
				r->proc_sm_pct = sm;
		}
		n++;
		char why[160], a[16], b[16], c[16], d[16], e[16];
		printf("%8.1f %6u %6u %8.0f/%-8.0f %9.1f %6u %9u %9u", r->s.t_s - t0, r->s.util_gpu_pct,
		       r->s.util_mem_pct, r->s.mem_used_bytes / GP_MIB, r->s.mem_total_bytes / GP_MIB,
		       r->s.power_mw / 1000.0, r->s.temp_c, r->s.sm_clock_mhz, r->s.mem_clock_mhz);
		if (gpm)
			printf(" %6s %8s %6s", fmt_num(a, sizeof(a), r->gpm.sm_util_pct, "%.1f", "-"),
			       fmt_num(b, sizeof(b), r->gpm.tensor_util_pct, "%.1f", "-"),
			       fmt_num(c, sizeof(c), r->gpm.dram_bw_util_pct, "%.1f", "-"));
		if (pid)
			printf(" %8s %6s", fmt_num(d, sizeof(d), r->proc_mem_mib, "%.0f", "-"),
			       fmt_num(e, sizeof(e), r->proc_sm_pct, "%.0f", "-"));
		printf("  %s\n", nvml_throttle_reason_str(r->s.throttle_reasons, why, sizeof(why)));
		fflush(stdout);
		json_array_append_new(samples, row_json(r, t0, gpm != NULL, pid));
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	if (rc < 0)
		goto out;

	struct monitor_summary sum;
	struct nvml_gpm_metrics *g = NULL;
	struct nvml_sample *s = malloc((n ? n : 1) * sizeof(*s));
	if (gpm)
		g = malloc((n ? n : 1) * sizeof(*g));
	if (!s || (gpm && !g)) {
		free(s);
		free(g);
		rc = gp_error(GP_ENOMEM, "no memory for the summary");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		s[i] = rows[i].s;
		if (g)
			g[i] = rows[i].gpm;
	}
	monitor_summarize(s, g, n, info.power_limit_mw, &sum);
	free(s);
	free(g);
	monitor_summary_print(stdout, &sum);
	/* The followed process: its own memory peak and mean SM share. */
	double pid_peak = NAN, pid_sm = NAN;
	if (pid) {
		double sm_sum = 0;
		int sm_n = 0;
		for (int i = 0; i < n; i++) {
			if (isfinite(rows[i].proc_mem_mib))
				pid_peak = isfinite(pid_peak) ? fmax(pid_peak, rows[i].proc_mem_mib)
							      : rows[i].proc_mem_mib;
			if (isfinite(rows[i].proc_sm_pct)) {
				sm_sum += rows[i].proc_sm_pct;
				sm_n++;
			}
		}
		if (sm_n)
			pid_sm = sm_sum / sm_n;
		char a[32], b[32];
		printf("process %d: memory peak %s MiB, SM share mean %s %%\n", pid,
		       fmt_num(a, sizeof(a), pid_peak, "%.0f", "n/a"),
		       fmt_num(b, sizeof(b), pid_sm, "%.1f", "n/a"));
	}
	printf("ended by: %s\n", ended);

	res = result_new("monitor", argc, argv);
	if (!res) {
		rc = gp_error(GP_ENOMEM, "out of memory writing the result");
		goto out;
	}
	result_set_gpu(res, result_gpu_from_nvml(&info));
	json_object_set_new(res, "settings",
			    json_pack("{s:o, s:o, s:i, s:i, s:o}", "interval_s", result_real(interval),
				      "duration_s", duration > 0 ? result_real(duration) : json_null(),
				      "gpu", dev, "pid", pid, "csv", result_string(csv)));
	json_object_set_new(res, "measurements",
			    json_pack("{s:O, s:o, s:s, s:b, s:o}", "samples", samples, "summary",
				      monitor_summary_json(&sum), "ended_by", ended, "gpm", gpm != NULL,
				      "gpm_unavailable", gpm ? json_null() : json_string(gpm_note)));
	if (pid)
		json_object_set_new(json_object_get(json_object_get(res, "measurements"), "summary"),
				    "pid", json_pack("{s:i, s:o, s:o}", "pid", pid, "mem_peak_mib",
						     result_real(pid_peak), "sm_share_mean_pct",
						     result_real(pid_sm)));
	char path[4096];
	if ((rc = result_write(res, out, "monitor", path, sizeof(path))) < 0)
		goto out;
	printf("wrote %s\n", path);
	if (n > 0) {
		snprintf(path, sizeof(path), "%s/monitor.png", out);
		if ((rc = monitor_plot(json_object_get(res, "measurements"), path)) < 0)
			goto out;
		printf("wrote %s\n", path);
	}
	if (csv) {
		if ((rc = write_csv(csv, rows, n, t0, gpm != NULL, pid)) < 0)
			goto out;
		printf("wrote %s\n", csv);
	}
out:
	free(rows);
	nvml_gpm_close(gpm);
	json_decref(samples);
	json_decref(res);
	nvml_close();
	return rc;
}
