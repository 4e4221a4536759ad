/* gpuperf menu (and plain `gpuperf` on a terminal): the questions the tool answers,
 * as a numbered menu; each asks for its few settings with defaults and runs the
 * command with them, then comes back to the menu. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/cmds.h"
#include "core/error.h"
#include "core/names.h"
#include "core/version.h"
#include "gpu/devinfo.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/result.h"

#define MENU_ARGS 24
#define MENU_FIELDS 6

struct menu_field {
	const char *flag;    /* option name without "--" */
	const char *prompt;
	const char *def;     /* default value; "" means leave the option out */
	const char *cpu_def; /* default without a GPU, where it differs (NULL: def) */
	int gpu_only;        /* not asked without a GPU */
	/* The values it takes, listed after the prompt (a table's, core/names.h); NULL
	 * where the prompt says enough. */
	const char *(*choices)(int i);
	int yes_no; /* a flag without a value: asked as y/n, "--flag" on y */
};

struct menu_item {
	const char *key, *title, *command;
	int (*fn)(int argc, char **argv);
	struct menu_field fields[MENU_FIELDS];
	/* Without a GPU: why the item cannot run, said before any question; NULL when it
	 * runs on the CPU backend (with its cpu_def defaults, sized for a CPU). */
	const char *needs_gpu;
};

/* The empty answer to a --data question: a small ImageFolder the menu makes. */
#define MENU_MAKE_DATA "make a small one"

/* A field: asked everywhere with one default (F), with another default without a
 * GPU (FC), or only where there is a GPU (FG); FL and FGL also list the values the
 * field takes, from their table. */
#define F(flag, prompt, def) { flag, prompt, def, NULL, 0, NULL }
#define FC(flag, prompt, def, cpu_def) { flag, prompt, def, cpu_def, 0, NULL }
#define FG(flag, prompt, def) { flag, prompt, def, NULL, 1, NULL }
#define FL(flag, prompt, def, choices) { flag, prompt, def, NULL, 0, choices }
#define FGL(flag, prompt, def, choices) { flag, prompt, def, NULL, 1, choices }
#define FYN(flag, prompt, def) { flag, prompt, def, NULL, 0, NULL, 1 }

static const struct menu_item items[] = {
	{ "1", "a model's layers, parameters, MACs and training memory", "info", cmd_info,
	  { FL("model", "model", "resnet50", model_name_at),
	    F("batch", "batch size", "32") }, NULL },
	{ "2", "memory and time of several models side by side", "compare", cmd_compare,
	  { FC("models", "models", COMPARE_DEFAULT_MODELS, "simple_cnn,mobilenet_v2"),
	    FC("batch", "batch size", "32", "8"), FC("steps", "training steps", "100", "3"),
	    FL("device", "device", "auto", train_device_choice_at) }, NULL },
	/* Host memory has no end a search should reach: on the CPU the search runs under
	 * a cap, small enough for a quick answer. */
	{ "3", "the largest batch that trains", "maxbatch", cmd_maxbatch,
	  { FC("model", "model", "mobilenet_v2", "simple_cnn"),
	    FL("device", "device", "auto", train_device_choice_at),
	    FC("mem-limit-mib", "memory cap in MiB (empty: no cap)", "", "64") }, NULL },
	{ "4", "how many data-loader workers keep the GPU busy", "workers", cmd_workers,
	  { F("data", "ImageFolder directory", MENU_MAKE_DATA),
	    FC("model", "model", "mobilenet_v2", "simple_cnn"),
	    FC("workers", "worker counts", "0,2,4,8", "0,2"),
	    FC("steps", "steps per worker count", "100", "10") }, NULL },
	{ "5", "where a training step's time goes", "profile", cmd_profile,
	  { FC("model", "model", "mobilenet_v2", "simple_cnn"), F("batch", "batch size", "64"),
	    FC("steps", "recorded steps", "20", "10") }, NULL },
	{ "6", "train and measure img/s", "train", cmd_train,
	  { FC("model", "model", "resnet50", "simple_cnn"), F("batch", "batch size", "64"),
	    FC("steps", "steps", "30", "10"), FGL("precision", "precision", "fp32", train_precision_name_at) },
	  NULL },
	{ "7", "what holds training back, with each fix measured", "advise", cmd_advise,
	  { FC("model", "model", "mobilenet_v2", "simple_cnn"), FC("batch", "batch size", "64", "32"),
	    F("data", "ImageFolder directory (empty: synthetic)", ""),
	    F("workers", "loader workers", ""), FC("steps", "steps per measurement", "30", "10") },
	  NULL },
	{ "8", "live GPU monitor", "monitor", cmd_monitor,
	  { F("count", "samples", "10"), F("interval", "seconds between samples", "1") },
	  "the monitor reads a GPU through NVML" },
	{ "9", "FP32 against mixed precision (fp16, bf16) by batch size", "amp", cmd_amp,
	  { F("model", "model", "resnet50"), F("batches", "batch sizes", "64,128,256"),
	    F("steps", "steps per run", "30") },
	  "fp16 and bf16 training needs a CUDA GPU" },
	{ "10", "benchmark this machine: every question, one HTML report", "bench", cmd_bench,
	  { FYN("quick", "the short suite (y/n)", "y"),
	    F("data", "ImageFolder for workers and training (empty: leave them out)", ""),
	    FYN("torch", "PyTorch beside, where it is installed (y/n)", "n") },
	  NULL },
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

/* The ImageFolder the menu makes when a --data question is left empty: 256 small
 * JPEGs in 8 classes under the results folder, made once and kept. */
static int menu_make_data(char *dir, size_t cap, FILE *out)
{
	snprintf(dir, cap, "%s/menu_images", result_default_dir());
	struct stat st;
	if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
		fprintf(out, "using the ImageFolder made before, %s\n", dir);
		return 0;
	}
	char *argv[] = { "dataset", "make", "--out", dir, "--classes", "8", "--images", "256",
			 "--size", "160x120", NULL };
	fprintf(out, "making a small ImageFolder in %s\n", dir);
	fflush(out);
	return cmd_dataset(10, argv);
}

/* Ask for each field (empty answer: the default), then run the command. Returns 0 at
 * end of input, 1 to go on. */
static int run_item(const struct menu_item *it, int gpu, FILE *in, FILE *out)
{
	static char values[MENU_FIELDS][512];
	char *argv[MENU_ARGS];
	char flags[MENU_FIELDS][64];
	int argc = 0;
	if (!gpu && it->needs_gpu) {
		fprintf(out, "%s: %s, and this machine has none\n", it->command, it->needs_gpu);
		return 1;
	}
	argv[argc++] = (char *)it->command;
	for (int f = 0; f < MENU_FIELDS && it->fields[f].flag; f++) {
		const struct menu_field *fd = &it->fields[f];
		const char *def = !gpu && fd->cpu_def ? fd->cpu_def : fd->def;
		if (!gpu && fd->gpu_only)
			continue;
		char choices[256] = "";
		if (fd->choices)
			names_join(choices, sizeof(choices), fd->choices, ", ", ", ");
		fprintf(out, "  %s%s%s%s [%s]: ", fd->prompt, *choices ? " (" : "", choices,
			*choices ? ")" : "", def);
		fflush(out);
		if (!read_line(in, values[f], sizeof(values[f])))
			return 0;
		while (fd->yes_no && values[f][0] && !strchr("yYnN", values[f][0])) {
			fprintf(out, "  y or n [%s]: ", def);
			fflush(out);
			if (!read_line(in, values[f], sizeof(values[f])))
				return 0;
		}
		if (!values[f][0])
			snprintf(values[f], sizeof(values[f]), "%s", def);
		if (!strcmp(values[f], MENU_MAKE_DATA) &&
		    menu_make_data(values[f], sizeof(values[f]), out) < 0) {
			fprintf(stderr, "gpuperf %s: error: %s\n", it->command, gp_errmsg());
			return 1;
		}
		if (!values[f][0])
			continue;
		snprintf(flags[f], sizeof(flags[f]), "--%s", fd->flag);
		if (fd->yes_no) {
			if (values[f][0] == 'y' || values[f][0] == 'Y')
				argv[argc++] = flags[f];
			continue;
		}
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
	struct gp_devinfo dev;
	devinfo_query(&dev);
	int gpu = dev.gpu_count > 0;
	if (!gpu)
		fprintf(out, "no GPU here (%s): the questions run on the CPU backend with "
			"CPU-sized defaults\n", dev.note);
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
		if (!run_item(it, gpu, in, out))
			return 0;
	}
}

int cmd_menu(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: gpuperf menu\n\n"
		       "A numbered list of the questions gpuperf answers; each asks for its few\n"
		       "settings (an empty answer takes the default in brackets) and runs the\n"
		       "command, then comes back to the list; q or the end of input leaves.\n"
		       "Plain gpuperf opens it on a terminal. Without a GPU the defaults are\n"
		       "sized for the CPU, and the GPU-only questions say so in one line.\n\n"
		       "options:\n  --help                   show this help\n");
		return 0;
	}
	if (argc > 1)
		return gp_error(GP_EINVAL, "menu takes no options but --help (got '%s')", argv[1]);
	return cmd_menu_loop(stdin, stdout);
}
