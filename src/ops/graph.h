/* The graph a net is: nodes in execution order, the state dict, the memory plan's
 * tensors, and the queries on them that the planner and the backends share. Data
 * only; building, planning and running it are nn/net.h's. */
#ifndef GP_GRAPH_H
#define GP_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "core/memstat.h"
#include "core/tensor.h"
#include "core/tuning.h"
#include "ops/ops.h"

#define GP_NAME_MAX 64
#define GP_MAX_NODES 512
#define GP_MAX_STATE 1024

enum backend_kind { BACKEND_CPU = 0, BACKEND_CUDA };

/* Math mode on the GPU; the CPU backend computes in the net's dtype. FP16 and BF16
 * are mixed precision (autocast semantics): 16-bit activations and tensor-core
 * convolutions and products, float batch-norm statistics, loss and master weights. */
enum precision { PREC_FP32 = 0, PREC_TF32, PREC_FP16, PREC_BF16 };
enum layout { LAYOUT_AUTO = 0, LAYOUT_NCHW, LAYOUT_NHWC };

/* "fp32", "tf32", "fp16" or "bf16": the names that --precision takes and results
 * record. */
/* Every precision's name in enum order, NULL past the last (core/names.h). */
const char *train_precision_name_at(int i);
const char *train_precision_name(enum precision p);
int train_parse_precision(const char *s, enum precision *out);

static inline int precision_is_amp(enum precision p)
{
	return p == PREC_FP16 || p == PREC_BF16;
}

/* Bytes per activation element the plan uses for a backend, dtype and precision. */
static inline size_t net_act_elem_bytes(enum backend_kind backend, enum gp_dtype dtype, enum precision p)
{
	return backend == BACKEND_CPU ? dtype_size(dtype) : precision_is_amp(p) ? 2 : sizeof(float);
}

struct node {
	enum op_type op;
	char name[GP_NAME_MAX]; /* module path ("layer1.0.conv1"); "" for functional ops */
	int in[2];              /* producing node indices */
	int n_in;
	struct shape out;       /* output shape at the current batch */
	union {
		struct conv2d_args conv;
		struct bn_args bn;
		struct pool_args pool;
		struct linear_args lin;
		struct dropout_args drop;
	} a;
	int param_first, param_count; /* entries in net->params */
	size_t running_offset;        /* batch norm: running_mean, then running_var, in net->running */
	int64_t bn_batches_tracked;
	double macs;                  /* forward multiply-accumulates at the current batch */

	/* Memory plan: indices into net->tensors (-1 when the node has none). t_re: a
	 * ReLU after batch norm whose output is not kept for backward but recomputed
	 * there from the batch norm's input and statistics (net->recompute). */
	int t_y, t_dy, t_saved, t_re;
	int consumers;          /* how many nodes read this output */
	int last_consumer;      /* highest consumer index: its backward writes dx first */
	int needs_dx;           /* does any gradient have to flow into this node's output */
};

/* One tensor of the state dict: a parameter, a running statistic, or a counter. */
enum state_kind { STATE_PARAM = 0, STATE_RUNNING, STATE_COUNTER };

struct state_entry {
	char name[GP_NAME_MAX + 24]; /* torchvision key */
	enum state_kind kind;
	int ndim;
	int64_t dims[4];
	size_t numel;
	size_t offset; /* elements into the flat params or running arrays */
	int node;
};

/* A planned activation-memory tensor: bytes and the step interval in which it lives.
 * Steps: forward of node i is i, the loss is n_nodes, backward of node i is
 * 2 * n_nodes - i. */
struct plan_tensor {
	size_t bytes;
	int first_step, last_step;
	size_t offset; /* assigned by the planner */
	int alias_of;  /* -1, or a tensor whose memory this one shares */
};

/* Scratch memory a backend needs per node beside activations, stated before the plan
 * (the backend's plan_scratch, once its algorithms are chosen) so that the planner
 * lays it out with everything else, and where the plan put it. Steps as in struct
 * plan_tensor; bytes 0: nothing asked. */
struct scratch_req {
	/* Workspace live only during the node's forward (fwd_bytes) or backward
	 * (bwd_bytes): it takes memory that is free then instead of a buffer on top of the
	 * arena's peak. */
	size_t fwd_bytes, bwd_bytes;
	/* side: part of the node's backward (a convolution's weight gradient) runs on a
	 * second stream with a workspace of side_bytes, and bwd_bytes covers the rest.
	 * The planner keeps the node's input and output gradient, and that workspace,
	 * alive until the backward of the next convolution below (side_join), where the
	 * main stream waits for the side one. It clears side where that cannot hold or
	 * gains nothing (the lowest convolution), folding side_bytes into bwd_bytes. */
	int side;
	size_t side_bytes;
	/* Kept from the node's forward to step keep_last (a fused batch norm's reserve
	 * space); keep_last > 0 also marks a node whose backend fused it. */
	size_t keep_bytes;
	int keep_last;
	/* The node's backward does not read its output, which op_bwd_needs_output says
	 * it would (a ReLU whose mask the fused batch norm before takes from its input):
	 * the output lives only as long as its readers in forward and backward need it. */
	int out_unread;
	/* A later step reads the node's output (> 0: the last such step): a ReLU whose mask
	 * a batch norm before it applies in that batch norm's backward. */
	int out_last;
	/* Filled by the planner: the tensors (-1: none) and the side work's join. */
	int t_fwd, t_bwd, t_side, t_keep;
	int side_join;
};

struct mem_plan {
	size_t arena_bytes;      /* activations, their gradients and saved tensors */
	size_t weights_bytes;    /* parameters + running statistics */
	size_t grads_bytes;
	size_t optim_bytes;
	size_t workspace_bytes;  /* what the backend reported for its scratch */
	size_t other_bytes;      /* input batch, labels, loss */
	size_t no_reuse_bytes;   /* the arena if nothing were reused, for comparison */
	size_t total_bytes;
};

/* How the CUDA backend picks convolution algorithms (the CPU has none to pick):
 * FP32 by direct summation only (no FFT or Winograd, which round differently), only
 * deterministic ones, and from cuDNN's heuristics instead of timing runs (maxbatch:
 * a trial is about memory). All 0, the default: the fastest measured competes, as
 * under PyTorch's cudnn.benchmark. */
struct conv_policy {
	int fp32_direct_only;
	int deterministic;
	int heuristic;
};

struct backend_state; /* owned by the backend */
struct net;

/* Observers of execution (profiler ranges, per-layer timing). Called on the host
 * around each node's forward and backward and around the optimizer step;
 * node is -1 for the optimizer. Work is asynchronous on a GPU backend. */
enum net_phase { PHASE_FORWARD = 0, PHASE_BACKWARD, PHASE_OPTIMIZER };
struct net_hooks {
	void (*node_begin)(void *user, const struct net *net, int node, enum net_phase phase);
	void (*node_end)(void *user, const struct net *net, int node, enum net_phase phase);
	void *user;
};

/* Gradient buckets for data parallelism: contiguous ranges of the flat gradient
 * array (in elements), filled from the end as backward runs. ready() is called on the
 * host as soon as every gradient in a bucket has been enqueued, in order, so an
 * all-reduce of that bucket can start while backward goes on. */
/* Dynamic loss scaling as torch.amp.GradScaler: the loss gradient is multiplied by
 * scale; before the optimizer step the gradients are divided by it and checked; a
 * step with an inf or NaN gradient is skipped and the scale backed off, and after
 * growth_interval clean steps in a row it grows. For FP16 training. */
struct grad_scaler {
	int enabled;
	double scale;            /* 65536 */
	double growth_factor;    /* 2 */
	double backoff_factor;   /* 0.5 */
	int growth_interval;     /* 2000 */
	int growth_tracker;      /* clean steps since the last change */
	long long skipped_steps;
};

#define GP_MAX_BUCKETS 256
struct grad_buckets {
	int n;
	size_t first[GP_MAX_BUCKETS], count[GP_MAX_BUCKETS];
	int last_node[GP_MAX_BUCKETS]; /* the bucket is complete after this node's backward */
	void (*ready)(void *user, const struct net *net, int bucket, size_t first, size_t count);
	void *user;
};

struct dist; /* dist/dist.h */

struct net {
	char model[32];
	int classes, in_c, in_h, in_w;
	int batch;
	int training;

	struct node nodes[GP_MAX_NODES];
	int n_nodes;
	int build_err; /* first error while building; model functions check it once */

	struct state_entry state[GP_MAX_STATE];
	int n_state;
	int n_params;          /* how many state entries are STATE_PARAM (in torchvision's
				  state_dict order, interleaved with running statistics) */
	size_t params_count;   /* floats in the flat parameter array */
	size_t running_count;  /* floats in the flat running-statistics array */

	/* Host master copy (fp32): filled at build (initialization), read and
	 * written by checkpoints, synchronized with the backend on demand. */
	float *host_params;
	float *host_running;

	struct plan_tensor *tensors;
	int n_tensors;
	struct mem_plan plan;
	/* n_nodes scratch requests of the set-up backend (NULL: none; net_scratch_reqs),
	 * freed at teardown. */
	struct scratch_req *scratch;

	enum backend_kind backend;
	enum gp_dtype dtype;       /* CPU: GP_F32 or GP_F64 */
	enum precision precision;  /* CUDA math mode */
	struct backend_state *bk;
	struct mem_stats mem;
	/* 0: no cap. Otherwise net_setup fails as out of memory (GP_EDEVOOM on CUDA,
	 * GP_ENOMEM on the CPU) when the net would hold more: "what if the card were
	 * smaller", and how tests make maxbatch run out on the CPU. */
	size_t mem_limit_bytes;
	int sgd_steps;             /* optimizer steps taken (momentum buffers start on the first) */
	struct optim_setup optim;  /* what set-up allocates for the optimizer (zero: SGD) */
	double label_smoothing;    /* the loss's, as CrossEntropyLoss(label_smoothing=) */
	int micro_batch;           /* the micro-batch of this optimizer step (accumulation; 0
				    * without): dropout draws new masks for each */
	uint64_t seed;          /* initialization and dropout masks */
	struct net_hooks hooks;
	int use_graphs;         /* replay the training step as a CUDA graph when possible */
	struct grad_buckets buckets; /* n == 0: none */
	/* Data parallelism: the net is one rank of this group (NULL: alone). The backend
	 * averages the gradients over the ranks bucket by bucket as backward makes them
	 * (a bucket's all-reduce starts once it is complete) and finishes before the
	 * optimizer reads them; parameters start as rank 0's; without sync_bn the running
	 * statistics are rank 0's, sent before each training forward (as DDP's
	 * broadcast_buffers), with it batch norm computes its statistics over every
	 * rank's batch (torch.nn.SyncBatchNorm). */
	struct dist *dist;
	int sync_bn;
	struct grad_scaler scaler;
	int staged;             /* a batch was staged and is taken in by the next step */
	int recompute;          /* 1: recompute BN+ReLU outputs in backward instead of keeping
				 * them; 2: residual blocks' outputs too (plan.c) */
	enum layout layout;     /* activation layout on the GPU (LAYOUT_AUTO: NHWC under fp16/bf16) */
	int device;             /* the GPU the net runs on (CUDA; 0 by default, the only one on the CPU) */
	struct conv_policy conv_policy; /* read at set-up */
	/* The process's tuning when the net was built; tests switch a fast path off on one
	 * net through tuning.test to compare it with the plain one. */
	struct tuning tuning;
};

/* Does node i have an output gradient in a training plan (net_plan_memory's t_dy)? */
int node_has_grad(const struct net *net, int i);

/* The roofline's view of node i's forward (backward 0) or backward (1) at the net's
 * batch: FLOPs (2 per MAC for convolutions and linear layers, their backward twice
 * that, or once without a data gradient; element-wise ops a few per element, see
 * graph.c) and the bytes it must move at the least, each tensor once: activations in
 * act_bytes, weights and their gradients in w_bytes. A flatten moves nothing (a view).
 * The input's data gradient counts only where one flows (the input's needs_dx). */
double node_flops(const struct net *net, int i, int backward);
double node_bytes(const struct net *net, int i, int backward, double act_bytes, double w_bytes);

/* Does the backward of this op read its input activation (conv, bn, linear)? */
int op_bwd_needs_input(enum op_type op);
/* Does the backward of this op read its own output (relu, relu6)? */
int op_bwd_needs_output(enum op_type op);
/* Bytes of the op's saved tensor (bn statistics, max-pool argmax, dropout mask). */
size_t node_saved_bytes(const struct node *nd, size_t elem_bytes);
/* For a node whose output backward recomputes (t_re >= 0): -1 for a ReLU after batch
 * norm (recomputed from the batch norm's input and statistics); for a residual block's
 * output (ReLU over add(batch norm, identity)) the identity node, whose value
 * (act_ptr_bwd) the recompute adds. */
int node_recompute_identity(const struct net *net, int r);
/* The identity input of a residual add whose other input is a batch norm read only
 * there (the block's last one); -1 when nd is not such an add. */
int node_add_identity(const struct net *net, const struct node *nd);
/* The tensor whose memory planned tensor t shares (t itself when it shares none): two
 * tensors are one buffer exactly when their roots are equal. */
static inline int plan_tensor_root(const struct net *net, int t)
{
	while (net->tensors[t].alias_of >= 0)
		t = net->tensors[t].alias_of;
	return t;
}

/* The batch norm whose input and statistics a recompute of r normalizes (r's input,
 * or for a block output the add's batch-norm input). */
static inline int node_recompute_bn(const struct net *net, int r)
{
	int id = node_recompute_identity(net, r), in = net->nodes[r].in[0];
	if (id < 0)
		return in;
	const struct node *add = &net->nodes[in];
	return add->in[0] == id ? add->in[1] : add->in[0];
}
/* Is node r's output recomputed right before the backward of node i (the planned
 * step; a chain of block outputs is made together, in forward order)? */
static inline int node_recomputed_at(const struct net *net, int r, int i)
{
	const struct node *rn = &net->nodes[r];
	return rn->t_re >= 0 && net->tensors[rn->t_re].first_step == 2 * net->n_nodes - i;
}
/* Nodes r < i whose recompute runs before the backward of node i, in forward order
 * (none without net->recompute). */
#define FOR_EACH_RECOMPUTE_AT(net, r, i)                                    \
	for (int r = 0; (net)->recompute && r < (i); r++)                   \
		if (node_recomputed_at((net), r, (i)))

#endif
