#include "cmd/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

#define LAUNCH_MAX_RANKS 256
#define LAUNCH_GRACE_S 3.0
#define LINE_CAP 1024

struct rank_proc {
	pid_t pid;           /* 0 once reaped */
	int err_fd;          /* its standard error; -1 at its end */
	int status;          /* waitpid's, once reaped */
	int failed;          /* ended badly before the launcher signalled it */
	double end_s;
	char line[LINE_CAP]; /* the partial line read so far */
	size_t len;
	char error[LINE_CAP]; /* its first error line */
};

static volatile sig_atomic_t launch_signal;

static void on_signal(int sig)
{
	launch_signal = sig;
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A port no one listens on now: bind port 0 and read back what the kernel gave. */
static int port_free(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int opt_is(const char *arg, const char *name, int *takes_next)
{
	size_t n = strlen(name);
	if (strncmp(arg, name, n))
		return 0;
	if (arg[n] == 0) {
		*takes_next = 1;
		return 1;
	}
	*takes_next = 0;
	return arg[n] == '=';
}

int launch_strip_args(int argc, char **argv)
{
	int out = 0;
	for (int i = 0; i < argc; i++) {
		int next = 0;
		if (i > 0 && (opt_is(argv[i], "--nproc", &next) ||
			      opt_is(argv[i], "--master-port", &next))) {
			i += next;
			continue;
		}
		argv[out++] = argv[i];
	}
	argv[out] = NULL;
	return out;
}

/* The child: torchrun's variables, rank 0 alone on standard output, standard error
 * into the launcher's pipe; then this program again. */
static void rank_exec(int r, int nproc, int port, const char *job, int err_w, char **args)
{
	char v[32];
	snprintf(v, sizeof(v), "%d", r);
	setenv("RANK", v, 1);
	setenv("LOCAL_RANK", v, 1);
	snprintf(v, sizeof(v), "%d", nproc);
	setenv("WORLD_SIZE", v, 1);
	setenv("LOCAL_WORLD_SIZE", v, 1);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	snprintf(v, sizeof(v), "%d", port);
	setenv("MASTER_PORT", v, 1);
	setenv("GPUPERF_DIST_JOB", job, 1);
	if (r > 0) {
		int null = open("/dev/null", O_WRONLY);
		if (null >= 0) {
			dup2(null, STDOUT_FILENO);
			close(null);
		}
	}
	dup2(err_w, STDERR_FILENO);
	close(err_w);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	execv("/proc/self/exe", args);
	dprintf(STDERR_FILENO, "gpuperf: error: cannot start rank %d: %s\n", r, strerror(errno));
	_exit(127);
}

/* One whole line of rank r's standard error: error lines are kept for the verdict,
 * the rest passed on (with the rank for ranks above 0). */
static void rank_line(struct rank_proc *p, int r, const char *line)
{
	if (strstr(line, "error: ")) {
		if (!p->error[0])
			snprintf(p->error, sizeof(p->error), "%s", line);
		return;
	}
	if (r > 0)
		fprintf(stderr, "[rank %d] %s\n", r, line);
	else
		fprintf(stderr, "%s\n", line);
}

static void rank_read(struct rank_proc *p, int r)
{
	char buf[4096];
	ssize_t k = read(p->err_fd, buf, sizeof(buf));
	if (k < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (k <= 0) {
		if (p->len) {
			p->line[p->len] = 0;
			rank_line(p, r, p->line);
			p->len = 0;
		}
		close(p->err_fd);
		p->err_fd = -1;
		return;
	}
	for (ssize_t i = 0; i < k; i++) {
		if (buf[i] == '\n' || p->len == LINE_CAP - 1) {
			p->line[p->len] = 0;
			rank_line(p, r, p->line);
			p->len = 0;
			if (buf[i] == '\n')
				continue;
		}
		p->line[p->len++] = buf[i];
	}
}

/* What ended rank r, in words: its own error line (without the program's prefix),
 * else its exit status or signal. */
static void rank_cause(const struct rank_proc *p, char *buf, size_t cap)
{
	const char *e = strstr(p->error, "error: ");
	char how[96];
	if (WIFSIGNALED(p->status))
		snprintf(how, sizeof(how), "killed by signal %d (%s)", WTERMSIG(p->status),
			 strsignal(WTERMSIG(p->status)));
	else
		snprintf(how, sizeof(how), "exit status %d", WEXITSTATUS(p->status));
	if (e)
		snprintf(buf, cap, "%s (%s)", e + 7, how);
	else
		snprintf(buf, cap, "%s", how);
}

/* The rank whose failure came first by itself: one whose error does not name
 * another rank's failure; else the first to fail. */
static int culprit(const struct rank_proc *p, int n)
{
	int first = -1, own = -1;
	for (int r = 0; r < n; r++) {
		if (!p[r].failed)
			continue;
		if (first < 0 || p[r].end_s < p[first].end_s)
			first = r;
		int k;
		const char *s = strstr(p[r].error, "rank ");
		int names_other = 0;
		for (; s; s = strstr(s + 5, "rank "))
			if (sscanf(s, "rank %d failed:", &k) == 1 && k != r && strstr(s, "failed:"))
				names_other = 1;
		if (!names_other && (own < 0 || p[r].end_s < p[own].end_s))
			own = r;
	}
	return own >= 0 ? own : first;
}

static int verdict(const struct rank_proc *p, int n)
{
	int r = culprit(p, n);
	if (r < 0)
		return gp_error(GP_EDEVICE, "a rank failed");
	int code = WIFEXITED(p[r].status) && WEXITSTATUS(p[r].status) == 2 ? GP_EINVAL : GP_EDEVICE;
	/* a rank that says another failed: that one, in its words */
	int k;
	const char *s = strstr(p[r].error, "rank ");
	if (s && sscanf(s, "rank %d failed:", &k) == 1 && k != r)
		return gp_error(code, "%s", s);
	char cause[LINE_CAP + 128];
	rank_cause(&p[r], cause, sizeof(cause));
	return gp_error(code, "rank %d failed: %s", r, cause);
}

int launch_local(int nproc, int argc, char **argv, const struct launch_opts *o)
{
	if (nproc < 1 || nproc > LAUNCH_MAX_RANKS)
		return gp_error(GP_EINVAL, "--nproc must be between 1 and %d (got %d)",
				LAUNCH_MAX_RANKS, nproc);
	int port = o && o->master_port ? o->master_port : port_free();
	double grace = o && o->grace_s > 0 ? o->grace_s : LAUNCH_GRACE_S;
	if (port <= 0)
		return gp_error(GP_EIO, "no free port on this host for the ranks to meet");
	char **args = calloc((size_t)argc + 2, sizeof(char *));
	struct rank_proc *p = calloc((size_t)nproc, sizeof(*p));
	if (!args || !p) {
		free(args);
		free(p);
		return gp_error(GP_ENOMEM, "out of memory");
	}
	args[0] = "gpuperf";
	memcpy(args + 1, argv, (size_t)argc * sizeof(char *));
	launch_strip_args(argc + 1, args);
	char job[64];
	snprintf(job, sizeof(job), "gpuperf-%d-%d", (int)getpid(), port);

	struct sigaction sa = { .sa_handler = on_signal }, old_int, old_term;
	sigemptyset(&sa.sa_mask);
	launch_signal = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	fflush(stdout);
	fflush(stderr);
	int started = 0, rc = 0;
	for (int r = 0; r < nproc; r++) {
		int fds[2];
		if (pipe2(fds, O_CLOEXEC) < 0) {
			rc = gp_error(GP_EIO, "pipe: %s", strerror(errno));
			break;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(fds[0]);
			/* the write end must survive execv */
			int w = dup(fds[1]);
			rank_exec(r, nproc, port, job, w, args);
		}
		close(fds[1]);
		if (pid < 0) {
			close(fds[0]);
			rc = gp_error(GP_EIO, "fork: %s", strerror(errno));
			break;
		}
		p[r].pid = pid;
		p[r].err_fd = fds[0];
		started++;
	}
	int live = started, open_fds = started, failed = rc < 0, interrupted = 0;
	double t_fail = rc < 0 ? mono_s() : 0;
	int termed = 0, killed = 0;
	while (live > 0 || open_fds > 0) {
		struct pollfd pf[LAUNCH_MAX_RANKS];
		int who[LAUNCH_MAX_RANKS], m = 0;
		for (int r = 0; r < started; r++)
			if (p[r].err_fd >= 0) {
				pf[m] = (struct pollfd){ .fd = p[r].err_fd, .events = POLLIN };
				who[m++] = r;
			}
		if (poll(pf, (nfds_t)m, 50) > 0)
			for (int i = 0; i < m; i++)
				if (pf[i].revents)
					rank_read(&p[who[i]], who[i]);
		open_fds = 0;
		for (int r = 0; r < started; r++)
			open_fds += p[r].err_fd >= 0;
		for (int r = 0; r < started; r++) {
			int st;
			if (!p[r].pid || waitpid(p[r].pid, &st, WNOHANG) != p[r].pid)
				continue;
			p[r].pid = 0;
			p[r].status = st;
			p[r].end_s = mono_s();
			live--;
			if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) || termed)
				continue;
			p[r].failed = 1;
			if (!failed) {
				failed = 1;
				t_fail = p[r].end_s;
			}
		}
		if (launch_signal && !interrupted) {
			interrupted = launch_signal;
			for (int r = 0; r < started; r++)
				if (p[r].pid)
					kill(p[r].pid, interrupted);
			if (!failed) {
				failed = 1;
				t_fail = mono_s();
			}
		}
		/* the others had their chance to fail by themselves through the group */
		double since = failed ? mono_s() - t_fail : 0;
		if (failed && live > 0 && !termed && since > grace) {
			termed = 1;
			for (int r = 0; r < started; r++)
				if (p[r].pid)
					kill(p[r].pid, SIGTERM);
		}
		if (failed && live > 0 && !killed && since > 2 * grace) {
			killed = 1;
			for (int r = 0; r < started; r++)
				if (p[r].pid)
					kill(p[r].pid, SIGKILL);
		}
		/* what a rank's own children hold open must not keep the launcher */
		if (live == 0 && open_fds > 0 && since > 3 * grace)
			for (int r = 0; r < started; r++)
				if (p[r].err_fd >= 0) {
					close(p[r].err_fd);
					p[r].err_fd = -1;
					open_fds--;
				}
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	/* no failure: a held line was only words, and belongs to the user */
	for (int r = 0; rc == 0 && !failed && r < started; r++) {
		if (p[r].error[0] && r > 0)
			fprintf(stderr, "[rank %d] %s\n", r, p[r].error);
		else if (p[r].error[0])
			fprintf(stderr, "%s\n", p[r].error);
	}
	if (rc == 0 && interrupted)
		rc = gp_error(GP_EIO, "interrupted by %s: every rank was stopped",
			      strsignal(interrupted));
	else if (rc == 0 && failed)
		rc = verdict(p, started);
	else if (rc < 0 && started)
		gp_error_wrap(rc, "starting %d ranks (%d started)", nproc, started);
	free(args);
	free(p);
	return rc;
}
