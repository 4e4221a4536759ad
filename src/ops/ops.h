/* The op set of the engine: one enum, argument structs that carry every size a
 * kernel needs, shape inference, FLOP counts, and the CPU reference kernels.
 *
 * Conventions shared by every backend:
 * - activations are NCHW, contiguous; linear layers see x as N x in_features;
 * - forward kernels overwrite their output;
 * - backward kernels that produce an input gradient take `accumulate`:
 *   0 overwrites dx, 1 adds to it (an activation consumed twice, as a residual
 *   block's input is, receives the sum of both gradients);
 * - parameter gradients are always overwritten (one node owns each parameter);
 * - the CPU reference kernels exist for float (suffix _f32) and double (_f64):
 *   the double build is what finite differences check, the float build what
 *   trains. Both come from one source, src/ops/cpu/ref_kernels.inc. */
#ifndef GP_OPS_H
#define GP_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

enum op_type {
	OP_INPUT = 0,  /* the network's input image batch */
	OP_CONV2D,
	OP_BATCHNORM2D,
	OP_RELU,
	OP_RELU6,
	OP_MAXPOOL2D,
	OP_AVGPOOL_GLOBAL, /* adaptive average pool to 1x1 */
	OP_FLATTEN,
	OP_LINEAR,
	OP_ADD,
	OP_DROPOUT,
	OP_COUNT
};

const char *op_name(enum op_type op);

struct conv2d_args {
	int n, c_in, h_in, w_in;
	int c_out, h_out, w_out;
	int kh, kw, stride, pad, groups;
	int has_bias;
};

struct bn_args {
	int n, c, h, w;
	double eps;      /* 1e-5 */
	double momentum; /* 0.1: running = (1 - m) * running + m * batch */
	/* Set by a backend's plan: the activation fused after this batch norm has its
	 * output kept for nothing but its own backward, which kernels that take the mask
	 * from x never read (the CUDA backend's own 16-bit batch norms, bn16_rule.h). */
	int act_out_spare;
};

struct pool_args {
	int n, c, h_in, w_in, h_out, w_out;
	int k, stride, pad;
};
/* Max pooling keeps its argmax as the offset ky * k + kx in the window, one byte. */
#define MAXPOOL_K_MAX 15

struct linear_args {
	int n, in, out;
	int has_bias;
};

struct dropout_args {
	size_t count;
	double p; /* probability of zeroing */
};

/* The optimizers: torch.optim.SGD, and torch.optim.AdamW (amsgrad off). */
enum optim_kind { OPTIM_SGD = 0, OPTIM_ADAMW };

/* One optimizer step's arguments (the name is SGD's, which came first). */
struct sgd_args {
	double lr, momentum, dampening, weight_decay;
	int nesterov;
	int first_step; /* torch: the momentum buffer starts as a copy of the gradient (AdamW:
			 * its moments start at zero) */
	/* AdamW (kind OPTIM_ADAMW): beta1, beta2 and eps as torch.optim.AdamW, weight_decay
	 * decoupled (param *= 1 - lr wd); step counts from 1 for the bias corrections. */
	enum optim_kind kind;
	double beta1, beta2, eps;
	long long step;
	/* Before the update each gradient is multiplied by grad_scale (0 means 1; 1/K for
	 * K accumulated micro-batches, as dividing each loss by K), then, when clip_norm >
	 * 0, by torch.nn.utils.clip_grad_norm_'s coefficient over all of them:
	 * min(1, clip_norm / (total L2 norm + 1e-6)). */
	double grad_scale, clip_norm;
};

/* What a net's set-up allocates for its optimizer: AdamW's second moments beside the
 * momentum buffer (which holds AdamW's first moments), a gradient accumulation buffer
 * for grad_accum > 1 micro-batches per step. dynamic: the step's rate or momentum
 * changes from step to step (a schedule), which a GPU step then reads from device
 * memory, so that a captured step stays valid. */
struct optim_setup {
	enum optim_kind kind;
	int grad_accum;
	int dynamic;
};

/* The factor every gradient is multiplied by before the update (struct sgd_args'
 * grad_scale and clip_norm), given the sum of squares of the gradients as they are. */
static inline double optim_grad_factor(const struct sgd_args *a, double sumsq)
{
	double s = a->grad_scale > 0 ? a->grad_scale : 1.0;
	if (a->clip_norm > 0) {
		double coef = a->clip_norm / (s * sqrt(sumsq) + 1e-6);
		s *= coef < 1.0 ? coef : 1.0;
	}
	return s;
}

/* Gradient accumulation over micro-batches (backend.h's grad_accum): after the first
 * micro-batch's backward the gradients are saved, after each further one but the last
 * added, and after the last the saved sum is added back into the gradients. */
enum grad_accum_mode { GRAD_ACC_SAVE = 0, GRAD_ACC_ADD, GRAD_ACC_RESTORE };

/* Output size of a convolution or pooling window along one axis (PyTorch's formula,
 * floor mode, dilation 1). */
static inline int conv_out_size(int in, int k, int stride, int pad)
{
	return (in + 2 * pad - k) / stride + 1;
}

/* Multiply-accumulates of one forward pass (as model-zoo tables count them). */
double conv2d_macs(const struct conv2d_args *a);
double linear_macs(const struct linear_args *a);

/* Bytes a convolution or linear layer must move through memory at the least: each
 * tensor it reads or writes once, activations in act_bytes per element, weights (and
 * their gradients) in w_bytes. Forward: x, w, y. Backward: the data gradient (dy, w ->
 * dx; only with_dx) and the weight gradient (x, dy -> dw). The roofline's memory side
 * (report/roofline.h). */
double conv2d_bytes(const struct conv2d_args *a, int backward, int with_dx, double act_bytes,
		    double w_bytes);
double linear_bytes(const struct linear_args *a, int backward, int with_dx, double act_bytes,
		    double w_bytes);

/* CPU reference kernels. Argmax indices of max pooling are int32 offsets into the
 * input plane; dropout masks are uint8 (1 = kept).
 * Batch norm over several ranks (SyncBatchNorm) splits the statistics into sums that
 * the ranks add up: bn_chan_sums gives per channel the sum of x (center NULL) or of
 * (x - center)^2; bn_bwd_sums the sums of dy and dy * xhat; bn_bwd_dx the input
 * gradient from the summed values over count elements in all. With one rank they
 * compute what bn_fwd_train and bn_bwd compute, in the same order. */
#define GP_CPU_KERNELS(T, S)                                                            \
	void conv2d_fwd_cpu_##S(const struct conv2d_args *a, const T *x, const T *w,      \
				const T *b, T *y);                                        \
	void conv2d_bwd_data_cpu_##S(const struct conv2d_args *a, const T *dy,            \
				     const T *w, T *dx, int accumulate);                  \
	void conv2d_bwd_filter_cpu_##S(const struct conv2d_args *a, const T *x,           \
				       const T *dy, T *dw, T *db);                        \
	void bn_fwd_train_cpu_##S(const struct bn_args *a, const T *x, const T *gamma,    \
				  const T *beta, T *y, T *save_mean, T *save_invstd,      \
				  T *running_mean, T *running_var);                       \
	void bn_apply_cpu_##S(const struct bn_args *a, const T *x, const T *gamma,        \
			      const T *beta, const T *mean, const T *invstd, T *y);       \
	void bn_fwd_eval_cpu_##S(const struct bn_args *a, const T *x, const T *gamma,     \
				 const T *beta, const T *running_mean,                    \
				 const T *running_var, T *y);                             \
	void bn_bwd_cpu_##S(const struct bn_args *a, const T *x, const T *dy,             \
			    const T *gamma, const T *save_mean, const T *save_invstd,     \
			    T *dx, int accumulate, T *dgamma, T *dbeta);                  \
	void bn_chan_sums_cpu_##S(const struct bn_args *a, const T *x,                    \
				  const double *center, double *out);                     \
	void bn_bwd_sums_cpu_##S(const struct bn_args *a, const T *x, const T *dy,        \
				 const T *save_mean, const T *save_invstd,                \
				 double *sum_dy, double *sum_dy_xhat);                    \
	void bn_bwd_dx_cpu_##S(const struct bn_args *a, const T *x, const T *dy,          \
			       const T *gamma, const T *save_mean, const T *save_invstd,  \
			       double count, const double *sum_dy,                        \
			       const double *sum_dy_xhat, T *dx, int accumulate);         \
	void relu_fwd_cpu_##S(size_t count, const T *x, T *y);                            \
	void relu_bwd_cpu_##S(size_t count, const T *y, const T *dy, T *dx,               \
			      int accumulate);                                            \
	void relu6_fwd_cpu_##S(size_t count, const T *x, T *y);                           \
	void relu6_bwd_cpu_##S(size_t count, const T *y, const T *dy, T *dx,              \
			       int accumulate);                                           \
	void maxpool_fwd_cpu_##S(const struct pool_args *a, const T *x, T *y,             \
				 uint8_t *argmax);                                        \
	void maxpool_bwd_cpu_##S(const struct pool_args *a, const T *dy,                  \
				 const uint8_t *argmax, T *dx, int accumulate);           \
	void avgpool_global_fwd_cpu_##S(int n, int c, int hw, const T *x, T *y);          \
	void avgpool_global_bwd_cpu_##S(int n, int c, int hw, const T *dy, T *dx,         \
					int accumulate);                                  \
	void linear_fwd_cpu_##S(const struct linear_args *a, const T *x, const T *w,      \
				const T *b, T *y);                                        \
	void linear_bwd_data_cpu_##S(const struct linear_args *a, const T *dy,            \
				     const T *w, T *dx, int accumulate);                  \
	void linear_bwd_weight_cpu_##S(const struct linear_args *a, const T *x,           \
				       const T *dy, T *dw, T *db);                        \
	void add_fwd_cpu_##S(size_t count, const T *a, const T *b, T *y);                 \
	void grad_pass_cpu_##S(size_t count, const T *dy, T *dx, int accumulate);         \
	void dropout_fwd_cpu_##S(const struct dropout_args *a, const uint8_t *mask,       \
				 const T *x, T *y);                                       \
	void dropout_bwd_cpu_##S(const struct dropout_args *a, const uint8_t *mask,       \
				 const T *dy, T *dx, int accumulate);                     \
	double softmax_xent_cpu_##S(int n, int k, const T *logits, const int32_t *labels, \
				    T *dlogits, int *correct);                            \
	void sgd_step_cpu_##S(const struct sgd_args *a, size_t count, T *param,           \
			      const T *grad, T *momentum_buf);                            \
	void adamw_step_cpu_##S(const struct sgd_args *a, size_t count, T *param,         \
				const T *grad, T *exp_avg, T *exp_avg_sq);                \
	double softmax_xent_ls_cpu_##S(int n, int k, const T *logits,                     \
				       const int32_t *labels, double smoothing,           \
				       T *dlogits, int *correct);                         \
	double sumsq_cpu_##S(size_t count, const T *x);                                   \
	void scale_cpu_##S(size_t count, T *x, double factor);                            \
	void grad_accum_cpu_##S(enum grad_accum_mode mode, size_t count, T *grad, T *acc);

GP_CPU_KERNELS(float, f32)
GP_CPU_KERNELS(double, f64)

/* Dropout mask: each element kept with probability 1 - p, drawn from seed. */
void dropout_mask_cpu(size_t count, double p, uint64_t seed, uint8_t *mask);

/* Fast float paths (im2col + BLAS, threads), checked against the reference in
 * tests and used by the CPU backend for training in float. */
void conv2d_fwd_fast_f32(const struct conv2d_args *a, const float *x, const float *w,
			 const float *b, float *y, float *workspace);
void conv2d_bwd_data_fast_f32(const struct conv2d_args *a, const float *dy,
			      const float *w, float *dx, int accumulate, float *workspace);
void conv2d_bwd_filter_fast_f32(const struct conv2d_args *a, const float *x,
				const float *dy, float *dw, float *db, float *workspace);
/* Scratch floats the fast conv needs for these arguments (0 if none). */
size_t conv2d_fast_workspace_floats(const struct conv2d_args *a);
void linear_fwd_fast_f32(const struct linear_args *a, const float *x, const float *w,
			 const float *b, float *y);
void linear_bwd_data_fast_f32(const struct linear_args *a, const float *dy,
			      const float *w, float *dx, int accumulate);
void linear_bwd_weight_fast_f32(const struct linear_args *a, const float *x,
				const float *dy, float *dw, float *db);

#endif
