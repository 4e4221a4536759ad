/* A small C layer over cuDNN's backend (graph) API, the only way from C to cuDNN's
 * fusion engines: a convolution with a scale-bias-ReLU prologue on its input and
 * per-channel statistics of its output in one kernel, and the backward, batch-norm
 * finalize and residual graphs around it (NVIDIA's ResNet-50 road, issue 24). Nothing
 * in the engine calls it yet; tests/gpu/test_cudnn_graph*.c probe what the installed
 * cuDNN offers. docs/cuda.md, "cuDNN graph API".
 *
 * Tensors are described as the backend API wants them: dimensions always in N, C, H, W
 * order (weights K, C, R, S), the layout given by the strides (NHWC: C fastest). A
 * graph owns every descriptor it creates and frees them in cg_graph_destroy; an
 * execution plan (struct cg_plan) is separate, so a graph can have several. Every
 * failure is one gp_error line naming the cuDNN call, the attribute or descriptor it
 * was about, the status and cuDNN's own last message. */
#ifndef GP_OPS_CUDA_CUDNN_GRAPH_H
#define GP_OPS_CUDA_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- descriptors ------------------------------------------------------------------------- */
/* cudnnBackendCreateDescriptor; what names the descriptor in an error line. */
int cg_desc_create(cudnnBackendDescriptorType_t type, const char *what, cudnnBackendDescriptor_t *out);
/* cudnnBackendDestroyDescriptor (NULL is fine). */
void cg_desc_destroy(cudnnBackendDescriptor_t d);
/* cudnnBackendSetAttribute of count values; name is the attribute's name for errors. */
int cg_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, const char *name,
	   cudnnBackendAttributeType_t type, int64_t count, const void *values);
int cg_finalize(cudnnBackendDescriptor_t d, const char *what);
/* cg_set naming the attribute by its enum's spelling. */
#define CG_SET(d, attr, type, count, values) cg_set((d), (attr), #attr, (type), (count), (values))

/* --- tensors ----------------------------------------------------------------------------- */
#define CG_MAX_DIMS 8
struct cg_tensor_spec {
	int64_t uid;          /* unique within a graph; the variant pack's key */
	cudnnDataType_t dtype;
	int ndims;
	int64_t dims[CG_MAX_DIMS], strides[CG_MAX_DIMS];
	int64_t align_bytes;  /* of the data pointer the variant pack will give */
	int is_virtual;       /* an intermediate that never reaches memory */
	int by_value;         /* a scalar passed by value in the variant pack */
};
/* A 4-D activation n x c x h x w stored NHWC (weights: k x c x r x s stored KRSC). */
struct cg_tensor_spec cg_spec_nhwc(int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
				   int64_t w, int is_virtual);
/* Per-channel values: 1 x c x 1 x 1, broadcast over N, H and W by pointwise ops. */
struct cg_tensor_spec cg_spec_channel(int64_t uid, cudnnDataType_t dt, int64_t c);

/* --- a graph and its operations ------------------------------------------------------------ */
#define CG_MAX_DESCS 48
#define CG_MAX_OPS 12
struct cg_graph {
	cudnnHandle_t handle;
	cudnnBackendDescriptor_t descs[CG_MAX_DESCS]; /* owned: tensors, op descriptors, ops */
	int n_descs;
	cudnnBackendDescriptor_t ops[CG_MAX_OPS];     /* the operations, in the order added */
	int n_ops;
	cudnnBackendDescriptor_t opgraph;             /* after cg_graph_finalize */
};

/* handle may be NULL: the graph is then built without a device, every descriptor
 * checked by cuDNN down to the operation graph, but no plan can be made from it. */
void cg_graph_init(struct cg_graph *g, cudnnHandle_t handle);
void cg_graph_destroy(struct cg_graph *g);
/* A finalized tensor descriptor, owned by g. */
int cg_graph_tensor(struct cg_graph *g, const struct cg_tensor_spec *s, cudnnBackendDescriptor_t *out);

/* A 2-D cross-correlation (what deep learning calls convolution), as the legacy API's
 * CUDNN_CROSS_CORRELATION; compute is the accumulation type. */
struct cg_conv_spec {
	int64_t pad[2], stride[2], dilation[2];
	cudnnDataType_t compute;
};
/* The three take their tensors' descriptors as they are: a grouped convolution is one
 * whose w has fewer input channels than x (G = x's C / w's C; cg_conv_shape.groups).
 * y = conv(x, w) (alpha 1, beta 0). */
int cg_graph_conv_fwd(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y);
/* dx = the data gradient of y = conv(x, w) from dy (alpha 1, beta 0). */
int cg_graph_conv_bwd_data(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t dy,
			   cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t dx);
/* dw = the filter gradient of y = conv(x, w) from dy (alpha 1, beta 0). */
int cg_graph_conv_bwd_filter(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t x,
			     cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t dw);
/* y = mode(x) or mode(x, b) (b NULL for unary modes such as CUDNN_POINTWISE_RELU_FWD),
 * computed in prec. */
int cg_graph_pointwise(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y);
/* The same with the operands scaled first: y = mode(alpha1 * x, alpha2 * b) (an alpha of
 * 1 is left to cuDNN's default). ADD with alpha2 = -1 is how NVIDIA's
 * DgradDreluBNBwdWeight pattern writes x - mean. */
int cg_graph_pointwise_scaled(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
			      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y,
			      float alpha1, float alpha2);
/* dx = x > 0 ? dy : 0 (CUDNN_POINTWISE_RELU_BWD; x is the ReLU's input). */
int cg_graph_relu_bwd(struct cg_graph *g, cudnnDataType_t prec, cudnnBackendDescriptor_t dy,
		      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t dx);
/* sum and sqsum (1 x c x 1 x 1) = per-channel sum and sum of squares of x, in prec. */
int cg_graph_genstats(struct cg_graph *g, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sqsum);
/* Batch-norm finalize (CUDNN_BN_FINALIZE_STATISTICS_TRAINING): from the genstats sums of
 * accum_count elements per channel, gamma (scale) and beta (bias), the next layer's
 * prologue coefficients eq_scale = gamma * invstd and eq_bias = beta - mean * eq_scale,
 * the saved mean and inverse standard deviation, and the running statistics updated by
 * the factor momentum. Per-channel tensors 1 x c x 1 x 1; epsilon, momentum and
 * accum_count 1 x 1 x 1 x 1 scalars passed by value. The running statistics and the
 * saved ones may be NULL (left out of the operation); momentum may not (cuDNN 9.19
 * refuses the operation without it). */
struct cg_bn_finalize_io {
	cudnnBackendDescriptor_t sum, sqsum, scale, bias;
	cudnnBackendDescriptor_t prev_mean, prev_var, next_mean, next_var;
	cudnnBackendDescriptor_t saved_mean, saved_invstd;
	cudnnBackendDescriptor_t eq_scale, eq_bias;
	cudnnBackendDescriptor_t epsilon, momentum, accum_count;
};
int cg_graph_bn_finalize(struct cg_graph *g, cudnnDataType_t prec, const struct cg_bn_finalize_io *io);
/* Batch-norm backward weights: from x (the batch norm's input), its saved mean and
 * invstd, scale (gamma) and dy (the gradient of the batch norm's output): dscale
 * (dgamma), dbias (dbeta), and the coefficients of dx = eq_dy_scale * dy + eq_x_scale * x
 * + eq_bias (each 1 x c x 1 x 1; the three coefficients may be NULL). */
struct cg_bn_bwd_weights_io {
	cudnnBackendDescriptor_t x, mean, invstd, scale, dy;
	cudnnBackendDescriptor_t dscale, dbias, eq_dy_scale, eq_x_scale, eq_bias;
};
int cg_graph_bn_bwd_weights(struct cg_graph *g, cudnnDataType_t prec, const struct cg_bn_bwd_weights_io *io);
/* The operation graph of every operation added so far. */
int cg_graph_finalize(struct cg_graph *g);

/* --- the probe's graphs ---------------------------------------------------------------------
 * A 2-D convolution forward of one shape in NHWC (weights KRSC), optionally with the
 * batch norm apply and ReLU of the layer before folded into its input (a scale-bias-ReLU
 * prologue: conv(relu(x * scale + bias)), scale and bias per input channel) and the
 * per-channel statistics of its output that the batch norm after it needs (genstats:
 * the pattern cuDNN calls ConvBNfprop). Tensor uids are enum cg_uid. */
struct cg_conv_shape {
	int64_t n, c, h, w;  /* input */
	int64_t k, r, s;     /* output channels, window */
	int64_t pad, stride;
	/* Grouped convolution (0 or 1: none; c: depthwise): both c and k multiples of it.
	 * The backend API has no group attribute (the convolution descriptor takes
	 * padding, strides, dilations, mode and compute type only); cuDNN infers the count
	 * from the tensors, x's c against w's, so the weights here are k x c/groups x r x
	 * s (KRSC: a depthwise layer's [c][r][s], PyTorch's memory order). */
	int64_t groups;
};
struct cg_conv_fwd_opts {
	cudnnDataType_t io;    /* x, w, y (and z, relu_y) */
	cudnnDataType_t param; /* scale, bias (and z_scale, z_bias) with the prologue */
	cudnnDataType_t inter; /* the prologue's intermediates (virtual tensors) */
	int prologue;
	int genstats;          /* sum and sqsum of y: float */
	/* The residual join of a ResNet block in the prologue (needs it): 1 adds z (the
	 * shortcut, x's shape) before the ReLU, relu(x * scale + bias + z); 2 adds it
	 * through its own batch norm apply, relu(x * scale + bias + z * z_scale + z_bias).
	 * NVIDIA's DBARCS pattern (Hopper; 1x1 filters, pad 0; the ReLU's output stored). */
	int residual;
	int relu_out;          /* store the prologue's ReLU output (CG_UID_RELU_Y) */
};
enum cg_uid {
	CG_UID_X = 1,
	CG_UID_W,
	CG_UID_Y,
	CG_UID_SCALE,
	CG_UID_BIAS,
	CG_UID_SUM,
	CG_UID_SQSUM,
	/* the residual forward */
	CG_UID_Z,
	CG_UID_Z_SCALE,
	CG_UID_Z_BIAS,
	CG_UID_RELU_Y,
	/* the backward graphs */
	CG_UID_DY,
	CG_UID_DW,
	CG_UID_DX,
	CG_UID_DZ,
	CG_UID_MEAN,
	CG_UID_INVSTD,
	CG_UID_DSCALE,
	CG_UID_DBIAS,
	CG_UID_EQ_DY_SCALE,
	CG_UID_EQ_X_SCALE,
	CG_UID_EQ_DBIAS,
	/* batch-norm finalize (sum, sqsum, scale and bias as above) */
	CG_UID_PREV_MEAN,
	CG_UID_PREV_VAR,
	CG_UID_NEXT_MEAN,
	CG_UID_NEXT_VAR,
	CG_UID_SAVED_MEAN,
	CG_UID_SAVED_INVSTD,
	CG_UID_EQ_SCALE,
	CG_UID_EQ_BIAS,
	CG_UID_EPSILON,
	CG_UID_MOMENTUM,
	CG_UID_ACCUM_COUNT,
	CG_UID_VIRTUAL = 100, /* intermediates from here on */
};
/* Output size of one spatial dimension. */
int64_t cg_conv_out(int64_t in, int64_t k, int64_t pad, int64_t stride);
/* sh's group count (1 when left at 0) and its weights' input channels, c / groups. */
int64_t cg_conv_groups(const struct cg_conv_shape *sh);
int64_t cg_conv_w_c(const struct cg_conv_shape *sh);
/* Each builder below builds and finalizes its graph into g (initialized here; destroy
 * it on success and on failure); handle NULL builds it without a device. */
int cg_conv_fwd_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_conv_fwd_opts *o,
		      struct cg_graph *g);

/* ConvBNwgrad: dw = wgrad(relu(x * scale + bias), dy), the forward's prologue recomputed
 * on the stored raw input x (without the prologue: dw = wgrad(x, dy)). Uids X, SCALE,
 * BIAS, DY, DW. NVIDIA documents the fused form for fp16 only; on compute capability
 * 9.0 only with all three prologue operations. */
struct cg_wgrad_opts {
	cudnnDataType_t io;    /* x, dy */
	cudnnDataType_t param; /* scale, bias */
	cudnnDataType_t inter; /* virtual intermediates */
	cudnnDataType_t dw;    /* the weight gradient's type */
	int prologue;
};
int cg_wgrad_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_wgrad_opts *o,
		   struct cg_graph *g);

/* DgradDreluBNBwdWeight, for the convolution whose input was relu(bn(x_bn)) (x_bn: the
 * previous convolution's raw output, uid X, shape n x c x h x w of sh's input):
 *   dx = dgrad(dy, w); with drelu, dz = relu_bwd(dx, bn(x_bn)) where bn(x_bn) =
 *   (x_bn - mean) * invstd * scale + bias is recomputed (uid DZ stored; dx virtual);
 *   with bn_weights, BN backward weights on dz: dscale, dbias and the coefficients of
 *   dx_bn = eq_dy_scale * dz + eq_x_scale * x_bn + eq_bias (cg_dbn_apply_graph).
 * Uids DY, W, X, MEAN, INVSTD, SCALE, BIAS, DX (plain) or DZ, DSCALE, DBIAS, EQ_DY_SCALE,
 * EQ_X_SCALE, EQ_DBIAS. NVIDIA's pattern: dy, w, x_bn fp16; mean, invstd, scale, bias and
 * every output of BN backward weights float; x_bn - mean written as ADD with alpha2 -1
 * (the documentation says so; cudnn-frontend's sample leaves alpha2 at 1: mean_form
 * picks). */
enum cg_mean_form {
	CG_MEAN_ADD_NEG, /* ADD(x_bn, mean) with alpha2 = -1: the documented form */
	CG_MEAN_SUB,     /* SUB(x_bn, mean) */
};
struct cg_dgrad_opts {
	cudnnDataType_t io;    /* dy, w, x_bn, dx or dz */
	cudnnDataType_t param; /* mean, invstd, scale, bias */
	cudnnDataType_t inter; /* virtual intermediates */
	int drelu;
	int bn_weights;        /* needs drelu */
	enum cg_mean_form mean_form;
};
int cg_dgrad_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_dgrad_opts *o,
		   struct cg_graph *g);

/* dBNApply: dx = eq_dy_scale * dz + eq_x_scale * x + eq_bias per channel (pointwise
 * only; uids DZ, X, EQ_DY_SCALE, EQ_X_SCALE, EQ_DBIAS in param, DX), the batch-norm
 * backward's data gradient after DgradDreluBNBwdWeight. Shape n x c x h x w. */
int cg_dbn_apply_graph(cudnnHandle_t handle, int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t io,
		       cudnnDataType_t param, cudnnDataType_t inter, struct cg_graph *g);

/* BN finalize alone over c channels: uids SUM, SQSUM, SCALE, BIAS, EQ_SCALE, EQ_BIAS,
 * SAVED_MEAN, SAVED_INVSTD (float), PREV_MEAN, PREV_VAR, NEXT_MEAN, NEXT_VAR with
 * running, and EPSILON, MOMENTUM (scalar: float or double; momentum is there without
 * running too) and ACCUM_COUNT (int64) by value. */
struct cg_bn_finalize_opts {
	int64_t c;
	cudnnDataType_t scalar;
	int running;
};
int cg_bn_finalize_graph(cudnnHandle_t handle, const struct cg_bn_finalize_opts *o, struct cg_graph *g);

/* --- engines, plans, execution ------------------------------------------------------------ */
struct cg_plan {
	cudnnBackendDescriptor_t plan; /* finalized execution plan */
	cudnnBackendDescriptor_t cfg;  /* its engine config, kept while the plan lives */
	int64_t ws_bytes;              /* the workspace its execution takes */
	cudnnBackendHeurMode_t mode;   /* the heuristics that proposed its engine config */
	int cfg_index, cfg_count;      /* which of how many configs the heuristics gave */
	int64_t engine_index;          /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX (-1 unknown) */
	int runtime_compiled;          /* the engine compiles its kernel at run time */
};
/* The first engine config that finalizes into a plan, from heuristics mode A, else from
 * mode FALLBACK. None: GP_EUNSUPPORTED, its line saying how many configs each mode
 * returned, why the last one failed and cuDNN's last message. */
int cg_plan_build(const struct cg_graph *g, struct cg_plan *p);
void cg_plan_destroy(struct cg_plan *p);
/* "heuristics A, config 1 of 6, engine 12 (runtime compiled)" */
void cg_plan_describe(const struct cg_plan *p, char *buf, size_t cap);
/* Runs p on handle's stream: n tensors by uid and data pointer, ws of p->ws_bytes
 * (NULL when 0). Enqueues only. */
int cg_execute(cudnnHandle_t handle, const struct cg_plan *p, int n, const int64_t *uids, void *const *ptrs,
	       void *ws);

#ifdef __cplusplus
}
#endif

#endif
