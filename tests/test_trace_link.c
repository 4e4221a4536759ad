/* The optimizer's kernels on the GPU (issue 22, item 1): on the H100 the profile gave
 * the optimizer 0 ms of device time, its kernels counted as "other". The CUPTI tracer
 * linked each runtime call to the layer range it was made in by timestamp, and its
 * records were on a clock offset measured once, around a first CUPTI call that can
 * take long: a few hundred microseconds of error leave the long forward and backward
 * ranges with most of their launches but miss the optimizer step's range (a few
 * microseconds) and its stage annotation altogether.
 *
 * The sample below records what the tracer stages: host ranges on the host clock,
 * runtime calls and GPU work skewed by SKEW, and CUPTI's external correlation
 * records (the links). Linked by time alone (as before) the optimizer gets nothing;
 * merged with the links it gets its kernels, in their steps. */
#include <stdio.h>
#include <string.h>

#include "core/trace.h"
#include "report/analysis.h"
#include "test.h"

#define US 1000LL
#define SKEW (300 * US) /* the tracer's clock offset error */

struct rec {
	struct trace *t, *staged;
	struct trace_corr_link links[256];
	size_t n_links;
	int64_t host_ns, gpu_ns;
	uint64_t corr, ext;
};

static uint64_t range(struct rec *g, const char *name, const char *cat, int64_t lo, int64_t hi)
{
	struct trace_range r = { .name = name, .cat = (enum trace_cat)trace_cat_parse(cat),
				 .tid = 1, .start_ns = lo, .end_ns = hi, .external_id = ++g->ext };
	CHECK_EQ_INT(trace_add_range(g->t, &r), 0);
	return r.external_id;
}

/* A launch at the host's time, inside the layer range op (0: none); CUPTI's records
 * carry the skew, the link does not. */
static void launch(struct rec *g, const char *kernel, enum trace_cat cat, int64_t dur, uint64_t op)
{
	int64_t lo = g->host_ns + 1 * US, hi = lo + 3 * US;
	uint64_t corr = ++g->corr;
	struct trace_range r = { .name = cat == TRACE_KERNEL ? "cudaLaunchKernel" : "cudaMemcpyAsync",
				 .cat = TRACE_CUDA_RUNTIME, .tid = 1, .start_ns = lo + SKEW,
				 .end_ns = hi + SKEW, .correlation = corr };
	CHECK_EQ_INT(trace_add_range(g->staged, &r), 0);
	int64_t start = g->gpu_ns > hi + 2 * US ? g->gpu_ns : hi + 2 * US;
	struct trace_gpu k = { .name = kernel, .cat = cat, .stream = 7, .start_ns = start + SKEW,
			       .end_ns = start + dur + SKEW, .correlation = corr };
	CHECK_EQ_INT(trace_add_gpu(g->staged, &k), 0);
	g->gpu_ns = start + dur;
	g->host_ns = hi + 1 * US;
	if (op && g->n_links < sizeof(g->links) / sizeof(g->links[0]))
		g->links[g->n_links++] = (struct trace_corr_link){ corr, op };
}

static void layer(struct rec *g, const char *name, const char *kernel, int64_t work)
{
	int64_t lo = g->host_ns;
	/* the range's id is taken when it opens, before its launches */
	uint64_t id = g->ext + 1;
	g->host_ns += 2 * US;
	launch(g, kernel, TRACE_KERNEL, work, id);
	g->host_ns += 2 * US;
	CHECK(range(g, name, "cpu_op", lo, g->host_ns) == id);
}

/* Three steps of a three-layer net as profile records them: data (an upload),
 * forward, backward, the optimizer step (one range with a fused SGD kernel and the
 * step counter), then the host waits for the GPU. */
static void record(struct trace *t, struct trace *staged, struct rec *g)
{
	static const char *const names[] = { "conv1", "bn1", "fc" };
	static const char *const bwd[] = { "conv1.backward", "bn1.backward", "fc.backward" };
	memset(g, 0, sizeof(*g));
	CHECK_EQ_INT(trace_init(t), 0);
	CHECK_EQ_INT(trace_init(staged), 0);
	g->t = t;
	g->staged = staged;
	g->corr = 9000;
	g->host_ns = g->gpu_ns = t->base_ns;
	t->meta.cc_major = 9;
	snprintf(t->meta.precision, sizeof(t->meta.precision), "fp32");
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(trace_add_layer(t, names[i], i == 0 ? "conv2d" : i == 1 ? "batchnorm2d" : "linear", NULL), 0);
	CHECK_EQ_INT(trace_add_layer(t, "Optimizer.step#SGD.step", "optimizer", NULL), 0);
	for (int s = 1; s <= 3; s++) {
		int64_t step_lo = g->host_ns, lo = g->host_ns;
		g->host_ns += 20 * US;
		launch(g, "Memcpy HtoD (Pinned -> Device)", TRACE_GPU_MEMCPY, 40 * US, 0);
		range(g, "data", "user_annotation", lo, g->host_ns);
		lo = g->host_ns;
		for (int i = 0; i < 3; i++)
			layer(g, names[i], "fwd_kernel", 150 * US);
		range(g, "forward", "user_annotation", lo, g->host_ns);
		lo = g->host_ns;
		for (int i = 2; i >= 0; i--)
			layer(g, bwd[i], "bwd_kernel", 300 * US);
		range(g, "backward", "user_annotation", lo, g->host_ns);
		lo = g->host_ns;
		int64_t op_lo = g->host_ns;
		uint64_t id = g->ext + 1;
		g->host_ns += 1 * US;
		launch(g, "sgd_kernel", TRACE_KERNEL, 60 * US, id);
		launch(g, "counter_inc_kernel", TRACE_KERNEL, 2 * US, id);
		CHECK(range(g, "Optimizer.step#SGD.step", "cpu_op", op_lo, g->host_ns) == id);
		range(g, "optimizer", "user_annotation", lo, g->host_ns);
		/* the step ends once the host has waited for the stream */
		g->host_ns = (g->gpu_ns > g->host_ns ? g->gpu_ns : g->host_ns) + 5 * US;
		char name[32];
		snprintf(name, sizeof(name), "ProfilerStep#%d", s);
		range(g, name, "user_annotation", step_lo, g->host_ns);
		struct trace_step st = { s, step_lo, g->host_ns, 0 };
		CHECK_EQ_INT(trace_add_step(t, &st), 0);
		g->host_ns += 10 * US;
	}
}

/* The miss, as the tracer merged before: by time alone, with the offset error. */
TEST(trace_link_by_time_misses_the_optimizer)
{
	struct trace t, staged;
	struct rec g;
	struct analysis a;
	record(&t, &staged, &g);
	int64_t shift = -1;
	CHECK_EQ_INT(trace_merge_staged(&t, &staged, NULL, 0, &shift), 0);
	CHECK(shift == 0);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	CHECK_NEAR(a.mean.device_ms[DSTAGE_OPTIMIZER], 0, 1e-9);
	CHECK(a.mean.device_ms[DSTAGE_OTHER] > 0.01);
	analysis_free(&a);
	trace_free(&staged);
	trace_free(&t);
}

/* Merged with CUPTI's links: every launch links to its range, the clocks are
 * brought together, and each step's optimizer time is its two kernels' 62 us. */
TEST(trace_link_external_correlation_finds_the_optimizer)
{
	struct trace t, staged;
	struct rec g;
	struct analysis a;
	record(&t, &staged, &g);
	CHECK(g.n_links == 3 * 8);
	int64_t shift = 0;
	CHECK_EQ_INT(trace_merge_staged(&t, &staged, g.links, g.n_links, &shift), 0);
	/* within the launches' slack of the true offset error */
	CHECK_MSG(shift >= -SKEW && shift <= -SKEW + 3 * US, "shift %lld ns", (long long)shift);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	CHECK_EQ_INT(a.n_steps, 3);
	for (int i = 0; i < a.n_steps; i++) {
		const struct analysis_step *s = &a.steps[i];
		double sum = 0;
		for (int d = 0; d < DSTAGE_COUNT; d++)
			sum += s->device_ms[d];
		CHECK_NEAR(sum, s->dur_ms, 1e-6);
		CHECK_NEAR(s->device_ms[DSTAGE_OPTIMIZER], 0.062, 0.004);
		CHECK_NEAR(s->device_ms[DSTAGE_FORWARD], 0.450, 0.004);
		CHECK_NEAR(s->device_ms[DSTAGE_BACKWARD], 0.900, 0.004);
		CHECK_NEAR(s->device_ms[DSTAGE_OTHER], 0, 1e-9);
	}
	/* every runtime call carries its range's id: the op tables' optimizer row */
	int found = 0;
	for (int i = 0; i < a.n_op_types; i++)
		if (!strcmp(a.op_types[i].name, "optimizer")) {
			found = 1;
			CHECK_EQ_INT((int)a.op_types[i].gpu_calls, 6);
		}
	CHECK(found);
	analysis_free(&a);
	trace_free(&staged);
	trace_free(&t);
}

/* Links that agree with the clocks change nothing: no shift. */
TEST(trace_link_keeps_a_right_clock)
{
	struct trace t, staged;
	struct rec g;
	record(&t, &staged, &g);
	for (size_t i = 0; i < staged.n_ranges; i++) {
		staged.ranges[i].start_ns -= SKEW;
		staged.ranges[i].end_ns -= SKEW;
	}
	int64_t shift = -1;
	CHECK_EQ_INT(trace_merge_staged(&t, &staged, g.links, g.n_links, &shift), 0);
	CHECK(shift == 0);
	trace_free(&staged);
	trace_free(&t);
}
