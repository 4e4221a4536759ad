/* The analysis of issue 22: device time by stage on a hand-built trace whose every
 * microsecond is worked out in the comments, op tables by type and by layer, and
 * launch configurations of kernels. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/trace.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
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
 *   backward  wgrad [420,600) + dgrad [600,650) + a depthwise filter
 *             gradient [650,660)                                          -> 240
 *   comm      nccl [550,720) less backward's [550,660)                    ->  60
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
	CHECK_EQ_INT(trace_add_layer(t, "conv1", "conv2d", "[[8, 3, 32, 32]]"), 0);
	CHECK_EQ_INT(trace_add_layer(t, "fc", "linear", "[[8, 2048]]"), 0);
	CHECK_EQ_INT(trace_add_layer(t, "Optimizer.step#SGD.step", "optimizer", NULL), 0);
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
	range_us(t, "cudaLaunchKernel", "cuda_runtime", 530, 535, 9, 14);
	gpu_us(t, "_Z21dw_filter_part_kernelPKfS0_Pfiiii", TRACE_KERNEL, 7, 650, 660, 9);
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
		CHECK_NEAR(d[DSTAGE_BACKWARD], 0.240, 1e-9);
		CHECK_NEAR(d[DSTAGE_COMM], 0.060, 1e-9);
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
	CHECK_NEAR(json_real_value(json_object_get(dev, "communication")), 0.060, 1e-9);
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

static const struct analysis_oprow *row_find(const struct analysis_oprow *r, int n,
					     const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(r[i].name, name))
			return &r[i];
	return NULL;
}

/* One row as the trace above makes it: host calls, self and total host time and GPU
 * time, all in us. */
static void check_row(const struct analysis_oprow *r, int n, const char *name, long calls,
		      double self_us, double total_us, double gpu_us)
{
	const struct analysis_oprow *o = row_find(r, n, name);
	CHECK_MSG(o != NULL, "no row '%s'", name);
	if (!o)
		return;
	CHECK_MSG(o->calls == calls, "%s: %ld calls", name, o->calls);
	CHECK_MSG(fabs(o->cpu_self_ms * 1e3 - self_us) < 1e-6, "%s: self %.6f us", name,
		  o->cpu_self_ms * 1e3);
	CHECK_MSG(fabs(o->cpu_total_ms * 1e3 - total_us) < 1e-6, "%s: total %.6f us", name,
		  o->cpu_total_ms * 1e3);
	CHECK_MSG(fabs(o->gpu_ms * 1e3 - gpu_us) < 1e-6, "%s: gpu %.6f us", name, o->gpu_ms * 1e3);
}

/* The op tables of the trace above (us):
 *   conv forward     conv1: range 100, runtime 10 inside, kernel 190
 *   linear forward   fc: 100, runtime 5, gemm 70
 *   linear backward  fc.backward: 100, runtime 5, the wgrad kernel 180
 *   conv backward    conv1.backward: 100, runtime 15, dgrad 50 + filter gradient 10
 *                    (the nccl kernel it launched is communication's)
 *   conv data / weight gradient (GPU): 50 / 10, no host calls
 *   optimizer        100, runtime 5, sgd 50
 *   loss             the forward annotation's 300 less its layers' 200 = 100, less a
 *                    runtime call of 5 = 95 self; the loss kernel 20
 *   copy             the data annotation's 100, less a runtime call of 10; memcpy 100
 *                    + memset 10
 *   CUDA runtime     9 calls, 55
 *   communication 170, (no layer) 20 */
TEST(analysis_op_tables_known)
{
	struct trace t;
	struct analysis a;
	build_stage_trace(&t);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	const struct analysis_oprow *r = a.op_types;
	int n = a.n_op_types;
	check_row(r, n, "conv forward", 1, 90, 100, 190);
	check_row(r, n, "linear forward", 1, 95, 100, 70);
	check_row(r, n, "linear backward", 1, 95, 100, 180);
	check_row(r, n, "conv backward", 1, 85, 100, 60);
	check_row(r, n, "conv data gradient (GPU)", 0, 0, 0, 50);
	check_row(r, n, "conv weight gradient (GPU)", 0, 0, 0, 10);
	check_row(r, n, "optimizer", 1, 95, 100, 50);
	check_row(r, n, "loss", 1, 95, 100, 20);
	check_row(r, n, "copy", 1, 90, 100, 110);
	check_row(r, n, "CUDA runtime", 9, 55, 55, 0);
	check_row(r, n, "communication", 0, 0, 0, 170);
	check_row(r, n, "(no layer)", 0, 0, 0, 20);
	CHECK_EQ_INT(n, 12);
	/* by GPU time by default (kernels ran): conv forward first, linear backward next */
	CHECK_EQ_INT(a.sort_by_gpu, 1);
	CHECK(n > 1 && !strcmp(r[0].name, "conv forward") && !strcmp(r[1].name, "linear backward"));
	CHECK_NEAR(a.steps_total_ms, 2.0, 1e-12);

	/* by layer, with the shapes recorded for the layer's forward and backward */
	r = a.op_layers;
	n = a.n_op_layers;
	check_row(r, n, "conv1", 1, 90, 100, 190);
	check_row(r, n, "conv1.backward", 1, 85, 100, 60);
	check_row(r, n, "Optimizer.step#SGD.step", 1, 95, 100, 50);
	check_row(r, n, "loss", 1, 95, 100, 20);
	CHECK(row_find(r, n, "CUDA runtime") == NULL);
	CHECK(row_find(r, n, "conv data gradient (GPU)") == NULL);
	CHECK_EQ_INT(a.have_shapes, 1);
	const struct analysis_oprow *o = row_find(r, n, "conv1.backward");
	CHECK(o && !strcmp(o->shapes, "[[8, 3, 32, 32]]"));

	/* by host time: the layers of 100 us, then by GPU time among them */
	analysis_sort_ops(&a, 0);
	CHECK(!strcmp(a.op_types[0].name, "conv forward"));
	CHECK(!strcmp(a.op_types[1].name, "linear backward"));
	CHECK(!strcmp(a.op_types[a.n_op_types - 1].name, "communication") ||
	      a.op_types[a.n_op_types - 1].cpu_total_ms == 0);

	json_t *j = analysis_to_json(&a);
	json_t *types = json_object_get(j, "op_types");
	CHECK_EQ_INT(json_array_size(types), 12);
	CHECK(!strcmp(json_string_value(json_object_get(j, "op_sort")), "cpu"));
	json_t *first = json_array_get(types, 0);
	CHECK_NEAR(json_real_value(json_object_get(first, "self_cpu_ms")), 0.090, 1e-9);
	CHECK_NEAR(json_real_value(json_object_get(first, "gpu_pct_of_step")), 9.5, 1e-9);
	json_decref(j);
	analysis_free(&a);
	trace_free(&t);
}

/* Occupancy worked out from the SM's limits. H100 (9.0, 132 SMs), 256 threads = 8
 * warps a block: 64 registers a thread is 2048 a warp, 32 warps by registers, 4
 * blocks, 32 of 64 warps: 50%; a grid of 132 blocks gives each SM one: 12.5%.
 * 48 KiB of shared memory: 228 KiB / 49 KiB = 4 blocks, 50%; 100 KiB: 2, 25%.
 * 255 registers: 8192 a warp, 8 warps, 1 block, 12.5%. Turing (7.5), 1024 threads
 * and 32 registers: 1 block of 32 warps, all of them: 100%. */
TEST(analysis_occupancy_estimates)
{
	double th, ach;
	int block256[3] = { 256, 1, 1 }, block1024[3] = { 32, 32, 1 };
	int grid_many[3] = { 1056, 1, 1 }, grid_one[3] = { 66, 2, 1 };
	analysis_occupancy(9, 0, 132, grid_many, block256, 64, 0, &th, &ach);
	CHECK_NEAR(th, 0.5, 1e-12);
	CHECK_NEAR(ach, 0.5, 1e-12);
	analysis_occupancy(9, 0, 132, grid_one, block256, 64, 0, &th, &ach);
	CHECK_NEAR(ach, 0.125, 1e-12);
	analysis_occupancy(9, 0, 132, grid_many, block256, 32, 48 * 1024, &th, &ach);
	CHECK_NEAR(th, 0.5, 1e-12);
	analysis_occupancy(9, 0, 132, grid_many, block256, 32, 100 * 1024, &th, &ach);
	CHECK_NEAR(th, 0.25, 1e-12);
	analysis_occupancy(9, 0, 132, grid_many, block256, 255, 0, &th, &ach);
	CHECK_NEAR(th, 0.125, 1e-12);
	analysis_occupancy(7, 5, 0, grid_many, block1024, 32, 0, &th, &ach);
	CHECK_NEAR(th, 1.0, 1e-12);
	CHECK_NEAR(ach, -1, 0); /* no SM count: no estimate of what the grid fills */
	analysis_occupancy(6, 1, 28, grid_many, block256, 32, 0, &th, &ach);
	CHECK(th == -1 && ach == -1); /* a compute capability without a table row */
	analysis_occupancy(9, 0, 132, grid_many, block256, 0, 0, &th, &ach);
	CHECK(th == -1 && ach == -1); /* registers unknown (a trace without them) */
}

/* Kernels by name and launch configuration, with the registers the writer keeps and
 * the reader gives back, and the layers' op types and shapes across a file. */
TEST(analysis_kernel_configs_round_trip)
{
	struct trace t, back;
	struct analysis a;
	build_stage_trace(&t);
	t.meta.cc_major = 9;
	t.meta.sm_count = 132;
	for (size_t i = 0; i < t.n_gpu; i++)
		if (!strcmp(t.gpu[i].name, "conv_fwd")) {
			t.gpu[i].registers = 64;
			t.gpu[i].shared_bytes = 4096;
			t.gpu[i].block[0] = 256;
		}
	char path[600];
	snprintf(path, sizeof(path), "%s/kconf.json", test_tmpdir());
	CHECK_EQ_INT(chrome_trace_write(&t, path), 0);
	CHECK_EQ_INT(chrome_trace_read(path, &back), 0);
	CHECK_EQ_INT(back.n_layers, 3);
	CHECK_EQ_INT(analysis_run(&back, &a), 0);
	CHECK(a.n_kconf > 0);
	const struct analysis_kconf *k = &a.kconf[0];
	CHECK(!strcmp(k->name, "conv_fwd"));
	CHECK_EQ_INT(k->calls, 1);
	CHECK_NEAR(k->total_ms, 0.190, 1e-9);
	CHECK_NEAR(k->mean_us, 190, 1e-6);
	CHECK_EQ_INT(k->grid[0], 80);
	CHECK_EQ_INT(k->block[0], 256);
	CHECK_EQ_INT(k->registers, 64);
	CHECK_EQ_INT(k->shared_bytes, 4096);
	/* 4 blocks by registers; 80 blocks over 132 SMs leave each 0.61 of one */
	CHECK_NEAR(k->theoretical_occupancy, 0.5, 1e-12);
	CHECK_NEAR(k->achieved_occupancy, 80.0 / 132 * 8 / 64, 1e-12);
	const struct analysis_oprow *o = row_find(a.op_layers, a.n_op_layers, "fc");
	CHECK(o && !strcmp(o->shapes, "[[8, 2048]]"));
	check_row(a.op_types, a.n_op_types, "conv backward", 1, 85, 100, 60);
	analysis_free(&a);
	trace_free(&back);
	trace_free(&t);
}

/* HTA's figures on the trace above, in us. HTA keeps work with a launch (not the
 * memset or the mystery kernel) launched before the last step's start.
 *   span       memcpy's 20 to sgd's 860                                  = 840
 *   busy       [20,370) + [420,720) + [810,860)                          = 700
 *   idle       840 - 700                                                 = 140
 *   compute    [110,370) + [420,660) + [810,860)                         = 550
 *   non-compute 700 - 550 = 150; memory 100, communication 170; compute overlaps
 *   the memcpy [110,120) = 10 and the nccl kernel [550,660) = 110
 * Stream 7: conv_fwd, the loss, wgrad, dgrad, the filter gradient, sgd; its gaps
 * 300-350, 370-420, 660-810 each follow a launch after the previous end: host
 * wait 250. Launch delays (start less the call's end, at least 0): 0, 35, 5, 85,
 * 115, 0: mean 40, median 20, max 115. */
TEST(analysis_hta_known)
{
	struct trace t;
	struct analysis a;
	build_stage_trace(&t);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	const struct analysis_hta *h = &a.hta;
	CHECK(h->valid);
	CHECK_NEAR(h->span_us, 840, 1e-9);
	CHECK_NEAR(h->idle_us, 140, 1e-9);
	CHECK_NEAR(h->compute_us, 550, 1e-9);
	CHECK_NEAR(h->non_compute_us, 150, 1e-9);
	CHECK_NEAR(h->memory_us, 100, 1e-9);
	CHECK_NEAR(h->communication_us, 170, 1e-9);
	CHECK_NEAR(h->other_us, 0, 1e-9);
	CHECK_NEAR(h->compute_memory_overlap_us, 10, 1e-9);
	CHECK_NEAR(h->compute_comm_overlap_us, 110, 1e-9);
	CHECK_EQ_INT(h->n_streams, 4);
	const struct analysis_stream *s = &h->streams[0];
	CHECK_EQ_INT(s->stream, 7);
	CHECK_EQ_INT(s->kernels, 6);
	CHECK_NEAR(s->busy_us, 500, 1e-9);
	CHECK_NEAR(s->idle_host_wait_us, 250, 1e-9);
	CHECK_NEAR(s->idle_kernel_wait_us + s->idle_other_us, 0, 1e-9);
	CHECK_EQ_INT(s->launches, 6);
	CHECK_NEAR(s->launch_delay_mean_us, 40, 1e-9);
	CHECK_NEAR(s->launch_delay_median_us, 20, 1e-9);
	CHECK_NEAR(s->launch_delay_max_us, 115, 1e-9);
	CHECK_EQ_INT(h->streams[1].stream, 10);
	json_t *j = analysis_to_json(&a);
	json_t *tb = json_object_get(json_object_get(j, "hta"), "temporal_breakdown");
	CHECK_NEAR(json_real_value(json_object_get(tb, "idle_us")), 140, 1e-9);
	json_decref(j);
	analysis_free(&a);
	trace_free(&t);
}

/* A torch.profiler trace: no stage annotations and no layer table; its backward ops
 * are named as autograd names them, and their kernels are backward's. */
TEST(analysis_device_stages_torch_names)
{
	struct trace t;
	struct analysis a;
	trace_init(&t);
	t.base_ns = BASE;
	range_us(&t, "ProfilerStep#4", "user_annotation", 0, 100, 0, 1);
	range_us(&t, "aten::conv2d", "cpu_op", 0, 10, 0, 2);
	range_us(&t, "cudaLaunchKernel", "cuda_runtime", 2, 4, 1, 2);
	gpu_us(&t, "implicit_gemm", TRACE_KERNEL, 7, 10, 40, 1);
	range_us(&t, "aten::convolution_backward", "cpu_op", 20, 30, 0, 3);
	range_us(&t, "cudaLaunchKernel", "cuda_runtime", 22, 24, 2, 3);
	gpu_us(&t, "dgrad_kernel", TRACE_KERNEL, 7, 40, 70, 2);
	struct trace_step s = { 4, BASE, BASE + 100 * US, 0 };
	CHECK_EQ_INT(trace_add_step(&t, &s), 0);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	CHECK_NEAR(a.steps[0].device_ms[DSTAGE_FORWARD], 0.030, 1e-9);
	CHECK_NEAR(a.steps[0].device_ms[DSTAGE_BACKWARD], 0.030, 1e-9);
	CHECK_NEAR(a.steps[0].device_ms[DSTAGE_IDLE], 0.040, 1e-9);
	/* without a layer table the op table groups by the range's own name */
	check_row(a.op_types, a.n_op_types, "aten::convolution_backward", 1, 8, 10, 30);
	analysis_free(&a);
	trace_free(&t);
}
