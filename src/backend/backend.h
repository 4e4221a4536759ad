/* What a backend provides to the net. Each backend implements every op behind a
 * switch on the node's op (src/backend/cpu/backend_cpu.c,
 * src/backend/cuda/backend_cuda.c). */
#ifndef GP_BACKEND_H
#define GP_BACKEND_H

#include "ops/graph.h"

struct backend_ops {
	const char *name;
	/* Optional, before the plan: make the net's execution context, choose how each
	 * node runs (algorithms, fusions) and state in reqs (n_nodes entries, zeroed) the
	 * scratch memory each node needs and for how long. On failure it leaves nothing
	 * behind. */
	int (*plan_scratch)(struct net *net, struct scratch_req *reqs);
	/* Optional, without a device: mark in reqs (zeroed) what plan_scratch will mark
	 * that changes the activations' lifetimes (struct scratch_req's out_unread), so
	 * that a plan made before it (a memory cap's first check, gpuperf info) predicts
	 * the set-up's. */
	int (*plan_marks)(struct net *net, struct scratch_req *reqs);
	/* Allocate everything for net->batch per net->plan; copy host master in. After
	 * plan_scratch (where the backend has one), on a failure of either, teardown. */
	int (*setup)(struct net *net);
	void (*teardown)(struct net *net);
	int (*set_batch_data)(struct net *net, const float *x, const int32_t *labels);
	/* Optional: start copying the next batch (from pinned host memory) on a copy
	 * stream, to be taken in by take_staged at the start of the next step; returns at
	 * once. x and labels must stay valid until the next stage_batch or net_wait. */
	int (*stage_batch)(struct net *net, const float *x, const int32_t *labels);
	int (*take_staged)(struct net *net);
	/* Optional (a GPU backend): the step's input as this backend holds it, *dtype
	 * GP_F32 (NCHW) or the 16-bit type of mixed precision, *nhwc its layout; and a
	 * batch already in the device's memory, in that format or as float NCHW (labels
	 * on the host, free to reuse at return), copied into it after the previous step:
	 * with read_event NULL returning when the copy is done (x may be overwritten
	 * then), else returning at once with read_event (a cudaEvent_t) recorded where x
	 * has been read, for the writer of x to wait for. */
	int (*input_format)(struct net *net, enum gp_dtype *dtype, int *nhwc);
	int (*set_batch_device)(struct net *net, const void *x, enum gp_dtype dtype, int nhwc,
				const int32_t *labels, void *read_event);
	int (*forward_node)(struct net *net, int i, int training);
	int (*loss)(struct net *net, double *loss, int *correct);
	int (*backward_node)(struct net *net, int i);
	/* The optimizer step (SGD or AdamW, struct sgd_args) over the flat arrays. */
	int (*sgd_step)(struct net *net, const struct sgd_args *sgd);
	/* Gradient accumulation between micro-batches (enum grad_accum_mode) in the buffer
	 * set-up allocated for net->optim.grad_accum > 1. */
	int (*grad_accum)(struct net *net, enum grad_accum_mode mode);
	int (*sync_to_host)(struct net *net);
	int (*sync_from_host)(struct net *net);
	/* The optimizer's state to or from host floats, params_count each: the momentum
	 * buffer (AdamW's exp_avg) and AdamW's exp_avg_sq (NULL under SGD). from_host
	 * also sets the backend's own count of optimizer steps (the CUDA dropout masks')
	 * to net->sgd_steps, so a resumed run draws the masks it would have drawn. */
	int (*optim_state_to_host)(struct net *net, float *momentum, float *exp_avg_sq);
	int (*optim_state_from_host)(struct net *net, const float *momentum, const float *exp_avg_sq);
	/* Optional: the whole training step at once (a CUDA graph). Returns 1 when the
	 * step must run op by op instead. */
	int (*train_step)(struct net *net, const struct sgd_args *sgd);
	/* Wait for all enqueued work (NULL: the backend is synchronous). */
	int (*wait)(struct net *net);
	/* Read the loss (and correct count) the last train_step left on the device. */
	int (*read_loss)(struct net *net, double *loss, int *correct);
	/* Copy parameter gradients / the last node's output to host floats. */
	int (*grads_to_host)(struct net *net, float *dst);
	/* Copy node's output (grad 0) or output gradient (grad 1) to host floats. */
	int (*tensor_to_host)(struct net *net, int node, int grad, float *dst);
	int (*logits_to_host)(struct net *net, float *dst);
	/* Multiply node's output gradient by factor (loss scaling). */
	int (*scale_output_grad)(struct net *net, int node, double factor);
	/* Multiply every parameter gradient by factor; *nonfinite = 1 if any is inf/NaN. */
	int (*unscale_grads)(struct net *net, double factor, int *nonfinite);
	/* Data parallelism: all-reduce (mean) every gradient bucket now, in full, and
	 * wait; for timing the communication apart from backward (the gradients are
	 * overwritten with their mean). */
	int (*grad_allreduce)(struct net *net);
	/* Scratch bytes the backend needs beside the plan (conv workspace). */
	size_t (*workspace_bytes)(struct net *net);
};

extern const struct backend_ops backend_cpu_ops;
/* Host-visible pointers to the CPU backend's arrays (NULL on another backend), in the
 * backend dtype: for tests and gradient checks. */
void *net_cpu_params(struct net *net);
void *net_cpu_grads(struct net *net);
#ifdef GP_HAVE_CUDA
extern const struct backend_ops backend_cuda_ops;
/* The net's cuDNN algorithm policy (struct conv_policy), for its next set-up: FP32
 * convolutions by direct summation only, and/or only deterministic algorithms. */
void backend_cuda_set_conv_policy(struct net *net, int fp32_direct_only, int deterministic);
/* Convolution algorithms from cuDNN's heuristics instead of timing each candidate
 * (maxbatch: a trial is about memory, and timing every algorithm on every new batch
 * size costs most of the search). */
void backend_cuda_set_conv_heuristics(struct net *net, int on);
/* How many of the set-up net's ReLU6 layers are folded into the 16-bit depthwise
 * convolution that reads them (GPUPERF_RELU6_FOLD), and how many its batch norms apply
 * themselves (fused BN + ReLU6): for tests. */
void backend_cuda_relu6_roles(const struct net *net, int *folded, int *in_bn);
#endif

#endif
