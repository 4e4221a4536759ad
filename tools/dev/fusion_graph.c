/* fusion_bench's fused side: one cuDNN backend-API graph per shape and direction
 * (prologue -> convolution forward with GEN_STATS, weight gradient or data gradient with
 * the ReLU backward), its engines from the heuristics, and the fastest plan timed. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion_bench.h"

/* Attribute setters: the stringized call names the attribute, its type and count. */
#define SET(d, attr, type, n, p) DNN_OK(cudnnBackendSetAttribute((d), (attr), (type), (n), (p)))
#define FINALIZE(d) DNN_OK(cudnnBackendFinalize(d))

#define FZ_MAX_CFG 64

static cudnnBackendDescriptor_t fz_new(struct fused *f, cudnnBackendDescriptorType_t type)
{
	cudnnBackendDescriptor_t d = NULL;
	if (f->nd == FZ_MAX_DESC) {
		fprintf(stderr, "fusion_bench: more than %d backend descriptors in one graph\n", FZ_MAX_DESC);
		return NULL;
	}
	if (!DNN_OK(cudnnBackendCreateDescriptor(type, &d)))
		return NULL;
	f->d[f->nd++] = d;
	return d;
}

void fz_free(struct fused *f)
{
	while (f->nd > 0)
		cudnnBackendDestroyDescriptor(f->d[--f->nd]);
	f->plan = f->vpack = NULL;
}

/* Unique ids of the graph's tensors (the variant pack maps the real ones to pointers). */
enum {
	UID_X = 1,
	UID_W,
	UID_SCALE,
	UID_BIAS,
	UID_Y,
	UID_SUM,
	UID_SQSUM,
	UID_DY,
	UID_DW,
	UID_DZ,
	UID_DA = 104, /* virtual */
	UID_SCALED = 101, /* virtual */
	UID_BIASED,
	UID_ACT,
};

/* A 4-d tensor: dimensions in NCHW order, strides of NHWC (channels innermost), 16-byte
 * aligned base. A per-channel tensor is 1xCx1x1, a filter KxCxRxS (KRSC in memory). */
static cudnnBackendDescriptor_t fz_tensor(struct fused *f, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
					  int64_t h, int64_t w, bool is_virtual)
{
	cudnnBackendDescriptor_t t = fz_new(f, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t dims[4] = { n, c, h, w }, strides[4] = { c * h * w, 1, w * c, c }, align = 16;
	if (!t || !SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
	    !SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) ||
	    !SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides) ||
	    !SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
	    !SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) ||
	    !SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual) || !FINALIZE(t))
		return NULL;
	return t;
}

/* y = mode(x[, b]) with float math; b is NULL for a unary mode. */
static cudnnBackendDescriptor_t fz_pointwise(struct fused *f, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
					     cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
{
	cudnnDataType_t prec = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t pw = fz_new(f, CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op;
	if (!pw || !SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
	    !SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) || !FINALIZE(pw))
		return NULL;
	op = fz_new(f, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	if (!op || !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw) ||
	    !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
	    (b && !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)) ||
	    !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) || !FINALIZE(op))
		return NULL;
	return op;
}

static cudnnBackendDescriptor_t fz_conv_fwd(struct fused *f, const struct conv_shape *s, cudnnBackendDescriptor_t x,
					    cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y)
{
	int64_t nsp = 2, pad[2] = { s->r / 2, s->r / 2 }, stride[2] = { s->stride, s->stride }, dil[2] = { 1, 1 };
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	float alpha = 1.0f, beta = 0.0f;
	cudnnBackendDescriptor_t cd = fz_new(f, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), op;
	if (!cd || !SET(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || !FINALIZE(cd))
		return NULL;
	op = fz_new(f, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
	if (!op || !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta) || !FINALIZE(op))
		return NULL;
	return op;
}

/* dw = conv_bwd_filter(x, dy), on the same kind of convolution descriptor. */
static cudnnBackendDescriptor_t fz_conv_wgrad(struct fused *f, const struct conv_shape *s, cudnnBackendDescriptor_t x,
					      cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dw)
{
	int64_t nsp = 2, pad[2] = { s->r / 2, s->r / 2 }, stride[2] = { s->stride, s->stride }, dil[2] = { 1, 1 };
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	float alpha = 1.0f, beta = 0.0f;
	cudnnBackendDescriptor_t cd = fz_new(f, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), op;
	if (!cd || !SET(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || !FINALIZE(cd))
		return NULL;
	op = fz_new(f, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
	if (!op || !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dw) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta) || !FINALIZE(op))
		return NULL;
	return op;
}

/* dx = conv_bwd_data(dy, w). */
static cudnnBackendDescriptor_t fz_conv_dgrad(struct fused *f, const struct conv_shape *s, cudnnBackendDescriptor_t dy,
					      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t dx)
{
	int64_t nsp = 2, pad[2] = { s->r / 2, s->r / 2 }, stride[2] = { s->stride, s->stride }, dil[2] = { 1, 1 };
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	float alpha = 1.0f, beta = 0.0f;
	cudnnBackendDescriptor_t cd = fz_new(f, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), op;
	if (!cd || !SET(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
	    !SET(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || !FINALIZE(cd))
		return NULL;
	op = fz_new(f, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
	if (!op || !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dx) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) ||
	    !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta) || !FINALIZE(op))
		return NULL;
	return op;
}

/* dx = dy * (x > 0): the ReLU backward as a pointwise operation with its forward input. */
static cudnnBackendDescriptor_t fz_relu_bwd(struct fused *f, cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t x,
					    cudnnBackendDescriptor_t dx)
{
	cudnnPointwiseMode_t mode = CUDNN_POINTWISE_RELU_BWD;
	cudnnDataType_t prec = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t pw = fz_new(f, CUDNN_BACKEND_POINTWISE_DESCRIPTOR), op;
	if (!pw || !SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
	    !SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) || !FINALIZE(pw))
		return NULL;
	op = fz_new(f, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	if (!op || !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw) ||
	    !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy) ||
	    !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
	    !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dx) || !FINALIZE(op))
		return NULL;
	return op;
}

static cudnnBackendDescriptor_t fz_genstats(struct fused *f, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t sum,
					    cudnnBackendDescriptor_t sqsum)
{
	cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
	cudnnDataType_t prec = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t op = fz_new(f, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
	if (!op || !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode) ||
	    !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
	    !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
	    !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum) ||
	    !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sqsum) ||
	    !FINALIZE(op))
		return NULL;
	return op;
}

/* The data types tried for the per-channel scale and bias and for the virtual
 * intermediates, in order, until one gets an engine: cuDNN's documented support varies
 * between 16-bit and float for each (cudnn-frontend's genstats test keeps both 16-bit). */
struct variant {
	const char *name;
	int sb_io, virt_io; /* 1: the data's type, 0: float */
};
static const struct variant variants[] = {
	{ "scale/bias io, virtual io", 1, 1 },
	{ "scale/bias io, virtual float", 1, 0 },
	{ "scale/bias float, virtual float", 0, 0 },
	{ "scale/bias float, virtual io", 0, 1 },
};

/* Builds the operation graph of shape s for one variant; NULL when cuDNN refuses it.
 * FZ_FWD: prologue -> convolution forward -> y, GEN_STATS of y. With prologue 0 (the
 * stem) the image goes straight into the convolution.
 * FZ_WGRAD: prologue -> weight gradient with dy -> dw (the activation made again inside
 * the kernel, as a fused forward pass that never stored it needs). */
static cudnnBackendDescriptor_t fz_graph(struct fused *f, const struct conv_shape *s, int n, enum fb_dtype dtype,
					 const struct variant *v, int prologue, enum fz_kind kind)
{
	cudnnDataType_t io = dtype_cudnn(dtype), fl = CUDNN_DATA_FLOAT;
	cudnnDataType_t sbt = v->sb_io ? io : fl, vt = v->virt_io ? io : fl;
	int p = shape_out(s);
	cudnnBackendDescriptor_t ops[5], og, x, w, y, sum, sq, conv_in;
	int nops = 0, wg = kind == FZ_WGRAD;
	if (kind == FZ_DGRAD) {
		/* dy, w -> dgrad -> da (virtual) -> ReLU backward with the mask's source m -> dz.
		 * prologue 1: m is the convolution's raw input z, the mask relu'(z*scale + bias)
		 * made in the epilogue (a fused forward keeps only z); 0: m is the stored
		 * activation. */
		cudnnBackendDescriptor_t dy = fz_tensor(f, UID_DY, io, n, s->k, p, p, false);
		cudnnBackendDescriptor_t wt = fz_tensor(f, UID_W, io, s->k, s->c, s->r, s->r, false);
		cudnnBackendDescriptor_t m = fz_tensor(f, UID_X, io, n, s->c, s->hw, s->hw, false);
		cudnnBackendDescriptor_t dz = fz_tensor(f, UID_DZ, io, n, s->c, s->hw, s->hw, false);
		cudnnBackendDescriptor_t da = fz_tensor(f, UID_DA, vt, n, s->c, s->hw, s->hw, true);
		if (!dy || !wt || !m || !dz || !da || !(ops[nops++] = fz_conv_dgrad(f, s, dy, wt, da)))
			return NULL;
		if (prologue) {
			cudnnBackendDescriptor_t sc = fz_tensor(f, UID_SCALE, sbt, 1, s->c, 1, 1, false);
			cudnnBackendDescriptor_t bi = fz_tensor(f, UID_BIAS, sbt, 1, s->c, 1, 1, false);
			cudnnBackendDescriptor_t t1 = fz_tensor(f, UID_SCALED, vt, n, s->c, s->hw, s->hw, true);
			cudnnBackendDescriptor_t t2 = fz_tensor(f, UID_BIASED, vt, n, s->c, s->hw, s->hw, true);
			if (!sc || !bi || !t1 || !t2 || !(ops[nops++] = fz_pointwise(f, CUDNN_POINTWISE_MUL, m, sc, t1)) ||
			    !(ops[nops++] = fz_pointwise(f, CUDNN_POINTWISE_ADD, t1, bi, t2)))
				return NULL;
			m = t2;
		}
		if (!(ops[nops++] = fz_relu_bwd(f, da, m, dz)))
			return NULL;
		goto graph;
	}
	/* Forward: w and y are the weights and the output; weight gradient: dw and dy. */
	x = fz_tensor(f, UID_X, io, n, s->c, s->hw, s->hw, false);
	w = fz_tensor(f, wg ? UID_DW : UID_W, io, s->k, s->c, s->r, s->r, false);
	y = fz_tensor(f, wg ? UID_DY : UID_Y, io, n, s->k, p, p, false);
	sum = wg ? x : fz_tensor(f, UID_SUM, fl, 1, s->k, 1, 1, false);
	sq = wg ? x : fz_tensor(f, UID_SQSUM, fl, 1, s->k, 1, 1, false);
	if (!x || !w || !y || !sum || !sq)
		return NULL;
	conv_in = x;
	if (prologue) {
		cudnnBackendDescriptor_t sc = fz_tensor(f, UID_SCALE, sbt, 1, s->c, 1, 1, false);
		cudnnBackendDescriptor_t bi = fz_tensor(f, UID_BIAS, sbt, 1, s->c, 1, 1, false);
		cudnnBackendDescriptor_t t1 = fz_tensor(f, UID_SCALED, vt, n, s->c, s->hw, s->hw, true);
		cudnnBackendDescriptor_t t2 = fz_tensor(f, UID_BIASED, vt, n, s->c, s->hw, s->hw, true);
		/* The convolution's input: virtual, in the data's type or float per variant. */
		cudnnBackendDescriptor_t t3 = fz_tensor(f, UID_ACT, vt, n, s->c, s->hw, s->hw, true);
		if (!sc || !bi || !t1 || !t2 || !t3)
			return NULL;
		if (!(ops[nops++] = fz_pointwise(f, CUDNN_POINTWISE_MUL, x, sc, t1)) ||
		    !(ops[nops++] = fz_pointwise(f, CUDNN_POINTWISE_ADD, t1, bi, t2)) ||
		    !(ops[nops++] = fz_pointwise(f, CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3)))
			return NULL;
		conv_in = t3;
	}
	if (wg) {
		if (!(ops[nops++] = fz_conv_wgrad(f, s, conv_in, y, w)))
			return NULL;
	} else if (!(ops[nops++] = fz_conv_fwd(f, s, conv_in, w, y)) || !(ops[nops++] = fz_genstats(f, y, sum, sq)))
		return NULL;
graph:
	og = fz_new(f, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	if (!og || !SET(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops))
		return NULL;
	/* Deprecated in later cuDNN 9 releases, needed by earlier ones: a refusal is no error. */
	DNN_PROBE(cudnnBackendSetAttribute(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &f->h));
	if (!DNN_PROBE(cudnnBackendFinalize(og)))
		return NULL;
	return og;
}

/* What the engine behind an engine configuration is: its global index, whether it
 * compiles at run time (the runtime fusion engines) and uses tensor cores. */
static void fz_engine_info(struct fused *f, cudnnBackendDescriptor_t cfg)
{
	cudnnBackendDescriptor_t e = fz_new(f, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
	cudnnBackendBehaviorNote_t bn[16];
	cudnnBackendNumericalNote_t nn[16];
	int64_t cnt = 0;
	f->engine = -1;
	f->rtc = f->tensor_core = 0;
	if (!e || !DNN_PROBE(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
						      &cnt, &e)))
		return;
	DNN_PROBE(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &f->engine));
	cnt = 0;
	if (DNN_PROBE(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &cnt,
					       bn)))
		for (int64_t i = 0; i < cnt && i < 16; i++)
			f->rtc |= bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
	cnt = 0;
	if (DNN_PROBE(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &cnt,
					       nn)))
		for (int64_t i = 0; i < cnt && i < 16; i++)
			f->tensor_core |= nn[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
}

int fz_run(void *p)
{
	struct fused *f = p;
	return (!f->stats || CUDA_OK(cudaMemsetAsync(f->stats, 0, 2 * (size_t)f->k * sizeof(float), f->st))) &&
	       DNN_OK(cudnnBackendExecute(f->h, f->plan, f->vpack));
}

/* The variant pack: the graph's non-virtual tensors and the workspace. */
static cudnnBackendDescriptor_t fz_vpack(struct fused *f, struct bufs *b, void *ws, int prologue,
					 const struct variant *v, enum fz_kind kind)
{
	int64_t uids[7] = { UID_X, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_SCALE, UID_BIAS };
	void *ptrs[7] = { b->x, b->w, b->yf, b->stats_f, b->stats_f + f->k, v->sb_io ? b->scale_io : b->scale_f,
			  v->sb_io ? b->bias_io : b->bias_f };
	int64_t n = prologue ? 7 : 5;
	if (kind == FZ_WGRAD) { /* x, dy, dw, scale, bias */
		uids[1] = UID_DY, ptrs[1] = b->yb;
		uids[2] = UID_DW, ptrs[2] = b->dwf;
		uids[3] = UID_SCALE, ptrs[3] = ptrs[5];
		uids[4] = UID_BIAS, ptrs[4] = ptrs[6];
		n = 5;
	} else if (kind == FZ_DGRAD) { /* dy, w, mask source (z or the activation), dz[, scale, bias] */
		uids[0] = UID_DY, ptrs[0] = b->yb;
		uids[2] = UID_X, ptrs[2] = prologue ? b->x : b->xa;
		uids[3] = UID_DZ, ptrs[3] = b->dzf;
		uids[4] = UID_SCALE, ptrs[4] = ptrs[5];
		uids[5] = UID_BIAS, ptrs[5] = ptrs[6];
		n = prologue ? 6 : 4;
	}
	cudnnBackendDescriptor_t vp = fz_new(f, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
	if (!vp || !SET(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids) ||
	    !SET(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs) ||
	    !SET(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) || !FINALIZE(vp))
		return NULL;
	return vp;
}

/* Finds a plan for shape s: for each variant, the heuristics in mode A then FALLBACK;
 * of the configurations they return, the first `plans` that finalize within the
 * workspace limit are timed and the fastest kept. Returns 1 with f->plan and f->vpack
 * set, 0 when no engine supports the pattern (f->nd left 0). */
int fz_setup(struct fused *f, struct timer *t, const struct conv_shape *s, const struct opts *o, struct bufs *b,
	     void *ws, int prologue, enum fz_kind kind)
{
	static const cudnnBackendHeurMode_t modes[2] = { CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK };
	static const char *mode_names[2] = { "A", "fallback" };
	/* The data gradient's virtual da has a type even without the scale and bias. */
	int nvar = o->dtype == FB_F32 || (!prologue && kind != FZ_DGRAD) ? 1
										: (int)(sizeof variants / sizeof variants[0]);
	for (int vi = 0; vi < nvar; vi++) {
		const struct variant *v = o->dtype == FB_F32 ? &variants[2] : &variants[vi];
		for (int mi = 0; mi < 2; mi++) {
			cudnnBackendDescriptor_t og, heur, cfgs[FZ_MAX_CFG], best = NULL, vp;
			int64_t count = 0, got = 0, best_ws = 0;
			float best_ms = 0;
			int timed = 0;
			fz_free(f);
			if (!(og = fz_graph(f, s, o->batch, o->dtype, v, prologue, kind)))
				goto next_variant; /* the graph itself is refused: no mode helps */
			heur = fz_new(f, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
			if (!heur ||
			    !SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og) ||
			    !SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]) ||
			    !DNN_PROBE(cudnnBackendFinalize(heur)))
				continue;
			if (!DNN_PROBE(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
								CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL)))
				continue;
			if (verbose)
				printf("  [%s, heuristics %s: %lld configurations]\n", v->name, mode_names[mi],
				       (long long)count);
			if (count <= 0)
				continue;
			count = count > FZ_MAX_CFG ? FZ_MAX_CFG : count;
			for (int64_t i = 0; i < count; i++)
				if (!(cfgs[i] = fz_new(f, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)))
					goto fail;
			if (!DNN_PROBE(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
								CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs)))
				continue;
			vp = fz_vpack(f, b, ws, prologue, v, kind);
			if (!vp)
				goto fail;
			f->vpack = vp;
			f->tried_cfgs = 0;
			f->finalized = 0;
			for (int64_t i = 0; i < got && timed < o->plans; i++) {
				cudnnBackendDescriptor_t plan = fz_new(f, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
				int64_t wsb = 0, cnt = 0;
				float ms;
				if (!plan)
					goto fail;
				f->tried_cfgs++;
				if (!SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
					 &cfgs[i]))
					continue;
				DNN_PROBE(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
								   1, &f->h));
				if (!DNN_PROBE(cudnnBackendFinalize(plan)))
					continue;
				f->finalized++;
				if (!DNN_OK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
								     CUDNN_TYPE_INT64, 1, &cnt, &wsb)) ||
				    wsb < 0 || (size_t)wsb > o->ws_bytes) {
					if (verbose)
						printf("  [configuration %lld needs %lld bytes of workspace: skipped]\n",
						       (long long)i, (long long)wsb);
					continue;
				}
				f->plan = plan;
				ms = time_median(t, fz_run, f, 1, 3);
				timed++;
				if (verbose)
					printf("  [configuration %lld: %.3f ms]\n", (long long)i, ms);
				if (ms >= 0 && (!best || ms < best_ms)) {
					best = plan;
					best_ms = ms;
					best_ws = wsb;
					fz_engine_info(f, cfgs[i]);
				}
			}
			if (best) {
				f->plan = best;
				f->ws_bytes = best_ws;
				f->variant = v->name;
				f->heur = mode_names[mi];
				return 1;
			}
			f->plan = NULL;
		}
	next_variant:;
	}
fail:
	fz_free(f);
	return 0;
}
