/* Declarative command-line options: each command lists its options once, and
 * args_parse gives one clear error for an unknown flag, a missing value or a value
 * of the wrong kind. Both "--name value" and "--name=value" are accepted. */
#ifndef GP_ARGS_H
#define GP_ARGS_H

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
};

/* Parse argv[first..argc) against opts (terminated by a zero entry). */
int args_parse(int argc, char **argv, int first, const struct opt *opts);
void args_print_help(const char *usage, const struct opt *opts);
/* Split "a,b,c" into an int_list, appending; each value in [min, max]; error names
 * the option. */
int args_parse_int_list(const char *opt_name, const char *s, struct int_list *out, int min,
			int max);

#endif
