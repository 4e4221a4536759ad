/* Building a network, inferring shapes and laying out the state dict; running it
 * through a backend (backend.h). The memory plan is in plan.c. */
#include "nn/net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "backend/backend.h"
#include "dist/dist.h"

int net_init(struct net *net, const char *model, int classes, int in_c, int in_h, int in_w)
{
	memset(net, 0, sizeof(*net));
	snprintf(net->model, sizeof(net->model), "%s", model);
	if (classes < 1 || in_c < 1 || in_h < 1 || in_w < 1)
		return gp_error(GP_EINVAL, "bad model geometry: %d classes, input %dx%dx%d",
				classes, in_c, in_h, in_w);
	net->classes = classes;
	net->in_c = in_c;
	net->in_h = in_h;
	net->in_w = in_w;
	net->batch = 1;
	net->seed = 0;
	net->tuning = *tuning_get();
	return 0;
}

/* Append a node reading from `in` (and `in2`); records the first error. */
static struct node *node_new(struct net *net, enum op_type op, const char *name, int in, int in2)
{
	if (net->build_err)
		return NULL;
	if (net->n_nodes >= GP_MAX_NODES) {
		net->build_err = gp_error(GP_EINVAL, "model '%s' has more than %d nodes",
					  net->model, GP_MAX_NODES);
		return NULL;
	}
	int n_in = (in >= 0) + (in2 >= 0);
	if ((in >= net->n_nodes) || (in2 >= net->n_nodes) || (op != OP_INPUT && in < 0)) {
		net->build_err = gp_error(GP_EINVAL, "model '%s': node %d reads a node that does not exist",
					  net->model, net->n_nodes);
		return NULL;
	}
	struct node *nd = &net->nodes[net->n_nodes++];
	memset(nd, 0, sizeof(*nd));
	nd->op = op;
	snprintf(nd->name, sizeof(nd->name), "%s", name ? name : "");
	nd->in[0] = in;
	nd->in[1] = in2;
	nd->n_in = n_in;
	nd->t_y = nd->t_dy = nd->t_saved = nd->t_re = -1;
	nd->last_consumer = -1;
	nd->param_first = net->n_state;
	return nd;
}

static int node_index(struct net *net, struct node *nd)
{
	return nd ? (int)(nd - net->nodes) : -1;
}

static void state_add(struct net *net, struct node *nd, const char *suffix, enum state_kind kind,
		      int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
	if (net->build_err)
		return;
	if (net->n_state >= GP_MAX_STATE) {
		net->build_err = gp_error(GP_EINVAL, "model '%s' has more than %d state tensors",
					  net->model, GP_MAX_STATE);
		return;
	}
	struct state_entry *e = &net->state[net->n_state++];
	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s.%s", nd->name, suffix);
	e->kind = kind;
	e->ndim = ndim;
	int64_t d[4] = { d0, d1, d2, d3 };
	e->numel = 1;
	for (int i = 0; i < ndim; i++) {
		e->dims[i] = d[i];
		e->numel *= (size_t)d[i];
	}
	e->node = node_index(net, nd);
	if (kind == STATE_PARAM) {
		e->offset = net->params_count;
		net->params_count += e->numel;
		net->n_params++;
		nd->param_count++;
	} else if (kind == STATE_RUNNING) {
		e->offset = net->running_count;
		net->running_count += e->numel;
	}
}

static struct shape in_shape(struct net *net, int in)
{
	return net->nodes[in].out;
}

int net_input(struct net *net)
{
	struct node *nd = node_new(net, OP_INPUT, "input", -1, -1);
	if (!nd)
		return -1;
	nd->out = (struct shape){ net->batch, net->in_c, net->in_h, net->in_w };
	return node_index(net, nd);
}

int net_conv(struct net *net, const char *name, int in, int c_out, int k, int stride, int pad,
	     int groups, int bias)
{
	struct node *nd = node_new(net, OP_CONV2D, name, in, -1);
	if (!nd)
		return -1;
	struct shape s = in_shape(net, in);
	if (groups < 1 || s.c % groups || c_out % groups || k < 1 || stride < 1 || pad < 0 ||
	    s.h + 2 * pad < k || s.w + 2 * pad < k) {
		net->build_err = gp_error(GP_EINVAL,
			"%s: conv %d->%d k%d s%d p%d g%d does not fit input %dx%dx%d",
			name, s.c, c_out, k, stride, pad, groups, s.c, s.h, s.w);
		return -1;
	}
	struct conv2d_args *a = &nd->a.conv;
	*a = (struct conv2d_args){
		.n = s.n, .c_in = s.c, .h_in = s.h, .w_in = s.w, .c_out = c_out,
		.h_out = conv_out_size(s.h, k, stride, pad), .w_out = conv_out_size(s.w, k, stride, pad),
		.kh = k, .kw = k, .stride = stride, .pad = pad, .groups = groups, .has_bias = bias,
	};
	nd->out = (struct shape){ s.n, c_out, a->h_out, a->w_out };
	state_add(net, nd, "weight", STATE_PARAM, 4, c_out, s.c / groups, k, k);
	if (bias)
		state_add(net, nd, "bias", STATE_PARAM, 1, c_out, 0, 0, 0);
	return node_index(net, nd);
}

int net_bn(struct net *net, const char *name, int in)
{
	struct node *nd = node_new(net, OP_BATCHNORM2D, name, in, -1);
	if (!nd)
		return -1;
	struct shape s = in_shape(net, in);
	nd->a.bn = (struct bn_args){ .n = s.n, .c = s.c, .h = s.h, .w = s.w, .eps = 1e-5, .momentum = 0.1 };
	nd->out = s;
	state_add(net, nd, "weight", STATE_PARAM, 1, s.c, 0, 0, 0);
	state_add(net, nd, "bias", STATE_PARAM, 1, s.c, 0, 0, 0);
	nd->running_offset = net->running_count;
	state_add(net, nd, "running_mean", STATE_RUNNING, 1, s.c, 0, 0, 0);
	state_add(net, nd, "running_var", STATE_RUNNING, 1, s.c, 0, 0, 0);
	state_add(net, nd, "num_batches_tracked", STATE_COUNTER, 0, 0, 0, 0, 0);
	return node_index(net, nd);
}

static int net_unary(struct net *net, enum op_type op, int in)
{
	struct node *nd = node_new(net, op, NULL, in, -1);
	if (!nd)
		return -1;
	nd->out = in_shape(net, in);
	return node_index(net, nd);
}

int net_relu(struct net *net, int in)
{
	return net_unary(net, OP_RELU, in);
}

int net_relu6(struct net *net, int in)
{
	return net_unary(net, OP_RELU6, in);
}

int net_maxpool(struct net *net, int in, int k, int stride, int pad)
{
	struct node *nd = node_new(net, OP_MAXPOOL2D, NULL, in, -1);
	if (!nd)
		return -1;
	struct shape s = in_shape(net, in);
	if (k < 1 || stride < 1 || pad < 0 || 2 * pad > k || s.h + 2 * pad < k || s.w + 2 * pad < k) {
		net->build_err = gp_error(GP_EINVAL, "max pool k%d s%d p%d does not fit input %dx%d",
					  k, stride, pad, s.h, s.w);
		return -1;
	}
	if (k > MAXPOOL_K_MAX) { /* the argmax is a byte: the offset in the k x k window */
		net->build_err = gp_error(GP_EUNSUPPORTED, "max pool k%d: windows up to %dx%d",
					  k, MAXPOOL_K_MAX, MAXPOOL_K_MAX);
		return -1;
	}
	nd->a.pool = (struct pool_args){
		.n = s.n, .c = s.c, .h_in = s.h, .w_in = s.w,
		.h_out = conv_out_size(s.h, k, stride, pad), .w_out = conv_out_size(s.w, k, stride, pad),
		.k = k, .stride = stride, .pad = pad,
	};
	nd->out = (struct shape){ s.n, s.c, nd->a.pool.h_out, nd->a.pool.w_out };
	return node_index(net, nd);
}

int net_avgpool_global(struct net *net, int in)
{
	struct node *nd = node_new(net, OP_AVGPOOL_GLOBAL, NULL, in, -1);
	if (!nd)
		return -1;
	struct shape s = in_shape(net, in);
	nd->out = (struct shape){ s.n, s.c, 1, 1 };
	return node_index(net, nd);
}

int net_flatten(struct net *net, int in)
{
	struct node *nd = node_new(net, OP_FLATTEN, NULL, in, -1);
	if (!nd)
		return -1;
	struct shape s = in_shape(net, in);
	nd->out = (struct shape){ s.n, s.c * s.h * s.w, 1, 1 };
	return node_index(net, nd);
}

int net_linear(struct net *net, const char *name, int in, int out_features, int bias)
{
	struct node *nd = node_new(net, OP_LINEAR, name, in, -1);
	if (!nd)
		return -1;
	struct shape s = in_shape(net, in);
	int in_features = s.c * s.h * s.w;
	nd->a.lin = (struct linear_args){ .n = s.n, .in = in_features, .out = out_features,
					  .has_bias = bias };
	nd->out = (struct shape){ s.n, out_features, 1, 1 };
	state_add(net, nd, "weight", STATE_PARAM, 2, out_features, in_features, 0, 0);
	if (bias)
		state_add(net, nd, "bias", STATE_PARAM, 1, out_features, 0, 0, 0);
	return node_index(net, nd);
}

int net_add(struct net *net, int a, int b)
{
	if (b < 0 && !net->build_err)
		net->build_err = gp_error(GP_EINVAL, "add needs two inputs");
	struct node *nd = node_new(net, OP_ADD, NULL, a, b);
	if (!nd)
		return -1;
	struct shape sa = in_shape(net, a), sb = in_shape(net, b);
	if (memcmp(&sa, &sb, sizeof(sa))) {
		net->build_err = gp_error(GP_EINVAL, "add of %dx%dx%d and %dx%dx%d",
					  sa.c, sa.h, sa.w, sb.c, sb.h, sb.w);
		return -1;
	}
	nd->out = sa;
	return node_index(net, nd);
}

int net_dropout(struct net *net, int in, double p)
{
	struct node *nd = node_new(net, OP_DROPOUT, NULL, in, -1);
	if (!nd)
		return -1;
	if (!(p >= 0 && p < 1)) {
		net->build_err = gp_error(GP_EINVAL, "dropout probability %g is not in [0, 1)", p);
		return -1;
	}
	nd->out = in_shape(net, in);
	nd->a.drop = (struct dropout_args){ .count = shape_numel(nd->out), .p = p };
	return node_index(net, nd);
}

/* Re-derive every size that depends on the batch. */
int net_set_batch(struct net *net, int batch)
{
	if (batch < 1)
		return gp_error(GP_EINVAL, "batch size must be at least 1 (got %d)", batch);
	net->batch = batch;
	for (int i = 0; i < net->n_nodes; i++) {
		struct node *nd = &net->nodes[i];
		nd->out.n = batch;
		switch (nd->op) {
		case OP_CONV2D:
			nd->a.conv.n = batch;
			nd->macs = conv2d_macs(&nd->a.conv);
			break;
		case OP_BATCHNORM2D:
			nd->a.bn.n = batch;
			break;
		case OP_MAXPOOL2D:
			nd->a.pool.n = batch;
			break;
		case OP_LINEAR:
			nd->a.lin.n = batch;
			nd->macs = linear_macs(&nd->a.lin);
			break;
		case OP_DROPOUT:
			nd->a.drop.count = shape_numel(nd->out);
			break;
		default:
			break;
		}
	}
	return 0;
}

double net_total_macs(const struct net *net)
{
	double m = 0;
	for (int i = 0; i < net->n_nodes; i++)
		m += net->nodes[i].macs;
	return m;
}

struct state_entry *net_state_find(struct net *net, const char *name)
{
	for (int i = 0; i < net->n_state; i++)
		if (!strcmp(net->state[i].name, name))
			return &net->state[i];
	return NULL;
}

/* Consumers, which gradients must flow, and the host master copy. */
int net_finalize(struct net *net)
{
	if (net->build_err)
		return net->build_err;
	if (net->n_nodes < 2)
		return gp_error(GP_EINVAL, "model '%s' has no layers", net->model);
	for (int i = 0; i < net->n_nodes; i++) {
		net->nodes[i].consumers = 0;
		net->nodes[i].last_consumer = -1;
	}
	for (int i = 0; i < net->n_nodes; i++) {
		struct node *nd = &net->nodes[i];
		for (int k = 0; k < nd->n_in; k++) {
			struct node *src = &net->nodes[nd->in[k]];
			src->consumers++;
			src->last_consumer = i;
		}
	}
	/* A gradient flows into a node's output if the node or anything before it
	 * has parameters; the input image needs none. */
	for (int i = 0; i < net->n_nodes; i++) {
		struct node *nd = &net->nodes[i];
		int upstream = 0;
		for (int k = 0; k < nd->n_in; k++) {
			struct node *src = &net->nodes[nd->in[k]];
			upstream |= src->needs_dx || src->param_count > 0;
		}
		nd->needs_dx = nd->op != OP_INPUT && (nd->param_count > 0 || upstream);
	}
	free(net->host_params);
	free(net->host_running);
	net->host_params = calloc(net->params_count ? net->params_count : 1, sizeof(float));
	net->host_running = calloc(net->running_count ? net->running_count : 1, sizeof(float));
	if (!net->host_params || !net->host_running)
		return gp_error(GP_ENOMEM, "cannot allocate %zu parameters", net->params_count);
	/* running_var starts at 1, like PyTorch */
	for (int i = 0; i < net->n_state; i++) {
		struct state_entry *e = &net->state[i];
		if (e->kind == STATE_RUNNING && strstr(e->name, ".running_var"))
			for (size_t j = 0; j < e->numel; j++)
				net->host_running[e->offset + j] = 1.0f;
	}
	return net_set_batch(net, net->batch);
}

void net_free(struct net *net)
{
	if (!net)
		return;
	net_teardown(net);
	free(net->host_params);
	free(net->host_running);
	free(net->tensors);
	free(net->scratch);
	free(net);
}

/* ---- running: delegate to the backend ------------------------------------------------ */

static const struct backend_ops *net_backend(const struct net *net)
{
#ifdef GP_HAVE_CUDA
	if (net->backend == BACKEND_CUDA)
		return &backend_cuda_ops;
#endif
	return &backend_cpu_ops;
}

/* Past the cap is out of memory like the real thing, so callers that recover from
 * running out (maxbatch) treat both alike. */
static int mem_limit_error(const struct net *net, size_t bytes)
{
	return gp_error(net->backend == BACKEND_CUDA ? GP_EDEVOOM : GP_ENOMEM,
			"batch %d needs %.1f MiB, over the memory limit of %.1f MiB", net->batch,
			bytes / GP_MIB, net->mem_limit_bytes / GP_MIB);
}

/* The scratch requests, allocated where needed, all zero. */
static int reqs_zeroed(struct net *net)
{
	if (!net_scratch_reqs(net))
		return gp_error(GP_ENOMEM, "cannot allocate the scratch requests");
	memset(net->scratch, 0, ((size_t)net->n_nodes + 1) * sizeof(*net->scratch));
	return 0;
}

/* The scratch requests zeroed, with the backend's device-free marks (plan_marks). */
static int reqs_marked(struct net *net, const struct backend_ops *ops)
{
	GP_TRY(reqs_zeroed(net));
	return ops->plan_marks ? ops->plan_marks(net, net->scratch) : 0;
}

int net_plan_predict(struct net *net, enum backend_kind backend, enum gp_dtype dtype, enum precision prec)
{
	net_teardown(net);
	net->backend = backend;
	net->dtype = dtype;
	net->precision = prec;
	const struct backend_ops *ops = net_backend(net);
	GP_TRY(reqs_marked(net, ops));
	return net_plan_memory(net, 1, net_act_elem_bytes(backend, dtype, prec), 0);
}

int net_setup(struct net *net, enum backend_kind backend, enum gp_dtype dtype, enum precision prec)
{
	net_teardown(net);
#ifndef GP_HAVE_CUDA
	if (backend == BACKEND_CUDA)
		return gp_error(GP_ENODEV, "this gpuperf was built without CUDA");
#endif
	if (backend == BACKEND_CPU && dtype != GP_F32 && dtype != GP_F64)
		return gp_error(GP_EUNSUPPORTED, "the CPU backend computes in F32 or F64, not %s",
				dtype_name(dtype));
	if (backend == BACKEND_CPU && (precision_is_amp(prec) || net->layout == LAYOUT_NHWC))
		return gp_error(GP_EUNSUPPORTED, "%s needs the CUDA backend",
				precision_is_amp(prec) ? "mixed precision (fp16, bf16)" : "the NHWC layout");
	if (net->layout == LAYOUT_NHWC && !precision_is_amp(prec))
		return gp_error(GP_EUNSUPPORTED, "the NHWC layout needs --precision fp16 or bf16");
	if (net->device < 0 || (backend == BACKEND_CPU && net->device != 0))
		return gp_error(GP_ENODEV, "%s device %d does not exist", backend == BACKEND_CPU ? "CPU" : "CUDA",
				net->device);
	if (net->sync_bn && net->recompute)
		return gp_error(GP_EUNSUPPORTED, "synchronized batch norm (--sync-bn) with --recompute "
				"is not supported yet");
	net->backend = backend;
	net->dtype = dtype;
	net->precision = prec;
	const struct backend_ops *ops = net_backend(net);
	size_t elem = net_act_elem_bytes(backend, dtype, prec);
	int rc = 0;
	/* Over the cap without any scratch: no need to choose the algorithms first. */
	if (net->mem_limit_bytes && ops->plan_scratch) {
		if ((rc = reqs_marked(net, ops)) < 0 ||
		    (rc = net_plan_memory(net, 1, elem, ops->workspace_bytes(net))) < 0)
			goto teardown;
		if (net->plan.total_bytes > net->mem_limit_bytes) {
			net_teardown(net);
			return mem_limit_error(net, net->plan.total_bytes);
		}
	}
	if (ops->plan_scratch) {
		if ((rc = reqs_zeroed(net)) < 0 || (rc = ops->plan_scratch(net, net->scratch)) < 0)
			goto teardown;
	}
	if ((rc = net_plan_memory(net, 1, elem, ops->workspace_bytes(net))) < 0)
		goto teardown;
	if (net->mem_limit_bytes && net->plan.total_bytes > net->mem_limit_bytes) {
		rc = mem_limit_error(net, net->plan.total_bytes);
		goto teardown;
	}
	/* every rank starts from rank 0's parameters and statistics, as DDP does */
	if (net->dist && ((rc = dist_bcast(net->dist, net->host_params,
					   net->params_count * sizeof(float), 0)) < 0 ||
			  (rc = dist_bcast(net->dist, net->host_running,
					   net->running_count * sizeof(float), 0)) < 0))
		goto teardown;
	if ((rc = ops->setup(net)) < 0)
		goto teardown;
	if (net->mem_limit_bytes && net->mem.total_bytes > net->mem_limit_bytes) {
		size_t held = net->mem.total_bytes;
		net_teardown(net);
		return mem_limit_error(net, held);
	}
	return 0;
teardown:
	net_teardown(net);
	return rc;
}

void net_teardown(struct net *net)
{
	if (net->bk)
		net_backend(net)->teardown(net);
	free(net->scratch);
	net->scratch = NULL;
}

int net_set_batch_data(struct net *net, const float *x, const int32_t *labels)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	return net_backend(net)->set_batch_data(net, x, labels);
}

int net_stage_batch(struct net *net, const float *x, const int32_t *labels)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	if (!ops->stage_batch)
		return ops->set_batch_data(net, x, labels);
	GP_TRY(ops->stage_batch(net, x, labels));
	net->staged = 1;
	return 0;
}

int net_input_format(struct net *net, enum gp_dtype *dtype, int *nhwc)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	if (!ops->input_format)
		return gp_error(GP_EINVAL, "the %s backend takes no batch from GPU memory", ops->name);
	return ops->input_format(net, dtype, nhwc);
}

int net_set_batch_device(struct net *net, const void *x, enum gp_dtype dtype, int nhwc,
			 const int32_t *labels, void *read_event)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	if (!ops->set_batch_device)
		return gp_error(GP_EINVAL, "the %s backend takes no batch from GPU memory", ops->name);
	return ops->set_batch_device(net, x, dtype, nhwc, labels, read_event);
}

/* Take in a staged batch before the step that uses it. */
static int take_staged(struct net *net)
{
	if (!net->staged)
		return 0;
	net->staged = 0;
	return net_backend(net)->take_staged(net);
}

int net_forward(struct net *net, int training)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	GP_TRY(take_staged(net));
	const struct net_hooks *h = &net->hooks;
	for (int i = 1; i < net->n_nodes; i++) {
		if (h->node_begin)
			h->node_begin(h->user, net, i, PHASE_FORWARD);
		GP_TRY(ops->forward_node(net, i, training));
		if (h->node_end)
			h->node_end(h->user, net, i, PHASE_FORWARD);
		if (training && net->nodes[i].op == OP_BATCHNORM2D)
			net->nodes[i].bn_batches_tracked++;
	}
	return 0;
}

int net_loss(struct net *net, double *loss, int *correct)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	GP_TRY(net_backend(net)->loss(net, loss, correct));
	if (net->scaler.enabled)
		GP_TRY(net_backend(net)->scale_output_grad(net, net->n_nodes - 1, net->scaler.scale));
	return 0;
}

void net_enable_loss_scaling(struct net *net)
{
	net->scaler = (struct grad_scaler){ .enabled = 1, .scale = 65536.0, .growth_factor = 2.0,
					    .backoff_factor = 0.5, .growth_interval = 2000 };
}

/* Unscale and check the gradients; returns 1 when the step must be skipped, and
 * updates the scale as GradScaler.update does. */
static int scaler_unscale(struct net *net)
{
	struct grad_scaler *g = &net->scaler;
	int nonfinite = 0;
	GP_TRY(net_backend(net)->unscale_grads(net, 1.0 / g->scale, &nonfinite));
	if (nonfinite) {
		g->scale *= g->backoff_factor;
		g->growth_tracker = 0;
		g->skipped_steps++;
		return 1;
	}
	if (++g->growth_tracker == g->growth_interval) {
		g->scale *= g->growth_factor;
		g->growth_tracker = 0;
	}
	return 0;
}

int net_set_dist(struct net *net, struct dist *d, int sync_bn, size_t bucket_bytes)
{
	if (net->bk)
		return gp_error(GP_EINVAL, "net_set_dist: the net is already set up");
	net->dist = d;
	net->sync_bn = d && sync_bn;
	if (!d)
		return net_set_grad_buckets(net, 0, NULL, NULL);
	return net_set_grad_buckets(net, bucket_bytes ? bucket_bytes : NET_DIST_BUCKET_BYTES,
				    net->buckets.ready, net->buckets.user);
}

int net_set_grad_buckets(struct net *net, size_t bucket_bytes,
			 void (*ready)(void *user, const struct net *net, int bucket, size_t first,
				       size_t count),
			 void *user)
{
	struct grad_buckets *b = &net->buckets;
	memset(b, 0, sizeof(*b));
	if (!ready && !net->dist)
		return 0;
	size_t elems = bucket_bytes / sizeof(float) ? bucket_bytes / sizeof(float) : 1;
	size_t end = net->params_count;
	int low_node = net->n_nodes;
	/* walk the parameters backwards: the order in which backward produces them */
	for (int i = net->n_state - 1; i >= 0; i--) {
		const struct state_entry *e = &net->state[i];
		if (e->kind != STATE_PARAM)
			continue;
		if (e->node < low_node)
			low_node = e->node;
		if (end - e->offset >= elems || e->offset == 0) {
			if (b->n >= GP_MAX_BUCKETS)
				return gp_error(GP_EINVAL, "more than %d gradient buckets of %zu bytes",
						GP_MAX_BUCKETS, bucket_bytes);
			b->first[b->n] = e->offset;
			b->count[b->n] = end - e->offset;
			b->last_node[b->n] = low_node;
			b->n++;
			end = e->offset;
			low_node = net->n_nodes;
		}
	}
	b->ready = ready;
	b->user = user;
	return 0;
}

int net_backward(struct net *net)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	const struct net_hooks *h = &net->hooks;
	const struct grad_buckets *b = &net->buckets;
	int next_bucket = 0;
	for (int i = net->n_nodes - 1; i >= 1; i--) {
		if (net->nodes[i].t_dy >= 0) {
			if (h->node_begin)
				h->node_begin(h->user, net, i, PHASE_BACKWARD);
			GP_TRY(ops->backward_node(net, i));
			if (h->node_end)
				h->node_end(h->user, net, i, PHASE_BACKWARD);
		}
		while (next_bucket < b->n && b->last_node[next_bucket] >= i) {
			if (b->ready)
				b->ready(b->user, net, next_bucket, b->first[next_bucket],
					 b->count[next_bucket]);
			next_bucket++;
		}
	}
	return 0;
}

int net_sgd_step(struct net *net, const struct sgd_args *sgd)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	if (sgd->kind != net->optim.kind)
		return gp_error(GP_EINVAL, "a %s step on a net set up for %s", sgd->kind == OPTIM_ADAMW ? "AdamW" : "SGD",
				net->optim.kind == OPTIM_ADAMW ? "AdamW" : "SGD");
	if (net->scaler.enabled) {
		int skip = scaler_unscale(net);
		if (skip < 0)
			return skip;
		if (skip)
			return 0; /* inf or NaN in a gradient: no step, as GradScaler.step */
	}
	struct sgd_args a = *sgd;
	a.first_step = net->sgd_steps == 0;
	a.step = net->sgd_steps + 1;
	if (net->hooks.node_begin)
		net->hooks.node_begin(net->hooks.user, net, -1, PHASE_OPTIMIZER);
	GP_TRY(net_backend(net)->sgd_step(net, &a));
	if (net->hooks.node_end)
		net->hooks.node_end(net->hooks.user, net, -1, PHASE_OPTIMIZER);
	net->sgd_steps++;
	return 0;
}

int net_train_step(struct net *net, const struct sgd_args *sgd, double *loss, int *correct)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	GP_TRY(take_staged(net));
	/* a graph replay has no host points between layers: hooks, bucket observers and
	 * loss scaling (which decides on the host whether to step) run eagerly; the
	 * backend's own all-reduce of buckets is part of the graph */
	if (net->use_graphs && ops->train_step && !net->hooks.node_begin && !net->hooks.node_end &&
	    !net->buckets.ready && !net->scaler.enabled) {
		struct sgd_args a = *sgd;
		a.first_step = net->sgd_steps == 0;
		a.step = net->sgd_steps + 1;
		if (sgd->kind != net->optim.kind)
			return net_sgd_step(net, sgd); /* its error */
		int rc = ops->train_step(net, &a);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			for (int i = 0; i < net->n_nodes; i++)
				if (net->nodes[i].op == OP_BATCHNORM2D)
					net->nodes[i].bn_batches_tracked++;
			net->sgd_steps++;
			return loss || correct ? ops->read_loss(net, loss, correct) : 0;
		}
	}
	GP_TRY(net_forward(net, 1));
	GP_TRY(net_loss(net, loss, correct));
	GP_TRY(net_backward(net));
	return net_sgd_step(net, sgd);
}

int net_dist_time_allreduce(struct net *net, int iters, double *ms)
{
	*ms = 0;
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	const struct backend_ops *ops = net_backend(net);
	if (!net->dist || !ops->grad_allreduce || iters < 1)
		return 0;
	GP_TRY(net_wait(net));
	GP_TRY(ops->grad_allreduce(net)); /* the first may set up connections */
	GP_TRY(dist_barrier(net->dist));
	double t0 = gp_now_s();
	for (int i = 0; i < iters; i++)
		GP_TRY(ops->grad_allreduce(net));
	*ms = 1e3 * (gp_now_s() - t0) / iters;
	return 0;
}

int net_grad_accumulate(struct net *net, int micro, int k)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	if (k <= 1)
		return 0;
	if (k != net->optim.grad_accum || micro < 0 || micro >= k)
		return gp_error(GP_EINVAL, "micro-batch %d of %d on a net set up for %d", micro, k,
				net->optim.grad_accum);
	GP_TRY(net_backend(net)->grad_accum(net, micro == 0 ? GRAD_ACC_SAVE : micro < k - 1 ? GRAD_ACC_ADD
										       : GRAD_ACC_RESTORE));
	net->micro_batch = micro < k - 1 ? micro + 1 : 0;
	return 0;
}

int net_wait(struct net *net)
{
	const struct backend_ops *ops = net_backend(net);
	return net->bk && ops->wait ? ops->wait(net) : 0;
}

int net_sync_to_host(struct net *net)
{
	return net->bk ? net_backend(net)->sync_to_host(net) : 0;
}

int net_sync_from_host(struct net *net)
{
	return net->bk ? net_backend(net)->sync_from_host(net) : 0;
}

int net_optim_state_to_host(struct net *net, float *momentum, float *exp_avg_sq)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	GP_TRY(net_wait(net));
	return net_backend(net)->optim_state_to_host(net, momentum, exp_avg_sq);
}

int net_optim_state_from_host(struct net *net, const float *momentum, const float *exp_avg_sq)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	if ((exp_avg_sq != NULL) != (net->optim.kind == OPTIM_ADAMW))
		return gp_error(GP_EINVAL, "optimizer state %s exp_avg_sq for a net set up for %s",
				exp_avg_sq ? "with" : "without", net->optim.kind == OPTIM_ADAMW ? "AdamW" : "SGD");
	return net_backend(net)->optim_state_from_host(net, momentum, exp_avg_sq);
}

int net_grads_to_host(struct net *net, float *dst)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	return net_backend(net)->grads_to_host(net, dst);
}

int net_tensor_to_host(struct net *net, int node, int grad, float *dst)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	if (node < 0 || node >= net->n_nodes || (grad ? net->nodes[node].t_dy : net->nodes[node].t_y) < 0)
		return gp_error(GP_ENOTFOUND, "node %d has no %s", node, grad ? "gradient" : "output");
	return net_backend(net)->tensor_to_host(net, node, grad, dst);
}

int net_logits_to_host(struct net *net, float *dst)
{
	if (!net->bk)
		return gp_error(GP_EINVAL, "net is not set up");
	return net_backend(net)->logits_to_host(net, dst);
}

const char *net_node_label(const struct net *net, int node, char *buf, size_t cap)
{
	if (node < 0)
		snprintf(buf, cap, "optimizer.sgd");
	else if (net->nodes[node].name[0])
		snprintf(buf, cap, "%s", net->nodes[node].name);
	else
		snprintf(buf, cap, "%s#%d", op_name(net->nodes[node].op), node);
	return buf;
}
