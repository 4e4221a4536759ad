/* The CUDA backend's training step around the ops (backend_cuda_ops.c): the loss, the
 * optimizer step, the whole step captured as a CUDA graph and replayed, and loss
 * scaling. Nothing synchronizes except reading the loss back and the loss-scaling
 * check. */
#include <stdio.h>

#include "core/error.h"
#include "backend/backend.h"
#include "backend/cuda/backend_cuda_internal.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

int cuda_read_loss(struct net *net, double *loss, int *correct)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	if (loss)
		GP_TRY(cuda_copy_d2h(b->ctx, loss, b->d_loss, sizeof(double)));
	if (correct)
		GP_TRY(cuda_copy_d2h(b->ctx, correct, b->d_correct, sizeof(int)));
	return 0;
}

/* In float from logits of the activation type (autocast semantics). */
int cuda_loss(struct net *net, double *loss, int *correct)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	int last = net->n_nodes - 1;
	struct shape s = net->nodes[last].out;
	if (net->label_smoothing > 0)
		GP_TRY(softmax_xent_ls_cuda(b->ctx->stream, b->dt, s.n, s.c * s.h * s.w, act_ptr(net, last),
					    b->labels, net->label_smoothing, grad_ptr(net, last), b->row_scratch,
					    b->d_loss, b->d_correct));
	else
		GP_TRY(softmax_xent_cuda(b->ctx->stream, b->dt, s.n, s.c * s.h * s.w, act_ptr(net, last), b->labels,
					 grad_ptr(net, last), b->row_scratch, b->d_loss, b->d_correct));
	return cuda_read_loss(net, loss, correct);
}

/* The optimizer step, enqueued (also into a capture): plain SGD with its values in the
 * launch, else backend_cuda_optim.c's step reading the uploaded ones. */
static int cuda_sgd_enqueue(struct net *net, const struct sgd_args *sgd)
{
	struct backend_state *b = net->bk;
	GP_TRY(side_join(net));
	GP_TRY(cuda_dp_finish(net));
	int rc = cuda_optim_enqueue(net, sgd);
	if (rc < 0)
		return rc;
	if (rc == 1)
		GP_TRY(sgd_step_cuda(b->ctx->stream, sgd, net->params_count, b->params, b->grads,
				     sgd->momentum != 0 ? b->momentum : NULL));
	return counter_inc_cuda(b->ctx->stream, b->d_step);
}

int cuda_sgd(struct net *net, const struct sgd_args *sgd)
{
	GP_TRY(bind_device(net));
	GP_TRY(cuda_optim_upload(net, sgd));
	return cuda_sgd_enqueue(net, sgd);
}

/* Forward, loss, backward and the optimizer step, all enqueued, nothing read back. */
static int enqueue_step(struct net *net, const struct sgd_args *sgd)
{
	for (int i = 1; i < net->n_nodes; i++)
		GP_TRY(cuda_forward_node(net, i, 1));
	GP_TRY(cuda_loss(net, NULL, NULL));
	for (int i = net->n_nodes - 1; i >= 1; i--)
		if (net->nodes[i].t_dy >= 0)
			GP_TRY(cuda_backward_node(net, i));
	return cuda_sgd_enqueue(net, sgd);
}

/* Capture the whole step once and replay it: one launch instead of hundreds, so the
 * GPU no longer waits for the host at small batches. Returns 1 when the step must
 * run eagerly instead (first step, or capture not possible). */
int cuda_train_step(struct net *net, const struct sgd_args *sgd)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	cudaStream_t s = b->ctx->stream;
	/* the first step of a set-up runs eagerly also when a resumed run's optimizer is
	 * past its first step: what a step makes on first use is there before a capture */
	if (b->graph_failed || sgd->first_step || !b->eager_steps) {
		b->eager_steps++;
		return 1;
	}
	GP_TRY(cuda_optim_upload(net, sgd)); /* outside the capture: the graph reads them */
	if (b->step_exec && !cuda_optim_same_graph(net, &b->step_sgd, sgd)) {
		cudaGraphExecDestroy(b->step_exec);
		b->step_exec = NULL;
	}
	if (!b->step_exec) {
		cudaGraph_t graph = NULL;
		int rc = CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
		if (rc == 0) {
			int rc_step = enqueue_step(net, sgd);
			rc = CUDA_CHECK(cudaStreamEndCapture(s, &graph));
			if (rc_step < 0)
				rc = rc_step;
		}
		if (rc == 0)
			rc = CUDA_CHECK(cudaGraphInstantiate(&b->step_exec, graph, 0));
		if (graph)
			cudaGraphDestroy(graph);
		if (rc < 0) {
			fprintf(stderr, "note: CUDA graph capture failed, running eagerly: %s\n", gp_errmsg());
			cudaGetLastError();
			b->step_exec = NULL;
			b->graph_failed = 1;
			return 1;
		}
		b->step_sgd = *sgd;
	}
	return CUDA_CHECK(cudaGraphLaunch(b->step_exec, s));
}

int cuda_scale_output_grad(struct net *net, int node, double factor)
{
	GP_TRY(bind_device(net));
	return scale_cuda(net->bk->ctx->stream, net->bk->dt, grad_ptr(net, node), shape_numel(net->nodes[node].out),
			  factor, NULL);
}

/* The one host wait of loss scaling: whether to step depends on the check. */
int cuda_unscale_grads(struct net *net, double factor, int *nonfinite)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	GP_TRY(side_join(net)); /* the weight gradients must all be there */
	GP_TRY(cuda_dp_finish(net));
	CUDA_TRY(cudaMemsetAsync(b->d_nonfinite, 0, sizeof(int), b->ctx->stream));
	GP_TRY(scale_cuda(b->ctx->stream, GP_F32, b->grads, net->params_count, factor, b->d_nonfinite));
	return cuda_copy_d2h(b->ctx, nonfinite, b->d_nonfinite, sizeof(int));
}
