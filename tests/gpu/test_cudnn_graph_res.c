/* cuDNN's graph API (ops/cuda/cudnn_graph.c), third part of the probe for issue 24: the
 * forward in fp16 (the pre-compiled ConvBNfprop) and with a ResNet block's residual join
 * in the prologue (DBARCS). Their graphs' CPU test is in test_cudnn_graph_bwd.c.
 * docs/cuda.md, "cuDNN graph API". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cudnn_graph_util.h"
#include "harness.h"
#include "net_util.h"
#include "core/error.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/ops.h"

/* --- the forward in fp16 and with the residual join (DBARCS) ---------------------------------- */

struct fw_variant {
	const char *name;
	cudnnDataType_t io;
	int residual, relu_out, res_shape;
	int promised;
};
/* The pre-compiled ConvBNfprop is documented for fp16 only (on 9.0: the full pattern):
 * the bf16 probe in test_cudnn_graph.c gets a runtime-compiled engine, 2x to 4x slower
 * than cuDNN's own 3x3 convolutions on the H100 (docs/dev/fusion.md), so the fp16
 * engine's speed is the question. DBARCS (the residual join in the prologue) is
 * documented for Hopper only, fp16, 1x1 convolutions, the ReLU's output stored. */
static const struct fw_variant FW_VARIANTS[] = {
	{ "ConvBNfprop fp16, 3x3", CUDNN_DATA_HALF, 0, 0, 0, 1 },
	{ "DBARCS fp16, identity shortcut, 1x1", CUDNN_DATA_HALF, 1, 1, 1, 1 },
	{ "DBARCS fp16, shortcut with its batch norm, 1x1", CUDNN_DATA_HALF, 2, 1, 1, 1 },
	{ "DBARCS bf16, identity shortcut, 1x1", CUDNN_DATA_BFLOAT16, 1, 1, 1, 0 },
};

struct fw_run {
	const struct cg_conv_shape *s;
	const struct fw_variant *v;
	const struct cg_plan *p;
	void *ws;
	float *x, *w, *z, *scale, *bias, *zs, *zb; /* host */
	void *d_x, *d_w, *d_z, *d_scale, *d_bias, *d_zs, *d_zb;
	float *d_scale_f, *d_bias_f, *d_zs_f, *d_zb_f, *d_zero, *d_one;
	void *y, *relu_y;
	float *sum, *sqsum;
	/* unfused */
	void *zz, *a, *y_u;
	double *sums_u;
};

static void fw_inputs(struct gpu *g, const struct cg_conv_shape *s, const struct fw_variant *v, struct fw_run *r)
{
	size_t nx = cg_x_count(s), nw = cg_w_count(s), c = (size_t)s->c;
	enum gp_dtype ht = cg_htype(v->io);
	r->x = rand_h(g, ht, nx, 1, 0);
	r->w = rand_h(g, ht, nw, 0.05, 0.01);
	r->scale = rand_h(g, ht, c, 0.25, 1);
	r->bias = rand_h(g, ht, c, 0.5, -0.25);
	r->d_x = cg_dev_typed(g, v->io, r->x, nx);
	r->d_w = cg_dev_typed(g, v->io, r->w, nw);
	r->d_scale = cg_dev_typed(g, v->io, r->scale, c);
	r->d_bias = cg_dev_typed(g, v->io, r->bias, c);
	r->d_scale_f = dev_from(g, r->scale, c);
	r->d_bias_f = dev_from(g, r->bias, c);
	float *zero = host_f(g, c), *one = host_f(g, c);
	for (size_t i = 0; i < c; i++)
		one[i] = 1;
	r->d_zero = dev_from(g, zero, c);
	r->d_one = dev_from(g, one, c);
	if (v->residual) {
		r->z = rand_h(g, ht, nx, 0.5, 0);
		r->d_z = cg_dev_typed(g, v->io, r->z, nx);
	}
	if (v->residual == 2) {
		r->zs = rand_h(g, ht, c, 0.25, 1);
		r->zb = rand_h(g, ht, c, 0.25, 0);
		r->d_zs = cg_dev_typed(g, v->io, r->zs, c);
		r->d_zb = cg_dev_typed(g, v->io, r->zb, c);
		r->d_zs_f = dev_from(g, r->zs, c);
		r->d_zb_f = dev_from(g, r->zb, c);
	}
}

static int fw_fused(struct gpu *g, void *arg)
{
	struct fw_run *r = arg;
	int64_t uids[11] = { CG_UID_X, CG_UID_W, CG_UID_Y, CG_UID_SCALE, CG_UID_BIAS, CG_UID_SUM, CG_UID_SQSUM };
	void *ptrs[11] = { r->d_x, r->d_w, r->y, r->d_scale, r->d_bias, r->sum, r->sqsum };
	int n = 7;
	if (r->v->residual)
		uids[n] = CG_UID_Z, ptrs[n++] = r->d_z;
	if (r->v->residual == 2) {
		uids[n] = CG_UID_Z_SCALE, ptrs[n++] = r->d_zs;
		uids[n] = CG_UID_Z_BIAS, ptrs[n++] = r->d_zb;
	}
	if (r->v->relu_out)
		uids[n] = CG_UID_RELU_Y, ptrs[n++] = r->relu_y;
	return cg_execute(g->ctx->cudnn, r->p, n, uids, ptrs, r->ws);
}

/* Unfused: [zz = z * z_scale + z_bias;] a = relu(x * scale + bias [+ z or zz]) stored,
 * the legacy convolution, per-channel sums of y. */
static int fw_unfused(struct gpu *g, void *arg)
{
	struct fw_run *r = arg;
	const struct cg_conv_shape *s = r->s;
	struct conv2d_args a = cg_legacy_args(s);
	struct bn_args b = { .n = a.n, .c = a.c_out, .h = a.h_out, .w = a.w_out, .eps = 1e-5, .momentum = 0.1 };
	enum gp_dtype ht = cg_htype(r->v->io);
	cudaStream_t st = g->ctx->stream;
	const void *id = r->v->residual == 1 ? r->d_z : NULL;
	if (r->v->residual == 2) {
		GP_TRY(bn_apply_cuda(st, ht, 1, a.n, a.c_in, a.h_in * a.w_in, r->d_z, NULL, r->d_zs_f, r->d_zb_f,
				     r->d_zero, r->d_one, BN_APPLY_LINEAR, r->zz));
		id = r->zz;
	}
	GP_TRY(bn_apply_cuda(st, ht, 1, a.n, a.c_in, a.h_in * a.w_in, r->d_x, id, r->d_scale_f, r->d_bias_f,
			     r->d_zero, r->d_one, BN_APPLY_RELU, r->a));
	GP_TRY(conv2d_fwd_cuda(g->ctx, &a, NULL, r->a, r->d_w, NULL, r->y_u));
	return bn_sync_sums_cuda(st, ht, 1, &b, r->y_u, r->sums_u);
}

static void fw_check(struct gpu *g, const struct cg_conv_shape *s, const struct fw_variant *v, struct fw_run *r,
		     int host, int timed)
{
	size_t nx = cg_x_count(s), ny = cg_y_count(s), k = (size_t)s->k, c = (size_t)s->c;
	enum gp_dtype ht = cg_htype(v->io);
	double tol = tol_for(ht);
	CHECK_OK(fw_fused(g, r));
	CHECK_OK(fw_unfused(g, r));
	float *y = down_h(g, ht, r->y, ny), *y_u = down_h(g, ht, r->y_u, ny);
	float *sum = down(g, r->sum, k), *sq = down(g, r->sqsum, k);
	double *sums_u = host_bytes(g, 2 * k * sizeof(double));
	get(g, sums_u, r->sums_u, 2 * k * sizeof(double));
	float *sum_u = to_f(g, sums_u, k), *sq_u = to_f(g, sums_u + k, k);
	double ey = rel_f(y, y_u, ny), es = rel_f(sum, sum_u, k), eq = rel_f(sq, sq_u, k);
	printf("      %s, n%lld %lldx%lld against unfused: y %.3g (max %.3g), sum %.3g, sum of squares %.3g",
	       v->name, (long long)s->n, (long long)s->h, (long long)s->w, ey, cg_max_rel(y, y_u, ny), es, eq);
	CHECK_MSG(ey <= tol && es <= tol && eq <= tol, "%s: y %.3g, sum %.3g, sqsum %.3g against unfused > %.3g",
		  v->name, ey, es, eq, tol);
	if (v->relu_out) {
		float *ry = down_h(g, ht, r->relu_y, nx), *a_u = down_h(g, ht, r->a, nx);
		printf(", ReLU output %.3g", rel_f(ry, a_u, nx));
		CHECK_MSG(rel_f(ry, a_u, nx) <= tol, "%s: stored ReLU output against unfused %.3g > %.3g", v->name,
			  rel_f(ry, a_u, nx), tol);
	}
	printf("\n");
	if (host) {
		/* the prologue in float, as the fused kernel keeps it */
		float *a = host_f(g, nx), *y_h = host_f(g, ny);
		double *hs = host_bytes(g, k * sizeof(double)), *hq = host_bytes(g, k * sizeof(double));
		for (size_t i = 0; i < nx; i++) {
			size_t ch = i % c;
			float t = r->x[i] * r->scale[ch] + r->bias[ch];
			if (v->residual == 1)
				t += r->z[i];
			else if (v->residual == 2)
				t += r->z[i] * r->zs[ch] + r->zb[ch];
			a[i] = t > 0 ? t : 0;
		}
		cg_conv_host(s, a, r->w, y_h, hs, hq);
		double eh = rel_f(y, y_h, ny), ehs = rel_f(sum, to_f(g, hs, k), k), ehq = rel_f(sq, to_f(g, hq, k), k);
		printf("      against the host: y %.3g (unfused %.3g), sum %.3g, sum of squares %.3g\n", eh,
		       rel_f(y_u, y_h, ny), ehs, ehq);
		CHECK_MSG(eh <= tol && ehs <= tol && ehq <= tol, "%s: y %.3g, sum %.3g, sqsum %.3g against the host > %.3g",
			  v->name, eh, ehs, ehq, tol);
	}
	if (timed) {
		float mf = 0, mu = 0;
		CHECK_OK(time_two(g, fw_fused, r, fw_unfused, r, &mf, &mu));
		printf("      median of %d: fused %.3f ms, unfused (%sscale-bias-%sReLU + legacy conv + statistics) "
		       "%.3f ms, unfused / fused %.2fx\n",
		       CG_REPS, mf, v->residual == 2 ? "shortcut BN + " : "", v->residual ? "add-" : "", mu,
		       mf > 0 ? mu / mf : 0.0);
	}
}

/* The forward's fp16 engines: ConvBNfprop at the 3x3 layer, and the residual join in the
 * prologue (DBARCS) at the 256 -> 64 1x1 convolution that follows a block, with and
 * without the shortcut's own batch norm; each against the host on a small shape and
 * against the unfused sequence at batch 256, 56x56, timed. No engine for an fp16
 * variant fails (documented on Hopper); bf16 DBARCS prints. */
TEST(cudnn_graph_fwd_fp16_and_residual_match_unfused)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 44);
	const struct cg_conv_shape shapes[2][2] = { { CG_SMALL, CG_REAL }, { CG_RES_SMALL, CG_RES_REAL } };
	for (size_t vi = 0; vi < sizeof(FW_VARIANTS) / sizeof(FW_VARIANTS[0]); vi++) {
		const struct fw_variant *v = &FW_VARIANTS[vi];
		struct cg_conv_fwd_opts o = { .io = v->io, .param = v->io, .inter = CUDNN_DATA_FLOAT, .prologue = 1,
					      .genstats = 1, .residual = v->residual, .relu_out = v->relu_out };
		CHECK_OK(cuda_ctx_set_act(g.ctx, cg_htype(v->io), 1));
		for (int si = 0; si < 2; si++) {
			const struct cg_conv_shape *s = &shapes[v->res_shape][si];
			/* each shape's buffers go when it is done: the real ones are large */
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t nx = cg_x_count(s), ny = cg_y_count(s), k = (size_t)s->k;
			struct cg_graph gr;
			struct cg_plan p;
			if (plan_line("forward", v->name, cg_conv_fwd_graph(g.ctx->cudnn, s, &o, &gr), &gr, &p) < 0) {
				CHECK_MSG(!v->promised, "%s: no engine, and NVIDIA documents one on Hopper: %s", v->name,
					  gp_errmsg());
				break;
			}
			struct fw_run r = { .s = s, .v = v, .p = &p, .ws = plan_ws(&g, &p) };
			fw_inputs(&g, s, v, &r);
			r.y = dev_bytes(&g, ny * 2);
			r.relu_y = v->relu_out ? dev_bytes(&g, nx * 2) : NULL;
			r.sum = dev_f(&g, k);
			r.sqsum = dev_f(&g, k);
			r.zz = v->residual == 2 ? dev_bytes(&g, nx * 2) : NULL;
			r.a = dev_bytes(&g, nx * 2);
			r.y_u = dev_bytes(&g, ny * 2);
			r.sums_u = dev_bytes(&g, 2 * k * sizeof(double));
			fw_check(&g, s, v, &r, !si, si);
			cg_plan_destroy(&p);
			cg_graph_destroy(&gr);
			gpu_release(&g, dev_mark, host_mark);
		}
	}
	gpu_close(&g);
}
