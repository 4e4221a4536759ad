/* gpuperf: the command table. Only this file exits. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmds.h"
#include "core/error.h"
#include "core/file.h"
#include "core/interrupt.h"
#include "core/version.h"
#include "gpu/devinfo.h"
#include "report/result.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "info", cmd_info, "model summary: layers, parameters, MACs, training memory" },
	{ "train", cmd_train, "train a model (synthetic data, an ImageFolder or CIFAR-10) and report img/s" },
	{ "scale", cmd_scale, "data-parallel training on 1, 2, 4, 8 GPUs: the scaling report" },
	{ "plot", cmd_plot, "draw the charts of a result (JSON) file" },
	{ "analyze", cmd_analyze, "read a profile trace directory: breakdown, top ops, advice" },
	{ "parity", cmd_parity, "(for tests) train a few steps from given weights and batch, dump results" },
	{ "dataset", cmd_dataset, "make a synthetic ImageFolder of JPEGs (dataset make)" },
	{ "loader", cmd_loader, "data-loader throughput by worker count" },
	{ "compare", cmd_compare, "train several models in turn: size, memory (engine and nvidia-smi), img/s" },
	{ "amp", cmd_amp, "FP32 against mixed precision (tf32, fp16, bf16) by batch size: time, img/s, speed-up" },
	{ "maxbatch", cmd_maxbatch, "find the largest batch that trains: doubling, then bisection" },
	{ "workers", cmd_workers, "train once per data-loader worker count: GPU utilization, data wait, img/s" },
	{ "profile", cmd_profile, "record training steps: trace, breakdown, charts, overhead" },
	{ "roofline", cmd_roofline, "each op's time against its bound from the GPU's peak math and bandwidth" },
	{ "advise", cmd_advise, "find what holds training back and prove each fix by measuring it" },
	{ "bench", cmd_bench, "benchmark this machine: the suite that fits it, one report (HTML and Markdown)" },
	{ "diff", cmd_diff, "compare two runs metric by metric: change, noise, regressions (exit 1)" },
	{ "menu", cmd_menu, "choose a question from a menu (what plain gpuperf does on a terminal)" },
	{ "dist-check", cmd_dist_check, "check the process group of several ranks: collectives, bandwidth" },
	{ "monitor", cmd_monitor, "live NVML view: utilization, memory, power, temperature, clocks" },
	{ NULL, NULL, NULL },
};

static void usage(FILE *f)
{
	fprintf(f, "gpuperf %s: GPU performance lab for CNN training\n\n"
		   "usage: gpuperf COMMAND [options]   (gpuperf COMMAND --help for its options)\n\n"
		   "commands:\n", GPUPERF_VERSION);
	for (const struct command *c = commands; c->name; c++)
		fprintf(f, "  %-10s %s\n", c->name, c->summary);
}

/* A closed standard descriptor would be handed to the next file opened, and what is
 * printed would land in a result: hold each closed one with /dev/null opened for
 * reading, so that a write there fails and says so. */
static void std_fds_hold(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int got = open("/dev/null", O_RDONLY);
		if (got >= 0 && got != fd)
			close(got);
	}
}

/* What was printed reached standard output: a full disk or a closed pipe there loses
 * the tables or the JSON the user asked for, so it is an error, not a success. */
static int stdout_check(const char *name)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return 0;
	/* stdio keeps no errno from the write that failed: one byte more finds it */
	if (!errno && write(STDOUT_FILENO, "\n", 1) == 1)
		errno = EIO;
	fprintf(stderr, "gpuperf %s: error: cannot write to standard output: %s\n", name,
		errno ? strerror(errno) : "a write failed");
	return 1;
}

int main(int argc, char **argv)
{
	std_fds_hold();
	gpu_process_defaults();
	/* An interrupted run leaves no half-written temporary files behind. */
	if (file_cleanup_on_signals() < 0) {
		fprintf(stderr, "gpuperf: error: %s\n", gp_errmsg());
		return 1;
	}
	if (argc < 2) {
		/* a person at a terminal gets the menu; scripts and pipes the usage */
		if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
			char *menu_argv[] = { "menu", NULL };
			return cmd_menu(1, menu_argv) < 0 ? 1 : 0;
		}
		usage(stdout);
		return stdout_check("usage");
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("gpuperf %s\n", GPUPERF_VERSION);
		return 0;
	}
	for (const struct command *c = commands; c->name; c++) {
		if (strcmp(c->name, argv[1]))
			continue;
		int rc = c->fn(argc - 1, argv + 1);
		if (rc < 0) {
			result_run_dir_abandon();
			fprintf(stderr, "gpuperf %s: error: %s\n", c->name, gp_errmsg());
			if (rc == GP_EINTR) /* as a shell reports a death by the signal */
				return 128 + (interrupt_signal() ? interrupt_signal() : SIGINT);
			return rc == GP_EINVAL ? 2 : 1;
		}
		/* a positive return is an exit status that is not an error (diff's 1) */
		int out_rc = stdout_check(c->name);
		return out_rc ? out_rc : rc;
	}
	fprintf(stderr, "gpuperf: error: unknown command '%s' (see gpuperf --help)\n", argv[1]);
	return 2;
}
