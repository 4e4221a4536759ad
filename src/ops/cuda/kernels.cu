/* Own CUDA kernels: elementwise ops, pooling, dropout, softmax cross-entropy, the
 * fused SGD step and the bias helpers. Each launcher takes plain C types and a stream,
 * launches nothing for empty inputs and checks the launch. Reductions run in a fixed
 * order (no atomics), so every result is reproducible run to run. */
#include <math.h>
#include <stdint.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "core/memstat.h"
#include "ops/ops.h"
}
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_util.cuh"

/* --- fill, copy ------------------------------------------------------------------------ */
__global__ static void fill_kernel(float *p, size_t count, float value)
{
	FOR_EACH(i, count)
		p[i] = value;
}

extern "C" int fill_cuda(cudaStream_t s, float *p, size_t count, float value)
{
	if (!count)
		return 0;
	fill_kernel<<<grid_for(count), BLOCK, 0, s>>>(p, count, value);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int copy_cuda(cudaStream_t s, float *dst, const float *src, size_t count)
{
	if (!count)
		return 0;
	CUDA_TRY(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
	return 0;
}

/* --- activations, add, gradient pass ---------------------------------------------------- */
__global__ static void relu_fwd_kernel(size_t count, const float *x, float *y, float cap)
{
	FOR_EACH(i, count) {
		float v = x[i] > 0.0f ? x[i] : 0.0f;
		y[i] = v > cap ? cap : v;
	}
}

/* The gradient passes where lo < y < hi (relu: hi = +inf, relu6: hi = 6). */
__global__ static void relu_bwd_kernel(size_t count, const float *y, const float *dy, float *dx,
				       int accumulate, float hi)
{
	FOR_EACH(i, count) {
		float g = (y[i] > 0.0f && y[i] < hi) ? dy[i] : 0.0f;
		dx[i] = accumulate ? dx[i] + g : g;
	}
}

/* The element-wise passes are memory-bound: with 16-byte aligned arrays and a count
 * divisible by 4 they move float4s (the arena's 256-byte alignment gives that for
 * every activation), which the profile showed to matter (ReLU backward was 12.5 ms of
 * ResNet-50's 275 ms step against PyTorch's 9.6 ms). */
static int vec4_ok(size_t count, const void *a, const void *b, const void *c)
{
	return count % 4 == 0 && !((uintptr_t)a % 16) && !((uintptr_t)b % 16) && !((uintptr_t)c % 16);
}

__device__ static float relu_cap(float v, float cap)
{
	v = v > 0.0f ? v : 0.0f;
	return v > cap ? cap : v;
}

__global__ static void relu_fwd4_kernel(size_t n4, const float4 *x, float4 *y, float cap)
{
	FOR_EACH(i, n4) {
		float4 v = x[i];
		y[i] = make_float4(relu_cap(v.x, cap), relu_cap(v.y, cap), relu_cap(v.z, cap),
				   relu_cap(v.w, cap));
	}
}

__device__ static float relu_pass(float y, float g, float hi)
{
	return (y > 0.0f && y < hi) ? g : 0.0f;
}

__global__ static void relu_bwd4_kernel(size_t n4, const float4 *y, const float4 *dy, float4 *dx,
					int accumulate, float hi)
{
	FOR_EACH(i, n4) {
		float4 v = y[i], g = dy[i];
		float4 r = make_float4(relu_pass(v.x, g.x, hi), relu_pass(v.y, g.y, hi),
				       relu_pass(v.z, g.z, hi), relu_pass(v.w, g.w, hi));
		if (accumulate) {
			float4 o = dx[i];
			r = make_float4(o.x + r.x, o.y + r.y, o.z + r.z, o.w + r.w);
		}
		dx[i] = r;
	}
}

static int relu_fwd_launch(cudaStream_t s, size_t count, const float *x, float *y, float cap)
{
	if (!count)
		return 0;
	if (vec4_ok(count, x, y, y))
		relu_fwd4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)x,
								       (float4 *)y, cap);
	else
		relu_fwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, x, y, cap);
	CUDA_CHECK_LAUNCH();
	return 0;
}

static int relu_bwd_launch(cudaStream_t s, size_t count, const float *y, const float *dy, float *dx,
			   int accumulate, float hi)
{
	if (!count)
		return 0;
	if (vec4_ok(count, y, dy, dx))
		relu_bwd4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)y,
								       (const float4 *)dy, (float4 *)dx,
								       accumulate, hi);
	else
		relu_bwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, y, dy, dx, accumulate, hi);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int relu_fwd_cuda(cudaStream_t s, size_t count, const float *x, float *y)
{
	return relu_fwd_launch(s, count, x, y, INFINITY);
}

extern "C" int relu_bwd_cuda(cudaStream_t s, size_t count, const float *y, const float *dy,
			     float *dx, int accumulate)
{
	return relu_bwd_launch(s, count, y, dy, dx, accumulate, INFINITY);
}

extern "C" int relu6_fwd_cuda(cudaStream_t s, size_t count, const float *x, float *y)
{
	return relu_fwd_launch(s, count, x, y, 6.0f);
}

extern "C" int relu6_bwd_cuda(cudaStream_t s, size_t count, const float *y, const float *dy,
			      float *dx, int accumulate)
{
	return relu_bwd_launch(s, count, y, dy, dx, accumulate, 6.0f);
}

__global__ static void add_kernel(size_t count, const float *a, const float *b, float *y)
{
	FOR_EACH(i, count)
		y[i] = a[i] + b[i];
}

__global__ static void add4_kernel(size_t n4, const float4 *a, const float4 *b, float4 *y)
{
	FOR_EACH(i, n4) {
		float4 u = a[i], v = b[i];
		y[i] = make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w);
	}
}

extern "C" int add_fwd_cuda(cudaStream_t s, size_t count, const float *a, const float *b, float *y)
{
	if (!count)
		return 0;
	if (vec4_ok(count, a, b, y))
		add4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)a,
								  (const float4 *)b, (float4 *)y);
	else
		add_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, a, b, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void accumulate_kernel(size_t count, const float *dy, float *dx)
{
	FOR_EACH(i, count)
		dx[i] += dy[i];
}

extern "C" int grad_pass_cuda(cudaStream_t s, size_t count, const float *dy, float *dx, int accumulate)
{
	if (!count)
		return 0;
	if (!accumulate)
		return copy_cuda(s, dx, dy, count);
	if (vec4_ok(count, dy, dx, dx)) {
		add4_kernel<<<grid_for(count / 4), BLOCK, 0, s>>>(count / 4, (const float4 *)dx,
								  (const float4 *)dy, (float4 *)dx);
		CUDA_CHECK_LAUNCH();
		return 0;
	}
	accumulate_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, dy, dx);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- global average pooling: one warp per (n, c) plane ---------------------------------- */
__global__ static void avgpool_global_fwd_kernel(size_t planes, int hw, const float *x, float *y)
{
	size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
	int lane = threadIdx.x & 31;
	/* Every lane of a warp has the same plane, so whole warps run the shuffles. */
	for (size_t plane = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; plane < planes;
	     plane += warps) {
		const float *p = x + plane * hw;
		float sum = 0.0f;
		for (int i = lane; i < hw; i += 32)
			sum += p[i];
		for (int off = 16; off > 0; off >>= 1)
			sum += __shfl_xor_sync(FULL_MASK, sum, off);
		if (lane == 0)
			y[plane] = sum / (float)hw;
	}
}

extern "C" int avgpool_global_fwd_cuda(cudaStream_t s, int n, int c, int hw, const float *x, float *y)
{
	size_t planes = (size_t)n * c;
	if (!planes || hw <= 0)
		return 0;
	avgpool_global_fwd_kernel<<<grid_for(planes * 32), BLOCK, 0, s>>>(planes, hw, x, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void avgpool_global_bwd_kernel(size_t count, int hw, const float *dy, float *dx,
						 int accumulate)
{
	FOR_EACH(i, count) {
		float g = dy[i / hw] / (float)hw;
		dx[i] = accumulate ? dx[i] + g : g;
	}
}

extern "C" int avgpool_global_bwd_cuda(cudaStream_t s, int n, int c, int hw, const float *dy,
				       float *dx, int accumulate)
{
	size_t count = (size_t)n * c * hw;
	if (!count)
		return 0;
	avgpool_global_bwd_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, hw, dy, dx, accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- max pooling ------------------------------------------------------------------------ */
struct pool_k {
	int h_in, w_in, h_out, w_out, k, stride, pad;
};

/* Padding never wins (PyTorch pads with -inf); ties keep the first position in
 * row-major window order. I: the index type, 32 bits when the count allows (64-bit
 * division costs more than the loads; ResNet's stem pooling was compute-bound on it). */
template <typename I>
__global__ static void maxpool_fwd_kernel(I count, struct pool_k p, const float *x, float *y, int32_t *argmax)
{
	for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < count; o += (I)gridDim.x * blockDim.x) {
		I row = o / (I)p.w_out, plane = row / (I)p.h_out;
		int ow = (int)(o - row * (I)p.w_out), oh = (int)(row - plane * (I)p.h_out);
		const float *xp = x + (size_t)plane * p.h_in * p.w_in;
		float m = -INFINITY;
		int idx = -1;
		for (int i = 0; i < p.k; i++) {
			int ih = oh * p.stride - p.pad + i;
			if (ih < 0 || ih >= p.h_in)
				continue;
			for (int j = 0; j < p.k; j++) {
				int iw = ow * p.stride - p.pad + j;
				if (iw < 0 || iw >= p.w_in)
					continue;
				float v = xp[ih * p.w_in + iw];
				if (idx < 0 || v > m) {
					m = v;
					idx = ih * p.w_in + iw;
				}
			}
		}
		y[o] = m;
		argmax[o] = idx;
	}
}

/* Gather instead of scatter: each input element sums, in ascending output order, the
 * gradients of the windows that chose it, so no atomics and the CPU's order of sums. */
template <typename I>
__global__ static void maxpool_bwd_kernel(I count, struct pool_k p, const float *dy, const int32_t *argmax,
					  float *dx, int accumulate)
{
	for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (I)gridDim.x * blockDim.x) {
		I row = i / (I)p.w_in, plane = row / (I)p.h_in;
		int iw = (int)(i - row * (I)p.w_in), ih = (int)(row - plane * (I)p.h_in);
		int pos = ih * p.w_in + iw;
		int oh0, oh1, ow0, ow1;
		pool_covering(ih, p.k, p.stride, p.pad, p.h_out, &oh0, &oh1);
		pool_covering(iw, p.k, p.stride, p.pad, p.w_out, &ow0, &ow1);
		size_t base = (size_t)plane * p.h_out * p.w_out;
		float acc = accumulate ? dx[i] : 0.0f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				size_t o = base + (size_t)oh * p.w_out + ow;
				if (argmax[o] == pos)
					acc += dy[o];
			}
		dx[i] = acc;
	}
}

static struct pool_k pool_k_from(const struct pool_args *a)
{
	struct pool_k p = { a->h_in, a->w_in, a->h_out, a->w_out, a->k, a->stride, a->pad };
	return p;
}

extern "C" int maxpool_fwd_cuda(cudaStream_t s, const struct pool_args *a, const float *x, float *y,
				int32_t *argmax)
{
	size_t count = (size_t)a->n * a->c * a->h_out * a->w_out;
	if (!count)
		return 0;
	if (count <= UINT32_MAX)
		maxpool_fwd_kernel<unsigned><<<grid_for(count), BLOCK, 0, s>>>((unsigned)count, pool_k_from(a), x, y,
										argmax);
	else
		maxpool_fwd_kernel<size_t><<<grid_for(count), BLOCK, 0, s>>>(count, pool_k_from(a), x, y, argmax);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int maxpool_bwd_cuda(cudaStream_t s, const struct pool_args *a, const float *dy,
				const int32_t *argmax, float *dx, int accumulate)
{
	size_t count = (size_t)a->n * a->c * a->h_in * a->w_in;
	if (!count)
		return 0;
	if (count <= UINT32_MAX)
		maxpool_bwd_kernel<unsigned><<<grid_for(count), BLOCK, 0, s>>>((unsigned)count, pool_k_from(a), dy,
										argmax, dx, accumulate);
	else
		maxpool_bwd_kernel<size_t><<<grid_for(count), BLOCK, 0, s>>>(count, pool_k_from(a), dy, argmax, dx,
									      accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- dropout ---------------------------------------------------------------------------- */
/* Inverted dropout as in PyTorch: kept elements are scaled by 1 / (1 - p). */
static float dropout_scale(double p)
{
	return p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f;
}

__global__ static void dropout_kernel(size_t count, const uint8_t *mask, const float *x, float *y,
				      float scale, int accumulate)
{
	FOR_EACH(i, count) {
		float v = mask[i] ? x[i] * scale : 0.0f;
		y[i] = accumulate ? y[i] + v : v;
	}
}

extern "C" int dropout_fwd_cuda(cudaStream_t s, const struct dropout_args *a, const uint8_t *mask,
				const float *x, float *y)
{
	if (!a->count)
		return 0;
	dropout_kernel<<<grid_for(a->count), BLOCK, 0, s>>>(a->count, mask, x, y,
							     dropout_scale(a->p), 0);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int dropout_bwd_cuda(cudaStream_t s, const struct dropout_args *a, const uint8_t *mask,
				const float *dy, float *dx, int accumulate)
{
	if (!a->count)
		return 0;
	dropout_kernel<<<grid_for(a->count), BLOCK, 0, s>>>(a->count, mask, dy, dx,
							     dropout_scale(a->p), accumulate);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* SplitMix64's finalizer: a bijective mixer whose output bits pass as independent,
 * so hashing a counter gives a stream that any thread can index directly. */
__device__ static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

__global__ static void dropout_mask_kernel(size_t count, uint32_t threshold, uint64_t seed,
					   uint64_t offset, uint8_t *mask)
{
	FOR_EACH(i, count) {
		uint32_t u24 = (uint32_t)(mix64(seed ^ mix64(offset + i)) >> 40);
		mask[i] = u24 >= threshold;
	}
}

extern "C" int dropout_mask_cuda(cudaStream_t s, size_t count, double p, uint64_t seed,
				 uint64_t offset, uint8_t *mask)
{
	if (!(p >= 0.0 && p <= 1.0))
		return gp_error(GP_EINVAL, "dropout probability %g is not in [0, 1]", p);
	if (!count)
		return 0;
	uint32_t threshold = (uint32_t)ceil(p * 16777216.0);
	dropout_mask_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, threshold, seed, offset, mask);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* The same mask with the step read from device memory, so that a captured CUDA
 * graph draws a fresh mask on every replay. */
__global__ static void dropout_mask_step_kernel(size_t count, uint32_t threshold, uint64_t seed,
						const unsigned long long *step, uint8_t *mask)
{
	uint64_t s = seed ^ mix64((uint64_t)*step);
	FOR_EACH(i, count) {
		uint32_t u24 = (uint32_t)(mix64(s ^ mix64(i)) >> 40);
		mask[i] = u24 >= threshold;
	}
}

extern "C" int dropout_mask_step_cuda(cudaStream_t s, size_t count, double p, uint64_t seed,
				      const unsigned long long *step, uint8_t *mask)
{
	if (!(p >= 0.0 && p <= 1.0))
		return gp_error(GP_EINVAL, "dropout probability %g is not in [0, 1]", p);
	if (!count)
		return 0;
	uint32_t threshold = (uint32_t)ceil(p * 16777216.0);
	dropout_mask_step_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, threshold, seed, step, mask);
	CUDA_CHECK_LAUNCH();
	return 0;
}

__global__ static void counter_inc_kernel(unsigned long long *c)
{
	*c += 1;
}

extern "C" int counter_inc_cuda(cudaStream_t s, unsigned long long *c)
{
	counter_inc_kernel<<<1, 1, 0, s>>>(c);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* p *= factor; with flag, also raise *flag where a result is inf or NaN (loss scaling). */
__global__ static void scale_kernel(float *p, size_t count, float factor, int *flag)
{
	FOR_EACH(i, count) {
		float v = p[i] * factor;
		p[i] = v;
		if (flag && !isfinite(v))
			*flag = 1;
	}
}

extern "C" int scale_cuda(cudaStream_t s, float *p, size_t count, double factor, int *nonfinite_flag)
{
	if (!count)
		return 0;
	scale_kernel<<<grid_for(count), BLOCK, 0, s>>>(p, count, (float)factor, nonfinite_flag);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* --- softmax cross-entropy (kernel_util.cuh) --------------------------------------------- */
extern "C" int softmax_xent_cuda(cudaStream_t s, int n, int k, const float *logits,
				 const int32_t *labels, float *dlogits, float *row_scratch,
				 double *loss, int *correct)
{
	return softmax_xent_t<float>(s, n, k, logits, labels, dlogits, row_scratch, loss, correct);
}

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

/* --- bias helpers ------------------------------------------------------------------------ */
__global__ static void bias_add_kernel(size_t count, int c, int hw, const float *b, float *y)
{
	FOR_EACH(i, count)
		y[i] += b[i / hw % c];
}

extern "C" int bias_add_cuda(cudaStream_t s, int n, int c, int hw, const float *b, float *y)
{
	size_t count = (size_t)n * c * hw;
	if (!count)
		return 0;
	bias_add_kernel<<<grid_for(count), BLOCK, 0, s>>>(count, c, hw, b, y);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* One block per channel, partial sums in double, combined in a fixed order. */
__global__ static void channel_sum_kernel(int n, int c, int hw, const float *dy, float *db)
{
	int ch = blockIdx.x;
	size_t m = (size_t)n * hw;
	double acc = 0.0;
	for (size_t t = threadIdx.x; t < m; t += blockDim.x) {
		size_t ni = t / hw, j = t % hw;
		acc += dy[(ni * c + ch) * hw + j];
	}
	acc = block_sum_d(acc);
	if (threadIdx.x == 0)
		db[ch] = (float)acc;
}

extern "C" int channel_sum_cuda(cudaStream_t s, int n, int c, int hw, const float *dy, float *db)
{
	if (c <= 0)
		return 0;
	channel_sum_kernel<<<c, BLOCK, 0, s>>>(n, c, hw, dy, db);
	CUDA_CHECK_LAUNCH();
	return 0;
}
