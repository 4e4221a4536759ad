/* Op tables as torch.profiler's key_averages().table() prints them: by op type
 * and by layer, host self/total time and the GPU time each launched. */
#include "report/analysis_priv.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"

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
int op_tables(const struct trace *t, const struct attrib *at, const signed char *dstage,
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
	struct loop_tids lt;
	loop_tids_find(t, &lt);
	for (size_t i = 0; i < t->n_ranges; i++) {
		const struct trace_range *r = &t->ranges[i];
		if (!range_on_loop(&lt, r))
			continue;
		double ms = (r->end_ns - r->start_ns) / 1e6;
		int st = stage_of(r);
		if (st >= 0) {
			stage_host[st] += ms;
			stage_calls[st]++;
		}
		if (r->cat == TRACE_CPU_OP)
			names[n_names++] = (struct name_layer){ r->name, NULL };
		if (!trace_cat_is_api(r->cat))
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
		const struct name_layer *e = gp_bsearch(&key, names, n_names, sizeof(*names),
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
			const struct name_layer *e = gp_bsearch(&key, names, n_names, sizeof(*names),
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
