#include "cmd/args.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static int parse_ll(const char *name, const char *s, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return gp_error(GP_EINVAL, "--%s: '%s' is not an integer", name, s);
	*out = v;
	return 0;
}

int args_parse_int_list(const char *opt_name, const char *s, struct int_list *out, int min)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
		long long v;
		GP_TRY(parse_ll(opt_name, tok, &v));
		if (v < min || v > INT_MAX)
			return gp_error(GP_EINVAL, "--%s: %lld is out of range (at least %d)",
					opt_name, v, min);
		if (out->n >= ARGS_LIST_MAX)
			return gp_error(GP_EINVAL, "--%s: more than %d values", opt_name,
					ARGS_LIST_MAX);
		out->v[out->n++] = (int)v;
	}
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
			GP_TRY(parse_ll(o->name, val, &v));
			if (v < o->min_int || v > INT_MAX)
				return gp_error(GP_EINVAL, "--%s must be at least %d (got %s)",
						o->name, o->min_int, val);
			*(int *)o->dst = (int)v;
			break;
		case OPT_I64:
			GP_TRY(parse_ll(o->name, val, &v));
			*(long long *)o->dst = v;
			break;
		case OPT_DOUBLE: {
			char *end;
			errno = 0;
			double d = strtod(val, &end);
			if (errno || end == val || *end)
				return gp_error(GP_EINVAL, "--%s: '%s' is not a number", o->name, val);
			*(double *)o->dst = d;
			break;
		}
		case OPT_STR:
			*(const char **)o->dst = val;
			break;
		case OPT_INT_LIST: {
			struct int_list *l = o->dst;
			l->n = 0;
			GP_TRY(args_parse_int_list(o->name, val, l, o->min_int));
			/* "--x 0 5 9": keep taking bare values */
			while (!eq && i + 1 < argc && is_value_like(argv[i + 1]))
				GP_TRY(args_parse_int_list(o->name, argv[++i], l, o->min_int));
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
				   : o->type == OPT_DOUBLE ? " X" : o->type == OPT_INT_LIST ? " N,.." : " N";
		char left[64];
		snprintf(left, sizeof(left), "--%s%s", o->name, kind);
		printf("  %-24s %s\n", left, o->help ? o->help : "");
	}
}
