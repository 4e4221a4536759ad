#include "report/trace_event.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KEY(s) { s, sizeof(s) - 1 }
static const struct {
	const char *name;
	size_t len;
} field_keys[TF_COUNT] = {
	[TF_PH] = KEY("ph"), [TF_CAT] = KEY("cat"), [TF_NAME] = KEY("name"),
	[TF_PID] = KEY("pid"), [TF_TID] = KEY("tid"), [TF_TS] = KEY("ts"), [TF_DUR] = KEY("dur"),
	[TF_CORRELATION] = KEY("correlation"), [TF_EXTERNAL_ID] = KEY("External id"),
	[TF_DATA_WAIT_NS] = KEY("data_wait_ns"), [TF_DEVICE] = KEY("device"),
	[TF_STREAM] = KEY("stream"), [TF_BYTES] = KEY("bytes"),
	[TF_TOTAL_ALLOCATED] = KEY("Total Allocated"), [TF_MEM_BYTES] = KEY("Bytes"),
	[TF_CATEGORY] = KEY("Category"), [TF_LAYER] = KEY("Layer"),
	[TF_REGISTERS] = KEY("registers per thread"), [TF_SHARED_MEMORY] = KEY("shared memory"),
};
#undef KEY

/* Deeper nesting than this is left to jansson (whose own limit is 2048). */
#define SCAN_DEPTH_MAX 32

struct scanner {
	const char *p, *end;
};

static void scan_ws(struct scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* The character at p, or -1 at the end. */
static int scan_peek(const struct scanner *s)
{
	return s->p < s->end ? (unsigned char)*s->p : -1;
}

/* A string of printable ASCII without escapes; anything else (an escape, a control
 * character, a byte jansson checks as UTF-8, no closing quote) declines. */
static int scan_string(struct scanner *s, const char **str, size_t *len)
{
	const char *q = s->p + 1;
	for (; q < s->end; q++) {
		unsigned char c = (unsigned char)*q;
		if (c == '"')
			break;
		if (c < 0x20 || c == '\\' || c >= 0x80)
			return 0;
	}
	if (q == s->end)
		return 0;
	*str = s->p + 1;
	*len = (size_t)(q - (s->p + 1));
	s->p = q + 1;
	return 1;
}

static int is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static const double pow10_exact[23] = {
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* A number in JSON's grammar, as jansson converts it: an integer (no fraction, no
 * exponent) into long long, a real with strtod. Integers of more than 18 digits,
 * reals strtod would overflow, and tokens strtod reads differently decline.
 * Reals of at most 15 significant digits and a power of ten up to 22 are one exact
 * multiplication or division, which IEEE rounds as strtod does. */
static int scan_number(struct scanner *s, struct trace_value *v)
{
	const char *q = s->p, *end = s->end, *tok = s->p;
	int neg = 0;
	size_t sig = 0, frac_digits = 0, int_digits = 0; /* a token may be long */
	uint64_t m = 0;
	if (q < end && *q == '-') {
		neg = 1;
		q++;
	}
	if (q == end || !is_digit(*q))
		return 0;
	if (*q == '0') {
		q++;
		int_digits = 1;
		if (q < end && is_digit(*q))
			return 0;
	} else {
		for (; q < end && is_digit(*q); q++, int_digits++) {
			if (sig < 19)
				m = m * 10 + (uint64_t)(*q - '0');
			sig++;
		}
	}
	int is_real = 0, exp_neg = 0;
	size_t exp_digits = 0;
	long long exp_val = 0;
	if (q < end && *q == '.') {
		q++;
		if (q == end || !is_digit(*q))
			return 0;
		is_real = 1;
		for (; q < end && is_digit(*q); q++, frac_digits++) {
			if (sig || *q != '0') {
				if (sig < 19)
					m = m * 10 + (uint64_t)(*q - '0');
				sig++;
			}
		}
	}
	if (q < end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < end && (*q == '+' || *q == '-'))
			exp_neg = *q++ == '-';
		if (q == end || !is_digit(*q))
			return 0;
		is_real = 1;
		for (; q < end && is_digit(*q); q++, exp_digits++)
			if (exp_digits < 6)
				exp_val = exp_val * 10 + (*q - '0');
	}
	s->p = q;
	if (!is_real) {
		if (int_digits > 18)
			return 0;
		v->type = TRACE_VALUE_INT;
		v->i = neg ? -(long long)m : (long long)m;
		return 1;
	}
	v->type = TRACE_VALUE_REAL;
	if (m == 0 && sig == 0) {
		v->d = neg ? -0.0 : 0.0;
		return 1;
	}
	long long e = (exp_neg ? -exp_val : exp_val) - (long long)frac_digits;
	if (sig <= 15 && exp_digits <= 6 && e >= -22 && e <= 22) {
		double d = (double)m;
		d = e < 0 ? d / pow10_exact[-e] : d * pow10_exact[e];
		v->d = neg ? -d : d;
		return 1;
	}
	char buf[64];
	size_t n = (size_t)(q - tok);
	if (n >= sizeof(buf))
		return 0;
	memcpy(buf, tok, n);
	buf[n] = 0;
	char *stop;
	errno = 0;
	v->d = strtod(buf, &stop);
	return stop == buf + n && !(errno == ERANGE && isinf(v->d));
}

static int is_alpha(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* true, false or null, not followed by a letter (jansson reads a word whole). */
static int scan_literal(struct scanner *s)
{
	static const char *const words[] = { "true", "false", "null" };
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);
		if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, words[i], n) &&
		    !(s->p + n < s->end && is_alpha((unsigned char)s->p[n]))) {
			s->p += n;
			return 1;
		}
	}
	return 0;
}

static int scan_skip(struct scanner *s, int depth);

/* The members of an object, p just past its '{': each value is handed to take with
 * its key (take NULL: checked and dropped). */
static int scan_object(struct scanner *s,
		       int (*take)(struct scanner *s, void *ctx, const char *key, size_t len,
				   int depth),
		       void *ctx, int depth)
{
	if (depth > SCAN_DEPTH_MAX)
		return 0;
	scan_ws(s);
	if (scan_peek(s) == '}') {
		s->p++;
		return 1;
	}
	for (;;) {
		const char *key;
		size_t key_len;
		if (scan_peek(s) != '"' || !scan_string(s, &key, &key_len))
			return 0;
		scan_ws(s);
		if (scan_peek(s) != ':')
			return 0;
		s->p++;
		scan_ws(s);
		if (!(take ? take(s, ctx, key, key_len, depth) : scan_skip(s, depth)))
			return 0;
		scan_ws(s);
		int c = scan_peek(s);
		if (c != ',' && c != '}')
			return 0;
		s->p++;
		if (c == '}')
			return 1;
		scan_ws(s);
	}
}

/* The elements of an array, p just past its '[', the same way. */
static int scan_array(struct scanner *s,
		      int (*take)(struct scanner *s, void *ctx, size_t index, int depth),
		      void *ctx, int depth)
{
	if (depth > SCAN_DEPTH_MAX)
		return 0;
	scan_ws(s);
	if (scan_peek(s) == ']') {
		s->p++;
		return 1;
	}
	for (size_t i = 0;; i++) {
		if (!(take ? take(s, ctx, i, depth) : scan_skip(s, depth)))
			return 0;
		scan_ws(s);
		int c = scan_peek(s);
		if (c != ',' && c != ']')
			return 0;
		s->p++;
		if (c == ']')
			return 1;
		scan_ws(s);
	}
}

/* Any value, checked as jansson would check it and dropped. */
static int scan_skip(struct scanner *s, int depth)
{
	struct trace_value v;
	const char *str;
	size_t len;
	switch (scan_peek(s)) {
	case '"': return scan_string(s, &str, &len);
	case '{': s->p++; return scan_object(s, NULL, NULL, depth + 1);
	case '[': s->p++; return scan_array(s, NULL, NULL, depth + 1);
	case 't': case 'f': case 'n': return scan_literal(s);
	default: return scan_number(s, &v);
	}
}

/* A value kept: strings and numbers as they are, anything else as "other". */
static int scan_value(struct scanner *s, struct trace_value *v, int depth)
{
	int c = scan_peek(s);
	if (c == '"') {
		v->type = TRACE_VALUE_STR;
		return scan_string(s, &v->s, &v->len);
	}
	if (c == '-' || is_digit(c))
		return scan_number(s, v);
	v->type = TRACE_VALUE_OTHER;
	return scan_skip(s, depth);
}

/* The field of key among fields first .. last - 1, or -1. */
static int field_find(const char *key, size_t len, int first, int last)
{
	for (int f = first; f < last; f++)
		if (len == field_keys[f].len && !memcmp(field_keys[f].name, key, len))
			return f;
	return -1;
}

/* One element of args.grid or args.block: its integer when it is one, else 0. */
static int take_dim(struct scanner *s, void *ctx, size_t index, int depth)
{
	long long *dims = ctx;
	struct trace_value v = { 0 };
	if (index >= 3 || !(scan_peek(s) == '-' || is_digit(scan_peek(s))))
		return scan_skip(s, depth);
	if (!scan_number(s, &v))
		return 0;
	dims[index] = v.type == TRACE_VALUE_INT ? v.i : 0;
	return 1;
}

static int take_arg(struct scanner *s, void *ctx, const char *key, size_t len, int depth)
{
	struct trace_event *ev = ctx;
	long long *dims = len == 4 && !memcmp(key, "grid", 4) ? ev->grid
			  : len == 5 && !memcmp(key, "block", 5) ? ev->block : NULL;
	if (dims) {
		/* a later key of the same name replaces the earlier one, as in jansson */
		memset(dims, 0, 3 * sizeof(*dims));
		if (scan_peek(s) != '[')
			return scan_skip(s, depth);
		s->p++;
		return scan_array(s, take_dim, dims, depth + 1);
	}
	int f = field_find(key, len, TF_CORRELATION, TF_COUNT);
	return f < 0 ? scan_skip(s, depth) : scan_value(s, &ev->f[f], depth);
}

static int take_field(struct scanner *s, void *ctx, const char *key, size_t len, int depth)
{
	struct trace_event *ev = ctx;
	if (len == 4 && !memcmp(key, "args", 4)) {
		memset(&ev->f[TF_CORRELATION], 0,
		       (TF_COUNT - TF_CORRELATION) * sizeof(ev->f[0]));
		memset(ev->grid, 0, sizeof(ev->grid));
		memset(ev->block, 0, sizeof(ev->block));
		if (scan_peek(s) != '{')
			return scan_skip(s, depth);
		s->p++;
		return scan_object(s, take_arg, ev, depth + 1);
	}
	int f = field_find(key, len, 0, TF_CORRELATION);
	return f < 0 ? scan_skip(s, depth) : scan_value(s, &ev->f[f], depth);
}

int trace_event_scan(const char *p, const char *end, struct trace_event *ev,
		     const char **next)
{
	struct scanner s = { p, end };
	memset(ev, 0, sizeof(*ev));
	if (scan_peek(&s) != '{')
		return 0;
	s.p++;
	if (!scan_object(&s, take_field, ev, 1))
		return 0;
	*next = s.p;
	return 1;
}

void trace_value_from_json(json_t *v, struct trace_value *out)
{
	if (!v)
		out->type = TRACE_VALUE_NONE;
	else if (json_is_integer(v))
		*out = (struct trace_value){ .type = TRACE_VALUE_INT, .i = json_integer_value(v) };
	else if (json_is_real(v))
		*out = (struct trace_value){ .type = TRACE_VALUE_REAL, .d = json_real_value(v) };
	else if (json_is_string(v))
		*out = (struct trace_value){ .type = TRACE_VALUE_STR, .s = json_string_value(v),
					     .len = json_string_length(v) };
	else
		out->type = TRACE_VALUE_OTHER;
}

void trace_event_from_json(json_t *ev, struct trace_event *out)
{
	memset(out, 0, sizeof(*out));
	json_t *args = json_object_get(ev, "args");
	for (int f = 0; f < TF_COUNT; f++)
		trace_value_from_json(json_object_get(f < TF_CORRELATION ? ev : args,
						      field_keys[f].name), &out->f[f]);
	for (int k = 0; k < 3; k++) {
		out->grid[k] = json_integer_value(json_array_get(json_object_get(args, "grid"), k));
		out->block[k] = json_integer_value(json_array_get(json_object_get(args, "block"), k));
	}
}

int trace_value_same(const struct trace_value *a, const struct trace_value *b)
{
	if (a->type != b->type)
		return 0;
	switch (a->type) {
	case TRACE_VALUE_INT: return a->i == b->i;
	case TRACE_VALUE_REAL: return !memcmp(&a->d, &b->d, sizeof(a->d));
	case TRACE_VALUE_STR: return a->len == b->len && !memcmp(a->s, b->s, a->len);
	default: return 1;
	}
}
