/* Holistic Trace Analysis' temporal breakdown, kernel type split, idle time by cause
 * and launch statistics, computed as HTA 0.5 computes them (hta/analyzers/
 * breakdown_analysis.py, cuda_kernel_analysis.py), so that the report carries them
 * without Python and a test holds them to HTA's own numbers. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"
#include "report/analysis.h"
#include "report/result.h"

/* HTA's threshold under which a gap between kernels on a stream is launch overhead
 * ("kernel wait"): its default of 30, in the trace's microseconds. */
#define KERNEL_WAIT_US 30.0

enum ktype { K_COMPUTE = 0, K_MEMORY, K_COMM, K_NTYPES };

/* HTA's regular expressions: communication ^nccl.*Kernel; memory ^Memcpy, ^Memset,
 * ^dma; compute whatever matches none of ^nccl.*Kernel, .*Memcpy, ^Memset, .*Sync
 * (and is not memory or communication); the rest "other". */
static int ktype_of(const char *name, int *compute)
{
	int nccl = !strncmp(name, "nccl", 4) && strstr(name, "Kernel");
	*compute = !(nccl || strstr(name, "Memcpy") || !strncmp(name, "Memset", 6) ||
		     strstr(name, "Sync"));
	if (nccl)
		return K_COMM;
	if (!strncmp(name, "Memcpy", 6) || !strncmp(name, "Memset", 6) || !strncmp(name, "dma", 3))
		return K_MEMORY;
	return *compute ? K_COMPUTE : -1;
}

struct span {
	int64_t lo, hi;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return (x->lo > y->lo) - (x->lo < y->lo);
}

static int64_t span_union(struct span *v, size_t n)
{
	gp_qsort(v, n, sizeof(*v), span_cmp);
	int64_t total = 0, lo = 0, hi = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && v[i].lo <= hi) {
			if (v[i].hi > hi)
				hi = v[i].hi;
			continue;
		}
		if (i)
			total += hi - lo;
		lo = v[i].lo;
		hi = v[i].hi;
	}
	return n ? total + hi - lo : 0;
}

struct corr_ix {
	uint64_t corr;
	size_t idx;
};

static int corr_ix_cmp(const void *a, const void *b)
{
	const struct corr_ix *x = a, *y = b;
	return (x->corr > y->corr) - (x->corr < y->corr);
}

/* A GPU activity HTA keeps, with its launch. */
struct kept {
	const struct trace_gpu *g;
	const struct trace_range *launch;
};

static int kept_by_stream(const void *a, const void *b)
{
	const struct kept *x = a, *y = b;
	if (x->g->device != y->g->device)
		return x->g->device < y->g->device ? -1 : 1;
	if (x->g->stream != y->g->stream)
		return x->g->stream < y->g->stream ? -1 : 1;
	return (x->g->start_ns > y->g->start_ns) - (x->g->start_ns < y->g->start_ns);
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int stream_by_busy(const void *a, const void *b)
{
	const struct analysis_stream *x = a, *y = b;
	if (x->busy_us != y->busy_us)
		return x->busy_us > y->busy_us ? -1 : 1;
	return x->stream - y->stream;
}

/* One stream's idle gaps by cause and its launch delays (k[0..n) on one stream, by
 * start). HTA: a gap is host wait when the next launch began after the previous
 * work ended, kernel wait when shorter than KERNEL_WAIT_US, else other; the launch
 * delay is the work's start less its runtime call's end, at least 0. */
static void stream_stats(const struct kept *k, size_t n, double *delays, struct analysis_stream *s)
{
	size_t nd = 0;
	double sum = 0, cpu = 0;
	s->device = k[0].g->device;
	s->stream = k[0].g->stream;
	s->kernels = (long)n;
	for (size_t i = 0; i < n; i++) {
		const struct trace_gpu *g = k[i].g;
		s->busy_us += (g->end_ns - g->start_ns) / 1e3;
		if (k[i].launch) {
			double d = (g->start_ns - k[i].launch->end_ns) / 1e3;
			delays[nd++] = d > 0 ? d : 0;
			sum += d > 0 ? d : 0;
			cpu += (k[i].launch->end_ns - k[i].launch->start_ns) / 1e3;
		}
		if (i == 0)
			continue;
		double gap = (g->start_ns - k[i - 1].g->end_ns) / 1e3;
		if (gap <= 0)
			continue;
		if (k[i].launch && k[i].launch->start_ns > k[i - 1].g->end_ns)
			s->idle_host_wait_us += gap;
		else if (gap < KERNEL_WAIT_US)
			s->idle_kernel_wait_us += gap;
		else
			s->idle_other_us += gap;
	}
	s->launches = (long)nd;
	if (nd) {
		gp_qsort(delays, nd, sizeof(*delays), dbl_cmp);
		s->launch_delay_mean_us = sum / nd;
		s->launch_delay_median_us = nd % 2 ? delays[nd / 2] : (delays[nd / 2 - 1] + delays[nd / 2]) / 2;
		s->launch_delay_max_us = delays[nd - 1];
		s->launch_cpu_mean_us = cpu / nd;
	}
}

int analysis_hta_run(const struct trace *t, struct analysis *a)
{
	struct analysis_hta *h = &a->hta;
	memset(h, 0, sizeof(*h));
	size_t ng = t->n_gpu ? t->n_gpu : 1;
	struct corr_ix *rt = malloc((t->n_ranges ? t->n_ranges : 1) * sizeof(*rt));
	struct kept *k = malloc(ng * sizeof(*k));
	struct span *all = malloc(ng * sizeof(*all)), *by[K_NTYPES], *cc = NULL;
	size_t n_rt = 0, n = 0, nb[K_NTYPES] = { 0 }, n_all = 0;
	double *delays = malloc(ng * sizeof(*delays));
	int rc = 0;
	for (int i = 0; i < K_NTYPES; i++)
		by[i] = malloc(ng * sizeof(*by[i]));
	cc = malloc(2 * ng * sizeof(*cc));
	if (!rt || !k || !all || !delays || !by[0] || !by[1] || !by[2] || !cc) {
		rc = gp_error(GP_ENOMEM, "analysis: out of memory");
		goto out;
	}
	/* HTA drops GPU work launched in the last step when there are two or more */
	int64_t last_start = INT64_MAX;
	if (t->n_steps >= 2) {
		last_start = t->steps[0].start_ns;
		for (size_t i = 1; i < t->n_steps; i++)
			if (t->steps[i].start_ns > last_start)
				last_start = t->steps[i].start_ns;
	}
	for (size_t i = 0; i < t->n_ranges; i++)
		if (trace_cat_is_api(t->ranges[i].cat) && t->ranges[i].correlation)
			rt[n_rt++] = (struct corr_ix){ t->ranges[i].correlation, i };
	gp_qsort(rt, n_rt, sizeof(*rt), corr_ix_cmp);
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		struct corr_ix key = { g->correlation, 0 };
		const struct corr_ix *e = g->correlation ? gp_bsearch(&key, rt, n_rt, sizeof(*rt),
								    corr_ix_cmp)
							 : NULL;
		if (!e || t->ranges[e->idx].start_ns >= last_start)
			continue;
		k[n++] = (struct kept){ g, &t->ranges[e->idx] };
		struct span s = { g->start_ns, g->end_ns };
		int compute, type = ktype_of(g->name ? g->name : "", &compute);
		all[n_all++] = s;
		if (type >= 0)
			by[type][nb[type]++] = s;
	}
	if (!n)
		goto out;
	h->valid = 1;
	int64_t lo = k[0].g->start_ns, hi = k[0].g->end_ns;
	for (size_t i = 1; i < n; i++) {
		lo = k[i].g->start_ns < lo ? k[i].g->start_ns : lo;
		hi = k[i].g->end_ns > hi ? k[i].g->end_ns : hi;
	}
	h->span_us = (hi - lo) / 1e3;
	double busy = span_union(all, n_all) / 1e3;
	h->idle_us = h->span_us - busy;
	double u[K_NTYPES];
	for (int i = 0; i < K_NTYPES; i++) {
		memcpy(cc, by[i], nb[i] * sizeof(*cc));
		u[i] = span_union(cc, nb[i]) / 1e3;
	}
	h->compute_us = u[K_COMPUTE];
	h->non_compute_us = busy - h->compute_us;
	h->memory_us = u[K_MEMORY];
	h->communication_us = u[K_COMM];
	/* overlap of compute with another type: |A| + |B| - |A u B| */
	for (int type = K_MEMORY; type < K_NTYPES; type++) {
		memcpy(cc, by[K_COMPUTE], nb[K_COMPUTE] * sizeof(*cc));
		memcpy(cc + nb[K_COMPUTE], by[type], nb[type] * sizeof(*cc));
		double both = span_union(cc, nb[K_COMPUTE] + nb[type]) / 1e3;
		double ov = u[K_COMPUTE] + u[type] - both;
		if (type == K_MEMORY)
			h->compute_memory_overlap_us = ov;
		else
			h->compute_comm_overlap_us = ov;
	}
	/* "other": busy time that is none of the three types */
	memcpy(cc, by[K_COMPUTE], nb[K_COMPUTE] * sizeof(*cc));
	memcpy(cc + nb[K_COMPUTE], by[K_MEMORY], nb[K_MEMORY] * sizeof(*cc));
	size_t m = nb[K_COMPUTE] + nb[K_MEMORY];
	memcpy(cc + m, by[K_COMM], nb[K_COMM] * sizeof(*cc));
	h->other_us = busy - span_union(cc, m + nb[K_COMM]) / 1e3;

	struct analysis_stream st[64];
	int n_st = 0;
	gp_qsort(k, n, sizeof(*k), kept_by_stream);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && k[j].g->device == k[i].g->device && k[j].g->stream == k[i].g->stream; j++)
			;
		struct analysis_stream s = { 0 };
		stream_stats(k + i, j - i, delays, &s);
		if (n_st < 64)
			st[n_st++] = s;
	}
	gp_qsort(st, (size_t)n_st, sizeof(*st), stream_by_busy);
	h->n_streams = n_st < ANALYSIS_MAX_STREAMS ? n_st : ANALYSIS_MAX_STREAMS;
	memcpy(h->streams, st, (size_t)h->n_streams * sizeof(*st));
out:
	free(rt);
	free(k);
	free(all);
	free(delays);
	free(cc);
	for (int i = 0; i < K_NTYPES; i++)
		free(by[i]);
	return rc;
}

json_t *analysis_hta_json(const struct analysis_hta *h)
{
	if (!h->valid)
		return json_null();
	json_t *streams = json_array();
	for (int i = 0; streams && i < h->n_streams; i++) {
		const struct analysis_stream *s = &h->streams[i];
		json_array_append_new(
			streams,
			json_pack("{s:i, s:i, s:I, s:o, s:{s:o, s:o, s:o}, s:{s:I, s:o, s:o, s:o, s:o}}",
				  "device", s->device, "stream", s->stream, "kernels",
				  (json_int_t)s->kernels, "busy_us", result_real(s->busy_us),
				  "idle_us", "host_wait", result_real(s->idle_host_wait_us),
				  "kernel_wait", result_real(s->idle_kernel_wait_us), "other",
				  result_real(s->idle_other_us), "launch", "count",
				  (json_int_t)s->launches, "delay_mean_us",
				  result_real(s->launch_delay_mean_us), "delay_median_us",
				  result_real(s->launch_delay_median_us), "delay_max_us",
				  result_real(s->launch_delay_max_us), "cpu_mean_us",
				  result_real(s->launch_cpu_mean_us)));
	}
	return json_pack("{s:{s:o, s:o, s:o, s:o}, s:{s:o, s:o, s:o, s:o, s:o, s:o}, s:o}",
			 "temporal_breakdown", "span_us", result_real(h->span_us), "idle_us",
			 result_real(h->idle_us), "compute_us", result_real(h->compute_us),
			 "non_compute_us", result_real(h->non_compute_us), "kernel_types",
			 "compute_us", result_real(h->compute_us), "memory_us",
			 result_real(h->memory_us), "communication_us",
			 result_real(h->communication_us), "other_us", result_real(h->other_us),
			 "compute_memory_overlap_us", result_real(h->compute_memory_overlap_us),
			 "compute_communication_overlap_us",
			 result_real(h->compute_comm_overlap_us), "streams",
			 streams ? streams : json_null());
}

static double share(double part, double whole)
{
	return whole > 0 ? 100 * part / whole : 0;
}

void analysis_hta_print(const struct analysis_hta *h, FILE *f, int md)
{
	if (!h->valid)
		return;
	if (md)
		fprintf(f, "\n## Temporal breakdown (as Holistic Trace Analysis computes it)\n\n"
			   "Over the GPU work launched before the last step, from its first start "
			   "to its last end (%.1f us):\n\n"
			   "- compute %.1f us (%.1f%%), non-compute %.1f us (%.1f%%), idle %.1f us (%.1f%%)\n"
			   "- by kernel type: compute %.1f, memory %.1f, communication %.1f, other %.1f us; "
			   "compute overlaps memory %.1f us and communication %.1f us\n\n"
			   "| device | stream | kernels | busy us | idle: host wait | kernel wait | other "
			   "| launches | launch delay mean | median | max | runtime call mean (us) |\n"
			   "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
			h->span_us, h->compute_us, share(h->compute_us, h->span_us), h->non_compute_us,
			share(h->non_compute_us, h->span_us), h->idle_us, share(h->idle_us, h->span_us),
			h->compute_us, h->memory_us, h->communication_us, h->other_us,
			h->compute_memory_overlap_us, h->compute_comm_overlap_us);
	else
		fprintf(f, "\ntemporal breakdown (HTA's definitions): span %.1f us: compute %.1f%%, "
			   "non-compute %.1f%%, idle %.1f%%; memory %.1f us, communication %.1f us\n"
			   "  %6s %6s %7s %10s %10s %10s %10s %8s %9s %9s %9s\n",
			h->span_us, share(h->compute_us, h->span_us),
			share(h->non_compute_us, h->span_us), share(h->idle_us, h->span_us),
			h->memory_us, h->communication_us, "device", "stream", "kernels", "busy us",
			"host wait", "kern wait", "other idle", "launches", "delay avg", "delay p50",
			"delay max");
	for (int i = 0; i < h->n_streams; i++) {
		const struct analysis_stream *s = &h->streams[i];
		if (md)
			fprintf(f, "| %d | %d | %ld | %.1f | %.1f | %.1f | %.1f | %ld | %.1f | %.1f | %.1f | %.1f |\n",
				s->device, s->stream, s->kernels, s->busy_us, s->idle_host_wait_us,
				s->idle_kernel_wait_us, s->idle_other_us, s->launches,
				s->launch_delay_mean_us, s->launch_delay_median_us,
				s->launch_delay_max_us, s->launch_cpu_mean_us);
		else
			fprintf(f, "  %6d %6d %7ld %10.1f %10.1f %10.1f %10.1f %8ld %9.1f %9.1f %9.1f\n",
				s->device, s->stream, s->kernels, s->busy_us, s->idle_host_wait_us,
				s->idle_kernel_wait_us, s->idle_other_us, s->launches,
				s->launch_delay_mean_us, s->launch_delay_median_us,
				s->launch_delay_max_us);
	}
}
