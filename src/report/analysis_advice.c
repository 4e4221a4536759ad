/* The advice rules: each fires on a measured figure past its threshold and names
 * what fixing it is estimated to gain (docs/profile.md, "Advice rules", gives every
 * formula; `advise` sets the estimates beside what it measures). */
#include "report/analysis_priv.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"

double advice_est_removed(double share)
{
	if (share <= 0)
		return 1;
	return share < 0.99 ? 1 / (1 - share) : 100;
}

double advice_est_tensor_cores(double math_share)
{
	double m = math_share < 0 ? 0 : math_share > 1 ? 1 : math_share;
	return 1 / (1 - m + m / ADVICE_TC_FACTOR);
}

double advice_est_bigger_batch(double busy_share)
{
	double b = busy_share < 0 ? 0 : busy_share > 1 ? 1 : busy_share;
	return 2 / (1 + b);
}

double advice_est_fused(double membound_share)
{
	double s = membound_share < 0 ? 0 : membound_share > 1 ? 1 : membound_share;
	return 1 / (1 - s / 2);
}

/* --- evidence from the trace ------------------------------------------------------------ */

static int i64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int has_word(const char *name, const char *const *words)
{
	char low[160];
	size_t n = 0;
	for (; name[n] && n + 1 < sizeof(low); n++)
		low[n] = (char)tolower((unsigned char)name[n]);
	low[n] = 0;
	for (; *words; words++)
		if (strstr(low, *words))
			return 1;
	return 0;
}

static const char *const math_rows[] = { "conv forward", "conv backward", "linear forward",
					 "linear backward", NULL };
static const char *const membound_rows[] = { "batch norm", "activation", "pooling", "add ",
					     "dropout", NULL };
/* for a trace without layers (torch.profiler's): by kernel name */
static const char *const math_kernels[] = { "gemm", "conv", "xmma", "cutlass", "dgrad",
					    "wgrad", NULL };
static const char *const membound_kernels[] = { "elementwise", "batch_norm", "batchnorm",
						"bn_", "pool", "relu", "reduce", NULL };

static int row_is(const char *name, const char *const *prefixes)
{
	for (; *prefixes; prefixes++)
		if (!strncmp(name, *prefixes, strlen(*prefixes)))
			return 1;
	return 0;
}

/* Host waits for the device inside the steps: how many, and how long the GPU then
 * idles before its next work in the same step (the pipeline refilling). */
static int sync_evidence(const struct trace *t, struct analysis *a)
{
	int64_t *starts = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*starts));
	if (!starts)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	for (size_t i = 0; i < t->n_gpu; i++)
		starts[i] = t->gpu[i].start_ns;
	gp_qsort(starts, t->n_gpu, sizeof(*starts), i64_cmp);
	long syncs = 0;
	double refill_ns = 0;
	struct loop_tids lt;
	loop_tids_find(t, &lt);
	for (size_t i = 0; i < t->n_ranges; i++) {
		const struct trace_range *r = &t->ranges[i];
		if (r->cat != TRACE_CUDA_RUNTIME || !strstr(r->name, "Synchronize") ||
		    !range_on_loop(&lt, r))
			continue;
		const struct trace_step *in = NULL;
		for (size_t s = 0; s < t->n_steps && !in; s++)
			if (r->start_ns >= t->steps[s].start_ns && r->start_ns < t->steps[s].end_ns)
				in = &t->steps[s];
		if (!in)
			continue;
		syncs++;
		size_t lo = 0, hi = t->n_gpu; /* the first GPU work starting after the wait */
		while (lo < hi) {
			size_t m = lo + (hi - lo) / 2;
			if (starts[m] < r->end_ns)
				lo = m + 1;
			else
				hi = m;
		}
		if (lo < t->n_gpu && starts[lo] < in->end_ns)
			refill_ns += (double)(starts[lo] - r->end_ns);
	}
	free(starts);
	a->ev.syncs_per_step = a->n_steps ? (double)syncs / a->n_steps : 0;
	a->ev.sync_refill_ms = a->n_steps ? refill_ns / 1e6 / a->n_steps : 0;
	return 0;
}

int advice_evidence(const struct trace *t, struct analysis *a)
{
	struct analysis_evidence *ev = &a->ev;
	memset(ev, 0, sizeof(*ev));
	double dur = a->mean.dur_ms;
	if (dur > 0) {
		ev->copy_exposed_share = a->mean.part_ms[PART_MEMCPY] / dur;
		double idle = dur - a->mean.gpu_busy_ms - a->mean.data_wait_ms;
		ev->launch_idle_ms = idle > 0 ? idle : 0;
	}
	ev->kernels_per_step = a->n_steps ? (double)a->n_kernels / a->n_steps : 0;
	double math = 0, mem = 0;
	if (t->n_layers) {
		for (int i = 0; i < a->n_op_types; i++) {
			const struct analysis_oprow *r = &a->op_types[i];
			if (row_is(r->name, math_rows))
				math += r->gpu_ms;
			else if (row_is(r->name, membound_rows))
				mem += r->gpu_ms;
		}
	} else {
		for (size_t i = 0; i < t->n_gpu; i++) {
			const struct trace_gpu *g = &t->gpu[i];
			if (g->cat != TRACE_KERNEL || !g->name)
				continue;
			double ms = (g->end_ns - g->start_ns) / 1e6;
			if (has_word(g->name, math_kernels))
				math += ms;
			else if (has_word(g->name, membound_kernels))
				mem += ms;
		}
	}
	if (a->steps_total_ms > 0) {
		ev->math_share = math / a->steps_total_ms;
		ev->membound_share = mem / a->steps_total_ms;
	}
	return sync_evidence(t, a);
}

/* --- the rules -------------------------------------------------------------------------- */

static void advice_add(struct analysis *a, const char *rule, double value, double threshold,
		       double est, const char *fmt, ...) GP_PRINTF(6, 7);

static void advice_add(struct analysis *a, const char *rule, double value, double threshold,
		       double est, const char *fmt, ...)
{
	if (a->n_advice >= ANALYSIS_MAX_ADVICE)
		return;
	struct analysis_advice *ad = &a->advice[a->n_advice++];
	va_list ap;
	snprintf(ad->rule, sizeof(ad->rule), "%s", rule);
	ad->value = value;
	ad->threshold = threshold;
	ad->est_speedup = est;
	va_start(ap, fmt);
	vsnprintf(ad->text, sizeof(ad->text), fmt, ap);
	va_end(ap);
}

/* The rules, with thresholds and estimates documented in docs/profile.md. GPU rules
 * need GPU work in the trace: a CPU run has nothing to say about kernels. */
void analysis_advise(struct analysis *a)
{
	const struct analysis_evidence *ev = &a->ev;
	double dur = a->mean.dur_ms;
	a->n_advice = 0;
	if (a->data_wait_share > 0.10)
		advice_add(a, "loader_workers", a->data_wait_share, 0.10,
			   advice_est_removed(a->data_wait_share),
			   "steps wait for data %.1f%% of the time (> %d%%): add data loader "
			   "workers (gpuperf workers finds the knee) or decode JPEGs on the GPU "
			   "(--decode gpu)", 100 * a->data_wait_share, 10);
	if (a->n_kernels == 0)
		return;
	if (ev->copy_exposed_share > 0.05)
		advice_add(a, "h2d_copies", ev->copy_exposed_share, 0.05,
			   advice_est_removed(ev->copy_exposed_share),
			   "copies run with no kernel beside them %.1f%% of the step (> 5%%): "
			   "copy from pinned memory on a side stream while the previous step "
			   "computes (prefetch the next batch)", 100 * ev->copy_exposed_share);
	if (ev->syncs_per_step > 1 && dur > 0)
		advice_add(a, "syncs", ev->syncs_per_step, 1,
			   advice_est_removed(ev->sync_refill_ms / dur),
			   "%.1f host waits for the GPU per step (> 1), after which it idles %.3f ms "
			   "refilling: read losses and metrics back less often",
			   ev->syncs_per_step, ev->sync_refill_ms);
	if (a->kernel_median_us < 20 && a->gpu_idle_share > 0.20 && dur > 0) {
		/* with the step in a graph its kernels follow each other a couple of
		 * microseconds apart; what the host waits on otherwise stays */
		double after = dur - ev->launch_idle_ms + ev->kernels_per_step * ADVICE_GRAPH_GAP_US / 1e3;
		if (after < a->mean.gpu_busy_ms)
			after = a->mean.gpu_busy_ms;
		advice_add(a, "cuda_graphs", a->kernel_median_us, 20,
			   after > 0 && after < dur ? dur / after : 1,
			   "median kernel lasts %.1f us with the GPU idle %.1f%% of the step: "
			   "launch overhead dominates; capture the step in a CUDA graph",
			   a->kernel_median_us, 100 * a->gpu_idle_share);
	}
	int tensor_cores = a->meta.cc_major >= 7;
	if (tensor_cores && !strcmp(a->meta.precision, "fp32"))
		advice_add(a, "amp", a->meta.cc_major + a->meta.cc_minor / 10.0, 7.0,
			   advice_est_tensor_cores(ev->math_share),
			   "FP32 math on a compute capability %.1f GPU with tensor cores (%.0f%% of "
			   "the step in convolutions and GEMMs): try --precision tf32, or mixed "
			   "precision (bf16, fp16)",
			   a->meta.cc_major + a->meta.cc_minor / 10.0, 100 * ev->math_share);
	double mem_total = (double)a->meta.gpu_mem_bytes, peak = a->mem_peak_bytes;
	int headroom = mem_total <= 0 || peak <= 0 || 2 * peak <= 0.9 * mem_total;
	if (a->gpu_busy_share < 0.50 && headroom)
		advice_add(a, "bigger_batch", a->gpu_busy_share, 0.50,
			   advice_est_bigger_batch(a->gpu_busy_share),
			   "the GPU is busy only %.1f%% of the step (< %d%%) and twice the memory "
			   "fits: a bigger batch gives it more work per launch",
			   100 * a->gpu_busy_share, 50);
	if (mem_total > 0 && peak > 0.9 * mem_total)
		advice_add(a, "memory_pressure", peak / mem_total, 0.9, 1,
			   "%.1f%% of the GPU's memory is allocated at the peak (> 90%%): "
			   "--recompute, 16-bit activations (--precision bf16) or gradient "
			   "accumulation make room (for fit, not speed)", 100 * peak / mem_total);
	if (ev->membound_share > 0.30)
		advice_add(a, "bandwidth_bound", ev->membound_share, 0.30,
			   advice_est_fused(ev->membound_share),
			   "batch norm, activations, pooling and adds take %.1f%% of the step "
			   "(> 30%%): they move memory, not math; fuse them into the convolutions "
			   "(16-bit halves their traffic too)", 100 * ev->membound_share);
}
