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
};

/* Parse argv[first..argc) against opts (terminated by a zero entry). */
int args_parse(int argc, char **argv, int first, const struct opt *opts);
void args_print_help(const char *usage, const struct opt *opts);
/* Split "a,b,c" into an int_list; error names the option. */
int args_parse_int_list(const char *opt_name, const char *s, struct int_list *out, int min);

#endif
