/* The step breakdown: each instant of a step to one part (kernel, memcpy, ...),
 * to the host stage annotations, and to one device stage, so that each set of
 * figures sums to the step. */
#include "report/analysis_priv.h"

#include <stdlib.h>
#include <string.h>

#include "core/sort.h"
#include "core/error.h"

/* The order that gives an instant two device stages share to one of them (rank 0
 * first), and its inverse. */
static const int dstage_rank[DSTAGE_IDLE] = { 4, 0, 1, 2, 3, 5 };
static const int rank_dstage[DSTAGE_IDLE] = { DSTAGE_FORWARD, DSTAGE_BACKWARD, DSTAGE_OPTIMIZER,
					      DSTAGE_COMM, DSTAGE_DATA, DSTAGE_OTHER };

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
	if (trace_cat_is_api(r->cat))
		return PART_RUNTIME;
	if (r->cat == TRACE_USER_ANNOTATION && !strcmp(r->name, "data"))
		return PART_DATA;
	/* torch's DataLoader iterator (and the copy of it gpuperf writes for TensorBoard) */
	if ((r->cat == TRACE_USER_ANNOTATION || r->cat == TRACE_CPU_OP) &&
	    !strncmp(r->name, "enumerate(DataLoader)#", 22))
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
	struct loop_tids lt;
	loop_tids_find(t, &lt);
	for (size_t i = 0; i < t->n_ranges && rc == 0; i++) {
		const struct trace_range *r = &t->ranges[i];
		if (!range_on_loop(&lt, r))
			continue;
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

int steps_analyse(const struct trace *t, const signed char *dstage, struct analysis *a)
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
