/* The CUDA backend: device memory laid out by the net's memory plan, every op
 * through the CUDA op layer (cuDNN, cuBLAS, own kernels) on one stream. Nothing
 * synchronizes except reading the loss back and copying parameters to the host. This
 * file holds the contexts, set-up, the batch's way in and the copies out; the op
 * switch is in backend_cuda_ops.c, the loss, optimizer and graph step in
 * backend_cuda_step.c.
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

void backend_cuda_relu6_roles(const struct net *net, int *folded, int *in_bn)
{
	*folded = *in_bn = 0;
	for (int i = 0; net->bk && i < net->n_nodes; i++) {
		*folded += fuse_role(net, i) == FUSE_RELU6_FOLDED;
		*in_bn += fuse_role(net, i) == FUSE_BN_RELU6;
	}
}

static size_t cuda_workspace_bytes(struct net *net)
{
	return 0; /* measured per shape at setup; charged to the workspace category then */
}

static void cuda_teardown(struct net *net)
{
	struct backend_state *b = net->bk;
	if (!b)
		return;
	struct cuda_ctx *ctx = b->ctx;
	cuda_device_bind(ctx->device);
	/* The step's graph goes before NCCL's communicator: since NCCL 2.26 a communicator
	 * that a live graph captured (two ranks or more) waits in finalize and abort alike
	 * until that graph is destroyed, so the other order hangs at the end of every
	 * captured data-parallel run. A graph still in flight is freed when it completes. */
	if (b->step_exec)
		cudaGraphExecDestroy(b->step_exec);
	b->step_exec = NULL;
	/* then: a kernel waiting for a rank that failed ends only when NCCL aborts */
	cuda_dp_teardown(net);
	cudaStreamSynchronize(ctx->stream);
	cudaStreamSynchronize(ctx->side_stream); /* an error may have left side work unjoined */
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
	for (int i = 0; i < 2; i++) {
		if (b->labels_copied[i])
			cudaEventDestroy(b->labels_copied[i]);
		if (b->labels_pinned[i])
			cudaFreeHost(b->labels_pinned[i]);
	}
	cuda_free(ctx, b->arena, b->arena_bytes, MEM_ACTIV);
	cuda_free(ctx, b->params, b->params_bytes, MEM_WEIGHTS);
	cuda_free(ctx, b->running, b->running_bytes, MEM_WEIGHTS);
	cuda_free(ctx, b->grads, b->params_bytes, MEM_GRADS);
	cuda_free(ctx, b->momentum, b->params_bytes, MEM_OPTIM);
	cuda_optim_teardown(net);
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

/* The activations' type and layout a net runs in, from its settings alone: 16 bits under
 * mixed precision, NHWC there unless asked for NCHW; *flatten: a flatten of feature maps
 * (not 1 x 1), which orders features as NCHW does and the following linear layer's
 * weights assume, so that such nets (simple_cnn) stay NCHW (-1: none; under
 * --layout nhwc an error). */
static void act_format(const struct net *net, enum gp_dtype *dt, int *nhwc, int *flatten)
{
	int amp = precision_is_amp(net->precision);
	*dt = !amp ? GP_F32 : net->precision == PREC_BF16 ? GP_BF16 : GP_F16;
	*nhwc = amp && net->layout != LAYOUT_NCHW;
	*flatten = -1;
	for (int i = 0; *nhwc && i < net->n_nodes; i++) {
		struct shape in = net->nodes[i].n_in ? net->nodes[net->nodes[i].in[0]].out : net->nodes[i].out;
		if (net->nodes[i].op == OP_FLATTEN && in.h * in.w > 1) {
			if (net->layout == LAYOUT_NHWC)
				*flatten = i;
			*nhwc = 0;
		}
	}
}

/* plan_marks: what cuda_plan_fusion will mark, from a context that holds the settings
 * only (no device; its batch norms' routing reads nothing else). */
static int cuda_plan_marks(struct net *net, struct scratch_req *reqs)
{
	struct cuda_ctx ctx = { 0 };
	enum gp_dtype dt;
	int flatten;
	act_format(net, &dt, &ctx.nhwc, &flatten);
	ctx.act_dtype = dt;
	ctx.bn_cudnn = !net->tuning.test.bn_own;
	ctx.bn16 = net->tuning.bn16;
	cuda_mark_spare_outputs(net, &ctx, reqs);
	return 0;
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
	int nhwc_flatten;
	act_format(net, &b->dt, &b->nhwc, &nhwc_flatten);
	ctx->bn_cudnn = !net->tuning.test.bn_own;
	ctx->bn16 = net->tuning.bn16;
	dwconv_set_tiled(net->tuning.dwconv_tiled ? 7 : 0); /* process-wide: the last net's */
	int rc = cuda_ctx_set_math(ctx, net->precision == PREC_TF32 ? CUDA_MATH_TF32 : CUDA_MATH_FP32);
	if (rc == 0)
		rc = cuda_ctx_set_act(ctx, b->dt, b->nhwc);
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
	GP_TRY(cuda_optim_setup(net));
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
	GP_TRY(cuda_dp_setup(net));
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
static int cuda_input_format(struct net *net, enum gp_dtype *dtype, int *nhwc)
{
	struct backend_state *b = net->bk;
	*dtype = b->amp ? b->ht : GP_F32;
	*nhwc = b->amp && b->nhwc;
	return 0;
}

/* The labels on the compute stream from pinned memory of the net's own, so that the
 * copy waits for nothing on the host: a copy from pageable memory may synchronize
 * with the stream, that is, with the previous step. */
static int labels_in_order(struct backend_state *b, const int32_t *labels)
{
	int t = b->labels_turn;
	if (!b->labels_copied[t])
		CUDA_TRY(cudaEventCreateWithFlags(&b->labels_copied[t], cudaEventDisableTiming));
	if (!b->labels_pinned[t])
		CUDA_TRY(cudaHostAlloc((void **)&b->labels_pinned[t], b->labels_bytes,
				       cudaHostAllocDefault));
	else
		CUDA_TRY(cudaEventSynchronize(b->labels_copied[t])); /* two batches ago */
	memcpy(b->labels_pinned[t], labels, b->labels_bytes);
	CUDA_TRY(cudaMemcpyAsync(b->labels, b->labels_pinned[t], b->labels_bytes,
				 cudaMemcpyHostToDevice, b->ctx->stream));
	CUDA_TRY(cudaEventRecord(b->labels_copied[t], b->ctx->stream));
	b->labels_turn = !t;
	return 0;
}

/* On the compute stream, after the previous step (its backward reads the input):
 * a batch in the net's own 16-bit format straight into the 16-bit input (no
 * conversion), a float NCHW one into the float input (converted under mixed
 * precision). With a read event the host goes on at once: the caller's decoder waits
 * for the event on its stream before it writes x again, and the next step is queued
 * behind this one with no gap between them but the copy (s11: the wait here for the
 * previous step, with the GPU idle until the next launch, was the old way). Without
 * one, waiting for the copy lets the caller reuse x at once. */
static int cuda_set_batch_device(struct net *net, const void *x, enum gp_dtype dtype, int nhwc,
				 const int32_t *labels, void *read_event)
{
	GP_TRY(bind_device(net));
	struct backend_state *b = net->bk;
	for (int i = 0; i < net->batch; i++)
		if (labels[i] < 0 || labels[i] >= net->classes)
			return gp_error(GP_EINVAL, "label %d of sample %d is not a class of %d",
					labels[i], i, net->classes);
	enum gp_dtype native;
	int native_nhwc;
	cuda_input_format(net, &native, &native_nhwc);
	int as_is = dtype == native && (dtype == GP_F32 || nhwc == native_nhwc);
	if (!as_is && (dtype != GP_F32 || nhwc))
		return gp_error(GP_EINVAL, "device batch in %s %s for a net that takes %s %s",
				dtype_name(dtype), nhwc ? "NHWC" : "NCHW", dtype_name(native),
				native_nhwc ? "NHWC" : "NCHW");
	cudaStream_t s = b->ctx->stream;
	GP_TRY(side_join(net));
	int direct16 = as_is && b->amp;
	void *dst = direct16 ? b->input_h : (void *)b->input;
	size_t bytes = direct16 ? b->input_h_bytes : b->input_bytes;
	CUDA_TRY(cudaMemcpyAsync(dst, x, bytes, cudaMemcpyDeviceToDevice, s));
	if (read_event) {
		CUDA_TRY(cudaEventRecord((cudaEvent_t)read_event, s));
		GP_TRY(labels_in_order(b, labels));
	} else {
		GP_TRY(cuda_copy_h2d(b->ctx, b->labels, labels, b->labels_bytes));
	}
	if (!direct16)
		GP_TRY(convert_input(net));
	return read_event ? 0 : cuda_ctx_sync(b->ctx);
}

/* A node's 16-bit output or gradient as float NCHW on the host. */
static int act16_to_host(struct net *net, const void *src, struct shape sh, float *dst)
{
	struct backend_state *b = net->bk;
	size_t bytes = shape_numel(sh) * sizeof(float);
	float *tmp;
	GP_TRY(cuda_alloc(b->ctx, (void **)&tmp, bytes, MEM_OTHER));
	int rc = from_h_layout_cuda(b->ctx->stream, b->ht, sh.n, sh.c, sh.h, sh.w, b->nhwc, src, tmp, 0);
	if (rc == 0)
		rc = cuda_copy_d2h(b->ctx, dst, tmp, bytes);
	cuda_free(b->ctx, tmp, bytes, MEM_OTHER);
	return rc;
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
	GP_TRY(cuda_dp_finish(net));
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
		return act16_to_host(net, src, net->nodes[node].out, dst);
	return cuda_copy_d2h(net->bk->ctx, dst, src, shape_numel(net->nodes[node].out) * sizeof(float));
}

static int cuda_logits_to_host(struct net *net, float *dst)
{
	GP_TRY(bind_device(net));
	int last = net->n_nodes - 1;
	if (net->bk->amp)
		return act16_to_host(net, act_ptr(net, last), net->nodes[last].out, dst);
	return cuda_copy_d2h(net->bk->ctx, dst, act_ptr(net, last),
			     shape_numel(net->nodes[last].out) * sizeof(float));
}

const struct backend_ops backend_cuda_ops = {
	.name = "cuda",
	.plan_marks = cuda_plan_marks,
	.plan_scratch = cuda_plan_scratch,
	.setup = cuda_setup,
	.teardown = cuda_teardown,
	.set_batch_data = cuda_set_batch_data,
	.stage_batch = cuda_stage_batch,
	.take_staged = cuda_take_staged,
	.input_format = cuda_input_format,
	.set_batch_device = cuda_set_batch_device,
	.forward_node = cuda_forward_node,
	.loss = cuda_loss,
	.backward_node = cuda_backward_node,
	.sgd_step = cuda_sgd,
	.grad_accum = cuda_grad_accum,
	.sync_to_host = cuda_sync_to_host,
	.sync_from_host = cuda_sync_from_host,
	.optim_state_to_host = cuda_optim_state_to_host,
	.optim_state_from_host = cuda_optim_state_from_host,
	.grads_to_host = cuda_grads_to_host,
	.tensor_to_host = cuda_tensor_to_host,
	.train_step = cuda_train_step,
	.read_loss = cuda_read_loss,
	.wait = cuda_wait,
	.logits_to_host = cuda_logits_to_host,
	.scale_output_grad = cuda_scale_output_grad,
	.unscale_grads = cuda_unscale_grads,
	.grad_allreduce = cuda_dp_grad_allreduce,
	.workspace_bytes = cuda_workspace_bytes,
};
