/* The PyTorch yardsticks beside gpuperf's own figures (bench --torch: 
 * tools/torch_baseline.py; scale --torch: tools/torch_ddp.py): where a script lies,
 * whether python3 with torch can run it here, and a child process run with a time
 * limit (bench's stages use the same runner for gpuperf itself). */
#ifndef GP_CMD_YARDSTICK_H
#define GP_CMD_YARDSTICK_H

#include <stddef.h>

/* tools/<script> under the working folder, or beside the binary (build/gpuperf,
 * build/bundle/gpuperf: ../tools, ../../tools, ../../../tools). 1 and the path in
 * path when found, 0 when not. */
int yardstick_find(const char *script, char *path, size_t cap);

/* Can a yardstick run here: python3 (from PATH) with torch and torchvision, and
 * PyTorch sees a CUDA GPU? 1 when so; 0 and in why (cap bytes) the reason, a clause
 * without a final stop ("python3 with torch and torchvision is not here"). */
int yardstick_usable(char *why, size_t cap);

/* One child process, supervised until it ends or runs out of time. */
struct child_run {
	char *const *argv;     /* NULL-terminated; argv[0] looked up in PATH ... */
	const char *exec_path; /* ... unless this is set (e.g. "/proc/self/exe") */
	const char *const *env; /* "NAME=VALUE" set in the child only; NULL-terminated or NULL */
	int fd_out, fd_log;    /* its standard output and error (left open) */
	double limit_s;        /* SIGTERM past it, SIGKILL 10 s later */
	void (*tick)(void *ctx, double elapsed_s); /* every 200 ms while it runs, or NULL */
	void *ctx;
	/* what became of it */
	int status;            /* waitpid's; -1 when it could not be waited for */
	int killed;            /* 1: stopped for running past limit_s */
	double seconds;
};

/* Start c->argv and wait for it. An error only when it could not be started; its own
 * failure is in c->status (child_run_ok). */
int child_run(struct child_run *c);
/* Did it exit with status 0? */
int child_run_ok(const struct child_run *c);

/* The last non-empty line of a text file (a child's log: its error line when it
 * failed); "" when there is none. */
void yardstick_last_line(const char *path, char *buf, size_t cap);

/* What a failed torchrun says went wrong, from its log: the last line with an
 * exception ("...Error: ...", not torchrun's own ChildFailedError), else the last
 * line with a letter or digit in it (torchrun ends with rules of '=' and '-');
 * "" when there is none. */
void yardstick_error_line(const char *path, char *buf, size_t cap);

#endif
