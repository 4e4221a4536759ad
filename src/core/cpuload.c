#include "core/cpuload.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timeutil.h"

int cpu_stat_parse(const char *text, unsigned long long *busy, unsigned long long *total)
{
	unsigned long long v[8] = { 0 };
	const char *line = text;
	while (line && strncmp(line, "cpu ", 4)) {
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	/* steal and later fields are absent on old kernels: at least the first four */
	if (!line || sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
			    &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 4)
		return gp_error(GP_EFORMAT, "/proc/stat has no \"cpu\" line");
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	*busy = *total - v[3] - v[4];
	return 0;
}

void cpu_mark_now(struct cpu_mark *m)
{
	struct rusage ru;
	memset(m, 0, sizeof(*m));
	m->wall_s = gp_now_s();
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		m->proc_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
			    ru.ru_stime.tv_usec / 1e6;
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return;
	char buf[512];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	m->sys_ok = cpu_stat_parse(buf, &m->sys_busy, &m->sys_total) == 0;
	if (!m->sys_ok)
		gp_error_clear();
}

void cpu_load_between(const struct cpu_mark *a, const struct cpu_mark *b, struct cpu_load *out)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	double wall = b->wall_s - a->wall_s;
	out->cores = cores > 0 ? (int)cores : 1;
	out->proc_cores = wall > 0 ? (b->proc_s - a->proc_s) / wall : 0;
	out->machine_pct = out->machine_cores = -1;
	if (a->sys_ok && b->sys_ok && b->sys_total > a->sys_total) {
		out->machine_pct = 100.0 * (double)(b->sys_busy - a->sys_busy) /
				   (double)(b->sys_total - a->sys_total);
		out->machine_cores = out->machine_pct / 100 * out->cores;
	}
}
