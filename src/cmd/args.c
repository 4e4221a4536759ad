#include "cmd/args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"

/* An integer in [min, max]; a value too large for long long is out of range too. */
static int parse_bounded(const char *name, const char *s, size_t len, long long min,
			 long long max, long long *out)
{
	char tok[64], *end;
	if (len == 0)
		return gp_error(GP_EINVAL, "--%s: empty value", name);
	if (len >= sizeof(tok))
		return gp_error(GP_EINVAL, "--%s: '%.*s...' is not an integer", name, 20, s);
	memcpy(tok, s, len);
	tok[len] = 0;
	errno = 0;
	long long v = strtoll(tok, &end, 10);
	if (end == tok || *end)
		return gp_error(GP_EINVAL, "--%s: '%s' is not an integer", name, tok);
	if (errno == ERANGE || v < min || v > max)
		return gp_error(GP_EINVAL, "--%s must be between %lld and %lld (got %s)", name, min,
				max, tok);
	*out = v;
	return 0;
}

int args_parse_int_list(const char *opt_name, const char *s, struct int_list *out, int min,
			int max)
{
	/* Token by token in place: a list of any length is read whole or refused. */
	for (const char *p = s; *p;) {
		size_t len = strcspn(p, ",");
		if (len > 0) {
			long long v;
			if (out->n >= ARGS_LIST_MAX)
				return gp_error(GP_EINVAL, "--%s: more than %d values", opt_name,
						ARGS_LIST_MAX);
			GP_TRY(parse_bounded(opt_name, p, len, min, max, &v));
			out->v[out->n++] = (int)v;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* "--lr must be greater than 0 (got -1)": the option's whole range in words. */
static int double_out_of_range(const struct opt *o, const char *val)
{
	char lo[64] = "", hi[64] = "";
	if (o->range & OPT_MIN_INCL)
		snprintf(lo, sizeof(lo), "at least %g", o->min_d);
	else if (o->range & OPT_MIN_EXCL)
		snprintf(lo, sizeof(lo), "greater than %g", o->min_d);
	if (o->range & OPT_MAX_INCL)
		snprintf(hi, sizeof(hi), "at most %g", o->max_d);
	else if (o->range & OPT_MAX_EXCL)
		snprintf(hi, sizeof(hi), "less than %g", o->max_d);
	return gp_error(GP_EINVAL, "--%s must be %s%s%s (got %s)", o->name, lo,
			*lo && *hi ? " and " : "", hi, val);
}

static int parse_double(const struct opt *o, const char *val, double *out)
{
	char *end;
	errno = 0;
	double d = strtod(val, &end);
	if (end == val || *end)
		return gp_error(GP_EINVAL, "--%s: '%s' is not a number", o->name, val);
	if (!isfinite(d) || errno == ERANGE)
		return gp_error(GP_EINVAL, "--%s must be a finite number (got %s)", o->name, val);
	if (((o->range & OPT_MIN_INCL) && !(d >= o->min_d)) ||
	    ((o->range & OPT_MIN_EXCL) && !(d > o->min_d)) ||
	    ((o->range & OPT_MAX_INCL) && !(d <= o->max_d)) ||
	    ((o->range & OPT_MAX_EXCL) && !(d < o->max_d)))
		return double_out_of_range(o, val);
	*out = d;
	return 0;
}

static const struct opt *find_opt(const struct opt *opts, const char *name, size_t len)
{
	for (const struct opt *o = opts; o->name; o++)
		if (strlen(o->name) == len && !strncmp(o->name, name, len))
			return o;
	return NULL;
}

static int is_value_like(const char *s)
{
	return s && !(s[0] == '-' && s[1] == '-');
}

int args_parse(int argc, char **argv, int first, const struct opt *opts)
{
	for (int i = first; i < argc; i++) {
		const char *arg = argv[i];
		if (strncmp(arg, "--", 2) != 0)
			return gp_error(GP_EINVAL, "unexpected argument '%s'", arg);
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const struct opt *o = find_opt(opts, name, len);
		if (!o)
			return gp_error(GP_EINVAL, "unknown option '%.*s'", (int)len + 2, arg);
		if (o->type == OPT_FLAG) {
			if (eq)
				return gp_error(GP_EINVAL, "--%s takes no value", o->name);
			*(int *)o->dst = 1;
			continue;
		}
		const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
		if (!eq && !is_value_like(val))
			return gp_error(GP_EINVAL, "--%s needs a value", o->name);
		if (!eq)
			i++;
		long long v;
		switch (o->type) {
		case OPT_INT:
			GP_TRY(parse_bounded(o->name, val, strlen(val), o->min_int, o->max_int, &v));
			*(int *)o->dst = (int)v;
			break;
		case OPT_I64:
			GP_TRY(parse_bounded(o->name, val, strlen(val), LLONG_MIN, LLONG_MAX, &v));
			*(long long *)o->dst = v;
			break;
		case OPT_DOUBLE:
			GP_TRY(parse_double(o, val, (double *)o->dst));
			break;
		case OPT_PATH:
			if (!*val)
				return gp_error(GP_EINVAL, "--%s: empty path", o->name);
			/* fall through */
		case OPT_STR:
			*(const char **)o->dst = val;
			break;
		case OPT_INT_LIST: {
			struct int_list *l = o->dst;
			l->n = 0;
			GP_TRY(args_parse_int_list(o->name, val, l, o->min_int, o->max_int));
			/* "--x 0 5 9": keep taking bare values */
			while (!eq && i + 1 < argc && is_value_like(argv[i + 1]))
				GP_TRY(args_parse_int_list(o->name, argv[++i], l, o->min_int,
							   o->max_int));
			break;
		}
		case OPT_FLAG:
			break;
		}
	}
	return 0;
}

void args_print_help(const char *usage, const struct opt *opts)
{
	printf("usage: %s\n\noptions:\n", usage);
	for (const struct opt *o = opts; o->name; o++) {
		const char *kind = o->type == OPT_FLAG ? "" : o->type == OPT_STR ? " S"
				   : o->type == OPT_PATH ? " PATH" : o->type == OPT_DOUBLE ? " X"
				   : o->type == OPT_INT_LIST ? " N,.." : " N";
		char left[64], range[64] = "";
		snprintf(left, sizeof(left), "--%s%s", o->name, kind);
		if (o->type == OPT_INT || o->type == OPT_INT_LIST)
			snprintf(range, sizeof(range), " [%d..%d]", o->min_int, o->max_int);
		else if (o->type == OPT_DOUBLE && o->range) {
			char lo[24] = "-inf", hi[24] = "inf";
			if (o->range & (OPT_MIN_INCL | OPT_MIN_EXCL))
				snprintf(lo, sizeof(lo), "%g", o->min_d);
			if (o->range & (OPT_MAX_INCL | OPT_MAX_EXCL))
				snprintf(hi, sizeof(hi), "%g", o->max_d);
			snprintf(range, sizeof(range), " %c%s..%s%c",
				 o->range & OPT_MIN_INCL ? '[' : '(', lo, hi,
				 o->range & OPT_MAX_INCL ? ']' : ')');
		}
		char choices[256] = "";
		if (o->choices)
			names_join(choices, sizeof(choices), o->choices, " | ", " | ");
		printf("  %-24s %s%s%s%s\n", left, choices, *choices && o->help ? " " : "",
		       o->help ? o->help : "", range);
	}
}

int args_data_is_files(const char *data)
{
	return data && strcmp(data, "synthetic") && strncmp(data, "synthetic:", 10) &&
	       strncmp(data, "cifar10:", 8);
}

int args_decode_pick(const char *value, int can_take_gpu, const char *cmd,
		     enum decode_mode *out)
{
	enum decode_mode mode;
	GP_TRY(decode_mode_parse(value, &mode));
	return decode_resolve(mode, can_take_gpu, cmd, out);
}
