/* cuDNN's backend (graph) API in small C steps: descriptors, tensors, operations, an
 * operation graph, engine heuristics, execution plans and execution (cudnn_graph.h).
 * Attribute names, types and element counts follow cudnn_graph.h of cuDNN 9 and the
 * backend descriptor reference of its documentation. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "ops/cuda/cudnn_graph.h"

/* cuDNN's last message of this thread, on one line. */
static void last_message(char *buf, size_t cap)
{
	buf[0] = 0;
	cudnnGetLastErrorString(buf, cap);
	buf[cap - 1] = 0;
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
}

/* 0, or the error of a failed call: device memory is GP_EDEVOOM (recoverable, as
 * elsewhere), an unsupported graph, shape or type GP_EUNSUPPORTED, the rest GP_EDEVICE. */
static int cg_status(cudnnStatus_t s, const char *call, const char *what)
{
	if (s == CUDNN_STATUS_SUCCESS)
		return 0;
	char last[480];
	last_message(last, sizeof(last));
	int code = GP_EDEVICE;
	if (s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
		code = GP_EDEVOOM;
	else if (CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED)
		code = GP_EUNSUPPORTED;
	return gp_error(code, "%s(%s) failed: %s (%d)%s%s", call, what, cudnnGetErrorString(s), (int)s,
			last[0] ? "; cuDNN says: " : "", last);
}

int cg_desc_create(cudnnBackendDescriptorType_t type, const char *what, cudnnBackendDescriptor_t *out)
{
	*out = NULL;
	int rc = cg_status(cudnnBackendCreateDescriptor(type, out), "cudnnBackendCreateDescriptor", what);
	if (rc < 0)
		*out = NULL;
	return rc;
}

void cg_desc_destroy(cudnnBackendDescriptor_t d)
{
	if (d)
		cudnnBackendDestroyDescriptor(d);
}

int cg_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, const char *name,
	   cudnnBackendAttributeType_t type, int64_t count, const void *values)
{
	return cg_status(cudnnBackendSetAttribute(d, attr, type, count, values), "cudnnBackendSetAttribute", name);
}

int cg_finalize(cudnnBackendDescriptor_t d, const char *what)
{
	return cg_status(cudnnBackendFinalize(d), "cudnnBackendFinalize", what);
}

/* --- tensors ----------------------------------------------------------------------------- */

struct cg_tensor_spec cg_spec_nhwc(int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
				   int64_t w, int is_virtual)
{
	struct cg_tensor_spec s = { .uid = uid, .dtype = dt, .ndims = 4, .align_bytes = 16,
				    .is_virtual = is_virtual };
	s.dims[0] = n, s.dims[1] = c, s.dims[2] = h, s.dims[3] = w;
	s.strides[0] = c * h * w, s.strides[1] = 1, s.strides[2] = w * c, s.strides[3] = c;
	return s;
}

struct cg_tensor_spec cg_spec_channel(int64_t uid, cudnnDataType_t dt, int64_t c)
{
	return cg_spec_nhwc(uid, dt, 1, c, 1, 1, 0);
}

/* --- the graph's descriptors ---------------------------------------------------------------- */

void cg_graph_init(struct cg_graph *g, cudnnHandle_t handle)
{
	memset(g, 0, sizeof(*g));
	g->handle = handle;
}

void cg_graph_destroy(struct cg_graph *g)
{
	cg_desc_destroy(g->opgraph);
	for (int i = g->n_descs - 1; i >= 0; i--)
		cg_desc_destroy(g->descs[i]);
	memset(g->descs, 0, sizeof(g->descs));
	g->n_descs = g->n_ops = 0;
	g->opgraph = NULL;
}

/* A new descriptor owned by g. */
static int graph_new(struct cg_graph *g, cudnnBackendDescriptorType_t type, const char *what,
		     cudnnBackendDescriptor_t *out)
{
	*out = NULL;
	if (g->n_descs == CG_MAX_DESCS)
		return gp_error(GP_EINVAL, "cuDNN graph: more than %d descriptors (%s)", CG_MAX_DESCS, what);
	GP_TRY(cg_desc_create(type, what, out));
	g->descs[g->n_descs++] = *out;
	return 0;
}

/* A finalized operation joins the graph's list. */
static int graph_add_op(struct cg_graph *g, cudnnBackendDescriptor_t op, const char *what)
{
	GP_TRY(cg_finalize(op, what));
	if (g->n_ops == CG_MAX_OPS)
		return gp_error(GP_EINVAL, "cuDNN graph: more than %d operations (%s)", CG_MAX_OPS, what);
	g->ops[g->n_ops++] = op;
	return 0;
}

int cg_graph_tensor(struct cg_graph *g, const struct cg_tensor_spec *s, cudnnBackendDescriptor_t *out)
{
	if (s->ndims < 1 || s->ndims > CG_MAX_DIMS)
		return gp_error(GP_EINVAL, "cuDNN graph: tensor %lld has %d dimensions", (long long)s->uid,
				s->ndims);
	cudnnBackendDescriptor_t t;
	bool virt = s->is_virtual != 0, by_value = s->by_value != 0;
	GP_TRY(graph_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "CUDNN_BACKEND_TENSOR_DESCRIPTOR", &t));
	GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s->dtype));
	GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, s->ndims, s->dims));
	GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, s->ndims, s->strides));
	GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &s->uid));
	GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &s->align_bytes));
	if (virt)
		GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
	if (by_value)
		GP_TRY(CG_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
	char what[64];
	snprintf(what, sizeof(what), "tensor uid %lld", (long long)s->uid);
	GP_TRY(cg_finalize(t, what));
	*out = t;
	return 0;
}

/* --- operations ---------------------------------------------------------------------------- */

/* A finalized 2-D cross-correlation descriptor owned by g, shared by the three
 * convolution operations (forward, data gradient, filter gradient). */
static int conv_desc(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t *out)
{
	const int64_t dims = 2;
	const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	cudnnBackendDescriptor_t conv;

	GP_TRY(graph_new(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR", &conv));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &c->compute));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, c->dilation));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, c->stride));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, c->pad));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, c->pad));
	GP_TRY(cg_finalize(conv, "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR"));
	*out = conv;
	return 0;
}

/* A convolution operation's descriptor type and attributes, the three directions
 * alike: two inputs, an output, the convolution, alpha 1 and beta 0. */
struct conv_op_kind {
	cudnnBackendDescriptorType_t type;
	const char *type_name;
	cudnnBackendAttributeName_t in0, in1, out, conv, alpha, beta;
	const char *in0_name, *in1_name, *out_name, *conv_name, *alpha_name, *beta_name;
};

#define CONV_OP_KIND(TYPE, P, IN0, IN1, OUT)                                               \
	{ TYPE, #TYPE, P##IN0, P##IN1, P##OUT, P##CONV_DESC, P##ALPHA, P##BETA, #P #IN0,     \
	  #P #IN1, #P #OUT, #P "CONV_DESC", #P "ALPHA", #P "BETA" }

static const struct conv_op_kind CONV_FWD = CONV_OP_KIND(
	CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_,
	X, W, Y);
static const struct conv_op_kind CONV_BWD_DATA = CONV_OP_KIND(
	CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
	CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_, DY, W, DX);
static const struct conv_op_kind CONV_BWD_FILTER = CONV_OP_KIND(
	CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
	CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_, X, DY, DW);

static int conv_op(struct cg_graph *g, const struct conv_op_kind *k, const struct cg_conv_spec *c,
		   cudnnBackendDescriptor_t in0, cudnnBackendDescriptor_t in1, cudnnBackendDescriptor_t out)
{
	const float alpha = 1.0f, beta = 0.0f;
	const cudnnBackendAttributeType_t d = CUDNN_TYPE_BACKEND_DESCRIPTOR;
	cudnnBackendDescriptor_t conv, op;

	GP_TRY(conv_desc(g, c, &conv));
	GP_TRY(graph_new(g, k->type, k->type_name, &op));
	GP_TRY(cg_set(op, k->in0, k->in0_name, d, 1, &in0));
	GP_TRY(cg_set(op, k->in1, k->in1_name, d, 1, &in1));
	GP_TRY(cg_set(op, k->out, k->out_name, d, 1, &out));
	GP_TRY(cg_set(op, k->conv, k->conv_name, d, 1, &conv));
	GP_TRY(cg_set(op, k->alpha, k->alpha_name, CUDNN_TYPE_FLOAT, 1, &alpha));
	GP_TRY(cg_set(op, k->beta, k->beta_name, CUDNN_TYPE_FLOAT, 1, &beta));
	return graph_add_op(g, op, k->type_name);
}

int cg_graph_conv_fwd(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y)
{
	return conv_op(g, &CONV_FWD, c, x, w, y);
}

int cg_graph_conv_bwd_data(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t dy,
			   cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t dx)
{
	return conv_op(g, &CONV_BWD_DATA, c, dy, w, dx);
}

int cg_graph_conv_bwd_filter(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t x,
			     cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dw)
{
	return conv_op(g, &CONV_BWD_FILTER, c, x, dy, dw);
}

/* The pointwise descriptor of mode in prec, owned by g. */
static int pointwise_desc(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
			  cudnnBackendDescriptor_t *out)
{
	cudnnBackendDescriptor_t pw;

	GP_TRY(graph_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "CUDNN_BACKEND_POINTWISE_DESCRIPTOR", &pw));
	GP_TRY(CG_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
	GP_TRY(CG_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
	GP_TRY(cg_finalize(pw, "CUDNN_BACKEND_POINTWISE_DESCRIPTOR"));
	*out = pw;
	return 0;
}

int cg_graph_pointwise_scaled(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
			      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
			      float alpha1, float alpha2)
{
	cudnnBackendDescriptor_t pw, op;

	GP_TRY(pointwise_desc(g, mode, prec, &pw));
	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
	if (b)
		GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
	/* left unset at 1 (cuDNN's default): the graphs that need no scaling stay as the
	 * first probe built them */
	if (alpha1 != 1.0f)
		GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha1));
	if (alpha2 != 1.0f)
		GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR");
}

int cg_graph_pointwise(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
{
	return cg_graph_pointwise_scaled(g, mode, prec, x, b, y, 1.0f, 1.0f);
}

/* Backward activations name their tensors DY (the incoming gradient), X (the forward
 * input, the mask's source) and DX; XDESC/YDESC as the forward modes use them are
 * refused for them. */
int cg_graph_relu_bwd(struct cg_graph *g, cudnnDataType_t prec, cudnnBackendDescriptor_t dy,
		      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t dx)
{
	cudnnBackendDescriptor_t pw, op;

	GP_TRY(pointwise_desc(g, CUDNN_POINTWISE_RELU_BWD, prec, &pw));
	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR (RELU_BWD)", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dx));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR (RELU_BWD)");
}

int cg_graph_genstats(struct cg_graph *g, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sqsum)
{
	const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
	cudnnBackendDescriptor_t op;

	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sqsum));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR");
}

/* A descriptor attribute set only where the tensor is given (optional inputs and
 * outputs of the batch-norm operations). */
#define CG_SET_OPT(d, attr, t) ((t) ? CG_SET(d, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &(t)) : 0)

int cg_graph_bn_finalize(struct cg_graph *g, cudnnDataType_t prec, const struct cg_bn_finalize_io *io)
{
	const cudnnBnFinalizeStatsMode_t mode = CUDNN_BN_FINALIZE_STATISTICS_TRAINING;
	cudnnBackendDescriptor_t op;

	if (!io->sum || !io->sqsum || !io->scale || !io->bias || !io->epsilon || !io->momentum ||
	    !io->accum_count || !io->eq_scale || !io->eq_bias)
		return gp_error(GP_EINVAL, "cuDNN graph: BN finalize without sum, sqsum, scale, bias, epsilon, "
				"momentum, count or its equivalent scale and bias");
	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE, CUDNN_TYPE_BN_FINALIZE_STATS_MODE, 1, &mode));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC, io->sum));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC, io->sqsum));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC, io->scale));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC, io->bias));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC, io->prev_mean));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC, io->prev_var));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC, io->next_mean));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC, io->next_var));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC, io->saved_mean));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC, io->saved_invstd));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC, io->eq_scale));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC, io->eq_bias));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC, io->accum_count));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC, io->epsilon));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC, io->momentum));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR");
}

int cg_graph_bn_bwd_weights(struct cg_graph *g, cudnnDataType_t prec, const struct cg_bn_bwd_weights_io *io)
{
	cudnnBackendDescriptor_t op;

	if (!io->x || !io->mean || !io->invstd || !io->scale || !io->dy || !io->dscale || !io->dbias)
		return gp_error(GP_EINVAL, "cuDNN graph: BN backward weights without x, mean, invstd, scale, dy, "
				"dscale or dbias");
	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, io->x));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, io->mean));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, io->invstd));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, io->scale));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, io->dy));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, io->dscale));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, io->dbias));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, io->eq_dy_scale));
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, io->eq_x_scale));
	/* the one attribute of the group without _DESC in its name; still a tensor */
	GP_TRY(CG_SET_OPT(op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, io->eq_bias));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR");
}

/* The handle attribute is marked deprecated in cuDNN 9.x headers (a device property
 * descriptor may stand for it) but is still accepted; without a handle (NULL) the graph
 * still finalizes on cuDNN 9.19, which lets a machine without a GPU check every
 * descriptor up to here (heuristics and plans need the device). */
int cg_graph_finalize(struct cg_graph *g)
{
	if (!g->n_ops)
		return gp_error(GP_EINVAL, "cuDNN graph: no operations");
	cudnnBackendDescriptor_t og;
	GP_TRY(cg_desc_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR",
			      &og));
	g->opgraph = og;
	if (g->handle)
		GP_TRY(CG_SET(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle));
	GP_TRY(CG_SET(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops));
	return cg_finalize(og, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR");
}

/* --- the probe's graphs ------------------------------------------------------------------------- */

int64_t cg_conv_out(int64_t in, int64_t k, int64_t pad, int64_t stride)
{
	return (in + 2 * pad - k) / stride + 1;
}

/* A tensor of spec s added to g; the builders' shorthand. */
static int add_tensor(struct cg_graph *g, struct cg_tensor_spec s, cudnnBackendDescriptor_t *out)
{
	return cg_graph_tensor(g, &s, out);
}

/* The next virtual intermediate of an activation's shape (uids from CG_UID_VIRTUAL). */
static int add_virtual(struct cg_graph *g, int *next, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
		       int64_t w, cudnnBackendDescriptor_t *out)
{
	return add_tensor(g, cg_spec_nhwc(CG_UID_VIRTUAL + (*next)++, dt, n, c, h, w, 1), out);
}

/* A by-value scalar (1 x 1 x 1 x 1) of type dt. */
static struct cg_tensor_spec spec_scalar(int64_t uid, cudnnDataType_t dt)
{
	struct cg_tensor_spec s = cg_spec_nhwc(uid, dt, 1, 1, 1, 1, 0);
	s.by_value = 1;
	s.align_bytes = dt == CUDNN_DATA_DOUBLE || dt == CUDNN_DATA_INT64 ? 8 : 4;
	return s;
}

int64_t cg_conv_groups(const struct cg_conv_shape *sh)
{
	return sh->groups > 1 ? sh->groups : 1;
}

int64_t cg_conv_w_c(const struct cg_conv_shape *sh)
{
	return sh->c / cg_conv_groups(sh);
}

/* The convolution of sh (pad, stride, dilation 1, float accumulation) and its output
 * size; a shape that cannot be convolved is one error line. */
static int conv_of(const struct cg_conv_shape *sh, struct cg_conv_spec *conv, int64_t *p, int64_t *q)
{
	const int64_t g = cg_conv_groups(sh);
	*p = cg_conv_out(sh->h, sh->r, sh->pad, sh->stride);
	*q = cg_conv_out(sh->w, sh->s, sh->pad, sh->stride);
	if (sh->n < 1 || sh->c < 1 || sh->k < 1 || sh->stride < 1 || *p < 1 || *q < 1)
		return gp_error(GP_EINVAL, "cuDNN graph: bad convolution shape");
	/* the group count reaches cuDNN only through w's channels: a count that does not
	 * divide both would be read as another, smaller one, or refused without our name */
	if (sh->groups < 0 || sh->c % g || sh->k % g)
		return gp_error(GP_EINVAL, "cuDNN graph: %lld groups do not divide %lld input and %lld output channels",
				(long long)sh->groups, (long long)sh->c, (long long)sh->k);
	*conv = (struct cg_conv_spec){ .pad = { sh->pad, sh->pad }, .stride = { sh->stride, sh->stride },
				       .dilation = { 1, 1 }, .compute = CUDNN_DATA_FLOAT };
	return 0;
}

/* out = in * scale + bias per channel (MUL then ADD: NVIDIA's Pointwise:scale and
 * Pointwise:bias, the per-channel operand second); out may be virtual or not. */
static int scale_bias(struct cg_graph *g, int *next, cudnnDataType_t inter, const int64_t *dims,
		      cudnnBackendDescriptor_t in, cudnnBackendDescriptor_t scale, cudnnBackendDescriptor_t bias,
		      cudnnBackendDescriptor_t out)
{
	cudnnBackendDescriptor_t t;
	GP_TRY(add_virtual(g, next, inter, dims[0], dims[1], dims[2], dims[3], &t));
	GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, in, scale, t));
	return cg_graph_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, t, bias, out);
}

int cg_conv_fwd_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_conv_fwd_opts *o,
		      struct cg_graph *g)
{
	cg_graph_init(g, handle);
	struct cg_conv_spec conv;
	int64_t p, q;
	GP_TRY(conv_of(sh, &conv, &p, &q));
	if ((o->residual || o->relu_out) && !o->prologue)
		return gp_error(GP_EINVAL, "cuDNN graph: a residual or stored ReLU output needs the prologue");
	const int64_t dims[4] = { sh->n, sh->c, sh->h, sh->w };
	cudnnBackendDescriptor_t x, w, y, in;
	int next = 0;

	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_X, o->io, sh->n, sh->c, sh->h, sh->w, 0), &x));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_W, o->io, sh->k, cg_conv_w_c(sh), sh->r, sh->s, 0), &w));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_Y, o->io, sh->n, sh->k, p, q, 0), &y));
	in = x;
	if (o->prologue) {
		/* relu(x * scale + bias [+ residual]): the batch norm apply and ReLU of the
		 * layer before, and a ResNet block's join */
		cudnnBackendDescriptor_t scale, bias, t, r;
		GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_SCALE, o->param, sh->c), &scale));
		GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_BIAS, o->param, sh->c), &bias));
		GP_TRY(add_virtual(g, &next, o->inter, sh->n, sh->c, sh->h, sh->w, &t));
		GP_TRY(scale_bias(g, &next, o->inter, dims, x, scale, bias, t));
		if (o->residual) {
			cudnnBackendDescriptor_t z, zs, zb, zt, sum;
			GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_Z, o->io, sh->n, sh->c, sh->h, sh->w, 0), &z));
			zt = z;
			if (o->residual == 2) {
				GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_Z_SCALE, o->param, sh->c), &zs));
				GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_Z_BIAS, o->param, sh->c), &zb));
				GP_TRY(add_virtual(g, &next, o->inter, sh->n, sh->c, sh->h, sh->w, &zt));
				GP_TRY(scale_bias(g, &next, o->inter, dims, z, zs, zb, zt));
			}
			GP_TRY(add_virtual(g, &next, o->inter, sh->n, sh->c, sh->h, sh->w, &sum));
			GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, t, zt, sum));
			t = sum;
		}
		if (o->relu_out)
			GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_RELU_Y, o->io, sh->n, sh->c, sh->h, sh->w, 0), &r));
		else
			GP_TRY(add_virtual(g, &next, o->inter, sh->n, sh->c, sh->h, sh->w, &r));
		GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_RELU_FWD, CUDNN_DATA_FLOAT, t, NULL, r));
		in = r;
	}
	GP_TRY(cg_graph_conv_fwd(g, &conv, in, w, y));
	if (o->genstats) {
		cudnnBackendDescriptor_t sum, sqsum;
		GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_SUM, CUDNN_DATA_FLOAT, sh->k), &sum));
		GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_SQSUM, CUDNN_DATA_FLOAT, sh->k), &sqsum));
		GP_TRY(cg_graph_genstats(g, CUDNN_DATA_FLOAT, y, sum, sqsum));
	}
	return cg_graph_finalize(g);
}

int cg_wgrad_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_wgrad_opts *o,
		   struct cg_graph *g)
{
	cg_graph_init(g, handle);
	struct cg_conv_spec conv;
	int64_t p, q;
	GP_TRY(conv_of(sh, &conv, &p, &q));
	const int64_t dims[4] = { sh->n, sh->c, sh->h, sh->w };
	cudnnBackendDescriptor_t x, dy, dw, in;
	int next = 0;

	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_X, o->io, sh->n, sh->c, sh->h, sh->w, 0), &x));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DY, o->io, sh->n, sh->k, p, q, 0), &dy));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DW, o->dw, sh->k, cg_conv_w_c(sh), sh->r, sh->s, 0), &dw));
	in = x;
	if (o->prologue) {
		/* the same three operations as the forward's prologue, in the same order */
		cudnnBackendDescriptor_t scale, bias, t, r;
		GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_SCALE, o->param, sh->c), &scale));
		GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_BIAS, o->param, sh->c), &bias));
		GP_TRY(add_virtual(g, &next, o->inter, sh->n, sh->c, sh->h, sh->w, &t));
		GP_TRY(scale_bias(g, &next, o->inter, dims, x, scale, bias, t));
		GP_TRY(add_virtual(g, &next, o->inter, sh->n, sh->c, sh->h, sh->w, &r));
		GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_RELU_FWD, CUDNN_DATA_FLOAT, t, NULL, r));
		in = r;
	}
	GP_TRY(cg_graph_conv_bwd_filter(g, &conv, in, dy, dw));
	return cg_graph_finalize(g);
}

int cg_dgrad_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_dgrad_opts *o,
		   struct cg_graph *g)
{
	cg_graph_init(g, handle);
	struct cg_conv_spec conv;
	int64_t p, q;
	GP_TRY(conv_of(sh, &conv, &p, &q));
	if (o->bn_weights && !o->drelu)
		return gp_error(GP_EINVAL, "cuDNN graph: BN backward weights without the ReLU backward");
	const int64_t n = sh->n, c = sh->c, h = sh->h, wd = sh->w;
	cudnnBackendDescriptor_t dy, w, dx;
	int next = 0;

	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DY, o->io, n, sh->k, p, q, 0), &dy));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_W, o->io, sh->k, cg_conv_w_c(sh), sh->r, sh->s, 0), &w));
	if (!o->drelu) {
		GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DX, o->io, n, c, h, wd, 0), &dx));
		GP_TRY(cg_graph_conv_bwd_data(g, &conv, dy, w, dx));
		return cg_graph_finalize(g);
	}
	cudnnBackendDescriptor_t x, mean, invstd, scale, bias, t0, t1, bn, dz;
	GP_TRY(add_virtual(g, &next, o->inter, n, c, h, wd, &dx));
	GP_TRY(cg_graph_conv_bwd_data(g, &conv, dy, w, dx));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_X, o->io, n, c, h, wd, 0), &x));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_MEAN, o->param, c), &mean));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_INVSTD, o->param, c), &invstd));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_SCALE, o->param, c), &scale));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_BIAS, o->param, c), &bias));
	/* bn(x_bn) = ((x_bn - mean) * invstd) * scale + bias, four operations in the order
	 * of NVIDIA's figure; then the ReLU backward against it */
	GP_TRY(add_virtual(g, &next, o->inter, n, c, h, wd, &t0));
	if (o->mean_form == CG_MEAN_SUB)
		GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, x, mean, t0));
	else
		GP_TRY(cg_graph_pointwise_scaled(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, x, mean, t0, 1.0f, -1.0f));
	GP_TRY(add_virtual(g, &next, o->inter, n, c, h, wd, &t1));
	GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, t0, invstd, t1));
	GP_TRY(add_virtual(g, &next, o->inter, n, c, h, wd, &bn));
	GP_TRY(scale_bias(g, &next, o->inter, (const int64_t[4]){ n, c, h, wd }, t1, scale, bias, bn));
	/* dz is stored: dBNApply reads it after the statistics are known */
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DZ, o->io, n, c, h, wd, 0), &dz));
	GP_TRY(cg_graph_relu_bwd(g, CUDNN_DATA_FLOAT, dx, bn, dz));
	if (!o->bn_weights)
		return cg_graph_finalize(g);
	struct cg_bn_bwd_weights_io io = { .x = x, .mean = mean, .invstd = invstd, .scale = scale, .dy = dz };
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_DSCALE, CUDNN_DATA_FLOAT, c), &io.dscale));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_DBIAS, CUDNN_DATA_FLOAT, c), &io.dbias));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_EQ_DY_SCALE, CUDNN_DATA_FLOAT, c), &io.eq_dy_scale));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_EQ_X_SCALE, CUDNN_DATA_FLOAT, c), &io.eq_x_scale));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_EQ_DBIAS, CUDNN_DATA_FLOAT, c), &io.eq_bias));
	GP_TRY(cg_graph_bn_bwd_weights(g, CUDNN_DATA_FLOAT, &io));
	return cg_graph_finalize(g);
}

int cg_dbn_apply_graph(cudnnHandle_t handle, int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t io,
		       cudnnDataType_t param, cudnnDataType_t inter, struct cg_graph *g)
{
	cg_graph_init(g, handle);
	if (n < 1 || c < 1 || h < 1 || w < 1)
		return gp_error(GP_EINVAL, "cuDNN graph: bad dBNApply shape");
	cudnnBackendDescriptor_t dz, x, a, b, cc, t0, t1, t2, dx;
	int next = 0;

	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DZ, io, n, c, h, w, 0), &dz));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_X, io, n, c, h, w, 0), &x));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_EQ_DY_SCALE, param, c), &a));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_EQ_X_SCALE, param, c), &b));
	GP_TRY(add_tensor(g, cg_spec_channel(CG_UID_EQ_DBIAS, param, c), &cc));
	GP_TRY(add_tensor(g, cg_spec_nhwc(CG_UID_DX, io, n, c, h, w, 0), &dx));
	GP_TRY(add_virtual(g, &next, inter, n, c, h, w, &t0));
	GP_TRY(add_virtual(g, &next, inter, n, c, h, w, &t1));
	GP_TRY(add_virtual(g, &next, inter, n, c, h, w, &t2));
	GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dz, a, t0));
	GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x, b, t1));
	GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, t0, t1, t2));
	GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, t2, cc, dx));
	return cg_graph_finalize(g);
}

int cg_bn_finalize_graph(cudnnHandle_t handle, const struct cg_bn_finalize_opts *o, struct cg_graph *g)
{
	cg_graph_init(g, handle);
	if (o->c < 1)
		return gp_error(GP_EINVAL, "cuDNN graph: BN finalize of %lld channels", (long long)o->c);
	const cudnnDataType_t f = CUDNN_DATA_FLOAT;
	struct cg_bn_finalize_io io = { 0 };
	static const struct {
		int64_t uid;
		size_t off;
		int running;
	} per_channel[] = {
		{ CG_UID_SUM, offsetof(struct cg_bn_finalize_io, sum), 0 },
		{ CG_UID_SQSUM, offsetof(struct cg_bn_finalize_io, sqsum), 0 },
		{ CG_UID_SCALE, offsetof(struct cg_bn_finalize_io, scale), 0 },
		{ CG_UID_BIAS, offsetof(struct cg_bn_finalize_io, bias), 0 },
		{ CG_UID_EQ_SCALE, offsetof(struct cg_bn_finalize_io, eq_scale), 0 },
		{ CG_UID_EQ_BIAS, offsetof(struct cg_bn_finalize_io, eq_bias), 0 },
		{ CG_UID_SAVED_MEAN, offsetof(struct cg_bn_finalize_io, saved_mean), 0 },
		{ CG_UID_SAVED_INVSTD, offsetof(struct cg_bn_finalize_io, saved_invstd), 0 },
		{ CG_UID_PREV_MEAN, offsetof(struct cg_bn_finalize_io, prev_mean), 1 },
		{ CG_UID_PREV_VAR, offsetof(struct cg_bn_finalize_io, prev_var), 1 },
		{ CG_UID_NEXT_MEAN, offsetof(struct cg_bn_finalize_io, next_mean), 1 },
		{ CG_UID_NEXT_VAR, offsetof(struct cg_bn_finalize_io, next_var), 1 },
	};
	for (size_t i = 0; i < sizeof(per_channel) / sizeof(per_channel[0]); i++) {
		if (per_channel[i].running && !o->running)
			continue;
		cudnnBackendDescriptor_t *slot = (cudnnBackendDescriptor_t *)((char *)&io + per_channel[i].off);
		GP_TRY(add_tensor(g, cg_spec_channel(per_channel[i].uid, f, o->c), slot));
	}
	GP_TRY(add_tensor(g, spec_scalar(CG_UID_EPSILON, o->scalar), &io.epsilon));
	/* the factor even without running statistics: cuDNN 9.19 refuses the operation
	 * without it ("!hasBnExpAverageFactor") */
	GP_TRY(add_tensor(g, spec_scalar(CG_UID_MOMENTUM, o->scalar), &io.momentum));
	GP_TRY(add_tensor(g, spec_scalar(CG_UID_ACCUM_COUNT, CUDNN_DATA_INT64), &io.accum_count));
	GP_TRY(cg_graph_bn_finalize(g, f, &io));
	return cg_graph_finalize(g);
}

/* --- engines and plans ---------------------------------------------------------------------- */

#define CG_MAX_CONFIGS 64

static const char *heur_name(cudnnBackendHeurMode_t m)
{
	switch (m) {
	case CUDNN_HEUR_MODE_INSTANT: return "INSTANT";
	case CUDNN_HEUR_MODE_B: return "B";
	case CUDNN_HEUR_MODE_FALLBACK: return "FALLBACK";
	case CUDNN_HEUR_MODE_A: return "A";
	default: return "?";
	}
}

/* The engine configs heuristics mode m proposes for g's graph, best first (at most
 * cap); each a descriptor the caller destroys. */
static int heur_configs(const struct cg_graph *g, cudnnBackendHeurMode_t m, cudnnBackendDescriptor_t *cfgs,
			int cap, int *count)
{
	cudnnBackendDescriptor_t heur;
	int64_t n = 0, got = 0;
	int rc;

	*count = 0;
	GP_TRY(cg_desc_create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR", &heur));
	rc = CG_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->opgraph);
	if (rc == 0)
		rc = CG_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m);
	if (rc == 0)
		rc = cg_finalize(heur, "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR");
	if (rc == 0)
		rc = cg_status(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
							CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL),
			       "cudnnBackendGetAttribute", "CUDNN_ATTR_ENGINEHEUR_RESULTS (count)");
	if (rc < 0 || n <= 0)
		goto free_heur;
	if (n > cap)
		n = cap;
	for (int i = 0; i < n; i++) {
		rc = cg_desc_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR", &cfgs[i]);
		if (rc < 0) {
			for (int j = 0; j < i; j++)
				cg_desc_destroy(cfgs[j]);
			goto free_heur;
		}
	}
	rc = cg_status(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
						n, &got, cfgs),
		       "cudnnBackendGetAttribute", "CUDNN_ATTR_ENGINEHEUR_RESULTS");
	if (rc < 0)
		got = 0;
	for (int64_t i = got; i < n; i++)
		cg_desc_destroy(cfgs[i]);
	*count = (int)got;
free_heur:
	cg_desc_destroy(heur);
	return rc;
}

/* The engine's global index and whether it compiles at run time, for the report; a
 * failure here leaves them unknown and is no error. */
static void plan_engine_info(struct cg_plan *p)
{
	cudnnBackendDescriptor_t eng;
	int64_t cnt = 0, idx = -1;
	cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];

	p->engine_index = -1;
	p->runtime_compiled = 0;
	if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
		return;
	if (cudnnBackendGetAttribute(p->cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
				     &eng) == CUDNN_STATUS_SUCCESS && cnt == 1) {
		if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx) ==
			    CUDNN_STATUS_SUCCESS && cnt == 1)
			p->engine_index = idx;
		cnt = 0;
		if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
					     CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &cnt, notes) == CUDNN_STATUS_SUCCESS)
			for (int64_t i = 0; i < cnt && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
				if (notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION)
					p->runtime_compiled = 1;
	}
	cg_desc_destroy(eng);
}

/* An execution plan of cfg; on success p->plan holds it. */
static int plan_from_config(const struct cg_graph *g, cudnnBackendDescriptor_t cfg, struct cg_plan *p)
{
	cudnnBackendDescriptor_t plan;
	int64_t ws = 0, cnt = 0;
	int rc;

	GP_TRY(cg_desc_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR",
			      &plan));
	rc = CG_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
	if (rc == 0)
		rc = CG_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
	if (rc == 0)
		rc = cg_finalize(plan, "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR");
	if (rc == 0)
		rc = cg_status(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
							CUDNN_TYPE_INT64, 1, &cnt, &ws),
			       "cudnnBackendGetAttribute", "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE");
	if (rc < 0) {
		cg_desc_destroy(plan);
		return rc;
	}
	p->plan = plan;
	p->ws_bytes = ws;
	return 0;
}

int cg_plan_build(const struct cg_graph *g, struct cg_plan *p)
{
	static const cudnnBackendHeurMode_t modes[] = { CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK };
	cudnnBackendDescriptor_t cfgs[CG_MAX_CONFIGS];
	char story[2][400];

	memset(p, 0, sizeof(*p));
	if (!g->opgraph)
		return gp_error(GP_EINVAL, "cuDNN graph: not finalized");
	for (int mi = 0; mi < 2; mi++) {
		int n = 0, rc = heur_configs(g, modes[mi], cfgs, CG_MAX_CONFIGS, &n);
		if (rc < 0) {
			snprintf(story[mi], sizeof(story[mi]), "heuristics %s failed: %s", heur_name(modes[mi]),
				 gp_errmsg());
			continue;
		}
		if (n == 0) {
			char last[240];
			last_message(last, sizeof(last));
			snprintf(story[mi], sizeof(story[mi]), "heuristics %s returned no engine config%s%s",
				 heur_name(modes[mi]), last[0] ? " (cuDNN says: " : "", last[0] ? last : "");
			if (last[0])
				strncat(story[mi], ")", sizeof(story[mi]) - strlen(story[mi]) - 1);
			continue;
		}
		int found = -1;
		for (int i = 0; i < n; i++) {
			if (found < 0 && plan_from_config(g, cfgs[i], p) == 0)
				found = i;
			else if (found < 0 && i == n - 1)
				snprintf(story[mi], sizeof(story[mi]),
					 "heuristics %s returned %d engine configs, none made a plan (the last: %s)",
					 heur_name(modes[mi]), n, gp_errmsg());
			if (i != found)
				cg_desc_destroy(cfgs[i]);
		}
		if (found >= 0) {
			p->cfg = cfgs[found];
			p->mode = modes[mi];
			p->cfg_index = found;
			p->cfg_count = n;
			plan_engine_info(p);
			gp_error_clear();
			return 0;
		}
	}
	return gp_error(GP_EUNSUPPORTED, "no cuDNN engine for the graph: %s; %s", story[0], story[1]);
}

void cg_plan_destroy(struct cg_plan *p)
{
	cg_desc_destroy(p->plan);
	cg_desc_destroy(p->cfg);
	p->plan = p->cfg = NULL;
}

void cg_plan_describe(const struct cg_plan *p, char *buf, size_t cap)
{
	snprintf(buf, cap, "heuristics %s, config %d of %d, engine %lld%s, workspace %lld bytes", heur_name(p->mode),
		 p->cfg_index + 1, p->cfg_count, (long long)p->engine_index,
		 p->runtime_compiled ? " (runtime compiled)" : "", (long long)p->ws_bytes);
}

int cg_execute(cudnnHandle_t handle, const struct cg_plan *p, int n, const int64_t *uids, void *const *ptrs,
	       void *ws)
{
	cudnnBackendDescriptor_t vp;
	int rc;

	if (p->ws_bytes > 0 && !ws)
		return gp_error(GP_EINVAL, "cuDNN graph: the plan needs %lld bytes of workspace, none given",
				(long long)p->ws_bytes);
	GP_TRY(cg_desc_create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR", &vp));
	rc = CG_SET(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
	if (rc == 0)
		rc = CG_SET(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
	if (rc == 0)
		rc = CG_SET(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
	if (rc == 0)
		rc = cg_finalize(vp, "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR");
	if (rc == 0)
		rc = cg_status(cudnnBackendExecute(handle, p->plan, vp), "cudnnBackendExecute", "execution plan");
	cg_desc_destroy(vp);
	return rc;
}
