/* Declarative command-line options: each command lists its options once, and
 * args_parse gives one clear error for an unknown flag, a missing value or a value
 * of the wrong kind. Both "--name value" and "--name=value" are accepted. */
#ifndef GP_ARGS_H
#define GP_ARGS_H

#include "data/decode.h"
#include "nn/models.h"
#include "train/trainer.h"

enum opt_type {
	OPT_FLAG = 0, /* int, set to 1 */
	OPT_INT,      /* int */
	OPT_I64,      /* long long */
	OPT_DOUBLE,   /* double */
	OPT_STR,      /* const char * */
	OPT_INT_LIST, /* struct int_list: "--x 0 5 9" or "--x 0,5,9" */
	OPT_PATH,     /* const char *, a file or folder: never empty (it would mean '/') */
};

/* Upper bounds shared by the commands' options: far beyond what any GPU trains, small
 * enough that products such as batch x channels x size^2 stay well inside 64 bits. */
#define ARGS_MAX_BATCH 65536
#define ARGS_MAX_SIZE 4096
#define ARGS_MAX_CLASSES 100000
#define ARGS_MAX_STEPS 10000000
#define ARGS_MAX_RANKS 256 /* --nproc, scale's --gpus (the launcher's LAUNCH_MAX_RANKS) */
#define ARGS_MAX_WORKERS 256
#define ARGS_MAX_PREFETCH 64

/* OPT_DOUBLE range bits: a bound applies only when its bit is set. */
enum {
	OPT_MIN_INCL = 1, /* value >= min_d */
	OPT_MIN_EXCL = 2, /* value > min_d */
	OPT_MAX_INCL = 4, /* value <= max_d */
	OPT_MAX_EXCL = 8, /* value < max_d */
};

#define ARGS_LIST_MAX 32

struct int_list {
	int n;
	int v[ARGS_LIST_MAX];
};

struct opt {
	const char *name; /* without the leading "--" */
	enum opt_type type;
	void *dst;
	const char *help;
	int min_int;      /* OPT_INT/OPT_INT_LIST: smallest allowed value */
	int max_int;      /* OPT_INT/OPT_INT_LIST: largest allowed value (must be set) */
	double min_d, max_d; /* OPT_DOUBLE: bounds, as range says (always finite) */
	int range;        /* OPT_DOUBLE: OPT_MIN_* | OPT_MAX_* bits */
	/* OPT_STR: the i-th value it takes, NULL past the last (a table's, core/names.h);
	 * help lists them as "a | b | c" before the help text. The command checks the
	 * value, so its message can name the table's concept. */
	const char *(*choices)(int i);
};

/* Rows that several commands share, as git's parse-options.h has them: the name,
 * type, bounds and the part of the help that does not differ are written once here;
 * help is what a command adds (its default, what the value means there). */
#define OPT_MODEL(var, help) \
	{ "model", OPT_STR, (var), (help), .choices = model_name_at }
#define OPT_DEVICE(var) \
	{ "device", OPT_STR, (var), "(auto: cuda when a GPU is present)", \
	  .choices = train_device_choice_at }
#define OPT_PRECISION(var, help) \
	{ "precision", OPT_STR, (var), (help), .choices = train_precision_name_at }
#define OPT_LAYOUT(var, help) \
	{ "layout", OPT_STR, (var), (help), .choices = train_layout_choice_at }
/* Where JPEGs are decoded (data/decode.h); args_decode_pick checks the value. */
#define OPT_DECODE(var, help) \
	{ "decode", OPT_STR, (var), (help), .choices = decode_mode_name_at }
#define OPT_BATCH(var, help) { "batch", OPT_INT, (var), (help), 1, ARGS_MAX_BATCH }
/* model_build takes sides from 8 (simple_cnn pools three times by 2); the default
 * is the model table's, which the help spells out as it cannot call it. */
#define OPT_SIZE(var) \
	{ "size", OPT_INT, (var), "input height and width (224; 32 for simple_cnn)", 8, \
	  ARGS_MAX_SIZE }
#define OPT_CLASSES(var, help) { "classes", OPT_INT, (var), (help), 1, ARGS_MAX_CLASSES }
#define OPT_STEPS(var, help) { "steps", OPT_INT, (var), (help), 1, ARGS_MAX_STEPS }
#define OPT_WORKERS(var, help) { "workers", OPT_INT, (var), (help), 0, ARGS_MAX_WORKERS }
#define OPT_WORKER_LIST(var, help) \
	{ "workers", OPT_INT_LIST, (var), (help), 0, ARGS_MAX_WORKERS }
/* --decode gpu's CPU threads that take a share of each batch (data/decode_split.h) */
#define OPT_DECODE_THREADS(var) \
	{ "decode-threads", OPT_INT, (var), "with --decode gpu: CPU threads that decode a share " \
	  "of each batch with TurboJPEG while nvJPEG decodes the rest, split so that both finish " \
	  "together (default 0: nvJPEG alone)", 0, ARGS_MAX_WORKERS }
#define OPT_PREFETCH(var, help) { "prefetch", OPT_INT, (var), (help), 1, ARGS_MAX_PREFETCH }
#define OPT_SEED(var, help) { "seed", OPT_I64, (var), (help) }
#define OPT_DATA(var, help) { "data", OPT_PATH, (var), (help) }
#define OPT_LR(var, help) \
	{ "lr", OPT_DOUBLE, (var), (help), .min_d = 0, .range = OPT_MIN_EXCL }
#define OPT_MOMENTUM(var, help) \
	{ "momentum", OPT_DOUBLE, (var), (help), .min_d = 0, .max_d = 1, \
	  .range = OPT_MIN_INCL | OPT_MAX_INCL }
#define OPT_WEIGHT_DECAY(var, help) \
	{ "weight-decay", OPT_DOUBLE, (var), (help), .min_d = 0, .range = OPT_MIN_INCL }
/* A measuring command's result folder: what it writes there, and the command's name
 * for the default results/<cmd>_<timestamp>/. */
#define OPT_OUT(var, files, cmd) \
	{ "out", OPT_PATH, (var), "directory for " files " (default: a new results/" cmd \
	  "_<timestamp>/)" }
#define OPT_OVERWRITE(var, file) \
	{ "overwrite", OPT_FLAG, (var), "replace the " file " that --out DIR holds" }
#define OPT_CSV(var, tables) \
	{ "csv", OPT_FLAG, (var), "also write " tables " as CSV beside the result" }
#define OPT_JSON(var, help) { "json", OPT_FLAG, (var), (help) }
#define OPT_HELP(var) { "help", OPT_FLAG, (var), "show this help" }
#define OPT_END() { 0 }

/* Parse argv[first..argc) against opts (terminated by a zero entry). */
int args_parse(int argc, char **argv, int first, const struct opt *opts);
void args_print_help(const char *usage, const struct opt *opts);
/* Split "a,b,c" into an int_list, appending; each value in [min, max]; error names
 * the option. */
int args_parse_int_list(const char *opt_name, const char *s, struct int_list *out, int min,
			int max);

/* --decode's value for command cmd: parse it and resolve it (decode_resolve), so
 * `--decode gpu` where it cannot run is one error line before any work. *out is
 * DECODE_AUTO only where both paths can run: the run measures them when its data is
 * open (decode_probe_run). */
int args_decode_pick(const char *value, int can_take_gpu, const char *cmd,
		     enum decode_mode *out);
/* Is a --data spec a folder of image files (not synthetic, not CIFAR-10)? */
int args_data_is_files(const char *data);

#endif
