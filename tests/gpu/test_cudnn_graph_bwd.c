/* cuDNN's graph API (ops/cuda/cudnn_graph.c), second part of the probe for issue 24:
 * the graphs a fused ResNet-50 training step needs beside the forward ConvBNfprop that
 * test_cudnn_graph.c probes: BN finalize, the weight gradient with the prologue
 * recomputed (ConvBNwgrad), the data gradient with the ReLU and batch-norm backward
 * (DgradDreluBNBwdWeight, dBNApply). The CPU test covers test_cudnn_graph_res.c's
 * residual forward graphs too. docs/cuda.md, "cuDNN graph API". */
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

/* A float 1 x c x 1 x 1 tensor added to g. */
static int channel_tensor(struct cg_graph *g, int64_t uid, int64_t c, cudnnBackendDescriptor_t *out)
{
	struct cg_tensor_spec s = cg_spec_channel(uid, CUDNN_DATA_FLOAT, c);
	return cg_graph_tensor(g, &s, out);
}

/* Every new graph builds down to its operation graph without a device (cuDNN checks
 * each attribute's name, type and count when set, each operation's tensors when it is
 * finalized), with the operations counted; tensors that do not fit are refused with
 * one line naming the call and the operation. */
TEST(cudnn_graph_bwd_descriptors_finalize_without_device)
{
	const struct cg_conv_shape real = CG_REAL, res = CG_RES_REAL;
	const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, hf = CUDNN_DATA_HALF, f = CUDNN_DATA_FLOAT;
	struct cg_graph g;
	int rc;

	for (int running = 0; running <= 1; running++)
		for (int dbl = 0; dbl <= 1; dbl++) {
			struct cg_bn_finalize_opts o = { .c = 64, .scalar = dbl ? CUDNN_DATA_DOUBLE : f,
							 .running = running };
			rc = cg_bn_finalize_graph(NULL, &o, &g);
			CHECK_MSG(rc == 0, "BN finalize (running %d, double %d): %s", running, dbl, gp_errmsg());
			CHECK_EQ_INT(g.n_ops, 1);
			CHECK_EQ_INT(g.n_descs, running ? 16 : 12); /* tensors and the op */
			cg_graph_destroy(&g);
		}

	const struct cg_wgrad_opts wg[] = {
		{ .io = bf, .param = bf, .inter = f, .dw = bf, .prologue = 1 },
		{ .io = bf, .param = f, .inter = f, .dw = f, .prologue = 1 },
		{ .io = hf, .param = hf, .inter = f, .dw = hf, .prologue = 1 },
		{ .io = bf, .dw = bf },
	};
	for (int i = 0; i < 4; i++) {
		rc = cg_wgrad_graph(NULL, &real, &wg[i], &g);
		CHECK_MSG(rc == 0, "wgrad graph %d: %s", i, gp_errmsg());
		CHECK_EQ_INT(g.n_ops, wg[i].prologue ? 4 : 1); /* mul, add, relu, wgrad */
		cg_graph_destroy(&g);
	}

	const struct cg_dgrad_opts dg[] = {
		{ .io = hf, .param = f, .inter = f, .drelu = 1, .bn_weights = 1 },
		{ .io = bf, .param = f, .inter = f, .drelu = 1, .bn_weights = 1 },
		{ .io = hf, .param = f, .inter = f, .drelu = 1, .bn_weights = 1, .mean_form = CG_MEAN_SUB },
		{ .io = bf, .param = f, .inter = f, .drelu = 1 },
		{ .io = bf },
	};
	static const int dg_ops[] = { 7, 7, 7, 6, 1 }; /* dgrad, 4 for bn(x), relu_bwd, bn_bwd_weights */
	for (int i = 0; i < 5; i++) {
		rc = cg_dgrad_graph(NULL, &real, &dg[i], &g);
		CHECK_MSG(rc == 0, "dgrad graph %d: %s", i, gp_errmsg());
		CHECK_EQ_INT(g.n_ops, dg_ops[i]);
		cg_graph_destroy(&g);
	}
	struct cg_dgrad_opts bad_dg = { .io = bf, .param = f, .inter = f, .bn_weights = 1 };
	CHECK(cg_dgrad_graph(NULL, &real, &bad_dg, &g) == GP_EINVAL);
	cg_graph_destroy(&g);

	rc = cg_dbn_apply_graph(NULL, real.n, real.c, real.h, real.w, bf, f, f, &g);
	CHECK_MSG(rc == 0, "dBNApply graph: %s", gp_errmsg());
	CHECK_EQ_INT(g.n_ops, 4);
	cg_graph_destroy(&g);

	for (int residual = 1; residual <= 2; residual++)
		for (int io = 0; io < 2; io++) {
			struct cg_conv_fwd_opts o = { .io = io ? bf : hf, .param = io ? bf : hf, .inter = f,
						      .prologue = 1, .genstats = 1, .residual = residual,
						      .relu_out = 1 };
			rc = cg_conv_fwd_graph(NULL, &res, &o, &g);
			CHECK_MSG(rc == 0, "residual forward %d: %s", residual, gp_errmsg());
			/* mul, add, [mul, add,] add, relu, conv, genstats */
			CHECK_EQ_INT(g.n_ops, residual == 2 ? 8 : 6);
			cg_graph_destroy(&g);
		}
	struct cg_conv_fwd_opts bad_fwd = { .io = bf, .residual = 1 };
	CHECK(cg_conv_fwd_graph(NULL, &res, &bad_fwd, &g) == GP_EINVAL);
	cg_graph_destroy(&g);

	/* a weight gradient whose dw has the wrong window (5x5 for a 3x3 convolution) */
	struct cg_conv_spec conv = { .pad = { 1, 1 }, .stride = { 1, 1 }, .dilation = { 1, 1 }, .compute = f };
	cudnnBackendDescriptor_t x, dy, dw;
	cg_graph_init(&g, NULL);
	struct cg_tensor_spec sx = cg_spec_nhwc(CG_UID_X, bf, 2, 64, 10, 10, 0),
			      sdy = cg_spec_nhwc(CG_UID_DY, bf, 2, 64, 10, 10, 0),
			      sdw = cg_spec_nhwc(CG_UID_DW, bf, 64, 64, 5, 5, 0);
	CHECK_OK(cg_graph_tensor(&g, &sx, &x));
	CHECK_OK(cg_graph_tensor(&g, &sdy, &dy));
	CHECK_OK(cg_graph_tensor(&g, &sdw, &dw));
	rc = cg_graph_conv_bwd_filter(&g, &conv, x, dy, dw);
	CHECK(rc < 0);
	const char *m = gp_errmsg();
	printf("      wrong dw: %s\n", m);
	CHECK_MSG(strstr(m, "cudnnBackendFinalize(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR) "
			    "failed: ") == m && !strchr(m, '\n'),
		  "error line: %s", m);
	CHECK_EQ_INT(g.n_ops, 0);
	cg_graph_destroy(&g);

	/* BN finalize whose scale has another channel count than its sums */
	struct cg_bn_finalize_io io = { 0 };
	struct cg_tensor_spec s;
	cg_graph_init(&g, NULL);
	CHECK_OK(channel_tensor(&g, CG_UID_SUM, 64, &io.sum));
	CHECK_OK(channel_tensor(&g, CG_UID_SQSUM, 64, &io.sqsum));
	CHECK_OK(channel_tensor(&g, CG_UID_SCALE, 32, &io.scale));
	CHECK_OK(channel_tensor(&g, CG_UID_BIAS, 64, &io.bias));
	CHECK_OK(channel_tensor(&g, CG_UID_EQ_SCALE, 64, &io.eq_scale));
	CHECK_OK(channel_tensor(&g, CG_UID_EQ_BIAS, 64, &io.eq_bias));
	s = cg_spec_nhwc(CG_UID_EPSILON, f, 1, 1, 1, 1, 0), s.by_value = 1, s.align_bytes = 4;
	CHECK_OK(cg_graph_tensor(&g, &s, &io.epsilon));
	s.uid = CG_UID_MOMENTUM;
	CHECK_OK(cg_graph_tensor(&g, &s, &io.momentum));
	s = cg_spec_nhwc(CG_UID_ACCUM_COUNT, CUDNN_DATA_INT64, 1, 1, 1, 1, 0), s.by_value = 1, s.align_bytes = 8;
	CHECK_OK(cg_graph_tensor(&g, &s, &io.accum_count));
	rc = cg_graph_bn_finalize(&g, f, &io);
	if (rc == 0)
		rc = cg_graph_finalize(&g);
	m = gp_errmsg();
	printf("      BN finalize, 32-channel scale for 64-channel sums: %s\n", rc < 0 ? m : "accepted");
	CHECK(rc < 0);
	CHECK_MSG(rc >= 0 || (strstr(m, "cudnnBackendFinalize(") == m && !strchr(m, '\n')), "error line: %s", m);
	cg_graph_destroy(&g);
}

/* --- BN finalize --------------------------------------------------------------------------- */

struct fin_bufs {
	const struct cg_plan *p;
	void *ws;
	cudnnDataType_t scalar;
	float *sum, *sqsum, *gamma, *beta, *prev_mean, *prev_var, *next_mean, *next_var;
	float *eq_scale, *eq_bias, *saved_mean, *saved_invstd;
	double eps, mom;
	float eps_f, mom_f;
	int64_t count;
	/* the legacy path: sums in double (2 x c), its outputs */
	const struct bn_args *args;
	double *sums;
	float *l_mean, *l_invstd, *l_run_mean, *l_run_var;
};

static int fin_run(struct gpu *g, void *arg)
{
	struct fin_bufs *b = arg;
	const int64_t uids[] = { CG_UID_SUM, CG_UID_SQSUM, CG_UID_SCALE, CG_UID_BIAS, CG_UID_PREV_MEAN,
				 CG_UID_PREV_VAR, CG_UID_NEXT_MEAN, CG_UID_NEXT_VAR, CG_UID_EQ_SCALE, CG_UID_EQ_BIAS,
				 CG_UID_SAVED_MEAN, CG_UID_SAVED_INVSTD, CG_UID_EPSILON, CG_UID_MOMENTUM,
				 CG_UID_ACCUM_COUNT };
	int dbl = b->scalar == CUDNN_DATA_DOUBLE;
	void *ptrs[] = { b->sum, b->sqsum, b->gamma, b->beta, b->prev_mean, b->prev_var, b->next_mean, b->next_var,
			 b->eq_scale, b->eq_bias, b->saved_mean, b->saved_invstd,
			 dbl ? (void *)&b->eps : (void *)&b->eps_f, dbl ? (void *)&b->mom : (void *)&b->mom_f,
			 &b->count };
	return cg_execute(g->ctx->cudnn, b->p, 15, uids, ptrs, b->ws);
}

static int fin_legacy(struct gpu *g, void *arg)
{
	struct fin_bufs *b = arg;
	return bn_sync_finalize_cuda(g->ctx->stream, b->args, b->sums, (double)b->count, b->l_mean, b->l_invstd,
				     b->l_run_mean, b->l_run_var);
}

/* BN finalize alone at ResNet-50's first layer (64 channels, 256 x 56 x 56 values each)
 * from sums whose mean and variance are known: every output against the host (double),
 * the running variance against both the unbiased update (PyTorch's, cuDNN's legacy
 * calls') and the biased one, then its time against the legacy path's finalize kernel
 * (bn_sync_finalize_cuda, which leaves the prologue's scale and bias to the apply).
 * Scalars (epsilon, momentum) are tried as float, then double. NVIDIA's documentation
 * lists no engine for this operation on Hopper, so no engine prints and passes. */
TEST(cudnn_graph_bn_finalize_matches_host)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 41);
	int dev = 0, major = 0, minor = 0;
	if (cudaGetDevice(&dev) == cudaSuccess &&
	    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
	    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess)
		printf("      cuDNN %zu (headers %d), compute capability %d.%d\n", cudnnGetVersion(), CUDNN_VERSION,
		       major, minor);
	const struct cg_conv_shape real = CG_REAL;
	const int c = (int)real.k;
	const int64_t count = real.n * real.h * real.w;
	struct bn_args args = { .n = (int)real.n, .c = c, .h = (int)real.h, .w = (int)real.w, .eps = 1e-5,
				.momentum = 0.1 };
	float *mean = host_rand(&g, (size_t)c, 0.5, 0.2), *var = host_rand(&g, (size_t)c, 0.2, 1.0);
	float *gamma = host_rand(&g, (size_t)c, 0.25, 1), *beta = host_rand(&g, (size_t)c, 0.5, 0);
	float *prev_mean = host_rand(&g, (size_t)c, 0.1, 0), *prev_var = host_rand(&g, (size_t)c, 0.1, 1);
	float *sum = host_f(&g, (size_t)c), *sqsum = host_f(&g, (size_t)c);
	double *sums = host_bytes(&g, 2 * (size_t)c * sizeof(double));
	float *h_eqs = host_f(&g, (size_t)c), *h_eqb = host_f(&g, (size_t)c), *h_invstd = host_f(&g, (size_t)c);
	float *h_nm = host_f(&g, (size_t)c), *h_nv_unb = host_f(&g, (size_t)c), *h_nv_b = host_f(&g, (size_t)c);
	float *h_mean = host_f(&g, (size_t)c);
	for (int i = 0; i < c; i++) {
		var[i] = fabsf(var[i]) + 0.05f;
		sum[i] = (float)((double)mean[i] * count);
		sqsum[i] = (float)(((double)var[i] + (double)mean[i] * mean[i]) * count);
		sums[i] = sum[i];
		sums[c + i] = sqsum[i];
		double m = (double)sum[i] / count, v = (double)sqsum[i] / count - m * m;
		double is = 1 / sqrt(v + args.eps);
		h_mean[i] = (float)m;
		h_invstd[i] = (float)is;
		h_eqs[i] = (float)(gamma[i] * is);
		h_eqb[i] = (float)(beta[i] - m * gamma[i] * is);
		h_nm[i] = (float)((1 - args.momentum) * prev_mean[i] + args.momentum * m);
		h_nv_unb[i] = (float)((1 - args.momentum) * prev_var[i] + args.momentum * v * count / (count - 1));
		h_nv_b[i] = (float)((1 - args.momentum) * prev_var[i] + args.momentum * v);
	}
	struct fin_bufs b = { .eps = args.eps, .mom = args.momentum, .eps_f = (float)args.eps,
			      .mom_f = (float)args.momentum, .count = count, .args = &args };
	b.sum = dev_from(&g, sum, (size_t)c);
	b.sqsum = dev_from(&g, sqsum, (size_t)c);
	b.gamma = dev_from(&g, gamma, (size_t)c);
	b.beta = dev_from(&g, beta, (size_t)c);
	b.prev_mean = dev_from(&g, prev_mean, (size_t)c);
	b.prev_var = dev_from(&g, prev_var, (size_t)c);
	b.next_mean = dev_f(&g, (size_t)c);
	b.next_var = dev_f(&g, (size_t)c);
	b.eq_scale = dev_f(&g, (size_t)c);
	b.eq_bias = dev_f(&g, (size_t)c);
	b.saved_mean = dev_f(&g, (size_t)c);
	b.saved_invstd = dev_f(&g, (size_t)c);
	b.sums = dev_bytes(&g, 2 * (size_t)c * sizeof(double));
	put(&g, b.sums, sums, 2 * (size_t)c * sizeof(double));
	b.l_mean = dev_f(&g, (size_t)c);
	b.l_invstd = dev_f(&g, (size_t)c);
	b.l_run_mean = dev_from(&g, prev_mean, (size_t)c);
	b.l_run_var = dev_from(&g, prev_var, (size_t)c);

	const double tol = 1e-4; /* float math on sums of 800k values */
	static const cudnnDataType_t scalars[] = { CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE };
	for (int si = 0; si < 2; si++) {
		struct cg_bn_finalize_opts o = { .c = c, .scalar = scalars[si], .running = 1 };
		struct cg_graph gr;
		struct cg_plan p;
		char name[64];
		snprintf(name, sizeof(name), "%s epsilon and momentum", dt_name(scalars[si]));
		if (plan_line("BN finalize", name, cg_bn_finalize_graph(g.ctx->cudnn, &o, &gr), &gr, &p) < 0)
			continue;
		b.p = &p;
		b.scalar = scalars[si];
		b.ws = plan_ws(&g, &p);
		CHECK_OK(fin_run(&g, &b));
		float *eqs = down(&g, b.eq_scale, (size_t)c), *eqb = down(&g, b.eq_bias, (size_t)c);
		float *sm = down(&g, b.saved_mean, (size_t)c), *si_ = down(&g, b.saved_invstd, (size_t)c);
		float *nm = down(&g, b.next_mean, (size_t)c), *nv = down(&g, b.next_var, (size_t)c);
		double e_eqs = rel_f(eqs, h_eqs, (size_t)c), e_eqb = rel_f(eqb, h_eqb, (size_t)c),
		       e_sm = rel_f(sm, h_mean, (size_t)c), e_si = rel_f(si_, h_invstd, (size_t)c),
		       e_nm = rel_f(nm, h_nm, (size_t)c), e_unb = rel_f(nv, h_nv_unb, (size_t)c),
		       e_b = rel_f(nv, h_nv_b, (size_t)c);
		printf("      against the host: eq_scale %.3g, eq_bias %.3g, saved mean %.3g, invstd %.3g, running mean "
		       "%.3g, running var %.3g (unbiased update) / %.3g (biased)\n",
		       e_eqs, e_eqb, e_sm, e_si, e_nm, e_unb, e_b);
		CHECK_MSG(e_eqs <= tol && e_eqb <= tol, "BN finalize's scale and bias: %.3g, %.3g > %.3g", e_eqs, e_eqb,
			  tol);
		CHECK_MSG(e_sm <= tol && e_si <= tol, "BN finalize's saved mean and invstd: %.3g, %.3g > %.3g", e_sm,
			  e_si, tol);
		CHECK_MSG(e_nm <= tol && (e_unb <= tol || e_b <= tol),
			  "BN finalize's running statistics: mean %.3g, var %.3g (unbiased) %.3g (biased) > %.3g", e_nm,
			  e_unb, e_b, tol);
		float mf = 0, ml = 0;
		CHECK_OK(time_two(&g, fin_run, &b, fin_legacy, &b, &mf, &ml));
		printf("      BN finalize, %d channels, median of %d: graph %.4f ms, legacy finalize kernel %.4f ms\n", c,
		       CG_REPS, mf, ml);
		cg_plan_destroy(&p);
		cg_graph_destroy(&gr);
	}
	gpu_close(&g);
}

/* --- ConvBNwgrad ------------------------------------------------------------------------------ */

struct wg_variant {
	const char *name;
	cudnnDataType_t io, param, dw;
	int promised; /* NVIDIA documents an engine for it on compute capability 9.0 */
};
/* fp16 first: the documented pre-compiled pattern (fp16 only; on 9.0 only the full
 * prologue). bf16: the generic runtime engines' surface 90 takes no mainloop fusion
 * on a weight gradient, and cuDNN 9.14 returned no engine for it on the H100
 * (docs/dev/fusion.md); asked again here. */
static const struct wg_variant WG_VARIANTS[] = {
	{ "fp16, fp16 scale/bias, fp16 dw", CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF, 1 },
	{ "bf16, bf16 scale/bias, bf16 dw", CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, 0 },
	{ "bf16, float scale/bias, float dw", CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, 0 },
};

/* Inputs of one shape for the weight gradient: x (raw, before the prologue), scale and
 * bias per input channel, dy; host values rounded to their types, device copies. */
struct wg_in {
	float *x, *scale, *bias, *dy;
	void *d_x, *d_scale, *d_bias, *d_dy;
	float *d_scale_f, *d_bias_f, *d_zero, *d_one;
};

static void wg_inputs(struct gpu *g, const struct cg_conv_shape *s, const struct wg_variant *v, struct wg_in *in)
{
	size_t nx = cg_x_count(s), ny = cg_y_count(s), c = (size_t)s->c;
	enum gp_dtype ht = cg_htype(v->io);
	in->x = rand_h(g, ht, nx, 1, 0);
	in->dy = rand_h(g, ht, ny, 1, 0);
	in->scale = host_rand(g, c, 0.25, 1);
	in->bias = host_rand(g, c, 0.5, 0);
	cg_round_typed(v->param, in->scale, c);
	cg_round_typed(v->param, in->bias, c);
	in->d_x = cg_dev_typed(g, v->io, in->x, nx);
	in->d_dy = cg_dev_typed(g, v->io, in->dy, ny);
	in->d_scale = cg_dev_typed(g, v->param, in->scale, c);
	in->d_bias = cg_dev_typed(g, v->param, in->bias, c);
	in->d_scale_f = dev_from(g, in->scale, c);
	in->d_bias_f = dev_from(g, in->bias, c);
	float *zero = host_f(g, c), *one = host_f(g, c);
	for (size_t i = 0; i < c; i++)
		one[i] = 1;
	in->d_zero = dev_from(g, zero, c);
	in->d_one = dev_from(g, one, c);
}

/* dw[k][r][s][c] = sum over n, p, q of dy[n][p][q][k] * a[n][h][w][c] in double. */
static void wgrad_host(const struct cg_conv_shape *s, const float *a, const float *dy, float *dw)
{
	int64_t p = cg_conv_out(s->h, s->r, s->pad, s->stride), q = cg_conv_out(s->w, s->s, s->pad, s->stride);
	size_t nw = cg_w_count(s);
	double *acc = calloc(nw, sizeof(double));
	if (!acc)
		abort();
	for (int64_t n = 0; n < s->n; n++)
		for (int64_t oh = 0; oh < p; oh++)
			for (int64_t ow = 0; ow < q; ow++)
				for (int64_t r = 0; r < s->r; r++) {
					int64_t ih = oh * s->stride - s->pad + r;
					if (ih < 0 || ih >= s->h)
						continue;
					for (int64_t t = 0; t < s->s; t++) {
						int64_t iw = ow * s->stride - s->pad + t;
						if (iw < 0 || iw >= s->w)
							continue;
						const float *ap = a + ((n * s->h + ih) * s->w + iw) * s->c;
						const float *dp = dy + ((n * p + oh) * q + ow) * s->k;
						for (int64_t k = 0; k < s->k; k++) {
							double *wp = acc + ((k * s->r + r) * s->s + t) * s->c;
							for (int64_t c = 0; c < s->c; c++)
								wp[c] += (double)dp[k] * ap[c];
						}
					}
				}
	for (size_t i = 0; i < nw; i++)
		dw[i] = (float)acc[i];
	free(acc);
}

struct wg_run {
	const struct cg_conv_shape *s;
	const struct cg_plan *p;
	const struct wg_in *in;
	enum gp_dtype ht;
	void *ws, *dw, *a, *dw_u;
};

static int wg_fused(struct gpu *g, void *arg)
{
	struct wg_run *r = arg;
	const int64_t uids[] = { CG_UID_X, CG_UID_SCALE, CG_UID_BIAS, CG_UID_DY, CG_UID_DW };
	void *ptrs[] = { r->in->d_x, r->in->d_scale, r->in->d_bias, r->in->d_dy, r->dw };
	return cg_execute(g->ctx->cudnn, r->p, 5, uids, ptrs, r->ws);
}

/* The unfused sequence: a = relu(x * scale + bias) stored in 16 bits, then the legacy
 * weight gradient from it (what the engine does today with a recomputed activation). */
static int wg_unfused(struct gpu *g, void *arg)
{
	struct wg_run *r = arg;
	const struct cg_conv_shape *s = r->s;
	struct conv2d_args a = cg_legacy_args(s);
	GP_TRY(bn_apply_cuda(g->ctx->stream, r->ht, 1, a.n, a.c_in, a.h_in * a.w_in, r->in->d_x, NULL,
			     r->in->d_scale_f, r->in->d_bias_f, r->in->d_zero, r->in->d_one, BN_APPLY_RELU, r->a));
	return conv2d_bwd_filter_cuda(g->ctx, &a, NULL, r->a, r->in->d_dy, r->dw_u, NULL);
}

/* ConvBNwgrad, dw = wgrad(relu(x * scale + bias), dy): for each variant the engine or
 * why none; where one exists, the small shape against the host and ResNet-50's 56x56
 * layer at batch 256 against the unfused sequence (bn_apply_cuda, legacy weight
 * gradient), then both timed. No engine for the fp16 variant fails the test (NVIDIA
 * documents it on compute capability 9.0); the bf16 ones only print. */
TEST(cudnn_graph_wgrad_prologue_matches_unfused)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 42);
	const struct cg_conv_shape small = CG_SMALL, real = CG_REAL;
	for (size_t vi = 0; vi < sizeof(WG_VARIANTS) / sizeof(WG_VARIANTS[0]); vi++) {
		const struct wg_variant *v = &WG_VARIANTS[vi];
		struct cg_wgrad_opts o = { .io = v->io, .param = v->param, .inter = CUDNN_DATA_FLOAT, .dw = v->dw,
					   .prologue = 1 };
		enum gp_dtype ht = cg_htype(v->io);
		double tol = tol_for(ht);
		CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
		for (int si = 0; si < 2; si++) {
			const struct cg_conv_shape *s = si ? &real : &small;
			/* each shape's buffers go when it is done: the real ones are large */
			int dev_mark = g.n_dev, host_mark = g.n_host;
			struct cg_graph gr;
			struct cg_plan p;
			char name[160];
			snprintf(name, sizeof(name), "%s, n%lld %lldx%lld", v->name, (long long)s->n, (long long)s->h,
				 (long long)s->w);
			if (plan_line("ConvBNwgrad", name, cg_wgrad_graph(g.ctx->cudnn, s, &o, &gr), &gr, &p) < 0) {
				CHECK_MSG(!v->promised, "ConvBNwgrad %s: no engine, and NVIDIA documents one on sm90: %s",
					  v->name, gp_errmsg());
				break;
			}
			struct wg_in in;
			wg_inputs(&g, s, v, &in);
			size_t nw = cg_w_count(s), nx = cg_x_count(s);
			struct wg_run r = { .s = s, .p = &p, .in = &in, .ht = ht, .ws = plan_ws(&g, &p) };
			r.dw = dev_bytes(&g, nw * (v->dw == CUDNN_DATA_FLOAT ? 4 : 2));
			r.a = dev_bytes(&g, nx * 2);
			r.dw_u = dev_bytes(&g, nw * 2);
			CHECK_OK(wg_fused(&g, &r));
			CHECK_OK(wg_unfused(&g, &r));
			float *dw = cg_down_typed(&g, v->dw, r.dw, nw), *dw_u = down_h(&g, ht, r.dw_u, nw);
			double eu = rel_f(dw, dw_u, nw);
			if (!si) {
				/* the prologue in float, as the fused kernel keeps it */
				float *a = host_f(&g, nx), *dw_h = host_f(&g, nw);
				for (size_t i = 0; i < nx; i++) {
					size_t c = i % (size_t)s->c;
					float t = in.x[i] * in.scale[c] + in.bias[c];
					a[i] = t > 0 ? t : 0;
				}
				wgrad_host(s, a, in.dy, dw_h);
				double eh = rel_f(dw, dw_h, nw), euh = rel_f(dw_u, dw_h, nw);
				printf("      against the host: fused dw %.3g (max %.3g), unfused %.3g; fused against "
				       "unfused %.3g\n",
				       eh, cg_max_rel(dw, dw_h, nw), euh, eu);
				CHECK_MSG(eh <= tol, "ConvBNwgrad %s: dw against the host %.3g > %.3g", v->name, eh, tol);
			} else {
				float mf = 0, mu = 0;
				CHECK_OK(time_two(&g, wg_fused, &r, wg_unfused, &r, &mf, &mu));
				printf("      fused against unfused %.3g (max %.3g); median of %d: fused %.3f ms, "
				       "unfused (scale-bias-ReLU + legacy wgrad) %.3f ms, unfused / fused %.2fx\n",
				       eu, cg_max_rel(dw, dw_u, nw), CG_REPS, mf, mu, mf > 0 ? mu / mf : 0.0);
			}
			CHECK_MSG(eu <= tol, "ConvBNwgrad %s: fused against unfused %.3g > %.3g", v->name, eu, tol);
			cg_plan_destroy(&p);
			cg_graph_destroy(&gr);
			gpu_release(&g, dev_mark, host_mark);
		}
	}
	/* without the prologue: whether the graph API's plain weight gradient has an
	 * engine in bf16 (the single-operation engines; printed only) */
	struct cg_wgrad_opts plain = { .io = CUDNN_DATA_BFLOAT16, .dw = CUDNN_DATA_BFLOAT16 };
	struct cg_graph gr;
	struct cg_plan p;
	if (plan_line("plain wgrad (diagnostic)", "bf16", cg_wgrad_graph(g.ctx->cudnn, &real, &plain, &gr), &gr, &p) ==
	    0) {
		cg_plan_destroy(&p);
		cg_graph_destroy(&gr);
	}
	gpu_close(&g);
}

/* --- DgradDreluBNBwdWeight and dBNApply ------------------------------------------------------ */

struct dg_variant {
	const char *name;
	cudnnDataType_t io;
	int bn_weights;
	enum cg_mean_form mean_form;
	int promised; /* documented for compute capability >= 8.0 but 8.9, fp16 */
};
/* fp16 is the documented pattern; SUB is the same graph with x_bn - mean written the
 * other way; bf16 has no documented engine (surface 90 fuses pointwise operations
 * into a data gradient's epilogue, but BN backward weights is not one of them);
 * dgrad + dReLU alone is what fusion_bench measured in bf16 with a 2.4e-2 error it
 * could not explain. */
static const struct dg_variant DG_VARIANTS[] = {
	{ "fp16, x - mean as ADD alpha2 -1", CUDNN_DATA_HALF, 1, CG_MEAN_ADD_NEG, 1 },
	{ "fp16, x - mean as SUB", CUDNN_DATA_HALF, 1, CG_MEAN_SUB, 0 },
	{ "bf16, x - mean as ADD alpha2 -1", CUDNN_DATA_BFLOAT16, 1, CG_MEAN_ADD_NEG, 0 },
	{ "bf16, x - mean as SUB", CUDNN_DATA_BFLOAT16, 1, CG_MEAN_SUB, 0 },
	{ "bf16, dgrad + dReLU only", CUDNN_DATA_BFLOAT16, 0, CG_MEAN_ADD_NEG, 0 },
};

/* Inputs: dy (n x k x p x q), w, x_bn (the batch norm's input, n x c x h x w) and its
 * statistics (the real per-channel mean and invstd of x_bn), gamma, beta. */
struct dg_in {
	float *dy, *w, *x, *mean, *invstd, *gamma, *beta;
	void *d_dy, *d_w, *d_x;
	float *d_mean, *d_invstd, *d_gamma, *d_beta;
};

static void dg_inputs(struct gpu *g, const struct cg_conv_shape *s, cudnnDataType_t io, struct dg_in *in)
{
	enum gp_dtype ht = cg_htype(io);
	size_t nx = cg_x_count(s), ny = cg_y_count(s), nw = cg_w_count(s), c = (size_t)s->c;
	in->dy = rand_h(g, ht, ny, 1, 0);
	in->w = rand_h(g, ht, nw, 0.05, 0);
	in->x = rand_h(g, ht, nx, 2, 0.5);
	in->gamma = host_rand(g, c, 0.25, 1);
	in->beta = host_rand(g, c, 0.5, 0);
	in->mean = host_f(g, c);
	in->invstd = host_f(g, c);
	double *sum = calloc(2 * c, sizeof(double));
	if (!sum)
		abort();
	for (size_t i = 0; i < nx; i++) {
		sum[i % c] += in->x[i];
		sum[c + i % c] += (double)in->x[i] * in->x[i];
	}
	double m_count = (double)(nx / c);
	for (size_t i = 0; i < c; i++) {
		double m = sum[i] / m_count, v = sum[c + i] / m_count - m * m;
		in->mean[i] = (float)m;
		in->invstd[i] = (float)(1 / sqrt(v + 1e-5));
	}
	free(sum);
	in->d_dy = cg_dev_typed(g, io, in->dy, ny);
	in->d_w = cg_dev_typed(g, io, in->w, nw);
	in->d_x = cg_dev_typed(g, io, in->x, nx);
	in->d_mean = dev_from(g, in->mean, c);
	in->d_invstd = dev_from(g, in->invstd, c);
	in->d_gamma = dev_from(g, in->gamma, c);
	in->d_beta = dev_from(g, in->beta, c);
}

/* dx[n][h][w][c] = sum over k, r, s of dy[n][p][q][k] * w[k][r][s][c], h = p * stride -
 * pad + r, in double. */
static void dgrad_host(const struct cg_conv_shape *s, const float *dy, const float *w, double *dx)
{
	int64_t p = cg_conv_out(s->h, s->r, s->pad, s->stride), q = cg_conv_out(s->w, s->s, s->pad, s->stride);
	memset(dx, 0, cg_x_count(s) * sizeof(double));
	for (int64_t n = 0; n < s->n; n++)
		for (int64_t oh = 0; oh < p; oh++)
			for (int64_t ow = 0; ow < q; ow++)
				for (int64_t r = 0; r < s->r; r++) {
					int64_t ih = oh * s->stride - s->pad + r;
					if (ih < 0 || ih >= s->h)
						continue;
					for (int64_t t = 0; t < s->s; t++) {
						int64_t iw = ow * s->stride - s->pad + t;
						if (iw < 0 || iw >= s->w)
							continue;
						double *xp = dx + ((n * s->h + ih) * s->w + iw) * s->c;
						const float *dp = dy + ((n * p + oh) * q + ow) * s->k;
						for (int64_t k = 0; k < s->k; k++) {
							const float *wp = w + ((k * s->r + r) * s->s + t) * s->c;
							for (int64_t c = 0; c < s->c; c++)
								xp[c] += (double)dp[k] * wp[c];
						}
					}
				}
}

/* The host's answers: dz = dReLU(dgrad(dy, w)) against bn(x_bn) recomputed in float as
 * the graph writes it, dgamma, dbeta, the coefficients A, B, C of dx = A dz + B x + C
 * and that dx. */
struct dg_host {
	float *dz, *dgamma, *dbeta, *a, *b, *c, *dx;
};

static void dg_reference(struct gpu *g, const struct cg_conv_shape *s, const struct dg_in *in, struct dg_host *h)
{
	size_t nx = cg_x_count(s), c = (size_t)s->c;
	double m = (double)(nx / c);
	double *dxp = host_bytes(g, nx * sizeof(double));
	double *sg = host_bytes(g, c * sizeof(double)), *sb = host_bytes(g, c * sizeof(double));
	dgrad_host(s, in->dy, in->w, dxp);
	h->dz = host_f(g, nx);
	h->dx = host_f(g, nx);
	for (size_t i = 0; i < nx; i++) {
		size_t ch = i % c;
		float xhat = (in->x[i] - in->mean[ch]) * in->invstd[ch];
		float bn = xhat * in->gamma[ch] + in->beta[ch];
		double dz = bn > 0 ? dxp[i] : 0;
		h->dz[i] = (float)dz;
		sg[ch] += dz * ((double)in->x[i] - in->mean[ch]) * in->invstd[ch];
		sb[ch] += dz;
	}
	double *a = host_bytes(g, c * sizeof(double)), *b = host_bytes(g, c * sizeof(double)),
	       *cc = host_bytes(g, c * sizeof(double));
	for (size_t ch = 0; ch < c; ch++) {
		double is = in->invstd[ch];
		a[ch] = (double)in->gamma[ch] * is;
		b[ch] = -a[ch] * is * sg[ch] / m;
		cc[ch] = -a[ch] * sb[ch] / m + a[ch] * is * in->mean[ch] * sg[ch] / m;
	}
	for (size_t i = 0; i < nx; i++) {
		size_t ch = i % c;
		h->dx[i] = (float)(a[ch] * h->dz[i] + b[ch] * in->x[i] + cc[ch]);
	}
	h->dgamma = to_f(g, sg, c);
	h->dbeta = to_f(g, sb, c);
	h->a = to_f(g, a, c);
	h->b = to_f(g, b, c);
	h->c = to_f(g, cc, c);
}

struct dg_run {
	const struct cg_conv_shape *s;
	const struct dg_in *in;
	cudnnDataType_t io;
	int bn_weights;
	const struct cg_plan *p, *pa; /* the pattern; dBNApply (NULL: none) */
	void *ws, *ws_a;
	void *dz, *dx;
	float *dgamma, *dbeta, *ca, *cb, *cc;
	/* unfused */
	struct bn_args bn;
	void *y, *dxp, *dz_u, *dx_u;
	float *dgamma_u, *dbeta_u;
};

static int dg_pattern(struct gpu *g, void *arg)
{
	struct dg_run *r = arg;
	const int64_t uids[] = { CG_UID_DY, CG_UID_W, CG_UID_X, CG_UID_MEAN, CG_UID_INVSTD, CG_UID_SCALE,
				 CG_UID_BIAS, CG_UID_DZ, CG_UID_DSCALE, CG_UID_DBIAS, CG_UID_EQ_DY_SCALE,
				 CG_UID_EQ_X_SCALE, CG_UID_EQ_DBIAS };
	void *ptrs[] = { r->in->d_dy, r->in->d_w, r->in->d_x, r->in->d_mean, r->in->d_invstd, r->in->d_gamma,
			 r->in->d_beta, r->dz, r->dgamma, r->dbeta, r->ca, r->cb, r->cc };
	return cg_execute(g->ctx->cudnn, r->p, r->bn_weights ? 13 : 8, uids, ptrs, r->ws);
}

static int dg_apply(struct gpu *g, void *arg)
{
	struct dg_run *r = arg;
	const int64_t uids[] = { CG_UID_DZ, CG_UID_X, CG_UID_EQ_DY_SCALE, CG_UID_EQ_X_SCALE, CG_UID_EQ_DBIAS,
				 CG_UID_DX };
	void *ptrs[] = { r->dz, r->in->d_x, r->ca, r->cb, r->cc, r->dx };
	return cg_execute(g->ctx->cudnn, r->pa, 6, uids, ptrs, r->ws_a);
}

/* The fused backward: the pattern, then dBNApply where there is one. */
static int dg_fused(struct gpu *g, void *arg)
{
	struct dg_run *r = arg;
	GP_TRY(dg_pattern(g, r));
	return r->pa ? dg_apply(g, r) : 0;
}

/* The unfused sequence of the engine today: legacy data gradient, ReLU backward from the
 * stored ReLU output y, cuDNN's batch-norm backward from the saved statistics. */
static int dg_unfused(struct gpu *g, void *arg)
{
	struct dg_run *r = arg;
	struct conv2d_args a = cg_legacy_args(r->s);
	GP_TRY(conv2d_bwd_data_cuda(g->ctx, &a, NULL, r->in->d_dy, r->in->d_w, r->dxp, 0));
	GP_TRY(relu_bwd_cuda(g->ctx->stream, cg_htype(r->io), cg_x_count(r->s), r->y, r->dxp, r->dz_u, 0));
	return bn_bwd_cuda(g->ctx, &r->bn, r->in->d_x, r->dz_u, r->in->d_gamma, r->in->d_mean, r->in->d_invstd,
			   r->dx_u, 0, r->dgamma_u, r->dbeta_u);
}

/* Checks one variant on shape s (host reference when h is given, the unfused sequence
 * always), and times it when timed. */
static void dg_check(struct gpu *g, const struct cg_conv_shape *s, const struct dg_variant *v, struct dg_run *r,
		     const struct dg_host *h, int timed)
{
	size_t nx = cg_x_count(s), c = (size_t)s->c;
	enum gp_dtype ht = cg_htype(v->io);
	double tol = tol_for(ht);
	CHECK_OK(dg_fused(g, r));
	CHECK_OK(dg_unfused(g, r));
	float *dz = down_h(g, ht, r->dz, nx), *dz_u = down_h(g, ht, r->dz_u, nx);
	double e_dz = rel_f(dz, dz_u, nx);
	printf("      %s, n%lld %lldx%lld against unfused: dz %.3g (max %.3g)", v->name, (long long)s->n,
	       (long long)s->h, (long long)s->w, e_dz, cg_max_rel(dz, dz_u, nx));
	if (r->bn_weights) {
		float *dg = down(g, r->dgamma, c), *db = down(g, r->dbeta, c), *dg_u = down(g, r->dgamma_u, c),
		      *db_u = down(g, r->dbeta_u, c);
		printf(", dgamma %.3g, dbeta %.3g", rel_f(dg, dg_u, c), rel_f(db, db_u, c));
		CHECK_MSG(rel_f(dg, dg_u, c) <= tol && rel_f(db, db_u, c) <= tol,
			  "%s: dgamma %.3g, dbeta %.3g against unfused > %.3g", v->name, rel_f(dg, dg_u, c),
			  rel_f(db, db_u, c), tol);
		if (r->pa) {
			float *dx = down_h(g, ht, r->dx, nx), *dx_u = down_h(g, ht, r->dx_u, nx);
			printf(", dx %.3g (max %.3g)", rel_f(dx, dx_u, nx), cg_max_rel(dx, dx_u, nx));
			CHECK_MSG(rel_f(dx, dx_u, nx) <= tol, "%s: dx (dBNApply) against unfused %.3g > %.3g", v->name,
				  rel_f(dx, dx_u, nx), tol);
		}
	}
	printf("\n");
	CHECK_MSG(e_dz <= tol, "%s: dz against unfused %.3g > %.3g", v->name, e_dz, tol);
	if (h) {
		double e_h = rel_f(dz, h->dz, nx);
		printf("      against the host: dz %.3g (unfused %.3g)", e_h, rel_f(dz_u, h->dz, nx));
		CHECK_MSG(e_h <= tol, "%s: dz against the host %.3g > %.3g", v->name, e_h, tol);
		if (r->bn_weights) {
			float *dg = down(g, r->dgamma, c), *db = down(g, r->dbeta, c), *ca = down(g, r->ca, c),
			      *cb = down(g, r->cb, c), *cc = down(g, r->cc, c);
			double eg = rel_f(dg, h->dgamma, c), eb = rel_f(db, h->dbeta, c), ea = rel_f(ca, h->a, c),
			       ebb = rel_f(cb, h->b, c), ec = rel_f(cc, h->c, c);
			printf(", dgamma %.3g, dbeta %.3g, A %.3g, B %.3g, C %.3g", eg, eb, ea, ebb, ec);
			CHECK_MSG(eg <= tol && eb <= tol, "%s: dgamma %.3g, dbeta %.3g against the host > %.3g",
				  v->name, eg, eb, tol);
			/* A is exact; B and C are small differences of sums, checked loosely so
			 * that a wrong sign or meaning still fails */
			CHECK_MSG(ea <= tol && ebb <= 0.1 && ec <= 0.1,
				  "%s: coefficients against the host: A %.3g, B %.3g, C %.3g", v->name, ea, ebb, ec);
			if (r->pa) {
				float *dx = down_h(g, ht, r->dx, nx);
				double ex = rel_f(dx, h->dx, nx);
				printf(", dx %.3g", ex);
				CHECK_MSG(ex <= tol, "%s: dx against the host %.3g > %.3g", v->name, ex, tol);
			}
		}
		printf("\n");
	}
	if (timed) {
		float mf = 0, mu = 0;
		CHECK_OK(time_two(g, dg_fused, r, dg_unfused, r, &mf, &mu));
		printf("      median of %d: fused %.3f ms (%s), unfused (legacy dgrad + ReLU backward + cuDNN BN "
		       "backward) %.3f ms, unfused / fused %.2fx\n",
		       CG_REPS, mf, r->pa ? "pattern + dBNApply" : "pattern alone", mu, mf > 0 ? mu / mf : 0.0);
	}
}

/* DgradDreluBNBwdWeight (and dBNApply after it) for each variant: the engine or why
 * none; with one, the small shape against the host and the unfused sequence, then
 * ResNet-50's 56x56 layer at batch 256 against the unfused sequence, timed. No engine
 * for the documented fp16 form fails the test; the rest print. */
TEST(cudnn_graph_dgrad_drelu_bnbwd_matches_unfused)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 43);
	const struct cg_conv_shape small = CG_SMALL, real = CG_REAL;
	for (size_t vi = 0; vi < sizeof(DG_VARIANTS) / sizeof(DG_VARIANTS[0]); vi++) {
		const struct dg_variant *v = &DG_VARIANTS[vi];
		struct cg_dgrad_opts o = { .io = v->io, .param = CUDNN_DATA_FLOAT, .inter = CUDNN_DATA_FLOAT,
					   .drelu = 1, .bn_weights = v->bn_weights, .mean_form = v->mean_form };
		enum gp_dtype ht = cg_htype(v->io);
		CHECK_OK(cuda_ctx_set_act(g.ctx, ht, 1));
		for (int si = 0; si < 2; si++) {
			const struct cg_conv_shape *s = si ? &real : &small;
			/* each shape's buffers go when it is done: the real ones are large */
			int dev_mark = g.n_dev, host_mark = g.n_host;
			size_t nx = cg_x_count(s), c = (size_t)s->c;
			struct cg_graph gr, ga;
			struct cg_plan p, pa;
			int have_apply = 0;
			if (plan_line("DgradDreluBNBwdWeight", v->name, cg_dgrad_graph(g.ctx->cudnn, s, &o, &gr), &gr,
				      &p) < 0) {
				CHECK_MSG(!v->promised,
					  "DgradDreluBNBwdWeight %s: no engine, and NVIDIA documents one: %s", v->name,
					  gp_errmsg());
				break;
			}
			if (v->bn_weights)
				have_apply = plan_line("dBNApply", dt_name(v->io),
						       cg_dbn_apply_graph(g.ctx->cudnn, s->n, s->c, s->h, s->w, v->io,
									  CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, &ga),
						       &ga, &pa) == 0;
			/* dBNApply is pointwise only: the generic runtime engines' surface 70
			 * (compute capability 7.0 to 9.0) documents it, so the fp16 road needs it */
			CHECK_MSG(!v->bn_weights || have_apply || !v->promised, "dBNApply %s: no engine: %s",
				  dt_name(v->io), gp_errmsg());
			struct dg_in in;
			dg_inputs(&g, s, v->io, &in);
			struct dg_run r = { .s = s, .in = &in, .io = v->io, .bn_weights = v->bn_weights, .p = &p,
					    .pa = have_apply ? &pa : NULL, .ws = plan_ws(&g, &p),
					    .ws_a = have_apply ? plan_ws(&g, &pa) : NULL };
			r.bn = (struct bn_args){ .n = (int)s->n, .c = (int)s->c, .h = (int)s->h, .w = (int)s->w,
						 .eps = 1e-5, .momentum = 0.1 };
			r.dz = dev_bytes(&g, nx * 2);
			r.dx = dev_bytes(&g, nx * 2);
			r.dgamma = dev_f(&g, c);
			r.dbeta = dev_f(&g, c);
			r.ca = dev_f(&g, c);
			r.cb = dev_f(&g, c);
			r.cc = dev_f(&g, c);
			r.y = dev_bytes(&g, nx * 2);
			r.dxp = dev_bytes(&g, nx * 2);
			r.dz_u = dev_bytes(&g, nx * 2);
			r.dx_u = dev_bytes(&g, nx * 2);
			r.dgamma_u = dev_f(&g, c);
			r.dbeta_u = dev_f(&g, c);
			CHECK_OK(bn_plan_cuda(g.ctx, &r.bn));
			/* the forward's stored ReLU output, what the unfused ReLU backward reads */
			CHECK_OK(bn_apply_cuda(g.ctx->stream, ht, 1, r.bn.n, r.bn.c, r.bn.h * r.bn.w, in.d_x, NULL,
					       in.d_gamma, in.d_beta, in.d_mean, in.d_invstd, BN_APPLY_RELU, r.y));
			struct dg_host h;
			if (!si)
				dg_reference(&g, s, &in, &h);
			dg_check(&g, s, v, &r, si ? NULL : &h, si);
			if (have_apply) {
				cg_plan_destroy(&pa);
				cg_graph_destroy(&ga);
			}
			cg_plan_destroy(&p);
			cg_graph_destroy(&gr);
			gpu_release(&g, dev_mark, host_mark);
		}
	}
	gpu_close(&g);
}

