/* Merging a CUPTI tracer's staged records into the host trace (trace.h's
 * trace_merge_staged): kept apart from the tracer so that the linking, which decides
 * which stage every kernel counts towards, runs and is tested without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"
#include "core/trace.h"

static int link_cmp(const void *a, const void *b)
{
	const struct trace_corr_link *x = a, *y = b;
	return x->correlation < y->correlation ? -1 : x->correlation > y->correlation;
}

static uint64_t link_find(const struct trace_corr_link *l, size_t n, uint64_t corr)
{
	struct trace_corr_link key = { corr, 0 };
	const struct trace_corr_link *e = corr ? gp_bsearch(&key, l, n, sizeof(*l), link_cmp) : NULL;
	return e ? e->external_id : 0;
}

struct op_ext {
	uint64_t ext;
	size_t idx;
};

static int ext_cmp(const void *a, const void *b)
{
	const struct op_ext *x = a, *y = b;
	return x->ext < y->ext ? -1 : x->ext > y->ext;
}

static int i64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* The innermost cpu_op open at ts among ops sorted by start (they do not nest in
 * gpuperf: one per layer call), or 0. */
static uint64_t op_at(const struct trace *t, const size_t *ops, size_t n, int64_t ts)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->ranges[ops[mid]].start_ns <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return 0;
	const struct trace_range *r = &t->ranges[ops[lo - 1]];
	return r->end_ns >= ts ? r->external_id : 0;
}

/* The cpu_op with external id ext among ops sorted by external id, or NULL. */
static const struct trace_range *op_by_ext(const struct trace *t, const struct op_ext *by_ext,
					   size_t n, uint64_t ext)
{
	struct op_ext key = { ext, 0 };
	const struct op_ext *e = gp_bsearch(&key, by_ext, n, sizeof(*by_ext), ext_cmp);
	return e ? &t->ranges[e->idx] : NULL;
}

/* The shift that puts the linked calls inside their ranges (see trace.h). */
static int64_t links_shift(const struct trace *t, const struct trace *s, const struct op_ext *by_ext,
			   size_t n_ops, const struct trace_corr_link *links, size_t n_links)
{
	int64_t lo = INT64_MIN, hi = INT64_MAX, *need = malloc((s->n_ranges + 1) * sizeof(*need));
	size_t n = 0;
	if (!need)
		return 0; /* no correction is what the trace had before: keep it */
	for (size_t i = 0; i < s->n_ranges; i++) {
		const struct trace_range *r = &s->ranges[i];
		uint64_t ext = link_find(links, n_links, r->correlation);
		const struct trace_range *op = ext ? op_by_ext(t, by_ext, n_ops, ext) : NULL;
		if (!op || !op->end_ns)
			continue;
		int64_t a = op->start_ns - r->start_ns, b = op->end_ns - r->end_ns;
		if (b < a) /* the call outlasts its range (clock jitter): its start decides */
			b = a;
		lo = a > lo ? a : lo;
		hi = b < hi ? b : hi;
		need[n++] = 0 < a ? a : 0 > b ? b : 0;
	}
	int64_t shift = 0;
	if (n && lo <= hi) {
		shift = 0 < lo ? lo : 0 > hi ? hi : 0;
	} else if (n) {
		gp_qsort(need, n, sizeof(*need), i64_cmp);
		shift = need[n / 2];
	}
	free(need);
	return shift;
}

int trace_merge_staged(struct trace *t, const struct trace *staged, struct trace_corr_link *links,
		       size_t n_links, int64_t *shift_ns)
{
	size_t nr = t->n_ranges ? t->n_ranges : 1;
	size_t *ops = malloc(nr * sizeof(*ops)), n_ops = 0;
	struct op_ext *by_ext = malloc(nr * sizeof(*by_ext));
	int rc = 0;
	if (shift_ns)
		*shift_ns = 0;
	if (!ops || !by_ext) {
		free(ops);
		free(by_ext);
		return gp_error(GP_ENOMEM, "tracer: out of memory");
	}
	/* host ranges are appended in start order, so the cpu_op index is sorted */
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].cat == TRACE_CPU_OP) {
			by_ext[n_ops] = (struct op_ext){ t->ranges[i].external_id, i };
			ops[n_ops++] = i;
		}
	gp_qsort(by_ext, n_ops, sizeof(*by_ext), ext_cmp);
	if (n_links)
		gp_qsort(links, n_links, sizeof(*links), link_cmp);
	int64_t shift = n_links ? links_shift(t, staged, by_ext, n_ops, links, n_links) : 0;
	for (size_t i = 0; i < staged->n_ranges && rc == 0; i++) {
		struct trace_range r = staged->ranges[i];
		r.start_ns += shift;
		r.end_ns += shift;
		uint64_t ext = link_find(links, n_links, r.correlation);
		r.external_id = ext ? ext : op_at(t, ops, n_ops, r.start_ns);
		rc = trace_add_range(t, &r);
	}
	for (size_t i = 0; i < staged->n_gpu && rc == 0; i++) {
		struct trace_gpu g = staged->gpu[i];
		g.start_ns += shift;
		g.end_ns += shift;
		rc = trace_add_gpu(t, &g);
	}
	free(ops);
	free(by_ext);
	if (shift_ns)
		*shift_ns = shift;
	return rc;
}
