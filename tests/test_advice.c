/* Advice that names its gain (issue 22, item 4): each rule fires on its evidence and
 * not without it, with the estimate docs/profile.md gives, on hand-made figures; the
 * sync evidence from a small trace. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/trace.h"
#include "report/analysis.h"
#include "test.h"

static const struct analysis_advice *rule(const struct analysis *a, const char *name)
{
	for (int i = 0; i < a->n_advice; i++)
		if (!strcmp(a->advice[i].rule, name))
			return &a->advice[i];
	return NULL;
}

/* A GPU run where no rule fires: busy 90%, no wait, bf16, long kernels, memory to
 * spare but not twice over. */
static void quiet_gpu(struct analysis *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->meta.precision, sizeof(a->meta.precision), "bf16");
	a->meta.cc_major = 9;
	a->meta.gpu_mem_bytes = 80ull << 30;
	a->n_steps = 10;
	a->mean.dur_ms = 10;
	a->mean.gpu_busy_ms = 9;
	a->gpu_busy_share = 0.9;
	a->gpu_idle_share = 0.1;
	a->n_kernels = 1000;
	a->kernel_median_us = 80;
	a->mem_peak_bytes = 50.0 * (1 << 30);
	a->steps_total_ms = 100;
	a->ev.kernels_per_step = 100;
	a->ev.syncs_per_step = 1;
}

TEST(advice_quiet_run_fires_nothing)
{
	struct analysis a;
	quiet_gpu(&a);
	analysis_advise(&a);
	CHECK_EQ_INT(a.n_advice, 0);
}

TEST(advice_data_wait)
{
	struct analysis a;
	quiet_gpu(&a);
	a.data_wait_share = 0.10; /* at the threshold: not past it */
	analysis_advise(&a);
	CHECK(rule(&a, "loader_workers") == NULL);
	a.data_wait_share = 0.25;
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "loader_workers");
	CHECK(r && fabs(r->est_speedup - 1 / 0.75) < 1e-12 && fabs(r->value - 0.25) < 1e-12);
	CHECK(r && strstr(r->text, "--decode gpu") != NULL);
	CHECK_EQ_INT(a.n_advice, 1);
}

TEST(advice_h2d_copies)
{
	struct analysis a;
	quiet_gpu(&a);
	a.ev.copy_exposed_share = 0.04;
	analysis_advise(&a);
	CHECK(rule(&a, "h2d_copies") == NULL);
	a.ev.copy_exposed_share = 0.2; /* 4.75 ms of a 22.8 ms step, as the profile */
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "h2d_copies");
	CHECK(r && fabs(r->est_speedup - 1.25) < 1e-12);
}

TEST(advice_syncs)
{
	struct analysis a;
	quiet_gpu(&a);
	a.ev.sync_refill_ms = 0.5;
	analysis_advise(&a); /* one per step (the step's end) is fine */
	CHECK(rule(&a, "syncs") == NULL);
	a.ev.syncs_per_step = 4;
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "syncs");
	CHECK(r && fabs(r->value - 4) < 1e-12 && fabs(r->est_speedup - 1 / 0.95) < 1e-12);
}

TEST(advice_launch_bound)
{
	struct analysis a;
	quiet_gpu(&a);
	a.kernel_median_us = 10; /* short kernels, but the GPU is busy */
	analysis_advise(&a);
	CHECK(rule(&a, "cuda_graphs") == NULL);
	/* 100 kernels, 1 ms busy of a 10 ms step, 9 ms idle waiting for launches: in a
	 * graph 1 ms + 100 x 2 us */
	a.mean.gpu_busy_ms = 1;
	a.gpu_busy_share = 0.1;
	a.gpu_idle_share = 0.9;
	a.ev.launch_idle_ms = 9;
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "cuda_graphs");
	CHECK(r && fabs(r->est_speedup - 10 / 1.2) < 1e-9);
}

TEST(advice_tensor_cores)
{
	struct analysis a;
	quiet_gpu(&a);
	a.ev.math_share = 0.6;
	analysis_advise(&a); /* bf16 already */
	CHECK(rule(&a, "amp") == NULL);
	snprintf(a.meta.precision, sizeof(a.meta.precision), "fp32");
	a.meta.cc_major = 6; /* no tensor cores */
	analysis_advise(&a);
	CHECK(rule(&a, "amp") == NULL);
	a.meta.cc_major = 8;
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "amp");
	/* 60% of the step at twice the speed: 1 / (0.4 + 0.3) */
	CHECK(r && fabs(r->est_speedup - 1 / 0.7) < 1e-12);
	CHECK_NEAR(advice_est_tensor_cores(0), 1, 1e-12);
	CHECK_NEAR(advice_est_tensor_cores(1), ADVICE_TC_FACTOR, 1e-12);
}

TEST(advice_memory_headroom_and_pressure)
{
	struct analysis a;
	quiet_gpu(&a);
	a.mean.gpu_busy_ms = 3;
	a.gpu_busy_share = 0.3;
	a.gpu_idle_share = 0.7;
	analysis_advise(&a); /* 50 of 80 GiB: twice does not fit */
	CHECK(rule(&a, "bigger_batch") == NULL);
	a.mem_peak_bytes = 20.0 * (1 << 30);
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "bigger_batch");
	CHECK(r && fabs(r->est_speedup - 2 / 1.3) < 1e-12);
	CHECK(rule(&a, "memory_pressure") == NULL);
	a.mem_peak_bytes = 78.0 * (1 << 30);
	analysis_advise(&a);
	r = rule(&a, "memory_pressure");
	CHECK(r && fabs(r->value - 78.0 / 80) < 1e-12 && r->est_speedup == 1);
	CHECK(r && strstr(r->text, "--recompute") != NULL);
	CHECK(rule(&a, "bigger_batch") == NULL);
}

TEST(advice_bandwidth_bound)
{
	struct analysis a;
	quiet_gpu(&a);
	a.ev.membound_share = 0.3;
	analysis_advise(&a);
	CHECK(rule(&a, "bandwidth_bound") == NULL);
	a.ev.membound_share = 0.4;
	analysis_advise(&a);
	const struct analysis_advice *r = rule(&a, "bandwidth_bound");
	CHECK(r && fabs(r->est_speedup - 1.25) < 1e-12);
}

/* A CPU run (no kernels) gets only the data rule. */
TEST(advice_cpu_run_gets_no_gpu_rules)
{
	struct analysis a;
	quiet_gpu(&a);
	a.n_kernels = 0;
	a.ev.copy_exposed_share = 0.5;
	a.ev.syncs_per_step = 5;
	a.ev.membound_share = 0.9;
	snprintf(a.meta.precision, sizeof(a.meta.precision), "fp32");
	a.data_wait_share = 0.5;
	analysis_advise(&a);
	CHECK_EQ_INT(a.n_advice, 1);
	CHECK(rule(&a, "loader_workers") != NULL);
}

/* A trace of one 10 ms step (its annotation and its step record) starting at the
 * returned time; the caller adds the step's host ranges and GPU work. */
static int64_t ten_ms_step(struct trace *t)
{
	CHECK_EQ_INT(trace_init(t), 0);
	int64_t b = t->base_ns, ms = 1000000;
	struct trace_range step = { .name = "ProfilerStep#1", .cat = TRACE_USER_ANNOTATION,
				    .start_ns = b, .end_ns = b + 10 * ms, .external_id = 1 };
	CHECK_EQ_INT(trace_add_range(t, &step), 0);
	struct trace_step s = { 1, b, b + 10 * ms, 0 };
	CHECK_EQ_INT(trace_add_step(t, &s), 0);
	return b;
}

/* The sync evidence from a trace: three cudaStreamSynchronize in a 10 ms step, two
 * followed by GPU work 0.4 and 0.6 ms after they return, the last by none. */
TEST(advice_sync_evidence_from_a_trace)
{
	struct trace t;
	struct analysis a;
	const int64_t ms = 1000000, b = ten_ms_step(&t);
	const int64_t sync_end[3] = { 2 * ms, 5 * ms, 9 * ms }, next[2] = { 2 * ms + 400000, 5 * ms + 600000 };
	for (int i = 0; i < 3; i++) {
		struct trace_range r = { .name = "cudaStreamSynchronize", .cat = TRACE_CUDA_RUNTIME,
					 .start_ns = b + sync_end[i] - ms / 2, .end_ns = b + sync_end[i] };
		CHECK_EQ_INT(trace_add_range(&t, &r), 0);
	}
	struct trace_gpu k0 = { .name = "k", .cat = TRACE_KERNEL, .start_ns = b + 1 * ms, .end_ns = b + 1 * ms + 100000 };
	CHECK_EQ_INT(trace_add_gpu(&t, &k0), 0);
	for (int i = 0; i < 2; i++) {
		struct trace_gpu k = { .name = "k", .cat = TRACE_KERNEL, .start_ns = b + next[i],
				       .end_ns = b + next[i] + 100000 };
		CHECK_EQ_INT(trace_add_gpu(&t, &k), 0);
	}
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	CHECK_NEAR(a.ev.syncs_per_step, 3, 1e-12);
	CHECK_NEAR(a.ev.sync_refill_ms, 1.0, 1e-9);
	const struct analysis_advice *r = rule(&a, "syncs");
	CHECK(r && fabs(r->est_speedup - 1 / 0.9) < 1e-9);
	analysis_free(&a);
	trace_free(&t);
}

/* advise sets each fix's estimate beside what it measured, in the table and in
 * advise.json: the bigger batch on a run that never waits for data is estimated
 * from a fully busy device, 2 / (1 + 1) = 1.00x. */
TEST(advise_records_estimate_and_measurement)
{
	static char out[16384];
	char cmd[1024], path[600];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s advise --device cpu --model simple_cnn --batch 2 --size 32 "
		 "--steps 2 --out '%s/adv' 2>/dev/null", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "advise failed (%d): %s", rc, out);
	CHECK(strstr(out, "estimated 1.00x, measured ") != NULL);
	snprintf(path, sizeof(path), "%s/adv/advise.json", dir);
	json_t *j = json_load_file(path, 0, NULL);
	CHECK(j != NULL);
	if (!j)
		return;
	json_t *trials = json_object_get(json_object_get(j, "measurements"), "trials");
	CHECK(json_array_size(trials) >= 2);
	json_t *base = json_array_get(trials, 0), *batch = json_array_get(trials, 1);
	CHECK(json_is_null(json_object_get(base, "est_speedup")));
	const char *change = json_string_value(json_object_get(batch, "change"));
	CHECK(change && !strcmp(change, "--batch 4"));
	CHECK_NEAR(json_number_value(json_object_get(batch, "est_speedup")), 1.0, 1e-9);
	CHECK(json_number_value(json_object_get(batch, "speedup")) > 0);
	json_decref(j);
}

/* Runtime calls of a helper thread (one with runtime calls only: gpuperf's GPU decode
 * thread waits on its own stream for a whole step) are not the training loop's: not
 * its syncs, not its host runtime time. A thread with ops (PyTorch's autograd thread)
 * is the loop's. In a 10 ms step: the loop's sync of 0.5 ms, the autograd thread's
 * launch of 0.1 ms inside its op, and two 4 ms syncs of a helper thread. */
TEST(analysis_helper_thread_runtime_calls_are_not_the_loops)
{
	struct trace t;
	struct analysis a;
	const int64_t ms = 1000000, b = ten_ms_step(&t);
	struct trace_range loop_sync = { .name = "cudaStreamSynchronize", .cat = TRACE_CUDA_RUNTIME,
					 .start_ns = b + 1 * ms, .end_ns = b + 1 * ms + ms / 2 };
	struct trace_range op = { .name = "autograd::engine::evaluate_function: ConvolutionBackward0",
				  .cat = TRACE_CPU_OP, .tid = 777, .start_ns = b + 3 * ms,
				  .end_ns = b + 4 * ms };
	struct trace_range launch = { .name = "cudaLaunchKernel", .cat = TRACE_CUDA_RUNTIME, .tid = 777,
				      .start_ns = b + 3 * ms, .end_ns = b + 3 * ms + ms / 10 };
	CHECK_EQ_INT(trace_add_range(&t, &loop_sync), 0);
	CHECK_EQ_INT(trace_add_range(&t, &op), 0);
	CHECK_EQ_INT(trace_add_range(&t, &launch), 0);
	for (int i = 0; i < 2; i++) {
		struct trace_range h = { .name = "cudaStreamSynchronize", .cat = TRACE_CUDA_RUNTIME,
					 .tid = 4242, .start_ns = b + 5 * ms + i * ms / 2,
					 .end_ns = b + 9 * ms + i * ms / 2 };
		CHECK_EQ_INT(trace_add_range(&t, &h), 0);
	}
	struct trace_gpu k = { .name = "k", .cat = TRACE_KERNEL, .start_ns = b + 2 * ms,
			       .end_ns = b + 2 * ms + ms / 2 };
	CHECK_EQ_INT(trace_add_gpu(&t, &k), 0);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	printf("      syncs per step %.3g, runtime part %.4g ms\n", a.ev.syncs_per_step,
	       a.mean.part_ms[PART_RUNTIME]);
	CHECK_NEAR(a.ev.syncs_per_step, 1, 1e-12);
	CHECK_NEAR(a.mean.part_ms[PART_RUNTIME], 0.6, 1e-9);
	analysis_free(&a);
	trace_free(&t);
}
