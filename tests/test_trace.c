/* The trace model, the Chrome trace writer and reader, and the analysis on a
 * hand-built step whose breakdown is worked out in the comments. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
#include "core/trace.h"
#include "test.h"

#define MS 1000000LL
#define US 1000LL
#define BASE 5000000000LL

static void add_range(struct trace *t, const char *name, const char *cat, double lo_ms,
		      double hi_ms, uint64_t corr, uint64_t ext)
{
	struct trace_range r = { .name = name, .cat = (enum trace_cat)trace_cat_parse(cat),
				 .tid = 77, .start_ns = BASE + llround(lo_ms * MS),
				 .end_ns = BASE + llround(hi_ms * MS), .correlation = corr,
				 .external_id = ext };
	CHECK_EQ_INT(trace_add_range(t, &r), 0);
}

static void add_gpu(struct trace *t, const char *name, enum trace_cat cat, double lo_ms,
		    double hi_ms, uint64_t corr)
{
	struct trace_gpu g = { .name = name, .cat = cat, .device = 0, .stream = 7,
			       .start_ns = BASE + llround(lo_ms * MS),
			       .end_ns = BASE + llround(hi_ms * MS), .correlation = corr,
			       .grid = { 64, 2, 1 }, .block = { 256, 1, 1 }, .bytes = 4096 };
	CHECK_EQ_INT(trace_add_gpu(t, &g), 0);
}

/* One 10 ms step. Priority breakdown (ms):
 *   kernel  [2.5,5.0) + [6.0,6.5)                      = 3.0
 *   memcpy  [1.5,2.5), not under a kernel              = 1.0
 *   runtime [5.1,5.2) (the others lie under GPU work)  = 0.1
 *   data    [0,2) minus the memcpy's [1.5,2)           = 1.5
 *   cpu     [2,9) minus everything above               = 3.4
 *   idle    [9,10)                                     = 1.0
 * GPU busy 4.0 ms (share 0.4); kernels 2, 1, 0.5 ms (median 1000 us). */
static void build_known(struct trace *t)
{
	trace_init(t);
	t->base_ns = BASE;
	t->meta.pid = 4242;
	t->tid = 77;
	snprintf(t->meta.model, sizeof(t->meta.model), "toy");
	snprintf(t->meta.gpu_name, sizeof(t->meta.gpu_name), "Test GPU \"A\"");
	t->meta.batch = 32;
	t->meta.cc_major = 8;
	add_range(t, "ProfilerStep#1", "user_annotation", 0, 10, 0, 1);
	add_range(t, "data", "user_annotation", 0, 2, 0, 2);
	add_gpu(t, "Memcpy HtoD", TRACE_GPU_MEMCPY, 1.5, 2.5, 0);
	add_range(t, "forward", "user_annotation", 2, 5, 0, 3);
	add_range(t, "conv1", "cpu_op", 2, 3, 0, 10);
	add_range(t, "cudaLaunchKernel", "cuda_runtime", 2.1, 2.2, 1, 10);
	add_gpu(t, "conv_fwd", TRACE_KERNEL, 2.5, 4.5, 1);
	add_range(t, "fc", "cpu_op", 3, 4, 0, 11);
	add_range(t, "cudaLaunchKernel", "cuda_runtime", 3.1, 3.2, 2, 11);
	add_gpu(t, "_Z11gemm_kernelPKfPf", TRACE_KERNEL, 4.0, 5.0, 2);
	add_range(t, "backward", "user_annotation", 5, 8, 0, 4);
	add_range(t, "conv1", "cpu_op", 5, 6, 0, 12);
	add_range(t, "cudaLaunchKernel", "cuda_runtime", 5.1, 5.2, 3, 12);
	add_gpu(t, "conv_bwd", TRACE_KERNEL, 6.0, 6.5, 3);
	add_range(t, "optimizer", "user_annotation", 8, 9, 0, 5);
	struct trace_step s = { 1, BASE, BASE + 10 * MS, 2 * MS };
	CHECK_EQ_INT(trace_add_step(t, &s), 0);
	CHECK_EQ_INT(trace_add_mem(t, BASE + 2 * MS, 100 << 20, 100 << 20, "activations", "conv1"), 0);
	CHECK_EQ_INT(trace_add_mem(t, BASE + 3 * MS, 150 << 20, 50 << 20, "activations", "fc"), 0);
	CHECK_EQ_INT(trace_add_mem(t, BASE + 5 * MS + MS / 2, 130 << 20, -(20 << 20), "activations", "conv1"), 0);
	CHECK_EQ_INT(trace_add_mem(t, BASE + 6 * MS, 170 << 20, 40 << 20, "workspace", "conv1"), 0);
}

static const struct analysis_advice *find_advice(const struct analysis *a, const char *rule)
{
	for (int i = 0; i < a->n_advice; i++)
		if (!strcmp(a->advice[i].rule, rule))
			return &a->advice[i];
	return NULL;
}

static void check_known_analysis(const struct analysis *a)
{
	CHECK_EQ_INT(a->n_steps, 1);
	if (a->n_steps != 1)
		return;
	const struct analysis_step *s = &a->steps[0];
	CHECK_NEAR(s->dur_ms, 10.0, 1e-9);
	CHECK_NEAR(s->part_ms[PART_KERNEL], 3.0, 1e-9);
	CHECK_NEAR(s->part_ms[PART_MEMCPY], 1.0, 1e-9);
	CHECK_NEAR(s->part_ms[PART_MEMSET], 0.0, 1e-9);
	CHECK_NEAR(s->part_ms[PART_RUNTIME], 0.1, 1e-9);
	CHECK_NEAR(s->part_ms[PART_DATA], 1.5, 1e-9);
	CHECK_NEAR(s->part_ms[PART_CPU], 3.4, 1e-9);
	CHECK_NEAR(s->part_ms[PART_IDLE], 1.0, 1e-9);
	CHECK_NEAR(s->gpu_busy_ms, 4.0, 1e-9);
	CHECK_NEAR(s->stage_ms[STAGE_DATA], 2.0, 1e-9);
	CHECK_NEAR(s->stage_ms[STAGE_FORWARD], 3.0, 1e-9);
	CHECK_NEAR(s->stage_ms[STAGE_BACKWARD], 3.0, 1e-9);
	CHECK_NEAR(s->stage_ms[STAGE_OPTIMIZER], 1.0, 1e-9);
	CHECK_NEAR(a->gpu_busy_share, 0.4, 1e-9);
	CHECK_NEAR(a->data_wait_share, 0.2, 1e-9);
	CHECK_EQ_INT(a->n_kernels, 3);
	CHECK_NEAR(a->kernel_total_ms, 3.5, 1e-9);
	CHECK_NEAR(a->kernel_median_us, 1000.0, 1e-6);

	CHECK_EQ_INT(a->n_top_cpu, 2);
	CHECK(!strcmp(a->top_cpu[0].name, "conv1"));
	CHECK_EQ_INT(a->top_cpu[0].count, 2);
	CHECK_NEAR(a->top_cpu[0].total, 2.0, 1e-9);
	CHECK_NEAR(a->top_cpu[0].mean, 1.0, 1e-9);
	CHECK_EQ_INT(a->n_top_gpu, 2);
	CHECK(!strcmp(a->top_gpu[0].name, "conv1"));
	CHECK_NEAR(a->top_gpu[0].total, 2.5, 1e-9);
	CHECK(!strcmp(a->top_gpu[1].name, "fc"));
	CHECK_NEAR(a->top_gpu[1].total, 1.0, 1e-9);
	/* kernels by name, a mangled one demangled to its function */
	CHECK_EQ_INT(a->n_top_kernels, 3);
	CHECK(!strcmp(a->top_kernels[0].name, "conv_fwd"));
	CHECK_NEAR(a->top_kernels[0].total, 2.0, 1e-9);
	CHECK(!strcmp(a->top_kernels[1].name, "gemm_kernel"));
	CHECK_NEAR(a->top_kernels[1].total, 1.0, 1e-9);
	CHECK(!strcmp(a->top_kernels[2].name, "conv_bwd"));
	CHECK_EQ_INT(a->n_top_mem, 2);
	CHECK(!strcmp(a->top_mem[0].name, "conv1"));
	CHECK_NEAR(a->top_mem[0].total, 140 << 20, 0.5);
	CHECK_NEAR(a->mem_peak_bytes, 170 << 20, 0.5);
	CHECK_EQ_INT(a->n_mem, 4);
	if (a->n_mem == 4)
		CHECK_NEAR(a->mem_t_ms[2], 5.5, 1e-9);

	const struct analysis_advice *ad = find_advice(a, "loader_workers");
	CHECK(ad && fabs(ad->value - 0.2) < 1e-9);
	ad = find_advice(a, "amp");
	CHECK(ad && fabs(ad->value - 8.0) < 1e-9);
	ad = find_advice(a, "bigger_batch");
	CHECK(ad && fabs(ad->value - 0.4) < 1e-9);
	CHECK(find_advice(a, "cuda_graphs") == NULL);
	/* each with its estimate: the wait hidden 1 / (1 - 0.2); twice the batch at
	 * 40% busy 2 / 1.4; the 1 ms copy (no kernel beside it) of the 10 ms step gone */
	ad = find_advice(a, "loader_workers");
	CHECK(ad && fabs(ad->est_speedup - 1.25) < 1e-9);
	ad = find_advice(a, "bigger_batch");
	CHECK(ad && fabs(ad->est_speedup - 2 / 1.4) < 1e-9);
	ad = find_advice(a, "h2d_copies");
	CHECK(ad && fabs(ad->value - 0.1) < 1e-9 && fabs(ad->est_speedup - 1 / 0.9) < 1e-9);
	ad = find_advice(a, "amp");
	CHECK(ad && fabs(ad->est_speedup - advice_est_tensor_cores(a->ev.math_share)) < 1e-12);
	CHECK_EQ_INT(a->n_advice, 4);
}

TEST(trace_analysis_known_step)
{
	struct trace t;
	struct analysis a;
	build_known(&t);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	check_known_analysis(&a);
	json_t *j = analysis_to_json(&a);
	CHECK(j != NULL);
	CHECK_NEAR(json_real_value(json_object_get(j, "gpu_busy_share")), 0.4, 1e-9);
	CHECK_EQ_INT(json_array_size(json_object_get(j, "advice")), 4);
	json_decref(j);
	analysis_free(&a);
	trace_free(&t);
}

/* 100 kernels of 10 us in a 10 ms step: the GPU idles 90% on launch overhead. */
TEST(trace_analysis_cuda_graph_rule)
{
	struct trace t;
	struct analysis a;
	trace_init(&t);
	t.base_ns = BASE;
	snprintf(t.meta.precision, sizeof(t.meta.precision), "bf16");
	t.meta.cc_major = 9;
	add_range(&t, "ProfilerStep#3", "user_annotation", 0, 10, 0, 1);
	for (int i = 0; i < 100; i++)
		add_gpu(&t, "tiny", TRACE_KERNEL, 0.1 * i, 0.1 * i + 0.01, 0);
	struct trace_step s = { 3, BASE, BASE + 10 * MS, 0 };
	CHECK_EQ_INT(trace_add_step(&t, &s), 0);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	const struct analysis_advice *ad = find_advice(&a, "cuda_graphs");
	CHECK(ad && fabs(ad->value - 10.0) < 1e-6);
	CHECK(find_advice(&a, "amp") == NULL); /* bf16 already */
	CHECK(find_advice(&a, "loader_workers") == NULL);
	CHECK_NEAR(a.gpu_idle_share, 0.9, 1e-9);
	CHECK_NEAR(a.steps[0].part_ms[PART_KERNEL], 1.0, 1e-9);
	CHECK(!strcmp(a.top_gpu[0].name, "(no layer)"));
	analysis_free(&a);
	trace_free(&t);
}

TEST(trace_analysis_needs_steps)
{
	struct trace t;
	struct analysis a;
	trace_init(&t);
	CHECK(analysis_run(&t, &a) == GP_EFORMAT);
	trace_free(&t);
}

TEST(trace_range_push_pop)
{
	struct trace t;
	trace_init(&t);
	CHECK_EQ_INT(trace_reserve(&t, 4096, 16, 16), 0);
	const struct trace_range *before = t.ranges;
	CHECK_EQ_INT(trace_step_begin(&t, 5), 0);
	CHECK_EQ_INT(trace_range_push(&t, "forward", "user_annotation"), 0);
	for (int i = 0; i < 1000; i++) {
		CHECK_EQ_INT(trace_range_push(&t, i % 2 ? "conv1" : "bn1", "cpu_op"), 0);
		CHECK_EQ_INT(trace_range_push(&t, "cudaLaunchKernel", "cuda_runtime"), 0);
		CHECK_EQ_INT(trace_range_pop(&t), 0);
		CHECK_EQ_INT(trace_range_pop(&t), 0);
	}
	CHECK_EQ_INT(trace_range_pop(&t), 0);
	CHECK_EQ_INT(trace_step_end(&t, 123), 0);
	CHECK(t.ranges == before); /* reserved: no reallocation while pushing */
	CHECK_EQ_INT(t.n_ranges, 2002);
	CHECK_EQ_INT(t.depth, 0);
	/* Equal names share one interned copy. */
	CHECK(t.ranges[2].name == t.ranges[6].name);
	CHECK(!strcmp(t.ranges[0].name, "ProfilerStep#5"));
	/* A runtime call links to the layer range it ran in. */
	CHECK_EQ_INT(t.ranges[3].external_id, t.ranges[2].external_id);
	CHECK(t.ranges[2].external_id != t.ranges[4].external_id);
	CHECK(t.ranges[3].start_ns >= t.ranges[2].start_ns && t.ranges[3].end_ns <= t.ranges[2].end_ns);
	CHECK_EQ_INT(t.n_steps, 1);
	CHECK_EQ_INT(t.steps[0].step, 5);
	CHECK_EQ_INT(t.steps[0].data_wait_ns, 123);
	CHECK_EQ_INT(t.steps[0].end_ns, t.ranges[0].end_ns);
	CHECK(t.steps[0].end_ns >= t.ranges[1].end_ns);
	CHECK(trace_range_pop(&t) == GP_EINVAL);
	CHECK(trace_range_push(&t, "x", "kernel") == GP_EINVAL);
	CHECK(trace_step_end(&t, 0) == GP_EINVAL);
	trace_free(&t);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc(n + 1);
	if (s && fread(s, 1, n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

TEST(trace_chrome_schema)
{
	struct trace t;
	build_known(&t);
	char path[512];
	snprintf(path, sizeof(path), "%s/trace.json", test_tmpdir());
	CHECK_EQ_INT(chrome_trace_write(&t, path), 0);
	char *text = slurp(path);
	CHECK(text != NULL);
	if (!text)
		goto out;
	CHECK(strstr(text, "\"rank\": 0") != NULL);
	CHECK(strstr(text, "\"baseTimeNanoseconds\":5000000000") != NULL);
	json_error_t err;
	json_t *root = json_loads(text, 0, &err);
	CHECK_MSG(root != NULL, "trace is not JSON: line %d: %s", err.line, err.text);
	free(text);
	if (!root)
		goto out;
	CHECK_EQ_INT(json_integer_value(json_object_get(root, "schemaVersion")), 1);
	json_t *dev = json_array_get(json_object_get(root, "deviceProperties"), 0);
	CHECK(!strcmp(json_string_value(json_object_get(dev, "name")) ?: "", "Test GPU \"A\""));
	json_t *dist = json_object_get(root, "distributedInfo");
	CHECK_EQ_INT(json_integer_value(json_object_get(dist, "world_size")), 1);
	CHECK(!strcmp(json_string_value(json_object_get(root, "displayTimeUnit")) ?: "", "ms"));
	json_t *evs = json_object_get(root, "traceEvents");
	CHECK(json_is_array(evs));
	size_t i;
	json_t *ev;
	int n_x = 0, n_s = 0, n_f = 0, n_mem = 0, sorted = 1, bad_x = 0, n_loader = 0;
	double last_ts = -1;
	uint64_t s_ids[16], f_ids[16];
	json_array_foreach(evs, i, ev) {
		const char *ph = json_string_value(json_object_get(ev, "ph"));
		double ts = json_number_value(json_object_get(ev, "ts"));
		if (ts < last_ts)
			sorted = 0;
		last_ts = ts;
		if (!strcmp(ph, "X")) {
			n_x++;
			bad_x += !json_is_number(json_object_get(ev, "ts")) ||
				 !json_is_number(json_object_get(ev, "dur")) ||
				 !json_object_get(ev, "pid") || !json_object_get(ev, "tid");
			const char *cat = json_string_value(json_object_get(ev, "cat"));
			n_loader += !strcmp(json_string_value(json_object_get(ev, "name")),
					    CHROME_TRACE_DATALOADER);
			if (!strcmp(cat, "kernel")) {
				/* GPU rows: pid = device, tid = stream; the launching layer's id. */
				CHECK_EQ_INT(json_integer_value(json_object_get(ev, "pid")), 0);
				CHECK_EQ_INT(json_integer_value(json_object_get(ev, "tid")), 7);
				json_t *args = json_object_get(ev, "args");
				CHECK(json_integer_value(json_object_get(args, "External id")) >= 10);
				CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(args, "grid"), 0)), 64);
			}
		} else if (!strcmp(ph, "s") && n_s < 16) {
			CHECK(!strcmp(json_string_value(json_object_get(ev, "cat")), "ac2g"));
			s_ids[n_s++] = json_integer_value(json_object_get(ev, "id"));
		} else if (!strcmp(ph, "f") && n_f < 16) {
			CHECK(!strcmp(json_string_value(json_object_get(ev, "bp")) ?: "", "e"));
			f_ids[n_f++] = json_integer_value(json_object_get(ev, "id"));
		} else if (!strcmp(ph, "i") && !strcmp(json_string_value(json_object_get(ev, "name")), "[memory]")) {
			n_mem++;
		}
	}
	CHECK(sorted);
	CHECK_EQ_INT(bad_x, 0);
	/* 11 host ranges + 4 GPU activities + the step's data wait under the name
	 * TensorBoard's plugin takes as DataLoader time */
	CHECK_EQ_INT(n_x, 16);
	CHECK_EQ_INT(n_loader, 1);
	CHECK_EQ_INT(n_mem, 4);
	CHECK_EQ_INT(n_s, 3); /* the memcpy has no launch in this trace */
	CHECK_EQ_INT(n_f, 3);
	for (int a = 0; a < n_s; a++) {
		int found = 0;
		for (int b = 0; b < n_f; b++)
			found |= s_ids[a] == f_ids[b];
		CHECK_MSG(found, "flow start %llu has no finish", (unsigned long long)s_ids[a]);
	}
	json_decref(root);
out:
	trace_free(&t);
}

TEST(trace_chrome_round_trip)
{
	struct trace t, back;
	struct analysis a;
	build_known(&t);
	char path[512];
	snprintf(path, sizeof(path), "%s/rt.json", test_tmpdir());
	CHECK_EQ_INT(chrome_trace_write(&t, path), 0);
	CHECK_EQ_INT(chrome_trace_read(path, &back), 0);
	if (test_failed())
		goto free_t;
	CHECK_EQ_INT(back.n_ranges, t.n_ranges);
	CHECK_EQ_INT(back.n_gpu, t.n_gpu);
	CHECK_EQ_INT(back.n_mem, t.n_mem);
	CHECK_EQ_INT(back.n_steps, 1);
	CHECK_EQ_INT(back.meta.pid, 4242);
	CHECK_EQ_INT(back.meta.cc_major, 8);
	CHECK(!strcmp(back.meta.gpu_name, t.meta.gpu_name));
	CHECK(!strcmp(back.meta.model, "toy"));
	if (back.n_ranges == t.n_ranges) {
		/* The writer sorts by time; the original was built in time order too. */
		for (size_t i = 0; i < t.n_ranges; i++) {
			CHECK(!strcmp(back.ranges[i].name, t.ranges[i].name));
			CHECK_EQ_INT(back.ranges[i].cat, t.ranges[i].cat);
			CHECK_EQ_INT(back.ranges[i].start_ns, t.ranges[i].start_ns);
			CHECK_EQ_INT(back.ranges[i].end_ns, t.ranges[i].end_ns);
			CHECK_EQ_INT(back.ranges[i].correlation, t.ranges[i].correlation);
			CHECK_EQ_INT(back.ranges[i].external_id, t.ranges[i].external_id);
		}
	}
	if (back.n_gpu == t.n_gpu) {
		for (size_t i = 0; i < t.n_gpu; i++) {
			CHECK(!strcmp(back.gpu[i].name, t.gpu[i].name));
			CHECK_EQ_INT(back.gpu[i].start_ns, t.gpu[i].start_ns);
			CHECK_EQ_INT(back.gpu[i].end_ns, t.gpu[i].end_ns);
			CHECK_EQ_INT(back.gpu[i].stream, 7);
			CHECK_EQ_INT(back.gpu[i].correlation, t.gpu[i].correlation);
		}
		CHECK_EQ_INT(back.gpu[1].block[0], 256);
		CHECK_EQ_INT(back.gpu[0].bytes, 4096);
	}
	if (back.n_mem == 4) {
		CHECK_EQ_INT(back.mem[2].delta_bytes, -(20 << 20));
		CHECK(!strcmp(back.mem[3].category, "workspace"));
		CHECK(!strcmp(back.mem[3].layer, "conv1"));
	}
	if (back.n_steps == 1)
		CHECK_EQ_INT(back.steps[0].data_wait_ns, 2 * MS);
	/* The analysis of the file is the analysis of the trace. */
	CHECK_EQ_INT(analysis_run(&back, &a), 0);
	if (!test_failed()) {
		check_known_analysis(&a);
		analysis_free(&a);
	}
	trace_free(&back);
free_t:
	trace_free(&t);
}

TEST(trace_chrome_read_errors)
{
	struct trace t;
	char path[512];
	const char *dir = test_tmpdir();
	snprintf(path, sizeof(path), "%s/missing.json", dir);
	CHECK(chrome_trace_read(path, &t) == GP_EIO);
	snprintf(path, sizeof(path), "%s/bad.json", dir);
	FILE *f = fopen(path, "w");
	fputs("{\"traceEvents\": [", f);
	fclose(f);
	CHECK(chrome_trace_read(path, &t) == GP_EFORMAT);
	f = fopen(path, "w");
	fputs("{\"events\": []}", f);
	fclose(f);
	CHECK(chrome_trace_read(path, &t) == GP_EFORMAT);
	CHECK(strstr(gp_errmsg(), "traceEvents") != NULL);
}

TEST(trace_chrome_write_dir)
{
	struct trace t;
	build_known(&t);
	snprintf(t.meta.host, sizeof(t.meta.host), "hostA");
	char dir[512], log[4096], path[600];
	snprintf(dir, sizeof(dir), "%s/prof", test_tmpdir());
	CHECK_EQ_INT(chrome_trace_write_dir(&t, dir, log, sizeof(log)), 0);
	snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
	char *a = slurp(path), *b = slurp(log);
	CHECK(a && b);
	CHECK(strstr(log, "/profiler_logs/hostA_4242.") != NULL);
	CHECK(strstr(log, ".pt.trace.json") != NULL);
	free(a);
	free(b);
	trace_free(&t);
}

/* A kernel launched through the driver API (Kineto's cuda_driver: cuBLAS's and cuDNN's
 * runtime-compiled kernels) joins the layer its launch was made in, and the category
 * survives the Chrome trace's write and read: profile's tracer recorded runtime calls
 * only, so such kernels counted as "(no layer)". */
TEST(trace_driver_launch_joins_its_layer)
{
	struct trace t, back;
	struct analysis a;
	trace_init(&t);
	t.base_ns = BASE;
	t.tid = 77;
	t.meta.cc_major = 9;
	add_range(&t, "ProfilerStep#1", "user_annotation", 0, 10, 0, 1);
	add_range(&t, "forward", "user_annotation", 0, 9, 0, 2);
	add_range(&t, "features.1.conv.1", "cpu_op", 1, 3, 0, 10);
	add_range(&t, "cuLaunchKernelEx", "cuda_driver", 1.5, 1.6, 501, 10);
	add_gpu(&t, "nvjet_sm90_tst_32x512", TRACE_KERNEL, 2, 6, 501);
	struct trace_step s = { 1, BASE, BASE + 10 * MS, 0 };
	CHECK_EQ_INT(trace_add_step(&t, &s), 0);
	CHECK_EQ_INT(trace_cat_parse("cuda_driver"), TRACE_CUDA_DRIVER);
	CHECK(trace_cat_is_api(TRACE_CUDA_DRIVER) && trace_cat_is_api(TRACE_CUDA_RUNTIME) &&
	      !trace_cat_is_api(TRACE_CPU_OP));
	char path[512];
	snprintf(path, sizeof(path), "%s/driver.json", test_tmpdir());
	CHECK_EQ_INT(chrome_trace_write(&t, path), 0);
	CHECK_EQ_INT(chrome_trace_read(path, &back), 0);
	if (test_failed()) {
		trace_free(&t);
		return;
	}
	int driver = 0;
	for (size_t i = 0; i < back.n_ranges; i++)
		if (back.ranges[i].cat == TRACE_CUDA_DRIVER) {
			driver++;
			CHECK_EQ_INT(back.ranges[i].correlation, 501);
		}
	CHECK_EQ_INT(driver, 1);
	CHECK_EQ_INT(analysis_run(&back, &a), 0);
	if (!test_failed()) {
		CHECK_MSG(a.n_top_gpu >= 1 && !strcmp(a.top_gpu[0].name, "features.1.conv.1"),
			  "the kernel's layer: %s", a.n_top_gpu ? a.top_gpu[0].name : "none");
		CHECK_NEAR(a.top_gpu[0].total, 4.0, 1e-9);
		analysis_free(&a);
	}
	trace_free(&back);
	trace_free(&t);
}
