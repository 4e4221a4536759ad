#include "report/analysis.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/sort.h"
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
	gp_qsort(at->corr, at->n_corr, sizeof(*at->corr), id_cmp);
	gp_qsort(at->ext, at->n_ext, sizeof(*at->ext), id_cmp);
	gp_qsort(at->stages, at->n_stages, sizeof(*at->stages), stage_span_cmp);
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

/* The phase of a layer range by its name: "<layer>.backward" (torch.profiler's
 * "aten::convolution_backward", "...ConvolutionBackward0" too), the optimizer's
 * "Optimizer.step#...", else a forward layer. */
static int op_dstage(const char *name)
{
	if (strstr(name, "ackward"))
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
	gp_qsort(iv, n, sizeof(*iv), iv_cmp);
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
	gp_qsort(x, t->n_steps, sizeof(*x), step_pos_cmp);
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
	gp_qsort(l->v, l->n, sizeof(*l->v), step_iv_cmp);
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
	gp_qsort(k, n, sizeof(*k), keyed_by_name);
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
	gp_qsort(all, m, sizeof(*all), op_by_total);
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

/* --- op tables ------------------------------------------------------------------------- */

/* The category of an op type (ops/ops.h's names), its rows' labels by phase. */
static const struct {
	const char *op, *fwd, *bwd;
} op_kinds[] = {
	{ "conv2d", "conv forward", "conv backward" },
	{ "batchnorm2d", "batch norm forward", "batch norm backward" },
	{ "relu", "activation forward", "activation backward" },
	{ "relu6", "activation forward", "activation backward" },
	{ "maxpool2d", "pooling forward", "pooling backward" },
	{ "avgpool_global", "pooling forward", "pooling backward" },
	{ "linear", "linear forward", "linear backward" },
	{ "add", "add forward", "add backward" },
	{ "dropout", "dropout forward", "dropout backward" },
	{ "flatten", "flatten forward", "flatten backward" },
	{ "optimizer", "optimizer", "optimizer" },
};

static const char ROW_LOSS[] = "loss", ROW_COPY[] = "copy", ROW_RUNTIME[] = "CUDA runtime",
		  ROW_COMM[] = "communication", ROW_BWD_OUT[] = "backward outside layers",
		  ROW_NONE[] = "(no layer)", ROW_DGRAD[] = "conv data gradient (GPU)",
		  ROW_WGRAD[] = "conv weight gradient (GPU)";

/* One contribution to a row of both tables (layer NULL: the type table only). */
struct oprec {
	const char *type, *layer, *shapes;
	double cpu_self, cpu_total, gpu;
	long calls, gpu_calls;
};

struct oprec_list {
	struct oprec *v;
	size_t n, cap;
};

static int oprec_add(struct oprec_list *l, struct oprec r)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		struct oprec *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return gp_error(GP_ENOMEM, "analysis: out of memory");
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = r;
	return 0;
}

/* A kernel of a convolution's backward that computes the data or the weight
 * gradient, by its name (cuDNN's dgrad/wgrad, our depthwise bwd_data/filter
 * kernels, bias gradients as channel sums); NULL when the name does not say. */
static const char *conv_bwd_part(const char *name)
{
	char low[160];
	size_t n = 0;
	for (; name[n] && n + 1 < sizeof(low); n++)
		low[n] = (char)(name[n] >= 'A' && name[n] <= 'Z' ? name[n] + 32 : name[n]);
	low[n] = 0;
	if (strstr(low, "wgrad") || strstr(low, "filter") || strstr(low, "channel_sum"))
		return ROW_WGRAD;
	if (strstr(low, "dgrad") || strstr(low, "bwd_data") || strstr(low, "backward_data"))
		return ROW_DGRAD;
	return NULL;
}

/* cpu_op names to their layers: looked up once per distinct (interned) name. */
struct name_layer {
	const char *name;
	const struct trace_layer *layer;
};

static int name_layer_cmp(const void *a, const void *b)
{
	const struct name_layer *x = a, *y = b;
	return (x->name > y->name) - (x->name < y->name);
}

static int layer_ptr_cmp(const void *a, const void *b)
{
	const struct trace_layer *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* The layer a cpu_op name belongs to ("conv1" for "conv1.backward") among the layers
 * sorted by name, or NULL. */
static const struct trace_layer *layer_of(const struct trace_layer *const *sorted, size_t n,
					  const char *op_name)
{
	size_t len = strlen(op_name), lo = 0, hi = n;
	if (ends_with(op_name, ".backward"))
		len -= 9;
	while (lo < hi) {
		size_t m = lo + (hi - lo) / 2;
		const char *name = sorted[m]->name;
		int c = strncmp(name, op_name, len);
		if (c == 0)
			c = name[len] != 0; /* longer than the prefix: after it */
		if (c == 0)
			return sorted[m];
		if (c < 0)
			lo = m + 1;
		else
			hi = m;
	}
	return NULL;
}

static const char *op_type_label(const struct trace_layer *l, const char *range_name)
{
	if (!l)
		return range_name;
	int bwd = ends_with(range_name, ".backward");
	for (size_t i = 0; i < sizeof(op_kinds) / sizeof(op_kinds[0]); i++)
		if (!strcmp(l->op, op_kinds[i].op))
			return bwd ? op_kinds[i].bwd : op_kinds[i].fwd;
	return l->op;
}

static int oprow_by_key(const void *a, const void *b, int layer)
{
	const struct oprec *x = a, *y = b;
	const char *p = layer ? x->layer : x->type, *q = layer ? y->layer : y->type;
	return strcmp(p, q);
}
static int oprec_by_type(const void *a, const void *b) { return oprow_by_key(a, b, 0); }
static int oprec_by_layer(const void *a, const void *b) { return oprow_by_key(a, b, 1); }

/* Sum the records by type (layer 0) or layer (1) into *rows. */
static int oprows_merge(struct oprec_list *l, int layer, struct analysis_oprow **rows, int *n_rows)
{
	size_t n = 0;
	struct oprec *v = l->v;
	for (size_t i = 0; i < l->n; i++)
		if (!layer || v[i].layer)
			v[n++] = v[i];
	gp_qsort(v, n, sizeof(*v), layer ? oprec_by_layer : oprec_by_type);
	struct analysis_oprow *r = calloc(n ? n : 1, sizeof(*r));
	if (!r)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	int m = 0;
	for (size_t i = 0; i < n; i++) {
		const char *key = layer ? v[i].layer : v[i].type;
		if (!m || strcmp(r[m - 1].name, key)) {
			snprintf(r[m].name, sizeof(r[m].name), "%s", key);
			m++;
		}
		struct analysis_oprow *o = &r[m - 1];
		if (layer && v[i].shapes && !o->shapes[0])
			snprintf(o->shapes, sizeof(o->shapes), "%s", v[i].shapes);
		o->calls += v[i].calls;
		o->gpu_calls += v[i].gpu_calls;
		o->cpu_self_ms += v[i].cpu_self;
		o->cpu_total_ms += v[i].cpu_total;
		o->gpu_ms += v[i].gpu;
	}
	*rows = r;
	*n_rows = m;
	return 0;
}

/* Sums of one row before the rows are merged by name. */
struct opacc {
	double cpu_self, cpu_total, gpu;
	long calls, gpu_calls;
};

/* Rows no layer range stands for: in the type table, and (those with a layer name)
 * in the layer table too. */
enum { SP_LOSS, SP_COPY, SP_RUNTIME, SP_COMM, SP_BWD_OUT, SP_NONE, SP_DGRAD, SP_WGRAD,
       SP_OPTIM, SP_COUNT };
static const struct {
	const char *type, *layer;
} special_rows[SP_COUNT] = {
	[SP_LOSS] = { ROW_LOSS, ROW_LOSS },       [SP_COPY] = { ROW_COPY, ROW_COPY },
	[SP_RUNTIME] = { ROW_RUNTIME, NULL },     [SP_COMM] = { ROW_COMM, ROW_COMM },
	[SP_BWD_OUT] = { ROW_BWD_OUT, ROW_BWD_OUT }, [SP_NONE] = { ROW_NONE, ROW_NONE },
	[SP_DGRAD] = { ROW_DGRAD, NULL },         [SP_WGRAD] = { ROW_WGRAD, NULL },
	[SP_OPTIM] = { "optimizer", "optimizer" },
};

/* Which special row GPU work that no layer launched joins, by its device stage. */
static const int special_of_dstage[DSTAGE_IDLE] = {
	[DSTAGE_DATA] = SP_COPY,   [DSTAGE_FORWARD] = SP_LOSS, [DSTAGE_BACKWARD] = SP_BWD_OUT,
	[DSTAGE_OPTIMIZER] = SP_OPTIM, [DSTAGE_COMM] = SP_COMM, [DSTAGE_OTHER] = SP_NONE,
};

/* The rows: every layer range (host time, less its runtime calls for self), every
 * runtime call, every GPU activity (to the layer that launched it, else to the row
 * its stage stands for), and the host time of the forward and data annotations
 * outside layers (the loss; the batch's upload). Sums go first to one accumulator
 * per distinct range name (interned: found by pointer), so that only a few hundred
 * rows are merged by name. */
static int op_tables(const struct trace *t, const struct attrib *at, const signed char *dstage,
		     struct analysis *a)
{
	struct oprec_list l = { 0 };
	size_t nr = t->n_ranges ? t->n_ranges : 1;
	double *rt_in = calloc(nr, sizeof(*rt_in));
	struct name_layer *names = malloc(nr * sizeof(*names));
	struct opacc *acc = NULL, sp[SP_COUNT];
	const struct trace_layer **sorted = NULL;
	double stage_host[STAGE_COUNT] = { 0 }, stage_ops[STAGE_COUNT] = { 0 };
	double stage_rt[STAGE_COUNT] = { 0 };
	long stage_calls[STAGE_COUNT] = { 0 };
	size_t n_names = 0;
	int rc = 0;
	memset(sp, 0, sizeof(sp));
	if (!rt_in || !names) {
		rc = gp_error(GP_ENOMEM, "analysis: out of memory");
		goto out;
	}
	for (size_t i = 0; i < t->n_ranges; i++) {
		const struct trace_range *r = &t->ranges[i];
		double ms = (r->end_ns - r->start_ns) / 1e6;
		int st = stage_of(r);
		if (st >= 0) {
			stage_host[st] += ms;
			stage_calls[st]++;
		}
		if (r->cat == TRACE_CPU_OP)
			names[n_names++] = (struct name_layer){ r->name, NULL };
		if (r->cat != TRACE_CUDA_RUNTIME)
			continue;
		long op = r->external_id ? id_find(at->ext, at->n_ext, r->external_id) : -1;
		if (op >= 0) {
			rt_in[op] += ms;
		} else {
			int s = attrib_stage_at(at, r->start_ns);
			if (s >= 0)
				stage_rt[s] += ms;
		}
		sp[SP_RUNTIME].cpu_self += ms;
		sp[SP_RUNTIME].cpu_total += ms;
		sp[SP_RUNTIME].calls++;
	}
	/* the distinct names, each with its layer */
	gp_qsort(names, n_names, sizeof(*names), name_layer_cmp);
	size_t u = 0;
	for (size_t i = 0; i < n_names; i++)
		if (!u || names[u - 1].name != names[i].name)
			names[u++] = names[i];
	n_names = u;
	sorted = malloc((t->n_layers ? t->n_layers : 1) * sizeof(*sorted));
	acc = calloc(n_names ? n_names : 1, sizeof(*acc));
	if (!sorted || !acc) {
		rc = gp_error(GP_ENOMEM, "analysis: out of memory");
		goto out;
	}
	for (size_t i = 0; i < t->n_layers; i++)
		sorted[i] = &t->layers[i];
	gp_qsort(sorted, t->n_layers, sizeof(*sorted), layer_ptr_cmp);
	for (size_t i = 0; i < n_names; i++)
		names[i].layer = layer_of(sorted, t->n_layers, names[i].name);

	for (size_t i = 0; i < t->n_ranges; i++) {
		const struct trace_range *r = &t->ranges[i];
		if (r->cat != TRACE_CPU_OP)
			continue;
		struct name_layer key = { r->name, NULL };
		const struct name_layer *e = bsearch(&key, names, n_names, sizeof(*names),
						     name_layer_cmp);
		double ms = (r->end_ns - r->start_ns) / 1e6;
		int st = attrib_stage_at(at, r->start_ns);
		if (st >= 0)
			stage_ops[st] += ms;
		struct opacc *o = &acc[e - names];
		o->cpu_self += ms - rt_in[i];
		o->cpu_total += ms;
		o->calls++;
	}
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		double ms = (g->end_ns - g->start_ns) / 1e6;
		long op = dstage[i] == DSTAGE_COMM ? -1 : attrib_op(at, t, g);
		struct opacc *o;
		if (op >= 0) {
			struct name_layer key = { t->ranges[op].name, NULL };
			const struct name_layer *e = bsearch(&key, names, n_names, sizeof(*names),
							     name_layer_cmp);
			o = &acc[e - names];
			const char *type = op_type_label(e->layer, e->name);
			const char *part = type == op_kinds[0].bwd && g->cat == TRACE_KERNEL
						   ? conv_bwd_part(g->name ? g->name : "")
						   : NULL;
			if (part) {
				struct opacc *p = &sp[part == ROW_DGRAD ? SP_DGRAD : SP_WGRAD];
				p->gpu += ms;
				p->gpu_calls++;
			}
		} else {
			o = &sp[special_of_dstage[dstage[i]]];
		}
		o->gpu += ms;
		o->gpu_calls++;
	}
	/* host time of the forward annotation outside layers is the loss's; of the data
	 * annotation, the batch's upload (only for a trace that has layers); rounding
	 * must not make it negative */
	for (int st = 0; st < STAGE_COUNT; st++) {
		if (stage_ops[st] > stage_host[st])
			stage_ops[st] = stage_host[st];
		if (stage_rt[st] > stage_host[st] - stage_ops[st])
			stage_rt[st] = stage_host[st] - stage_ops[st];
	}
	static const int host_rows[][2] = { { STAGE_FORWARD, SP_LOSS }, { STAGE_DATA, SP_COPY } };
	for (int k = 0; k < 2 && t->n_layers; k++) {
		int st = host_rows[k][0];
		struct opacc *o = &sp[host_rows[k][1]];
		if (!stage_calls[st])
			continue;
		o->cpu_total += stage_host[st] - stage_ops[st];
		o->cpu_self += stage_host[st] - stage_ops[st] - stage_rt[st];
		o->calls += stage_calls[st];
	}

	for (size_t i = 0; i < n_names && rc == 0; i++) {
		const struct opacc *o = &acc[i];
		const struct trace_layer *ly = names[i].layer;
		if (ly)
			a->have_shapes |= ly->shapes != NULL;
		rc = oprec_add(&l, (struct oprec){ op_type_label(ly, names[i].name), names[i].name,
						   ly ? ly->shapes : NULL, o->cpu_self,
						   o->cpu_total, o->gpu, o->calls, o->gpu_calls });
	}
	for (int k = 0; k < SP_COUNT && rc == 0; k++)
		if (sp[k].calls || sp[k].gpu_calls)
			rc = oprec_add(&l, (struct oprec){ special_rows[k].type,
							   special_rows[k].layer, NULL,
							   sp[k].cpu_self, sp[k].cpu_total,
							   sp[k].gpu, sp[k].calls,
							   sp[k].gpu_calls });
	if (rc == 0)
		rc = oprows_merge(&l, 0, &a->op_types, &a->n_op_types);
	if (rc == 0)
		rc = oprows_merge(&l, 1, &a->op_layers, &a->n_op_layers);
out:
	free(l.v);
	free(rt_in);
	free(names);
	free(acc);
	free(sorted);
	return rc;
}

static int oprow_cmp(const struct analysis_oprow *x, const struct analysis_oprow *y, int gpu)
{
	double p = gpu ? x->gpu_ms : x->cpu_total_ms, q = gpu ? y->gpu_ms : y->cpu_total_ms;
	if (p != q)
		return p > q ? -1 : 1;
	p = gpu ? x->cpu_total_ms : x->gpu_ms;
	q = gpu ? y->cpu_total_ms : y->gpu_ms;
	if (p != q)
		return p > q ? -1 : 1;
	return strcmp(x->name, y->name);
}
static int oprow_by_gpu(const void *a, const void *b) { return oprow_cmp(a, b, 1); }
static int oprow_by_cpu(const void *a, const void *b) { return oprow_cmp(a, b, 0); }

const char *analysis_sort_name_at(int i)
{
	static const char *const names[] = { "gpu", "cpu" };
	return i >= 0 && i < 2 ? names[i] : NULL;
}

int analysis_sort_check(const char *s)
{
	if (!s || !strcmp(s, "gpu") || !strcmp(s, "cpu"))
		return 0;
	return gp_error(GP_EINVAL, "--sort must be gpu or cpu (got '%s')", s);
}

void analysis_sort_ops(struct analysis *a, int by_gpu)
{
	a->sort_by_gpu = by_gpu;
	if (a->op_types)
		gp_qsort(a->op_types, (size_t)a->n_op_types, sizeof(*a->op_types),
		      by_gpu ? oprow_by_gpu : oprow_by_cpu);
	if (a->op_layers)
		gp_qsort(a->op_layers, (size_t)a->n_op_layers, sizeof(*a->op_layers),
		      by_gpu ? oprow_by_gpu : oprow_by_cpu);
}

/* --- launch configurations and occupancy ------------------------------------------------ */

/* Per-SM limits by compute capability (CUDA's occupancy tables): resident warps and
 * blocks, 32-bit registers, shared memory in KiB. */
static const struct sm_limit {
	int cc, warps, blocks, regs, smem_kib;
} sm_limits[] = {
	{ 70, 64, 32, 65536, 96 }, { 72, 64, 32, 65536, 96 }, { 75, 32, 16, 65536, 64 },
	{ 80, 64, 32, 65536, 164 }, { 86, 48, 16, 65536, 100 }, { 87, 48, 16, 65536, 164 },
	{ 89, 48, 24, 65536, 100 }, { 90, 64, 32, 65536, 228 }, { 100, 64, 32, 65536, 228 },
	{ 103, 64, 32, 65536, 228 }, { 120, 48, 32, 65536, 100 },
};

void analysis_occupancy(int cc_major, int cc_minor, int sm_count, const int grid[3],
			const int block[3], int registers, int shared_bytes,
			double *theoretical, double *achieved)
{
	*theoretical = *achieved = -1;
	const struct sm_limit *lim = NULL;
	int cc = 10 * cc_major + cc_minor;
	for (size_t i = 0; i < sizeof(sm_limits) / sizeof(sm_limits[0]); i++)
		if (sm_limits[i].cc == cc)
			lim = &sm_limits[i];
	long long threads = (long long)block[0] * block[1] * block[2];
	if (!lim || registers <= 0 || threads <= 0 || threads > 1024 || shared_bytes < 0)
		return;
	int warps = (int)((threads + 31) / 32);
	/* registers are allocated per warp in units of 256 */
	int regs_per_warp = (registers * 32 + 255) / 256 * 256;
	int by_warps = lim->warps / warps;
	int by_regs = lim->regs / regs_per_warp / warps;
	int by_smem = lim->blocks;
	if (shared_bytes > 0) /* each block also reserves 1 KiB for the system */
		by_smem = (int)((long long)lim->smem_kib * 1024 / (shared_bytes + 1024));
	int blocks = lim->blocks;
	if (by_warps < blocks)
		blocks = by_warps;
	if (by_regs < blocks)
		blocks = by_regs;
	if (by_smem < blocks)
		blocks = by_smem;
	*theoretical = (double)blocks * warps / lim->warps;
	if (sm_count <= 0)
		return;
	/* as Kineto estimates it: no more blocks per SM than the grid gives each */
	double grid_per_sm = (double)grid[0] * grid[1] * grid[2] / sm_count;
	double resident = grid_per_sm < blocks ? grid_per_sm : blocks;
	*achieved = resident * warps / lim->warps;
}

static int kconf_same(const struct trace_gpu *x, const struct trace_gpu *y)
{
	return !memcmp(x->grid, y->grid, sizeof(x->grid)) &&
	       !memcmp(x->block, y->block, sizeof(x->block)) && x->registers == y->registers &&
	       x->shared_bytes == y->shared_bytes;
}

struct kidx {
	const char *label;
	const struct trace_gpu *g;
};

static int kidx_cmp(const void *a, const void *b)
{
	const struct kidx *x = a, *y = b;
	int c = strcmp(x->label, y->label);
	if (c)
		return c;
	c = memcmp(x->g->grid, y->g->grid, sizeof(x->g->grid));
	if (c)
		return c;
	c = memcmp(x->g->block, y->g->block, sizeof(x->g->block));
	if (c)
		return c;
	if (x->g->registers != y->g->registers)
		return x->g->registers < y->g->registers ? -1 : 1;
	return (x->g->shared_bytes > y->g->shared_bytes) - (x->g->shared_bytes < y->g->shared_bytes);
}

static int kconf_by_total(const void *a, const void *b)
{
	const struct analysis_kconf *x = a, *y = b;
	if (x->total_ms != y->total_ms)
		return x->total_ms > y->total_ms ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The kernels by name and launch configuration, the ANALYSIS_TOP longest in total. */
static int kernel_configs(const struct trace *t, struct analysis *a)
{
	size_t n = 0;
	struct kidx *k = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*k));
	char (*labels)[96] = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*labels));
	struct analysis_kconf *all = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*all));
	if (!k || !labels || !all) {
		free(k);
		free(labels);
		free(all);
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	}
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (g->cat != TRACE_KERNEL)
			continue;
		const char *lb = kernel_label(g->name ? g->name : "?", labels[n], sizeof(labels[n]));
		if (lb != labels[n])
			snprintf(labels[n], sizeof(labels[n]), "%s", lb);
		k[n] = (struct kidx){ labels[n], g };
		n++;
	}
	gp_qsort(k, n, sizeof(*k), kidx_cmp);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		const struct trace_gpu *g = k[i].g;
		if (!m || strcmp(all[m - 1].name, k[i].label) || !kconf_same(k[i - 1].g, g)) {
			struct analysis_kconf *c = &all[m++];
			memset(c, 0, sizeof(*c));
			snprintf(c->name, sizeof(c->name), "%s", k[i].label);
			memcpy(c->grid, g->grid, sizeof(c->grid));
			memcpy(c->block, g->block, sizeof(c->block));
			c->registers = g->registers;
			c->shared_bytes = g->shared_bytes;
			analysis_occupancy(a->meta.cc_major, a->meta.cc_minor, a->meta.sm_count,
					   g->grid, g->block, g->registers, g->shared_bytes,
					   &c->theoretical_occupancy, &c->achieved_occupancy);
		}
		all[m - 1].calls++;
		all[m - 1].total_ms += (g->end_ns - g->start_ns) / 1e6;
	}
	gp_qsort(all, m, sizeof(*all), kconf_by_total);
	a->n_kconf = m < ANALYSIS_TOP ? (int)m : ANALYSIS_TOP;
	for (int i = 0; i < a->n_kconf; i++) {
		a->kconf[i] = all[i];
		a->kconf[i].mean_us = all[i].total_ms * 1e3 / all[i].calls;
	}
	free(k);
	free(labels);
	free(all);
	return 0;
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
	gp_qsort(d, n, sizeof(*d), dbl_cmp);
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
	rc = op_tables(t, &at, dstage, a);
	if (rc < 0)
		goto fail;
	rc = kernel_configs(t, a);
	if (rc < 0)
		goto fail;
	rc = analysis_hta_run(t, a);
	if (rc < 0)
		goto fail;
	for (int i = 0; i < a->n_steps; i++)
		a->steps_total_ms += a->steps[i].dur_ms;
	analysis_sort_ops(a, a->n_kernels > 0);
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
	free(a->op_types);
	free(a->op_layers);
	a->op_types = a->op_layers = NULL;
	a->n_op_types = a->n_op_layers = 0;
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

static double pct(double part, double whole)
{
	return whole > 0 ? 100 * part / whole : 0;
}

/* An op table as torch.profiler prints one; rows past max are left out. */
static void print_oprows(FILE *f, const struct analysis *a, const char *title,
			 const struct analysis_oprow *r, int n, int max, int shapes)
{
	fprintf(f, "\n%s (sorted by %s time; %% of the step time)\n  %-34s %6s %10s %10s %6s %10s %6s %9s %9s%s\n",
		title, a->sort_by_gpu ? "GPU" : "CPU total", "name", "calls", "self CPU", "CPU total",
		"CPU%", "GPU ms", "GPU%", "CPU mean", "GPU mean", shapes ? "  input shapes" : "");
	for (int i = 0; i < n && i < max; i++) {
		long c = r[i].calls ? r[i].calls : r[i].gpu_calls;
		if (r[i].calls)
			fprintf(f, "  %-34.34s %6ld %10.3f %10.3f %5.1f%%", r[i].name, r[i].calls,
				r[i].cpu_self_ms, r[i].cpu_total_ms,
				pct(r[i].cpu_total_ms, a->steps_total_ms));
		else
			fprintf(f, "  %-34.34s %6s %10s %10s %6s", r[i].name, "-", "-", "-", "-");
		fprintf(f, " %10.3f %5.1f%% %9.4f %9.4f", r[i].gpu_ms, pct(r[i].gpu_ms, a->steps_total_ms),
			r[i].calls ? r[i].cpu_total_ms / r[i].calls : 0, c ? r[i].gpu_ms / c : 0);
		if (shapes)
			fprintf(f, "  %s", r[i].shapes);
		fputc('\n', f);
	}
	if (n > max)
		fprintf(f, "  ... %d more in analysis.json\n", n - max);
}

static void occ_text(double v, char *buf, size_t cap)
{
	if (v < 0)
		snprintf(buf, cap, "n/a");
	else
		snprintf(buf, cap, "%.0f%%", 100 * v);
}

static void print_kconf(FILE *f, const struct analysis *a, int md)
{
	if (md)
		fprintf(f, "\n## Top kernels by launch configuration\n\nOccupancy is estimated from "
			   "the registers and shared memory CUPTI records and the compute "
			   "capability's limits (est.: no more blocks per SM than the grid gives "
			   "each); n/a where either is unknown.\n\n| kernel | calls | total ms | mean us "
			   "| grid | block | regs/thread | shared B | theoretical occ. | est. achieved occ. |\n"
			   "|---|---:|---:|---:|---|---|---:|---:|---:|---:|\n");
	else
		fprintf(f, "\ntop kernels by launch configuration (occupancy estimated)\n  %-36s %6s %10s %9s %15s %13s %5s %8s %6s %6s\n",
			"kernel", "calls", "total ms", "mean us", "grid", "block", "regs", "shared",
			"theor", "est.");
	for (int i = 0; i < a->n_kconf; i++) {
		const struct analysis_kconf *k = &a->kconf[i];
		char grid[48], block[48], th[16], ach[16];
		snprintf(grid, sizeof(grid), "%dx%dx%d", k->grid[0], k->grid[1], k->grid[2]);
		snprintf(block, sizeof(block), "%dx%dx%d", k->block[0], k->block[1], k->block[2]);
		occ_text(k->theoretical_occupancy, th, sizeof(th));
		occ_text(k->achieved_occupancy, ach, sizeof(ach));
		if (md)
			fprintf(f, "| `%s` | %ld | %.3f | %.1f | %s | %s | %d | %d | %s | %s |\n", k->name,
				k->calls, k->total_ms, k->mean_us, grid, block, k->registers,
				k->shared_bytes, th, ach);
		else
			fprintf(f, "  %-36.36s %6ld %10.3f %9.1f %15s %13s %5d %8d %6s %6s\n", k->name,
				k->calls, k->total_ms, k->mean_us, grid, block, k->registers,
				k->shared_bytes, th, ach);
	}
}

static void md_oprows(FILE *f, const struct analysis *a, const char *title,
		      const struct analysis_oprow *r, int n, int max, int shapes)
{
	fprintf(f, "\n## %s\n\nSorted by %s time; %% of the step time summed over the steps. Self "
		   "CPU leaves out the CUDA runtime calls inside (their own row).\n\n| name | calls "
		   "| self CPU ms | CPU total ms | CPU %% | GPU ms | GPU %% | CPU mean ms | GPU mean "
		   "ms |%s\n|---|---:|---:|---:|---:|---:|---:|---:|---:|%s\n",
		title, a->sort_by_gpu ? "GPU" : "CPU total", shapes ? " input shapes |" : "",
		shapes ? "---|" : "");
	for (int i = 0; i < n && i < max; i++) {
		long c = r[i].calls ? r[i].calls : r[i].gpu_calls;
		if (r[i].calls)
			fprintf(f, "| `%s` | %ld | %.3f | %.3f | %.1f | ", r[i].name, r[i].calls,
				r[i].cpu_self_ms, r[i].cpu_total_ms,
				pct(r[i].cpu_total_ms, a->steps_total_ms));
		else
			fprintf(f, "| `%s` | - | - | - | - | ", r[i].name);
		fprintf(f, "%.3f | %.1f | %.4f | %.4f |", r[i].gpu_ms,
			pct(r[i].gpu_ms, a->steps_total_ms),
			r[i].calls ? r[i].cpu_total_ms / r[i].calls : 0, c ? r[i].gpu_ms / c : 0);
		if (shapes)
			fprintf(f, " %s |", r[i].shapes[0] ? r[i].shapes : "");
		fputc('\n', f);
	}
	if (n > max)
		fprintf(f, "\n%d more rows in analysis.json.\n", n - max);
}

static json_t *oprows_json(const struct analysis *a, const struct analysis_oprow *r, int n)
{
	json_t *arr = json_array();
	for (int i = 0; arr && i < n; i++) {
		json_t *o = json_pack("{s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "name", r[i].name,
				      "calls", (json_int_t)r[i].calls, "gpu_calls",
				      (json_int_t)r[i].gpu_calls, "self_cpu_ms",
				      result_real(r[i].cpu_self_ms), "cpu_total_ms",
				      result_real(r[i].cpu_total_ms), "gpu_ms", result_real(r[i].gpu_ms),
				      "cpu_pct_of_step", result_real(pct(r[i].cpu_total_ms, a->steps_total_ms)),
				      "gpu_pct_of_step", result_real(pct(r[i].gpu_ms, a->steps_total_ms)));
		if (o && r[i].shapes[0])
			json_object_set_new(o, "input_shapes", json_string(r[i].shapes));
		json_array_append_new(arr, o);
	}
	return arr;
}

static json_t *kconf_json(const struct analysis *a)
{
	json_t *arr = json_array();
	for (int i = 0; arr && i < a->n_kconf; i++) {
		const struct analysis_kconf *k = &a->kconf[i];
		json_array_append_new(
			arr, json_pack("{s:s, s:I, s:o, s:o, s:[i,i,i], s:[i,i,i], s:i, s:i, s:o, s:o}",
				       "name", k->name, "calls", (json_int_t)k->calls, "total_ms",
				       result_real(k->total_ms), "mean_us", result_real(k->mean_us),
				       "grid", k->grid[0], k->grid[1], k->grid[2], "block", k->block[0],
				       k->block[1], k->block[2], "registers_per_thread", k->registers,
				       "shared_memory_bytes", k->shared_bytes, "theoretical_occupancy",
				       k->theoretical_occupancy < 0 ? json_null()
								    : result_real(k->theoretical_occupancy),
				       "est_achieved_occupancy",
				       k->achieved_occupancy < 0 ? json_null()
								 : result_real(k->achieved_occupancy)));
	}
	return arr;
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
	print_oprows(f, a, "ops by type", a->op_types, a->n_op_types, 40, 0);
	print_oprows(f, a, "ops by layer", a->op_layers, a->n_op_layers, ANALYSIS_TOP,
		     a->have_shapes);
	if (a->n_kconf)
		print_kconf(f, a, 0);
	analysis_hta_print(&a->hta, f, 0);
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
	if (j) {
		json_object_set_new(j, "op_sort", json_string(a->sort_by_gpu ? "gpu" : "cpu"));
		json_object_set_new(j, "op_types", oprows_json(a, a->op_types, a->n_op_types));
		json_object_set_new(j, "op_layers", oprows_json(a, a->op_layers, a->n_op_layers));
		json_object_set_new(j, "kernel_configs", kconf_json(a));
		json_object_set_new(j, "hta", analysis_hta_json(&a->hta));
	}
	if (j && a->have_mem_tl)
		json_object_set_new(j, "memory_timeline", mem_timeline_to_json(&a->mem_tl));
	return j;
}

/* The report's per-step rows (and the mean): the step's parts (device 0) or its
 * device stages (1), then its host stages. */
static void md_step_rows(FILE *f, const struct analysis *a, int device)
{
	for (int i = 0; i <= a->n_steps; i++) {
		const struct analysis_step *s = i < a->n_steps ? &a->steps[i] : &a->mean;
		if (i < a->n_steps)
			fprintf(f, "| %d | %.3f |", s->step, s->dur_ms);
		else
			fprintf(f, "| mean | %.3f |", s->dur_ms);
		for (int p = 0; p < (device ? DSTAGE_COUNT : PART_COUNT); p++)
			fprintf(f, " %.3f |", device ? s->device_ms[p] : s->part_ms[p]);
		for (int st = 0; st < STAGE_COUNT; st++)
			fprintf(f, " %.3f |", s->stage_ms[st]);
		fputc('\n', f);
	}
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
	md_step_rows(f, a, 0);
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
	md_step_rows(f, a, 1);
	md_ops(f, "Top ops by CPU time", a->top_cpu, a->n_top_cpu, 0);
	md_ops(f, "Top layers by GPU time", a->top_gpu, a->n_top_gpu, 0);
	md_ops(f, "Top kernels by GPU time", a->top_kernels, a->n_top_kernels, 0);
	md_oprows(f, a, "Ops by type", a->op_types, a->n_op_types, 40, 0);
	md_oprows(f, a, "Ops by layer", a->op_layers, a->n_op_layers, 30, a->have_shapes);
	if (a->n_kconf)
		print_kconf(f, a, 1);
	analysis_hta_print(&a->hta, f, 1);
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
