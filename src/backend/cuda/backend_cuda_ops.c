/* The CUDA backend's ops: one forward and one backward switch over a node's op, in the
 * net's activation type (float NCHW, or fp16/bf16 in NCHW or NHWC under mixed
 * precision) through the CUDA op layer, whose launchers take that type. Under mixed
 * precision convolutions and linear layers take 16-bit copies of their float weights,
 * cast (and for NHWC transposed to KRSC) right before use, as autocast does; batch norm
 * keeps float statistics and parameters; weight gradients end in the float master
 * gradients. Also here: which batch norms run fused with the ReLU (and add) after them. */
#include <stdlib.h>

#include "core/error.h"
#include "backend/backend.h"
#include "backend/cuda/backend_cuda_internal.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

/* The weights a convolution or linear layer reads: the float master copy, or under mixed
 * precision its 16-bit copy, made here from the master copy (forward, before each use). */
static int weights_cast(struct net *net, const struct node *nd)
{
	struct backend_state *b = net->bk;
	cudaStream_t s = b->ctx->stream;
	if (!b->amp)
		return 0;
	if (nd->op == OP_CONV2D) {
		const struct conv2d_args *a = &nd->a.conv;
		return to_h_layout_cuda(s, b->ht, a->c_out, a->c_in / a->groups, a->kh, a->kw, b->nhwc,
					param_ptr(net, nd, 0), hparam_ptr(net, nd, 0));
	}
	const struct linear_args *a = &nd->a.lin;
	return cast_f32_to_h_cuda(s, b->ht, (size_t)a->out * a->in, param_ptr(net, nd, 0), hparam_ptr(net, nd, 0));
}

static const void *weights_of(struct net *net, const struct node *nd)
{
	return net->bk->amp ? hparam_ptr(net, nd, 0) : (const void *)param_ptr(net, nd, 0);
}

/* y = x, count activations (a flatten, dropout outside training). */
static int act_copy(struct net *net, void *y, const void *x, size_t count)
{
	if (x == y || !count)
		return 0;
	CUDA_TRY(cudaMemcpyAsync(y, x, count * dtype_size(net->bk->dt), cudaMemcpyDeviceToDevice,
				 net->bk->ctx->stream));
	return 0;
}

static int forward_node(struct net *net, int i, int training);

/* Whether batch norm i's fused ReLU feeds a max pool that applies both (FUSE_POOL_BN_RELU). */
static int pooled(const struct net *net, int i)
{
	int c = net->nodes[i].last_consumer, p = c >= 0 ? net->nodes[c].last_consumer : -1;
	return p >= 0 && fuse_role(net, p) == FUSE_POOL_BN_RELU;
}

int cuda_forward_node(struct net *net, int i, int training)
{
	GP_TRY(bind_device(net));
	GP_TRY(side_join(net)); /* a forward after a backward without an optimizer step */
	if (i == 1 && training)
		GP_TRY(cuda_dp_bcast_running(net));
	if (training && net->sync_bn && net->nodes[i].op == OP_BATCHNORM2D)
		return cuda_bn_sync_fwd(net, i, act_ptr(net, net->nodes[i].in[0]), act_ptr(net, i));
	return forward_node(net, i, training);
}

static int forward_node(struct net *net, int i, int training)
{
	struct node *nd = &net->nodes[i];
	struct backend_state *b = net->bk;
	struct cuda_ctx *ctx = b->ctx;
	cudaStream_t s = ctx->stream;
	enum gp_dtype dt = b->dt;
	void *x = nd->n_in ? act_ptr(net, nd->in[0]) : NULL, *y = act_ptr(net, i);
	void *saved = saved_ptr(net, i);
	size_t count = shape_numel(nd->out);
	switch (nd->op) {
	case OP_INPUT:
		return 0;
	case OP_CONV2D: {
		const struct conv2d_args *a = &nd->a.conv;
		struct conv_call call = conv_call_of(net, nd, 0);
		call.relu6 = fuse_role(net, nd->in[0]) == FUSE_RELU6_FOLDED;
		GP_TRY(weights_cast(net, nd));
		return conv2d_fwd_cuda(ctx, a, &call, x, weights_of(net, nd), a->has_bias ? param_ptr(net, nd, 1) : NULL,
				       y);
	}
	case OP_BATCHNORM2D: {
		float *run = b->running + nd->running_offset, *stats = saved;
		int role = training ? fuse_role(net, i) : FUSE_NONE;
		if (role == FUSE_BN_DEFERRED) /* the add after it runs it */
			return 0;
		if (role == FUSE_BN_STATS || (role == FUSE_BN_RELU && pooled(net, i))) /* the add or pool applies it */
			return bn_fwd_stats_cuda(ctx, &nd->a.bn, role == FUSE_BN_STATS ? BN_FUSE_NONE : BN_FUSE_RELU, x,
						 stats, stats + nd->a.bn.c, run, run + nd->a.bn.c);
		if (role == FUSE_BN_RELU || role == FUSE_BN_RELU6) /* y: the ReLU's output, in place */
			return bn_fwd_train_fused_cuda(ctx, &nd->a.bn, role == FUSE_BN_RELU ? BN_FUSE_RELU : BN_FUSE_RELU6,
						       x, NULL, param_ptr(net, nd, 0), param_ptr(net, nd, 1), y, stats,
						       stats + nd->a.bn.c, run, run + nd->a.bn.c, rsv_ptr(net, i),
						       rsv_bytes(net, i));
		if (training)
			return bn_fwd_train_cuda(ctx, &nd->a.bn, x, param_ptr(net, nd, 0), param_ptr(net, nd, 1),
						 y, stats, stats + nd->a.bn.c, run, run + nd->a.bn.c);
		return bn_fwd_eval_cuda(ctx, &nd->a.bn, x, param_ptr(net, nd, 0), param_ptr(net, nd, 1), run,
					run + nd->a.bn.c, y);
	}
	case OP_RELU:
		if (training && (fuse_role(net, i) == FUSE_RELU_DONE || fuse_role(net, i) == FUSE_RELU_AFTER_ADD))
			return 0; /* in place: the fused batch norm wrote it */
		return relu_fwd_cuda(s, dt, count, x, y);
	case OP_RELU6:
		if (training && (fuse_role(net, i) == FUSE_RELU_DONE || fuse_role(net, i) == FUSE_RELU6_FOLDED))
			return 0;
		return relu6_fwd_cuda(s, dt, count, x, y);
	case OP_MAXPOOL2D:
		if (training && fuse_role(net, i) == FUSE_POOL_BN_RELU) { /* x: relu(bn(z)), never written */
			const struct node *bn = &net->nodes[net->nodes[nd->in[0]].in[0]];
			float *st = saved_ptr(net, (int)(bn - net->nodes));
			struct bn_norm norm = { param_ptr(net, bn, 0), param_ptr(net, bn, 1), st, st + bn->a.bn.c };
			return maxpool_bn_relu_fwd_cuda(s, dt, b->nhwc, &nd->a.pool, act_ptr(net, bn->in[0]), &norm, y,
							saved);
		}
		return maxpool_fwd_cuda(s, dt, b->nhwc, &nd->a.pool, x, y, saved);
	case OP_AVGPOOL_GLOBAL: {
		struct shape in = net->nodes[nd->in[0]].out;
		return avgpool_global_fwd_cuda(s, dt, b->nhwc, in.n, in.c, in.h * in.w, x, y);
	}
	case OP_FLATTEN:
		return act_copy(net, y, x, count);
	case OP_LINEAR: {
		const struct linear_args *a = &nd->a.lin;
		GP_TRY(weights_cast(net, nd));
		return linear_fwd_cuda(ctx, a, x, weights_of(net, nd), a->has_bias ? param_ptr(net, nd, 1) : NULL, y);
	}
	case OP_ADD:
		if (training && fuse_role(net, i) == FUSE_ADD_BN_RELU) {
			int k = fuse_role(net, nd->in[0]) == FUSE_BN_DEFERRED ? 0 : 1, bi = nd->in[k], zi = nd->in[1 - k];
			const struct node *bn = &net->nodes[bi];
			float *run = b->running + bn->running_offset, *stats = saved_ptr(net, bi);
			if (fuse_role(net, zi) == FUSE_BN_STATS) {
				const struct node *zn = &net->nodes[zi];
				float *zs = saved_ptr(net, zi);
				struct bn_norm norm = { param_ptr(net, zn, 0), param_ptr(net, zn, 1), zs, zs + zn->a.bn.c };
				return bn_fwd_train_add_bn_relu_cuda(ctx, &bn->a.bn, act_ptr(net, bn->in[0]),
								     act_ptr(net, zn->in[0]), param_ptr(net, bn, 0),
								     param_ptr(net, bn, 1), &norm, y, stats,
								     stats + bn->a.bn.c, run, run + bn->a.bn.c);
			}
			return bn_fwd_train_fused_cuda(ctx, &bn->a.bn, BN_FUSE_ADD_RELU, act_ptr(net, bn->in[0]),
						       act_ptr(net, nd->in[1 - k]), param_ptr(net, bn, 0),
						       param_ptr(net, bn, 1), y, stats, stats + bn->a.bn.c, run,
						       run + bn->a.bn.c, rsv_ptr(net, bi), rsv_bytes(net, bi));
		}
		return add_fwd_cuda(s, dt, count, x, act_ptr(net, nd->in[1]), y);
	case OP_DROPOUT:
		if (training && saved) {
			GP_TRY(dropout_mask_step_cuda(s, count, nd->a.drop.p, dropout_seed(net, i), b->d_step, saved));
			return dropout_fwd_cuda(s, dt, &nd->a.drop, saved, x, y);
		}
		return act_copy(net, y, x, count);
	case OP_COUNT:
		break;
	}
	return gp_error(GP_EUNSUPPORTED, "CUDA backend: no forward for op %s", op_name(nd->op));
}

/* Recompute a ReLU's output from its batch norm's input and saved statistics; for a
 * residual block's output, relu(bn(x) + identity): one pass (in 16 bits rounded once). */
static int cuda_recompute(struct net *net, int r)
{
	struct backend_state *b = net->bk;
	const struct node *rn = &net->nodes[r];
	int id = node_recompute_identity(net, r), bi = node_recompute_bn(net, r);
	const struct node *bn = &net->nodes[bi];
	float *stats = saved_ptr(net, bi);
	const struct bn_args *a = &bn->a.bn;
	return bn_apply_cuda(b->ctx->stream, b->dt, b->nhwc, a->n, a->c, a->h * a->w, act_ptr(net, bn->in[0]),
			     id >= 0 ? act_ptr_bwd(net, id) : NULL, param_ptr(net, bn, 0), param_ptr(net, bn, 1),
			     stats, stats + a->c, rn->op == OP_RELU6 ? BN_APPLY_RELU6 : BN_APPLY_RELU,
			     act_ptr_bwd(net, r));
}

/* A convolution's weight gradient on the side stream, after everything enqueued on
 * the main stream so far (which made x and dy), in its own planned workspace; the
 * main stream goes on with backward data and the layers below meanwhile, and waits at
 * the next convolution's backward (the plan keeps x, dy and the workspace until then).
 * At small batches one convolution's kernels leave most SMs idle; two fill more. */
static int wgrad_on_side(struct net *net, const struct node *nd, const float *x, const float *dy)
{
	struct backend_state *b = net->bk;
	struct cuda_ctx *ctx = b->ctx;
	struct cuda_ctx side = *ctx; /* the same configuration, another stream and handle */
	side.stream = ctx->side_stream;
	side.cudnn = ctx->side_cudnn;
	struct conv_call call = { .ws_planned = 1, .ws = scratch_ptr(net, net->scratch[nd - net->nodes].t_side) };
	CUDA_TRY(cudaEventRecord(ctx->ev_fork, ctx->stream));
	CUDA_TRY(cudaStreamWaitEvent(side.stream, ctx->ev_fork, 0));
	b->side_pending = 1;
	GP_TRY(conv2d_bwd_filter_cuda(&side, &nd->a.conv, &call, x, dy, pgrad_ptr(net, nd, 0),
				      nd->a.conv.has_bias ? pgrad_ptr(net, nd, 1) : NULL));
	CUDA_TRY(cudaEventRecord(ctx->ev_join, side.stream));
	return 0;
}

/* A convolution's weight gradient into the float master gradient. FP32: straight, on
 * the side stream where the plan put it there. Mixed precision: straight into float
 * where the plan computes it that way (conv2d_bwd_filter_f32_cuda), else into the
 * 16-bit copy and converted. */
static int conv_wgrad(struct net *net, int i, const struct conv_call *call, const void *x, const void *dy)
{
	struct backend_state *b = net->bk;
	struct cuda_ctx *ctx = b->ctx;
	const struct node *nd = &net->nodes[i];
	const struct conv2d_args *a = &nd->a.conv;
	float *db = a->has_bias ? pgrad_ptr(net, nd, 1) : NULL;
	if (!b->amp) {
		if (net->scratch[i].side && !net->buckets.ready) /* an observer reads them on the main stream */
			return wgrad_on_side(net, nd, x, dy);
		return conv2d_bwd_filter_cuda(ctx, a, call, x, dy, pgrad_ptr(net, nd, 0), db);
	}
	int direct = conv2d_bwd_filter_f32_cuda(ctx, a, call, x, dy, pgrad_ptr(net, nd, 0), db);
	if (direct)
		return direct < 0 ? direct : 0;
	GP_TRY(conv2d_bwd_filter_cuda(ctx, a, call, x, dy, hgrad_ptr(net, nd, 0), db));
	return from_h_layout_cuda(ctx->stream, b->ht, a->c_out, a->c_in / a->groups, a->kh, a->kw, b->nhwc,
				  hgrad_ptr(net, nd, 0), pgrad_ptr(net, nd, 0), 0);
}

static int backward_node(struct net *net, int i);
static int out_masked_by(struct net *net, int r);

/* A node's backward, then the all-reduce of the gradient buckets it completes. */
int cuda_backward_node(struct net *net, int i)
{
	GP_TRY(bind_device(net));
	const struct node *nd = &net->nodes[i];
	if (net->sync_bn && nd->op == OP_BATCHNORM2D) {
		void *dx = grad_ptr(net, nd->in[0]);
		if (!dx)
			return gp_error(GP_EUNSUPPORTED, "%s: batch norm on the network input", nd->name);
		GP_TRY(cuda_bn_sync_bwd(net, i, act_ptr_bwd(net, nd->in[0]), grad_ptr(net, i), dx,
					net->nodes[nd->in[0]].last_consumer != i));
	} else {
		GP_TRY(backward_node(net, i));
	}
	return cuda_dp_after_backward(net, i);
}

static int backward_node(struct net *net, int i)
{
	struct node *nd = &net->nodes[i];
	struct backend_state *b = net->bk;
	struct cuda_ctx *ctx = b->ctx;
	cudaStream_t s = ctx->stream;
	enum gp_dtype dt = b->dt;
	if (nd->op == OP_CONV2D) /* where the plan ends the side work's tensors */
		GP_TRY(side_join(net));
	/* recomputed outputs are made at the first backward that reads them (planned) */
	FOR_EACH_RECOMPUTE_AT(net, r, i)
		GP_TRY(cuda_recompute(net, r));
	void *dy = grad_ptr(net, i), *x = nd->n_in ? act_ptr_bwd(net, nd->in[0]) : NULL;
	void *dx = nd->n_in ? grad_ptr(net, nd->in[0]) : NULL;
	int acc = nd->n_in ? net->nodes[nd->in[0]].last_consumer != i : 0;
	void *saved = saved_ptr(net, i);
	size_t count = shape_numel(nd->out);
	switch (nd->op) {
	case OP_INPUT:
		return 0;
	case OP_CONV2D: {
		struct conv_call call = conv_call_of(net, nd, 1);
		if (fuse_role(net, nd->in[0]) == FUSE_RELU6_FOLDED) { /* x is max(z, 0): clip, and mask dx */
			call.relu6 = 1;
			call.relu6_x = x;
		}
		GP_TRY(conv_wgrad(net, i, &call, x, dy));
		return dx ? conv2d_bwd_data_cuda(ctx, &nd->a.conv, &call, dy, weights_of(net, nd), dx, acc) : 0;
	}
	case OP_BATCHNORM2D: {
		float *stats = saved;
		if (!dx)
			return gp_error(GP_EUNSUPPORTED, "%s: batch norm on the network input", nd->name);
		if (fuse_role(net, i) == FUSE_BN_RELU || fuse_role(net, i) == FUSE_BN_RELU6) /* dy: unmasked */
			return bn_bwd_relu_fused_cuda(ctx, &nd->a.bn,
						      fuse_role(net, i) == FUSE_BN_RELU ? BN_FUSE_RELU : BN_FUSE_RELU6, x,
						      net->scratch[nd->last_consumer].out_unread /* its memory is reused */
							      ? NULL
							      : act_ptr_bwd(net, nd->last_consumer),
						      dy, param_ptr(net, nd, 0),
						      param_ptr(net, nd, 1), stats, stats + nd->a.bn.c, dx, acc,
						      pgrad_ptr(net, nd, 0), pgrad_ptr(net, nd, 1), rsv_ptr(net, i),
						      rsv_bytes(net, i));
		int r = nd->last_consumer >= 0 ? net->nodes[nd->last_consumer].last_consumer : -1;
		if (r >= 0 && out_masked_by(net, r) == i) /* dy: the ReLU's, unmasked; dz: in place */
			return bn_bwd_out_masked_cuda(ctx, &nd->a.bn, x, act_ptr_bwd(net, r), grad_ptr(net, r),
						      grad_ptr(net, r), param_ptr(net, nd, 0), stats,
						      stats + nd->a.bn.c, dx, acc, pgrad_ptr(net, nd, 0),
						      pgrad_ptr(net, nd, 1));
		return bn_bwd_cuda(ctx, &nd->a.bn, x, dy, param_ptr(net, nd, 0), stats, stats + nd->a.bn.c, dx,
				   acc, pgrad_ptr(net, nd, 0), pgrad_ptr(net, nd, 1));
	}
	case OP_RELU:
		if (fuse_role(net, i) == FUSE_RELU_DONE) /* the batch norm's backward masks */
			return 0;
		if (out_masked_by(net, i) >= 0) /* the batch norm before the add masks */
			return 0;
		return dx ? relu_bwd_cuda(s, dt, count, act_ptr_bwd(net, i), dy, dx, acc) : 0;
	case OP_RELU6:
		if (fuse_role(net, i) == FUSE_RELU_DONE || fuse_role(net, i) == FUSE_RELU6_FOLDED)
			return 0;
		return dx ? relu6_bwd_cuda(s, dt, count, act_ptr_bwd(net, i), dy, dx, acc) : 0;
	case OP_MAXPOOL2D:
		return dx ? maxpool_bwd_cuda(s, dt, b->nhwc, &nd->a.pool, dy, saved, dx, acc) : 0;
	case OP_AVGPOOL_GLOBAL: {
		struct shape in = net->nodes[nd->in[0]].out;
		return dx ? avgpool_global_bwd_cuda(s, dt, b->nhwc, in.n, in.c, in.h * in.w, dy, dx, acc) : 0;
	}
	case OP_FLATTEN:
		return dx && dx != dy ? grad_pass_cuda(s, dt, count, dy, dx, acc) : 0;
	case OP_LINEAR:
		GP_TRY(linear_bwd_weight_cuda(ctx, &nd->a.lin, x, dy, pgrad_ptr(net, nd, 0),
					      nd->a.lin.has_bias ? pgrad_ptr(net, nd, 1) : NULL));
		return dx ? linear_bwd_data_cuda(ctx, &nd->a.lin, dy, weights_of(net, nd), dx, acc) : 0;
	case OP_ADD:
		for (int k = 0; k < 2; k++) {
			void *dxk = grad_ptr(net, nd->in[k]);
			if (dxk && dxk != dy) /* the same buffer when the plan shares it */
				GP_TRY(grad_pass_cuda(s, dt, count, dy, dxk, net->nodes[nd->in[k]].last_consumer != i));
		}
		return 0;
	case OP_DROPOUT:
		return dx ? dropout_bwd_cuda(s, dt, &nd->a.drop, saved, dy, dx, acc) : 0;
	case OP_COUNT:
		break;
	}
	return gp_error(GP_EUNSUPPORTED, "CUDA backend: no backward for op %s", op_name(nd->op));
}

/* A ReLU that overwrites its input, which nothing else reads (plan.c's relu_in_place),
 * in training. */
static int relu_over(const struct net *net, int r, int src)
{
	if (r < 0)
		return 0;
	const struct node *rn = &net->nodes[r];
	return (rn->op == OP_RELU || rn->op == OP_RELU6) && rn->n_in == 1 && rn->in[0] == src &&
	       net->nodes[src].consumers == 1 && net->nodes[src].op != OP_INPUT && node_has_grad(net, r);
}

/* Whether ReLU r's output is kept for nothing but r's backward: its one reader needs
 * no input in backward (ResNet's stem, whose max pool keeps its argmax). */
static int relu_out_spare(const struct net *net, int r)
{
	const struct node *rn = &net->nodes[r];
	return rn->consumers == 1 && rn->last_consumer >= 0 &&
	       !op_bwd_needs_input(net->nodes[rn->last_consumer].op);
}

/* The ReLU (ReLU6) that batch norm i may run fused with in training, or -1. */
static int bn_relu_pair(const struct net *net, int i)
{
	const struct node *nd = &net->nodes[i];
	if (nd->op != OP_BATCHNORM2D || nd->consumers != 1 || !node_has_grad(net, i))
		return -1;
	return relu_over(net, nd->last_consumer, i) ? nd->last_consumer : -1;
}

/* Batch norm i fused with its ReLU c as op (not folded): tells the batch norm's routing
 * whether c's output is spare (bn_args's act_out_spare), and marks c's output unread in
 * backward where the fused backward takes the mask from x (struct scratch_req). */
static void mark_spare(struct net *net, const struct cuda_ctx *ctx, int i, int c, enum bn_fuse op,
		       struct scratch_req *reqs)
{
	struct bn_args *a = &net->nodes[i].a.bn;
	a->act_out_spare = relu_out_spare(net, c);
	reqs[c].out_unread = a->act_out_spare && bn_fused_mask_from_x_cuda(ctx, a, op);
	a->act_out_spare = reqs[c].out_unread;
}

/* The batch norm whose backward applies the mask of ReLU r after a residual add (the
 * add's input last in forward order, whose backward runs first), or -1. The add's
 * gradient is one buffer with its inputs' where the plan shares them (share_add_grads,
 * out_mask_shared): the batch norm's backward writes the masked gradient there in
 * place of the ReLU's own pass (bn_bwd_out_masked_cuda), before any other reader. So:
 * the ReLU right after the add, the batch norm right before it, nothing between that
 * reads the buffer; the own 16-bit kernels for that batch norm; not under recompute,
 * whose ReLU outputs live only until the ReLU's backward. From settings alone (plan
 * marks, the plan and every backward step decide the same). */
static int out_mask_bn(const struct net *net, const struct cuda_ctx *ctx, int r)
{
	const struct node *rn = &net->nodes[r];
	if (!net->tuning.test.bn_fuse || !net->tuning.test.bn_out_mask || net->sync_bn || net->recompute ||
	    rn->op != OP_RELU || rn->n_in != 1 || rn->in[0] != r - 1 || !relu_over(net, r, r - 1))
		return -1;
	const struct node *add = &net->nodes[r - 1];
	if (add->op != OP_ADD || add->in[0] == add->in[1])
		return -1;
	int k = add->in[0] > add->in[1] ? add->in[0] : add->in[1];
	const struct node *bn = &net->nodes[k];
	if (k != r - 2 || bn->op != OP_BATCHNORM2D || bn->consumers != 1 || !node_has_grad(net, k) ||
	    !bn_bwd_out_masks_cuda(ctx, &bn->a.bn))
		return -1;
	return k;
}

/* Whether the add before ReLU r and its inputs with a gradient have one gradient
 * buffer, the ReLU's (the plan made them share it). */
static int out_mask_shared(const struct net *net, int r)
{
	const struct node *rn = &net->nodes[r], *add = &net->nodes[rn->in[0]];
	if (rn->t_dy < 0 || add->t_dy < 0)
		return 0;
	int root = plan_tensor_root(net, rn->t_dy);
	if (plan_tensor_root(net, add->t_dy) != root)
		return 0;
	for (int k = 0; k < 2; k++) {
		int t = net->nodes[add->in[k]].t_dy;
		if (t >= 0 && plan_tensor_root(net, t) != root)
			return 0;
	}
	return 1;
}

/* ReLU r whose mask batch norm k applies in its backward (out_mask_bn), the gradients
 * shared as planned: at step 2n - k, r's output is still read. */
static int out_masked_by(struct net *net, int r)
{
	int k = out_mask_bn(net, net->bk->ctx, r);
	return k >= 0 && out_mask_shared(net, r) ? k : -1;
}

/* Mark the ReLU outputs that a batch norm's backward reads (out_mask_bn): they live
 * until then (struct scratch_req's out_last). */
static void mark_out_mask(struct net *net, const struct cuda_ctx *ctx, struct scratch_req *reqs)
{
	int n = net->n_nodes;
	for (int r = 0; r < n; r++) {
		int k = out_mask_bn(net, ctx, r);
		reqs[r].out_last = k >= 0 ? 2 * n - k : 0;
	}
}

/* No batch norm told its activation's output is spare (before a plan decides again). */
static void spare_clear(struct net *net)
{
	for (int i = 0; i < net->n_nodes; i++)
		if (net->nodes[i].op == OP_BATCHNORM2D)
			net->nodes[i].a.bn.act_out_spare = 0;
}

void cuda_mark_spare_outputs(struct net *net, const struct cuda_ctx *ctx, struct scratch_req *reqs)
{
	spare_clear(net);
	mark_out_mask(net, ctx, reqs);
	if (!net->tuning.test.bn_fuse || net->sync_bn)
		return;
	for (int i = 0; i < net->n_nodes; i++) {
		int c = bn_relu_pair(net, i);
		if (c >= 0)
			mark_spare(net, ctx, i, c, net->nodes[c].op == OP_RELU6 ? BN_FUSE_RELU6 : BN_FUSE_RELU, reqs);
	}
}

/* A ReLU6 (node r, after batch norm bn) to fold into its only reader, a depthwise
 * convolution on the own 16-bit kernels, which can apply its clip at 6: by
 * GPUPERF_RELU6_FOLD (core/tuning.h), under auto only where the batch norm with the
 * ReLU6 would be cuDNN's, which leaves a ReLU6 to a pass of its own. The fold costs
 * backward data a read of the stored input for its mask (1.2 ms of MobileNetV2's 2.9 at
 * batch 256 on an H200, s20-1), which the own batch norm's backward does not need: it
 * masks from what it reads anyway. (Until the twenty-first session auto also folded
 * where the batch norm, with a plain ReLU, would have stayed on cuDNN: its channels in
 * multiples of 64 were slower on the own kernels then, s20-2; no longer, s21-4.) */
static int relu6_foldable(const struct net *net, int bn, int r)
{
	const struct node *rn = &net->nodes[r];
	if (rn->consumers != 1 || rn->last_consumer < 0 || net->tuning.relu6_fold == RELU6_FOLD_NEVER)
		return 0;
	const struct node *cn = &net->nodes[rn->last_consumer];
	if (cn->op != OP_CONV2D || cn->in[0] != r || !conv2d_can_fold_relu6(net->bk->ctx, &cn->a.conv))
		return 0;
	return net->tuning.relu6_fold == RELU6_FOLD_ALWAYS ||
	       !bn16_routed_own_cuda(net->bk->ctx, &net->nodes[bn].a.bn, BN_FUSE_RELU6);
}

/* Whether batch norm z, the other input of the add that runs batch norm i
 * (FUSE_ADD_BN_RELU), is applied in that add's pass too (FUSE_BN_STATS): a batch norm
 * read by nothing else (a downsampling shortcut's), not yet fused, both on the own
 * 16-bit kernels (bn_add_bn_relu_own_cuda). Its output then is never written: its
 * backward reads x and the saved statistics, and no recompute reads it (a downsampling
 * block's output stays kept, block_recomputed). */
static int shortcut_bn_joined(const struct net *net, int i, int z)
{
	const struct node *zn = &net->nodes[z];
	return net->tuning.test.bn_add_bn && z != i && zn->op == OP_BATCHNORM2D && zn->consumers == 1 &&
	       node_has_grad(net, z) && !net->bk->fuse[z] &&
	       bn_add_bn_relu_own_cuda(net->bk->ctx, &net->nodes[i].a.bn);
}

/* Whether the max pool reading ReLU c, fused with batch norm i (FUSE_BN_RELU), applies
 * both in its forward (FUSE_POOL_BN_RELU): the pool is c's one reader, c's output is read
 * by nothing in backward (the batch norm takes the mask from x: struct scratch_req's
 * out_unread), the batch norm is on the own 16-bit kernels and the pool's kernel takes
 * the shape (maxpool_bn_relu_ok). ResNet's stem. */
static int pool_applies_bn(const struct net *net, int i, int c, const struct scratch_req *reqs)
{
	const struct node *rn = &net->nodes[c];
	int p = rn->last_consumer;
	if (!net->tuning.test.bn_pool || rn->consumers != 1 || p < 0 || !reqs[c].out_unread)
		return 0;
	const struct node *pn = &net->nodes[p];
	return pn->op == OP_MAXPOOL2D && pn->in[0] == c &&
	       maxpool_bn_relu_ok(net->bk->dt, net->bk->nhwc, &pn->a.pool) &&
	       bn16_routed_own_cuda(net->bk->ctx, &net->nodes[i].a.bn, BN_FUSE_RELU);
}

int cuda_plan_fusion(struct net *net, struct scratch_req *reqs)
{
	struct backend_state *b = net->bk;
	/* bn_fuse_plan_cuda declines what has no fused form; synchronized batch norm has its
	 * own kernels */
	spare_clear(net);
	mark_out_mask(net, b->ctx, reqs);
	if (!net->tuning.test.bn_fuse || net->sync_bn)
		return 0;
	int n = net->n_nodes;
	b->fuse = calloc((size_t)n, 1);
	if (!b->fuse)
		return gp_error(GP_ENOMEM, "cannot allocate the fusion roles");
	int fused = 0;
	for (int i = 0; i < n; i++) {
		struct node *nd = &net->nodes[i];
		if (nd->op != OP_BATCHNORM2D || nd->consumers != 1 || !node_has_grad(net, i) || b->fuse[i])
			continue;
		int c = nd->last_consumer, rc;
		size_t reserve = 0;
		if (bn_relu_pair(net, i) == c) {
			int six = net->nodes[c].op == OP_RELU6, fold = six && relu6_foldable(net, i, c);
			enum bn_fuse op = six && !fold ? BN_FUSE_RELU6 : BN_FUSE_RELU;
			if (!fold) /* before the plan: the routing reads it */
				mark_spare(net, b->ctx, i, c, op, reqs);
			if ((rc = bn_fuse_plan_cuda(b->ctx, &nd->a.bn, op, &reserve)) < 0)
				return rc;
			if (rc == 0) {
				nd->a.bn.act_out_spare = reqs[c].out_unread = 0;
				continue;
			}
			b->fuse[i] = op == BN_FUSE_RELU6 ? FUSE_BN_RELU6 : FUSE_BN_RELU;
			b->fuse[c] = fold ? FUSE_RELU6_FOLDED : FUSE_RELU_DONE;
			reqs[i].keep_last = 2 * n - i; /* read again by its backward */
			int p = net->nodes[c].last_consumer;
			if (op == BN_FUSE_RELU && !fold && pool_applies_bn(net, i, c, reqs)) {
				b->fuse[p] = FUSE_POOL_BN_RELU;
				reqs[p].keep_last = p; /* marks it fused; it keeps nothing */
			}
		} else if (net->nodes[c].op == OP_ADD && !b->fuse[c] && net->nodes[c].in[0] != net->nodes[c].in[1] &&
			   net->nodes[c].consumers == 1 && relu_over(net, net->nodes[c].last_consumer, c) &&
			   net->nodes[net->nodes[c].last_consumer].op == OP_RELU) {
			if ((rc = bn_fuse_plan_cuda(b->ctx, &nd->a.bn, BN_FUSE_ADD_RELU, &reserve)) < 0)
				return rc;
			if (rc == 0)
				continue;
			b->fuse[i] = FUSE_BN_DEFERRED;
			b->fuse[c] = FUSE_ADD_BN_RELU;
			b->fuse[net->nodes[c].last_consumer] = FUSE_RELU_AFTER_ADD;
			reqs[i].keep_last = c; /* the add runs it; the backward is plain */
			int z = net->nodes[c].in[net->nodes[c].in[0] == i ? 1 : 0];
			if (shortcut_bn_joined(net, i, z)) {
				b->fuse[z] = FUSE_BN_STATS;
				reqs[z].keep_last = c;
				fused++;
			}
		} else {
			continue;
		}
		reqs[i].keep_bytes = reserve;
		fused++;
	}
	if (!fused) {
		free(b->fuse);
		b->fuse = NULL;
	}
	return 0;
}
