/* cuDNN's backend (graph) API in small C steps: descriptors, tensors, operations, an
 * operation graph, engine heuristics, execution plans and execution (cudnn_graph.h).
 * Attribute names, types and element counts follow cudnn_graph.h of cuDNN 9 and the
 * backend descriptor reference of its documentation. */
#include <stdbool.h>
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

int cg_graph_conv_fwd(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y)
{
	const int64_t dims = 2;
	const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
	const float alpha = 1.0f, beta = 0.0f;
	cudnnBackendDescriptor_t conv, op;

	GP_TRY(graph_new(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR", &conv));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &c->compute));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, c->dilation));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, c->stride));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, c->pad));
	GP_TRY(CG_SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, c->pad));
	GP_TRY(cg_finalize(conv, "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR"));

	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
		      &conv));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR");
}

int cg_graph_pointwise(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
{
	cudnnBackendDescriptor_t pw, op;

	GP_TRY(graph_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "CUDNN_BACKEND_POINTWISE_DESCRIPTOR", &pw));
	GP_TRY(CG_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
	GP_TRY(CG_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
	GP_TRY(cg_finalize(pw, "CUDNN_BACKEND_POINTWISE_DESCRIPTOR"));

	GP_TRY(graph_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
			 "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR", &op));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
	if (b)
		GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
	GP_TRY(CG_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
	return graph_add_op(g, op, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR");
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

int cg_conv_fwd_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_conv_fwd_opts *o,
		      struct cg_graph *g)
{
	cg_graph_init(g, handle);
	int64_t p = cg_conv_out(sh->h, sh->r, sh->pad, sh->stride), q = cg_conv_out(sh->w, sh->s, sh->pad, sh->stride);
	if (sh->n < 1 || sh->c < 1 || sh->k < 1 || sh->stride < 1 || p < 1 || q < 1)
		return gp_error(GP_EINVAL, "cuDNN graph: bad convolution shape");
	struct cg_conv_spec conv = { .pad = { sh->pad, sh->pad }, .stride = { sh->stride, sh->stride },
				     .dilation = { 1, 1 }, .compute = CUDNN_DATA_FLOAT };
	struct cg_tensor_spec s;
	cudnnBackendDescriptor_t x, w, y, in;

	s = cg_spec_nhwc(CG_UID_X, o->io, sh->n, sh->c, sh->h, sh->w, 0);
	GP_TRY(cg_graph_tensor(g, &s, &x));
	s = cg_spec_nhwc(CG_UID_W, o->io, sh->k, sh->c, sh->r, sh->s, 0);
	GP_TRY(cg_graph_tensor(g, &s, &w));
	s = cg_spec_nhwc(CG_UID_Y, o->io, sh->n, sh->k, p, q, 0);
	GP_TRY(cg_graph_tensor(g, &s, &y));
	in = x;
	if (o->prologue) {
		/* relu(x * scale + bias): the batch norm apply and ReLU of the layer before */
		cudnnBackendDescriptor_t scale, bias, t[3];
		s = cg_spec_channel(CG_UID_SCALE, o->param, sh->c);
		GP_TRY(cg_graph_tensor(g, &s, &scale));
		s = cg_spec_channel(CG_UID_BIAS, o->param, sh->c);
		GP_TRY(cg_graph_tensor(g, &s, &bias));
		for (int i = 0; i < 3; i++) {
			s = cg_spec_nhwc(CG_UID_VIRTUAL + i, o->inter, sh->n, sh->c, sh->h, sh->w, 1);
			GP_TRY(cg_graph_tensor(g, &s, &t[i]));
		}
		GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x, scale, t[0]));
		GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, t[0], bias, t[1]));
		GP_TRY(cg_graph_pointwise(g, CUDNN_POINTWISE_RELU_FWD, CUDNN_DATA_FLOAT, t[1], NULL, t[2]));
		in = t[2];
	}
	GP_TRY(cg_graph_conv_fwd(g, &conv, in, w, y));
	if (o->genstats) {
		cudnnBackendDescriptor_t sum, sqsum;
		s = cg_spec_channel(CG_UID_SUM, CUDNN_DATA_FLOAT, sh->k);
		GP_TRY(cg_graph_tensor(g, &s, &sum));
		s = cg_spec_channel(CG_UID_SQSUM, CUDNN_DATA_FLOAT, sh->k);
		GP_TRY(cg_graph_tensor(g, &s, &sqsum));
		GP_TRY(cg_graph_genstats(g, CUDNN_DATA_FLOAT, y, sum, sqsum));
	}
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
