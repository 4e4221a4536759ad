/* What the CUDA backend's files share (backend_cuda.c: contexts, set-up, data in and
 * out; backend_cuda_ops.c: the op switch; backend_cuda_step.c: loss, optimizer, the graph
 * step): the backend's state and the pointers into it that the memory plan defines. */
#ifndef GP_BACKEND_CUDA_INTERNAL_H
#define GP_BACKEND_CUDA_INTERNAL_H

#include <stdint.h>

#include "ops/graph.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

struct backend_state {
	struct cuda_ctx *ctx;
	char *arena;
	float *params, *grads, *momentum, *running, *input, *row_scratch;
	/* backend_cuda_optim.c: AdamW's second moments (momentum holds the first), the
	 * gradients summed over micro-batches, and the step's device hyperparameters with
	 * clipping's sums (NULL where net->optim needs none) */
	float *exp_avg_sq, *grad_acc;
	double *optim_dev;
	int32_t *labels;
	double *d_loss;
	int *d_correct;
	int *d_nonfinite;             /* raised by the loss-scaling check */
	unsigned long long *d_step;   /* optimizer steps, on the device: dropout masks in graphs */
	/* labels, loss scratch, loss, correct count and step counter share one block:
	 * the driver hands out small allocations from shared 2 MiB pages, and one block
	 * keeps free device memory exactly where it was after a teardown */
	char *misc;
	size_t misc_bytes;
	size_t arena_bytes, params_bytes, running_bytes, input_bytes, labels_bytes, scratch_bytes;
	/* Staged input: copied on copy_stream while the previous step computes, then
	 * moved into input/labels on the compute stream at the start of the step. */
	cudaStream_t copy_stream;
	cudaEvent_t copied, stage_free;
	float *stage_x;
	int32_t *stage_labels;
	/* Labels of device batches given with a read event (set_batch_device): copied
	 * from pinned host memory, two buffers used in turn, each reused once its last
	 * copy is done (labels_copied). */
	int32_t *labels_pinned[2];
	cudaEvent_t labels_copied[2];
	int labels_turn;
	/* The training step captured as a CUDA graph, replayed while sgd stays the same. */
	cudaGraphExec_t step_exec;
	struct sgd_args step_sgd;
	int graph_failed;
	int eager_steps; /* steps run op by op since set-up: the first is never captured */
	/* Mixed precision (fp16/bf16): 16-bit activations in ht, NHWC when nhwc; 16-bit
	 * copies of the weights (cast before each use, as autocast does; convolution
	 * weights KRSC under NHWC) and of the convolution weight gradients (converted into
	 * the float gradients), and the input batch converted once per batch. */
	int amp, nhwc;
	enum gp_dtype ht;
	enum gp_dtype dt; /* the activations' type: ht under mixed precision, else GP_F32 */
	/* The convolution algorithms were measured before the plan (plan_scratch); else
	 * set-up measures them on the net's own memory. */
	int measured;
	/* Convolution workspaces planned in the arena (struct scratch_req's fwd_bytes):
	 * each conv call gets its own, live only during it. Off where the algorithms were
	 * measured on the net's own memory (the largest batches), and for a test's
	 * yardstick (tuning.test.conv_ws_arena): one shared workspace then. */
	int ws_in_arena;
	/* The context's shared workspace before this net (given back to that size when
	 * the set-up fails), and whether set-up finished. */
	size_t ws_before;
	int set_up;
	/* Weight gradients were enqueued on the context's side stream (struct
	 * scratch_req's side) that the main stream has not yet waited for (side_join). */
	int side_pending;
	void *params_h, *grads_h, *input_h;
	size_t params_h_bytes, input_h_bytes;
	/* Batch norms fused with the ReLU (and add) after them, in training (16-bit NHWC
	 * through cuDNN, FP32 NCHW on the own kernels; cuda_plan_fusion): each node's part,
	 * enum fuse_role; NULL when none is fused. */
	unsigned char *fuse;
	/* Data parallelism (net->dist): NCCL, the communication stream, bucket state
	 * (dp_cuda.c); NULL for a net alone. */
	struct cuda_dp *dp;
};

/* dp_cuda.c: data parallelism. Each does nothing for a net without net->dist. */
int cuda_dp_setup(struct net *net);
void cuda_dp_teardown(struct net *net);
int cuda_dp_after_backward(struct net *net, int i);
int cuda_dp_finish(struct net *net);
int cuda_dp_bcast_running(struct net *net);
int cuda_dp_grad_allreduce(struct net *net);
int cuda_bn_sync_fwd(struct net *net, int i, const void *x, void *y);
int cuda_bn_sync_bwd(struct net *net, int i, const void *x, const void *dy, void *dx, int acc);

enum fuse_role {
	FUSE_NONE = 0,
	FUSE_BN_RELU,     /* batch norm: y = relu(bn(x)) forward, and its backward, fused */
	FUSE_RELU_DONE,   /* the ReLU (ReLU6) after it: nothing to do either way */
	FUSE_BN_DEFERRED, /* batch norm whose forward the add after it runs */
	FUSE_ADD_BN_RELU, /* that add: y = relu(bn(x) + z) forward; plain backward */
	FUSE_RELU_AFTER_ADD, /* the ReLU after that add: no forward; plain backward */
	FUSE_BN_RELU6,    /* batch norm: y = relu6(bn(x)) forward and backward, fused */
	FUSE_RELU6_FOLDED, /* ReLU6 after a FUSE_BN_RELU batch norm (which stores max(z, 0)),
			    * whose one reader, a 16-bit depthwise convolution, takes min(., 6)
			    * on load and masks its input gradient: nothing to do here */
	FUSE_BN_STATS,    /* the other input z of a FUSE_ADD_BN_RELU add, a batch norm too (a
			   * downsampling shortcut's): forward makes its statistics only, and
			   * the add applies it, y = relu(bn(x) + bn_z(z)); plain backward */
	FUSE_POOL_BN_RELU, /* max pool over a FUSE_BN_RELU pair's output, its one reader: the
			    * pool applies them (the batch norm makes its statistics only, the
			    * ReLU's output is never written); plain backward */
};

/* Make the net's device current on the calling thread: a net may be set up on one
 * thread and run on another, beside nets on other devices. */
static inline int bind_device(struct net *net)
{
	return cuda_device_bind(net->bk->ctx->device);
}

/* The main stream waits for the weight gradients enqueued on the side stream. */
static inline int side_join(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b->side_pending)
		return 0;
	b->side_pending = 0;
	CUDA_TRY(cudaStreamWaitEvent(b->ctx->stream, b->ctx->ev_join, 0));
	return 0;
}

static inline int fuse_role(const struct net *net, int node)
{
	return net->bk->fuse ? net->bk->fuse[node] : FUSE_NONE;
}

static inline void *act_ptr(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	if (nd->op == OP_INPUT)
		return net->bk->amp ? net->bk->input_h : (void *)net->bk->input;
	return nd->t_y < 0 ? NULL : net->bk->arena + net->tensors[nd->t_y].offset;
}

/* What backward reads as a node's output: the recomputed copy where there is one. */
static inline void *act_ptr_bwd(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	return nd->t_re >= 0 ? net->bk->arena + net->tensors[nd->t_re].offset : act_ptr(net, node);
}

static inline void *grad_ptr(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	return nd->t_dy < 0 ? NULL : net->bk->arena + net->tensors[nd->t_dy].offset;
}

static inline void *saved_ptr(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	return nd->t_saved < 0 ? NULL : net->bk->arena + net->tensors[nd->t_saved].offset;
}

static inline float *param_ptr(struct net *net, const struct node *nd, int k)
{
	return net->bk->params + net->state[nd->param_first + k].offset;
}

static inline float *pgrad_ptr(struct net *net, const struct node *nd, int k)
{
	return net->bk->grads + net->state[nd->param_first + k].offset;
}

/* The 16-bit copies of a parameter and of its gradient (mixed precision). */
static inline void *hparam_ptr(struct net *net, const struct node *nd, int k)
{
	return (char *)net->bk->params_h + net->state[nd->param_first + k].offset * 2;
}

static inline void *hgrad_ptr(struct net *net, const struct node *nd, int k)
{
	return (char *)net->bk->grads_h + net->state[nd->param_first + k].offset * 2;
}

/* The arena address of planned scratch tensor t (NULL for -1: none). */
static inline void *scratch_ptr(struct net *net, int t)
{
	return t < 0 ? NULL : net->bk->arena + net->tensors[t].offset;
}

/* A fused batch norm's reserve space (struct scratch_req's keep_bytes), and its size. */
static inline void *rsv_ptr(struct net *net, int node)
{
	return scratch_ptr(net, net->scratch[node].t_keep);
}

static inline size_t rsv_bytes(const struct net *net, int node)
{
	return net->scratch[node].keep_bytes;
}

/* Per node; the step comes from the device counter (dropout_mask_step_cuda). */
static inline uint64_t dropout_seed(const struct net *net, int node)
{
	return net->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)node * 0x100000001B3ULL +
	       (uint64_t)net->micro_batch * 0xD1B54A32D192ED03ULL; /* as the CPU's */
}

/* What a convolution node's call (forward or backward) uses beyond the context: its
 * workspace in the arena, when the net keeps them there (else the shared one). */
static inline struct conv_call conv_call_of(struct net *net, const struct node *nd, int backward)
{
	struct backend_state *b = net->bk;
	const struct scratch_req *r = &net->scratch[nd - net->nodes];
	struct conv_call c = { .ws_planned = b->ws_in_arena };
	if (b->ws_in_arena)
		c.ws = scratch_ptr(net, backward ? r->t_bwd : r->t_fwd);
	return c;
}

/* backend_cuda_ops.c: a node's forward and backward in the net's activation type. */
int cuda_forward_node(struct net *net, int i, int training);
int cuda_backward_node(struct net *net, int i);
/* Decide which batch norms run fused with the ReLU (and add) after them (b->fuse;
 * nothing in 16-bit NCHW, or where a test turned it off: tuning.test.bn_fuse) and
 * state their reserve space in reqs (keep_bytes until keep_last). Before the plan. */
int cuda_plan_fusion(struct net *net, struct scratch_req *reqs);
/* The ReLU outputs that nothing but the ReLU's backward keeps, where the fused batch
 * norm before takes the mask from its input (ResNet's stem): marked unread in reqs
 * (struct scratch_req's out_unread), their batch norms told (bn_args's act_out_spare),
 * from ctx's settings alone. cuda_plan_fusion marks the same, and gpuperf info's plan,
 * made without a device (plan_marks), does through this. */
void cuda_mark_spare_outputs(struct net *net, const struct cuda_ctx *ctx, struct scratch_req *reqs);

/* backend_cuda_step.c: the backend_ops entries of the loss, the optimizer step, the
 * graph-captured training step and loss scaling. */
int cuda_read_loss(struct net *net, double *loss, int *correct);
int cuda_loss(struct net *net, double *loss, int *correct);
int cuda_sgd(struct net *net, const struct sgd_args *sgd);
int cuda_train_step(struct net *net, const struct sgd_args *sgd);
int cuda_scale_output_grad(struct net *net, int node, double factor);
int cuda_unscale_grads(struct net *net, double factor, int *nonfinite);

/* backend_cuda_optim.c: what net->optim asks set-up to allocate, and its release; the
 * step's device hyperparameters, written before a step is enqueued or replayed (never
 * inside a capture); the step itself (1: plain SGD, for sgd_step_cuda); whether two
 * steps' arguments make the same captured graph; gradient accumulation (backend_ops). */
int cuda_optim_setup(struct net *net);
void cuda_optim_teardown(struct net *net);
int cuda_optim_upload(struct net *net, const struct sgd_args *a);
int cuda_optim_enqueue(struct net *net, const struct sgd_args *a);
int cuda_optim_same_graph(const struct net *net, const struct sgd_args *x, const struct sgd_args *y);
int cuda_grad_accum(struct net *net, enum grad_accum_mode mode);
int cuda_optim_state_to_host(struct net *net, float *momentum, float *exp_avg_sq);
int cuda_optim_state_from_host(struct net *net, const float *momentum, const float *exp_avg_sq);

#endif
