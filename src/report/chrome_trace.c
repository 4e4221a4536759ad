/* Writing Chrome trace files (Kineto's schema, see chrome_trace.h): the trace's ranges,
 * GPU work, flows and memory events as one time-sorted traceEvents array. */
#include "report/chrome_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/error.h"
#include "core/file.h"
#include "core/sort.h"
#include "report/chrome_trace_priv.h"


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

/* A GPU run: named device, compute capability or GPU work (a CPU run has none). */
static int chrome_trace_has_device(const struct trace *t)
{
	return t->meta.gpu_name[0] || t->meta.cc_major > 0 || t->meta.gpu_mem_bytes > 0 || t->n_gpu > 0;
}

/* TensorBoard's profiler plugin counts DataLoader time from a range of this name
 * (torch's DataLoader iterator's __next__): the step's wait for its batch, from the
 * start of its data stage, so that the overview shows it. */
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
	if (trace_cat_is_api(r->cat))
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
		if (trace_cat_is_api(t->ranges[i].cat) && t->ranges[i].correlation)
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
