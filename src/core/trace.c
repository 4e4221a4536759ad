#include "core/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

static const char *const cat_names[TRACE_NCAT] = {
	"user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset",
};

const char *trace_cat_name(enum trace_cat c)
{
	return (unsigned)c < TRACE_NCAT ? cat_names[c] : "unknown";
}

int trace_cat_parse(const char *name)
{
	for (int i = 0; i < TRACE_NCAT; i++)
		if (!strcmp(name, cat_names[i]))
			return i;
	return -1;
}

int64_t trace_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The kernel thread id, cached per thread: a syscall per range would cost more
 * than the range bookkeeping itself. */
static int thread_id(void)
{
	static _Thread_local int tid;
	if (!tid)
		tid = (int)syscall(SYS_gettid);
	return tid;
}

int trace_init(struct trace *t)
{
	memset(t, 0, sizeof(*t));
	t->base_ns = trace_now_ns();
	t->meta.pid = (int)getpid();
	snprintf(t->meta.precision, sizeof(t->meta.precision), "fp32");
	if (gethostname(t->meta.host, sizeof(t->meta.host)) != 0)
		snprintf(t->meta.host, sizeof(t->meta.host), "localhost");
	t->meta.host[sizeof(t->meta.host) - 1] = 0;
	t->next_external_id = 1;
	t->tid = thread_id();
	return 0;
}

void trace_free(struct trace *t)
{
	for (size_t i = 0; i < t->cap_names; i++)
		free(t->names[i]);
	free(t->names);
	free(t->ranges);
	free(t->gpu);
	free(t->mem);
	free(t->steps);
	free(t->layers);
	memset(t, 0, sizeof(*t));
}

/* Grow *arr (of elem bytes each) to hold at least need elements, doubling. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	void *p = realloc(*arr, n * elem);
	if (!p)
		return gp_error(GP_ENOMEM, "trace: cannot grow to %zu events", n);
	*arr = p;
	*cap = n;
	return 0;
}

int trace_reserve(struct trace *t, size_t ranges, size_t gpu, size_t mem)
{
	GP_TRY(grow((void **)&t->ranges, &t->cap_ranges, ranges, sizeof(*t->ranges)));
	GP_TRY(grow((void **)&t->gpu, &t->cap_gpu, gpu, sizeof(*t->gpu)));
	GP_TRY(grow((void **)&t->mem, &t->cap_mem, mem, sizeof(*t->mem)));
	return 0;
}

static uint64_t str_hash(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* Rehash into a table twice the size, keeping the load under one half. */
static int names_grow(struct trace *t)
{
	size_t cap = t->cap_names ? t->cap_names * 2 : 256;
	char **tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return gp_error(GP_ENOMEM, "trace: cannot grow the name table");
	for (size_t i = 0; i < t->cap_names; i++) {
		if (!t->names[i])
			continue;
		size_t j = str_hash(t->names[i], strlen(t->names[i])) & (cap - 1);
		while (tab[j])
			j = (j + 1) & (cap - 1);
		tab[j] = t->names[i];
	}
	free(t->names);
	t->names = tab;
	t->cap_names = cap;
	return 0;
}

const char *trace_intern(struct trace *t, const char *s)
{
	return s ? trace_intern_len(t, s, strlen(s)) : NULL;
}

const char *trace_intern_len(struct trace *t, const char *s, size_t len)
{
	if ((t->n_names + 1) * 2 > t->cap_names && names_grow(t) < 0)
		return NULL;
	size_t j = str_hash(s, len) & (t->cap_names - 1);
	while (t->names[j]) {
		if (t->names[j] == s || (!strncmp(t->names[j], s, len) && t->names[j][len] == 0))
			return t->names[j];
		j = (j + 1) & (t->cap_names - 1);
	}
	t->names[j] = strndup(s, len);
	if (!t->names[j]) {
		gp_error(GP_ENOMEM, "trace: cannot store a name");
		return NULL;
	}
	t->n_names++;
	return t->names[j];
}

int trace_add_range(struct trace *t, const struct trace_range *r)
{
	GP_TRY(grow((void **)&t->ranges, &t->cap_ranges, t->n_ranges + 1, sizeof(*t->ranges)));
	struct trace_range *d = &t->ranges[t->n_ranges];
	*d = *r;
	d->name = trace_intern(t, r->name);
	if (!d->name)
		return GP_ENOMEM;
	if (d->external_id >= t->next_external_id)
		t->next_external_id = d->external_id + 1;
	t->n_ranges++;
	return 0;
}

int trace_add_gpu(struct trace *t, const struct trace_gpu *g)
{
	GP_TRY(grow((void **)&t->gpu, &t->cap_gpu, t->n_gpu + 1, sizeof(*t->gpu)));
	struct trace_gpu *d = &t->gpu[t->n_gpu];
	*d = *g;
	d->name = trace_intern(t, g->name);
	if (!d->name)
		return GP_ENOMEM;
	t->n_gpu++;
	return 0;
}

int trace_add_mem(struct trace *t, int64_t ts_ns, int64_t total_bytes, int64_t delta_bytes,
		  const char *category, const char *layer)
{
	GP_TRY(grow((void **)&t->mem, &t->cap_mem, t->n_mem + 1, sizeof(*t->mem)));
	struct trace_mem *m = &t->mem[t->n_mem];
	m->ts_ns = ts_ns;
	m->total_bytes = total_bytes;
	m->delta_bytes = delta_bytes;
	m->category = trace_intern(t, category ? category : "other");
	m->layer = layer && *layer ? trace_intern(t, layer) : NULL;
	if (!m->category || (layer && *layer && !m->layer))
		return GP_ENOMEM;
	t->n_mem++;
	return 0;
}

/* The external id a new runtime call links to: the innermost open cpu_op's. */
static uint64_t enclosing_op_id(const struct trace *t)
{
	for (int i = t->depth - 1; i >= 0; i--) {
		const struct trace_range *r = &t->ranges[t->stack[i]];
		if (r->cat == TRACE_CPU_OP)
			return r->external_id;
	}
	return 0;
}

int trace_range_push(struct trace *t, const char *name, const char *cat)
{
	int c = trace_cat_parse(cat);
	if (c < 0 || c > TRACE_CUDA_DRIVER)
		return gp_error(GP_EINVAL, "trace: '%s' is not a host range category", cat);
	if (t->depth == TRACE_STACK_MAX)
		return gp_error(GP_EINVAL, "trace: ranges nested deeper than %d", TRACE_STACK_MAX);
	struct trace_range r = {
		.name = name,
		.cat = (enum trace_cat)c,
		.tid = thread_id(),
		.start_ns = trace_now_ns(),
	};
	r.external_id = trace_cat_is_api((enum trace_cat)c) ? enclosing_op_id(t) : t->next_external_id;
	GP_TRY(trace_add_range(t, &r));
	t->stack[t->depth++] = t->n_ranges - 1;
	return 0;
}

int trace_range_pop(struct trace *t)
{
	if (t->depth == 0)
		return gp_error(GP_EINVAL, "trace: range_pop without an open range");
	t->ranges[t->stack[--t->depth]].end_ns = trace_now_ns();
	return 0;
}

int trace_add_step(struct trace *t, const struct trace_step *s)
{
	GP_TRY(grow((void **)&t->steps, &t->cap_steps, t->n_steps + 1, sizeof(*t->steps)));
	t->steps[t->n_steps++] = *s;
	return 0;
}

int trace_step_begin(struct trace *t, int step)
{
	char name[32];
	snprintf(name, sizeof(name), "ProfilerStep#%d", step);
	GP_TRY(trace_range_push(t, name, "user_annotation"));
	struct trace_step s = { .step = step, .start_ns = t->ranges[t->n_ranges - 1].start_ns };
	return trace_add_step(t, &s);
}

int trace_step_end(struct trace *t, int64_t data_wait_ns)
{
	if (t->n_steps == 0 || t->steps[t->n_steps - 1].end_ns)
		return gp_error(GP_EINVAL, "trace: step_end without step_begin");
	GP_TRY(trace_range_pop(t));
	struct trace_step *s = &t->steps[t->n_steps - 1];
	s->end_ns = t->ranges[t->stack[t->depth]].end_ns;
	s->data_wait_ns = data_wait_ns;
	return 0;
}

int trace_add_layer(struct trace *t, const char *name, const char *op, const char *shapes)
{
	GP_TRY(grow((void **)&t->layers, &t->cap_layers, t->n_layers + 1, sizeof(*t->layers)));
	struct trace_layer *l = &t->layers[t->n_layers];
	l->name = trace_intern(t, name ? name : "");
	l->op = trace_intern(t, op ? op : "");
	l->shapes = shapes && *shapes ? trace_intern(t, shapes) : NULL;
	if (!l->name || !l->op || (shapes && *shapes && !l->shapes))
		return GP_ENOMEM;
	t->n_layers++;
	return 0;
}
