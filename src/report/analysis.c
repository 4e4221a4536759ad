#include "report/analysis.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "report/result.h"
#include "core/file.h"
#include "report/mem_report.h"

static const char *const part_names[PART_COUNT] = {
	"kernel", "memcpy", "memset", "runtime", "data", "cpu", "idle",
};
static const char *const stage_names[STAGE_COUNT] = { "data", "forward", "backward", "optimizer" };
static const char *const dstage_names[DSTAGE_COUNT] = {
	"data", "forward", "backward", "optimizer", "communication", "other", "idle",
};
/* The order that gives an instant two device stages share to one of them (rank 0
 * first), and its inverse. */
static const int dstage_rank[DSTAGE_IDLE] = { 4, 0, 1, 2, 3, 5 };
static const int rank_dstage[DSTAGE_IDLE] = { DSTAGE_FORWARD, DSTAGE_BACKWARD, DSTAGE_OPTIMIZER,
					      DSTAGE_COMM, DSTAGE_DATA, DSTAGE_OTHER };

const char *analysis_stage_name(int stage)
{
	return stage >= 0 && stage < STAGE_COUNT ? stage_names[stage] : "?";
}

const char *analysis_dstage_name(int dstage)
{
	return dstage >= 0 && dstage < DSTAGE_COUNT ? dstage_names[dstage] : "?";
}

/* --- who launched what ------------------------------------------------------------------ */

struct id_entry {
	uint64_t id;
	size_t idx;
};

static int id_cmp(const void *a, const void *b)
{
	const struct id_entry *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

static long id_find(const struct id_entry *tab, size_t n, uint64_t id)
{
	struct id_entry key = { id, 0 };
	const struct id_entry *e = bsearch(&key, tab, n, sizeof(*tab), id_cmp);
	return e ? (long)e->idx : -1;
}

/* A stage annotation, for finding the one a host timestamp falls in. */
struct stage_span {
	int64_t start_ns, end_ns;
	int stage;
};

static int stage_span_cmp(const void *a, const void *b)
{
	const struct stage_span *x = a, *y = b;
	return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

/* Maps from a GPU activity to the runtime call that launched it (correlation id),
 * from there to the layer range it ran in (external id), and from a host time to
 * the stage annotation around it. */
struct attrib {
	struct id_entry *corr, *ext;
	size_t n_corr, n_ext;
	struct stage_span *stages;
	size_t n_stages;
};

static int stage_of(const struct trace_range *r);

static void attrib_free(struct attrib *at)
{
	free(at->corr);
	free(at->ext);
	free(at->stages);
	memset(at, 0, sizeof(*at));
}

static int attrib_build(const struct trace *t, struct attrib *at)
{
	size_t n = t->n_ranges ? t->n_ranges : 1;
	memset(at, 0, sizeof(*at));
	at->corr = malloc(n * sizeof(*at->corr));
	at->ext = malloc(n * sizeof(*at->ext));
	at->stages = malloc(n * sizeof(*at->stages));
	if (!at->corr || !at->ext || !at->stages) {
		attrib_free(at);
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	}
	for (size_t i = 0; i < t->n_ranges; i++) {
		const struct trace_range *r = &t->ranges[i];
		int st = stage_of(r);
		if (r->cat == TRACE_CUDA_RUNTIME && r->correlation)
			at->corr[at->n_corr++] = (struct id_entry){ r->correlation, i };
		else if (r->cat == TRACE_CPU_OP && r->external_id)
			at->ext[at->n_ext++] = (struct id_entry){ r->external_id, i };
		if (st >= 0)
			at->stages[at->n_stages++] = (struct stage_span){ r->start_ns, r->end_ns, st };
	}
	qsort(at->corr, at->n_corr, sizeof(*at->corr), id_cmp);
	qsort(at->ext, at->n_ext, sizeof(*at->ext), id_cmp);
	qsort(at->stages, at->n_stages, sizeof(*at->stages), stage_span_cmp);
	return 0;
}

/* The stage annotation that covers host time ts (the latest to start), or -1. */
static int attrib_stage_at(const struct attrib *at, int64_t ts)
{
	size_t lo = 0, hi = at->n_stages;
	while (lo < hi) {
		size_t m = lo + (hi - lo) / 2;
		if (at->stages[m].start_ns <= ts)
			lo = m + 1;
		else
			hi = m;
	}
	for (size_t i = lo; i-- > 0;) {
		if (at->stages[i].end_ns >= ts)
			return at->stages[i].stage;
		if (lo - i > 4) /* stages do not nest: a few back is far enough */
			break;
	}
	return -1;
}

/* The runtime call that launched g, or -1. */
static long attrib_launch(const struct attrib *at, const struct trace_gpu *g)
{
	return g->correlation ? id_find(at->corr, at->n_corr, g->correlation) : -1;
}

/* The layer range (cpu_op) in which g was launched, or -1. */
static long attrib_op(const struct attrib *at, const struct trace *t, const struct trace_gpu *g)
{
	long r = attrib_launch(at, g);
	uint64_t ext = r >= 0 ? t->ranges[r].external_id : g->external_id;
	return ext ? id_find(at->ext, at->n_ext, ext) : -1;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !memcmp(s + n - m, suffix, m);
}

/* The phase of a layer range by its name: "<layer>.backward", the optimizer's
 * "Optimizer.step#...", else a forward layer. */
static int op_dstage(const char *name)
{
	if (ends_with(name, ".backward"))
		return DSTAGE_BACKWARD;
	if (!strncmp(name, "Optimizer.", 10) || !strncmp(name, "optimizer", 9))
		return DSTAGE_OPTIMIZER;
	return DSTAGE_FORWARD;
}

static const int stage_dstage[STAGE_COUNT] = { DSTAGE_DATA, DSTAGE_FORWARD, DSTAGE_BACKWARD,
					       DSTAGE_OPTIMIZER };

/* The device stage of one GPU activity: communication by name, else its layer's
 * phase, else the stage annotation its launch ran in; copies and memsets that no
 * layer launched are data/copy, other work that nothing claims "other". */
static int gpu_dstage(const struct attrib *at, const struct trace *t, const struct trace_gpu *g)
{
	if (g->cat == TRACE_KERNEL && g->name && !strncmp(g->name, "nccl", 4))
		return DSTAGE_COMM;
	long op = attrib_op(at, t, g);
	if (op >= 0)
		return op_dstage(t->ranges[op].name);
	long r = attrib_launch(at, g);
	int st = r >= 0 ? attrib_stage_at(at, t->ranges[r].start_ns) : -1;
	if (st >= 0 && !(st != STAGE_DATA && g->cat != TRACE_KERNEL))
		return stage_dstage[st];
	return g->cat == TRACE_KERNEL ? DSTAGE_OTHER : DSTAGE_DATA;
}

/* --- interval unions -------------------------------------------------------------------- */

struct iv {
	int64_t lo, hi;
};

static int iv_cmp(const void *a, const void *b)
{
	const struct iv *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Length of the union of iv[0..n) (sorted in place). */
static int64_t union_ns(struct iv *iv, size_t n)
{
	qsort(iv, n, sizeof(*iv), iv_cmp);
	int64_t total = 0, lo = 0, hi = 0;
	int open = 0;
	for (size_t i = 0; i < n; i++) {
		if (open && iv[i].lo <= hi) {
			if (iv[i].hi > hi)
				hi = iv[i].hi;
			continue;
		}
		if (open)
			total += hi - lo;
		lo = iv[i].lo;
		hi = iv[i].hi;
		open = 1;
	}
	return open ? total + hi - lo : total;
}

/* Which breakdown level a host range joins: runtime calls, data loading, other CPU
 * work; the step annotation itself joins none. */
static int range_part(const struct trace_range *r)
{
	if (r->cat == TRACE_CUDA_RUNTIME)
		return PART_RUNTIME;
	if (r->cat == TRACE_USER_ANNOTATION && !strcmp(r->name, "data"))
		return PART_DATA;
	if (r->cat == TRACE_USER_ANNOTATION && !strncmp(r->name, "ProfilerStep#", 13))
		return -1;
	return PART_CPU;
}

static int gpu_part(const struct trace_gpu *g)
{
	return g->cat == TRACE_KERNEL ? PART_KERNEL : g->cat == TRACE_GPU_MEMCPY ? PART_MEMCPY
										  : PART_MEMSET;
}

static int stage_of(const struct trace_range *r)
{
	if (r->cat != TRACE_USER_ANNOTATION)
		return -1;
	for (int st = 0; st < STAGE_COUNT; st++)
		if (!strcmp(r->name, stage_names[st]))
			return st;
	return -1;
}

/* One event's interval clipped to one step, and what it counts towards: a part
 * (0 .. PART_IDLE - 1), a stage (PART_IDLE + stage) or a device stage by its rank
 * (KIND_DEVICE + rank). */
#define KIND_DEVICE (PART_IDLE + STAGE_COUNT)
struct step_iv {
	uint32_t step;
	uint32_t kind;
	struct iv iv;
};

static int step_iv_cmp(const void *a, const void *b)
{
	const struct step_iv *x = a, *y = b;
	if (x->step != y->step)
		return x->step < y->step ? -1 : 1;
	return (x->kind > y->kind) - (x->kind < y->kind);
}

/* Steps by start, with the running maximum of their ends, so that the steps an
 * interval overlaps are found by a binary search (steps may overlap). */
struct step_pos {
	int64_t start_ns, end_ns;
	int64_t max_end_ns; /* max of end_ns over positions 0..this */
	size_t step;
};

static int step_pos_cmp(const void *a, const void *b)
{
	const struct step_pos *x = a, *y = b;
	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	return (x->step > y->step) - (x->step < y->step);
}

static struct step_pos *step_index_build(const struct trace *t)
{
	struct step_pos *x = malloc((t->n_steps ? t->n_steps : 1) * sizeof(*x));
	if (!x)
		return NULL;
	for (size_t i = 0; i < t->n_steps; i++)
		x[i] = (struct step_pos){ t->steps[i].start_ns, t->steps[i].end_ns, 0, i };
	qsort(x, t->n_steps, sizeof(*x), step_pos_cmp);
	for (size_t i = 0; i < t->n_steps; i++)
		x[i].max_end_ns = i && x[i - 1].max_end_ns > x[i].end_ns ? x[i - 1].max_end_ns
									 : x[i].end_ns;
	return x;
}

struct iv_list {
	struct step_iv *v;
	size_t n, cap;
};

/* Add [lo, hi) clipped to every step it overlaps: those that start before hi (a
 * prefix of the sorted steps) and end after lo (none before the first position
 * whose running maximum end passes lo). */
static int iv_list_add(struct iv_list *l, const struct step_pos *x, size_t n_steps, int kind,
		       int64_t lo, int64_t hi)
{
	if (hi <= lo)
		return 0;
	size_t a = 0, b = n_steps;
	while (a < b) { /* first position whose running maximum end passes lo */
		size_t m = a + (b - a) / 2;
		if (x[m].max_end_ns > lo)
			b = m;
		else
			a = m + 1;
	}
	for (size_t i = a; i < n_steps && x[i].start_ns < hi; i++) {
		int64_t clo = lo > x[i].start_ns ? lo : x[i].start_ns;
		int64_t chi = hi < x[i].end_ns ? hi : x[i].end_ns;
		if (chi <= clo)
			continue;
		if (l->n == l->cap) {
			size_t cap = 2 * l->cap;
			struct step_iv *v = realloc(l->v, cap * sizeof(*v));
			if (!v)
				return gp_error(GP_ENOMEM, "analysis: out of memory");
			l->v = v;
			l->cap = cap;
		}
		l->v[l->n++] = (struct step_iv){ (uint32_t)x[i].step, (uint32_t)kind, { clo, chi } };
	}
	return 0;
}

/* Every event's intervals, clipped to the steps they overlap, sorted by step and
 * kind: one pass over the events instead of one per step. */
static int step_ivs_collect(const struct trace *t, const signed char *dstage, struct iv_list *l)
{
	size_t ns = t->n_steps;
	int rc = 0;
	/* never NULL, so that an empty list still sorts and slices cleanly */
	l->n = 0;
	l->cap = 1024;
	l->v = malloc(l->cap * sizeof(*l->v));
	struct step_pos *x = step_index_build(t);
	if (!x || !l->v) {
		free(x);
		free(l->v);
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	}
	for (size_t i = 0; i < t->n_gpu && rc == 0; i++) {
		rc = iv_list_add(l, x, ns, gpu_part(&t->gpu[i]), t->gpu[i].start_ns,
				 t->gpu[i].end_ns);
		if (rc == 0)
			rc = iv_list_add(l, x, ns, KIND_DEVICE + dstage_rank[dstage[i]],
					 t->gpu[i].start_ns, t->gpu[i].end_ns);
	}
	for (size_t i = 0; i < t->n_ranges && rc == 0; i++) {
		const struct trace_range *r = &t->ranges[i];
		int part = range_part(r), st = stage_of(r);
		if (part >= 0)
			rc = iv_list_add(l, x, ns, part, r->start_ns, r->end_ns);
		if (rc == 0 && st >= 0)
			rc = iv_list_add(l, x, ns, PART_IDLE + st, r->start_ns, r->end_ns);
		/* without GPU work the device is the compute thread: its stages */
		if (rc == 0 && st >= 0 && t->n_gpu == 0)
			rc = iv_list_add(l, x, ns, KIND_DEVICE + dstage_rank[stage_dstage[st]],
					 r->start_ns, r->end_ns);
	}
	free(x);
	if (rc < 0) {
		free(l->v);
		l->v = NULL;
		return rc;
	}
	qsort(l->v, l->n, sizeof(*l->v), step_iv_cmp);
	return 0;
}

/* Each instant of the step goes to the first part that covers it, so the parts sum
 * to the step: the union of levels 0..k minus the union of levels 0..k-1. iv[0..n)
 * are the step's intervals sorted by kind. */
static void step_breakdown(const struct trace_step *s, const struct step_iv *iv, size_t n,
			   struct iv *buf, struct iv *tmp, struct analysis_step *out)
{
	size_t m = 0, k = 0;
	int64_t prev = 0;
	for (int part = PART_KERNEL; part < PART_IDLE; part++) {
		for (; k < n && iv[k].kind == (uint32_t)part; k++)
			buf[m++] = iv[k].iv;
		memcpy(tmp, buf, m * sizeof(*buf));
		int64_t cum = union_ns(tmp, m);
		out->part_ms[part] = (cum - prev) / 1e6;
		if (part == PART_MEMSET)
			out->gpu_busy_ms = cum / 1e6;
		prev = cum;
	}
	out->part_ms[PART_IDLE] = (s->end_ns - s->start_ns - prev) / 1e6;
	for (int st = 0; st < STAGE_COUNT; st++) {
		size_t c = 0;
		for (; k < n && iv[k].kind == (uint32_t)(PART_IDLE + st); k++)
			tmp[c++] = iv[k].iv;
		out->stage_ms[st] = union_ns(tmp, c) / 1e6;
	}
	m = 0;
	prev = 0;
	for (int rank = 0; rank < DSTAGE_IDLE; rank++) {
		for (; k < n && iv[k].kind == (uint32_t)(KIND_DEVICE + rank); k++)
			buf[m++] = iv[k].iv;
		memcpy(tmp, buf, m * sizeof(*buf));
		int64_t cum = union_ns(tmp, m);
		out->device_ms[rank_dstage[rank]] = (cum - prev) / 1e6;
		prev = cum;
	}
	out->device_ms[DSTAGE_IDLE] = (s->end_ns - s->start_ns - prev) / 1e6;
}

/* --- aggregation by name ---------------------------------------------------------------- */

struct keyed {
	const char *name; /* interned: equal names are equal pointers */
	double value;
};

static int keyed_by_name(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->value < y->value ? -1 : x->value > y->value);
}

static int op_by_total(const void *a, const void *b)
{
	const struct analysis_op *x = a, *y = b;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Sum values by name and keep the ANALYSIS_TOP largest totals. */
static int top_by_name(struct keyed *k, size_t n, struct analysis_op *top, int *n_top)
{
	qsort(k, n, sizeof(*k), keyed_by_name);
	struct analysis_op *all = malloc((n ? n : 1) * sizeof(*all));
	if (!all)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (!m || strcmp(all[m - 1].name, k[i].name)) {
			memset(&all[m], 0, sizeof(all[m]));
			snprintf(all[m].name, sizeof(all[m].name), "%s", k[i].name);
			m++;
		}
		all[m - 1].count++;
		all[m - 1].total += k[i].value;
	}
	qsort(all, m, sizeof(*all), op_by_total);
	*n_top = m < ANALYSIS_TOP ? (int)m : ANALYSIS_TOP;
	for (int i = 0; i < *n_top; i++) {
		top[i] = all[i];
		top[i].mean = all[i].total / all[i].count;
	}
	free(all);
	return 0;
}

/* Kernel time by layer: kernel -> launching runtime call (correlation id) -> its
 * enclosing cpu_op (external id). Kernels whose chain breaks count as "(no layer)". */
static int top_gpu_ops(const struct trace *t, const struct attrib *at, struct analysis *a,
		       struct keyed *k)
{
	size_t n = 0;
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (g->cat != TRACE_KERNEL)
			continue;
		long op = attrib_op(at, t, g);
		k[n].name = op >= 0 ? t->ranges[op].name : "(no layer)";
		k[n++].value = (g->end_ns - g->start_ns) / 1e6;
	}
	return top_by_name(k, n, a->top_gpu, &a->n_top_gpu);
}

/* A readable kernel name: the function of an Itanium-mangled name ("_Z13add_kernelmPKfS0_Pf"
 * -> "add_kernel", "_ZN7cutlass6KernelI...E" -> "cutlass::Kernel"), else the name as it
 * is (cuDNN's and cuBLAS's kernels are mostly plain names). */
static const char *kernel_label(const char *name, char *buf, size_t cap)
{
	if (strncmp(name, "_Z", 2))
		return name;
	const char *p = name + 2;
	int nested = *p == 'N';
	size_t len = 0;
	p += nested;
	buf[0] = 0;
	while (*p >= '1' && *p <= '9') {
		char *end;
		long n = strtol(p, &end, 10);
		if (n <= 0 || (long)strlen(end) < n)
			break;
		int w = snprintf(buf + len, cap - len, "%s%.*s", len ? "::" : "", (int)n, end);
		if (w < 0 || (size_t)w >= cap - len)
			break;
		len += (size_t)w;
		p = end + n;
		if (!nested)
			break;
	}
	return len ? buf : name;
}

/* Kernel time by kernel: which kernels the step's GPU time goes to, to set beside
 * another engine's profile (torch.profiler's kernel table). */
static int top_kernels(const struct trace *t, struct analysis *a, struct keyed *k)
{
	size_t n = 0;
	char (*labels)[96] = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*labels));
	if (!labels)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (g->cat != TRACE_KERNEL)
			continue;
		const char *l = kernel_label(g->name ? g->name : "?", labels[n], sizeof(labels[n]));
		if (l != labels[n])
			snprintf(labels[n], sizeof(labels[n]), "%s", l);
		k[n].name = labels[n];
		k[n].value = (g->end_ns - g->start_ns) / 1e6;
		n++;
	}
	int rc = top_by_name(k, n, a->top_kernels, &a->n_top_kernels);
	free(labels);
	return rc;
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int kernel_stats(const struct trace *t, struct analysis *a)
{
	double *d = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*d));
	if (!d)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	size_t n = 0;
	for (size_t i = 0; i < t->n_gpu; i++)
		if (t->gpu[i].cat == TRACE_KERNEL)
			d[n++] = (t->gpu[i].end_ns - t->gpu[i].start_ns) / 1e3;
	qsort(d, n, sizeof(*d), dbl_cmp);
	a->n_kernels = (long)n;
	for (size_t i = 0; i < n; i++)
		a->kernel_total_ms += d[i] / 1e3;
	if (n)
		a->kernel_median_us = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
	free(d);
	return 0;
}

static void advice_add(struct analysis *a, const char *rule, double value, double threshold,
		       const char *fmt, ...) GP_PRINTF(5, 6);

static void advice_add(struct analysis *a, const char *rule, double value, double threshold,
		       const char *fmt, ...)
{
	struct analysis_advice *ad = &a->advice[a->n_advice++];
	va_list ap;
	snprintf(ad->rule, sizeof(ad->rule), "%s", rule);
	ad->value = value;
	ad->threshold = threshold;
	va_start(ap, fmt);
	vsnprintf(ad->text, sizeof(ad->text), fmt, ap);
	va_end(ap);
}

/* The rules, with thresholds documented in docs/profile.md. GPU rules need GPU work
 * in the trace: a CPU run has nothing to say about kernels. */
static void advice_rules(struct analysis *a)
{
	if (a->data_wait_share > 0.10)
		advice_add(a, "loader_workers", a->data_wait_share, 0.10,
			   "steps wait for data %.1f%% of the time (> %d%%): add data loader "
			   "workers (gpuperf workers finds the knee)",
			   100 * a->data_wait_share, 10);
	if (a->n_kernels == 0)
		return;
	if (a->kernel_median_us < 20 && a->gpu_idle_share > 0.20)
		advice_add(a, "cuda_graphs", a->kernel_median_us, 20,
			   "median kernel lasts %.1f us with the GPU idle %.1f%% of the step: "
			   "launch overhead dominates; capture the step in a CUDA graph",
			   a->kernel_median_us, 100 * a->gpu_idle_share);
	int tensor_cores = a->meta.cc_major >= 7;
	if (tensor_cores && !strcmp(a->meta.precision, "fp32"))
		advice_add(a, "amp", a->meta.cc_major + a->meta.cc_minor / 10.0, 7.0,
			   "FP32 math on a compute capability %.1f GPU with tensor cores: try "
			   "mixed precision (--precision fp16 or bf16)",
			   a->meta.cc_major + a->meta.cc_minor / 10.0);
	if (a->gpu_busy_share < 0.50)
		advice_add(a, "bigger_batch", a->gpu_busy_share, 0.50,
			   "the GPU is busy only %.1f%% of the step (< %d%%): a bigger batch "
			   "gives it more work per launch",
			   100 * a->gpu_busy_share, 50);
}

static int memory_trend(const struct trace *t, struct analysis *a, struct keyed *k)
{
	size_t n = 0;
	int64_t t0 = t->n_steps ? t->steps[0].start_ns : t->base_ns;
	a->mem_t_ms = malloc((t->n_mem ? t->n_mem : 1) * sizeof(double));
	a->mem_total_bytes = malloc((t->n_mem ? t->n_mem : 1) * sizeof(double));
	if (!a->mem_t_ms || !a->mem_total_bytes)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	for (size_t i = 0; i < t->n_mem; i++) {
		const struct trace_mem *m = &t->mem[i];
		a->mem_t_ms[i] = (m->ts_ns - t0) / 1e6;
		a->mem_total_bytes[i] = (double)m->total_bytes;
		if (m->total_bytes > a->mem_peak_bytes)
			a->mem_peak_bytes = (double)m->total_bytes;
		if (m->layer && m->delta_bytes > 0) {
			k[n].name = m->layer;
			k[n++].value = (double)m->delta_bytes;
		}
	}
	a->n_mem = (int)t->n_mem;
	return top_by_name(k, n, a->top_mem, &a->n_top_mem);
}

static int steps_analyse(const struct trace *t, const signed char *dstage, struct analysis *a)
{
	struct iv_list l;
	struct iv *buf = NULL, *tmp = NULL;
	int rc = step_ivs_collect(t, dstage, &l);
	if (rc < 0)
		return rc;
	size_t cap = 1;
	for (size_t k = 0, j; k < l.n; k = j) {
		for (j = k; j < l.n && l.v[j].step == l.v[k].step; j++)
			;
		cap = j - k > cap ? j - k : cap;
	}
	buf = malloc(cap * sizeof(*buf));
	tmp = malloc(cap * sizeof(*tmp));
	a->steps = calloc(t->n_steps, sizeof(*a->steps));
	if (!buf || !tmp || !a->steps) {
		rc = gp_error(GP_ENOMEM, "analysis: out of memory");
		goto free_bufs;
	}
	a->n_steps = (int)t->n_steps;
	double dur = 0, busy = 0, wait = 0;
	size_t k = 0;
	for (size_t i = 0; i < t->n_steps; i++) {
		const struct trace_step *s = &t->steps[i];
		struct analysis_step *o = &a->steps[i];
		size_t j = k;
		while (j < l.n && l.v[j].step == i)
			j++;
		o->step = s->step;
		o->dur_ms = (s->end_ns - s->start_ns) / 1e6;
		o->data_wait_ms = s->data_wait_ns / 1e6;
		step_breakdown(s, l.v + k, j - k, buf, tmp, o);
		k = j;
		dur += o->dur_ms;
		busy += o->gpu_busy_ms;
		wait += o->data_wait_ms;
		a->mean.dur_ms += o->dur_ms / t->n_steps;
		a->mean.gpu_busy_ms += o->gpu_busy_ms / t->n_steps;
		a->mean.data_wait_ms += o->data_wait_ms / t->n_steps;
		for (int p = 0; p < PART_COUNT; p++)
			a->mean.part_ms[p] += o->part_ms[p] / t->n_steps;
		for (int st = 0; st < STAGE_COUNT; st++)
			a->mean.stage_ms[st] += o->stage_ms[st] / t->n_steps;
		for (int d = 0; d < DSTAGE_COUNT; d++)
			a->mean.device_ms[d] += o->device_ms[d] / t->n_steps;
	}
	a->gpu_busy_share = dur > 0 ? busy / dur : 0;
	a->gpu_idle_share = 1 - a->gpu_busy_share;
	a->data_wait_share = dur > 0 ? wait / dur : 0;
free_bufs:
	free(l.v);
	free(buf);
	free(tmp);
	return rc;
}

int analysis_run(const struct trace *t, struct analysis *a)
{
	memset(a, 0, sizeof(*a));
	a->meta = t->meta;
	if (t->n_steps == 0)
		return gp_error(GP_EFORMAT, "the trace has no steps (no ProfilerStep#N ranges)");
	size_t cap = t->n_ranges + t->n_gpu + t->n_mem + 1;
	struct keyed *k = malloc(cap * sizeof(*k));
	signed char *dstage = malloc(t->n_gpu ? t->n_gpu : 1);
	struct attrib at;
	int rc;
	if (!k || !dstage) {
		free(k);
		free(dstage);
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	}
	rc = attrib_build(t, &at);
	if (rc < 0) {
		free(k);
		free(dstage);
		return rc;
	}
	for (size_t i = 0; i < t->n_gpu; i++)
		dstage[i] = (signed char)gpu_dstage(&at, t, &t->gpu[i]);
	a->device_from_host = t->n_gpu == 0;
	rc = steps_analyse(t, dstage, a);
	if (rc < 0)
		goto fail;
	size_t n = 0;
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].cat == TRACE_CPU_OP)
			k[n++] = (struct keyed){ t->ranges[i].name,
						 (t->ranges[i].end_ns - t->ranges[i].start_ns) / 1e6 };
	rc = top_by_name(k, n, a->top_cpu, &a->n_top_cpu);
	if (rc < 0)
		goto fail;
	rc = top_gpu_ops(t, &at, a, k);
	if (rc < 0)
		goto fail;
	rc = top_kernels(t, a, k);
	if (rc < 0)
		goto fail;
	rc = memory_trend(t, a, k);
	if (rc < 0)
		goto fail;
	rc = kernel_stats(t, a);
	if (rc < 0)
		goto fail;
	advice_rules(a);
	free(k);
	free(dstage);
	attrib_free(&at);
	return 0;
fail:
	free(k);
	free(dstage);
	attrib_free(&at);
	analysis_free(a);
	return rc;
}

int analysis_set_mem_timeline(struct analysis *a, const struct mem_timeline *tl)
{
	if (a->have_mem_tl)
		mem_timeline_free(&a->mem_tl);
	a->have_mem_tl = 0;
	GP_TRY(mem_timeline_copy(tl, &a->mem_tl));
	a->have_mem_tl = 1;
	return 0;
}

void analysis_free(struct analysis *a)
{
	if (a->have_mem_tl)
		mem_timeline_free(&a->mem_tl);
	a->have_mem_tl = 0;
	free(a->steps);
	free(a->mem_t_ms);
	free(a->mem_total_bytes);
	a->steps = NULL;
	a->mem_t_ms = a->mem_total_bytes = NULL;
	a->n_steps = a->n_mem = 0;
}

/* --- output ----------------------------------------------------------------------------- */

static void print_ops(FILE *f, const char *title, const struct analysis_op *ops, int n,
		      int bytes)
{
	fprintf(f, "\n%s\n  %-40s %7s %12s %12s\n", title, "name", "count",
		bytes ? "total MiB" : "total ms", bytes ? "mean MiB" : "mean ms");
	for (int i = 0; i < n; i++) {
		double s = bytes ? 1.0 / (1 << 20) : 1.0;
		fprintf(f, "  %-40.40s %7ld %12.3f %12.4f\n", ops[i].name, ops[i].count,
			ops[i].total * s, ops[i].mean * s);
	}
}

void analysis_print(const struct analysis *a, FILE *f)
{
	fprintf(f, "profile: model %s, batch %d, precision %s, GPU %s\n",
		a->meta.model[0] ? a->meta.model : "?", a->meta.batch, a->meta.precision,
		a->meta.gpu_name[0] ? a->meta.gpu_name : "none");
	fprintf(f, "\nstep breakdown (ms)\n  %6s %9s", "step", "total");
	for (int p = 0; p < PART_COUNT; p++)
		fprintf(f, " %8s", part_names[p]);
	fputc('\n', f);
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
		if (i < a->n_steps)
			fprintf(f, "  %6d %9.3f", s->step, s->dur_ms);
		else
			fprintf(f, "  %6s %9.3f", "mean", s->dur_ms);
		for (int p = 0; p < PART_COUNT; p++)
			fprintf(f, " %8.3f", s->part_ms[p]);
		fputc('\n', f);
	}
	fprintf(f, "\n%s time by stage (ms; sums to the step)\n  %6s %9s",
		a->device_from_host ? "compute thread" : "GPU", "step", "total");
	for (int d = 0; d < DSTAGE_COUNT; d++)
		fprintf(f, " %9.9s", d == DSTAGE_COMM ? "comm" : dstage_names[d]);
	fputc('\n', f);
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
		if (i < a->n_steps)
			fprintf(f, "  %6d %9.3f", s->step, s->dur_ms);
		else
			fprintf(f, "  %6s %9.3f", "mean", s->dur_ms);
		for (int d = 0; d < DSTAGE_COUNT; d++)
			fprintf(f, " %9.3f", s->device_ms[d]);
		fputc('\n', f);
	}
	fprintf(f, "host stages, mean per step (ms):");
	for (int st = 0; st < STAGE_COUNT; st++)
		fprintf(f, " %s %.3f", stage_names[st], a->mean.stage_ms[st]);
	fprintf(f, "\nGPU busy %.1f%%, data wait %.1f%%, %ld kernels (median %.1f us, total %.3f ms)\n",
		100 * a->gpu_busy_share, 100 * a->data_wait_share, a->n_kernels,
		a->kernel_median_us, a->kernel_total_ms);
	print_ops(f, "top ops by CPU time", a->top_cpu, a->n_top_cpu, 0);
	print_ops(f, "top layers by GPU time", a->top_gpu, a->n_top_gpu, 0);
	print_ops(f, "top kernels by GPU time", a->top_kernels, a->n_top_kernels, 0);
	print_ops(f, "top layers by memory allocated", a->top_mem, a->n_top_mem, 1);
	if (a->have_mem_tl)
		mem_timeline_print(&a->mem_tl, f);
	fprintf(f, "\nadvice\n");
	if (!a->n_advice)
		fprintf(f, "  none: no rule fired\n");
	for (int i = 0; i < a->n_advice; i++)
		fprintf(f, "  [%s] %s\n", a->advice[i].rule, a->advice[i].text);
}

static json_t *ops_json(const struct analysis_op *ops, int n, const char *unit)
{
	json_t *arr = json_array();
	char total[32], mean[32];
	snprintf(total, sizeof(total), "total_%s", unit);
	snprintf(mean, sizeof(mean), "mean_%s", unit);
	for (int i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:s, s:I, s:o, s:o}", "name", ops[i].name,
						     "count", (json_int_t)ops[i].count, total,
						     result_real(ops[i].total), mean, result_real(ops[i].mean)));
	return arr;
}

static json_t *step_json(const struct analysis_step *s)
{
	json_t *o = json_pack("{s:i, s:o, s:o, s:o}", "step", s->step, "dur_ms", result_real(s->dur_ms),
			      "gpu_busy_ms", result_real(s->gpu_busy_ms), "data_wait_ms", result_real(s->data_wait_ms));
	char key[32];
	for (int p = 0; o && p < PART_COUNT; p++) {
		snprintf(key, sizeof(key), "%s_ms", part_names[p]);
		json_object_set_new(o, key, result_real(s->part_ms[p]));
	}
	for (int st = 0; o && st < STAGE_COUNT; st++) {
		snprintf(key, sizeof(key), "stage_%s_ms", stage_names[st]);
		json_object_set_new(o, key, result_real(s->stage_ms[st]));
	}
	json_t *dev = json_object();
	for (int d = 0; dev && d < DSTAGE_COUNT; d++)
		json_object_set_new(dev, dstage_names[d], result_real(s->device_ms[d]));
	if (o && dev)
		json_object_set_new(o, "device_stage_ms", dev);
	else
		json_decref(dev);
	return o;
}

json_t *analysis_to_json(const struct analysis *a)
{
	json_t *steps = json_array(), *advice = json_array();
	for (int i = 0; steps && i < a->n_steps; i++)
		json_array_append_new(steps, step_json(&a->steps[i]));
	for (int i = 0; advice && i < a->n_advice; i++)
		json_array_append_new(advice, json_pack("{s:s, s:o, s:o, s:s}", "rule",
							a->advice[i].rule, "value",
							result_real(a->advice[i].value), "threshold",
							result_real(a->advice[i].threshold), "text",
							a->advice[i].text));
	json_t *j = json_pack("{s:{s:s, s:i, s:s, s:s}, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:o, "
			 "s:o, s:o, s:o, s:o, s:o, s:o}",
			 "meta", "model", a->meta.model, "batch", a->meta.batch, "precision",
			 a->meta.precision, "gpu", a->meta.gpu_name,
			 "steps", steps, "mean_step", step_json(&a->mean),
			 "gpu_busy_share", result_real(a->gpu_busy_share), "gpu_idle_share", result_real(a->gpu_idle_share),
			 "data_wait_share", result_real(a->data_wait_share),
			 "kernels", (json_int_t)a->n_kernels, "kernel_total_ms", result_real(a->kernel_total_ms),
			 "kernel_median_us", result_real(a->kernel_median_us),
			 "top_cpu_ops", ops_json(a->top_cpu, a->n_top_cpu, "ms"),
			 "top_gpu_layers", ops_json(a->top_gpu, a->n_top_gpu, "ms"),
			 "top_kernels", ops_json(a->top_kernels, a->n_top_kernels, "ms"),
			 "top_memory_layers", ops_json(a->top_mem, a->n_top_mem, "bytes"),
			 "memory_peak_bytes", result_real(a->mem_peak_bytes), "advice", advice);
	if (j)
		json_object_set_new(j, "device_time_source",
				    json_string(a->device_from_host ? "cpu_compute_thread" : "gpu"));
	if (j && a->have_mem_tl)
		json_object_set_new(j, "memory_timeline", mem_timeline_to_json(&a->mem_tl));
	return j;
}

static void md_ops(FILE *f, const char *title, const struct analysis_op *ops, int n, int bytes)
{
	fprintf(f, "\n## %s\n\n| name | count | total %s | mean %s |\n|---|---:|---:|---:|\n",
		title, bytes ? "MiB" : "ms", bytes ? "MiB" : "ms");
	double s = bytes ? 1.0 / (1 << 20) : 1.0;
	for (int i = 0; i < n; i++)
		fprintf(f, "| `%s` | %ld | %.3f | %.4f |\n", ops[i].name, ops[i].count,
			ops[i].total * s, ops[i].mean * s);
}

void analysis_markdown_print(const struct analysis *a, FILE *f)
{
	fprintf(f, "# Profile report\n\nModel **%s**, batch %d, precision %s, GPU %s.\n\n",
		a->meta.model[0] ? a->meta.model : "?", a->meta.batch, a->meta.precision,
		a->meta.gpu_name[0] ? a->meta.gpu_name : "none");
	fprintf(f, "## Key figures\n\n- steps analysed: %d, mean step %.3f ms\n"
		   "- GPU busy: %.1f%% of the step (idle %.1f%%)\n- data wait: %.1f%% of the step\n"
		   "- kernels: %ld, median %.1f us, total %.3f ms\n- peak memory allocated: %.1f MiB\n",
		a->n_steps, a->mean.dur_ms, 100 * a->gpu_busy_share, 100 * a->gpu_idle_share,
		100 * a->data_wait_share, a->n_kernels, a->kernel_median_us, a->kernel_total_ms,
		a->mem_peak_bytes / (1 << 20));
	fprintf(f, "\n## Step breakdown (ms)\n\n| step | total |");
	for (int p = 0; p < PART_COUNT; p++)
		fprintf(f, " %s |", part_names[p]);
	for (int st = 0; st < STAGE_COUNT; st++)
		fprintf(f, " stage %s |", stage_names[st]);
	fprintf(f, "\n|---:|---:|");
	for (int p = 0; p < PART_COUNT + STAGE_COUNT; p++)
		fprintf(f, "---:|");
	fputc('\n', f);
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
		if (i < a->n_steps)
			fprintf(f, "| %d | %.3f |", s->step, s->dur_ms);
		else
			fprintf(f, "| mean | %.3f |", s->dur_ms);
		for (int p = 0; p < PART_COUNT; p++)
			fprintf(f, " %.3f |", s->part_ms[p]);
		for (int st = 0; st < STAGE_COUNT; st++)
			fprintf(f, " %.3f |", s->stage_ms[st]);
		fputc('\n', f);
	}
	fprintf(f, "\n## %s time by stage (ms)\n\nEach instant of the step goes to the stage whose "
		   "%s then (forward, backward, optimizer, communication, data, other first), "
		   "the rest is idle: the columns sum to the step. Host time in each stage's "
		   "annotation is the last four columns.\n\n| step | total |",
		a->device_from_host ? "Compute thread" : "GPU",
		a->device_from_host ? "annotation covers the compute thread"
				    : "kernels, copies or memsets ran");
	for (int d = 0; d < DSTAGE_COUNT; d++)
		fprintf(f, " %s |", dstage_names[d]);
	for (int st = 0; st < STAGE_COUNT; st++)
		fprintf(f, " host %s |", stage_names[st]);
	fprintf(f, "\n|---:|---:|");
	for (int p = 0; p < DSTAGE_COUNT + STAGE_COUNT; p++)
		fprintf(f, "---:|");
	fputc('\n', f);
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
		if (i < a->n_steps)
			fprintf(f, "| %d | %.3f |", s->step, s->dur_ms);
		else
			fprintf(f, "| mean | %.3f |", s->dur_ms);
		for (int d = 0; d < DSTAGE_COUNT; d++)
			fprintf(f, " %.3f |", s->device_ms[d]);
		for (int st = 0; st < STAGE_COUNT; st++)
			fprintf(f, " %.3f |", s->stage_ms[st]);
		fputc('\n', f);
	}
	md_ops(f, "Top ops by CPU time", a->top_cpu, a->n_top_cpu, 0);
	md_ops(f, "Top layers by GPU time", a->top_gpu, a->n_top_gpu, 0);
	md_ops(f, "Top kernels by GPU time", a->top_kernels, a->n_top_kernels, 0);
	md_ops(f, "Top layers by memory allocated", a->top_mem, a->n_top_mem, 1);
	if (a->have_mem_tl)
		mem_timeline_markdown(&a->mem_tl, f);
	fprintf(f, "\n## Advice\n\n");
	if (!a->n_advice)
		fprintf(f, "No rule fired.\n");
	for (int i = 0; i < a->n_advice; i++)
		fprintf(f, "- **%s** (measured %.3g, threshold %.3g): %s\n", a->advice[i].rule,
			a->advice[i].value, a->advice[i].threshold, a->advice[i].text);
}

int analysis_write_markdown(const struct analysis *a, const char *path)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	analysis_markdown_print(a, af.f);
	return atomic_file_commit(&af);
}
