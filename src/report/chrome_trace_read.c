/* Reading Chrome trace files back (ours, or torch.profiler's, plain or gzip): the
 * top level key by key, the traceEvents one event at a time, into a struct trace. */
#include "report/chrome_trace.h"

#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "core/file.h"
#include "core/sort.h"
#include "report/chrome_trace_priv.h"
#include "report/trace_event.h"

/* Limits on the numbers of a trace read back, so that no time sum or difference
 * below (nor in the analysis) can overflow: the base is Unix time in ns up to the
 * year 2096, event times lie within 1e15 us of it and durations are 0 to 1e13 us
 * (115 days). Every time then lies within +-5.1e18 ns, inside int64_t. */
#define TRACE_BASE_NS_MAX 4000000000000000000LL
#define TRACE_TS_US_MAX 1e15
#define TRACE_DUR_US_MAX 1e13

/* An integer, dflt when it is missing, not a number or beyond long long (a real
 * such as 1e300 would convert to undefined behaviour). */
static long long value_int(const struct trace_value *v, long long dflt)
{
	if (v->type == TRACE_VALUE_INT)
		return v->i;
	if (v->type == TRACE_VALUE_REAL && fabs(v->d) < 9.2e18)
		return (long long)v->d;
	return dflt;
}

/* The same within int's range. */
static int value_int32(const struct trace_value *v, int dflt)
{
	long long i = value_int(v, dflt);
	return i >= INT_MIN && i <= INT_MAX ? (int)i : dflt;
}

/* A string, or dflt; *len is its length. */
static const char *value_str(const struct trace_value *v, const char *dflt, size_t *len)
{
	if (v->type == TRACE_VALUE_STR) {
		*len = v->len;
		return v->s;
	}
	*len = strlen(dflt);
	return dflt;
}

static int value_str_is(const struct trace_value *v, const char *s)
{
	return v->type == TRACE_VALUE_STR && v->len == strlen(s) && !memcmp(v->s, s, v->len);
}

static long long jint(json_t *obj, const char *key, long long dflt)
{
	struct trace_value v = { 0 };
	trace_value_from_json(json_object_get(obj, key), &v);
	return value_int(&v, dflt);
}

static int jint32(json_t *obj, const char *key, int dflt)
{
	struct trace_value v = { 0 };
	trace_value_from_json(json_object_get(obj, key), &v);
	return value_int32(&v, dflt);
}

static const char *jstr(json_t *obj, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : dflt;
}

/* An event's "ts" or "dur" in microseconds as nanoseconds (0 when missing), refused
 * outside -max_us .. max_us, or below 0 for a duration. */
static int event_time_ns(const struct trace_event *ev, enum trace_field f, double max_us,
			 size_t idx, int64_t *out)
{
	const struct trace_value *v = &ev->f[f];
	double us = v->type == TRACE_VALUE_INT ? (double)v->i
		    : v->type == TRACE_VALUE_REAL ? v->d : 0;
	int is_dur = f == TF_DUR;
	if (!(fabs(us) <= max_us) || (is_dur && us < 0)) {
		size_t len;
		const char *name = value_str(&ev->f[TF_NAME], "", &len);
		return gp_error(GP_EFORMAT, "event %zu (\"%.*s\"): \"%s\" of %g us is outside "
				"%g .. %g", idx, (int)(len < 60 ? len : 60), name,
				is_dur ? "dur" : "ts", us, is_dur ? 0 : -max_us, max_us);
	}
	*out = (int64_t)llround(us * 1000.0);
	return 0;
}

/* A string of the event kept in the trace (NULL when out of memory). */
static const char *event_intern(struct trace *t, const struct trace_value *v, const char *dflt)
{
	size_t len;
	const char *s = value_str(v, dflt, &len);
	return trace_intern_len(t, s, len);
}

/* gpuperf.layers: what each layer is; entries that are not objects with a string
 * name and op are skipped, as an unknown layer groups by its name. */
static int read_layers(json_t *layers, struct trace *t)
{
	for (size_t i = 0; json_is_array(layers) && i < json_array_size(layers); i++) {
		json_t *l = json_array_get(layers, i);
		const char *name = json_string_value(json_object_get(l, "name"));
		const char *op = json_string_value(json_object_get(l, "op"));
		if (!name || !op || strlen(name) != json_string_length(json_object_get(l, "name")) ||
		    strlen(op) != json_string_length(json_object_get(l, "op")))
			continue;
		const char *shapes = json_string_value(json_object_get(l, "input_shapes"));
		if (shapes && strlen(shapes) != json_string_length(json_object_get(l, "input_shapes")))
			shapes = NULL;
		if (trace_add_layer(t, name, op, shapes) < 0)
			return gp_error(GP_ENOMEM, "out of memory reading the trace");
	}
	return 0;
}

static int read_meta(json_t *root, struct trace *t)
{
	json_t *dev = json_array_get(json_object_get(root, "deviceProperties"), 0);
	if (json_is_object(dev)) {
		snprintf(t->meta.gpu_name, sizeof(t->meta.gpu_name), "%s", jstr(dev, "name", ""));
		t->meta.device = jint32(dev, "id", 0);
		t->meta.gpu_mem_bytes = (uint64_t)jint(dev, "totalGlobalMem", 0);
		t->meta.cc_major = jint32(dev, "computeMajor", 0);
		t->meta.cc_minor = jint32(dev, "computeMinor", 0);
		t->meta.sm_count = jint32(dev, "numSms", 0);
	}
	json_t *g = json_object_get(root, "gpuperf");
	t->meta.written_by_us = json_is_object(g);
	if (json_is_object(g)) {
		snprintf(t->meta.model, sizeof(t->meta.model), "%s", jstr(g, "model", ""));
		snprintf(t->meta.precision, sizeof(t->meta.precision), "%s",
			 jstr(g, "precision", "fp32"));
		snprintf(t->meta.host, sizeof(t->meta.host), "%s", jstr(g, "host", t->meta.host));
		t->meta.batch = jint32(g, "batch", 0);
		t->meta.pid = jint32(g, "pid", t->meta.pid);
		return read_layers(json_object_get(g, "layers"), t);
	}
	return 0;
}

static int read_x(struct trace *t, const struct trace_event *ev, size_t idx, int cat,
		  int64_t base_ns)
{
	const struct trace_value *f = ev->f;
	int64_t ts, dur;
	GP_TRY(event_time_ns(ev, TF_TS, TRACE_TS_US_MAX, idx, &ts));
	GP_TRY(event_time_ns(ev, TF_DUR, TRACE_DUR_US_MAX, idx, &dur));
	const char *name = event_intern(t, &f[TF_NAME], "");
	if (!name)
		return GP_ENOMEM;
	int64_t start = base_ns + ts, end = start + dur;
	/* our own copy of each step's data wait for TensorBoard: the step holds it */
	if (t->meta.written_by_us && cat == TRACE_CPU_OP && !strcmp(name, CHROME_TRACE_DATALOADER))
		return 0;
	if (cat <= TRACE_CUDA_DRIVER) {
		struct trace_range r = {
			.name = name, .cat = (enum trace_cat)cat, .tid = value_int32(&f[TF_TID], 0),
			.start_ns = start, .end_ns = end,
			.correlation = (uint64_t)value_int(&f[TF_CORRELATION], 0),
			.external_id = (uint64_t)value_int(&f[TF_EXTERNAL_ID], 0),
		};
		GP_TRY(trace_add_range(t, &r));
		if (cat == TRACE_USER_ANNOTATION && !strncmp(name, "ProfilerStep#", 13)) {
			struct trace_step s = { step_number(name + 13), start, end,
						value_int(&f[TF_DATA_WAIT_NS], -1) };
			GP_TRY(trace_add_step(t, &s));
		}
		return 0;
	}
	struct trace_gpu g = {
		.name = name, .cat = (enum trace_cat)cat,
		.device = value_int32(&f[TF_DEVICE], value_int32(&f[TF_PID], 0)),
		.stream = value_int32(&f[TF_STREAM], value_int32(&f[TF_TID], 0)),
		.start_ns = start, .end_ns = end,
		.correlation = (uint64_t)value_int(&f[TF_CORRELATION], 0),
		.external_id = (uint64_t)value_int(&f[TF_EXTERNAL_ID], 0),
		.bytes = (uint64_t)value_int(&f[TF_BYTES], 0),
	};
	for (int k = 0; k < 3; k++) {
		g.grid[k] = (int)ev->grid[k];
		g.block[k] = (int)ev->block[k];
	}
	g.registers = value_int32(&f[TF_REGISTERS], 0);
	g.shared_bytes = value_int32(&f[TF_SHARED_MEMORY], 0);
	return trace_add_gpu(t, &g);
}

struct span {
	int64_t start_ns, end_ns;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

/* Steps from a trace without our data_wait_ns field: the "data" annotations that
 * start inside, up to the step's end. One sort, then a binary search per step. */
static int steps_fill_data_wait(struct trace *t)
{
	size_t n = 0;
	struct span *d = malloc((t->n_ranges ? t->n_ranges : 1) * sizeof(*d));
	if (!d)
		return gp_error(GP_ENOMEM, "out of memory reading the trace");
	for (size_t j = 0; j < t->n_ranges; j++) {
		const struct trace_range *r = &t->ranges[j];
		if (r->cat == TRACE_USER_ANNOTATION && !strcmp(r->name, "data"))
			d[n++] = (struct span){ r->start_ns, r->end_ns };
	}
	gp_qsort(d, n, sizeof(*d), span_cmp);
	for (size_t i = 0; i < t->n_steps; i++) {
		struct trace_step *s = &t->steps[i];
		if (s->data_wait_ns >= 0)
			continue;
		s->data_wait_ns = 0;
		size_t lo = 0, hi = n;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (d[mid].start_ns < s->start_ns)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (size_t k = lo; k < n && d[k].start_ns < s->end_ns; k++)
			s->data_wait_ns += (d[k].end_ns < s->end_ns ? d[k].end_ns : s->end_ns) -
					   d[k].start_ns;
	}
	free(d);
	return 0;
}

/* The category of an event: Kineto's names are short, so a longer string is none. */
static int event_cat(const struct trace_value *v)
{
	char cat[32];
	size_t len;
	const char *s = value_str(v, "", &len);
	if (len >= sizeof(cat))
		return -1;
	memcpy(cat, s, len);
	cat[len] = 0;
	return trace_cat_parse(cat);
}

static int read_event(struct trace *t, const struct trace_event *ev, size_t i, int64_t base_ns)
{
	const struct trace_value *f = ev->f;
	if (value_str_is(&f[TF_PH], "X")) {
		int cat = event_cat(&f[TF_CAT]);
		return cat < 0 ? 0 : read_x(t, ev, i, cat, base_ns);
	}
	if (!value_str_is(&f[TF_PH], "i") || !value_str_is(&f[TF_NAME], "[memory]"))
		return 0;
	int64_t ts = 0;
	GP_TRY(event_time_ns(ev, TF_TS, TRACE_TS_US_MAX, i, &ts));
	if (!t->tid)
		t->tid = value_int32(&f[TF_TID], 0);
	int has_layer = f[TF_LAYER].type == TRACE_VALUE_STR && f[TF_LAYER].len;
	const char *category = event_intern(t, &f[TF_CATEGORY], "other");
	const char *layer = has_layer ? event_intern(t, &f[TF_LAYER], "") : NULL;
	if (!category || (has_layer && !layer))
		return GP_ENOMEM;
	return trace_add_mem(t, base_ns + ts, value_int(&f[TF_TOTAL_ALLOCATED], 0),
			     value_int(&f[TF_MEM_BYTES], 0), category, layer);
}

/* --- the document, one event at a time ---------------------------------------------
 * A trace is mostly its traceEvents array. Parsing it whole built a tree of millions
 * of small allocations (most of the time of `analyze` went to malloc and page
 * faults); instead the top level is parsed key by key, the array is skipped, and
 * its events are read one by one by trace_event_scan, without a tree; an event it
 * declines (an escape in a string, a syntax error) is parsed by jansson instead.
 * Kineto writes baseTimeNanoseconds after the events, so they are read in a second
 * pass. */

struct doc {
	const char *path, *text, *end;
};

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* The one-line error for a document that stops being JSON at p. */
static int doc_bad(const struct doc *d, const char *p, const char *what)
{
	int line = 1;
	for (const char *q = d->text; q < p && q < d->end; q++)
		line += *q == '\n';
	return gp_error(GP_EFORMAT, "'%s' is not valid JSON (line %d: %s)", d->path, line, what);
}

/* One JSON value at *p (any kind), *p moved past it. */
static int doc_value(const struct doc *d, const char **p, json_t **out)
{
	json_error_t jerr;
	*out = json_loadb(*p, (size_t)(d->end - *p), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY,
			  &jerr);
	if (!*out)
		return doc_bad(d, *p + (jerr.position > 0 ? jerr.position : 0), jerr.text);
	*p += jerr.position;
	return 0;
}

/* Past the array or object at p, following nesting and strings only (its content
 * is parsed in the second pass); NULL when it does not end. */
static const char *skip_nested(const char *p, const char *end)
{
	long depth = 0;
	for (; p < end; p++) {
		char c = *p;
		if (c == '"') {
			for (p++; p < end && *p != '"'; p++)
				if (*p == '\\')
					p++;
			if (p >= end)
				return NULL;
		} else if (c == '[' || c == '{') {
			depth++;
		} else if (c == ']' || c == '}') {
			if (--depth == 0)
				return p + 1;
		}
	}
	return NULL;
}

/* The top-level members other than traceEvents into *root; [*ev_begin, *ev_end)
 * is the traceEvents array, or NULL when there is none. */
static int doc_top(const struct doc *d, json_t *root, const char **ev_begin, const char **ev_end)
{
	const char *p = skip_ws(d->text, d->end);
	*ev_begin = *ev_end = NULL;
	if (p == d->end || *p != '{')
		return doc_bad(d, p, "not an object");
	p = skip_ws(p + 1, d->end);
	if (p < d->end && *p == '}')
		p++;
	else
		for (;;) {
			json_t *key, *value;
			GP_TRY(doc_value(d, &p, &key));
			int is_events = json_is_string(key) &&
					!strcmp(json_string_value(key), "traceEvents");
			if (!json_is_string(key)) {
				json_decref(key);
				return doc_bad(d, p, "object key is not a string");
			}
			p = skip_ws(p, d->end);
			if (p == d->end || *p != ':') {
				json_decref(key);
				return doc_bad(d, p, "':' expected");
			}
			p = skip_ws(p + 1, d->end);
			if (is_events && p < d->end && *p == '[') {
				*ev_begin = p;
				if (!(p = skip_nested(p, d->end))) {
					json_decref(key);
					return doc_bad(d, d->end, "unterminated traceEvents array");
				}
				*ev_end = p;
			} else {
				int rc = doc_value(d, &p, &value);
				if (rc == 0)
					json_object_set_new(root, json_string_value(key), value);
				if (rc < 0) {
					json_decref(key);
					return rc;
				}
			}
			json_decref(key);
			p = skip_ws(p, d->end);
			if (p < d->end && *p == ',') {
				p = skip_ws(p + 1, d->end);
				continue;
			}
			if (p < d->end && *p == '}') {
				p++;
				break;
			}
			return doc_bad(d, p, "',' or '}' expected");
		}
	if (skip_ws(p, d->end) != d->end)
		return doc_bad(d, p, "end of file expected");
	return 0;
}

/* The events of [begin, end), the traceEvents array, one at a time. */
static int doc_events(const struct doc *d, const char *begin, const char *end,
		      struct trace *t, int64_t base_ns)
{
	const char *p = skip_ws(begin + 1, end);
	if (p < end && *p == ']')
		return 0;
	for (size_t i = 0;; i++) {
		struct trace_event ev;
		int rc;
		if (trace_event_scan(p, d->end, &ev, &p)) {
			rc = read_event(t, &ev, i, base_ns);
		} else {
			json_t *value;
			GP_TRY(doc_value(d, &p, &value));
			trace_event_from_json(value, &ev);
			rc = read_event(t, &ev, i, base_ns);
			json_decref(value);
		}
		if (rc < 0)
			return gp_error_wrap(rc, "reading '%s'", d->path);
		p = skip_ws(p, end);
		if (p < end && *p == ',') {
			p = skip_ws(p + 1, end);
			continue;
		}
		if (p < end && *p == ']')
			return 0;
		return doc_bad(d, p, "',' or ']' expected");
	}
}

/* A gzip-compressed trace (torch.profiler's export_chrome_trace("x.json.gz"), TensorBoard's
 * plugin reads them too), inflated whole into *buf. */
static int read_gz(const char *path, char **buf, size_t *len)
{
	gzFile z = gzopen(path, "rb");
	if (!z)
		return gp_error(GP_EIO, "cannot open '%s': %s", path, strerror(errno ? errno : EIO));
	size_t cap = 1 << 20, n = 0;
	char *b = malloc(cap + 1);
	int rc = 0;
	while (b) {
		if (n == cap) {
			char *g = cap > ((size_t)1 << 34) ? NULL : realloc(b, 2 * cap + 1);
			if (!g) {
				free(b);
				b = NULL;
				break;
			}
			b = g;
			cap *= 2;
		}
		int got = gzread(z, b + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
		if (got < 0) {
			int zerr;
			const char *msg = gzerror(z, &zerr);
			rc = gp_error(GP_EFORMAT, "'%s' is not a readable gzip file: %s", path,
				      msg ? msg : "?");
			break;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	gzclose(z);
	if (!b)
		return gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
	if (rc < 0) {
		free(b);
		return rc;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	return 0;
}

int chrome_trace_read(const char *path, struct trace *t)
{
	char *text;
	size_t len;
	const char *ev_begin, *ev_end;
	int rc;
	trace_init(t);
	size_t plen = strlen(path);
	if (plen > 3 && !strcmp(path + plen - 3, ".gz"))
		GP_TRY(read_gz(path, &text, &len));
	else
		GP_TRY(file_read_all(path, &text, &len));
	struct doc d = { path, text, text + len };
	json_t *root = json_object();
	if (!root) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
		goto free_text;
	}
	if ((rc = doc_top(&d, root, &ev_begin, &ev_end)) < 0)
		goto free_root;
	if (!ev_begin) {
		rc = gp_error(GP_EFORMAT, "'%s' is not a Chrome trace (no traceEvents array)", path);
		goto free_root;
	}
	json_t *base = json_object_get(root, "baseTimeNanoseconds");
	int64_t base_ns = 0;
	if (base && !(json_is_integer(base) && json_integer_value(base) >= 0 &&
		      json_integer_value(base) <= TRACE_BASE_NS_MAX)) {
		rc = gp_error(GP_EFORMAT, "'%s': \"baseTimeNanoseconds\" must be an integer from "
			      "0 to %lld", path, TRACE_BASE_NS_MAX);
		goto free_root;
	}
	if (base)
		base_ns = json_integer_value(base);
	t->base_ns = base_ns;
	if ((rc = read_meta(root, t)) < 0 ||
	    (rc = doc_events(&d, ev_begin, ev_end, t, base_ns)) < 0 ||
	    (rc = steps_fill_data_wait(t)) < 0)
		trace_free(t);
free_root:
	json_decref(root);
free_text:
	free(text);
	return rc;
}
