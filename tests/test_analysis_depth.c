/* The analysis of issue 22: device time by stage on a hand-built trace whose every
 * microsecond is worked out in the comments, op tables by type and by layer, and
 * launch configurations of kernels. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/trace.h"
#include "report/analysis.h"
#include "test.h"

#define US 1000LL
#define BASE 7000000000LL

static void range_us(struct trace *t, const char *name, const char *cat, int lo, int hi,
		     uint64_t corr, uint64_t ext)
{
	struct trace_range r = { .name = trace_intern(t, name),
				 .cat = (enum trace_cat)trace_cat_parse(cat), .tid = 5,
				 .start_ns = BASE + lo * US, .end_ns = BASE + hi * US,
				 .correlation = corr, .external_id = ext };
	CHECK_EQ_INT(trace_add_range(t, &r), 0);
}

static void gpu_us(struct trace *t, const char *name, enum trace_cat cat, int stream, int lo,
		   int hi, uint64_t corr)
{
	struct trace_gpu g = { .name = trace_intern(t, name), .cat = cat, .device = 0,
			       .stream = stream, .start_ns = BASE + lo * US,
			       .end_ns = BASE + hi * US, .correlation = corr,
			       .grid = { 80, 1, 1 }, .block = { 128, 1, 1 }, .bytes = 1024 };
	CHECK_EQ_INT(trace_add_gpu(t, &g), 0);
}

/* Step 1 is [0, 1000) us, step 2 [1000, 2000) us with no work at all.
 *   data      memcpy [20,120) less forward's [110,120) = 90, memset [880,890)
 *             launched by nobody = 10                                  -> 100
 *   forward   conv1 [110,300), fc on a second stream [280,350), the loss
 *             launched in the forward annotation outside layers [350,370) -> 260
 *   backward  wgrad [420,600) + dgrad [600,650)                           -> 230
 *   comm      nccl [550,720) less backward's [550,650)                    ->  70
 *   optimizer sgd [810,860)                                               ->  50
 *   other     a kernel with no launch [900,920)                           ->  20
 *   idle      1000 - 730                                                  -> 270
 * Host annotations: data 100, forward 300, backward 400, optimizer 100. */
static void build_stage_trace(struct trace *t)
{
	trace_init(t);
	t->base_ns = BASE;
	t->tid = 5;
	snprintf(t->meta.model, sizeof(t->meta.model), "toy");
	t->meta.batch = 8;
	range_us(t, "ProfilerStep#1", "user_annotation", 0, 1000, 0, 1);
	range_us(t, "data", "user_annotation", 0, 100, 0, 2);
	range_us(t, "cudaMemcpyAsync", "cuda_runtime", 10, 20, 1, 0);
	gpu_us(t, "Memcpy HtoD", TRACE_GPU_MEMCPY, 9, 20, 120, 1);
	range_us(t, "forward", "user_annotation", 100, 400, 0, 3);
	range_us(t, "conv1", "cpu_op", 100, 200, 0, 11);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 110, 120, 2, 11);
	gpu_us(t, "conv_fwd", TRACE_KERNEL, 7, 110, 300, 2);
	range_us(t, "fc", "cpu_op", 200, 300, 0, 12);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 210, 215, 3, 12);
	gpu_us(t, "gemm", TRACE_KERNEL, 8, 280, 350, 3);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 310, 315, 4, 0);
	gpu_us(t, "softmax_xent", TRACE_KERNEL, 7, 350, 370, 4);
	range_us(t, "backward", "user_annotation", 400, 800, 0, 4);
	range_us(t, "fc.backward", "cpu_op", 400, 500, 0, 13);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 410, 415, 5, 13);
	gpu_us(t, "sm90_xmma_wgrad_kernel", TRACE_KERNEL, 7, 420, 600, 5);
	range_us(t, "conv1.backward", "cpu_op", 500, 600, 0, 14);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 510, 515, 6, 14);
	gpu_us(t, "sm90_xmma_dgrad_kernel", TRACE_KERNEL, 7, 600, 650, 6);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 520, 525, 7, 14);
	gpu_us(t, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", TRACE_KERNEL, 10, 550, 720, 7);
	range_us(t, "optimizer", "user_annotation", 800, 900, 0, 5);
	range_us(t, "Optimizer.step#SGD.step", "cpu_op", 800, 900, 0, 15);
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 805, 810, 8, 15);
	gpu_us(t, "sgd_fused", TRACE_KERNEL, 7, 810, 860, 8);
	gpu_us(t, "Memset", TRACE_GPU_MEMSET, 7, 880, 890, 0);
	gpu_us(t, "mystery", TRACE_KERNEL, 7, 900, 920, 0);
	struct trace_step s = { 1, BASE, BASE + 1000 * US, 0 };
	CHECK_EQ_INT(trace_add_step(t, &s), 0);
	range_us(t, "ProfilerStep#2", "user_annotation", 1000, 2000, 0, 20);
	struct trace_step s2 = { 2, BASE + 1000 * US, BASE + 2000 * US, 0 };
	CHECK_EQ_INT(trace_add_step(t, &s2), 0);
}

TEST(analysis_device_stages_known)
{
	struct trace t;
	struct analysis a;
	build_stage_trace(&t);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	CHECK_EQ_INT(a.device_from_host, 0);
	CHECK_EQ_INT(a.n_steps, 2);
	if (a.n_steps == 2) {
		const double *d = a.steps[0].device_ms;
		CHECK_NEAR(d[DSTAGE_DATA], 0.100, 1e-9);
		CHECK_NEAR(d[DSTAGE_FORWARD], 0.260, 1e-9);
		CHECK_NEAR(d[DSTAGE_BACKWARD], 0.230, 1e-9);
		CHECK_NEAR(d[DSTAGE_COMM], 0.070, 1e-9);
		CHECK_NEAR(d[DSTAGE_OPTIMIZER], 0.050, 1e-9);
		CHECK_NEAR(d[DSTAGE_OTHER], 0.020, 1e-9);
		CHECK_NEAR(d[DSTAGE_IDLE], 0.270, 1e-9);
		double sum = 0;
		for (int k = 0; k < DSTAGE_COUNT; k++)
			sum += d[k];
		CHECK_NEAR(sum, a.steps[0].dur_ms, 1e-9);
		CHECK_NEAR(a.steps[0].stage_ms[STAGE_DATA], 0.100, 1e-9);
		CHECK_NEAR(a.steps[0].stage_ms[STAGE_FORWARD], 0.300, 1e-9);
		CHECK_NEAR(a.steps[0].stage_ms[STAGE_BACKWARD], 0.400, 1e-9);
		CHECK_NEAR(a.steps[0].stage_ms[STAGE_OPTIMIZER], 0.100, 1e-9);
		/* the empty step is all idle; the mean halves step 1 */
		CHECK_NEAR(a.steps[1].device_ms[DSTAGE_IDLE], 1.0, 1e-9);
		CHECK_NEAR(a.steps[1].device_ms[DSTAGE_FORWARD], 0.0, 1e-9);
		CHECK_NEAR(a.mean.device_ms[DSTAGE_FORWARD], 0.130, 1e-9);
		CHECK_NEAR(a.mean.device_ms[DSTAGE_IDLE], 0.635, 1e-9);
	}
	json_t *j = analysis_to_json(&a);
	CHECK(j != NULL);
	json_t *st0 = json_array_get(json_object_get(j, "steps"), 0);
	json_t *dev = json_object_get(st0, "device_stage_ms");
	CHECK_NEAR(json_real_value(json_object_get(dev, "communication")), 0.070, 1e-9);
	CHECK_NEAR(json_real_value(json_object_get(dev, "idle")), 0.270, 1e-9);
	CHECK(!strcmp(json_string_value(json_object_get(j, "device_time_source")), "gpu"));
	json_decref(j);
	analysis_free(&a);
	trace_free(&t);
}

/* Without GPU work (the CPU backend) the compute thread's stage annotations are
 * the device time: data [0,10), forward [10,50), backward [50,90), optimizer
 * [90,95) of a 100 us step leave 5 us idle. */
TEST(analysis_device_stages_cpu)
{
	struct trace t;
	struct analysis a;
	trace_init(&t);
	t.base_ns = BASE;
	range_us(&t, "ProfilerStep#0", "user_annotation", 0, 100, 0, 1);
	range_us(&t, "data", "user_annotation", 0, 10, 0, 2);
	range_us(&t, "forward", "user_annotation", 10, 50, 0, 3);
	range_us(&t, "conv1", "cpu_op", 12, 40, 0, 4);
	range_us(&t, "backward", "user_annotation", 50, 90, 0, 5);
	range_us(&t, "optimizer", "user_annotation", 90, 95, 0, 6);
	struct trace_step s = { 0, BASE, BASE + 100 * US, 0 };
	CHECK_EQ_INT(trace_add_step(&t, &s), 0);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	CHECK_EQ_INT(a.device_from_host, 1);
	const double *d = a.steps[0].device_ms;
	CHECK_NEAR(d[DSTAGE_DATA], 0.010, 1e-9);
	CHECK_NEAR(d[DSTAGE_FORWARD], 0.040, 1e-9);
	CHECK_NEAR(d[DSTAGE_BACKWARD], 0.040, 1e-9);
	CHECK_NEAR(d[DSTAGE_OPTIMIZER], 0.005, 1e-9);
	CHECK_NEAR(d[DSTAGE_COMM] + d[DSTAGE_OTHER], 0.0, 1e-9);
	CHECK_NEAR(d[DSTAGE_IDLE], 0.005, 1e-9);
	analysis_free(&a);
	trace_free(&t);
}
