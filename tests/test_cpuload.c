/* core/cpuload.h: cores busy of a process and of the machine. Two threads spinning
 * for 0.4 s read about 2 cores (their own thread clocks say how much CPU the machine
 * gave them: on a shared machine the figure is checked against that, and against 2
 * where they got most of two cores); a sleeping process about 0; /proc/stat's line
 * parsed by hand. Each measure runs in a forked child: the test binary's own
 * threads (OpenBLAS's spin a while after start) are busy too, and would count. */
#include <pthread.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "core/cpuload.h"
#include "core/error.h"
#include "core/timeutil.h"

struct spinner {
	atomic_int *stop;
	double cpu_s;
};

static void *spin(void *arg)
{
	struct spinner *s = arg;
	volatile unsigned long x = 0;
	while (!atomic_load(s->stop))
		x++;
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	s->cpu_s = ts.tv_sec + ts.tv_nsec / 1e9;
	return NULL;
}

/* fn(out) in a child process of one thread; out (4 doubles) comes back by a pipe. */
static int in_child(void (*fn)(double *out), double *out)
{
	int fd[2];
	if (pipe(fd) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		double r[4] = { 0 };
		fn(r);
		_exit(write(fd[1], r, sizeof(r)) == sizeof(r) ? 0 : 1);
	}
	close(fd[1]);
	ssize_t n = pid > 0 ? read(fd[0], out, 4 * sizeof(double)) : -1;
	close(fd[0]);
	int st = 0;
	if (pid > 0)
		waitpid(pid, &st, 0);
	return n == 4 * sizeof(double) && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* out: cores busy, the threads' own clock over the wall time, machine %, cores */
static void spin_two(double *out)
{
	atomic_int stop = 0;
	struct spinner sp[2] = { { &stop, 0 }, { &stop, 0 } };
	pthread_t th[2];
	struct cpu_mark a, b;
	struct cpu_load l;
	cpu_mark_now(&a);
	for (int i = 0; i < 2; i++)
		CHECK_EQ_INT(pthread_create(&th[i], NULL, spin, &sp[i]), 0);
	usleep(400 * 1000);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cpu_mark_now(&b);
	cpu_load_between(&a, &b, &l);
	out[0] = l.proc_cores;
	out[1] = (sp[0].cpu_s + sp[1].cpu_s) / (b.wall_s - a.wall_s);
	out[2] = l.machine_pct;
	out[3] = l.cores;
}

TEST(cpuload_two_spinning_threads_are_two_cores)
{
	double r[4];
	CHECK_EQ_INT(in_child(spin_two, r), 0);
	struct cpu_load l = { .proc_cores = r[0], .machine_pct = r[2], .cores = (int)r[3] };
	l.machine_cores = l.machine_pct / 100 * l.cores;
	double given = r[1];
	printf("    two spinning threads: %.2f cores busy (their thread clocks: %.2f); machine "
	       "%.0f%% of %d cores\n", l.proc_cores, given, l.machine_pct, l.cores);
	CHECK_NEAR(l.proc_cores, given, 0.15 + 0.05 * given);
	if (given >= 1.6) /* the threads got most of two cores: the figure reads about 2 */
		CHECK_MSG(l.proc_cores > 1.5 && l.proc_cores < 2.2, "%.2f cores", l.proc_cores);
	else
		printf("    (the machine is busy: the threads got %.2f cores, not 2)\n", given);
	if (l.machine_pct >= 0)
		CHECK_MSG(l.machine_cores >= 0.8 * l.proc_cores && l.machine_pct <= 100.0001,
			  "machine %.2f cores (%.1f%%) for a process of %.2f", l.machine_cores,
			  l.machine_pct, l.proc_cores);
}

static void sleep_a_while(double *out)
{
	struct cpu_mark a, b;
	struct cpu_load l;
	cpu_mark_now(&a);
	usleep(300 * 1000);
	cpu_mark_now(&b);
	cpu_load_between(&a, &b, &l);
	out[0] = l.proc_cores;
	cpu_load_between(&a, &a, &l); /* no time: no load, no division by zero */
	out[1] = l.proc_cores;
}

TEST(cpuload_sleeping_process_is_idle)
{
	double r[4];
	CHECK_EQ_INT(in_child(sleep_a_while, r), 0);
	CHECK_MSG(r[0] >= 0 && r[0] < 0.05, "%.3f cores", r[0]);
	CHECK(r[1] == 0);
}

TEST(cpuload_proc_stat_parse)
{
	unsigned long long busy, total;
	/* user nice system idle iowait irq softirq steal guest guest_nice */
	const char *text = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
	CHECK_EQ_INT(cpu_stat_parse(text, &busy, &total), 0);
	CHECK_EQ_INT(total, 990);
	CHECK_EQ_INT(busy, 170);
	CHECK_EQ_INT(cpu_stat_parse("intr 1 2\ncpu  1 2 3 4\n", &busy, &total), 0);
	CHECK_EQ_INT(total, 10);
	CHECK_EQ_INT(busy, 6);
	CHECK_EQ_INT(cpu_stat_parse("cpu0 1 2 3 4\n", &busy, &total), GP_EFORMAT);
	CHECK_EQ_INT(cpu_stat_parse("cpu  1 2\n", &busy, &total), GP_EFORMAT);
}
