/* The optimizer step: torch.optim.SGD over the flat float parameter, gradient and
 * momentum arrays in one launch (float4 where aligned); and beyond plain SGD, one launch
 * of SGD or AdamW with the gradient scale (1/K over K micro-batches) and
 * clip_grad_norm_'s coefficient folded in, its changing hyperparameters read from
 * device memory so that a captured step stays valid while a schedule moves the rate;
 * the gradients' sum of squares in a fixed order; gradient accumulation between
 * micro-batches. */
#include <math.h>
#include <stdint.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "ops/ops.h"
}
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_util.cuh"

/* --- SGD over the flat arrays ------------------------------------------------------------ */
struct sgd_k {
	float lr, momentum, dampening, weight_decay;
	int nesterov, first_step;
};

/* torch.optim.SGD for one element; *buf is the momentum buffer (unused without momentum). */
__device__ static float sgd_one(float p, float g, float *buf, struct sgd_k k)
{
	float d = k.weight_decay != 0.0f ? g + k.weight_decay * p : g;
	if (k.momentum != 0.0f) {
		float b = k.first_step ? d : k.momentum * *buf + (1.0f - k.dampening) * d;
		*buf = b;
		d = k.nesterov ? d + k.momentum * b : b;
	}
	return p - k.lr * d;
}

__global__ static void sgd_kernel(size_t count, float *param, const float *grad, float *mbuf,
				  struct sgd_k k, int vec)
{
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t done = 0;
	if (vec) {
		size_t n4 = count / 4;
		float4 *p4 = (float4 *)param;
		const float4 *g4 = (const float4 *)grad;
		float4 *b4 = (float4 *)mbuf;
		for (size_t i = tid; i < n4; i += stride) {
			float4 p = p4[i], g = g4[i];
			float4 b = b4 ? b4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			p.x = sgd_one(p.x, g.x, &b.x, k);
			p.y = sgd_one(p.y, g.y, &b.y, k);
			p.z = sgd_one(p.z, g.z, &b.z, k);
			p.w = sgd_one(p.w, g.w, &b.w, k);
			p4[i] = p;
			if (b4)
				b4[i] = b;
		}
		done = n4 * 4;
	}
	for (size_t i = done + tid; i < count; i += stride) {
		float b = mbuf ? mbuf[i] : 0.0f;
		param[i] = sgd_one(param[i], grad[i], &b, k);
		if (mbuf)
			mbuf[i] = b;
	}
}

extern "C" int sgd_step_cuda(cudaStream_t s, const struct sgd_args *a, size_t count, float *param,
			     const float *grad, float *momentum_buf)
{
	if (a->momentum != 0.0 && !momentum_buf)
		return gp_error(GP_EINVAL, "SGD with momentum %g needs a momentum buffer", a->momentum);
	if (!count)
		return 0;
	struct sgd_k k = { (float)a->lr, (float)a->momentum, (float)a->dampening,
			   (float)a->weight_decay, a->nesterov, a->first_step };
	float *mbuf = a->momentum != 0.0 ? momentum_buf : NULL;
	int vec = ((uintptr_t)param % 16 == 0) && ((uintptr_t)grad % 16 == 0) &&
		  ((uintptr_t)mbuf % 16 == 0);
	sgd_kernel<<<grid_for(vec ? count / 4 + 4 : count), BLOCK, 0, s>>>(count, param, grad, mbuf,
									    k, vec);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- beyond plain SGD: AdamW, clipping, accumulation ----------------------------------- */
__global__ static void hyper_set_kernel(double *hyper, double lr, double momentum, double beta1, double step)
{
	hyper[0] = lr;
	hyper[1] = momentum;
	hyper[2] = beta1;
	hyper[3] = step;
}

extern "C" int optim_hyper_set_cuda(cudaStream_t s, double *hyper, const struct sgd_args *a)
{
	hyper_set_kernel<<<1, 1, 0, s>>>(hyper, a->lr, a->momentum, a->beta1, (double)(a->step > 0 ? a->step : 1));
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* Per block a partial sum in double, then one block adds the partials in order. */
__global__ static void sumsq_part_kernel(size_t count, const float *x, double *partials)
{
	double acc = 0.0;
	FOR_EACH(i, count)
		acc += (double)x[i] * x[i];
	acc = block_sum_d(acc);
	if (threadIdx.x == 0)
		partials[blockIdx.x] = acc;
}

__global__ static void sumsq_total_kernel(int n, const double *partials, double *sumsq)
{
	double acc = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		acc += partials[i];
	acc = block_sum_d(acc);
	if (threadIdx.x == 0)
		*sumsq = acc;
}

extern "C" int sumsq_cuda(cudaStream_t s, size_t count, const float *x, double *partials, double *sumsq)
{
	sumsq_part_kernel<<<OPTIM_SUMSQ_BLOCKS, BLOCK, 0, s>>>(count, x, partials);
	CUDA_CHECK_LAUNCH();
	sumsq_total_kernel<<<1, BLOCK, 0, s>>>(OPTIM_SUMSQ_BLOCKS, partials, sumsq);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* What stays fixed from step to step (a graph holds it); the rest is in hyper. */
struct optim_k {
	int adamw, nesterov, first_step, clip;
	float dampening, weight_decay, beta2, eps;
	double grad_scale, clip_norm;
	double beta2_d; /* beta2 as given: 1 - beta2 and its powers in double, as torch's
			 * scalars are (1 - 0.999f is 1.3e-5 off 0.001) */
};

__global__ static void optim_kernel(size_t count, float *param, const float *grad, float *buf1, float *buf2,
				    const double *hyper, const double *sumsq, struct optim_k k)
{
	/* optim_grad_factor, from the sum of squares of the gradients as they are */
	double f = k.grad_scale;
	if (k.clip) {
		double coef = k.clip_norm / (f * sqrt(*sumsq) + 1e-6);
		f *= coef < 1.0 ? coef : 1.0;
	}
	float gf = (float)f;
	double lr = hyper[0];
	if (!k.adamw) {
		/* as sgd_one in kernels.cu, the momentum from hyper */
		float flr = (float)lr, mom = (float)hyper[1];
		FOR_EACH(i, count) {
			float p = param[i], g = grad[i] * gf;
			float d = k.weight_decay != 0.0f ? g + k.weight_decay * p : g;
			if (mom != 0.0f) {
				float b = k.first_step ? d : mom * buf1[i] + (1.0f - k.dampening) * d;
				buf1[i] = b;
				d = k.nesterov ? d + mom * b : b;
			}
			param[i] = p - flr * d;
		}
		return;
	}
	/* torch.optim.AdamW; the bias corrections in double, once per thread */
	double t = hyper[3], beta1 = hyper[2];
	float step_size = (float)(lr / (1.0 - pow(beta1, t)));
	float bc2_sqrt = (float)sqrt(1.0 - pow(k.beta2_d, t));
	float decay = (float)(1.0 - lr * k.weight_decay), w1 = (float)(1.0 - beta1);
	float w2 = (float)(1.0 - k.beta2_d);
	FOR_EACH(i, count) {
		float g = grad[i] * gf;
		float m = k.first_step ? 0.0f : buf1[i], v = k.first_step ? 0.0f : buf2[i];
		float p = param[i] * decay;
		m = m + (g - m) * w1;
		v = v * k.beta2 + w2 * g * g;
		buf1[i] = m;
		buf2[i] = v;
		param[i] = p - step_size * m / (sqrtf(v) / bc2_sqrt + k.eps);
	}
}

extern "C" int optim_step_cuda(cudaStream_t s, const struct sgd_args *a, const double *hyper, const double *sumsq,
			       size_t count, float *param, const float *grad, float *buf1, float *buf2)
{
	if (!buf1 || (a->kind == OPTIM_ADAMW && !buf2))
		return gp_error(GP_EINVAL, "the optimizer step has no state buffers");
	if (a->clip_norm > 0 && !sumsq)
		return gp_error(GP_EINVAL, "clipping needs the gradients' sum of squares");
	if (!count)
		return 0;
	struct optim_k k = { a->kind == OPTIM_ADAMW, a->nesterov, a->first_step, a->clip_norm > 0,
			     (float)a->dampening, (float)a->weight_decay, (float)a->beta2, (float)a->eps,
			     a->grad_scale > 0 ? a->grad_scale : 1.0, a->clip_norm, a->beta2 };
	optim_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, param, grad, buf1, buf2, hyper, sumsq, k);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void grad_accum_kernel(int mode, size_t count, float *grad, float *acc)
{
	FOR_EACH(i, count) {
		if (mode == GRAD_ACC_SAVE)
			acc[i] = grad[i];
		else if (mode == GRAD_ACC_ADD)
			acc[i] = acc[i] + grad[i];
		else
			grad[i] = grad[i] + acc[i];
	}
}

extern "C" int grad_accum_cuda(cudaStream_t s, enum grad_accum_mode mode, size_t count, float *grad, float *acc)
{
	if (!count)
		return 0;
	grad_accum_kernel<<<grid_for(count), BLOCK, 0, s>>>((int)mode, count, grad, acc);
	CUDA_CHECK_LAUNCH();
	return 0;
}
