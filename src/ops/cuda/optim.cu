/* The optimizer step: torch.optim.SGD over the flat float parameter, gradient and
 * momentum arrays in one launch (float4 where aligned). */
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
