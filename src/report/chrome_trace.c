#include "report/chrome_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <sys/stat.h>
#include <time.h>

#include "core/error.h"
#include "core/file.h"
#include "core/sort.h"
#include "report/trace_event.h"

/* One line of traceEvents, sorted by time before writing. */
enum ev_kind { EV_RANGE = 0, EV_GPU, EV_FLOW_START, EV_FLOW_END, EV_MEM };

struct ev {
	int64_t ts_ns;
	int kind;
	size_t idx;
	int64_t end_ns; /* ranges starting together: the enclosing (later-ending) one first */
};

struct corr_entry {
	uint64_t correlation;
	size_t range;
};

static int ev_cmp(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;
	if (x->ts_ns != y->ts_ns)
		return x->ts_ns < y->ts_ns ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind - y->kind;
	if (x->end_ns != y->end_ns)
		return x->end_ns > y->end_ns ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int corr_cmp(const void *a, const void *b)
{
	const struct corr_entry *x = a, *y = b;
	return x->correlation < y->correlation ? -1 : x->correlation > y->correlation;
}

/* The runtime call that launched correlation c, or -1. */
static long corr_find(const struct corr_entry *tab, size_t n, uint64_t c)
{
	struct corr_entry key = { c, 0 };
	const struct corr_entry *e = gp_bsearch(&key, tab, n, sizeof(*tab), corr_cmp);
	return e ? (long)e->range : -1;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* Microseconds with three decimals, relative to the base, as Kineto writes them. */
static void json_us(FILE *f, int64_t ns)
{
	if (ns < 0)
		ns = 0;
	fprintf(f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

struct writer {
	const struct trace *t;
	FILE *f;
	int64_t base_ns;
	struct corr_entry *corr;
	size_t n_corr;
};

/* N of "ProfilerStep#N", saturated to int's range (atoi's overflow is undefined). */
static int step_number(const char *digits)
{
	long long v = strtoll(digits, NULL, 10);
	return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
}

/* TensorBoard's profiler plugin counts DataLoader time from a range of this name
 * (torch's DataLoader iterator's __next__): the step's wait for its batch, from the
 * start of its data stage, so that the overview shows it. */
/* A GPU run: named device, compute capability or GPU work (a CPU run has none). */
static int chrome_trace_has_device(const struct trace *t)
{
	return t->meta.gpu_name[0] || t->meta.cc_major > 0 || t->meta.gpu_mem_bytes > 0 || t->n_gpu > 0;
}

const char CHROME_TRACE_DATALOADER[] = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";

static void write_dataloader(struct writer *w, const struct trace_range *data)
{
	const struct trace_step *in = NULL;
	for (size_t i = 0; i < w->t->n_steps && !in; i++)
		if (data->start_ns >= w->t->steps[i].start_ns && data->start_ns < w->t->steps[i].end_ns)
			in = &w->t->steps[i];
	if (!in || in->data_wait_ns <= 0)
		return;
	int64_t dur = in->data_wait_ns < data->end_ns - data->start_ns ? in->data_wait_ns
									 : data->end_ns - data->start_ns;
	FILE *f = w->f;
	/* a cpu_op: the plugin passes over user annotations other than ProfilerStep#N */
	fprintf(f, "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"%s\",\"pid\":%d,"
		   "\"tid\":%d,\"ts\":", CHROME_TRACE_DATALOADER, w->t->meta.pid, data->tid);
	json_us(f, data->start_ns - w->base_ns);
	fputs(",\"dur\":", f);
	json_us(f, dur);
	fputs(",\"args\":{}},\n", f);
}

static void write_range(struct writer *w, const struct trace_range *r)
{
	FILE *f = w->f;
	fprintf(f, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":", trace_cat_name(r->cat));
	json_str(f, r->name);
	fprintf(f, ",\"pid\":%d,\"tid\":%d,\"ts\":", w->t->meta.pid, r->tid);
	json_us(f, r->start_ns - w->base_ns);
	fputs(",\"dur\":", f);
	json_us(f, r->end_ns - r->start_ns);
	fprintf(f, ",\"args\":{\"External id\":%" PRIu64, r->external_id);
	if (r->cat == TRACE_CUDA_RUNTIME)
		fprintf(f, ",\"correlation\":%" PRIu64, r->correlation);
	if (r->cat == TRACE_USER_ANNOTATION && !strncmp(r->name, "ProfilerStep#", 13)) {
		int step = step_number(r->name + 13);
		for (size_t i = 0; i < w->t->n_steps; i++)
			if (w->t->steps[i].step == step)
				fprintf(f, ",\"data_wait_ns\":%" PRId64, w->t->steps[i].data_wait_ns);
	}
	fputs("}},\n", f);
	if (r->cat == TRACE_USER_ANNOTATION && !strcmp(r->name, "data"))
		write_dataloader(w, r);
}

static void write_gpu(struct writer *w, const struct trace_gpu *g)
{
	FILE *f = w->f;
	long launch = corr_find(w->corr, w->n_corr, g->correlation);
	uint64_t ext = launch >= 0 ? w->t->ranges[launch].external_id : g->external_id;
	fprintf(f, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":", trace_cat_name(g->cat));
	json_str(f, g->name);
	fprintf(f, ",\"pid\":%d,\"tid\":%d,\"ts\":", g->device, g->stream);
	json_us(f, g->start_ns - w->base_ns);
	fputs(",\"dur\":", f);
	json_us(f, g->end_ns - g->start_ns);
	fprintf(f, ",\"args\":{\"External id\":%" PRIu64 ",\"device\":%d,\"stream\":%d,"
		   "\"correlation\":%" PRIu64, ext, g->device, g->stream, g->correlation);
	if (g->cat == TRACE_KERNEL)
		fprintf(f, ",\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"registers per thread\":%d,"
			   "\"shared memory\":%d", g->grid[0], g->grid[1], g->grid[2], g->block[0],
			g->block[1], g->block[2], g->registers, g->shared_bytes);
	else
		fprintf(f, ",\"bytes\":%" PRIu64, g->bytes);
	fputs("}},\n", f);
}

/* Flow arrows from a launch to its GPU work: Kineto's "ac2g" pairs sharing the
 * correlation id, the start bound to the runtime call, the end to the kernel. */
static void write_flow(struct writer *w, const struct ev *e)
{
	FILE *f = w->f;
	const struct trace_gpu *g = &w->t->gpu[e->idx];
	if (e->kind == EV_FLOW_START) {
		const struct trace_range *r = &w->t->ranges[corr_find(w->corr, w->n_corr,
								       g->correlation)];
		fprintf(f, "{\"ph\":\"s\",\"id\":%" PRIu64 ",\"pid\":%d,\"tid\":%d,\"ts\":",
			g->correlation, w->t->meta.pid, r->tid);
		json_us(f, r->start_ns - w->base_ns);
		fputs(",\"cat\":\"ac2g\",\"name\":\"ac2g\"},\n", f);
	} else {
		fprintf(f, "{\"ph\":\"f\",\"id\":%" PRIu64 ",\"pid\":%d,\"tid\":%d,\"ts\":",
			g->correlation, g->device, g->stream);
		json_us(f, g->start_ns - w->base_ns);
		fputs(",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"},\n", f);
	}
}

static void write_mem(struct writer *w, const struct trace_mem *m)
{
	FILE *f = w->f;
	fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"cpu_instant_event\",\"name\":\"[memory]\","
		   "\"pid\":%d,\"tid\":%d,\"ts\":", w->t->meta.pid, w->t->tid);
	json_us(f, m->ts_ns - w->base_ns);
	/* Kineto's fields: TensorBoard's memory view groups by device type (0 CPU, 1
	 * CUDA) and id (-1 on the CPU); the arena is reserved as it is allocated */
	int cuda = chrome_trace_has_device(w->t);
	fprintf(f, ",\"args\":{\"Total Allocated\":%" PRId64 ",\"Total Reserved\":%" PRId64
		   ",\"Bytes\":%" PRId64 ",\"Device Type\":%d,\"Device Id\":%d,\"Category\":",
		m->total_bytes, m->total_bytes, m->delta_bytes, cuda, cuda ? w->t->meta.device : -1);
	json_str(f, m->category);
	if (m->layer) {
		fputs(",\"Layer\":", f);
		json_str(f, m->layer);
	}
	fputs("}},\n", f);
}

static void write_meta_event(FILE *f, const char *name, int pid, int tid, const char *key,
			     const char *sval, long ival)
{
	fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"ts\":0.000,\"pid\":%d,\"tid\":%d,\"args\":{\"%s\":",
		name, pid, tid, key);
	if (sval)
		json_str(f, sval);
	else
		fprintf(f, "%ld", ival);
	fputs("}},\n", f);
}

#define NAMES_MAX 256

/* Has key been seen among seen[0..*n)? If not, remember it (up to NAMES_MAX). */
static int seen_before(int64_t *seen, int *n, int64_t key)
{
	for (int i = 0; i < *n; i++)
		if (seen[i] == key)
			return 1;
	if (*n < NAMES_MAX)
		seen[(*n)++] = key;
	return 0;
}

/* Name the processes (the host process, one per GPU) and threads (host threads, GPU
 * streams) so viewers label the rows. */
static void write_names(struct writer *w)
{
	const struct trace *t = w->t;
	FILE *f = w->f;
	char label[64];
	int64_t tids[NAMES_MAX], devs[NAMES_MAX], streams[NAMES_MAX];
	int n_tids = 0, n_devs = 0, n_streams = 0;
	write_meta_event(f, "process_name", t->meta.pid, 0, "name", "gpuperf", 0);
	write_meta_event(f, "process_sort_index", t->meta.pid, 0, "sort_index", NULL, 0);
	for (size_t i = 0; i < t->n_ranges; i++) {
		int tid = t->ranges[i].tid;
		if (seen_before(tids, &n_tids, tid))
			continue;
		snprintf(label, sizeof(label), "thread %d (gpuperf)", tid);
		write_meta_event(f, "thread_name", t->meta.pid, tid, "name", label, 0);
	}
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (!seen_before(devs, &n_devs, g->device)) {
			snprintf(label, sizeof(label), "GPU %d", g->device);
			write_meta_event(f, "process_name", g->device, 0, "name", label, 0);
			write_meta_event(f, "process_sort_index", g->device, 0, "sort_index", NULL,
					 0x1000000 + g->device);
		}
		if (seen_before(streams, &n_streams, (int64_t)g->device << 32 | (uint32_t)g->stream))
			continue;
		snprintf(label, sizeof(label), "stream %d", g->stream);
		write_meta_event(f, "thread_name", g->device, g->stream, "name", label, 0);
	}
}

static void write_header(struct writer *w, const char *path)
{
	const struct trace_meta *m = &w->t->meta;
	FILE *f = w->f;
	/* no device on a CPU run: TensorBoard's plugin divides by a listed device's memory */
	if (chrome_trace_has_device(w->t)) {
		fprintf(f, "{\"schemaVersion\":1,\"deviceProperties\":[{\"id\":%d,\"name\":", m->device);
		json_str(f, m->gpu_name);
		fprintf(f, ",\"totalGlobalMem\":%" PRIu64 ",\"computeMajor\":%d,\"computeMinor\":%d,"
			   "\"numSms\":%d}],\n", m->gpu_mem_bytes, m->cc_major, m->cc_minor, m->sm_count);
	} else {
		fputs("{\"schemaVersion\":1,\"deviceProperties\":[],\n", f);
	}
	/* HTA finds the rank with a text match on `"rank": N`, so this object keeps
	 * the spaces the rest of the file leaves out. */
	fputs("\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 1},\n", f);
	fputs("\"gpuperf\":{\"model\":", f);
	json_str(f, m->model);
	fprintf(f, ",\"batch\":%d,\"precision\":", m->batch);
	json_str(f, m->precision);
	fputs(",\"host\":", f);
	json_str(f, m->host);
	/* The file's own name, not its directory, so the same trace writes the same bytes. */
	const char *slash = strrchr(path, '/');
	fprintf(f, ",\"pid\":%d", m->pid);
	/* what each layer is, for the op tables (and its input shapes when recorded) */
	if (w->t->n_layers) {
		fputs(",\"layers\":[", f);
		for (size_t i = 0; i < w->t->n_layers; i++) {
			const struct trace_layer *l = &w->t->layers[i];
			fputs(i ? ",\n{\"name\":" : "\n{\"name\":", f);
			json_str(f, l->name);
			fputs(",\"op\":", f);
			json_str(f, l->op);
			if (l->shapes) {
				fputs(",\"input_shapes\":", f);
				json_str(f, l->shapes);
			}
			fputc('}', f);
		}
		fputc(']', f);
	}
	fputs("},\n\"traceName\":", f);
	json_str(f, slash ? slash + 1 : path);
	fprintf(f, ",\"displayTimeUnit\":\"ms\",\"baseTimeNanoseconds\":%" PRId64 ",\n"
		   "\"traceEvents\":[\n", w->base_ns);
}

/* Earliest time in the trace: Kineto keeps ts relative to a base so that a double
 * holds every digit. */
static int64_t trace_first_ns(const struct trace *t)
{
	int64_t b = t->base_ns;
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].start_ns < b)
			b = t->ranges[i].start_ns;
	for (size_t i = 0; i < t->n_gpu; i++)
		if (t->gpu[i].start_ns < b)
			b = t->gpu[i].start_ns;
	for (size_t i = 0; i < t->n_mem; i++)
		if (t->mem[i].ts_ns < b)
			b = t->mem[i].ts_ns;
	return b;
}

static int events_build(struct writer *w, struct ev **out, size_t *n_out)
{
	const struct trace *t = w->t;
	size_t cap = t->n_ranges + 3 * t->n_gpu + t->n_mem, n = 0;
	struct ev *ev = malloc((cap ? cap : 1) * sizeof(*ev));
	if (!ev)
		return gp_error(GP_ENOMEM, "chrome trace: cannot sort %zu events", cap);
	for (size_t i = 0; i < t->n_ranges; i++)
		ev[n++] = (struct ev){ t->ranges[i].start_ns, EV_RANGE, i, t->ranges[i].end_ns };
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		ev[n++] = (struct ev){ g->start_ns, EV_GPU, i, 0 };
		long r = g->correlation ? corr_find(w->corr, w->n_corr, g->correlation) : -1;
		if (r < 0)
			continue;
		ev[n++] = (struct ev){ t->ranges[r].start_ns, EV_FLOW_START, i, 0 };
		ev[n++] = (struct ev){ g->start_ns, EV_FLOW_END, i, 0 };
	}
	for (size_t i = 0; i < t->n_mem; i++)
		ev[n++] = (struct ev){ t->mem[i].ts_ns, EV_MEM, i, 0 };
	gp_qsort(ev, n, sizeof(*ev), ev_cmp);
	*out = ev;
	*n_out = n;
	return 0;
}

static int corr_build(struct writer *w)
{
	const struct trace *t = w->t;
	w->corr = malloc((t->n_ranges ? t->n_ranges : 1) * sizeof(*w->corr));
	if (!w->corr)
		return gp_error(GP_ENOMEM, "chrome trace: cannot index correlation ids");
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].cat == TRACE_CUDA_RUNTIME && t->ranges[i].correlation)
			w->corr[w->n_corr++] = (struct corr_entry){ t->ranges[i].correlation, i };
	gp_qsort(w->corr, w->n_corr, sizeof(*w->corr), corr_cmp);
	return 0;
}

int chrome_trace_write(const struct trace *t, const char *path)
{
	struct writer w = { .t = t, .base_ns = trace_first_ns(t) };
	struct ev *ev = NULL;
	size_t n_ev = 0;
	struct atomic_file af;
	int rc;
	rc = corr_build(&w);
	if (rc < 0)
		return rc;
	rc = events_build(&w, &ev, &n_ev);
	if (rc < 0)
		goto free_corr;
	if ((rc = atomic_file_open(&af, path)) < 0)
		goto free_ev;
	w.f = af.f;
	write_header(&w, path);
	write_names(&w);
	for (size_t i = 0; i < n_ev; i++) {
		switch (ev[i].kind) {
		case EV_RANGE: write_range(&w, &t->ranges[ev[i].idx]); break;
		case EV_GPU: write_gpu(&w, &t->gpu[ev[i].idx]); break;
		case EV_MEM: write_mem(&w, &t->mem[ev[i].idx]); break;
		default: write_flow(&w, &ev[i]); break;
		}
	}
	/* The last element closes the array without a trailing comma. */
	fputs("{\"name\":\"Record Window End\",\"ph\":\"i\",\"s\":\"g\",\"pid\":\"\",\"tid\":\"\",\"ts\":", w.f);
	json_us(w.f, n_ev ? ev[n_ev - 1].ts_ns - w.base_ns : 0);
	fputs("}\n]}\n", w.f);
	rc = atomic_file_commit(&af);
free_ev:
	free(ev);
free_corr:
	free(w.corr);
	return rc;
}

static int mkdir_one(const char *dir)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return gp_error(GP_EIO, "cannot create '%s': %s", dir, strerror(errno));
	return 0;
}

int chrome_trace_write_dir(const struct trace *t, const char *dir, char *log_path,
			   size_t log_path_cap)
{
	char path[4096];
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	long long ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	GP_TRY(mkdir_one(dir));
	snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
	GP_TRY(chrome_trace_write(t, path));
	snprintf(path, sizeof(path), "%s/profiler_logs", dir);
	GP_TRY(mkdir_one(path));
	snprintf(path, sizeof(path), "%s/profiler_logs/%s_%d.%lld.pt.trace.json", dir,
		 t->meta.host, t->meta.pid, ms);
	GP_TRY(chrome_trace_write(t, path));
	if (log_path)
		snprintf(log_path, log_path_cap, "%s", path);
	return 0;
}

/* --- reading -------------------------------------------------------------------------- */

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
	if (cat <= TRACE_CUDA_RUNTIME) {
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
