/* A network is a list of nodes in execution order, built by a model function that
 * mirrors torchvision. Parameters live in one flat array (so the optimizer is one
 * multi-tensor update and gradients come in contiguous buckets for an all-reduce);
 * activations live in one arena whose offsets the memory plan assigns before the
 * first step, reusing memory whose lifetime has ended. */
#ifndef GP_NET_H
#define GP_NET_H

#include "ops/graph.h"

/* --- building (used by models.c) ---------------------------------------------------
 * Each adder returns the new node's index; on failure it records net->build_err and
 * returns -1, and later adders do nothing, so a model function checks once at the end. */
int net_init(struct net *net, const char *model, int classes, int in_c, int in_h, int in_w);
int net_input(struct net *net);
int net_conv(struct net *net, const char *name, int in, int c_out, int k, int stride,
	     int pad, int groups, int bias);
int net_bn(struct net *net, const char *name, int in);
int net_relu(struct net *net, int in);
int net_relu6(struct net *net, int in);
int net_maxpool(struct net *net, int in, int k, int stride, int pad);
int net_avgpool_global(struct net *net, int in);
int net_flatten(struct net *net, int in);
int net_linear(struct net *net, const char *name, int in, int out_features, int bias);
int net_add(struct net *net, int a, int b);
int net_dropout(struct net *net, int in, double p);
/* Finish building: lay out the flat arrays and allocate the host master copy. */
int net_finalize(struct net *net);
void net_free(struct net *net);

/* --- shapes, counts, memory plan ------------------------------------------------------ */
int net_set_batch(struct net *net, int batch);
double net_total_macs(const struct net *net);
/* Plan activation memory for training (training=1) or inference at the current
 * batch, for elements of elem_bytes, with the backend's scratch (net->scratch) where
 * there is one; fills net->plan. Allocates nothing on a device. */
int net_plan_memory(struct net *net, int training, size_t elem_bytes, size_t workspace_bytes);
/* The training plan net_setup would make for backend, dtype and prec, without a device
 * and without the backend's scratch (workspaces): with only what the backend decides
 * from settings (plan_marks: outputs its backward never reads; in a build without the
 * backend, none). Sets the net's backend, dtype and precision; tears down a set-up net
 * first. */
int net_plan_predict(struct net *net, enum backend_kind backend, enum gp_dtype dtype, enum precision prec);
/* The net's scratch requests, allocated (all zero) on first use; NULL when out of
 * memory. */
struct scratch_req *net_scratch_reqs(struct net *net);

struct state_entry *net_state_find(struct net *net, const char *name);

/* --- running ---------------------------------------------------------------------------
 * net_setup allocates the backend memory for the current batch and copies the host
 * master parameters in. Errors leave nothing allocated. With net->mem_limit_bytes set,
 * the plan is checked against it before allocating, and what the backend holds after
 * set-up (the CUDA backend measures its cuDNN workspace then) is checked again. */
int net_setup(struct net *net, enum backend_kind backend, enum gp_dtype dtype,
	      enum precision prec);
void net_teardown(struct net *net);
/* Copy a host batch (floats, N x C x H x W) and int32 labels in. */
int net_set_batch_data(struct net *net, const float *x, const int32_t *labels);
/* The same for the next step, overlapped where the backend can (CUDA: a copy stream
 * while the previous step computes; x should be pinned). x and labels must stay valid
 * until the next net_stage_batch returns or net_wait does. */
int net_stage_batch(struct net *net, const float *x, const int32_t *labels);
/* Batches made on the GPU (`--decode gpu`): the format the step's input has on the
 * device (GP_F32 NCHW, or GP_BF16/GP_F16 in NHWC or NCHW under mixed precision), and
 * a device batch copied in (labels on the host, free to reuse at return): in that
 * format as it is, or as float NCHW converted on the way, in stream order after the
 * previous step. With read_event NULL it returns when copied, which waits for the
 * previous step to be done with its input; with a CUDA event (cudaEvent_t) it
 * returns at once, the event recorded where x has been read: the writer of x waits
 * for it on its own stream, and the host never waits for the step. GP_EINVAL on a
 * backend without device input (CPU) or for another format. */
int net_input_format(struct net *net, enum gp_dtype *dtype, int *nhwc);
int net_set_batch_device(struct net *net, const void *x, enum gp_dtype dtype, int nhwc,
			 const int32_t *labels, void *read_event);
int net_forward(struct net *net, int training);
/* Loss of the last forward against the labels; also seeds the logits gradient.
 * loss may be NULL: a GPU backend then does not wait for the value.
 * `correct` (may be NULL) receives how many argmax predictions were right. */
int net_loss(struct net *net, double *loss, int *correct);
int net_backward(struct net *net);
int net_sgd_step(struct net *net, const struct sgd_args *sgd);
/* Forward, loss, backward and SGD step; loss and correct may be NULL (then a GPU
 * backend does not wait). With net->use_graphs and no hooks, a backend may replay the
 * step as a captured graph. */
int net_train_step(struct net *net, const struct sgd_args *sgd, double *loss, int *correct);
/* Gradient accumulation (net->optim.grad_accum == k micro-batches per optimizer step,
 * set before net_setup): after the backward of micro-batch `micro` (from 0), keep its
 * gradients; after the last one the gradients are the sum over all k, for a step with
 * grad_scale 1/k. Nothing to do for k == 1. */
int net_grad_accumulate(struct net *net, int micro, int k);
/* Turn dynamic loss scaling on with torch's defaults (scale 2^16, growth 2 every
 * 2000 clean steps, back-off 0.5). */
void net_enable_loss_scaling(struct net *net);

/* Split the gradients into buckets of about bucket_bytes (at parameter boundaries,
 * last layers first) and call ready() for each during every backward. */
int net_set_grad_buckets(struct net *net, size_t bucket_bytes,
			 void (*ready)(void *user, const struct net *net, int bucket, size_t first,
				       size_t count),
			 void *user);
/* Make the net one rank of a data-parallel group (before net_setup; NULL: alone):
 * net->dist in ops/graph.h says what that does. Gradients are all-reduced in buckets
 * of about bucket_bytes (0: NET_DIST_BUCKET_BYTES, DDP's 25 MB), sync_bn computes
 * batch-norm statistics over every rank. */
#define NET_DIST_BUCKET_BYTES ((size_t)25 << 20)
int net_set_dist(struct net *net, struct dist *d, int sync_bn, size_t bucket_bytes);

/* Time the gradient all-reduce alone (every bucket, as backward starts them, with
 * nothing to overlap): the mean of iters after one untimed, in ms. 0 without a group.
 * Leaves the gradients averaged again: call between steps only. */
int net_dist_time_allreduce(struct net *net, int iters, double *ms);

/* Wait until the backend has finished everything enqueued (for timing). */
int net_wait(struct net *net);
/* Copy backend parameters and running statistics to (or from) the host master. */
int net_sync_to_host(struct net *net);
int net_sync_from_host(struct net *net);

/* The optimizer's state (a training checkpoint's): momentum (SGD's buffer, AdamW's
 * exp_avg) and exp_avg_sq (AdamW's; NULL under SGD), params_count host floats each,
 * from any backend. The step count is net->sgd_steps and the loss scaler net->scaler,
 * both on the host: from_host reads sgd_steps (set it first). Between steps only. */
int net_optim_state_to_host(struct net *net, float *momentum, float *exp_avg_sq);
int net_optim_state_from_host(struct net *net, const float *momentum, const float *exp_avg_sq);

/* Copy the parameter gradients (params_count floats) or the last node's output
 * (batch x classes floats) to host memory, from any backend. */
int net_grads_to_host(struct net *net, float *dst);
int net_logits_to_host(struct net *net, float *dst);
/* A node's output (grad 0) or its gradient (grad 1), shape_numel(out) floats, as the
 * memory holds it now (for checks between backends; GP_ENOTFOUND if none). */
int net_tensor_to_host(struct net *net, int node, int grad, float *dst);
/* Name of a node for messages and traces: its module path, else op and index. */
const char *net_node_label(const struct net *net, int node, char *buf, size_t cap);

#endif
