/* Batch norm through cuDNN's spatial mode (per-channel statistics over N, H, W).
 * It matches PyTorch: the running variance is updated with the unbiased batch
 * variance (m / (m - 1) correction), the saved statistics are the batch mean and
 * 1 / sqrt(biased variance + eps), and exponentialAverageFactor is PyTorch's momentum.
 * (PyTorch's own cuDNN path makes the same call without any correction.)
 * Tensors of more than 2^31 - 1 elements, which cuDNN cannot describe, go to own
 * kernels (bn.cu) with the same semantics; so does, in FP32 NCHW, a batch norm fused
 * with the activation after it (cuDNN fuses only 16-bit NHWC). In 16-bit NHWC the own
 * kernels of bn_nhwc16.cu take the training batch norms that bn16_rule.h gives them
 * (GPUPERF_BN16), fused or not; evaluation stays on cuDNN. */
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "ops/cuda/bn16_rule.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"

static const float one = 1.0f, zero = 0.0f;
static int force_own;

void bn_cuda_force_own(int on)
{
	force_own = on;
}

/* FP32 NCHW: fused batch norms run on the own kernels. */
static int bn_own_fused(const struct cuda_ctx *ctx)
{
	return ctx->act_dtype == GP_F32 && !ctx->nhwc;
}

/* FP32 NCHW batch norms take the own kernels: they are faster than cuDNN's spatial FP32
 * ones (docs/log/perf-log.md, fifth session), unless the net chose cuDNN's (ctx->bn_cudnn, a
 * test's yardstick). cuDNN describes tensors with int sizes: larger ones take the own
 * kernels in any case. */
static int bn_own(const struct cuda_ctx *ctx, const struct bn_args *a)
{
	return force_own || (bn_own_fused(ctx) && !ctx->bn_cudnn) ||
	       (size_t)a->n * a->c * a->h * a->w > (size_t)INT32_MAX;
}

static int bn_describe(struct cuda_ctx *ctx, const struct bn_args *a);

/* 16-bit NHWC training batch norm a, followed by op, on the own kernels. The same
 * answer for the plan and for every call of a node, which the fused calls need: a
 * cuDNN backward reads the reserve space of a cuDNN forward. */
static int bn_own16(const struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op)
{
	return ctx->nhwc && ctx->act_dtype != GP_F32 && !force_own &&
	       bn16_own_wanted(ctx->bn16, a->n, a->c, a->h, a->w, op == BN_FUSE_RELU6,
			       a->act_out_spare && (op == BN_FUSE_RELU || op == BN_FUSE_RELU6));
}

int bn16_routed_own_cuda(const struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op)
{
	return bn_own16(ctx, a, op);
}

int bn_fused_mask_from_x_cuda(const struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op)
{
	return (op == BN_FUSE_RELU || op == BN_FUSE_RELU6) && (bn_own16(ctx, a, op) || bn_own_fused(ctx));
}

/* The own 16-bit kernels' scratch: the shared workspace, reserved by the plan. */
static int bn16_scratch(struct cuda_ctx *ctx, const struct bn_args *a, void **scratch)
{
	if (ctx->workspace_bytes < bn16_scratch_bytes(a->c))
		return gp_error(GP_EINVAL, "16-bit batch norm of %d channels: workspace not reserved "
				"(bn_plan_cuda)", a->c);
	*scratch = ctx->workspace;
	return 0;
}

/* NHWC with 16-bit data: cuDNN's persistent spatial kernels through the Ex calls (what
 * PyTorch uses for channels-last half batch norm); the plain calls' NHWC path is a
 * generic one (1 s per ResNet-50 step, docs/cuda.md). Used only when the call needs no
 * reserve space (none for a plain batch norm). */
static int bn_ex(const struct cuda_ctx *ctx)
{
	return ctx->nhwc && ctx->act_dtype != GP_F32;
}

/* Workspace the Ex calls need for a's shape (bn_describe first); 1 when they need
 * reserve space, so the plain calls must be used. */
static int bn_ex_workspace(struct cuda_ctx *ctx, size_t *bytes)
{
	size_t fwd = 0, bwd = 0, reserve = 0;
	CUDNN_TRY(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, NULL, ctx->bn_x_desc,
		&reserve));
	if (reserve)
		return 1;
	CUDNN_TRY(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, ctx->bn_x_desc, NULL,
		ctx->bn_x_desc, ctx->bn_param_desc, NULL, &fwd));
	CUDNN_TRY(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, ctx->bn_x_desc, NULL,
		ctx->bn_x_desc, NULL, ctx->bn_x_desc, ctx->bn_param_desc, NULL, &bwd));
	*bytes = fwd > bwd ? fwd : bwd;
	return 0;
}

int bn_plan_cuda(struct cuda_ctx *ctx, const struct bn_args *a)
{
	if (bn_own16(ctx, a, BN_FUSE_NONE))
		return cuda_workspace_reserve(ctx, bn16_scratch_bytes(a->c));
	if (!bn_own(ctx, a) && bn_ex(ctx)) {
		size_t ws = 0;
		GP_TRY(bn_describe(ctx, a));
		int rc = bn_ex_workspace(ctx, &ws);
		if (rc < 0)
			return rc;
		return rc == 0 ? cuda_workspace_reserve(ctx, ws) : 0;
	}
	if (bn_own(ctx, a) && ctx->act_dtype != GP_F32)
		return gp_error(GP_EUNSUPPORTED, "batch norm of %zu elements in 16 bits: more than cuDNN describes",
				(size_t)a->n * a->c * a->h * a->w);
	return bn_own(ctx, a) ? cuda_workspace_reserve(ctx, bn_own_scratch_bytes(a->c)) : 0;
}

/* The own kernels' scratch is the shared workspace, reserved by bn_plan_cuda. */
static int bn_scratch(struct cuda_ctx *ctx, const struct bn_args *a, void **scratch)
{
	if (ctx->workspace_bytes < bn_own_scratch_bytes(a->c))
		return gp_error(GP_EINVAL, "batch norm of %d channels: workspace not reserved (bn_plan_cuda)", a->c);
	*scratch = ctx->workspace;
	return 0;
}

static int bn_describe(struct cuda_ctx *ctx, const struct bn_args *a)
{
	/* 16-bit activations keep float statistics and parameters, as autocast does */
	cudnnDataType_t dt = ctx->act_dtype == GP_F16 ? CUDNN_DATA_HALF
			     : ctx->act_dtype == GP_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
	CUDNN_TRY(cudnnSetTensor4dDescriptor(ctx->bn_x_desc, ctx->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
					     dt, a->n, a->c, a->h, a->w));
	CUDNN_TRY(cudnnSetTensor4dDescriptor(ctx->bn_param_desc, CUDNN_TENSOR_NCHW,
					     CUDNN_DATA_FLOAT, 1, a->c, 1, 1));
	if (a->eps < CUDNN_BN_MIN_EPSILON)
		return gp_error(GP_EUNSUPPORTED, "batch norm eps %g is below cuDNN's minimum %g",
				a->eps, (double)CUDNN_BN_MIN_EPSILON);
	return 0;
}

int bn_fwd_train_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x,
		      const float *gamma, const float *beta, void *y, float *save_mean,
		      float *save_invstd, float *running_mean, float *running_var)
{
	if (bn_own16(ctx, a, BN_FUSE_NONE)) {
		void *scratch = NULL;
		GP_TRY(bn16_scratch(ctx, a, &scratch));
		return bn16_fwd_train_cuda(ctx->stream, ctx->act_dtype, a, x, NULL, BN_APPLY_LINEAR, gamma, beta, y,
					   save_mean, save_invstd, running_mean, running_var, scratch);
	}
	if (bn_own(ctx, a)) {
		void *scratch = NULL;
		GP_TRY(bn_scratch(ctx, a, &scratch));
		return bn_fwd_train_own_cuda(ctx->stream, a, x, NULL, BN_APPLY_LINEAR, gamma, beta, y, save_mean,
					     save_invstd, running_mean, running_var, scratch);
	}
	GP_TRY(bn_describe(ctx, a));
	size_t ws = 0;
	if (bn_ex(ctx) && bn_ex_workspace(ctx, &ws) == 0 && ws <= ctx->workspace_bytes) {
		CUDNN_TRY(cudnnBatchNormalizationForwardTrainingEx(
			ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, &one, &zero,
			ctx->bn_x_desc, x, NULL, NULL, ctx->bn_x_desc, y, ctx->bn_param_desc, gamma, beta,
			a->momentum, running_mean, running_var, a->eps, save_mean, save_invstd, NULL,
			ctx->workspace, ws, NULL, 0));
		return 0;
	}
	CUDNN_TRY(cudnnBatchNormalizationForwardTraining(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, ctx->bn_x_desc, x, ctx->bn_x_desc,
		y, ctx->bn_param_desc, gamma, beta, a->momentum, running_mean, running_var, a->eps,
		save_mean, save_invstd));
	return 0;
}

int bn_fwd_eval_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x,
		     const float *gamma, const float *beta, const float *running_mean,
		     const float *running_var, void *y)
{
	if (bn_own(ctx, a))
		return bn_fwd_eval_own_cuda(ctx->stream, a, x, gamma, beta, running_mean, running_var, y);
	GP_TRY(bn_describe(ctx, a));
	CUDNN_TRY(cudnnBatchNormalizationForwardInference(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, ctx->bn_x_desc, x, ctx->bn_x_desc,
		y, ctx->bn_param_desc, gamma, beta, running_mean, running_var, a->eps));
	return 0;
}

/* betaDataDiff = accumulate adds into dx; the parameter gradients are overwritten. */
int bn_bwd_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x, const void *dy,
		const float *gamma, const float *save_mean, const float *save_invstd, void *dx,
		int accumulate, float *dgamma, float *dbeta)
{
	if (bn_own16(ctx, a, BN_FUSE_NONE)) {
		void *scratch = NULL;
		GP_TRY(bn16_scratch(ctx, a, &scratch));
		return bn16_bwd_cuda(ctx->stream, ctx->act_dtype, a, BN_APPLY_LINEAR, x, dy, gamma, NULL, save_mean,
				     save_invstd, dx, accumulate, dgamma, dbeta, scratch);
	}
	if (bn_own(ctx, a)) {
		void *scratch = NULL;
		GP_TRY(bn_scratch(ctx, a, &scratch));
		return bn_bwd_own_cuda(ctx->stream, a, BN_APPLY_LINEAR, x, dy, gamma, NULL, save_mean, save_invstd,
				       dx, accumulate, dgamma, dbeta, scratch);
	}
	GP_TRY(bn_describe(ctx, a));
	size_t ws = 0;
	if (bn_ex(ctx) && bn_ex_workspace(ctx, &ws) == 0 && ws <= ctx->workspace_bytes) {
		CUDNN_TRY(cudnnBatchNormalizationBackwardEx(
			ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN, &one,
			accumulate ? &one : &zero, &one, &zero, ctx->bn_x_desc, x, NULL, NULL, ctx->bn_x_desc, dy,
			NULL, NULL, ctx->bn_x_desc, dx, ctx->bn_param_desc, gamma, NULL, dgamma, dbeta, a->eps,
			save_mean, save_invstd, NULL, ctx->workspace, ws, NULL, 0));
		return 0;
	}
	CUDNN_TRY(cudnnBatchNormalizationBackward(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, accumulate ? &one : &zero, &one, &zero,
		ctx->bn_x_desc, x, ctx->bn_x_desc, dy, ctx->bn_x_desc, dx, ctx->bn_param_desc, gamma,
		dgamma, dbeta, a->eps, save_mean, save_invstd));
	return 0;
}

int bn_bwd_out_masks_cuda(const struct cuda_ctx *ctx, const struct bn_args *a)
{
	return bn_own16(ctx, a, BN_FUSE_NONE);
}

int bn_bwd_out_masked_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x, const void *y,
			   const void *dy, void *dz, const float *gamma, const float *save_mean,
			   const float *save_invstd, void *dx, int accumulate, float *dgamma, float *dbeta)
{
	void *scratch = NULL;
	if (!bn_own16(ctx, a, BN_FUSE_NONE))
		return gp_error(GP_EUNSUPPORTED, "batch norm of %dx%dx%dx%d: its backward takes no ReLU mask "
				"from the output on cuDNN (bn_bwd_out_masks_cuda)", a->n, a->c, a->h, a->w);
	GP_TRY(bn16_scratch(ctx, a, &scratch));
	return bn16_bwd_out_masked_cuda(ctx->stream, ctx->act_dtype, a, x, y, dy, dz, gamma, save_mean, save_invstd,
					dx, accumulate, dgamma, dbeta, scratch);
}

/* --- fused batch norm + (add +) ReLU: the Ex calls' other op sets --------------------- */

static cudnnBatchNormOps_t bn_ops(enum bn_fuse op)
{
	return op == BN_FUSE_ADD_RELU			  ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
	       : op == BN_FUSE_RELU || op == BN_FUSE_RELU6 ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
							   : CUDNN_BATCHNORM_OPS_BN;
}

static enum bn_apply_act bn_apply_of(enum bn_fuse op)
{
	return op == BN_FUSE_RELU6 ? BN_APPLY_RELU6 : op == BN_FUSE_NONE ? BN_APPLY_LINEAR : BN_APPLY_RELU;
}

static cudnnActivationDescriptor_t bn_act(const struct cuda_ctx *ctx, enum bn_fuse op)
{
	return op == BN_FUSE_RELU6 ? ctx->bn_relu6_desc : ctx->bn_relu_desc;
}

/* Workspace and reserve space of a fused op for a's shape (bn_describe first); a
 * status other than success means cuDNN does not run it. */
static cudnnStatus_t bn_fuse_sizes(struct cuda_ctx *ctx, enum bn_fuse op, size_t *ws, size_t *reserve)
{
	cudnnBatchNormOps_t ops = bn_ops(op);
	cudnnTensorDescriptor_t z = op == BN_FUSE_ADD_RELU ? ctx->bn_x_desc : NULL;
	size_t fwd = 0, bwd = 0;
	cudnnStatus_t st = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, bn_act(ctx, op), ctx->bn_x_desc, reserve);
	if (st == CUDNN_STATUS_SUCCESS)
		st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
			ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, ctx->bn_x_desc, z, ctx->bn_x_desc,
			ctx->bn_param_desc, bn_act(ctx, op), &fwd);
	/* the add's backward stays plain: only BN + ReLU (ReLU6) runs fused backward */
	if (st == CUDNN_STATUS_SUCCESS && op != BN_FUSE_ADD_RELU)
		st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
			ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, ctx->bn_x_desc, ctx->bn_x_desc,
			ctx->bn_x_desc, NULL, ctx->bn_x_desc, ctx->bn_param_desc, bn_act(ctx, op), &bwd);
	*ws = fwd > bwd ? fwd : bwd;
	return st;
}

int bn_fuse_plan_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op, size_t *reserve_bytes)
{
	*reserve_bytes = 0;
	if (op != BN_FUSE_NONE && bn_own16(ctx, a, op)) {
		GP_TRY(cuda_workspace_reserve(ctx, bn16_scratch_bytes(a->c)));
		return 1;
	}
	if (op != BN_FUSE_NONE && bn_own_fused(ctx)) {
		GP_TRY(cuda_workspace_reserve(ctx, bn_own_scratch_bytes(a->c)));
		return 1;
	}
	if (op == BN_FUSE_NONE || bn_own(ctx, a) || !bn_ex(ctx))
		return 0;
	GP_TRY(bn_describe(ctx, a));
	size_t ws = 0, reserve = 0;
	if (bn_fuse_sizes(ctx, op, &ws, &reserve) != CUDNN_STATUS_SUCCESS)
		return 0;
	GP_TRY(cuda_workspace_reserve(ctx, ws));
	*reserve_bytes = reserve;
	return 1;
}

/* Describe a's tensors for a fused call and check that bn_fuse_plan_cuda prepared it
 * (workspace reserved, reserve space big enough); *ws: the workspace the call takes. */
static int bn_fuse_ready(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op, size_t reserve_bytes,
			 size_t *ws)
{
	size_t need = 0;
	GP_TRY(bn_describe(ctx, a));
	if (bn_fuse_sizes(ctx, op, ws, &need) != CUDNN_STATUS_SUCCESS || *ws > ctx->workspace_bytes ||
	    need > reserve_bytes)
		return gp_error(GP_EUNSUPPORTED, "fused batch norm of %dx%dx%dx%d: not planned (bn_fuse_plan_cuda)",
				a->n, a->c, a->h, a->w);
	return 0;
}

int bn_fwd_train_fused_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op,
			    const void *x, const void *z, const float *gamma, const float *beta, void *y,
			    float *save_mean, float *save_invstd, float *running_mean, float *running_var,
			    void *reserve, size_t reserve_bytes)
{
	size_t ws = 0;
	if (bn_own16(ctx, a, op)) {
		void *scratch = NULL;
		GP_TRY(bn16_scratch(ctx, a, &scratch));
		return bn16_fwd_train_cuda(ctx->stream, ctx->act_dtype, a, x, op == BN_FUSE_ADD_RELU ? z : NULL,
					   bn_apply_of(op), gamma, beta, y, save_mean, save_invstd, running_mean,
					   running_var, scratch);
	}
	if (bn_own_fused(ctx)) {
		void *scratch = NULL;
		GP_TRY(bn_scratch(ctx, a, &scratch));
		return bn_fwd_train_own_cuda(ctx->stream, a, x, op == BN_FUSE_ADD_RELU ? z : NULL, bn_apply_of(op),
					     gamma, beta, y, save_mean, save_invstd, running_mean, running_var,
					     scratch);
	}
	GP_TRY(bn_fuse_ready(ctx, a, op, reserve_bytes, &ws));
	CUDNN_TRY(cudnnBatchNormalizationForwardTrainingEx(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, bn_ops(op), &one, &zero, ctx->bn_x_desc, x,
		op == BN_FUSE_ADD_RELU ? ctx->bn_x_desc : NULL, op == BN_FUSE_ADD_RELU ? z : NULL, ctx->bn_x_desc, y,
		ctx->bn_param_desc, gamma, beta, a->momentum, running_mean, running_var, a->eps, save_mean,
		save_invstd, bn_act(ctx, op), ctx->workspace, ws, reserve, reserve_bytes));
	return 0;
}

int bn_add_bn_relu_own_cuda(const struct cuda_ctx *ctx, const struct bn_args *a)
{
	return bn_own16(ctx, a, BN_FUSE_ADD_RELU) && bn_own16(ctx, a, BN_FUSE_NONE);
}

int bn_fwd_stats_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op, const void *x,
		      float *save_mean, float *save_invstd, float *running_mean, float *running_var)
{
	void *scratch = NULL;
	if (!bn_own16(ctx, a, op))
		return gp_error(GP_EUNSUPPORTED, "batch norm statistics alone: the own 16-bit kernels only");
	GP_TRY(bn16_scratch(ctx, a, &scratch));
	return bn16_stats_cuda(ctx->stream, ctx->act_dtype, a, x, save_mean, save_invstd, running_mean, running_var,
			       scratch);
}

int bn_fwd_train_add_bn_relu_cuda(struct cuda_ctx *ctx, const struct bn_args *a, const void *x, const void *z,
				  const float *gamma, const float *beta, const struct bn_norm *zn, void *y,
				  float *save_mean, float *save_invstd, float *running_mean, float *running_var)
{
	if (!bn_add_bn_relu_own_cuda(ctx, a))
		return gp_error(GP_EUNSUPPORTED, "batch norm join with a normalized identity: the own 16-bit kernels only");
	GP_TRY(bn_fwd_stats_cuda(ctx, a, BN_FUSE_ADD_RELU, x, save_mean, save_invstd, running_mean, running_var));
	return bn_apply_norm_id_cuda(ctx->stream, ctx->act_dtype, 1, a->n, a->c, a->h * a->w, x, z, gamma, beta,
				     save_mean, save_invstd, zn, BN_APPLY_RELU, y);
}

int bn_bwd_relu_fused_cuda(struct cuda_ctx *ctx, const struct bn_args *a, enum bn_fuse op, const void *x, const void *y,
			   const void *dy, const float *gamma, const float *beta, const float *save_mean,
			   const float *save_invstd, void *dx, int accumulate, float *dgamma, float *dbeta,
			   void *reserve, size_t reserve_bytes)
{
	if (op == BN_FUSE_ADD_RELU)
		return gp_error(GP_EINVAL, "fused batch norm backward: the add's runs plain");
	size_t ws = 0;
	if (bn_own16(ctx, a, op)) { /* the mask comes from x; y is not read */
		void *scratch = NULL;
		GP_TRY(bn16_scratch(ctx, a, &scratch));
		return bn16_bwd_cuda(ctx->stream, ctx->act_dtype, a, bn_apply_of(op), x, dy, gamma, beta, save_mean,
				     save_invstd, dx, accumulate, dgamma, dbeta, scratch);
	}
	if (bn_own_fused(ctx)) { /* the mask comes from x; y is not read */
		void *scratch = NULL;
		GP_TRY(bn_scratch(ctx, a, &scratch));
		return bn_bwd_own_cuda(ctx->stream, a, bn_apply_of(op), x, dy, gamma, beta, save_mean, save_invstd,
				       dx, accumulate, dgamma, dbeta, scratch);
	}
	GP_TRY(bn_fuse_ready(ctx, a, op, reserve_bytes, &ws));
	CUDNN_TRY(cudnnBatchNormalizationBackwardEx(
		ctx->cudnn, CUDNN_BATCHNORM_SPATIAL_PERSISTENT, bn_ops(op), &one,
		accumulate ? &one : &zero, &one, &zero, ctx->bn_x_desc, x, ctx->bn_x_desc, y, ctx->bn_x_desc, dy,
		NULL, NULL, ctx->bn_x_desc, dx, ctx->bn_param_desc, gamma, beta, dgamma, dbeta, a->eps, save_mean,
		save_invstd, bn_act(ctx, op), ctx->workspace, ws, reserve, reserve_bytes));
	return 0;
}
