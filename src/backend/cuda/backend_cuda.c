/* The CUDA backend: device memory laid out by the net's memory plan, every op
 * through the CUDA op layer (cuDNN, cuBLAS, own kernels) on one stream. Nothing
 * synchronizes except reading the loss back and copying parameters to the host.
 *
 * Each set-up net has a device context of its own (device, streams, library handles,
 * workspace), configured once at set-up for the net's device, precision, layout and
 * algorithm policy; what a call depends on beyond that travels in its arguments. Nets
 * on different devices (or the same one) may run on threads of their own: every entry
 * makes the net's device current first. A torn-down net's context goes to a pool per
 * device for the next net, so that trying batch after batch (maxbatch) neither
 * re-creates handles nor frees and retakes their memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "backend/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_common.h"
#include "backend/cuda/backend_cuda_internal.h"

#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)
#define ALIGN256(x) (((x) + 255) & ~(size_t)255)

#define CTX_POOL_MAX 16
static struct cuda_ctx *ctx_pool[CTX_POOL_MAX];
static int ctx_pool_n;
static pthread_mutex_t ctx_pool_lock = PTHREAD_MUTEX_INITIALIZER;

/* A context for a net on device: an idle one of that device from the pool, else a new
 * one with its cuBLAS workspace (set once, so cuBLAS allocates nothing in a graph). */
static int ctx_acquire(int device, struct cuda_ctx **out)
{
	pthread_mutex_lock(&ctx_pool_lock);
	for (int i = ctx_pool_n - 1; i >= 0; i--) {
		if (ctx_pool[i]->device != device)
			continue;
		*out = ctx_pool[i];
		ctx_pool[i] = ctx_pool[--ctx_pool_n];
		pthread_mutex_unlock(&ctx_pool_lock);
		return cuda_device_bind(device);
	}
	pthread_mutex_unlock(&ctx_pool_lock);
	struct cuda_ctx *ctx;
	GP_TRY(cuda_ctx_create(&ctx, device, NULL));
	int rc = cuda_alloc(ctx, &ctx->blas_ws, CUBLAS_WORKSPACE_BYTES, MEM_WORKSPACE);
	if (rc == 0) {
		ctx->blas_ws_bytes = CUBLAS_WORKSPACE_BYTES;
		rc = CUBLAS_CHECK(cublasSetWorkspace(ctx->cublas, ctx->blas_ws, CUBLAS_WORKSPACE_BYTES));
	}
	if (rc < 0) {
		cuda_ctx_destroy(ctx);
		return rc;
	}
	*out = ctx;
	return 0;
}

/* Back to the pool (a full pool destroys it). */
static void ctx_release(struct cuda_ctx *ctx)
{
	pthread_mutex_lock(&ctx_pool_lock);
	if (ctx_pool_n < CTX_POOL_MAX) {
		ctx_pool[ctx_pool_n++] = ctx;
		ctx = NULL;
	}
	pthread_mutex_unlock(&ctx_pool_lock);
	cuda_ctx_destroy(ctx);
}

void backend_cuda_set_conv_policy(struct net *net, int fp32_direct_only, int deterministic)
{
	net->conv_policy.fp32_direct_only = fp32_direct_only;
	net->conv_policy.deterministic = deterministic;
}

void backend_cuda_set_conv_heuristics(struct net *net, int on)
{
	net->conv_policy.heuristic = on;
}

/* Make the net's device current on the calling thread: a net may be set up on one
 * thread and run on another, beside nets on other devices. */
static int bind_device(struct net *net)
{
	return cuda_device_bind(net->bk->ctx->device);
}

static size_t cuda_workspace_bytes(struct net *net)
{
	return 0; /* measured per shape at setup; charged to the workspace category then */
}

/* The main stream waits for the weight gradients enqueued on the side stream. */
static int side_join(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b->side_pending)
		return 0;
	b->side_pending = 0;
	CUDA_TRY(cudaStreamWaitEvent(b->ctx->stream, b->ctx->ev_join, 0));
	return 0;
}

static void cuda_teardown(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b)
		return;
	struct cuda_ctx *ctx = b->ctx;
	cuda_device_bind(ctx->device);
	cudaStreamSynchronize(ctx->stream);
	cudaStreamSynchronize(ctx->side_stream); /* an error may have left side work unjoined */
	if (b->step_exec)
		cudaGraphExecDestroy(b->step_exec);
	if (b->copy_stream) {
		cudaStreamSynchronize(b->copy_stream);
		cudaStreamDestroy(b->copy_stream);
	}
	if (b->copied)
		cudaEventDestroy(b->copied);
	if (b->stage_free)
		cudaEventDestroy(b->stage_free);
	cuda_free(ctx, b->stage_x, b->input_bytes, MEM_OTHER);
	cuda_free(ctx, b->stage_labels, b->labels_bytes, MEM_OTHER);
	cuda_free(ctx, b->arena, b->arena_bytes, MEM_ACTIV);
	cuda_free(ctx, b->params, b->params_bytes, MEM_WEIGHTS);
	cuda_free(ctx, b->running, b->running_bytes, MEM_WEIGHTS);
	cuda_free(ctx, b->grads, b->params_bytes, MEM_GRADS);
	cuda_free(ctx, b->momentum, b->params_bytes, MEM_OPTIM);
	cuda_free(ctx, b->input, b->input_bytes, MEM_OTHER);
	cuda_free(ctx, b->misc, b->misc_bytes, MEM_OTHER);
	cuda_free(ctx, b->params_h, b->params_h_bytes, MEM_WEIGHTS);
	cuda_free(ctx, b->grads_h, b->params_h_bytes, MEM_GRADS);
	cuda_free(ctx, b->input_h, b->input_h_bytes, MEM_OTHER);
	/* A set-up that did not fit (maxbatch tries many) must not leave a larger
	 * workspace behind in the pooled context: give it back (counted here, so that the
	 * net's counts end at zero). */
	if (!b->set_up && ctx->workspace_bytes > b->ws_before) {
		cuda_free(ctx, ctx->workspace, ctx->workspace_bytes, MEM_WORKSPACE);
		ctx->workspace = NULL;
		ctx->workspace_bytes = 0;
		if (b->ws_before && cuda_alloc(ctx, &ctx->workspace, b->ws_before, MEM_WORKSPACE) == 0)
			ctx->workspace_bytes = b->ws_before;
	}
	/* the shared workspace stays with the context for the next net */
	mem_stats_sub(&net->mem, MEM_WORKSPACE, ctx->workspace_bytes + ctx->blas_ws_bytes);
	ctx->mem = NULL;
	ctx_release(ctx);
	free(b->fuse);
	free(b);
	net->bk = NULL;
}

static int cuda_sync_from_host(struct net *net)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	GP_TRY(cuda_copy_h2d(b->ctx, b->params, net->host_params, b->params_bytes));
	GP_TRY(cuda_copy_h2d(b->ctx, b->running, net->host_running, b->running_bytes));
	return cuda_ctx_sync(b->ctx);
}

static int cuda_sync_to_host(struct net *net)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	GP_TRY(cuda_copy_d2h(b->ctx, net->host_params, b->params, b->params_bytes));
	return cuda_copy_d2h(b->ctx, net->host_running, b->running, b->running_bytes);
}

/* Before the plan: the net's context, configured for its device, precision, layout
 * and algorithm policy; the convolution algorithms measured (their scratch is
 * transient, and nothing else is allocated yet, so it does not add to the peak); which
 * batch norms run fused; and each node's workspace and reserve space, for the planner
 * to lay out in the arena. Where the measuring scratch does not fit (the largest
 * batches), set-up measures on the net's own memory instead, with one shared
 * workspace. */
static int cuda_plan_scratch(struct net *net, struct scratch_req *reqs)
{
	struct cuda_ctx *ctx;
	GP_TRY(ctx_acquire(net->device, &ctx));
	struct backend_state *b = calloc(1, sizeof(*b));
	if (!b) {
		ctx_release(ctx);
		return gp_error(GP_ENOMEM, "cannot allocate the CUDA backend");
	}
	net->bk = b;
	b->ctx = ctx;
	ctx->fp32_direct_only = net->conv_policy.fp32_direct_only;
	ctx->deterministic = net->conv_policy.deterministic;
	ctx->heuristic_algos = net->conv_policy.heuristic;
	b->ws_before = ctx->workspace_bytes;
	ctx->mem = &net->mem;
	mem_stats_add(&net->mem, MEM_WORKSPACE, ctx->workspace_bytes + ctx->blas_ws_bytes);
	b->amp = precision_is_amp(net->precision);
	b->ht = net->precision == PREC_BF16 ? GP_BF16 : GP_F16;
	b->nhwc = b->amp && net->layout != LAYOUT_NCHW;
	ctx->bn_cudnn = !net->tuning.test.bn_own;
	int nhwc_flatten = -1;
	/* A flatten of feature maps (not 1 x 1) orders features as NCHW does, which the
	 * following linear layer's weights assume: such nets (simple_cnn) stay NCHW. */
	for (int i = 0; b->nhwc && i < net->n_nodes; i++) {
		struct shape in = net->nodes[i].n_in ? net->nodes[net->nodes[i].in[0]].out : net->nodes[i].out;
		if (net->nodes[i].op == OP_FLATTEN && in.h * in.w > 1) {
			if (net->layout == LAYOUT_NHWC)
				nhwc_flatten = i;
			b->nhwc = 0;
		}
	}
	int rc = cuda_ctx_set_math(ctx, net->precision == PREC_TF32 ? CUDA_MATH_TF32 : CUDA_MATH_FP32);
	if (rc == 0)
		rc = cuda_ctx_set_act(ctx, b->amp ? b->ht : GP_F32, b->nhwc);
	if (rc == 0 && nhwc_flatten >= 0) {
		struct shape in = net->nodes[net->nodes[nhwc_flatten].in[0]].out;
		rc = gp_error(GP_EUNSUPPORTED, "%s flattens %dx%d feature maps: NHWC is not supported, use --layout nchw",
			      net->model, in.h, in.w);
	}
	if (rc < 0)
		goto fail;
	for (int i = 0; i < net->n_nodes && rc == 0; i++)
		if (net->nodes[i].op == OP_CONV2D)
			rc = conv2d_plan_cuda(ctx, &net->nodes[i].a.conv);
		else if (net->nodes[i].op == OP_BATCHNORM2D)
			rc = bn_plan_cuda(ctx, &net->nodes[i].a.bn);
	if (rc < 0 && rc != GP_EDEVOOM)
		goto fail;
	if (rc == GP_EDEVOOM)
		gp_error_clear();
	b->measured = rc == 0;
	b->ws_in_arena = net->tuning.test.conv_ws_arena && b->measured;
	if ((rc = cuda_plan_fusion(net, reqs)) < 0)
		goto fail;
	/* FP32 weight gradients through cuDNN may run on the side stream, each with a
	 * workspace of its own (the plan keeps what they read alive until joined) */
	int side = !b->amp && net->tuning.test.wgrad_stream;
	for (int i = 0; i < net->n_nodes && b->ws_in_arena; i++) {
		struct node *nd = &net->nodes[i];
		struct scratch_req *r = &reqs[i];
		if (nd->op != OP_CONV2D)
			continue;
		r->side = side && conv2d_wgrad_is_cudnn(ctx, &nd->a.conv);
		if ((rc = conv2d_ws_bytes_cuda(ctx, &nd->a.conv, &r->fwd_bytes, &r->bwd_bytes,
					       r->side ? &r->side_bytes : NULL)) < 0)
			goto fail;
	}
	return 0;
fail:
	cuda_teardown(net);
	return rc;
}

/* Allocate everything the plan asks for (measuring the convolution algorithms on the
 * net's own memory where plan_scratch could not) and upload the parameters. On any
 * failure (out of memory included) net_setup tears down what was taken. */
static int cuda_setup(struct net *net)
{
	struct backend_state *b = net->bk;
	struct cuda_ctx *ctx = b->ctx;
	GP_TRY(bind_device(net));
	b->arena_bytes = net->plan.arena_bytes;
	b->params_bytes = net->params_count * sizeof(float);
	b->running_bytes = net->running_count * sizeof(float);
	b->input_bytes = (size_t)net->batch * net->in_c * net->in_h * net->in_w * sizeof(float);
	b->labels_bytes = (size_t)net->batch * sizeof(int32_t);
	b->scratch_bytes = 2 * (size_t)net->batch * sizeof(float);
	size_t at_labels = 0, at_scratch = ALIGN256(b->labels_bytes);
	size_t at_loss = at_scratch + ALIGN256(b->scratch_bytes), at_correct = at_loss + 256;
	size_t at_step = at_correct + 256, at_flag = at_step + 256;
	b->misc_bytes = at_flag + 256;
	if (b->amp) {
		b->params_h_bytes = net->params_count * 2;
		b->input_h_bytes = (size_t)net->batch * net->in_c * net->in_h * net->in_w * 2;
		GP_TRY(cuda_alloc(ctx, &b->params_h, b->params_h_bytes, MEM_WEIGHTS));
		GP_TRY(cuda_alloc(ctx, &b->grads_h, b->params_h_bytes, MEM_GRADS));
		GP_TRY(cuda_alloc(ctx, &b->input_h, b->input_h_bytes, MEM_OTHER));
	}
	GP_TRY(cuda_alloc(ctx, (void **)&b->params, b->params_bytes, MEM_WEIGHTS));
	GP_TRY(cuda_alloc(ctx, (void **)&b->running, b->running_bytes, MEM_WEIGHTS));
	GP_TRY(cuda_alloc(ctx, (void **)&b->grads, b->params_bytes, MEM_GRADS));
	GP_TRY(cuda_alloc(ctx, (void **)&b->momentum, b->params_bytes, MEM_OPTIM));
	GP_TRY(cuda_alloc(ctx, (void **)&b->input, b->input_bytes, MEM_OTHER));
	GP_TRY(cuda_alloc(ctx, (void **)&b->misc, b->misc_bytes, MEM_OTHER));
	b->labels = (int32_t *)(b->misc + at_labels);
	b->row_scratch = (float *)(b->misc + at_scratch);
	b->d_loss = (double *)(b->misc + at_loss);
	b->d_correct = (int *)(b->misc + at_correct);
	b->d_step = (unsigned long long *)(b->misc + at_step);
	b->d_nonfinite = (int *)(b->misc + at_flag);
	CUDA_TRY(cudaMemsetAsync(b->d_step, 0, sizeof(*b->d_step), ctx->stream));
	GP_TRY(cuda_alloc(ctx, (void **)&b->arena, b->arena_bytes, MEM_ACTIV));
	for (int i = 0; i < net->n_nodes && !b->measured; i++) {
		struct node *nd = &net->nodes[i];
		if (nd->op == OP_BATCHNORM2D)
			GP_TRY(bn_plan_cuda(ctx, &nd->a.bn));
		if (nd->op != OP_CONV2D)
			continue;
		struct conv_bufs bufs = { .x = act_ptr(net, nd->in[0]),
					  .w = b->amp ? hparam_ptr(net, nd, 0) : (void *)param_ptr(net, nd, 0),
					  .y = act_ptr(net, i) };
		GP_TRY(conv2d_plan_cuda_in(ctx, &nd->a.conv, &bufs));
	}
	/* Planning grows no shared workspace for convolutions: where this net uses it, it
	 * must cover every convolution, before a graph capture could need it to grow. */
	size_t ws_need = 0;
	for (int i = 0; i < net->n_nodes && !b->ws_in_arena; i++) {
		size_t f = 0, bw = 0;
		if (net->nodes[i].op != OP_CONV2D)
			continue;
		GP_TRY(conv2d_ws_bytes_cuda(ctx, &net->nodes[i].a.conv, &f, &bw, NULL));
		ws_need = f > ws_need ? f : ws_need;
		ws_need = bw > ws_need ? bw : ws_need;
	}
	GP_TRY(cuda_workspace_reserve(ctx, ws_need));
	GP_TRY(cuda_sync_from_host(net));
	net->plan.workspace_bytes = ctx->workspace_bytes;
	b->set_up = 1;
	return 0;
}

/* Mixed precision: the float NCHW batch into 16 bits in the net's layout, once per batch. */
static int convert_input(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b->amp)
		return 0;
	return to_h_layout_cuda(b->ctx->stream, b->ht, net->batch, net->in_c, net->in_h, net->in_w, b->nhwc,
				b->input, b->input_h);
}

static int cuda_set_batch_data(struct net *net, const float *x, const int32_t *labels)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	for (int i = 0; i < net->batch; i++)
		if (labels[i] < 0 || labels[i] >= net->classes)
			return gp_error(GP_EINVAL, "label %d of sample %d is not a class of %d",
					labels[i], i, net->classes);
	GP_TRY(side_join(net)); /* the first convolution's weight gradient reads the input */
	GP_TRY(cuda_copy_h2d(b->ctx, b->input, x, b->input_bytes));
	GP_TRY(cuda_copy_h2d(b->ctx, b->labels, labels, b->labels_bytes));
	GP_TRY(convert_input(net));
	return cuda_ctx_sync(b->ctx);
}

/* Start the next batch's copy on the copy stream. The staging buffers are reused once
 * the previous step has taken its batch in (stage_free); waiting for the previous copy
 * first means the caller may hand back the previous batch's host memory now. */
static int cuda_stage_batch(struct net *net, const float *x, const int32_t *labels)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	for (int i = 0; i < net->batch; i++)
		if (labels[i] < 0 || labels[i] >= net->classes)
			return gp_error(GP_EINVAL, "label %d of sample %d is not a class of %d",
					labels[i], i, net->classes);
	if (!b->copy_stream) {
		int rc;
		if ((rc = CUDA_CHECK(cudaStreamCreateWithFlags(&b->copy_stream, cudaStreamNonBlocking))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreateWithFlags(&b->copied, cudaEventDisableTiming))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreateWithFlags(&b->stage_free, cudaEventDisableTiming))) < 0 ||
		    (rc = cuda_alloc(b->ctx, (void **)&b->stage_x, b->input_bytes, MEM_OTHER)) < 0 ||
		    (rc = cuda_alloc(b->ctx, (void **)&b->stage_labels, b->labels_bytes, MEM_OTHER)) < 0)
			return rc;
		CUDA_TRY(cudaEventRecord(b->stage_free, b->ctx->stream));
	}
	CUDA_TRY(cudaEventSynchronize(b->copied));
	CUDA_TRY(cudaStreamWaitEvent(b->copy_stream, b->stage_free, 0));
	CUDA_TRY(cudaMemcpyAsync(b->stage_x, x, b->input_bytes, cudaMemcpyHostToDevice, b->copy_stream));
	CUDA_TRY(cudaMemcpyAsync(b->stage_labels, labels, b->labels_bytes, cudaMemcpyHostToDevice,
				 b->copy_stream));
	CUDA_TRY(cudaEventRecord(b->copied, b->copy_stream));
	return 0;
}

/* On the compute stream: wait for the staged copy, move it into the step's input. */
static int cuda_take_staged(struct net *net)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	cudaStream_t s = b->ctx->stream;
	GP_TRY(side_join(net));
	CUDA_TRY(cudaStreamWaitEvent(s, b->copied, 0));
	CUDA_TRY(cudaMemcpyAsync(b->input, b->stage_x, b->input_bytes, cudaMemcpyDeviceToDevice, s));
	CUDA_TRY(cudaMemcpyAsync(b->labels, b->stage_labels, b->labels_bytes, cudaMemcpyDeviceToDevice, s));
	CUDA_TRY(cudaEventRecord(b->stage_free, s));
	return convert_input(net);
}

static int fp32_forward_node(struct net *net, int i, int training)
{
	struct node *nd = &net->nodes[i];
	struct cuda_ctx *ctx = net->bk->ctx;
	cudaStream_t s = ctx->stream;
	float *x = nd->n_in ? act_ptr(net, nd->in[0]) : NULL, *y = act_ptr(net, i);
	void *saved = saved_ptr(net, i);
	size_t count = shape_numel(nd->out);
	switch (nd->op) {
	case OP_INPUT:
		return 0;
	case OP_CONV2D: {
		struct conv_call call = conv_call_of(net, nd, 0);
		return conv2d_fwd_cuda(ctx, &nd->a.conv, &call, x, param_ptr(net, nd, 0),
				       nd->a.conv.has_bias ? param_ptr(net, nd, 1) : NULL, y);
	}
	case OP_BATCHNORM2D: {
		float *run = net->bk->running + nd->running_offset, *stats = saved;
		int role = training ? fuse_role(net, i) : FUSE_NONE;
		if (role == FUSE_BN_DEFERRED) /* the add after it runs it */
			return 0;
		if (role == FUSE_BN_RELU || role == FUSE_BN_RELU6) /* y: the ReLU's output, in place */
			return bn_fwd_train_fused_cuda(ctx, &nd->a.bn, role == FUSE_BN_RELU ? BN_FUSE_RELU : BN_FUSE_RELU6,
						       x, NULL, param_ptr(net, nd, 0), param_ptr(net, nd, 1), y, stats,
						       stats + nd->a.bn.c, run, run + nd->a.bn.c, NULL, 0);
		if (training)
			return bn_fwd_train_cuda(ctx, &nd->a.bn, x, param_ptr(net, nd, 0), param_ptr(net, nd, 1),
						 y, stats, stats + nd->a.bn.c, run, run + nd->a.bn.c);
		return bn_fwd_eval_cuda(ctx, &nd->a.bn, x, param_ptr(net, nd, 0), param_ptr(net, nd, 1), run,
					run + nd->a.bn.c, y);
	}
	case OP_RELU:
		if (training && (fuse_role(net, i) == FUSE_RELU_DONE || fuse_role(net, i) == FUSE_RELU_AFTER_ADD))
			return 0; /* in place: the fused batch norm wrote it */
		return relu_fwd_cuda(s, GP_F32, count, x, y);
	case OP_RELU6:
		if (training && fuse_role(net, i) == FUSE_RELU_DONE)
			return 0;
		return relu6_fwd_cuda(s, GP_F32, count, x, y);
	case OP_MAXPOOL2D:
		return maxpool_fwd_cuda(s, GP_F32, 0, &nd->a.pool, x, y, saved);
	case OP_AVGPOOL_GLOBAL: {
		struct shape in = net->nodes[nd->in[0]].out;
		return avgpool_global_fwd_cuda(s, GP_F32, 0, in.n, in.c, in.h * in.w, x, y);
	}
	case OP_FLATTEN:
		return x == y ? 0 : copy_cuda(s, y, x, count);
	case OP_LINEAR:
		return linear_fwd_cuda(ctx, &nd->a.lin, x, param_ptr(net, nd, 0),
				       nd->a.lin.has_bias ? param_ptr(net, nd, 1) : NULL, y);
	case OP_ADD:
		if (training && fuse_role(net, i) == FUSE_ADD_BN_RELU) {
			int k = fuse_role(net, nd->in[0]) == FUSE_BN_DEFERRED ? 0 : 1, bi = nd->in[k];
			const struct node *bn = &net->nodes[bi];
			float *run = net->bk->running + bn->running_offset, *stats = saved_ptr(net, bi);
			return bn_fwd_train_fused_cuda(ctx, &bn->a.bn, BN_FUSE_ADD_RELU, act_ptr(net, bn->in[0]),
						       act_ptr(net, nd->in[1 - k]), param_ptr(net, bn, 0),
						       param_ptr(net, bn, 1), y, stats, stats + bn->a.bn.c, run,
						       run + bn->a.bn.c, NULL, 0);
		}
		return add_fwd_cuda(s, GP_F32, count, x, act_ptr(net, nd->in[1]), y);
	case OP_DROPOUT:
		if (training && saved) {
			GP_TRY(dropout_mask_step_cuda(s, count, nd->a.drop.p, dropout_seed(net, i),
						      net->bk->d_step, saved));
			return dropout_fwd_cuda(s, GP_F32, &nd->a.drop, saved, x, y);
		}
		return x == y ? 0 : copy_cuda(s, y, x, count);
	case OP_COUNT:
		break;
	}
	return gp_error(GP_EUNSUPPORTED, "CUDA backend: no forward for op %s", op_name(nd->op));
}


static int cuda_forward_node(struct net *net, int i, int training)
{
	GP_TRY(bind_device(net));
	GP_TRY(side_join(net)); /* a forward after a backward without an optimizer step */
	if (net->bk->amp)
		return amp_forward_node(net, i, training);
	return fp32_forward_node(net, i, training);
}

/* Recompute a ReLU's output from its batch norm's input and saved statistics; for a
 * residual block's output, relu(bn(x) + identity). */
static int cuda_recompute(struct net *net, int r)
{
	const struct node *rn = &net->nodes[r];
	int id = node_recompute_identity(net, r), b = node_recompute_bn(net, r);
	const struct node *bn = &net->nodes[b];
	float *stats = saved_ptr(net, b);
	const struct bn_args *a = &bn->a.bn;
	return bn_apply_cuda(net->bk->ctx->stream, GP_F32, 0, a->n, a->c, a->h * a->w, act_ptr(net, bn->in[0]),
			     id >= 0 ? act_ptr_bwd(net, id) : NULL, param_ptr(net, bn, 0),
			     param_ptr(net, bn, 1), stats, stats + a->c,
			     rn->op == OP_RELU6 ? BN_APPLY_RELU6 : BN_APPLY_RELU, act_ptr_bwd(net, r));
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

static int cuda_backward_node(struct net *net, int i)
{
	GP_TRY(bind_device(net));
	if (net->bk->amp)
		return amp_backward_node(net, i);
	struct node *nd = &net->nodes[i];
	struct cuda_ctx *ctx = net->bk->ctx;
	cudaStream_t s = ctx->stream;
	if (nd->op == OP_CONV2D) /* where the plan ends the side work's tensors */
		GP_TRY(side_join(net));
	/* recomputed outputs are made at the first backward that reads them (planned) */
	FOR_EACH_RECOMPUTE_AT(net, r, i)
		GP_TRY(cuda_recompute(net, r));
	float *dy = grad_ptr(net, i), *x = nd->n_in ? act_ptr_bwd(net, nd->in[0]) : NULL;
	float *dx = nd->n_in ? grad_ptr(net, nd->in[0]) : NULL;
	int acc = nd->n_in ? net->nodes[nd->in[0]].last_consumer != i : 0;
	void *saved = saved_ptr(net, i);
	size_t count = shape_numel(nd->out);
	switch (nd->op) {
	case OP_INPUT:
		return 0;
	case OP_CONV2D: {
		struct conv_call call = conv_call_of(net, nd, 1);
		if (net->scratch[i].side && !net->buckets.n) /* buckets: gradients ready on the main stream */
			GP_TRY(wgrad_on_side(net, nd, x, dy));
		else
			GP_TRY(conv2d_bwd_filter_cuda(ctx, &nd->a.conv, &call, x, dy, pgrad_ptr(net, nd, 0),
						      nd->a.conv.has_bias ? pgrad_ptr(net, nd, 1) : NULL));
		return dx ? conv2d_bwd_data_cuda(ctx, &nd->a.conv, &call, dy, param_ptr(net, nd, 0), dx, acc) : 0;
	}
	case OP_BATCHNORM2D: {
		float *stats = saved;
		if (!dx)
			return gp_error(GP_EUNSUPPORTED, "%s: batch norm on the network input", nd->name);
		if (fuse_role(net, i) == FUSE_BN_RELU || fuse_role(net, i) == FUSE_BN_RELU6) /* dy: unmasked */
			return bn_bwd_relu_fused_cuda(ctx, &nd->a.bn,
						      fuse_role(net, i) == FUSE_BN_RELU ? BN_FUSE_RELU : BN_FUSE_RELU6, x,
						      act_ptr_bwd(net, nd->last_consumer), dy, param_ptr(net, nd, 0),
						      param_ptr(net, nd, 1), stats, stats + nd->a.bn.c, dx, acc,
						      pgrad_ptr(net, nd, 0), pgrad_ptr(net, nd, 1), NULL, 0);
		return bn_bwd_cuda(ctx, &nd->a.bn, x, dy, param_ptr(net, nd, 0), stats, stats + nd->a.bn.c, dx,
				   acc, pgrad_ptr(net, nd, 0), pgrad_ptr(net, nd, 1));
	}
	case OP_RELU:
		if (fuse_role(net, i) == FUSE_RELU_DONE) /* the batch norm's backward masks */
			return 0;
		return dx ? relu_bwd_cuda(s, GP_F32, count, act_ptr_bwd(net, i), dy, dx, acc) : 0;
	case OP_RELU6:
		if (fuse_role(net, i) == FUSE_RELU_DONE)
			return 0;
		return dx ? relu6_bwd_cuda(s, GP_F32, count, act_ptr_bwd(net, i), dy, dx, acc) : 0;
	case OP_MAXPOOL2D:
		return dx ? maxpool_bwd_cuda(s, GP_F32, 0, &nd->a.pool, dy, saved, dx, acc) : 0;
	case OP_AVGPOOL_GLOBAL: {
		struct shape in = net->nodes[nd->in[0]].out;
		return dx ? avgpool_global_bwd_cuda(s, GP_F32, 0, in.n, in.c, in.h * in.w, dy, dx, acc) : 0;
	}
	case OP_FLATTEN:
		return dx && dx != dy ? grad_pass_cuda(s, GP_F32, count, dy, dx, acc) : 0;
	case OP_LINEAR:
		GP_TRY(linear_bwd_weight_cuda(ctx, &nd->a.lin, x, dy, pgrad_ptr(net, nd, 0),
					      nd->a.lin.has_bias ? pgrad_ptr(net, nd, 1) : NULL));
		return dx ? linear_bwd_data_cuda(ctx, &nd->a.lin, dy, param_ptr(net, nd, 0), dx, acc) : 0;
	case OP_ADD:
		for (int k = 0; k < 2; k++) {
			float *dxk = grad_ptr(net, nd->in[k]);
			if (dxk && dxk != dy) /* the same buffer when the plan shares it */
				GP_TRY(grad_pass_cuda(s, GP_F32, count, dy, dxk, net->nodes[nd->in[k]].last_consumer != i));
		}
		return 0;
	case OP_DROPOUT:
		return dx ? dropout_bwd_cuda(s, GP_F32, &nd->a.drop, saved, dy, dx, acc) : 0;
	case OP_COUNT:
		break;
	}
	return gp_error(GP_EUNSUPPORTED, "CUDA backend: no backward for op %s", op_name(nd->op));
}

static int cuda_read_loss(struct net *net, double *loss, int *correct)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	if (loss)
		GP_TRY(cuda_copy_d2h(b->ctx, loss, b->d_loss, sizeof(double)));
	if (correct)
		GP_TRY(cuda_copy_d2h(b->ctx, correct, b->d_correct, sizeof(int)));
	return 0;
}

static int cuda_loss(struct net *net, double *loss, int *correct)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	int last = net->n_nodes - 1;
	struct shape s = net->nodes[last].out;
	if (b->amp)
		GP_TRY(softmax_xent_cuda(b->ctx->stream, b->ht, s.n, s.c * s.h * s.w, act_ptr(net, last),
					   b->labels, grad_ptr(net, last), b->row_scratch, b->d_loss,
					   b->d_correct));
	else
		GP_TRY(softmax_xent_cuda(b->ctx->stream, GP_F32, s.n, s.c * s.h * s.w, act_ptr(net, last), b->labels,
					 grad_ptr(net, last), b->row_scratch, b->d_loss, b->d_correct));
	return cuda_read_loss(net, loss, correct);
}

static int cuda_sgd(struct net *net, const struct sgd_args *sgd)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	GP_TRY(side_join(net));
	GP_TRY(sgd_step_cuda(b->ctx->stream, sgd, net->params_count, b->params, b->grads,
			     sgd->momentum != 0 ? b->momentum : NULL));
	return counter_inc_cuda(b->ctx->stream, b->d_step);
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
	return cuda_sgd(net, sgd);
}

/* Capture the whole step once and replay it: one launch instead of hundreds, so the
 * GPU no longer waits for the host at small batches. Returns 1 when the step must
 * run eagerly instead (first step, or capture not possible). */
static int cuda_train_step(struct net *net, const struct sgd_args *sgd)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	cudaStream_t s = b->ctx->stream;
	if (b->graph_failed || sgd->first_step)
		return 1;
	if (b->step_exec && memcmp(&b->step_sgd, sgd, sizeof(*sgd))) {
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

static int cuda_scale_output_grad(struct net *net, int node, double factor)
{
	GP_TRY(bind_device(net));
	if (net->bk->amp)
		return scale_cuda(net->bk->ctx->stream, net->bk->ht, grad_ptr(net, node),
				    shape_numel(net->nodes[node].out), factor, NULL);
	return scale_cuda(net->bk->ctx->stream, GP_F32, grad_ptr(net, node), shape_numel(net->nodes[node].out),
			  factor, NULL);
}

/* The one host wait of loss scaling: whether to step depends on the check. */
static int cuda_unscale_grads(struct net *net, double factor, int *nonfinite)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	GP_TRY(side_join(net)); /* the weight gradients must all be there */
	CUDA_TRY(cudaMemsetAsync(b->d_nonfinite, 0, sizeof(int), b->ctx->stream));
	GP_TRY(scale_cuda(b->ctx->stream, GP_F32, b->grads, net->params_count, factor, b->d_nonfinite));
	return cuda_copy_d2h(b->ctx, nonfinite, b->d_nonfinite, sizeof(int));
}

static int cuda_wait(struct net *net)
{
	GP_TRY(bind_device(net));
	GP_TRY(side_join(net));
	if (net->bk->copy_stream)
		CUDA_TRY(cudaStreamSynchronize(net->bk->copy_stream));
	return cuda_ctx_sync(net->bk->ctx);
}

static int cuda_grads_to_host(struct net *net, float *dst)
{
	GP_TRY(bind_device(net));
	GP_TRY(side_join(net));
	return cuda_copy_d2h(net->bk->ctx, dst, net->bk->grads, net->bk->params_bytes);
}

static int cuda_tensor_to_host(struct net *net, int node, int grad, float *dst)
{
	GP_TRY(bind_device(net));
	GP_TRY(side_join(net));
	void *src = grad ? (void *)grad_ptr(net, node) : act_ptr(net, node);
	if (!src)
		return gp_error(GP_ENOTFOUND, "node %d has no %s in memory", node, grad ? "gradient" : "output");
	if (net->bk->amp)
		return amp_tensor_to_host(net, src, net->nodes[node].out, dst);
	return cuda_copy_d2h(net->bk->ctx, dst, src, shape_numel(net->nodes[node].out) * sizeof(float));
}

static int cuda_logits_to_host(struct net *net, float *dst)
{
	GP_TRY(bind_device(net));
	int last = net->n_nodes - 1;
	if (net->bk->amp)
		return amp_tensor_to_host(net, act_ptr(net, last), net->nodes[last].out, dst);
	return cuda_copy_d2h(net->bk->ctx, dst, act_ptr(net, last),
			     shape_numel(net->nodes[last].out) * sizeof(float));
}

const struct backend_ops backend_cuda_ops = {
	.name = "cuda",
	.plan_scratch = cuda_plan_scratch,
	.setup = cuda_setup,
	.teardown = cuda_teardown,
	.set_batch_data = cuda_set_batch_data,
	.stage_batch = cuda_stage_batch,
	.take_staged = cuda_take_staged,
	.forward_node = cuda_forward_node,
	.loss = cuda_loss,
	.backward_node = cuda_backward_node,
	.sgd_step = cuda_sgd,
	.sync_to_host = cuda_sync_to_host,
	.sync_from_host = cuda_sync_from_host,
	.grads_to_host = cuda_grads_to_host,
	.tensor_to_host = cuda_tensor_to_host,
	.train_step = cuda_train_step,
	.read_loss = cuda_read_loss,
	.wait = cuda_wait,
	.logits_to_host = cuda_logits_to_host,
	.scale_output_grad = cuda_scale_output_grad,
	.unscale_grads = cuda_unscale_grads,
	.workspace_bytes = cuda_workspace_bytes,
};
