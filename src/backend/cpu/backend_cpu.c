/* The CPU backend: plain host memory laid out by the net's memory plan, float or
 * double. It is the reference every other backend is checked against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "backend/backend.h"
#include "dist/dist.h"
#include "ops/cpu/blas.h"

struct backend_state {
	char *arena;
	void *params, *grads, *momentum, *running;
	void *exp_avg_sq; /* AdamW's second moments (momentum holds the first) */
	void *grad_acc;   /* gradients summed over micro-batches */
	void *input;
	int32_t *labels;
	void *workspace;
	size_t elem_bytes;
	/* data parallelism (net->dist): the buckets' all-reduces in flight during a
	 * backward, and per-channel sums of synchronized batch norm (2 x channels) */
	int in_backward, next_bucket;
	struct dist_req *req[GP_MAX_BUCKETS];
	double *bn_sums;
};

static void *act_ptr(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	if (nd->op == OP_INPUT)
		return net->bk->input;
	if (nd->t_y < 0)
		return NULL;
	return net->bk->arena + net->tensors[nd->t_y].offset;
}

/* What backward reads as a node's output: the recomputed copy where there is one. */
static void *act_ptr_bwd(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	return nd->t_re >= 0 ? net->bk->arena + net->tensors[nd->t_re].offset : act_ptr(net, node);
}

static void *grad_ptr(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	return nd->t_dy < 0 ? NULL : net->bk->arena + net->tensors[nd->t_dy].offset;
}

static void *saved_ptr(struct net *net, int node)
{
	const struct node *nd = &net->nodes[node];
	return nd->t_saved < 0 ? NULL : net->bk->arena + net->tensors[nd->t_saved].offset;
}

static void *param_ptr(struct net *net, const struct node *nd, int k)
{
	return (char *)net->bk->params + net->state[nd->param_first + k].offset * net->bk->elem_bytes;
}

static void *pgrad_ptr(struct net *net, const struct node *nd, int k)
{
	return (char *)net->bk->grads + net->state[nd->param_first + k].offset * net->bk->elem_bytes;
}

/* The mask depends on the node and the optimizer step, not on how many forwards
 * ran: a gradient check that repeats the forward sees the same mask. */
static uint64_t dropout_seed(const struct net *net, int node)
{
	return net->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)node * 0x100000001B3ULL +
	       (uint64_t)net->sgd_steps + (uint64_t)net->micro_batch * 0xD1B54A32D192ED03ULL;
}

#define REAL float
#define SUFFIX f32
#define FAST 1
#include "backend/cpu/backend_cpu_ops.inc"
#undef REAL
#undef SUFFIX
#undef FAST

#define REAL double
#define SUFFIX f64
#define FAST 0
#include "backend/cpu/backend_cpu_ops.inc"
#undef REAL
#undef SUFFIX
#undef FAST

static int is_f64(const struct net *net)
{
	return net->dtype == GP_F64;
}

/* Start the all-reduce of every bucket whose gradients are complete once node i's
 * backward has run (i = 0: all that are left). */
static int dp_start_buckets(struct net *net, int i)
{
	struct backend_state *b = net->bk;
	const struct grad_buckets *gb = &net->buckets;
	b->in_backward = 1;
	while (b->next_bucket < gb->n && gb->last_node[b->next_bucket] >= i) {
		int k = b->next_bucket++;
		GP_TRY(dist_iallreduce_sum(net->dist, (char *)b->grads + gb->first[k] * b->elem_bytes,
					   gb->count[k], net->dtype, &b->req[k]));
	}
	return 0;
}

/* Before anything reads the gradients: finish every all-reduce and divide the sums
 * by the ranks, so each holds the mean (DDP's average). Once per backward. */
static int dp_finish(struct net *net)
{
	struct backend_state *b = net->bk;
	const struct grad_buckets *gb = &net->buckets;
	if (!net->dist || !b->in_backward)
		return 0;
	int rc = dp_start_buckets(net, 0);
	double inv = 1.0 / dist_world(net->dist);
	for (int k = 0; k < gb->n; k++) {
		if (b->req[k]) {
			int w = dist_wait(net->dist, b->req[k]);
			b->req[k] = NULL;
			if (rc == 0)
				rc = w;
		}
		if (rc == 0 && inv != 1.0) {
			if (is_f64(net))
				cpu_scale_range_f64(b->grads, gb->first[k], gb->count[k], inv);
			else
				cpu_scale_range_f32(b->grads, gb->first[k], gb->count[k], inv);
		}
	}
	b->in_backward = 0;
	b->next_bucket = 0;
	return rc;
}

static size_t cpu_workspace_bytes(struct net *net)
{
	size_t floats = 0;
	if (is_f64(net))
		return 0;
	for (int i = 0; i < net->n_nodes; i++) {
		if (net->nodes[i].op != OP_CONV2D)
			continue;
		size_t f = conv2d_fast_workspace_floats(&net->nodes[i].a.conv);
		if (f > floats)
			floats = f;
	}
	return floats * sizeof(float);
}

static void *cpu_alloc(struct net *net, size_t bytes, enum mem_cat cat)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (p)
		mem_stats_add(&net->mem, cat, bytes);
	return p;
}

static void cpu_teardown(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b)
		return;
	free(b->arena);
	free(b->params);
	free(b->grads);
	free(b->momentum);
	free(b->exp_avg_sq);
	free(b->grad_acc);
	free(b->running);
	free(b->input);
	free(b->labels);
	free(b->workspace);
	free(b->bn_sums);
	free(b);
	net->bk = NULL;
	memset(&net->mem.cur_bytes, 0, sizeof(net->mem.cur_bytes));
	net->mem.total_bytes = 0;
}

static int cpu_sync_from_host(struct net *net)
{
	struct backend_state *b = net->bk;
	if (is_f64(net)) {
		cpu_copy_in_f64(b->params, net->host_params, net->params_count);
		cpu_copy_in_f64(b->running, net->host_running, net->running_count);
	} else {
		cpu_copy_in_f32(b->params, net->host_params, net->params_count);
		cpu_copy_in_f32(b->running, net->host_running, net->running_count);
	}
	return 0;
}

static int cpu_sync_to_host(struct net *net)
{
	struct backend_state *b = net->bk;
	if (is_f64(net)) {
		cpu_copy_out_f64(net->host_params, b->params, net->params_count);
		cpu_copy_out_f64(net->host_running, b->running, net->running_count);
	} else {
		cpu_copy_out_f32(net->host_params, b->params, net->params_count);
		cpu_copy_out_f32(net->host_running, b->running, net->running_count);
	}
	return 0;
}

static int cpu_optim_state_to_host(struct net *net, float *momentum, float *exp_avg_sq)
{
	struct backend_state *b = net->bk;
	for (int k = 0; k < 2; k++) {
		float *dst = k ? exp_avg_sq : momentum;
		void *src = k ? b->exp_avg_sq : b->momentum;
		if (!dst || !src)
			continue;
		if (is_f64(net))
			cpu_copy_out_f64(dst, src, net->params_count);
		else
			cpu_copy_out_f32(dst, src, net->params_count);
	}
	return 0;
}

static int cpu_optim_state_from_host(struct net *net, const float *momentum, const float *exp_avg_sq)
{
	struct backend_state *b = net->bk;
	for (int k = 0; k < 2; k++) {
		const float *src = k ? exp_avg_sq : momentum;
		void *dst = k ? b->exp_avg_sq : b->momentum;
		if (!dst || !src)
			continue;
		if (is_f64(net))
			cpu_copy_in_f64(dst, src, net->params_count);
		else
			cpu_copy_in_f32(dst, src, net->params_count);
	}
	return 0;
}

static int cpu_setup(struct net *net)
{
	GP_TRY(blas_load());
	size_t e = dtype_size(net->dtype);
	size_t in_count = (size_t)net->batch * net->in_c * net->in_h * net->in_w;
	struct backend_state *b = calloc(1, sizeof(*b));
	if (!b)
		return gp_error(GP_ENOMEM, "cannot allocate the CPU backend");
	net->bk = b;
	b->elem_bytes = e;
	b->arena = cpu_alloc(net, net->plan.arena_bytes, MEM_ACTIV);
	b->params = cpu_alloc(net, net->params_count * e, MEM_WEIGHTS);
	b->running = cpu_alloc(net, net->running_count * e, MEM_WEIGHTS);
	b->grads = cpu_alloc(net, net->params_count * e, MEM_GRADS);
	b->momentum = cpu_alloc(net, net->params_count * e, MEM_OPTIM);
	if (net->optim.kind == OPTIM_ADAMW)
		b->exp_avg_sq = cpu_alloc(net, net->params_count * e, MEM_OPTIM);
	if (net->optim.grad_accum > 1)
		b->grad_acc = cpu_alloc(net, net->params_count * e, MEM_GRADS);
	b->input = cpu_alloc(net, in_count * e, MEM_OTHER);
	b->labels = cpu_alloc(net, (size_t)net->batch * sizeof(int32_t), MEM_OTHER);
	b->workspace = cpu_alloc(net, net->plan.workspace_bytes, MEM_WORKSPACE);
	int max_c = 1;
	for (int i = 0; i < net->n_nodes; i++)
		if (net->nodes[i].op == OP_BATCHNORM2D && net->nodes[i].a.bn.c > max_c)
			max_c = net->nodes[i].a.bn.c;
	b->bn_sums = net->sync_bn ? cpu_alloc(net, 2 * (size_t)max_c * sizeof(double), MEM_OTHER)
				  : NULL;
	if (!b->arena || !b->params || !b->running || !b->grads || !b->momentum || !b->input ||
	    !b->labels || !b->workspace || (net->sync_bn && !b->bn_sums) ||
	    (net->optim.kind == OPTIM_ADAMW && !b->exp_avg_sq) || (net->optim.grad_accum > 1 && !b->grad_acc)) {
		size_t want = net->plan.total_bytes;
		cpu_teardown(net);
		return gp_error(GP_ENOMEM, "cannot allocate %.1f MiB of host memory for batch %d",
				want / GP_MIB, net->batch);
	}
	return cpu_sync_from_host(net);
}

static int cpu_set_batch_data(struct net *net, const float *x, const int32_t *labels)
{
	size_t in_count = (size_t)net->batch * net->in_c * net->in_h * net->in_w;
	if (is_f64(net))
		cpu_copy_in_f64(net->bk->input, x, in_count);
	else
		memcpy(net->bk->input, x, in_count * sizeof(float));
	for (int i = 0; i < net->batch; i++)
		if (labels[i] < 0 || labels[i] >= net->classes)
			return gp_error(GP_EINVAL, "label %d of sample %d is not a class of %d",
					labels[i], i, net->classes);
	memcpy(net->bk->labels, labels, (size_t)net->batch * sizeof(int32_t));
	return 0;
}

static int cpu_grad_allreduce(struct net *net)
{
	if (!net->dist)
		return 0;
	net->bk->in_backward = 1;
	net->bk->next_bucket = 0;
	return dp_finish(net);
}

static int cpu_grads_to_host(struct net *net, float *dst)
{
	GP_TRY(dp_finish(net));
	if (is_f64(net))
		cpu_copy_out_f64(dst, net->bk->grads, net->params_count);
	else
		memcpy(dst, net->bk->grads, net->params_count * sizeof(float));
	return 0;
}

static int cpu_logits_to_host(struct net *net, float *dst)
{
	int last = net->n_nodes - 1;
	size_t n = shape_numel(net->nodes[last].out);
	if (is_f64(net))
		cpu_copy_out_f64(dst, act_ptr(net, last), n);
	else
		memcpy(dst, act_ptr(net, last), n * sizeof(float));
	return 0;
}

static int cpu_tensor_to_host(struct net *net, int node, int grad, float *dst)
{
	size_t n = shape_numel(net->nodes[node].out);
	void *src = grad ? grad_ptr(net, node) : act_ptr(net, node);
	if (is_f64(net))
		cpu_copy_out_f64(dst, src, n);
	else
		memcpy(dst, src, n * sizeof(float));
	return 0;
}

static int cpu_forward_node(struct net *net, int i, int training)
{
	/* DDP's broadcast_buffers: every rank normalizes with rank 0's running values */
	if (i == 1 && training && net->dist && !net->sync_bn)
		GP_TRY(dist_bcast(net->dist, net->bk->running, net->running_count * net->bk->elem_bytes, 0));
	return is_f64(net) ? cpu_forward_f64(net, i, training) : cpu_forward_f32(net, i, training);
}

static int cpu_backward_node(struct net *net, int i)
{
	GP_TRY(is_f64(net) ? cpu_backward_f64(net, i) : cpu_backward_f32(net, i));
	return net->dist ? dp_start_buckets(net, i) : 0;
}

static int cpu_loss(struct net *net, double *loss, int *correct)
{
	return is_f64(net) ? cpu_loss_f64(net, loss, correct) : cpu_loss_f32(net, loss, correct);
}

static int cpu_scale_output_grad(struct net *net, int node, double factor)
{
	return is_f64(net) ? cpu_scale_output_grad_f64(net, node, factor)
			   : cpu_scale_output_grad_f32(net, node, factor);
}

static int cpu_unscale_grads(struct net *net, double factor, int *nonfinite)
{
	GP_TRY(dp_finish(net));
	return is_f64(net) ? cpu_unscale_grads_f64(net, factor, nonfinite)
			   : cpu_unscale_grads_f32(net, factor, nonfinite);
}

static int cpu_sgd(struct net *net, const struct sgd_args *sgd)
{
	GP_TRY(dp_finish(net));
	if (sgd->kind == OPTIM_ADAMW && !net->bk->exp_avg_sq)
		return gp_error(GP_EINVAL, "an AdamW step on a net set up for SGD (net->optim)");
	return is_f64(net) ? cpu_sgd_f64(net, sgd) : cpu_sgd_f32(net, sgd);
}

static int cpu_grad_accum(struct net *net, enum grad_accum_mode mode)
{
	if (!net->bk->grad_acc)
		return gp_error(GP_EINVAL, "gradient accumulation on a net set up without it (net->optim)");
	GP_TRY(dp_finish(net)); /* each micro-batch's gradients are the ranks' mean, as under DDP */
	if (is_f64(net))
		grad_accum_cpu_f64(mode, net->params_count, net->bk->grads, net->bk->grad_acc);
	else
		grad_accum_cpu_f32(mode, net->params_count, net->bk->grads, net->bk->grad_acc);
	return 0;
}

const struct backend_ops backend_cpu_ops = {
	.name = "cpu",
	.setup = cpu_setup,
	.teardown = cpu_teardown,
	.set_batch_data = cpu_set_batch_data,
	.forward_node = cpu_forward_node,
	.loss = cpu_loss,
	.backward_node = cpu_backward_node,
	.sgd_step = cpu_sgd,
	.grad_accum = cpu_grad_accum,
	.sync_to_host = cpu_sync_to_host,
	.sync_from_host = cpu_sync_from_host,
	.optim_state_to_host = cpu_optim_state_to_host,
	.optim_state_from_host = cpu_optim_state_from_host,
	.grads_to_host = cpu_grads_to_host,
	.tensor_to_host = cpu_tensor_to_host,
	.logits_to_host = cpu_logits_to_host,
	.scale_output_grad = cpu_scale_output_grad,
	.unscale_grads = cpu_unscale_grads,
	.workspace_bytes = cpu_workspace_bytes,
	.grad_allreduce = cpu_grad_allreduce,
};

void *net_cpu_params(struct net *net)
{
	return net->bk && net->backend == BACKEND_CPU ? net->bk->params : NULL;
}

void *net_cpu_grads(struct net *net)
{
	return net->bk && net->backend == BACKEND_CPU ? net->bk->grads : NULL;
}
