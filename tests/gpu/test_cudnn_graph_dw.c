/* MobileNetV2's depthwise convolutions through cuDNN's graph API against the own kernels
 * (dwconv_*_cuda), the question of docs/performance.md's open points: the own 16-bit
 * NHWC kernels take ~9.3 ms of a batch-256 step, cuDNN's runtime-compiled engines (as
 * PyTorch reaches them) ~6.72 ms; would the graph API's engines beat ours, layer by
 * layer, and by how much per step?
 *
 * The layers are read off the model builder (torchvision's mobilenet_v2 at 224x224):
 * every 3x3 convolution with groups = channels, grouped by channels, input size and
 * stride, with how many layers have each shape and how many of those need a data
 * gradient (the input of every one does: the first takes the stem's output). For each
 * shape at batch 256, bf16 NHWC, float accumulation, and each direction (forward, data
 * gradient, filter gradient; no ReLU6 folded, no bias), the test builds the graph's
 * plan (heuristics A, then FALLBACK; the engine printed, or why none; the filter
 * gradient in bf16 as the own kernel writes it, else in float), runs it and the
 * own kernel on the same inputs and compares the outputs (relative error of the norm,
 * bf16's 1e-2: a wrong result fails; a missing engine prints and does not), then times
 * both: the median of 10 samples after 2 warm-up ones, each sample 5 back-to-back runs
 * between CUDA events, queued behind a 1.5 GiB memset so that the host's enqueueing
 * (a variant pack per graph execution) never leaves the device idle inside the timed
 * span. One line per shape and direction (own ms, graph ms, graph/own), then the step's
 * totals weighted by the layer counts: all own, all graph (own where no engine), and
 * the faster of the two per layer and direction (what picking per layer would give).
 *
 * Runtime compilation makes each plan take seconds: the lines say how long each build
 * took and the end how many were built. To keep the test near a minute, no more are
 * built once the builds have taken 45 s, the shapes taken largest first (layer count
 * times the elements of x and y) so that a cut drops the smallest part of the step; the
 * own kernels are still timed there, and the totals count their time for the graph
 * where no plan was built or none was found. Speed never fails the test. docs/cuda.md, "cuDNN graph
 * API". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "net_util.h"
#include "core/error.h"
#include "nn/models.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cudnn_graph.h"
#include "cudnn_graph_util.h"
#include "ops/ops.h"

#define HT GP_BF16
#define BATCH 256
#define MAX_SHAPES 16
/* Timing: samples, warm-up samples, runs per sample, and the memset queued ahead. */
#define SAMPLES 10
#define WARM 2
#define RUNS 5
#define AHEAD_BYTES ((size_t)3 << 29)
static const struct ahead_timing TIMING = { SAMPLES, WARM, RUNS, AHEAD_BYTES };
/* Random inputs: a pool of bf16 values tiled over each array (the real shapes take up
 * to 308 million elements; drawing each on the host would take most of the time). The
 * odd period shifts the pattern against every channel count. */
#define POOL_N (((size_t)1 << 22) + 7)
#define PLAN_BUDGET_S 45.0

/* One depthwise shape of the model and how often it occurs. */
struct dw_layer {
	int64_t c, h, stride;
	int count;    /* layers of this shape */
	int count_dx; /* of them, those whose input needs a gradient (a data gradient) */
};

/* MobileNetV2's depthwise 3x3 layers by shape, in the order the model meets them: 0 and
 * the number of distinct shapes in *n, the layers in *total. */
static int mobilenet_v2_dw_layers(struct dw_layer *out, int cap, int *n, int *total)
{
	struct model_opts o = model_defaults("mobilenet_v2");
	struct net *net = NULL;
	o.size = 224;
	o.batch = BATCH;
	*n = *total = 0;
	GP_TRY(model_build("mobilenet_v2", &o, &net));
	int rc = 0;
	for (int i = 0; i < net->n_nodes && rc == 0; i++) {
		const struct node *nd = &net->nodes[i];
		const struct conv2d_args *a = &nd->a.conv;
		if (nd->op != OP_CONV2D || a->groups < 2)
			continue;
		if (a->groups != a->c_in || a->c_out != a->c_in || a->kh != 3 || a->kw != 3 || a->pad != 1 ||
		    a->h_in != a->w_in) {
			rc = gp_error(GP_EINVAL, "%s: a grouped convolution this probe does not describe", nd->name);
			break;
		}
		int dx = net->nodes[nd->in[0]].needs_dx, j = 0;
		while (j < *n && !(out[j].c == a->c_in && out[j].h == a->h_in && out[j].stride == a->stride))
			j++;
		if (j == *n) {
			if (*n == cap) {
				rc = gp_error(GP_EINVAL, "more than %d depthwise shapes", cap);
				break;
			}
			out[j] = (struct dw_layer){ .c = a->c_in, .h = a->h_in, .stride = a->stride };
			(*n)++;
		}
		out[j].count++;
		out[j].count_dx += dx != 0;
		(*total)++;
	}
	net_free(net);
	return rc;
}

/* --- the two sides of one direction ----------------------------------------------------------- */

enum dir { DIR_FWD, DIR_DGRAD, DIR_WGRAD, N_DIRS };
static const char *const DIR_NAME[N_DIRS] = { "fwd", "dgrad", "wgrad" };

/* One shape's device arrays (bf16): inputs x, w, dy; each direction's output twice,
 * own and graph; the own filter gradient's scratch. */
struct bufs {
	void *x, *w, *dy;
	void *own[N_DIRS], *graph[N_DIRS];
	float *scratch;
};

struct side {
	enum dir dir;
	const struct conv2d_args *a;
	const struct bufs *b;
	struct cg_plan *plan; /* NULL: the own kernel */
	cudnnHandle_t handle;
	void *ws;
};

static int run_side(struct gpu *g, void *arg)
{
	const struct side *s = arg;
	const struct bufs *b = s->b;
	cudaStream_t st = g->ctx->stream;
	if (!s->plan) {
		switch (s->dir) {
		case DIR_FWD:
			return dwconv_fwd_cuda(st, HT, s->a, b->x, b->w, NULL, b->own[DIR_FWD], 0);
		case DIR_DGRAD:
			return dwconv_bwd_data_cuda(st, HT, s->a, b->dy, b->w, b->own[DIR_DGRAD], 0, 0, NULL);
		default:
			return dwconv_bwd_filter_cuda(st, HT, s->a, b->x, b->dy, b->own[DIR_WGRAD], NULL, b->scratch, 0);
		}
	}
	int64_t uids[3];
	void *ptrs[3];
	switch (s->dir) {
	case DIR_FWD:
		uids[0] = CG_UID_X, uids[1] = CG_UID_W, uids[2] = CG_UID_Y;
		ptrs[0] = b->x, ptrs[1] = b->w, ptrs[2] = b->graph[DIR_FWD];
		break;
	case DIR_DGRAD:
		uids[0] = CG_UID_DY, uids[1] = CG_UID_W, uids[2] = CG_UID_DX;
		ptrs[0] = b->dy, ptrs[1] = b->w, ptrs[2] = b->graph[DIR_DGRAD];
		break;
	default:
		uids[0] = CG_UID_X, uids[1] = CG_UID_DY, uids[2] = CG_UID_DW;
		ptrs[0] = b->x, ptrs[1] = b->dy, ptrs[2] = b->graph[DIR_WGRAD];
		break;
	}
	return cg_execute(s->handle, s->plan, 3, uids, ptrs, s->ws);
}

/* The relative error of the norm of array a (bf16, or float with a_float) against bf16
 * array ref (n elements, both on the device), and the largest difference over the
 * largest |ref|; read back in chunks (a shape's arrays reach 308 million elements).
 * NaN anywhere: NaN. */
static int compare_dev(struct gpu *g, const void *a, int a_float, const void *ref, size_t n, double *rel,
		       double *max_rel)
{
	const size_t chunk = (size_t)1 << 23, ea = a_float ? 4 : 2;
	uint16_t *ha = host_bytes(g, chunk * 4), *hr = host_bytes(g, chunk * 2);
	const float *fa = (const float *)ha;
	double num = 0, den = 0, dmax = 0, rmax = 0;
	int nan = 0;
	GP_TRY(CUDA_CHECK(cudaStreamSynchronize(g->ctx->stream)));
	for (size_t at = 0; at < n; at += chunk) {
		size_t k = n - at < chunk ? n - at : chunk;
		get(g, ha, (const char *)a + at * ea, k * ea);
		get(g, hr, (const char *)ref + at * 2, k * 2);
		for (size_t i = 0; i < k; i++) {
			double x = a_float ? fa[i] : h_val(HT, ha[i]), y = h_val(HT, hr[i]), d = x - y;
			if (isnan(d))
				nan = 1;
			num += d * d;
			den += y * y;
			if (fabs(d) > dmax)
				dmax = fabs(d);
			if (fabs(y) > rmax)
				rmax = fabs(y);
		}
	}
	*rel = nan ? NAN : den > 0 ? sqrt(num / den) : (num == 0 ? 0 : INFINITY);
	*max_rel = nan ? NAN : rmax > 0 ? dmax / rmax : dmax;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- tests ---------------------------------------------------------------------------------- */

/* The probe's list, read off the model: torchvision's mobilenet_v2 has 17 depthwise 3x3
 * layers in 10 shapes (channels, input size, stride): 32/112/1, 96/112/2, 144/56/1,
 * 144/56/2, 192/28/1 (2), 192/28/2, 384/14/1 (4), 576/14/1 (2), 576/14/2, 960/7/1 (3);
 * every one needs its data gradient (the first's input is the stem's output, which has
 * parameters before it). Runs without a device. */
TEST(cudnn_graph_dw_layers_of_mobilenet_v2)
{
	static const struct dw_layer want[] = {
		{ 32, 112, 1, 1, 1 }, { 96, 112, 2, 1, 1 },  { 144, 56, 1, 1, 1 }, { 144, 56, 2, 1, 1 },
		{ 192, 28, 1, 2, 2 }, { 192, 28, 2, 1, 1 },  { 384, 14, 1, 4, 4 }, { 576, 14, 1, 2, 2 },
		{ 576, 14, 2, 1, 1 }, { 960, 7, 1, 3, 3 },
	};
	struct dw_layer got[MAX_SHAPES];
	int n = 0, total = 0;
	CHECK_OK(mobilenet_v2_dw_layers(got, MAX_SHAPES, &n, &total));
	CHECK_EQ_INT(total, 17);
	CHECK_EQ_INT(n, (int)(sizeof(want) / sizeof(want[0])));
	for (int i = 0; i < n && i < (int)(sizeof(want) / sizeof(want[0])); i++)
		CHECK_MSG(got[i].c == want[i].c && got[i].h == want[i].h && got[i].stride == want[i].stride &&
				  got[i].count == want[i].count && got[i].count_dx == want[i].count_dx,
			  "shape %d: %lld ch %lld s%lld x%d (dx %d), want %lld ch %lld s%lld x%d (dx %d)", i,
			  (long long)got[i].c, (long long)got[i].h, (long long)got[i].stride, got[i].count,
			  got[i].count_dx, (long long)want[i].c, (long long)want[i].h, (long long)want[i].stride,
			  want[i].count, want[i].count_dx);
}

TEST(cudnn_graph_depthwise_against_own_kernels)
{
	struct dw_layer layers[MAX_SHAPES];
	int n_shapes = 0, total = 0;
	CHECK_OK(mobilenet_v2_dw_layers(layers, MAX_SHAPES, &n_shapes, &total));
	if (test_failed())
		return;
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 41);
	const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16;
	cudaStream_t st = g.ctx->stream;
	void *ahead = dev_bytes(&g, AHEAD_BYTES), *pool = dev_bytes(&g, POOL_N * 2);
	if (!ahead || !pool) {
		CHECK_MSG(0, "device buffers: %s", gp_errmsg());
		gpu_close(&g);
		return;
	}
	put_h(&g, HT, pool, rand_h(&g, HT, POOL_N, 1.0, 0.0), POOL_N);

	/* ms per step, weighted by the layer counts: [dir][own, graph, best] */
	double step[N_DIRS][3] = { { 0 } };
	float own_ms[MAX_SHAPES][N_DIRS] = { { 0 } }, graph_ms[MAX_SHAPES][N_DIRS] = { { 0 } };
	int have[MAX_SHAPES][N_DIRS] = { { 0 } };
	int plans = 0, missing = 0, skipped = 0;
	double build_s = 0;

	/* the largest shapes first (selection sort of at most MAX_SHAPES) */
	int order[MAX_SHAPES];
	double size[MAX_SHAPES];
	for (int i = 0; i < n_shapes; i++) {
		const struct cg_conv_shape sh = CG_DW(BATCH, layers[i].c, layers[i].h, layers[i].stride);
		order[i] = i;
		size[i] = layers[i].count * (double)(cg_x_count(&sh) + cg_y_count(&sh));
	}
	for (int i = 0; i < n_shapes; i++)
		for (int j = i + 1; j < n_shapes; j++)
			if (size[order[j]] > size[order[i]]) {
				int t = order[i];
				order[i] = order[j];
				order[j] = t;
			}

	printf("      MobileNetV2's depthwise 3x3 layers, batch %d, bf16 NHWC: %d layers in %d shapes\n", BATCH,
	       total, n_shapes);
	for (int oi = 0; oi < n_shapes; oi++) {
		const int li = order[oi];
		const struct dw_layer *L = &layers[li];
		const struct cg_conv_shape sh = CG_DW(BATCH, L->c, L->h, L->stride);
		const struct conv2d_args a = cg_legacy_args(&sh);
		char name[48];
		snprintf(name, sizeof(name), "%4lld ch %3lldx%-3lld s%lld", (long long)L->c, (long long)L->h,
			 (long long)L->h, (long long)L->stride);
		CHECK_MSG(dwconv_supported(HT, 1, &a), "%s: not an own-kernel shape", name);
		int dev_mark = g.n_dev, host_mark = g.n_host;
		size_t nx = cg_x_count(&sh), ny = cg_y_count(&sh), nw = cg_w_count(&sh);
		size_t n_out[N_DIRS] = { ny, nx, nw };
		struct bufs b = { .x = dev_bytes(&g, nx * 2), .w = dev_bytes(&g, nw * 2), .dy = dev_bytes(&g, ny * 2),
				  .scratch = dev_f(&g, dwconv_bwd_filter_scratch_floats(HT, &a)) };
		int ok = b.x && b.w && b.dy && b.scratch;
		for (int d = 0; d < N_DIRS; d++) {
			b.own[d] = dev_bytes(&g, n_out[d] * 2);
			/* room for a float weight gradient */
			b.graph[d] = dev_bytes(&g, n_out[d] * (d == DIR_WGRAD ? 4 : 2));
			ok = ok && b.own[d] && b.graph[d];
		}
		if (!ok) {
			CHECK_MSG(0, "%s: device buffers: %s", name, gp_errmsg());
			break;
		}
		/* the weights drawn on their own: a tiled pool would repeat them across channels */
		put_h(&g, HT, b.w, rand_h(&g, HT, nw, 1.0, 0.0), nw);
		/* dy from further on in the pool, so that it is not x's pattern */
		CHECK_OK(fill_tiled(&g, b.x, nx, pool, POOL_N));
		CHECK_OK(fill_tiled(&g, b.dy, ny, (const char *)pool + 2 * 1001, POOL_N - 1001));

		for (int d = 0; d < N_DIRS; d++) {
			char what[80];
			snprintf(what, sizeof(what), "%s %s", name, DIR_NAME[d]);
			struct side own = { .dir = (enum dir)d, .a = &a, .b = &b };
			float unused;
			if (build_s > PLAN_BUDGET_S) {
				printf("      %s: no plan built (the builds took %.0f s)\n", what, build_s);
				skipped++;
				CHECK_OK(time_ahead(&g, ahead, &TIMING, run_side, &own, run_side, &own, &own_ms[li][d], &unused));
				continue;
			}
			struct cg_graph gr;
			struct cg_plan p;
			double t0 = now_s();
			int rc;
			int dw_float = 0;
			if (d == DIR_FWD) {
				struct cg_conv_fwd_opts o = { .io = bf };
				rc = cg_conv_fwd_graph(g.ctx->cudnn, &sh, &o, &gr);
				rc = plan_line(what, "graph", rc, &gr, &p);
			} else if (d == DIR_DGRAD) {
				struct cg_dgrad_opts o = { .io = bf };
				rc = cg_dgrad_graph(g.ctx->cudnn, &sh, &o, &gr);
				rc = plan_line(what, "graph", rc, &gr, &p);
			} else {
				struct cg_wgrad_opts o = { .io = bf, .dw = bf };
				rc = cg_wgrad_graph(g.ctx->cudnn, &sh, &o, &gr);
				rc = plan_line(what, "graph, bf16 dw", rc, &gr, &p);
				if (rc < 0) {
					/* a float dw would cost the engine a cast of c x 9 values */
					o.dw = CUDNN_DATA_FLOAT;
					dw_float = 1;
					rc = cg_wgrad_graph(g.ctx->cudnn, &sh, &o, &gr);
					rc = plan_line(what, "graph, float dw", rc, &gr, &p);
				}
			}
			double dt = now_s() - t0;
			build_s += dt;
			printf("        (built in %.2f s)\n", dt);
			if (rc < 0) {
				/* no engine: the own kernel's time alone, for the totals */
				missing++;
				CHECK_OK(time_ahead(&g, ahead, &TIMING, run_side, &own, run_side, &own, &own_ms[li][d], &unused));
				continue;
			}
			plans++;
			struct side gs = { .dir = (enum dir)d, .a = &a, .b = &b, .plan = &p, .handle = g.ctx->cudnn,
					   .ws = plan_ws(&g, &p) };
			if (p.ws_bytes > 0 && !gs.ws) {
				CHECK_MSG(0, "%s: workspace of %lld bytes: %s", what, (long long)p.ws_bytes, gp_errmsg());
				cg_plan_destroy(&p);
				cg_graph_destroy(&gr);
				continue;
			}
			rc = run_side(&g, &own);
			if (rc == 0)
				rc = run_side(&g, &gs);
			CHECK_MSG(rc == 0, "%s: %s", what, gp_errmsg());
			double rel = NAN, mrel = NAN;
			if (rc == 0)
				CHECK_OK(compare_dev(&g, b.graph[d], dw_float, b.own[d], n_out[d], &rel, &mrel));
			printf("        graph against own: %.3g (max %.3g)\n", rel, mrel);
			CHECK_MSG(rel <= tol_for(HT), "%s: graph against own kernel %.3g > %.3g", what, rel, tol_for(HT));
			if (rc == 0 && rel <= tol_for(HT)) {
				rc = time_ahead(&g, ahead, &TIMING, run_side, &own, run_side, &gs, &own_ms[li][d], &graph_ms[li][d]);
				CHECK_MSG(rc == 0, "%s: timing: %s", what, gp_errmsg());
				have[li][d] = rc == 0;
			} else if (rc == 0) {
				/* a wrong graph (the test fails): the own time still counts */
				CHECK_OK(time_ahead(&g, ahead, &TIMING, run_side, &own, run_side, &own, &own_ms[li][d], &unused));
			}
			cg_plan_destroy(&p);
			cg_graph_destroy(&gr);
		}
		CHECK_OK(CUDA_CHECK(cudaStreamSynchronize(st)));
		gpu_release(&g, dev_mark, host_mark);
	}

	printf("      %-22s %6s %5s  %8s %8s %9s\n", "shape", "layers", "dir", "own ms", "graph ms", "graph/own");
	for (int li = 0; li < n_shapes; li++) {
		const struct dw_layer *L = &layers[li];
		for (int d = 0; d < N_DIRS; d++) {
			int w = d == DIR_DGRAD ? L->count_dx : L->count;
			float o = own_ms[li][d], gm = graph_ms[li][d];
			if (have[li][d])
				printf("      %4lld ch %3lldx%-3lld s%lld %8d %5s  %8.3f %8.3f %9.2f\n", (long long)L->c,
				       (long long)L->h, (long long)L->h, (long long)L->stride, w, DIR_NAME[d], o, gm,
				       gm / o);
			else
				printf("      %4lld ch %3lldx%-3lld s%lld %8d %5s  %8.3f %8s %9s\n", (long long)L->c,
				       (long long)L->h, (long long)L->h, (long long)L->stride, w, DIR_NAME[d], o,
				       "-", "-");
			double own_w = w * (double)o, graph_w = w * (double)(have[li][d] ? gm : o);
			step[d][0] += own_w;
			step[d][1] += graph_w;
			step[d][2] += own_w < graph_w ? own_w : graph_w;
		}
	}
	double tot[3] = { 0 };
	for (int d = 0; d < N_DIRS; d++) {
		printf("      per step, %-5s: own %.3f ms, graph %.3f ms (%.2fx), per-layer best %.3f ms\n", DIR_NAME[d],
		       step[d][0], step[d][1], step[d][0] > 0 ? step[d][1] / step[d][0] : 0.0, step[d][2]);
		for (int k = 0; k < 3; k++)
			tot[k] += step[d][k];
	}
	printf("      per step, all  : own %.3f ms, graph %.3f ms (%.2fx), per-layer best %.3f ms (saves %.3f ms)\n",
	       tot[0], tot[1], tot[0] > 0 ? tot[1] / tot[0] : 0.0, tot[2], tot[0] - tot[2]);
	printf("      %d plans built in %.1f s (%d graphs without an engine, %d left unbuilt past the budget: the "
	       "graph totals count the own time there)\n",
	       plans, build_s, missing, skipped);
	gpu_close(&g);
}
