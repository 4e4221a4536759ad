/* A small C layer over cuDNN's backend (graph) API, the only way from C to cuDNN's
 * runtime fusion engines: a convolution with a scale-bias-ReLU prologue on its input
 * and per-channel statistics of its output in one kernel (NVIDIA's ResNet-50 road,
 * issue 24). Nothing in the engine calls it yet; tests/gpu/test_cudnn_graph.c probes
 * what the installed cuDNN offers. docs/cuda.md, "cuDNN graph API".
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
/* y = conv(x, w) (alpha 1, beta 0). */
int cg_graph_conv_fwd(struct cg_graph *g, const struct cg_conv_spec *c, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y);
/* y = mode(x) or mode(x, b) (b NULL for unary modes such as CUDNN_POINTWISE_RELU_FWD),
 * computed in prec. */
int cg_graph_pointwise(struct cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
		       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y);
/* sum and sqsum (1 x c x 1 x 1) = per-channel sum and sum of squares of x, in prec. */
int cg_graph_genstats(struct cg_graph *g, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
		      cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sqsum);
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
};
struct cg_conv_fwd_opts {
	cudnnDataType_t io;    /* x, w, y */
	cudnnDataType_t param; /* scale, bias (with prologue) */
	cudnnDataType_t inter; /* the prologue's intermediates (virtual tensors) */
	int prologue;
	int genstats;          /* sum and sqsum of y: float */
};
enum cg_uid {
	CG_UID_X = 1,
	CG_UID_W,
	CG_UID_Y,
	CG_UID_SCALE,
	CG_UID_BIAS,
	CG_UID_SUM,
	CG_UID_SQSUM,
	CG_UID_VIRTUAL = 100, /* intermediates from here on */
};
/* Output size of one spatial dimension. */
int64_t cg_conv_out(int64_t in, int64_t k, int64_t pad, int64_t stride);
/* Builds and finalizes the graph into g (initialized here; destroy it on success and on
 * failure). */
int cg_conv_fwd_graph(cudnnHandle_t handle, const struct cg_conv_shape *sh, const struct cg_conv_fwd_opts *o,
		      struct cg_graph *g);

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
