/* The committed sample trace (tests/data/sample_trace/profiler_trace.json): a
 * synthetic but realistic 3-step pattern written by our own writer. The test
 * regenerates it and checks the committed file is byte-for-byte current; run
 *   GPUPERF_REGEN_SAMPLE=1 build/gpuperf_tests trace_sample_current
 * to rewrite it. `gpuperf analyze` and HTA are then run on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/rng.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
#include "core/trace.h"
#include "test.h"

#define SAMPLE_DIR "tests/data/sample_trace"
#define US 1000LL

static const char *const layers[] = {
	"conv1", "bn1", "relu", "maxpool", "layer1.0.conv1", "layer1.0.bn1", "layer1.0.conv2",
	"layer1.0.bn2", "layer2.0.conv1", "layer2.0.bn1", "layer2.0.conv2", "layer2.0.bn2",
	"avgpool", "fc",
};
#define N_LAYERS (int)(sizeof(layers) / sizeof(layers[0]))

struct gen {
	struct trace *t;
	struct rng rng;
	int64_t host_ns, gpu_ns; /* the host thread's and the stream's clocks */
	uint64_t corr, ext;
	int64_t mem_bytes;
};

static int64_t jitter(struct gen *g, int64_t ns)
{
	return ns + (int64_t)(rng_uniform(&g->rng) * ns / 4);
}

static void gen_range(struct gen *g, const char *name, const char *cat, int64_t lo, int64_t hi,
		      uint64_t corr, uint64_t ext)
{
	struct trace_range r = { .name = name, .cat = (enum trace_cat)trace_cat_parse(cat),
				 .tid = 4242, .start_ns = lo, .end_ns = hi, .correlation = corr,
				 .external_id = ext };
	CHECK_EQ_INT(trace_add_range(g->t, &r), 0);
}

/* One launch from inside a layer range: a runtime call on the host, its GPU work on
 * stream 7 once the stream is free. */
static void gen_launch(struct gen *g, const char *kernel, enum trace_cat cat, int64_t dur_ns,
		       uint64_t ext, uint64_t bytes)
{
	int64_t lo = g->host_ns + 2 * US, hi = lo + jitter(g, 4 * US);
	uint64_t corr = ++g->corr;
	gen_range(g, cat == TRACE_KERNEL ? "cudaLaunchKernel" : "cudaMemcpyAsync", "cuda_runtime",
		  lo, hi, corr, ext);
	int64_t start = g->gpu_ns > hi + 3 * US ? g->gpu_ns : hi + 3 * US;
	struct trace_gpu k = { .name = kernel, .cat = cat, .device = 0, .stream = 7,
			       .start_ns = start, .end_ns = start + jitter(g, dur_ns),
			       .correlation = corr, .grid = { 128, 1, 1 }, .block = { 256, 1, 1 },
			       .registers = cat == TRACE_KERNEL ? 64 : 0, .bytes = bytes };
	CHECK_EQ_INT(trace_add_gpu(g->t, &k), 0);
	g->gpu_ns = k.end_ns;
	g->host_ns = hi + 1 * US;
}

static void gen_layer(struct gen *g, const char *name, int backward, int i)
{
	char full[80];
	snprintf(full, sizeof(full), "%s%s", name, backward ? ".backward" : "");
	const char *kernel = strstr(name, "conv") ? (backward ? "conv2d_dgrad_kernel" : "implicit_gemm_conv_kernel")
			     : strstr(name, "bn") ? (backward ? "bn_bwd_kernel" : "bn_fwd_train_kernel")
			     : strstr(name, "fc") ? "sgemm_128x64_nn" : "elementwise_kernel";
	int64_t work = strstr(name, "conv") ? 180 * US : strstr(name, "fc") ? 40 * US : 25 * US;
	uint64_t ext = ++g->ext;
	int64_t lo = g->host_ns;
	g->host_ns += 3 * US;
	gen_launch(g, kernel, TRACE_KERNEL, work * (backward ? 2 : 1), ext, 0);
	if (backward && strstr(name, "conv"))
		gen_launch(g, "conv2d_wgrad_kernel", TRACE_KERNEL, work, ext, 0);
	g->host_ns += jitter(g, 5 * US);
	gen_range(g, trace_intern(g->t, full), "cpu_op", lo, g->host_ns, 0, ext);
	/* Forward keeps each activation until its backward frees it. */
	int64_t act = (int64_t)(N_LAYERS - i) << 20;
	g->mem_bytes += backward ? -act : act;
	CHECK_EQ_INT(trace_add_mem(g->t, g->host_ns, g->mem_bytes, backward ? -act : act,
				   "activations", full), 0);
}

static void gen_annotation_close(struct gen *g, const char *name, int64_t lo, uint64_t ext)
{
	gen_range(g, name, "user_annotation", lo, g->host_ns, 0, ext);
}

/* Three steps of a small ResNet-like net: data wait and an input copy, forward over
 * the layers, backward in reverse, an optimizer of a few fused kernels, then a sync. */
static void sample_build(struct trace *t)
{
	/* Correlation ids as a long-running process has them (also keeps HTA 0.5 with
	 * pandas 3 from narrowing the column to int8). */
	struct gen g = { .t = t, .corr = 50000 };
	trace_init(t);
	t->base_ns = 1000000000000LL;
	t->meta.pid = 4242;
	t->tid = 4242;
	snprintf(t->meta.host, sizeof(t->meta.host), "sample-host");
	snprintf(t->meta.model, sizeof(t->meta.model), "resnet18");
	snprintf(t->meta.precision, sizeof(t->meta.precision), "fp32");
	snprintf(t->meta.gpu_name, sizeof(t->meta.gpu_name), "NVIDIA H100 80GB HBM3");
	t->meta.batch = 64;
	t->meta.cc_major = 9;
	t->meta.sm_count = 132;
	t->meta.gpu_mem_bytes = 85520809984ull;
	rng_seed(&g.rng, 7, 1);
	g.host_ns = g.gpu_ns = t->base_ns;
	g.mem_bytes = 45 << 20;
	/* what each layer is, for the op tables: the op type by its name */
	for (int i = 0; i < N_LAYERS; i++) {
		const char *op = strstr(layers[i], "conv") ? "conv2d"
				 : strstr(layers[i], "bn")  ? "batchnorm2d"
				 : !strcmp(layers[i], "relu") ? "relu"
				 : !strcmp(layers[i], "fc")   ? "linear"
							      : !strcmp(layers[i], "maxpool") ? "maxpool2d"
											      : "avgpool_global";
		CHECK_EQ_INT(trace_add_layer(t, layers[i], op, NULL), 0);
	}
	CHECK_EQ_INT(trace_add_mem(t, g.host_ns, g.mem_bytes, g.mem_bytes, "weights", NULL), 0);
	for (int step = 1; step <= 3; step++) {
		int64_t step_lo = g.host_ns, lo;
		uint64_t step_ext = ++g.ext, ext;
		lo = g.host_ns;
		ext = ++g.ext;
		g.host_ns += jitter(&g, step == 1 ? 2500 * US : 600 * US); /* waiting for the loader */
		int64_t wait = g.host_ns - lo;
		gen_launch(&g, "Memcpy HtoD (Pinned -> Device)", TRACE_GPU_MEMCPY, 180 * US, ext,
			   64ull * 3 * 224 * 224 * 4);
		gen_annotation_close(&g, "data", lo, ext);
		lo = g.host_ns;
		ext = ++g.ext;
		for (int i = 0; i < N_LAYERS; i++)
			gen_layer(&g, layers[i], 0, i);
		gen_annotation_close(&g, "forward", lo, ext);
		lo = g.host_ns;
		ext = ++g.ext;
		for (int i = N_LAYERS - 1; i >= 0; i--)
			gen_layer(&g, layers[i], 1, i);
		gen_annotation_close(&g, "backward", lo, ext);
		lo = g.host_ns;
		ext = ++g.ext;
		for (int k = 0; k < 3; k++)
			gen_launch(&g, "multi_tensor_sgd_kernel", TRACE_KERNEL, 30 * US, ext, 0);
		gen_annotation_close(&g, "optimizer", lo, ext);
		/* The step ends when the host has waited for the stream. */
		lo = g.host_ns;
		g.host_ns = (g.gpu_ns > g.host_ns ? g.gpu_ns : g.host_ns) + 5 * US;
		gen_range(&g, "cudaStreamSynchronize", "cuda_runtime", lo, g.host_ns, 0, 0);
		char name[32];
		snprintf(name, sizeof(name), "ProfilerStep#%d", step);
		gen_range(&g, name, "user_annotation", step_lo, g.host_ns, 0, step_ext);
		struct trace_step s = { step, step_lo, g.host_ns, wait };
		CHECK_EQ_INT(trace_add_step(t, &s), 0);
		g.host_ns += 20 * US;
	}
}

static char *slurp(const char *path, long *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc(*len + 1);
	if (s && fread(s, 1, *len, f) != (size_t)*len) {
		free(s);
		s = NULL;
	}
	if (s)
		s[*len] = 0;
	fclose(f);
	return s;
}

TEST(trace_sample_current)
{
	struct trace t;
	sample_build(&t);
	const char *regen = getenv("GPUPERF_REGEN_SAMPLE");
	char path[512];
	if (regen && !strcmp(regen, "1"))
		snprintf(path, sizeof(path), "%s/profiler_trace.json", SAMPLE_DIR);
	else
		snprintf(path, sizeof(path), "%s/profiler_trace.json", test_tmpdir());
	CHECK_EQ_INT(chrome_trace_write(&t, path), 0);
	trace_free(&t);
	long n_new = 0, n_old = 0;
	char *fresh = slurp(path, &n_new);
	char *committed = slurp(SAMPLE_DIR "/profiler_trace.json", &n_old);
	CHECK_MSG(committed != NULL, "missing " SAMPLE_DIR "/profiler_trace.json");
	CHECK(fresh != NULL);
	if (fresh && committed) {
		CHECK_MSG(n_new == n_old && !memcmp(fresh, committed, n_new),
			  "the committed sample is stale: regenerate it (see the file's head)");
		CHECK_LE(n_old, 200 * 1024);
	}
	free(fresh);
	free(committed);
}

TEST(trace_sample_analyze_command)
{
	char cmd[2048], out[16384], path[600];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "cp " SAMPLE_DIR "/profiler_trace.json '%s/' && %s analyze '%s'",
		 dir, test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "analyze failed (%d): %s", rc, out);
	CHECK(strstr(out, "step breakdown") != NULL);
	CHECK(strstr(out, "[amp]") != NULL);             /* fp32 on compute capability 9 */
	CHECK(strstr(out, "[loader_workers]") != NULL);  /* the first step waits 2.5 ms */
	CHECK(strstr(out, "layer2.0.conv2.backward") != NULL);
	snprintf(path, sizeof(path), "%s/profile_report.md", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/analysis.json", dir);
	json_error_t err;
	json_t *j = json_load_file(path, 0, &err);
	CHECK(j != NULL);
	CHECK_EQ_INT(json_array_size(json_object_get(j, "steps")), 3);
	double busy = json_real_value(json_object_get(j, "gpu_busy_share"));
	CHECK(busy > 0.3 && busy < 1.0);
	json_decref(j);
}

TEST(trace_analyze_command_errors)
{
	char cmd[1024], out[4096];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s analyze '%s/nope'", test_bin(), dir);
	CHECK(test_run(cmd, out, sizeof(out)) == 1);
	CHECK(strstr(out, "is not a directory") != NULL);
	snprintf(cmd, sizeof(cmd), "%s analyze '%s'", test_bin(), dir);
	CHECK(test_run(cmd, out, sizeof(out)) == 1);
	CHECK(strstr(out, "no profiler_trace.json") != NULL);
	snprintf(cmd, sizeof(cmd), "echo '{\"traceEvents\": [' > '%s/profiler_trace.json' && %s analyze '%s'",
		 dir, test_bin(), dir);
	CHECK(test_run(cmd, out, sizeof(out)) == 1);
	CHECK(strstr(out, "not valid JSON") != NULL);
	CHECK(strchr(out, '\n') == out + strlen(out) - 1); /* one line */
}

/* Holistic Trace Analysis loads the sample, when the package is installed, and its
 * figures agree with the analysis' own: the temporal breakdown within 2 points of
 * the span (HTA rounds times to whole microseconds, which opens a 1 us gap between
 * back-to-back kernels: 72 us of "kernel wait" on this sample that the exact times
 * do not have), compute time and the mean launch delay within 2%. */
TEST(trace_sample_hta_reads)
{
	static char out[262144];
	if (test_run("python3 -c 'from hta.trace_analysis import TraceAnalysis'", out,
		     sizeof(out)) != 0)
		SKIP("python package hta (HolisticTraceAnalysis) not importable");
	int rc = test_run("python3 tools/check_trace.py --json " SAMPLE_DIR, out, sizeof(out));
	CHECK_MSG(rc == 0, "check_trace.py failed (%d): %.2000s", rc, out);
	CHECK(strstr(out, "idle_time") != NULL);
	const char *line = strstr(out, "HTA_JSON ");
	CHECK(line != NULL);
	if (!line)
		return;
	json_t *hta = json_loads(line + 9, JSON_DISABLE_EOF_CHECK, NULL);
	struct trace t;
	struct analysis a;
	CHECK(hta != NULL);
	CHECK_EQ_INT(chrome_trace_read(SAMPLE_DIR "/profiler_trace.json", &t), 0);
	CHECK_EQ_INT(analysis_run(&t, &a), 0);
	const struct analysis_hta *h = &a.hta;
	CHECK(h->valid);
	double span = json_number_value(json_object_get(hta, "kernel_time"));
	CHECK(span > 0 && fabs(h->span_us - span) <= 0.02 * span);
	CHECK_NEAR(100 * h->compute_us / h->span_us,
		   100 * json_number_value(json_object_get(hta, "compute_time")) / span, 2);
	CHECK_NEAR(100 * h->non_compute_us / h->span_us,
		   100 * json_number_value(json_object_get(hta, "non_compute_time")) / span, 2);
	CHECK_NEAR(100 * h->idle_us / h->span_us,
		   100 * json_number_value(json_object_get(hta, "idle_time")) / span, 2);
	double compute = json_number_value(json_object_get(hta, "compute_time"));
	CHECK(fabs(h->compute_us - compute) <= 0.02 * compute);
	/* host wait on the sample's one stream, and the launch delays */
	CHECK_EQ_INT(h->n_streams, 1);
	double host_wait = json_number_value(json_object_get(json_object_get(hta, "idle"),
							     "7/host_wait"));
	CHECK(host_wait > 0 && fabs(h->streams[0].idle_host_wait_us - host_wait) <= 0.02 * host_wait);
	double delay = json_number_value(json_object_get(hta, "launch_delay_mean"));
	CHECK(delay > 0 && fabs(h->streams[0].launch_delay_mean_us - delay) <= 0.02 * delay);
	json_decref(hta);
	analysis_free(&a);
	trace_free(&t);
}

/* A trace file as the argument (plain and gzip-compressed, as torch.profiler exports
 * them), its outputs in --output-dir: the same analysis as from its folder. */
TEST(trace_analyze_trace_file_and_output_dir)
{
	static char out[65536];
	char cmd[2048], path[700];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/in' && gzip -c " SAMPLE_DIR "/profiler_trace.json > "
		 "'%s/in/run.pt.trace.json.gz' && %s analyze '%s/in/run.pt.trace.json.gz' --output-dir '%s/gz'",
		 dir, dir, test_bin(), dir, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "analyze .gz failed (%d): %.2000s", rc, out);
	snprintf(cmd, sizeof(cmd), "%s analyze " SAMPLE_DIR "/profiler_trace.json --output-dir '%s/plain'",
		 test_bin(), dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "analyze .json failed (%d): %.2000s", rc, out);
	double busy[2] = { 0, 0 };
	const char *sub[2] = { "gz", "plain" };
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s/analysis.json", dir, sub[i]);
		json_t *j = json_load_file(path, 0, NULL);
		CHECK_MSG(j != NULL, "no %s", path);
		if (!j)
			continue;
		CHECK_EQ_INT(json_array_size(json_object_get(j, "steps")), 3);
		busy[i] = json_real_value(json_object_get(j, "gpu_busy_share"));
		json_decref(j);
		snprintf(path, sizeof(path), "%s/%s/profile_report.md", dir, sub[i]);
		FILE *f = fopen(path, "r");
		CHECK_MSG(f != NULL, "no %s", path);
		if (f)
			fclose(f);
	}
	CHECK(busy[0] > 0.3 && busy[0] == busy[1]);
	/* nothing written beside the committed sample */
	FILE *f = fopen(SAMPLE_DIR "/analysis.json", "r");
	CHECK(f == NULL);
	if (f)
		fclose(f);
	/* a file that is not a trace, a corrupt .gz: one line each */
	snprintf(cmd, sizeof(cmd), "echo x > '%s/notes.txt' && %s analyze '%s/notes.txt'", dir, test_bin(), dir);
	CHECK(test_run(cmd, out, sizeof(out)) != 0);
	CHECK(strstr(out, "is not a trace file") != NULL);
	CHECK(strchr(out, '\n') == out + strlen(out) - 1);
	snprintf(cmd, sizeof(cmd), "printf '\\037\\213\\010\\000garbage' > '%s/bad.json.gz' && %s analyze '%s/bad.json.gz'",
		 dir, test_bin(), dir);
	CHECK(test_run(cmd, out, sizeof(out)) != 0);
	CHECK(strchr(out, '\n') == out + strlen(out) - 1);
}

/* A parent folder of profile_epoch_* folders: each is analysed (into --output-dir/NAME)
 * and the comparison table holds one row per folder, in name order, with its
 * figures. */
TEST(trace_analyze_compares_epoch_folders)
{
	static char out[262144];
	char cmd[2048], path[700];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p '%s/run/profile_epoch_0_x' '%s/run/profile_epoch_2_y/profiler_logs' && "
		 "cp " SAMPLE_DIR "/profiler_trace.json '%s/run/profile_epoch_0_x/' && "
		 "cp " SAMPLE_DIR "/profiler_trace.json '%s/run/profile_epoch_2_y/profiler_logs/h_1.1.pt.trace.json' && "
		 "%s analyze '%s/run' --output-dir '%s/cmp'",
		 dir, dir, dir, dir, test_bin(), dir, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "analyze failed (%d): %.2000s", rc, out);
	CHECK(strstr(out, "profiles compared") != NULL);
	snprintf(path, sizeof(path), "%s/cmp/comparison.json", dir);
	json_t *j = json_load_file(path, 0, NULL);
	CHECK(j != NULL);
	json_t *rows = json_object_get(j, "profiles");
	CHECK_EQ_INT(json_array_size(rows), 2);
	snprintf(path, sizeof(path), "%s/cmp/profile_epoch_0_x/analysis.json", dir);
	json_t *a = json_load_file(path, 0, NULL);
	CHECK(a != NULL);
	if (j && a && json_array_size(rows) == 2) {
		json_t *r0 = json_array_get(rows, 0), *r1 = json_array_get(rows, 1);
		CHECK(!strcmp(json_string_value(json_object_get(r0, "folder")), "profile_epoch_0_x"));
		CHECK(!strcmp(json_string_value(json_object_get(r1, "folder")), "profile_epoch_2_y"));
		json_t *mean = json_object_get(a, "mean_step");
		CHECK_NEAR(json_real_value(json_object_get(r0, "mean_step_ms")),
			   json_real_value(json_object_get(mean, "dur_ms")), 1e-9);
		CHECK_NEAR(json_real_value(json_object_get(json_object_get(r0, "device_stage_ms"), "optimizer")),
			   json_real_value(json_object_get(json_object_get(mean, "device_stage_ms"), "optimizer")), 1e-9);
		CHECK_NEAR(json_real_value(json_object_get(r0, "gpu_busy_pct")),
			   100 * json_real_value(json_object_get(a, "gpu_busy_share")), 1e-6);
		CHECK(strstr(json_string_value(json_object_get(r0, "advice")), "loader_workers") != NULL);
	}
	json_decref(a);
	json_decref(j);
	snprintf(path, sizeof(path), "%s/cmp/comparison.md", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	/* one folder without a trace fails the whole run before any is analysed */
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/run/profile_epoch_3_z' && %s analyze '%s/run' --output-dir '%s/cmp2'",
		 dir, test_bin(), dir, dir);
	CHECK(test_run(cmd, out, sizeof(out)) != 0);
	CHECK(strstr(out, "profile_epoch_3_z") != NULL);
	snprintf(path, sizeof(path), "%s/cmp2/profile_epoch_0_x/analysis.json", dir);
	f = fopen(path, "r");
	CHECK(f == NULL);
	if (f)
		fclose(f);
}

/* TensorBoard's PyTorch Profiler plugin (torch-tb-profiler, from PyPI) loads our
 * traces, when installed: a CPU run's (no device listed, so nothing divides by a
 * device's 0 bytes; memory as Kineto's CPU device) and the GPU sample's (memory on
 * GPU 0, and the steps' data waits as its DataLoader time: the sample waits 21.3% of
 * its steps). */
TEST(trace_tensorboard_plugin_reads)
{
	static char out[65536];
	char cmd[2048];
	if (test_run("python3 -c 'import torch_tb_profiler.profiler.data'", out, sizeof(out)) != 0)
		SKIP("python package torch_tb_profiler (torch-tb-profiler) not importable");
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s profile --device cpu --model simple_cnn --batch 4 --size 32 "
		 "--steps 2 --warmup 1 --baseline-steps 1 --out '%s/cpu' > /dev/null 2>&1 && "
		 "python3 tools/check_tb_profiler.py '%s'/cpu/profiler_logs/*.pt.trace.json 2>&1",
		 test_bin(), dir, dir);
	for (int run = 0; run < 2; run++) {
		if (run == 1)
			snprintf(cmd, sizeof(cmd), "python3 tools/check_tb_profiler.py "
				 SAMPLE_DIR "/profiler_trace.json 2>&1");
		int rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc == 0, "the plugin failed (%d): %.3000s", rc, out);
		const char *line = strstr(out, "TB_JSON ");
		CHECK(line != NULL);
		if (!line)
			continue;
		json_t *j = json_loads(line + 8, JSON_DISABLE_EOF_CHECK, NULL);
		CHECK(j != NULL);
		json_t *peaks = json_object_get(j, "memory_peaks");
		CHECK_EQ_INT(json_integer_value(json_object_get(j, "steps")), run ? 3 : 2);
		if (run == 0) {
			CHECK_EQ_INT(json_array_size(json_object_get(j, "device_props")), 0);
			CHECK(json_integer_value(json_object_get(peaks, "0:-1")) > 0);
		} else {
			CHECK_EQ_INT(json_array_size(json_object_get(j, "device_props")), 1);
			CHECK(json_integer_value(json_object_get(peaks, "1:0")) == 150 << 20);
			double loader = json_number_value(json_object_get(j, "dataloader_us"));
			double step = json_number_value(json_object_get(j, "step_us"));
			CHECK_MSG(step > 0 && fabs(loader / step - 0.213) < 0.01, "%.0f of %.0f us", loader,
				  step);
		}
		json_decref(j);
	}
}
