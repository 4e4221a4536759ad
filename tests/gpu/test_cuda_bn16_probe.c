/* Which 16-bit NHWC training batch norms should take the own kernels (bn_nhwc16.cu)
 * rather than cuDNN's (the question bn16_rule.h's auto answers), measured per shape: every
 * batch norm of resnet18, resnet50 and mobilenet_v2 at batch 256 and 224 x 224, read off
 * the model builder and grouped by shape and by what follows it (ReLU, ReLU6, the
 * residual add before a ReLU, or nothing; "relu*": a ReLU or ReLU6 whose output only
 * its own backward would keep, ResNet's stem and MobileNetV2's last, which auto routes
 * to the own kernels to free it, bn_args's act_out_spare), in bf16 and fp16. For each
 * group, forward
 * and backward as the net runs them (the fused forward, the fused backward with ReLU or
 * ReLU6, the plain backward after an add, whose ReLU runs apart on either path), on the
 * own kernels and on cuDNN's, each the median of 9 samples of 3 back-to-back runs
 * between CUDA events, queued behind a 1.5 GiB memset so that the host's enqueueing
 * never idles the device inside the span; the two sides in turns. One line per group
 * (elements, own ms, cuDNN ms, own/cuDNN, auto's pick), then per model and type the
 * step's batch-norm time under all cuDNN, all own, auto, and the faster side per group.
 * cuDNN fuses no ReLU6 (the net would add a pass each way), and auto takes the own
 * kernels for those in any case: they are timed on the own kernels only, and every
 * column counts that time.
 * Speed never fails the test; a call that fails does. docs/cuda.md, "16-bit batch norm
 * on own kernels". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "net_util.h"
#include "cudnn_graph_util.h"
#include "core/error.h"
#include "backend/backend.h"
#include "nn/models.h"
#include "nn/net.h"
#include "ops/cuda/bn16_rule.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

#define PROBE_BATCH 256
#define PROBE_MAX 48
#define PROBE_SAMPLES 9
#define PROBE_RUNS 3
#define PROBE_AHEAD ((size_t)3 << 29)
#define PROBE_POOL (((size_t)1 << 22) + 7)

static const char *const PROBE_MODELS[] = { "resnet18", "resnet50", "mobilenet_v2" };
#define N_PROBE_MODELS 3

struct bn_group {
	struct bn_args a;
	enum bn_fuse op;
	int count[N_PROBE_MODELS];
	float own_ms, cudnn_ms;
};

/* What the net runs after batch norm i: its one consumer's op (a ReLU6, a ReLU, or an
 * add whose first input it is and whose consumer is a ReLU). */
static enum bn_fuse fuse_after(const struct net *net, int i)
{
	for (int j = i + 1; j < net->n_nodes; j++) {
		const struct node *nd = &net->nodes[j];
		if (!(nd->n_in > 0 && nd->in[0] == i) && !(nd->n_in > 1 && nd->in[1] == i))
			continue;
		if (nd->op == OP_RELU)
			return BN_FUSE_RELU;
		if (nd->op == OP_RELU6)
			return BN_FUSE_RELU6;
		if (nd->op == OP_ADD && nd->in[0] == i && j + 1 < net->n_nodes && net->nodes[j + 1].op == OP_RELU &&
		    net->nodes[j + 1].in[0] == j)
			return BN_FUSE_ADD_RELU;
		return BN_FUSE_NONE;
	}
	return BN_FUSE_NONE;
}

static int probe_groups(struct bn_group *gr, int cap, int *n)
{
	*n = 0;
	for (int m = 0; m < N_PROBE_MODELS; m++) {
		struct model_opts o = model_defaults(PROBE_MODELS[m]);
		struct net *net = NULL;
		o.size = 224;
		o.batch = PROBE_BATCH;
		GP_TRY(model_build(PROBE_MODELS[m], &o, &net));
		/* the CUDA backend's device-free marks: which batch norms' ReLU outputs are
		 * spare (bn_args's act_out_spare, part of auto's rule) */
		int rc = net_plan_predict(net, BACKEND_CUDA, GP_F32, PREC_BF16);
		for (int i = 0; i < net->n_nodes && rc == 0; i++) {
			if (net->nodes[i].op != OP_BATCHNORM2D)
				continue;
			struct bn_args a = net->nodes[i].a.bn;
			enum bn_fuse op = fuse_after(net, i);
			int k = 0;
			while (k < *n && !(gr[k].a.c == a.c && gr[k].a.h == a.h && gr[k].a.w == a.w && gr[k].op == op &&
					   gr[k].a.act_out_spare == a.act_out_spare))
				k++;
			if (k == *n) {
				if (*n == cap) {
					rc = gp_error(GP_EINVAL, "more than %d batch-norm groups", cap);
					break;
				}
				gr[k] = (struct bn_group){ .a = a, .op = op };
				gr[k].a.n = PROBE_BATCH;
				(*n)++;
			}
			gr[k].count[m]++;
		}
		net_free(net);
		GP_TRY(rc);
	}
	return 0;
}

/* One group's arrays and the side it runs on. */
struct probe_bufs {
	void *x, *z, *y, *dy, *dx, *reserve;
	size_t reserve_bytes;
	float *gamma, *beta, *rm, *rv, *mean, *invstd, *dg, *db;
};

static int probe_pass(struct gpu *g, const struct bn_group *k, struct probe_bufs *b)
{
	const struct bn_args *a = &k->a;
	if (k->op != BN_FUSE_NONE)
		GP_TRY(bn_fwd_train_fused_cuda(g->ctx, a, k->op, b->x, k->op == BN_FUSE_ADD_RELU ? b->z : NULL,
					       b->gamma, b->beta, b->y, b->mean, b->invstd, b->rm, b->rv,
					       b->reserve, b->reserve_bytes));
	else
		GP_TRY(bn_fwd_train_cuda(g->ctx, a, b->x, b->gamma, b->beta, b->y, b->mean, b->invstd, b->rm,
					 b->rv));
	if (k->op == BN_FUSE_RELU || k->op == BN_FUSE_RELU6)
		return bn_bwd_relu_fused_cuda(g->ctx, a, k->op, b->x, b->y, b->dy, b->gamma, b->beta, b->mean,
					      b->invstd, b->dx, 0, b->dg, b->db, b->reserve, b->reserve_bytes);
	return bn_bwd_cuda(g->ctx, a, b->x, b->dy, b->gamma, b->mean, b->invstd, b->dx, 0, b->dg, b->db);
}

/* Plans group k on the side `mode` (BN16_OWN or BN16_CUDNN), with its reserve space.
 * Both sides are planned once before timing (the workspace reserved for the larger);
 * cuDNN's last, so that the context's descriptors are its shape's. */
static int probe_plan(struct gpu *g, const struct bn_group *k, int mode, struct probe_bufs *b)
{
	g->ctx->bn16 = mode;
	GP_TRY(bn_plan_cuda(g->ctx, &k->a));
	size_t reserve = 0;
	if (k->op != BN_FUSE_NONE && bn_fuse_plan_cuda(g->ctx, &k->a, k->op, &reserve) != 1)
		return gp_error(GP_EINVAL, "batch norm of %d channels: fusion %d not planned", k->a.c, k->op);
	if (reserve > b->reserve_bytes) {
		b->reserve = dev_bytes(g, reserve);
		b->reserve_bytes = reserve;
	}
	return 0;
}

/* One side of the comparison, for time_ahead. */
struct probe_side {
	const struct bn_group *k;
	struct probe_bufs *b;
	int mode;
};

static int probe_step(struct gpu *g, void *arg)
{
	const struct probe_side *s = arg;
	g->ctx->bn16 = s->mode;
	return probe_pass(g, s->k, s->b);
}

static const struct ahead_timing PROBE_TIMING = { PROBE_SAMPLES, 1, PROBE_RUNS, PROBE_AHEAD };

/* cuDNN fuses no ReLU6: those groups run on the own kernels only (cudnn = own). */
static int probe_time(struct gpu *g, const struct bn_group *k, struct probe_bufs *b, void *ahead, float *own,
		      float *cudnn)
{
	int both = k->op != BN_FUSE_RELU6;
	struct probe_side o = { k, b, BN16_OWN }, c = { k, b, BN16_CUDNN };
	GP_TRY(probe_plan(g, k, BN16_OWN, b));
	if (both)
		GP_TRY(probe_plan(g, k, BN16_CUDNN, b));
	return time_ahead(g, ahead, &PROBE_TIMING, probe_step, &o, both ? probe_step : NULL, &c, own, cudnn);
}

static const char *fuse_name(enum bn_fuse op)
{
	return op == BN_FUSE_RELU ? "relu" : op == BN_FUSE_RELU6 ? "relu6" : op == BN_FUSE_ADD_RELU ? "add+relu" : "-";
}

/* The probe's list, without a GPU: every batch norm of the three models in one group,
 * and what follows them as torchvision builds them (resnet18: 20 batch norms, 8 before
 * the residual add and 9 before a ReLU; resnet50: 53, 16 and 33; mobilenet_v2: 52, 35
 * before a ReLU6). */
TEST(cuda_bn16_probe_groups_of_the_models)
{
	static struct bn_group gr[PROBE_MAX];
	int n = 0;
	CHECK_OK(probe_groups(gr, PROBE_MAX, &n));
	static const int want_total[N_PROBE_MODELS] = { 20, 53, 52 };
	static const int want_op[N_PROBE_MODELS][4] = { { 3, 9, 8, 0 }, { 4, 33, 16, 0 }, { 17, 0, 0, 35 } };
	for (int m = 0; m < N_PROBE_MODELS; m++) {
		int total = 0, by_op[4] = { 0 }, spare = 0;
		for (int i = 0; i < n; i++) {
			total += gr[i].count[m];
			by_op[gr[i].op] += gr[i].count[m];
			spare += gr[i].a.act_out_spare * gr[i].count[m];
		}
		/* one spare ReLU output each: ResNet's stem (its ReLU feeds the max pool) and
		 * MobileNetV2's last ReLU6 (the pooling; 1280 channels over 7 x 7 at batch
		 * 256, 15.3 Mi elements: on the own kernels from 12 Mi at 256 channels and
		 * more) */
		CHECK_MSG(spare == 1, "%s: %d batch norms with a spare ReLU output", PROBE_MODELS[m], spare);
		CHECK_MSG(total == want_total[m] && by_op[0] == want_op[m][0] && by_op[1] == want_op[m][1] &&
				  by_op[2] == want_op[m][2] && by_op[3] == want_op[m][3],
			  "%s: %d batch norms (none %d, relu %d, add+relu %d, relu6 %d)", PROBE_MODELS[m], total,
			  by_op[0], by_op[1], by_op[2], by_op[3]);
	}
}

TEST(cuda_bn16_own_against_cudnn_by_shape)
{
	static struct bn_group gr[PROBE_MAX];
	int n = 0;
	CHECK_OK(probe_groups(gr, PROBE_MAX, &n));
	if (test_failed())
		return;
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 43);
	static const enum gp_dtype dts[] = { GP_BF16, GP_F16 };
	void *ahead = dev_bytes(&g, PROBE_AHEAD);
	int keep = g.ctx->bn16;
	for (int t = 0; t < 2 && !test_failed(); t++) {
		enum gp_dtype dt = dts[t];
		CHECK_OK(cuda_ctx_set_act(g.ctx, dt, 1));
		int dmark0 = g.n_dev, hmark0 = g.n_host;
		void *pool = dev_bytes(&g, PROBE_POOL * 2);
		put_h(&g, dt, pool, host_rand_h(&g, dt, PROBE_POOL, 1, 0), PROBE_POOL);
		for (int i = 0; i < n && !test_failed(); i++) {
			struct bn_group *k = &gr[i];
			int c = k->a.c, dmark = g.n_dev, hmark = g.n_host;
			size_t nx = (size_t)k->a.n * c * k->a.h * k->a.w;
			struct probe_bufs b = { 0 };
			b.x = dev_bytes(&g, nx * 2), b.z = dev_bytes(&g, nx * 2), b.y = dev_bytes(&g, nx * 2);
			b.dy = dev_bytes(&g, nx * 2), b.dx = dev_bytes(&g, nx * 2);
			CHECK_OK(fill_tiled(&g, b.x, nx, pool, PROBE_POOL));
			CHECK_OK(fill_tiled(&g, b.z, nx, pool, PROBE_POOL));
			CHECK_OK(fill_tiled(&g, b.dy, nx, pool, PROBE_POOL));
			float *one = host_f(&g, c);
			for (int e = 0; e < c; e++)
				one[e] = 1.0f;
			b.gamma = dev_from(&g, one, c), b.beta = dev_f(&g, c), b.rm = dev_f(&g, c);
			b.rv = dev_from(&g, one, c), b.mean = dev_f(&g, c), b.invstd = dev_f(&g, c);
			b.dg = dev_f(&g, c), b.db = dev_f(&g, c);
			CHECK_OK(CUDA_CHECK(cudaMemsetAsync(b.beta, 0, c * sizeof(float), g.ctx->stream)));
			CHECK_OK(CUDA_CHECK(cudaMemsetAsync(b.rm, 0, c * sizeof(float), g.ctx->stream)));
			if (!test_failed())
				CHECK_OK(probe_time(&g, k, &b, ahead, &k->own_ms, &k->cudnn_ms));
			int autos = bn16_own_wanted(BN16_AUTO, k->a.n, c, k->a.h, k->a.w, k->op == BN_FUSE_RELU6,
						    k->a.act_out_spare);
			if (!test_failed())
				printf("      %s %4d ch %3dx%-3d %-8s %6.1f M  own %7.4f  cudnn %7.4f ms  %.2f  auto %s"
				       "  (r18 %d, r50 %d, mnv2 %d)\n",
				       dt == GP_BF16 ? "bf16" : "fp16", c, k->a.h, k->a.w,
				       k->a.act_out_spare ? (k->op == BN_FUSE_RELU6 ? "relu6*" : "relu*") : fuse_name(k->op),
				       nx / 1e6,
				       k->own_ms, k->cudnn_ms, k->own_ms / k->cudnn_ms, autos ? "own" : "cudnn",
				       k->count[0], k->count[1], k->count[2]);
			gpu_release(&g, dmark, hmark);
		}
		for (int m = 0; m < N_PROBE_MODELS && !test_failed(); m++) {
			double all_c = 0, all_o = 0, autos = 0, best = 0;
			for (int i = 0; i < n; i++) {
				const struct bn_group *k = &gr[i];
				double w = k->count[m], o = k->own_ms, cu = k->cudnn_ms;
				all_c += w * cu;
				all_o += w * o;
				autos += w * (bn16_own_wanted(BN16_AUTO, k->a.n, k->a.c, k->a.h, k->a.w,
							      k->op == BN_FUSE_RELU6, k->a.act_out_spare) ? o : cu);
				best += w * (o < cu ? o : cu);
			}
			printf("      %s %-12s batch norms a step: cudnn %.3f, own %.3f, auto %.3f, best %.3f ms\n",
			       dt == GP_BF16 ? "bf16" : "fp16", PROBE_MODELS[m], all_c, all_o, autos, best);
		}
		gpu_release(&g, dmark0, hmark0);
	}
	g.ctx->bn16 = keep;
	gpu_close(&g);
}
