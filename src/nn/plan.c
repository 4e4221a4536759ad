/* The memory plan: every activation, gradient and saved tensor of a training step
 * gets a lifetime (in steps: forward of node i is i, the loss n, backward of node i
 * 2n - i) and an offset in one arena; tensors whose lifetimes do not meet share
 * bytes. Planned before anything is allocated, so it also predicts peak memory. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/net.h"

#define PLAN_ALIGN_BYTES 256

static int tensor_new(struct net *net, size_t bytes, int first, int last)
{
	struct plan_tensor *t = &net->tensors[net->n_tensors];
	t->bytes = (bytes + PLAN_ALIGN_BYTES - 1) / PLAN_ALIGN_BYTES * PLAN_ALIGN_BYTES;
	t->first_step = first;
	t->last_step = last;
	t->offset = 0;
	t->alias_of = -1;
	return net->n_tensors++;
}

static void tensor_extend(struct net *net, int t, int first, int last)
{
	struct plan_tensor *r = &net->tensors[plan_tensor_root(net, t)];
	if (first < r->first_step)
		r->first_step = first;
	if (last > r->last_step)
		r->last_step = last;
}

/* A relu may overwrite its input when nothing else reads that input and the
 * producer's backward does not need its own output. */
static int relu_in_place(const struct net *net, const struct node *nd)
{
	const struct node *src = &net->nodes[nd->in[0]];
	return (nd->op == OP_RELU || nd->op == OP_RELU6) && src->consumers == 1 &&
	       src->op != OP_INPUT && !op_bwd_needs_output(src->op) && src->t_y >= 0;
}

/* Recompute this ReLU's output in backward: it works in place over a batch norm
 * whose input (a convolution's output) and statistics are kept anyway, so the
 * output is two cheap element-wise passes away, and its memory is free between
 * the forward and the backward. */
static int relu_recomputed(const struct net *net, const struct node *nd, int training)
{
	if (!net->recompute || !training || !relu_in_place(net, nd))
		return 0;
	const struct node *bn = &net->nodes[nd->in[0]];
	return bn->op == OP_BATCHNORM2D && nd->last_consumer >= 0 &&
	       net->nodes[nd->last_consumer].needs_dx;
}

/* Recompute a residual block's output in backward as well (net->recompute >= 2): a ReLU
 * in place over add(batch norm, identity), where the identity is another block's
 * output (a ReLU: kept, or recomputed the same way first). Its batch norm's input and
 * statistics are kept anyway, so the output is one element-wise pass away; a stage's
 * first block (identity from the downsample branch's batch norm) stays kept, and anchors
 * the chain. */
static int block_recomputed(const struct net *net, const struct node *nd, int training)
{
	if (net->recompute < 2 || !training || nd->op != OP_RELU || !relu_in_place(net, nd))
		return 0;
	int id = node_add_identity(net, &net->nodes[nd->in[0]]);
	return id >= 0 && net->nodes[id].op == OP_RELU && nd->last_consumer >= 0 &&
	       net->nodes[nd->last_consumer].needs_dx;
}

/* No other tensor shares t's memory: its node's backward only reads its gradient. */
static int tensor_plain(const struct net *net, int t)
{
	if (net->tensors[t].alias_of >= 0)
		return 0;
	for (int k = 0; k < net->n_tensors; k++)
		if (net->tensors[k].alias_of == t)
			return 0;
	return 1;
}

/* Make tensor t (with everything that shares it) share root r's memory. */
static void tensor_join(struct net *net, int t, int r)
{
	int root = plan_tensor_root(net, t);
	if (root == r)
		return;
	tensor_extend(net, r, net->tensors[root].first_step, net->tensors[root].last_step);
	net->tensors[root].alias_of = r;
}

/* An add hands its gradient unchanged to both inputs, so where it writes an input's
 * gradient first (it is that input's last consumer) the input's gradient can be the
 * add's own buffer instead of a copy of it: a residual stream's gradient then stays
 * in one buffer through a stage. Two kinds of input:
 * - read-only: the add is its only consumer and its backward only reads its gradient
 *   (a batch norm ending a branch); any number may share;
 * - the writer: one other input, whose other consumers later add their gradients into
 *   the shared buffer. Then each read-only input must read it first: it comes after
 *   the writer and all the writer's consumers in forward order (backward runs in
 *   reverse), which holds for ResNet and MobileNetV2 blocks. */
static void share_add_grads(struct net *net)
{
	int n = net->n_nodes;
	for (int i = n - 1; i >= 0; i--) {
		const struct node *nd = &net->nodes[i];
		if (nd->op != OP_ADD || nd->t_dy < 0 || nd->in[0] == nd->in[1])
			continue;
		int r = plan_tensor_root(net, nd->t_dy), writer = -1, ro[2], n_ro = 0;
		for (int k = 0; k < 2; k++) {
			const struct node *src = &net->nodes[nd->in[k]];
			if (src->t_dy < 0 || src->last_consumer != i)
				continue;
			if (src->consumers == 1 && tensor_plain(net, src->t_dy))
				ro[n_ro++] = nd->in[k];
			else if (writer < 0 && net->tensors[plan_tensor_root(net, src->t_dy)].first_step >= 2 * n - i)
				writer = nd->in[k];
		}
		int after = writer; /* read-only inputs must come after this node */
		for (int j = 0; writer >= 0 && j < i; j++)
			if (net->nodes[j].n_in && (net->nodes[j].in[0] == writer ||
						   (net->nodes[j].n_in > 1 && net->nodes[j].in[1] == writer)))
				after = j > after ? j : after;
		for (int k = 0; k < n_ro; k++)
			if (writer < 0 || ro[k] > after)
				tensor_join(net, net->nodes[ro[k]].t_dy, r);
		if (writer >= 0)
			tensor_join(net, net->nodes[writer].t_dy, r);
	}
}

/* Keep a convolution's weight gradient on the main stream: its backward workspace
 * serves both directions again. */
static void wgrad_main(struct scratch_req *r)
{
	r->side = 0;
	if (r->side_bytes > r->bwd_bytes)
		r->bwd_bytes = r->side_bytes;
	r->side_bytes = 0;
}

/* Weight gradients on a side stream (struct scratch_req's side): convolution i's input
 * and output gradient stay alive until the main stream waits for the side one, at
 * the backward of the next convolution below that has a backward. On the main stream
 * instead: the lowest convolution (nothing left to overlap with), and one whose
 * gradient an add shares with other inputs (share_add_grads), which later backward
 * steps write in place whatever the lifetimes say. */
static void plan_wgrad_side(struct net *net)
{
	int n = net->n_nodes;
	for (int i = n - 1; net->scratch && i >= 0; i--) {
		struct node *nd = &net->nodes[i];
		struct scratch_req *req = &net->scratch[i];
		if (!req->side)
			continue;
		if (nd->t_dy < 0 || (nd->last_consumer >= 0 && net->nodes[nd->last_consumer].op == OP_ADD)) {
			wgrad_main(req);
			continue;
		}
		int j = i - 1;
		while (j >= 0 && !(net->nodes[j].op == OP_CONV2D && net->nodes[j].t_dy >= 0))
			j--;
		if (j < 0) { /* the last in backward: nothing left to overlap with, and its input
			      * gradient (the stem's, the largest) would live to the end for nothing */
			wgrad_main(req);
			continue;
		}
		req->side_join = j;
		int until = 2 * n - j;
		const struct node *src = &net->nodes[nd->in[0]];
		/* (tensor_extend only widens: the first step passed here changes nothing) */
		if (src->t_re >= 0)
			tensor_extend(net, src->t_re, 2 * n - i, until);
		else if (src->t_y >= 0)
			tensor_extend(net, src->t_y, 2 * n - i, until);
		tensor_extend(net, nd->t_dy, 2 * n - i, until);
	}
}

static int cmp_size_desc(const void *a, const void *b, void *ctx)
{
	const struct plan_tensor *t = ctx;
	int x = *(const int *)a, y = *(const int *)b;
	if (t[x].bytes != t[y].bytes)
		return t[x].bytes < t[y].bytes ? 1 : -1;
	return x - y;
}

/* Greedy placement, largest first: each tensor takes the lowest offset where it
 * overlaps no already-placed tensor whose lifetime intersects its own. */
static size_t place_tensors(struct net *net)
{
	int n = 0, *order = malloc(sizeof(int) * (net->n_tensors + 1));
	int *placed = malloc(sizeof(int) * (net->n_tensors + 1));
	size_t arena = 0;
	if (!order || !placed)
		goto out;
	for (int i = 0; i < net->n_tensors; i++)
		if (net->tensors[i].alias_of < 0)
			order[n++] = i;
	qsort_r(order, n, sizeof(int), cmp_size_desc, net->tensors);
	int n_placed = 0;
	for (int k = 0; k < n; k++) {
		struct plan_tensor *t = &net->tensors[order[k]];
		size_t offset = 0;
		for (int moved = 1; moved;) {
			moved = 0;
			for (int j = 0; j < n_placed; j++) {
				struct plan_tensor *o = &net->tensors[placed[j]];
				if (o->last_step < t->first_step || t->last_step < o->first_step)
					continue;
				if (offset < o->offset + o->bytes && o->offset < offset + t->bytes) {
					offset = o->offset + o->bytes;
					moved = 1;
				}
			}
		}
		t->offset = offset;
		placed[n_placed++] = order[k];
		if (offset + t->bytes > arena)
			arena = offset + t->bytes;
	}
	for (int i = 0; i < net->n_tensors; i++)
		if (net->tensors[i].alias_of >= 0)
			net->tensors[i].offset = net->tensors[plan_tensor_root(net, i)].offset;
out:
	free(order);
	free(placed);
	return arena;
}

static int plan_overflow(const struct net *net)
{
	return gp_error(GP_EINVAL, "the memory plan at batch %d, %dx%d exceeds 64-bit byte counts",
			net->batch, net->in_h, net->in_w);
}

struct scratch_req *net_scratch_reqs(struct net *net)
{
	if (!net->scratch)
		net->scratch = calloc((size_t)net->n_nodes + 1, sizeof(*net->scratch));
	return net->scratch;
}

int net_plan_memory(struct net *net, int training, size_t elem_bytes, size_t workspace_bytes)
{
	int n = net->n_nodes, loss_step = n;
	free(net->tensors);
	net->n_tensors = 0;
	net->tensors = calloc((size_t)8 * n + 1, sizeof(struct plan_tensor));
	if (!net->tensors)
		return gp_error(GP_ENOMEM, "cannot allocate the memory plan");
	/* Outputs, in execution order so that aliases find their source placed. */
	for (int i = 0; i < n; i++) {
		struct node *nd = &net->nodes[i];
		nd->t_y = nd->t_dy = nd->t_saved = nd->t_re = -1;
		if (net->scratch) {
			struct scratch_req *r = &net->scratch[i];
			r->t_fwd = r->t_bwd = r->t_side = r->t_keep = r->side_join = -1;
			if (!training || nd->op != OP_CONV2D)
				wgrad_main(r);
		}
		if (nd->op == OP_INPUT)
			continue; /* the input batch is a buffer of its own (category other) */
		size_t bytes = shape_numel(nd->out) * elem_bytes;
		if (nd->op == OP_FLATTEN || relu_in_place(net, nd) ||
		    (nd->op == OP_DROPOUT && !training)) {
			nd->t_y = tensor_new(net, bytes, i, i);
			net->tensors[nd->t_y].alias_of = net->nodes[nd->in[0]].t_y;
			if (net->nodes[nd->in[0]].t_y < 0) /* flatten of the input image */
				net->tensors[nd->t_y].alias_of = -1;
		} else {
			nd->t_y = tensor_new(net, bytes, i, i);
		}
	}
	/* Lifetimes of outputs: until the last forward or backward that reads them. */
	for (int i = 0; i < n; i++) {
		struct node *nd = &net->nodes[i];
		if (nd->t_y < 0)
			continue;
		int last = i;
		if (i == n - 1)
			last = loss_step;
		/* an output that backward does not read needs no recomputed copy either */
		int unread = net->scratch && net->scratch[i].out_unread;
		int re = !unread && (relu_recomputed(net, nd, training) || block_recomputed(net, nd, training));
		if (training && op_bwd_needs_output(nd->op) && !re && !unread)
			last = 2 * n - i;
		if (training && net->scratch && net->scratch[i].out_last > last)
			last = net->scratch[i].out_last;
		tensor_extend(net, nd->t_y, i, last);
		if (re) /* backward reads the recomputed copy, from the last consumer's backward on */
			nd->t_re = tensor_new(net, shape_numel(nd->out) * elem_bytes,
					      2 * n - nd->last_consumer, 2 * n - i);
		for (int k = 0; k < nd->n_in; k++) {
			struct node *src = &net->nodes[nd->in[k]];
			if (src->t_y < 0)
				continue;
			int until = i;
			if (training && op_bwd_needs_input(nd->op) && src->t_re < 0)
				until = 2 * n - i;
			tensor_extend(net, src->t_y, i, until);
		}
	}
	/* A recomputed block output needs its identity (recomputed too, or kept) when it
	 * is made: a chain of them is made, in forward order, at the first step any of
	 * them is needed (backends: before the backward of step first_step). */
	for (int i = n - 1; i >= 0; i--) {
		int id = node_recompute_identity(net, i);
		if (id < 0 || net->nodes[id].t_re < 0)
			continue;
		struct plan_tensor *mine = &net->tensors[net->nodes[i].t_re], *theirs = &net->tensors[net->nodes[id].t_re];
		if (mine->first_step < theirs->first_step)
			theirs->first_step = mine->first_step;
	}
	if (training) {
		/* Gradients of outputs: from the backward of the last consumer (or the
		 * loss) to the node's own backward. In-place relus and flatten share. */
		for (int i = n - 1; i >= 0; i--) {
			struct node *nd = &net->nodes[i];
			if (!node_has_grad(net, i))
				continue;
			int first = i == n - 1 ? loss_step : 2 * n - nd->last_consumer;
			nd->t_dy = tensor_new(net, shape_numel(nd->out) * elem_bytes, first, 2 * n - i);
		}
		for (int i = n - 1; i >= 0; i--) {
			struct node *nd = &net->nodes[i];
			struct node *src = nd->n_in ? &net->nodes[nd->in[0]] : NULL;
			if (nd->t_dy < 0 || !src || src->t_dy < 0)
				continue;
			if ((nd->op == OP_FLATTEN && src->consumers == 1) || relu_in_place(net, nd)) {
				/* dx is written over dy in place: one buffer for both */
				struct plan_tensor *mine = &net->tensors[nd->t_dy];
				tensor_extend(net, src->t_dy, mine->first_step, mine->last_step);
				mine->alias_of = src->t_dy;
			}
		}
		share_add_grads(net);
		plan_wgrad_side(net);
		for (int i = 0; i < n; i++) {
			struct node *nd = &net->nodes[i];
			size_t saved = node_saved_bytes(nd, elem_bytes);
			if (saved)
				nd->t_saved = tensor_new(net, saved, i, 2 * n - i);
		}
	} else {
		for (int i = 0; i < n; i++) {
			struct node *nd = &net->nodes[i];
			if (nd->op == OP_MAXPOOL2D)
				nd->t_saved = tensor_new(net, node_saved_bytes(nd, elem_bytes), i, i);
			if (nd->op == OP_BATCHNORM2D)
				nd->t_saved = tensor_new(net, node_saved_bytes(nd, elem_bytes), i, i);
		}
	}
	for (int i = 0; net->scratch && i < n; i++) {
		struct scratch_req *r = &net->scratch[i];
		if (r->fwd_bytes)
			r->t_fwd = tensor_new(net, r->fwd_bytes, i, i);
		if (training && r->bwd_bytes)
			r->t_bwd = tensor_new(net, r->bwd_bytes, 2 * n - i, 2 * n - i);
		if (r->side && r->side_bytes)
			r->t_side = tensor_new(net, r->side_bytes, 2 * n - i, 2 * n - r->side_join);
		if (training && r->keep_bytes)
			r->t_keep = tensor_new(net, r->keep_bytes, i, r->keep_last > i ? r->keep_last : i);
	}
	struct mem_plan *p = &net->plan;
	memset(p, 0, sizeof(*p));
	/* The arena is at most the sum without reuse: once that sum is known to fit in
	 * 64 bits, so does every offset placement computes. */
	for (int i = 0; i < net->n_tensors; i++)
		if (net->tensors[i].alias_of < 0 &&
		    __builtin_add_overflow(p->no_reuse_bytes, net->tensors[i].bytes, &p->no_reuse_bytes))
			return plan_overflow(net);
	p->arena_bytes = place_tensors(net);
	/* 16-bit activations (mixed precision): float master weights, gradients and
	 * momentum, plus 16-bit copies of the weights and of their gradients, and the
	 * input batch in both types. */
	size_t master = elem_bytes < sizeof(float) ? sizeof(float) : elem_bytes;
	size_t half = elem_bytes < sizeof(float) ? elem_bytes : 0;
	size_t image = (size_t)net->batch * net->in_c * net->in_h * net->in_w;
	size_t image_bytes, total;
	if (__builtin_mul_overflow(image, master + half, &image_bytes))
		return plan_overflow(net);
	p->weights_bytes = (net->params_count + net->running_count) * master + net->params_count * half;
	p->grads_bytes = training ? net->params_count * (master + half + (net->optim.grad_accum > 1 ? master : 0)) : 0;
	p->optim_bytes = training ? net->params_count * master * (net->optim.kind == OPTIM_ADAMW ? 2 : 1) : 0;
	p->workspace_bytes = workspace_bytes;
	p->other_bytes = image_bytes + (size_t)net->batch * sizeof(int32_t) + 64;
	if (__builtin_add_overflow(p->arena_bytes, p->weights_bytes, &total) ||
	    __builtin_add_overflow(total, p->grads_bytes, &total) ||
	    __builtin_add_overflow(total, p->optim_bytes, &total) ||
	    __builtin_add_overflow(total, p->workspace_bytes, &total) ||
	    __builtin_add_overflow(total, p->other_bytes, &total))
		return plan_overflow(net);
	p->total_bytes = total;
	net->training = training;
	return 0;
}

