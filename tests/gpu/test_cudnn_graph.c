/* cuDNN's graph API (ops/cuda/cudnn_graph.c), the probe for issue 24's road: one
 * ResNet-50 layer shape (64 -> 64 channels, 3x3, pad 1, stride 1, bf16 NHWC, float
 * accumulation) through the backend API.
 *   - a plain convolution forward, against the host (double) and the legacy-API path
 *     (conv2d_fwd_cuda) on a small shape;
 *   - the fused pattern y = conv(relu(x * scale + bias)) with the per-channel sum and
 *     sum of squares of y (cuDNN's ConvBNfprop), against the unfused sequence on the
 *     device (bn_apply_cuda with mean 0 and invstd 1, conv2d_fwd_cuda,
 *     bn_sync_sums_cuda) and the host, run twice (the statistics must be overwritten);
 *   - at the real shape (batch 256, 56x56), the same checks and the time of the fused
 *     graph against the unfused sequence (median of CUDA-event timings), printed with
 *     the engine chosen, and the plain convolution's time through either API; speed
 *     never fails the test.
 * Tolerance (relative error of the norm): bf16's 1e-2 (tol_for). When no engine takes the
 * fused graph, each variant tried prints which heuristics returned nothing and cuDNN's
 * messages, and the test fails with the first variant's line. Without a device the
 * descriptors are still built and checked by cuDNN down to the operation graph; the
 * rest skips. docs/cuda.md, "cuDNN graph API". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "net_util.h"
#include "core/error.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cudnn_graph.h"
#include "cudnn_graph_util.h"
#include "ops/ops.h"

#define HT GP_BF16

static const struct cg_conv_shape SMALL = CG_SMALL;
static const struct cg_conv_shape REAL = CG_REAL;

/* The fused graph's variants, tried in order: scale and bias in bf16 (as the 16-bit
 * samples of the pattern give them) or float, the prologue's intermediates in float
 * or bf16. The first that gets an engine is checked and timed. */
struct variant {
	const char *name;
	cudnnDataType_t io, param, inter;
};
static const struct variant VARIANTS[] = {
	{ "bf16 scale/bias, float intermediates", CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT },
	{ "float scale/bias, float intermediates", CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT },
	{ "bf16 scale/bias, bf16 intermediates", CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16 },
};
#define N_VARIANTS ((int)(sizeof(VARIANTS) / sizeof(VARIANTS[0])))
/* Only a diagnostic when no bf16 variant gets an engine: does fp16 (the type of
 * NVIDIA's ResNet-50 runs) get one? */
static const struct variant FP16_PROBE = { "fp16 scale/bias, float intermediates", CUDNN_DATA_HALF,
					   CUDNN_DATA_HALF, CUDNN_DATA_FLOAT };

/* relu(x * scale + bias) per channel (NHWC) in float, rounded to bf16 as the unfused
 * path stores it. */
static float *prologue_host(struct gpu *g, const struct cg_conv_shape *s, const float *x, const float *scale,
			    const float *bias)
{
	size_t nx = cg_x_count(s);
	float *a = host_f(g, nx);
	for (size_t i = 0; i < nx; i++) {
		size_t c = i % (size_t)s->c;
		float v = x[i] * scale[c] + bias[c];
		a[i] = h_round(HT, v > 0 ? v : 0);
	}
	return a;
}

/* --- device pieces ---------------------------------------------------------------------------- */

static void *dev_h_from(struct gpu *g, enum gp_dtype ht, const float *h, size_t n)
{
	void *d = dev_bytes(g, n * 2);
	put_h(g, ht, d, h, n);
	return d;
}

/* The fused graph of variant v for shape s, and its plan; on failure the error's line
 * is in gp_errmsg. */
static int fused_build(struct gpu *g, const struct cg_conv_shape *s, const struct variant *v, struct cg_graph *gr,
		       struct cg_plan *p)
{
	struct cg_conv_fwd_opts o = { .io = v->io, .param = v->param, .inter = v->inter, .prologue = 1,
				      .genstats = 1 };
	memset(p, 0, sizeof(*p));
	int rc = cg_conv_fwd_graph(g->ctx->cudnn, s, &o, gr);
	if (rc == 0)
		rc = cg_plan_build(gr, p);
	if (rc < 0)
		cg_graph_destroy(gr);
	return rc;
}

/* Issue 24 asks what FP32 and TF32 can have of the fusion: the same graph with float
 * data (the convolution's math as the handle's math mode leaves it), printed only. */
static const struct variant FP32_PROBE = { "float data, scale/bias and intermediates",
					   CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT };

static void fused_probe_print(struct gpu *g, const struct cg_conv_shape *s, const struct variant *v)
{
	struct cg_graph gr;
	struct cg_plan p;
	char desc[200];
	if (fused_build(g, s, v, &gr, &p) == 0) {
		cg_plan_describe(&p, desc, sizeof(desc));
		printf("      (diagnostic) fused, %s: an engine: %s\n", v->name, desc);
		cg_plan_destroy(&p);
		cg_graph_destroy(&gr);
	} else {
		printf("      (diagnostic) fused, %s: %s\n", v->name, gp_errmsg());
	}
}

/* The first variant that gets an engine (its index), or -1 after failing the test with
 * the first variant's line; every variant's outcome is printed, and whether the float
 * graph gets an engine. */
static int fused_pick(struct gpu *g, const struct cg_conv_shape *s, struct cg_graph *gr, struct cg_plan *p)
{
	char first[1024] = "";
	char desc[200];
	fused_probe_print(g, s, &FP32_PROBE);
	for (int i = 0; i < N_VARIANTS; i++) {
		if (fused_build(g, s, &VARIANTS[i], gr, p) == 0) {
			cg_plan_describe(p, desc, sizeof(desc));
			printf("      fused, %s: %s\n", VARIANTS[i].name, desc);
			return i;
		}
		printf("      fused, %s: %s\n", VARIANTS[i].name, gp_errmsg());
		if (!first[0])
			snprintf(first, sizeof(first), "%s", gp_errmsg());
	}
	fused_probe_print(g, s, &FP16_PROBE);
	CHECK_MSG(0, "fused conv + scale-bias-ReLU prologue + genstats, bf16: %s", first);
	return -1;
}

/* The inputs of one shape: x, w (bf16-rounded), scale and bias per input channel; on the
 * device x and w in bf16, zeros and ones for the unfused path's mean and invstd, scale
 * and bias also in float for it. */
struct inputs {
	float *x, *w, *scale, *bias;
	void *d_x, *d_w;
	float *d_scale_f, *d_bias_f, *d_zero, *d_one;
};

static void inputs_make(struct gpu *g, const struct cg_conv_shape *s, struct inputs *in)
{
	size_t nx = cg_x_count(s), nw = (size_t)(s->k * s->c * s->r * s->s), c = (size_t)s->c;
	/* scale around 1 and bias around 0: about half the prologue's outputs are cut by
	 * the ReLU; weights with a positive shift keep the per-channel sums away from 0 */
	in->x = host_rand_h(g, HT, nx, 1, 0);
	in->w = host_rand_h(g, HT, nw, 0.05, 0.01);
	in->scale = host_rand_h(g, HT, c, 0.25, 1);
	in->bias = host_rand_h(g, HT, c, 0.5, 0);
	in->d_x = dev_h_from(g, HT, in->x, nx);
	in->d_w = dev_h_from(g, HT, in->w, nw);
	in->d_scale_f = dev_from(g, in->scale, c);
	in->d_bias_f = dev_from(g, in->bias, c);
	float *zero = host_f(g, c), *one = host_f(g, c);
	for (size_t i = 0; i < c; i++)
		one[i] = 1;
	in->d_zero = dev_from(g, zero, c);
	in->d_one = dev_from(g, one, c);
}

/* The unfused sequence: a = relu(x * scale + bias) (bf16), y = conv(a, w) (legacy API),
 * sums = per-channel sum and sum of squares of y (doubles, 2 x k). ev (may be NULL): 4
 * events recorded between the pieces. */
static int unfused_run(struct gpu *g, const struct cg_conv_shape *s, const struct inputs *in, void *d_a, void *d_y,
		       double *d_sums, cudaEvent_t *ev)
{
	struct conv2d_args a = cg_legacy_args(s);
	struct bn_args b = { .n = a.n, .c = a.c_out, .h = a.h_out, .w = a.w_out, .eps = 1e-5, .momentum = 0.1 };
	cudaStream_t st = g->ctx->stream;
	if (ev)
		GP_TRY(CUDA_CHECK(cudaEventRecord(ev[0], st)));
	GP_TRY(bn_apply_cuda(st, HT, 1, a.n, a.c_in, a.h_in * a.w_in, in->d_x, NULL, in->d_scale_f, in->d_bias_f,
			     in->d_zero, in->d_one, BN_APPLY_RELU, d_a));
	if (ev)
		GP_TRY(CUDA_CHECK(cudaEventRecord(ev[1], st)));
	GP_TRY(conv2d_fwd_cuda(g->ctx, &a, NULL, d_a, in->d_w, NULL, d_y));
	if (ev)
		GP_TRY(CUDA_CHECK(cudaEventRecord(ev[2], st)));
	GP_TRY(bn_sync_sums_cuda(st, HT, 1, &b, d_y, d_sums));
	if (ev)
		GP_TRY(CUDA_CHECK(cudaEventRecord(ev[3], st)));
	return 0;
}

/* The fused graph's device buffers by uid. */
struct fused_bufs {
	void *scale, *bias, *y;
	float *sum, *sqsum;
	void *ws;
};

static int fused_run(struct gpu *g, const struct cg_plan *p, const struct inputs *in, const struct fused_bufs *f)
{
	const int64_t uids[] = { CG_UID_X, CG_UID_W, CG_UID_SCALE, CG_UID_BIAS, CG_UID_Y, CG_UID_SUM, CG_UID_SQSUM };
	void *ptrs[] = { in->d_x, in->d_w, f->scale, f->bias, f->y, f->sum, f->sqsum };
	return cg_execute(g->ctx->cudnn, p, 7, uids, ptrs, f->ws);
}

static void fused_bufs_make(struct gpu *g, const struct cg_conv_shape *s, const struct variant *v,
			    const struct cg_plan *p, const struct inputs *in, struct fused_bufs *f)
{
	size_t c = (size_t)s->c, ny = cg_y_count(s);
	f->scale = cg_dev_typed(g, v->param, in->scale, c);
	f->bias = cg_dev_typed(g, v->param, in->bias, c);
	f->y = dev_bytes(g, ny * 2);
	f->sum = dev_f(g, (size_t)s->k);
	f->sqsum = dev_f(g, (size_t)s->k);
	f->ws = p->ws_bytes > 0 ? dev_bytes(g, (size_t)p->ws_bytes) : NULL;
}

/* sums (2 x k doubles on the device) into sum and sqsum (host). */
static void sums_down(struct gpu *g, const struct cg_conv_shape *s, const double *d_sums, double *sum, double *sqsum)
{
	size_t k = (size_t)s->k;
	double *h = host_bytes(g, 2 * k * sizeof(double));
	get(g, h, d_sums, 2 * k * sizeof(double));
	memcpy(sum, h, k * sizeof(double));
	memcpy(sqsum, h + k, k * sizeof(double));
}

static void stats_down(struct gpu *g, const struct cg_conv_shape *s, const struct fused_bufs *f, double *sum,
		       double *sqsum)
{
	size_t k = (size_t)s->k;
	float *a = down(g, f->sum, k), *b = down(g, f->sqsum, k);
	for (size_t i = 0; i < k; i++) {
		sum[i] = a[i];
		sqsum[i] = b[i];
	}
}

/* Fused against unfused (and the host, where given) on shape s: output and statistics,
 * after a first and a second run. */
static void check_fused(struct gpu *g, const struct cg_conv_shape *s, const struct variant *v, const struct cg_plan *p,
			const struct inputs *in, const float *y_host, const double *sum_host, const double *sqsum_host)
{
	size_t ny = cg_y_count(s), k = (size_t)s->k;
	double tol = tol_for(HT);
	struct fused_bufs f;
	fused_bufs_make(g, s, v, p, in, &f);
	void *d_a = dev_bytes(g, cg_x_count(s) * 2), *d_y = dev_bytes(g, ny * 2);
	double *d_sums = dev_bytes(g, 2 * k * sizeof(double));
	double *sum_u = host_bytes(g, k * sizeof(double)), *sqsum_u = host_bytes(g, k * sizeof(double));
	double *sum_f = host_bytes(g, k * sizeof(double)), *sqsum_f = host_bytes(g, k * sizeof(double));

	CHECK_OK(unfused_run(g, s, in, d_a, d_y, d_sums, NULL));
	float *y_u = down_h(g, HT, d_y, ny);
	sums_down(g, s, d_sums, sum_u, sqsum_u);
	for (int run = 1; run <= 2; run++) {
		CHECK_OK(fused_run(g, p, in, &f));
		float *y_f = down_h(g, HT, f.y, ny);
		stats_down(g, s, &f, sum_f, sqsum_f);
		double ey = rel_err_norm_f32(y_f, y_u, ny), es = rel_err_norm_f64(sum_f, sum_u, k),
		       eq = rel_err_norm_f64(sqsum_f, sqsum_u, k);
		printf("      fused against unfused, n%lld %lldx%lld, run %d: y %.3g (max %.3g), sum %.3g, "
		       "sum of squares %.3g\n",
		       (long long)s->n, (long long)s->h, (long long)s->w, run, ey, cg_max_rel(y_f, y_u, ny), es, eq);
		CHECK_MSG(ey <= tol, "fused y against unfused, run %d: %.3g > %.3g", run, ey, tol);
		CHECK_MSG(es <= tol && eq <= tol,
			  "fused statistics against unfused, run %d (a second run that doubles them "
			  "accumulates): sum %.3g, sum of squares %.3g > %.3g",
			  run, es, eq, tol);
		if (y_host && run == 1) {
			double eh = rel_err_norm_f32(y_f, y_host, ny), ehs = rel_err_norm_f64(sum_f, sum_host, k),
			       ehq = rel_err_norm_f64(sqsum_f, sqsum_host, k), euh = rel_err_norm_f32(y_u, y_host, ny);
			printf("      against the host: fused y %.3g (max %.3g), unfused y %.3g, fused sum %.3g, "
			       "sum of squares %.3g\n",
			       eh, cg_max_rel(y_f, y_host, ny), euh, ehs, ehq);
			CHECK_MSG(eh <= tol && euh <= tol, "y against the host: fused %.3g, unfused %.3g > %.3g", eh,
				  euh, tol);
			CHECK_MSG(ehs <= tol && ehq <= tol, "fused statistics against the host: %.3g, %.3g > %.3g",
				  ehs, ehq, tol);
		}
	}
}

/* --- tests ------------------------------------------------------------------------------------ */

/* Without a device: cuDNN checks every descriptor's attributes (names, types, counts)
 * when they are set and finalized, and the operation graph finalizes without a handle,
 * so both graphs are built here down to the operation graph; a wrong attribute type
 * gives one line naming the call, the attribute and the status. */
TEST(cudnn_graph_descriptors_finalize_without_device)
{
	struct cg_graph g;
	struct cg_conv_fwd_opts plain = { .io = CUDNN_DATA_BFLOAT16 };
	int rc = cg_conv_fwd_graph(NULL, &SMALL, &plain, &g);
	CHECK_MSG(rc == 0, "plain conv graph: %s", gp_errmsg());
	CHECK_EQ_INT(g.n_ops, 1);
	CHECK(g.opgraph != NULL);
	cg_graph_destroy(&g);
	for (int i = 0; i < N_VARIANTS; i++) {
		struct cg_conv_fwd_opts o = { .io = VARIANTS[i].io, .param = VARIANTS[i].param,
					      .inter = VARIANTS[i].inter, .prologue = 1, .genstats = 1 };
		rc = cg_conv_fwd_graph(NULL, &REAL, &o, &g);
		CHECK_MSG(rc == 0, "fused graph, %s: %s", VARIANTS[i].name, gp_errmsg());
		CHECK_EQ_INT(g.n_ops, 5); /* mul, add, relu, conv, genstats */
		cg_graph_destroy(&g);
	}
	struct cg_conv_fwd_opts f = { .io = FP32_PROBE.io, .param = FP32_PROBE.param,
				      .inter = FP32_PROBE.inter, .prologue = 1, .genstats = 1 };
	rc = cg_conv_fwd_graph(NULL, &REAL, &f, &g);
	CHECK_MSG(rc == 0, "fused graph, %s: %s", FP32_PROBE.name, gp_errmsg());
	if (rc == 0)
		cg_graph_destroy(&g);

	cudnnBackendDescriptor_t t;
	const int64_t wrong = 9;
	CHECK_OK(cg_desc_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor", &t));
	rc = CG_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_INT64, 1, &wrong);
	CHECK(rc < 0);
	const char *m = gp_errmsg();
	CHECK_MSG(strstr(m, "cudnnBackendSetAttribute(CUDNN_ATTR_TENSOR_DATA_TYPE) failed: ") == m &&
			  strstr(m, "CUDNN_STATUS_BAD_PARAM") && !strchr(m, '\n'),
		  "error line: %s", m);
	cg_desc_destroy(t);
}

/* The dimensions cuDNN holds for the tensor attribute attr of a finalized convolution
 * operation, read back in the order given (N, C, H, W; weights K, C, R, S), and the
 * group count it inferred. cuDNN 9.19 holds them split by group, 5-D: activations
 * N x G x C/G x H x W, weights G x K/G x C/G x R x S (G 1 for an ungrouped convolution);
 * a cuDNN that hands back the 4 dimensions as given reports groups -1. 0 on success. */
static int op_tensor_dims(cudnnBackendDescriptor_t op, cudnnBackendAttributeName_t attr, int is_weight,
			  int64_t dims[4], int64_t *groups)
{
	cudnnBackendDescriptor_t t;
	int64_t cnt = 0, nd = 0, d[CG_MAX_DIMS] = { 0 };
	int rc = cg_desc_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor to read back", &t);
	if (rc < 0)
		return rc;
	if (cudnnBackendGetAttribute(op, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &t) != CUDNN_STATUS_SUCCESS ||
	    cnt != 1 ||
	    cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, CG_MAX_DIMS, &nd, d) !=
		    CUDNN_STATUS_SUCCESS)
		rc = gp_error(GP_EDEVICE, "cannot read tensor attribute %d back", (int)attr);
	cg_desc_destroy(t);
	if (rc < 0)
		return rc;
	if (nd == 4) {
		memcpy(dims, d, 4 * sizeof(*d));
		*groups = -1;
	} else if (nd == 5 && is_weight) {
		int64_t w[4] = { d[0] * d[1], d[2], d[3], d[4] };
		memcpy(dims, w, sizeof(w));
		*groups = d[0];
	} else if (nd == 5) {
		int64_t a[4] = { d[0], d[1] * d[2], d[3], d[4] };
		memcpy(dims, a, sizeof(a));
		*groups = d[1];
	} else {
		rc = gp_error(GP_EDEVICE, "tensor attribute %d: %lld dimensions", (int)attr, (long long)nd);
	}
	return rc;
}

/* Checks that the tensor attribute attr of op has dimensions a x b x c x d and, where
 * cuDNN says, g groups. */
#define CHECK_OP_DIMS(op, attr, is_w, g, a, b, c, d)                                                          \
	do {                                                                                                  \
		int64_t dims_[4] = { 0 }, g_ = 0;                                                             \
		CHECK_OK(op_tensor_dims((op), (attr), (is_w), dims_, &g_));                                   \
		CHECK_MSG(dims_[0] == (a) && dims_[1] == (b) && dims_[2] == (c) && dims_[3] == (d) &&         \
				  (g_ == (g) || g_ == -1),                                                    \
			  #attr ": %lld x %lld x %lld x %lld in %lld groups, want %lld x %lld x %lld x %lld in " \
				"%lld",                                                                       \
			  (long long)dims_[0], (long long)dims_[1], (long long)dims_[2], (long long)dims_[3],  \
			  (long long)g_, (long long)(a), (long long)(b), (long long)(c), (long long)(d),        \
			  (long long)(g));                                                                    \
	} while (0)

/* Without a device: MobileNetV2's depthwise 3x3 layers (bf16 NHWC, pad 1, stride 1 and
 * 2, groups = channels) as forward, data-gradient and filter-gradient graphs. The group
 * count reaches cuDNN only through the weights' 1 input channel against x's c: each
 * graph finalizes down to its operation graph, and the operation holds x (or dx) with c
 * channels, w (or dw) c x 1 x 3 x 3 and y (or dy) at the strided size, every one split
 * into c groups (where cuDNN shows its split). An ungrouped shape stays in 1 group; a
 * count that does not divide the channels is refused before cuDNN sees it. */
TEST(cudnn_graph_depthwise_graphs_finalize_without_device)
{
	const struct cg_conv_shape shapes[] = { CG_DW(256, 144, 56, 1), CG_DW(256, 96, 112, 2) };
	const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16;
	for (int i = 0; i < 2; i++) {
		const struct cg_conv_shape *s = &shapes[i];
		const int64_t c = s->c, p = cg_conv_out(s->h, 3, 1, s->stride);
		struct cg_graph g;
		CHECK_EQ_INT((int)cg_conv_w_c(s), 1);
		CHECK_EQ_INT((int)cg_w_count(s), (int)(c * 9));

		struct cg_conv_fwd_opts fo = { .io = bf };
		int rc = cg_conv_fwd_graph(NULL, s, &fo, &g);
		CHECK_MSG(rc == 0, "depthwise forward, %lld channels, stride %lld: %s", (long long)c,
			  (long long)s->stride, gp_errmsg());
		if (rc == 0) {
			CHECK_EQ_INT(g.n_ops, 1);
			CHECK(g.opgraph != NULL);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 0, c, 256, c, s->h, s->w);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 1, c, c, 1, 3, 3);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, 0, c, 256, c, p, p);
		}
		cg_graph_destroy(&g);

		struct cg_dgrad_opts dop = { .io = bf };
		rc = cg_dgrad_graph(NULL, s, &dop, &g);
		CHECK_MSG(rc == 0, "depthwise data gradient, %lld channels, stride %lld: %s", (long long)c,
			  (long long)s->stride, gp_errmsg());
		if (rc == 0) {
			CHECK_EQ_INT(g.n_ops, 1);
			CHECK(g.opgraph != NULL);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, 0, c, 256, c, p, p);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, 1, c, c, 1, 3, 3);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, 0, c, 256, c, s->h, s->w);
		}
		cg_graph_destroy(&g);

		/* the weight gradient in bf16, as the own kernels write it */
		struct cg_wgrad_opts wo = { .io = bf, .dw = bf };
		rc = cg_wgrad_graph(NULL, s, &wo, &g);
		CHECK_MSG(rc == 0, "depthwise filter gradient, %lld channels, stride %lld: %s", (long long)c,
			  (long long)s->stride, gp_errmsg());
		if (rc == 0) {
			CHECK_EQ_INT(g.n_ops, 1);
			CHECK(g.opgraph != NULL);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, 0, c, 256, c, s->h, s->w);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, 0, c, 256, c, p, p);
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, 1, c, c, 1, 3, 3);
		}
		cg_graph_destroy(&g);
		/* and in float, the probe's second choice */
		wo.dw = CUDNN_DATA_FLOAT;
		rc = cg_wgrad_graph(NULL, s, &wo, &g);
		CHECK_MSG(rc == 0, "depthwise filter gradient in float, %lld channels: %s", (long long)c, gp_errmsg());
		if (rc == 0)
			CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, 1, c, c, 1, 3, 3);
		cg_graph_destroy(&g);
	}

	struct cg_conv_shape bad = CG_DW(2, 96, 8, 1);
	bad.groups = 5;
	struct cg_graph g;
	struct cg_conv_fwd_opts fo = { .io = bf };
	CHECK_EQ_INT(cg_conv_fwd_graph(NULL, &bad, &fo, &g), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "5 groups do not divide 96 input and 96 output channels") != NULL, "error: %s",
		  gp_errmsg());
	cg_graph_destroy(&g);
	/* groups left at 0 is the ungrouped convolution every earlier caller builds */
	struct cg_conv_shape plain = CG_DW(2, 96, 8, 1);
	plain.groups = 0;
	CHECK_EQ_INT((int)cg_conv_w_c(&plain), 96);
	CHECK_OK(cg_conv_fwd_graph(NULL, &plain, &fo, &g));
	if (g.n_ops == 1) {
		CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 0, 1, 2, 96, 8, 8);
		CHECK_OP_DIMS(g.ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 1, 1, 96, 96, 3, 3);
	}
	cg_graph_destroy(&g);
}

/* A plain convolution forward through the graph API against the host and the legacy
 * API's planned convolution, on the small shape. */
TEST(cudnn_graph_conv_fwd_matches_legacy)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 31);
	CHECK_OK(cuda_ctx_set_act(g.ctx, HT, 1));
	const struct cg_conv_shape *s = &SMALL;
	size_t ny = cg_y_count(s);
	struct inputs in;
	inputs_make(&g, s, &in);
	float *y_host = host_f(&g, ny);
	cg_conv_host(s, in.x, in.w, y_host, NULL, NULL);

	struct cg_conv_fwd_opts o = { .io = CUDNN_DATA_BFLOAT16 };
	struct cg_graph gr;
	struct cg_plan p = { 0 };
	int rc = cg_conv_fwd_graph(g.ctx->cudnn, s, &o, &gr);
	if (rc == 0)
		rc = cg_plan_build(&gr, &p);
	CHECK_MSG(rc == 0, "plain conv through the graph API: %s", gp_errmsg());
	if (rc == 0) {
		char desc[200];
		cg_plan_describe(&p, desc, sizeof(desc));
		printf("      plain conv: %s\n", desc);
		void *d_y = dev_bytes(&g, ny * 2), *d_yl = dev_bytes(&g, ny * 2);
		void *ws = p.ws_bytes > 0 ? dev_bytes(&g, (size_t)p.ws_bytes) : NULL;
		const int64_t uids[] = { CG_UID_X, CG_UID_W, CG_UID_Y };
		void *ptrs[] = { in.d_x, in.d_w, d_y };
		struct conv2d_args a = cg_legacy_args(s);
		CHECK_OK(cg_execute(g.ctx->cudnn, &p, 3, uids, ptrs, ws));
		CHECK_OK(conv2d_fwd_cuda(g.ctx, &a, NULL, in.d_x, in.d_w, NULL, d_yl));
		float *y = down_h(&g, HT, d_y, ny), *yl = down_h(&g, HT, d_yl, ny);
		double eh = rel_err_norm_f32(y, y_host, ny), el = rel_err_norm_f32(y, yl, ny);
		printf("      graph conv against the host %.3g (max %.3g), against legacy %.3g (max %.3g)\n", eh,
		       cg_max_rel(y, y_host, ny), el, cg_max_rel(y, yl, ny));
		CHECK_MSG(eh <= tol_for(HT), "graph conv against the host: %.3g", eh);
		CHECK_MSG(el <= tol_for(HT), "graph conv against legacy: %.3g", el);
	}
	cg_plan_destroy(&p);
	cg_graph_destroy(&gr);
	gpu_close(&g);
}

/* The fused pattern on the small shape against the unfused sequence and the host. */
TEST(cudnn_graph_fused_conv_genstats_matches_unfused)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 32);
	CHECK_OK(cuda_ctx_set_act(g.ctx, HT, 1));
	const struct cg_conv_shape *s = &SMALL;
	size_t ny = cg_y_count(s), k = (size_t)s->k;
	struct inputs in;
	inputs_make(&g, s, &in);
	float *y_host = host_f(&g, ny);
	double *sum = host_bytes(&g, k * sizeof(double)), *sqsum = host_bytes(&g, k * sizeof(double));
	cg_conv_host(s, prologue_host(&g, s, in.x, in.scale, in.bias), in.w, y_host, sum, sqsum);

	struct cg_graph gr;
	struct cg_plan p;
	int v = fused_pick(&g, s, &gr, &p);
	if (v >= 0) {
		check_fused(&g, s, &VARIANTS[v], &p, &in, y_host, sum, sqsum);
		cg_plan_destroy(&p);
		cg_graph_destroy(&gr);
	}
	gpu_close(&g);
}

#define REPS CG_REPS

/* The plain convolution alone through the graph API and through the legacy path, on x
 * (the same bf16 input as the fused run's): whether the graph's engines are as fast
 * as the legacy algorithms before any fusion, to read the fused ratio against. */
static void plain_conv_timing(struct gpu *g, const struct cg_conv_shape *s, const struct inputs *in, void *d_y1,
			      void *d_y2, cudaEvent_t *ev)
{
	struct cg_conv_fwd_opts o = { .io = CUDNN_DATA_BFLOAT16 };
	struct cg_graph gr;
	struct cg_plan p = { 0 };
	struct conv2d_args a = cg_legacy_args(s);
	float t_graph[REPS], t_legacy[REPS];
	int rc = cg_conv_fwd_graph(g->ctx->cudnn, s, &o, &gr);
	if (rc == 0)
		rc = cg_plan_build(&gr, &p);
	CHECK_MSG(rc == 0, "plain conv through the graph API: %s", gp_errmsg());
	void *ws = rc == 0 && p.ws_bytes > 0 ? dev_bytes(g, (size_t)p.ws_bytes) : NULL;
	const int64_t uids[] = { CG_UID_X, CG_UID_W, CG_UID_Y };
	void *ptrs[] = { in->d_x, in->d_w, d_y1 };
	for (int i = -3; i < REPS && rc == 0; i++) {
		rc = CUDA_CHECK(cudaEventRecord(ev[0], g->ctx->stream));
		if (rc == 0)
			rc = cg_execute(g->ctx->cudnn, &p, 3, uids, ptrs, ws);
		if (rc == 0)
			rc = CUDA_CHECK(cudaEventRecord(ev[1], g->ctx->stream));
		if (rc == 0)
			rc = conv2d_fwd_cuda(g->ctx, &a, NULL, in->d_x, in->d_w, NULL, d_y2);
		if (rc == 0)
			rc = CUDA_CHECK(cudaEventRecord(ev[2], g->ctx->stream));
		if (rc == 0)
			rc = CUDA_CHECK(cudaEventSynchronize(ev[2]));
		if (rc == 0 && i >= 0)
			rc = CUDA_CHECK(cudaEventElapsedTime(&t_graph[i], ev[0], ev[1]));
		if (rc == 0 && i >= 0)
			rc = CUDA_CHECK(cudaEventElapsedTime(&t_legacy[i], ev[1], ev[2]));
	}
	CHECK_MSG(rc == 0, "plain conv timing: %s", gp_errmsg());
	if (rc == 0) {
		char desc[200];
		cg_plan_describe(&p, desc, sizeof(desc));
		printf("      plain conv alone, median of %d: graph %.3f ms (%s), legacy %.3f ms\n", REPS,
		       cg_median(t_graph, REPS), desc, cg_median(t_legacy, REPS));
	}
	cg_plan_destroy(&p);
	cg_graph_destroy(&gr);
}

/* The real shape: the fused graph checked against the unfused sequence, then both
 * timed (median of REPS runs after warm-up, CUDA events on the context's stream). */
TEST(cudnn_graph_fused_timing_resnet50_layer)
{
	struct gpu g;
	NEED_GPU();
	GPU_OPEN(&g, 33);
	CHECK_OK(cuda_ctx_set_act(g.ctx, HT, 1));
	const struct cg_conv_shape *s = &REAL;
	size_t ny = cg_y_count(s), k = (size_t)s->k;
	struct inputs in;
	inputs_make(&g, s, &in);

	struct cg_graph gr;
	struct cg_plan p;
	int v = fused_pick(&g, s, &gr, &p);
	if (v < 0) {
		gpu_close(&g);
		return;
	}
	check_fused(&g, s, &VARIANTS[v], &p, &in, NULL, NULL, NULL);

	struct fused_bufs f;
	fused_bufs_make(&g, s, &VARIANTS[v], &p, &in, &f);
	void *d_a = dev_bytes(&g, cg_x_count(s) * 2), *d_y = dev_bytes(&g, ny * 2);
	double *d_sums = dev_bytes(&g, 2 * k * sizeof(double));
	cudaEvent_t ev[4];
	int n_ev = 0;
	for (; n_ev < 4; n_ev++)
		if (cudaEventCreate(&ev[n_ev]) != cudaSuccess)
			break;
	CHECK_EQ_INT(n_ev, 4);
	if (n_ev == 4) {
		float t_fused[REPS], t_unfused[REPS], t_pro[REPS], t_conv[REPS], t_stats[REPS];
		int rc = 0;
		for (int i = 0; i < 3 && rc == 0; i++) {
			rc = fused_run(&g, &p, &in, &f);
			if (rc == 0)
				rc = unfused_run(&g, s, &in, d_a, d_y, d_sums, NULL);
		}
		for (int i = 0; i < REPS && rc == 0; i++) {
			rc = CUDA_CHECK(cudaEventRecord(ev[0], g.ctx->stream));
			if (rc == 0)
				rc = fused_run(&g, &p, &in, &f);
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventRecord(ev[1], g.ctx->stream));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventSynchronize(ev[1]));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventElapsedTime(&t_fused[i], ev[0], ev[1]));
			if (rc == 0)
				rc = unfused_run(&g, s, &in, d_a, d_y, d_sums, ev);
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventSynchronize(ev[3]));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventElapsedTime(&t_unfused[i], ev[0], ev[3]));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventElapsedTime(&t_pro[i], ev[0], ev[1]));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventElapsedTime(&t_conv[i], ev[1], ev[2]));
			if (rc == 0)
				rc = CUDA_CHECK(cudaEventElapsedTime(&t_stats[i], ev[2], ev[3]));
		}
		CHECK_MSG(rc == 0, "timing runs: %s", gp_errmsg());
		if (rc == 0) {
			char desc[200];
			float mf = cg_median(t_fused, REPS), mu = cg_median(t_unfused, REPS);
			cg_plan_describe(&p, desc, sizeof(desc));
			printf("      n%lld %lld->%lld %lldx%lld 3x3 bf16, median of %d: fused %.3f ms (%s: %s); "
			       "unfused %.3f ms (scale-bias-ReLU %.3f + legacy conv %.3f + statistics %.3f); "
			       "unfused / fused %.2fx\n",
			       (long long)s->n, (long long)s->c, (long long)s->k, (long long)s->h, (long long)s->w,
			       REPS, mf, VARIANTS[v].name, desc, mu, cg_median(t_pro, REPS), cg_median(t_conv, REPS),
			       cg_median(t_stats, REPS), mf > 0 ? mu / mf : 0.0);
			plain_conv_timing(&g, s, &in, d_a, d_y, ev);
		}
	}
	for (int i = 0; i < n_ev; i++)
		cudaEventDestroy(ev[i]);
	cg_plan_destroy(&p);
	cg_graph_destroy(&gr);
	gpu_close(&g);
}
