/* Who launched what: each GPU activity to the runtime call that launched it, the
 * layer range around that call and the stage annotation around it, and from
 * there the device stage the activity counts towards. */
#include "report/analysis_priv.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"

static int id_cmp(const void *a, const void *b)
{
	const struct id_entry *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

long id_find(const struct id_entry *tab, size_t n, uint64_t id)
{
	struct id_entry key = { id, 0 };
	const struct id_entry *e = gp_bsearch(&key, tab, n, sizeof(*tab), id_cmp);
	return e ? (long)e->idx : -1;
}

static int stage_span_cmp(const void *a, const void *b)
{
	const struct stage_span *x = a, *y = b;
	return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}


void attrib_free(struct attrib *at)
{
	free(at->corr);
	free(at->ext);
	free(at->stages);
	memset(at, 0, sizeof(*at));
}

int attrib_build(const struct trace *t, struct attrib *at)
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
		if (trace_cat_is_api(r->cat) && r->correlation)
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
int attrib_stage_at(const struct attrib *at, int64_t ts)
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
long attrib_launch(const struct attrib *at, const struct trace_gpu *g)
{
	return g->correlation ? id_find(at->corr, at->n_corr, g->correlation) : -1;
}

/* The layer range (cpu_op) in which g was launched, or -1. */
long attrib_op(const struct attrib *at, const struct trace *t, const struct trace_gpu *g)
{
	long r = attrib_launch(at, g);
	uint64_t ext = r >= 0 ? t->ranges[r].external_id : g->external_id;
	return ext ? id_find(at->ext, at->n_ext, ext) : -1;
}

/* The phase of a layer range by its name: "<layer>.backward" (torch.profiler's
 * "aten::convolution_backward", "...ConvolutionBackward0" too), the optimizer's
 * "Optimizer.step#...", else a forward layer. */
int op_dstage(const char *name)
{
	if (strstr(name, "ackward"))
		return DSTAGE_BACKWARD;
	if (!strncmp(name, "Optimizer.", 10) || !strncmp(name, "optimizer", 9))
		return DSTAGE_OPTIMIZER;
	return DSTAGE_FORWARD;
}

const int stage_dstage[STAGE_COUNT] = { DSTAGE_DATA, DSTAGE_FORWARD, DSTAGE_BACKWARD,
					       DSTAGE_OPTIMIZER };

/* The device stage of one GPU activity: communication by name, else its layer's
 * phase, else the stage annotation its launch ran in; copies and memsets that no
 * layer launched are data/copy, other work that nothing claims "other". */
int gpu_dstage(const struct attrib *at, const struct trace *t, const struct trace_gpu *g)
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

int stage_of(const struct trace_range *r)
{
	if (r->cat != TRACE_USER_ANNOTATION)
		return -1;
	for (int st = 0; st < STAGE_COUNT; st++)
		if (!strcmp(r->name, analysis_stage_names[st]))
			return st;
	return -1;
}

void loop_tids_find(const struct trace *t, struct loop_tids *lt)
{
	lt->n = 0;
	lt->all = 0;
	lt->tid[lt->n++] = t->tid;
	for (size_t i = 0; i < t->n_ranges && !lt->all; i++) {
		const struct trace_range *r = &t->ranges[i];
		if (trace_cat_is_api(r->cat) || range_on_loop(lt, r))
			continue;
		if (lt->n == LOOP_TIDS_MAX)
			lt->all = 1;
		else
			lt->tid[lt->n++] = r->tid;
	}
}

int range_on_loop(const struct loop_tids *lt, const struct trace_range *r)
{
	if (lt->all || r->tid == 0)
		return 1;
	for (int i = 0; i < lt->n; i++)
		if (lt->tid[i] == r->tid)
			return 1;
	return 0;
}
