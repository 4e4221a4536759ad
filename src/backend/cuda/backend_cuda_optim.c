/* The CUDA backend's optimizer beyond plain SGD (ops/cuda/optim.cu): AdamW's second
 * moments and the gradient accumulation buffer (allocated at set-up only when
 * net->optim asks), clipping's sum of squares, and the step's changing
 * hyperparameters in device memory, written before each step or replay so that a
 * captured step stays valid as a schedule moves the rate. Plain SGD (no schedule,
 * clipping or accumulation) keeps sgd_step_cuda with its values in the launch. */
#include "core/error.h"
#include "backend/backend.h"
#include "backend/cuda/backend_cuda_internal.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

#define OPTIM_DEV_BYTES ((OPTIM_HYPER_DOUBLES + 1 + OPTIM_SUMSQ_BLOCKS) * sizeof(double))

/* Does this step take sgd_step_cuda, with everything in its launch? */
static int optim_plain(const struct net *net, const struct sgd_args *a)
{
	return a->kind == OPTIM_SGD && (a->grad_scale <= 0 || a->grad_scale == 1) && a->clip_norm <= 0 &&
	       !net->optim.dynamic;
}

int cuda_optim_setup(struct net *net)
{
	struct backend_state *b = net->bk;
	size_t bytes = net->params_count * sizeof(float);
	if (net->optim.kind == OPTIM_ADAMW)
		GP_TRY(cuda_alloc(b->ctx, (void **)&b->exp_avg_sq, bytes, MEM_OPTIM));
	if (net->optim.grad_accum > 1)
		GP_TRY(cuda_alloc(b->ctx, (void **)&b->grad_acc, bytes, MEM_GRADS));
	if (net->optim.kind != OPTIM_SGD || net->optim.grad_accum > 1 || net->optim.dynamic)
		GP_TRY(cuda_alloc(b->ctx, (void **)&b->optim_dev, OPTIM_DEV_BYTES, MEM_OPTIM));
	return 0;
}

void cuda_optim_teardown(struct net *net)
{
	struct backend_state *b = net->bk;
	size_t bytes = net->params_count * sizeof(float);
	cuda_free(b->ctx, b->exp_avg_sq, bytes, MEM_OPTIM);
	cuda_free(b->ctx, b->grad_acc, bytes, MEM_GRADS);
	cuda_free(b->ctx, b->optim_dev, OPTIM_DEV_BYTES, MEM_OPTIM);
	b->exp_avg_sq = b->grad_acc = NULL;
	b->optim_dev = NULL;
}

int cuda_optim_upload(struct net *net, const struct sgd_args *a)
{
	struct backend_state *b = net->bk;
	if (optim_plain(net, a))
		return 0;
	if (a->kind == OPTIM_ADAMW && !b->exp_avg_sq)
		return gp_error(GP_EINVAL, "an AdamW step on a net set up for SGD (net->optim)");
	/* clipping alone was not foreseen at set-up: its few kilobytes now, outside any capture */
	if (!b->optim_dev)
		GP_TRY(cuda_alloc(b->ctx, (void **)&b->optim_dev, OPTIM_DEV_BYTES, MEM_OPTIM));
	return optim_hyper_set_cuda(b->ctx->stream, b->optim_dev, a);
}

int cuda_optim_enqueue(struct net *net, const struct sgd_args *a)
{
	struct backend_state *b = net->bk;
	if (optim_plain(net, a))
		return 1;
	if (!b->optim_dev)
		return gp_error(GP_EINVAL, "the optimizer step was enqueued before its hyperparameters");
	cudaStream_t s = b->ctx->stream;
	double *hyper = b->optim_dev, *sumsq = hyper + OPTIM_HYPER_DOUBLES, *partials = sumsq + 1;
	if (a->clip_norm > 0)
		GP_TRY(sumsq_cuda(s, net->params_count, b->grads, partials, sumsq));
	return optim_step_cuda(s, a, hyper, a->clip_norm > 0 ? sumsq : NULL, net->params_count, b->params,
			       b->grads, b->momentum, b->exp_avg_sq);
}

/* Field by field (the struct has padding). The step number matters to none (plain
 * SGD has no use for it), and the rate, momentum and beta1 not to a step that reads
 * them from device memory. */
int cuda_optim_same_graph(const struct net *net, const struct sgd_args *x, const struct sgd_args *y)
{
	int dev = !optim_plain(net, x);
	return x->kind == y->kind && x->dampening == y->dampening && x->weight_decay == y->weight_decay &&
	       x->nesterov == y->nesterov && x->first_step == y->first_step && x->beta2 == y->beta2 &&
	       x->eps == y->eps && x->grad_scale == y->grad_scale && x->clip_norm == y->clip_norm &&
	       optim_plain(net, x) == optim_plain(net, y) &&
	       (dev || (x->lr == y->lr && x->momentum == y->momentum && x->beta1 == y->beta1));
}

int cuda_grad_accum(struct net *net, enum grad_accum_mode mode)
{
	GP_TRY(bind_device(net));
	GP_TRY(side_join(net)); /* the weight gradients must all be there */
	GP_TRY(cuda_dp_finish(net)); /* each micro-batch's are the ranks' mean, as under DDP */
	struct backend_state *b = net->bk;
	if (!b->grad_acc)
		return gp_error(GP_EINVAL, "gradient accumulation on a net set up without it (net->optim)");
	return grad_accum_cuda(b->ctx->stream, mode, net->params_count, b->grads, b->grad_acc);
}

int cuda_optim_state_to_host(struct net *net, float *momentum, float *exp_avg_sq)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	size_t bytes = net->params_count * sizeof(float);
	GP_TRY(cuda_copy_d2h(b->ctx, momentum, b->momentum, bytes));
	if (exp_avg_sq && b->exp_avg_sq)
		GP_TRY(cuda_copy_d2h(b->ctx, exp_avg_sq, b->exp_avg_sq, bytes));
	return 0;
}

/* The device's step counter (the dropout masks read it) follows net->sgd_steps. */
int cuda_optim_state_from_host(struct net *net, const float *momentum, const float *exp_avg_sq)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	size_t bytes = net->params_count * sizeof(float);
	unsigned long long step = (unsigned long long)net->sgd_steps;
	GP_TRY(cuda_copy_h2d(b->ctx, b->momentum, momentum, bytes));
	if (exp_avg_sq && b->exp_avg_sq)
		GP_TRY(cuda_copy_h2d(b->ctx, b->exp_avg_sq, exp_avg_sq, bytes));
	GP_TRY(cuda_copy_h2d(b->ctx, b->d_step, &step, sizeof(step)));
	return cuda_ctx_sync(b->ctx);
}
