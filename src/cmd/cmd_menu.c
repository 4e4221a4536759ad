/* gpuperf menu (and plain `gpuperf` on a terminal): the questions the tool answers,
 * as a numbered menu; each asks for its few settings with defaults and runs the
 * command with them, then comes back to the menu. */
#include <stdio.h>
#include <string.h>

#include "cmd/cmds.h"
#include "core/error.h"
#include "core/version.h"

#define MENU_ARGS 24

struct menu_field {
	const char *flag;   /* option name without "--" */
	const char *prompt;
	const char *def;    /* default value; "" means leave the option out */
};

struct menu_item {
	const char *key, *title, *command;
	int (*fn)(int argc, char **argv);
	struct menu_field fields[6];
};

static const struct menu_item items[] = {
	{ "1", "a model's layers, parameters, MACs and training memory", "info", cmd_info,
	  { { "model", "model (simple_cnn, resnet18, resnet50, mobilenet_v2)", "resnet50" },
	    { "batch", "batch size", "32" } } },
	{ "2", "memory and time of several models side by side", "compare", cmd_compare,
	  { { "models", "models", "simple_cnn,resnet18,mobilenet_v2" }, { "batch", "batch size", "32" },
	    { "steps", "training steps", "100" }, { "device", "device (cuda, cpu, auto)", "auto" } } },
	{ "3", "the largest batch that trains", "maxbatch", cmd_maxbatch,
	  { { "model", "model", "mobilenet_v2" }, { "device", "device (cuda, cpu, auto)", "auto" } } },
	{ "4", "how many data-loader workers keep the GPU busy", "workers", cmd_workers,
	  { { "data", "ImageFolder directory (make one with: gpuperf dataset make)", "" },
	    { "model", "model", "mobilenet_v2" }, { "workers", "worker counts", "0,2,4,8" },
	    { "steps", "steps per worker count", "100" } } },
	{ "5", "where a training step's time goes", "profile", cmd_profile,
	  { { "model", "model", "mobilenet_v2" }, { "batch", "batch size", "64" },
	    { "steps", "recorded steps", "20" } } },
	{ "6", "train and measure img/s", "train", cmd_train,
	  { { "model", "model", "resnet50" }, { "batch", "batch size", "64" },
	    { "steps", "steps", "30" }, { "precision", "precision (fp32, tf32, fp16, bf16)", "fp32" } } },
	{ "7", "what holds training back, with each fix measured", "advise", cmd_advise,
	  { { "model", "model", "mobilenet_v2" }, { "batch", "batch size", "64" },
	    { "data", "ImageFolder directory (empty: synthetic)", "" }, { "workers", "loader workers", "" } } },
	{ "8", "live GPU monitor", "monitor", cmd_monitor,
	  { { "count", "samples", "10" }, { "interval", "seconds between samples", "1" } } },
	{ "9", "FP32 against mixed precision (fp16, bf16) by batch size", "amp", cmd_amp,
	  { { "model", "model", "resnet50" }, { "batches", "batch sizes", "64,128,256" },
	    { "steps", "steps per run", "30" } } },
};

/* One line from in, without its newline; 0 at end of input. */
static int read_line(FILE *in, char *buf, size_t cap)
{
	if (!fgets(buf, (int)cap, in))
		return 0;
	buf[strcspn(buf, "\r\n")] = 0;
	return 1;
}

static void print_menu(FILE *out)
{
	fprintf(out, "\ngpuperf %s: what would you like to know?\n", GPUPERF_VERSION);
	for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++)
		fprintf(out, "  %s  %-52s (gpuperf %s)\n", items[i].key, items[i].title, items[i].command);
	fprintf(out, "  q  quit\nchoice> ");
	fflush(out);
}

/* Ask for each field (empty answer: the default), then run the command. Returns 0 at
 * end of input, 1 to go on. */
static int run_item(const struct menu_item *it, FILE *in, FILE *out)
{
	static char values[6][512];
	char *argv[MENU_ARGS];
	char flags[6][64];
	int argc = 0;
	argv[argc++] = (char *)it->command;
	for (int f = 0; f < 6 && it->fields[f].flag; f++) {
		const struct menu_field *fd = &it->fields[f];
		fprintf(out, "  %s [%s]: ", fd->prompt, fd->def);
		fflush(out);
		if (!read_line(in, values[f], sizeof(values[f])))
			return 0;
		if (!values[f][0])
			snprintf(values[f], sizeof(values[f]), "%s", fd->def);
		if (!values[f][0])
			continue;
		snprintf(flags[f], sizeof(flags[f]), "--%s", fd->flag);
		argv[argc++] = flags[f];
		argv[argc++] = values[f];
	}
	fprintf(out, "\n$ gpuperf");
	for (int i = 0; i < argc; i++)
		fprintf(out, " %s", argv[i]);
	fprintf(out, "\n");
	fflush(out);
	if (it->fn(argc, argv) < 0)
		fprintf(stderr, "gpuperf %s: error: %s\n", it->command, gp_errmsg());
	return 1;
}

int cmd_menu_loop(FILE *in, FILE *out)
{
	char line[128];
	for (;;) {
		print_menu(out);
		if (!read_line(in, line, sizeof(line)) || !strcmp(line, "q") || !strcmp(line, "quit")) {
			fprintf(out, "\n");
			return 0;
		}
		const struct menu_item *it = NULL;
		for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++)
			if (!strcmp(line, items[i].key) || !strcmp(line, items[i].command))
				it = &items[i];
		if (!it) {
			fprintf(out, "no choice '%s': type a number from the list, or q\n", line);
			continue;
		}
		if (!run_item(it, in, out))
			return 0;
	}
}

int cmd_menu(int argc, char **argv)
{
	if (argc > 1)
		return gp_error(GP_EINVAL, "menu takes no options (got '%s')", argv[1]);
	return cmd_menu_loop(stdin, stdout);
}
