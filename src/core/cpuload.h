/* CPU load beside GPU load: how many cores this process kept busy over a stretch of
 * wall time (user + system time from getrusage over the wall time: 2.0 is two cores
 * flat out) and how busy the whole machine was (/proc/stat's first line: the share
 * of all cores not idle, and that share times the core count). A data loader that
 * decodes JPEGs can keep a dozen cores busy for a GPU that a handful would feed:
 * `loader`, `workers` and `train` print both figures (docs/data.md). */
#ifndef GP_CORE_CPULOAD_H
#define GP_CORE_CPULOAD_H

/* One reading of the clocks; two readings make a load. */
struct cpu_mark {
	double wall_s;                    /* monotonic */
	double proc_s;                    /* this process's user + system CPU seconds */
	unsigned long long sys_busy, sys_total; /* /proc/stat ticks, all cores */
	int sys_ok;                       /* /proc/stat was read */
};

struct cpu_load {
	double proc_cores;     /* cores this process kept busy on average */
	double machine_pct;    /* share of all the machine's cores busy, 0..100; -1 unknown */
	double machine_cores;  /* machine_pct of the core count; -1 unknown */
	int cores;             /* cores online */
};

void cpu_mark_now(struct cpu_mark *m);
/* The load between two marks (b after a); zeros for no time between them. */
void cpu_load_between(const struct cpu_mark *a, const struct cpu_mark *b, struct cpu_load *out);
/* Busy and total ticks from /proc/stat's text (its "cpu " line: user nice system idle
 * iowait irq softirq steal; idle and iowait are not busy). 0, or GP_EFORMAT. */
int cpu_stat_parse(const char *text, unsigned long long *busy, unsigned long long *total);

#endif
