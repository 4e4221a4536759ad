/* One event of a Chrome/Kineto trace's traceEvents array, reduced to the fields the
 * reader uses, each as jansson would give it. A trace holds hundreds of thousands of
 * events; building a jansson tree for each and dropping it was most of `analyze`'s
 * time, so trace_event_scan reads an event straight from the text in one pass. It
 * takes only what it can read exactly as jansson would (plain ASCII strings without
 * escapes, numbers it converts to the same bits, shallow nesting) and declines the
 * rest, which the reader then hands to jansson: same values, same error messages. */
#ifndef GP_TRACE_EVENT_H
#define GP_TRACE_EVENT_H

#include <jansson.h>
#include <stddef.h>

enum trace_value_type {
	TRACE_VALUE_NONE = 0, /* missing, or the object holding it is not an object */
	TRACE_VALUE_INT,
	TRACE_VALUE_REAL,
	TRACE_VALUE_STR,
	TRACE_VALUE_OTHER,    /* true, false, null, an array or an object */
};

struct trace_value {
	enum trace_value_type type;
	long long i;          /* TRACE_VALUE_INT */
	double d;             /* TRACE_VALUE_REAL */
	const char *s;        /* TRACE_VALUE_STR: len bytes, no NUL among them, not */
	size_t len;           /* NUL-terminated (it points into the trace's text) */
};

/* The event's own fields, then those of its "args" object. */
enum trace_field {
	TF_PH, TF_CAT, TF_NAME, TF_PID, TF_TID, TF_TS, TF_DUR,
	TF_CORRELATION, TF_EXTERNAL_ID, TF_DATA_WAIT_NS, TF_DEVICE, TF_STREAM, TF_BYTES,
	TF_TOTAL_ALLOCATED, TF_MEM_BYTES, TF_CATEGORY, TF_LAYER, TF_REGISTERS, TF_SHARED_MEMORY,
	TF_COUNT
};

struct trace_event {
	struct trace_value f[TF_COUNT];
	/* args.grid[k] and args.block[k]: the integer there, else 0 (json_integer_value) */
	long long grid[3], block[3];
};

/* Read the event at p (text up to end). Returns 1 with *ev filled and *next just past
 * the event when it is an object jansson would read the same way; 0 when it leaves
 * the event to jansson (anything else, valid or not). */
int trace_event_scan(const char *p, const char *end, struct trace_event *ev,
		     const char **next);

/* A value jansson parsed (NULL: missing) as a trace_value. */
void trace_value_from_json(json_t *v, struct trace_value *out);
/* Do two values hold the same thing (reals bit for bit)? What the scanner and
 * jansson must agree on, in the tests and the fuzz target. */
int trace_value_same(const struct trace_value *a, const struct trace_value *b);

/* The same fields from an event jansson parsed (any JSON value; strings point into
 * it and live as long as it). */
void trace_event_from_json(json_t *ev, struct trace_event *out);

#endif
