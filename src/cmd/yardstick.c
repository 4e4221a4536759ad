#include "cmd/yardstick.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timeutil.h"

extern char **environ;

int yardstick_find(const char *script, char *path, size_t cap)
{
	char exe[4096];
	static const char *const up[] = { "/..", "/../..", "/../../.." };
	snprintf(path, cap, "tools/%s", script);
	if (access(path, R_OK) == 0)
		return 1;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	for (size_t i = 0; i < sizeof(up) / sizeof(up[0]); i++) {
		snprintf(path, cap, "%s%s/tools/%s", exe, up[i], script);
		if (access(path, R_OK) == 0)
			return 1;
	}
	return 0;
}

int yardstick_usable(char *why, size_t cap)
{
	int st = system("python3 -c 'import torch, torchvision, sys; "
			"sys.exit(0 if torch.cuda.is_available() else 3)' >/dev/null 2>&1");
	if (st == 0)
		return 1;
	snprintf(why, cap, "%s", WIFEXITED(st) && WEXITSTATUS(st) == 3
		 ? "PyTorch sees no CUDA GPU"
		 : "python3 with torch and torchvision is not here");
	return 0;
}

/* environ with c->env's entries replacing those of the same name: built before the
 * fork, so that the child only assigns it (no allocation between fork and exec). */
static char **env_merged(const char *const *add)
{
	size_t n = 0, k = 0;
	while (environ && environ[n])
		n++;
	while (add && add[k])
		k++;
	char **e = malloc(sizeof(char *) * (n + k + 1));
	if (!e)
		return NULL;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = strcspn(environ[i], "=");
		int replaced = 0;
		for (size_t j = 0; j < k && !replaced; j++)
			replaced = !strncmp(add[j], environ[i], len) && add[j][len] == '=';
		if (!replaced)
			e[m++] = environ[i];
	}
	for (size_t j = 0; j < k; j++)
		e[m++] = (char *)add[j];
	e[m] = NULL;
	return e;
}

int child_run(struct child_run *c)
{
	char **env = c->env ? env_merged(c->env) : NULL;
	if (c->env && !env)
		return gp_error(GP_ENOMEM, "no memory for the environment of '%s'", c->argv[0]);
	fflush(stdout);
	fflush(stderr);
	double t0 = gp_now_s();
	pid_t pid = fork();
	if (pid == 0) {
		dup2(c->fd_out, STDOUT_FILENO);
		dup2(c->fd_log, STDERR_FILENO);
		if (env)
			environ = env;
		if (c->exec_path)
			execv(c->exec_path, c->argv);
		else
			execvp(c->argv[0], c->argv);
		dprintf(STDERR_FILENO, "error: cannot run %s: %s\n", c->argv[0], strerror(errno));
		_exit(127);
	}
	free(env);
	c->status = -1;
	c->killed = 0;
	c->seconds = 0;
	if (pid < 0)
		return gp_error(GP_EIO, "cannot start %s: %s", c->argv[0], strerror(errno));
	int stage = 0; /* 1: SIGTERM sent, 2: SIGKILL sent */
	for (;;) {
		int status = 0;
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid) {
			c->status = status;
			break;
		}
		if (w < 0 && errno != EINTR)
			break;
		double el = gp_now_s() - t0;
		if (el > c->limit_s && stage == 0) {
			kill(pid, SIGTERM);
			stage = 1;
		} else if (el > c->limit_s + 10 && stage == 1) {
			kill(pid, SIGKILL);
			stage = 2;
		}
		if (c->tick)
			c->tick(c->ctx, el);
		struct timespec ts = { 0, 200 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	c->killed = stage > 0;
	c->seconds = gp_now_s() - t0;
	return 0;
}

int child_run_ok(const struct child_run *c)
{
	return c->status >= 0 && WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
}

void yardstick_last_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	buf[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = 0;
		if (*line)
			snprintf(buf, cap, "%.*s", (int)cap - 1, line);
	}
	fclose(f);
}

void yardstick_error_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	char line[1024], any[1024] = "";
	buf[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = 0;
		int word = 0;
		for (const char *p = line; *p && !word; p++)
			word = isalnum((unsigned char)*p);
		if (!word)
			continue;
		snprintf(any, sizeof(any), "%s", line);
		if (strstr(line, "Error:") && !strstr(line, "ChildFailedError"))
			snprintf(buf, cap, "%.*s", (int)cap - 1, line);
	}
	fclose(f);
	if (!*buf)
		snprintf(buf, cap, "%.*s", (int)cap - 1, any);
}
