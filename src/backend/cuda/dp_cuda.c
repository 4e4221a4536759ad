/* Data parallelism on the CUDA backend (net->dist): gradient buckets all-reduced
 * through NCCL on a communication stream while backward goes on, rank 0's running
 * statistics sent before each training forward, and synchronized batch norm. The
 * NCCL calls are ordinary stream work, so a captured training step holds them too. */
#include <stdlib.h>

#include "backend/cuda/backend_cuda_internal.h"
#include "core/error.h"
#include "dist/cuda/nccl.h"
#include "dist/dist.h"
#include "ops/cuda/cuda_common.h"

struct cuda_dp {
	struct dist_nccl *nccl;
	cudaStream_t comm;          /* the buckets' all-reduces */
	cudaEvent_t ev_grads, ev_done;
	int in_backward, next_bucket, comm_pending;
	double *sums;               /* synchronized batch norm: 2 x channels */
	size_t sums_bytes;
};

/* The context's watcher while this net trains with others: NCCL's own errors, a
 * failure another rank reported, and the group's timeout end a host wait. */
static int dp_watch(void *user, double waited_s)
{
	struct net *net = user;
	struct cuda_dp *dp = net->bk->dp;
	GP_TRY(dist_nccl_check(dp->nccl));
	if (waited_s > dist_timeout_s(net->dist))
		return gp_error(GP_EDEVICE, "the GPU's work was not done within %g s: a rank may be "
				"stuck in an all-reduce", dist_timeout_s(net->dist));
	return 0;
}

int cuda_dp_setup(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!net->dist)
		return 0;
	struct cuda_dp *dp = calloc(1, sizeof(*dp));
	if (!dp)
		return gp_error(GP_ENOMEM, "cannot allocate the data-parallel state");
	b->dp = dp;
	CUDA_TRY(cudaStreamCreateWithFlags(&dp->comm, cudaStreamNonBlocking));
	CUDA_TRY(cudaEventCreateWithFlags(&dp->ev_grads, cudaEventDisableTiming));
	CUDA_TRY(cudaEventCreateWithFlags(&dp->ev_done, cudaEventDisableTiming));
	GP_TRY(dist_nccl_open(net->dist, b->ctx->device, &dp->nccl));
	b->ctx->watch = dp_watch;
	b->ctx->watch_user = net;
	if (net->sync_bn) {
		int max_c = 1;
		for (int i = 0; i < net->n_nodes; i++)
			if (net->nodes[i].op == OP_BATCHNORM2D && net->nodes[i].a.bn.c > max_c)
				max_c = net->nodes[i].a.bn.c;
		dp->sums_bytes = 2 * (size_t)max_c * sizeof(double);
		GP_TRY(cuda_alloc(b->ctx, (void **)&dp->sums, dp->sums_bytes, MEM_OTHER));
	}
	return 0;
}

void cuda_dp_teardown(struct net *net)
{
	struct backend_state *b = net->bk;
	struct cuda_dp *dp = b->dp;
	if (!dp)
		return;
	b->ctx->watch = NULL;
	b->ctx->watch_user = NULL;
	/* finalized (queued work flushed) or, after a failure, aborted: then no kernel
	 * waits for another rank and the streams can be synchronized */
	dist_nccl_close(dp->nccl);
	if (dp->comm) {
		cudaStreamSynchronize(dp->comm);
		cudaStreamDestroy(dp->comm);
	}
	if (dp->ev_grads)
		cudaEventDestroy(dp->ev_grads);
	if (dp->ev_done)
		cudaEventDestroy(dp->ev_done);
	cuda_free(b->ctx, dp->sums, dp->sums_bytes, MEM_OTHER);
	free(dp);
	b->dp = NULL;
}

/* Start the all-reduce (mean over ranks, in place) of every bucket complete once
 * node i's backward is enqueued (i = 0: all that are left), on the communication
 * stream after what the main stream has enqueued so far. */
int cuda_dp_after_backward(struct net *net, int i)
{
	struct backend_state *b = net->bk;
	struct cuda_dp *dp = b->dp;
	const struct grad_buckets *gb = &net->buckets;
	if (!dp)
		return 0;
	dp->in_backward = 1;
	if (dp->next_bucket >= gb->n || gb->last_node[dp->next_bucket] < i)
		return 0;
	CUDA_TRY(cudaEventRecord(dp->ev_grads, b->ctx->stream));
	CUDA_TRY(cudaStreamWaitEvent(dp->comm, dp->ev_grads, 0));
	if (b->side_pending) /* weight gradients made on the side stream so far */
		CUDA_TRY(cudaStreamWaitEvent(dp->comm, b->ctx->ev_join, 0));
	while (dp->next_bucket < gb->n && gb->last_node[dp->next_bucket] >= i) {
		int k = dp->next_bucket++;
		GP_TRY(dist_nccl_allreduce(dp->nccl, b->grads + gb->first[k], gb->count[k], GP_F32, 1,
					   dp->comm));
	}
	dp->comm_pending = 1;
	return 0;
}

/* The main stream waits for every bucket: before the optimizer, the loss-scaling
 * check or a copy of the gradients reads them. Once per backward. */
int cuda_dp_finish(struct net *net)
{
	struct backend_state *b = net->bk;
	struct cuda_dp *dp = b->dp;
	if (!dp || !dp->in_backward)
		return 0;
	GP_TRY(cuda_dp_after_backward(net, 0));
	if (dp->comm_pending) {
		CUDA_TRY(cudaEventRecord(dp->ev_done, dp->comm));
		CUDA_TRY(cudaStreamWaitEvent(b->ctx->stream, dp->ev_done, 0));
	}
	dp->comm_pending = 0;
	dp->in_backward = 0;
	dp->next_bucket = 0;
	return dist_nccl_check(dp->nccl);
}

/* DDP's broadcast_buffers: rank 0's running statistics, before a training forward. */
int cuda_dp_bcast_running(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b->dp || net->sync_bn || !net->running_count)
		return 0;
	return dist_nccl_bcast(b->dp->nccl, b->running, net->running_count, GP_F32, 0, b->ctx->stream);
}

static enum gp_dtype act_dtype(const struct net *net)
{
	return net->bk->dt;
}

static double global_count(const struct net *net, const struct bn_args *a)
{
	return (double)a->n * a->h * a->w * dist_world(net->dist);
}

/* Synchronized batch norm, forward in training: this rank's sums of x and x^2,
 * summed over the ranks, give the whole batch's statistics. */
int cuda_bn_sync_fwd(struct net *net, int i, const void *x, void *y)
{
	struct backend_state *b = net->bk;
	struct node *nd = &net->nodes[i];
	const struct bn_args *a = &nd->a.bn;
	cudaStream_t s = b->ctx->stream;
	float *stats = saved_ptr(net, i), *run = b->running + nd->running_offset;
	GP_TRY(bn_sync_sums_cuda(s, act_dtype(net), b->nhwc, a, x, b->dp->sums));
	GP_TRY(dist_nccl_allreduce(b->dp->nccl, b->dp->sums, 2 * (size_t)a->c, GP_F64, 0, s));
	GP_TRY(bn_sync_finalize_cuda(s, a, b->dp->sums, global_count(net, a), stats, stats + a->c, run,
				     run + a->c));
	return bn_sync_apply_cuda(s, act_dtype(net), b->nhwc, a, x, param_ptr(net, nd, 0),
				  param_ptr(net, nd, 1), stats, stats + a->c, y);
}

/* Its backward: weight and bias gradients from this rank's sums (the gradient
 * all-reduce averages them, as SyncBatchNorm leaves them to DDP), the input gradient
 * from the sums over every rank. */
int cuda_bn_sync_bwd(struct net *net, int i, const void *x, const void *dy, void *dx, int acc)
{
	struct backend_state *b = net->bk;
	struct node *nd = &net->nodes[i];
	const struct bn_args *a = &nd->a.bn;
	cudaStream_t s = b->ctx->stream;
	float *stats = saved_ptr(net, i);
	GP_TRY(bn_sync_bwd_sums_cuda(s, act_dtype(net), b->nhwc, a, x, dy, stats, stats + a->c,
				     b->dp->sums, pgrad_ptr(net, nd, 0), pgrad_ptr(net, nd, 1)));
	GP_TRY(dist_nccl_allreduce(b->dp->nccl, b->dp->sums, 2 * (size_t)a->c, GP_F64, 0, s));
	return bn_sync_bwd_dx_cuda(s, act_dtype(net), b->nhwc, a, x, dy, param_ptr(net, nd, 0), stats,
				   stats + a->c, b->dp->sums, global_count(net, a), dx, acc);
}

int cuda_dp_grad_allreduce(struct net *net)
{
	struct backend_state *b = net->bk;
	struct cuda_dp *dp = b->dp;
	if (!dp)
		return 0;
	dp->in_backward = 1;
	dp->next_bucket = 0;
	GP_TRY(cuda_dp_finish(net));
	return CUDA_CHECK(cudaStreamSynchronize(b->ctx->stream));
}
