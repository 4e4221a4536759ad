/* cuDNN's graph API (ops/cuda/cudnn_graph.c), second part of the probe for issue 24:
 * the graphs a fused ResNet-50 training step needs beside the forward ConvBNfprop that
 * test_cudnn_graph.c probes. CPU test here; GPU probes below. */
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

/* The residual forward's shape: the first 1x1 of a layer-1 block after another block
 * (256 -> 64 channels at 56x56), whose input is relu(bn(conv3) + shortcut). */
#define CG_RES_REAL ((struct cg_conv_shape){ .n = 256, .c = 256, .h = 56, .w = 56, .k = 64, .r = 1, .s = 1, \
					     .pad = 0, .stride = 1 })
#define CG_RES_SMALL ((struct cg_conv_shape){ .n = 2, .c = 64, .h = 10, .w = 10, .k = 64, .r = 1, .s = 1, \
					      .pad = 0, .stride = 1 })

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
