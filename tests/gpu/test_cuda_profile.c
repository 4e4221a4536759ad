/* gpuperf profile on the GPU (issue 22): what only CUPTI gives. Each step's GPU time
 * by stage sums to the step, the op tables hold the convolutions' GPU time, kernels
 * carry their registers (and so an occupancy estimate), the memory timeline peaks at
 * what the plan allocates, and HTA's figures are filled. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/trace.h"
#include "data/pinned.h"
#include "gpu/tracer.h"
#include "net_util.h"

static json_t *row_named(json_t *rows, const char *name)
{
	for (size_t i = 0; i < json_array_size(rows); i++)
		if (!strcmp(json_string_value(json_object_get(json_array_get(rows, i), "name")), name))
			return json_array_get(rows, i);
	return NULL;
}

/* Load file name of profile folder dir; NULL (a failed check) when it does not parse. */
static json_t *profile_json(const char *dir, const char *name)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	CHECK_MSG(j != NULL, "%s: %s", path, err.text);
	return j;
}

/* Run `gpuperf profile ARGS --device cuda` into a folder named sub of a new temporary
 * folder (its path in dir, of cap bytes, when dir is not NULL) and load its
 * analysis.json; NULL (a failed check) when either fails. */
static json_t *profile_analysis(const char *sub, const char *args, char *dir, size_t cap)
{
	static char out[65536];
	char own[512], cmd[1024];
	if (!dir) {
		dir = own;
		cap = sizeof(own);
	}
	snprintf(dir, cap, "%s/%s", test_tmpdir(), sub); /* (each call: a new folder) */
	snprintf(cmd, sizeof(cmd), "%s profile %s --device cuda --out '%s'", test_bin(), args, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "profile failed (%d): %.3000s", rc, out);
	if (rc)
		return NULL;
	return profile_json(dir, "analysis.json");
}

TEST(cuda_profile_gpu_stages_tables_and_memory)
{
	NEED_GPU();
	json_t *a = profile_analysis("cuda_prof", "--model resnet18 --size 64 --batch 16 --classes 10 "
						  "--steps 3 --baseline-steps 2 --record-shapes", NULL, 0);
	if (!a)
		return;
	CHECK(!strcmp(json_string_value(json_object_get(a, "device_time_source")), "gpu"));
	json_t *steps = json_object_get(a, "steps");
	CHECK_EQ_INT(json_array_size(steps), 3);
	for (size_t i = 0; i < json_array_size(steps); i++) {
		json_t *st = json_array_get(steps, i), *v;
		json_t *dev = json_object_get(st, "device_stage_ms");
		const char *k;
		double sum = 0, dur = json_real_value(json_object_get(st, "dur_ms"));
		json_object_foreach(dev, k, v)
			sum += json_real_value(v);
		CHECK_MSG(dur > 0 && fabs(sum - dur) <= 0.01 * dur, "step %zu: %.4f of %.4f ms", i,
			  sum, dur);
		CHECK(json_real_value(json_object_get(dev, "forward")) > 0);
		CHECK(json_real_value(json_object_get(dev, "backward")) > 0);
		CHECK_MSG(json_real_value(json_object_get(dev, "optimizer")) > 0, "step %zu: %s", i,
			  json_dumps(dev, JSON_COMPACT)); /* (the message leaks: a failing test) */
	}
	json_t *types = json_object_get(a, "op_types");
	json_t *conv_f = row_named(types, "conv forward"), *conv_b = row_named(types, "conv backward");
	CHECK(conv_f && json_real_value(json_object_get(conv_f, "gpu_ms")) > 0);
	CHECK(conv_b && json_real_value(json_object_get(conv_b, "gpu_ms")) > 0);
	CHECK(row_named(types, "CUDA runtime") != NULL);
	json_t *layer = row_named(json_object_get(a, "op_layers"), "conv1");
	CHECK(layer && !strcmp(json_string_value(json_object_get(layer, "input_shapes")),
			       "[[16, 3, 64, 64]]"));
	json_t *k0 = json_array_get(json_object_get(a, "kernel_configs"), 0);
	CHECK(k0 && json_integer_value(json_object_get(k0, "registers_per_thread")) > 0);
	/* the live peak is at most what the plan allocates (equal where the layout is
	 * tight, as on the CPU; workspaces may leave the arena a little slack) */
	json_t *tl = json_object_get(a, "memory_timeline");
	long long peak = json_integer_value(json_object_get(json_object_get(tl, "peak"), "total_bytes"));
	long long plan = json_integer_value(json_object_get(tl, "plan_total_bytes"));
	long long arena = json_integer_value(json_object_get(tl, "arena_bytes"));
	/* set-up measures the convolution workspace and may take more than the plan
	 * predicted: the timeline counts what it took */
	long long ws = 0;
	json_t *cats = json_object_get(tl, "categories");
	json_t *pk = json_array_get(json_object_get(tl, "points"),
				    json_integer_value(json_object_get(json_object_get(tl, "peak"), "index")));
	for (size_t c = 0; c < json_array_size(cats); c++)
		if (!strcmp(json_string_value(json_array_get(cats, c)), "workspace"))
			ws = json_integer_value(json_array_get(json_object_get(pk, "bytes"), c));
	printf("    memory timeline: peak %lld, plan %lld, arena %lld, workspace %lld bytes\n", peak,
	       plan, arena, ws);
	CHECK(peak > plan - arena && peak <= plan + ws);
	json_t *tb = json_object_get(json_object_get(a, "hta"), "temporal_breakdown");
	CHECK(json_real_value(json_object_get(tb, "compute_us")) > 0);
	json_decref(a);
}

/* Runtime calls land on the row of the thread that made them: a helper thread's
 * (the GPU decode thread's) on its own, the tracing thread's on trace.tid. Before,
 * every call went on the training thread's row and the analysis took a helper's
 * long stream waits for the loop's. */
struct helper_arg {
	int tid;
	int rc;
};

/* A profiled step's data stage uploads the synthetic batch again, from page-locked
 * memory as the loader's batches come: from malloc's pages the copy ran at about 6.7
 * GB/s, 23 of resnet18 bf16's 35 ms profiled step at batch 256 (s27-5, an H200), where
 * train takes 10 ms a step. 64 images of 224 x 224 in float: 38.5 MB a step, each
 * step's copies at 15 GB/s at least (pinned: PCIe 4 and 5 run 25-55). */
TEST(cuda_profile_uploads_the_synthetic_batch_from_pinned_memory)
{
	NEED_GPU();
	json_t *a = profile_analysis("cuda_prof_h2d", "--model resnet18 --batch 64 --classes 10 --steps 3 "
					"--baseline-steps 1", NULL, 0);
	if (!a)
		return;
	json_t *steps = json_object_get(a, "steps");
	double bytes = 64.0 * 3 * 224 * 224 * sizeof(float);
	CHECK_EQ_INT(json_array_size(steps), 3);
	for (size_t i = 0; i < json_array_size(steps); i++) {
		double ms = json_real_value(json_object_get(json_array_get(steps, i), "memcpy_ms"));
		double gbs = ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
		CHECK_MSG(ms > 0 && gbs >= 15.0, "step %zu: %.3f ms of copies for %.1f MB, %.1f GB/s", i, ms,
			  bytes / 1e6, gbs);
	}
	json_decref(a);
}

/* data_pin page-locks malloc's memory and data_unpin gives it back. */
TEST(cuda_data_pin_registers_and_releases_host_memory)
{
	NEED_GPU();
	size_t n = (size_t)8 << 20;
	char *p = malloc(n);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(!data_is_pinned(p));
	CHECK_MSG(data_pin(p, n) == 0, "%s", gp_errmsg());
	CHECK(data_is_pinned(p));
	CHECK(data_is_pinned(p + n - 1));
	data_unpin(p);
	CHECK(!data_is_pinned(p));
	free(p);
}

static void *helper_main(void *p)
{
	struct helper_arg *h = p;
	h->tid = (int)syscall(SYS_gettid);
	void *d = NULL;
	h->rc = cudaMalloc(&d, 4096) != cudaSuccess || cudaMemset(d, 0, 4096) != cudaSuccess ||
		cudaDeviceSynchronize() != cudaSuccess || cudaFree(d) != cudaSuccess;
	return NULL;
}

TEST(cuda_tracer_runtime_calls_on_their_threads_rows)
{
	NEED_GPU();
	struct trace t;
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(tracer_start(&t), 0);
	void *d = NULL;
	CHECK(cudaMalloc(&d, 4096) == cudaSuccess && cudaMemset(d, 1, 4096) == cudaSuccess);
	struct helper_arg h = { 0, 1 };
	pthread_t th;
	CHECK_EQ_INT(pthread_create(&th, NULL, helper_main, &h), 0);
	pthread_join(th, NULL);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	cudaFree(d);
	CHECK_EQ_INT(tracer_stop(), 0);
	CHECK_EQ_INT(h.rc, 0);
	int mine = 0, helper = 0, other = 0;
	for (size_t i = 0; i < t.n_ranges; i++) {
		if (t.ranges[i].cat != TRACE_CUDA_RUNTIME)
			continue;
		if (t.ranges[i].tid == t.tid)
			mine++;
		else if (t.ranges[i].tid == h.tid)
			helper++;
		else
			other++;
	}
	printf("      runtime calls: %d on the tracing thread (%d), %d on the helper (%d), %d elsewhere\n",
	       mine, t.tid, helper, h.tid, other);
	CHECK(mine >= 2);   /* its cudaMemset and cudaDeviceSynchronize at least */
	CHECK(helper >= 2); /* the helper's */
	trace_free(&t);
}

static cublasStatus_t product(cublasHandle_t h, int n, const void *a, void *c, const float *one, const float *zero)
{
	return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, one, a, CUDA_R_16BF, n, a, CUDA_R_16BF, n, zero, c,
			    CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* A kernel launched through the driver API (cuBLAS 12+ launches its nvjet kernels with
 * cuLaunchKernelEx) has its launch in the trace, as Kineto's cuda_driver, inside the
 * layer range it was made in: the tracer recorded runtime calls only, so those kernels
 * had no launching call and no layer, and a 16-bit MobileNetV2 profile put 3.3 ms a
 * step of its 1x1 products in "(no layer)" (s20-7). */
TEST(cuda_tracer_driver_launches_name_their_layer)
{
	NEED_GPU();
	const int n = 512;
	cublasHandle_t h = NULL;
	void *a = NULL, *c = NULL; /* bf16, as the 16-bit 1x1 convolutions' products */
	CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
	CHECK(cudaMalloc(&a, (size_t)n * n * 2) == cudaSuccess);
	CHECK(cudaMalloc(&c, (size_t)n * n * 2) == cudaSuccess);
	CHECK(cudaMemset(a, 0, (size_t)n * n * 2) == cudaSuccess);
	const float one = 1.0f, zero = 0.0f;
	/* once before tracing: cuBLAS's first call loads its kernels */
	CHECK(product(h, n, a, c, &one, &zero) == CUBLAS_STATUS_SUCCESS);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	struct trace t;
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(tracer_start(&t), 0);
	CHECK_EQ_INT(trace_range_push(&t, "product", "cpu_op"), 0);
	uint64_t op = t.ranges[t.n_ranges - 1].external_id;
	tracer_op_push(op);
	CHECK(product(h, n, a, c, &one, &zero) == CUBLAS_STATUS_SUCCESS);
	tracer_op_pop();
	CHECK_EQ_INT(trace_range_pop(&t), 0);
	CHECK(cudaDeviceSynchronize() == cudaSuccess);
	CHECK_EQ_INT(tracer_stop(), 0);
	int kernels = 0, launched = 0, in_op = 0, driver = 0;
	for (size_t i = 0; i < t.n_gpu; i++) {
		if (t.gpu[i].cat != TRACE_KERNEL)
			continue;
		kernels++;
		for (size_t j = 0; j < t.n_ranges; j++) {
			const struct trace_range *r = &t.ranges[j];
			if (!trace_cat_is_api(r->cat) || r->correlation != t.gpu[i].correlation)
				continue;
			launched++;
			in_op += r->external_id == op;
			driver += r->cat == TRACE_CUDA_DRIVER;
			printf("      %.60s launched by %s (%s), layer id %llu of %llu\n", t.gpu[i].name, r->name,
			       trace_cat_name(r->cat), (unsigned long long)r->external_id, (unsigned long long)op);
			break;
		}
	}
	CHECK_MSG(kernels > 0, "no kernel traced");
	CHECK_MSG(launched == kernels, "%d of %d kernels have their launching call", launched, kernels);
	CHECK_MSG(in_op == kernels, "%d of %d kernels are in their layer", in_op, kernels);
	printf("      %d kernels, %d launched through the driver API\n", kernels, driver);
	/* cuBLAS's Hopper kernels go through cuLaunchKernelEx: this test is about them */
	CHECK_MSG(driver > 0, "no kernel launched through the driver API (cuBLAS changed?)");
	trace_free(&t);
	cudaFree(a);
	cudaFree(c);
	if (h)
		cublasDestroy(h);
}

/* The own 16-bit depthwise kernels' names say their direction, by which profile's op
 * tables split a convolution's backward into data and weight gradient (conv_bwd_part,
 * src/report/analysis_ops.c): profiled in bf16 at a size where the tiled kernels run,
 * every kernel of the trace named dwh_ or dwt_ names fwd, bwd_data or filter, the
 * tiled kernels of all three directions ran, and the data-gradient row has GPU time.
 * The tiled backward-data kernels were first named dwt_fwd_kernel<..., true> and
 * dwt_bwd2_kernel, and their time stayed in `conv backward` alone. (The first version
 * of this test read analysis.json's kernel_configs, which holds only the ten longest,
 * none of them depthwise at this size: it found no tiled kernel on the H200, s20-1.) */
TEST(cuda_profile_depthwise_kernels_name_their_direction)
{
	NEED_GPU();
	char dir[512];
	json_t *a = profile_analysis("cuda_prof_dw", "--model mobilenet_v2 --precision bf16 --size 64 "
						     "--batch 16 --classes 10 --steps 2 --baseline-steps 1",
				     dir, sizeof(dir));
	if (!a)
		return;
	json_t *tr = profile_json(dir, "profiler_trace.json");
	json_t *ev = json_object_get(tr, "traceEvents");
	int tiled[3] = { 0, 0, 0 }, dw = 0;
	for (size_t i = 0; i < json_array_size(ev); i++) {
		json_t *e = json_array_get(ev, i);
		const char *cat = json_string_value(json_object_get(e, "cat"));
		const char *name = json_string_value(json_object_get(e, "name"));
		if (!cat || strcmp(cat, "kernel") || !name || (!strstr(name, "dwh_") && !strstr(name, "dwt_")))
			continue;
		dw++;
		int fwd = strstr(name, "fwd") != NULL, bwd = strstr(name, "bwd_data") != NULL;
		int filt = strstr(name, "filter") != NULL;
		CHECK_MSG(fwd + bwd + filt == 1, "a depthwise kernel that names no one direction: %s", name);
		if (strstr(name, "dwt_"))
			tiled[fwd ? 0 : bwd ? 1 : 2] += fwd + bwd + filt == 1;
	}
	printf("      %d depthwise kernels in the trace; tiled: %d forward, %d backward data, %d filter\n", dw,
	       tiled[0], tiled[1], tiled[2]);
	CHECK_MSG(tiled[0] > 0 && tiled[1] > 0 && tiled[2] > 0, "tiled kernels: %d forward, %d backward data, %d filter",
		  tiled[0], tiled[1], tiled[2]);
	json_t *dg = row_named(json_object_get(a, "op_types"), "conv data gradient (GPU)");
	CHECK(dg && json_real_value(json_object_get(dg, "gpu_ms")) > 0);
	json_decref(tr);
	json_decref(a);
}
