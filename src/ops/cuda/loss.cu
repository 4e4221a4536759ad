/* Softmax cross-entropy with its gradient, and with label smoothing as
 * torch.nn.CrossEntropyLoss(label_smoothing=e): one block per row, then one block for the
 * mean; one source templated over the logits' type (float, or 16-bit logits widened on
 * read and dlogits rounded on write, with everything between computed in float, as
 * autocast does). Reductions run in a fixed order (no atomics). */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* The project headers are C without linkage guards. */
extern "C" {
#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"
}
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/eltwise.cuh"

/* --- softmax cross-entropy: one block per row, then one block for the mean ------------------
 * Templated over the logits' type: float, or 16-bit logits widened on read and dlogits
 * rounded on write, with everything between computed in float. */
template <typename T>
__global__ static void softmax_xent_row_kernel(int n, int k, const T *logits, const int32_t *labels,
					       T *dlogits, float *row_loss, float *row_hit)
{
	int row = blockIdx.x;
	const T *l = logits + (size_t)row * k;
	T *d = dlogits + (size_t)row * k;
	int label = labels[row];

	float best = -INFINITY;
	int best_i = 0x7fffffff;
	for (int j = threadIdx.x; j < k; j += blockDim.x)
		argmax_merge(&best, &best_i, to_f(l[j]), j);
	int am = block_argmax(best, best_i);
	float m = am < k ? to_f(l[am]) : NAN; /* no argmax only when every logit is NaN */

	double part = 0.0;
	for (int j = threadIdx.x; j < k; j += blockDim.x)
		part += expf(to_f(l[j]) - m);
	double sum = block_sum_d(part);

	float inv_sum = (float)(1.0 / sum), inv_n = 1.0f / (float)n;
	for (int j = threadIdx.x; j < k; j += blockDim.x) {
		float prob = expf(to_f(l[j]) - m) * inv_sum;
		put_f(&d[j], (prob - (j == label ? 1.0f : 0.0f)) * inv_n);
	}
	/* The row loss in double: log-sum-exp minus the label's logit cancels badly. */
	if (threadIdx.x == 0) {
		int ok = label >= 0 && label < k;
		row_loss[row] = ok ? (float)(log(sum) + (double)m - (double)to_f(l[label])) : NAN;
		row_hit[row] = ok && am == label ? 1.0f : 0.0f;
	}
}

__global__ static void softmax_xent_mean_kernel(int n, const float *row_loss, const float *row_hit,
						double *loss, int *correct)
{
	double l = 0.0, h = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		l += row_loss[i];
		h += row_hit[i];
	}
	l = block_sum_d(l);
	h = block_sum_d(h);
	if (threadIdx.x == 0) {
		*loss = l / n;
		*correct = (int)h;
	}
}

template <typename T>
static inline int softmax_xent_t(cudaStream_t s, int n, int k, const void *logits, const int32_t *labels,
			  void *dlogits, float *row_scratch, double *loss, int *correct)
{
	if (n <= 0 || k <= 0)
		return gp_error(GP_EINVAL, "softmax cross-entropy of %d rows of %d classes", n, k);
	softmax_xent_row_kernel<<<n, BLOCK, 0, s>>>(n, k, (const T *)logits, labels, (T *)dlogits,
						    row_scratch, row_scratch + n);
	CUDA_CHECK_LAUNCH();
	softmax_xent_mean_kernel<<<1, BLOCK, 0, s>>>(n, row_scratch, row_scratch + n, loss, correct);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int softmax_xent_cuda(cudaStream_t s, enum gp_dtype dt, int n, int k, const void *logits,
				 const int32_t *labels, void *dlogits, float *row_scratch, double *loss,
				 int *correct)
{
	if (dt == GP_F32)
		return softmax_xent_t<float>(s, n, k, logits, labels, dlogits, row_scratch, loss, correct);
	return DISPATCH_H(dt, softmax_xent_t, s, n, k, logits, labels, dlogits, row_scratch, loss,
			  correct);
}

/* --- with label smoothing (softmax_xent_ls_cpu) ---------------------------------------- */
/* Row loss (1 - e)(lse - l_y) + e (lse - mean_j l_j); gradient (p_j - (1 - e)[j = y]
 * - e / k) / n. */
template <typename T>
__global__ static void xent_ls_row_kernel(int n, int k, const T *logits, const int32_t *labels, float smoothing,
					  T *dlogits, float *row_loss, float *row_hit)
{
	int row = blockIdx.x;
	const T *l = logits + (size_t)row * k;
	T *d = dlogits + (size_t)row * k;
	int label = labels[row];

	float best = -INFINITY;
	int best_i = 0x7fffffff;
	for (int j = threadIdx.x; j < k; j += blockDim.x)
		argmax_merge(&best, &best_i, to_f(l[j]), j);
	int am = block_argmax(best, best_i);
	float m = am < k ? to_f(l[am]) : NAN;

	double part = 0.0, lpart = 0.0;
	for (int j = threadIdx.x; j < k; j += blockDim.x) {
		part += expf(to_f(l[j]) - m);
		lpart += to_f(l[j]);
	}
	double sum = block_sum_d(part);
	double lsum = block_sum_d(lpart);

	float inv_sum = (float)(1.0 / sum), inv_n = 1.0f / (float)n;
	float on = 1.0f - smoothing, off = smoothing / (float)k;
	for (int j = threadIdx.x; j < k; j += blockDim.x) {
		float prob = expf(to_f(l[j]) - m) * inv_sum;
		put_f(&d[j], (prob - (j == label ? on : 0.0f) - off) * inv_n);
	}
	if (threadIdx.x == 0) {
		int ok = label >= 0 && label < k;
		double lse = log(sum) + (double)m, e = smoothing;
		row_loss[row] = ok ? (float)((1.0 - e) * (lse - (double)to_f(l[label])) + e * (lse - lsum / k)) : NAN;
		row_hit[row] = ok && am == label ? 1.0f : 0.0f;
	}
}

template <typename T>
static int xent_ls_t(cudaStream_t s, int n, int k, const void *logits, const int32_t *labels, double smoothing,
		     void *dlogits, float *row_scratch, double *loss, int *correct)
{
	xent_ls_row_kernel<<<n, BLOCK, 0, s>>>(n, k, (const T *)logits, labels, (float)smoothing, (T *)dlogits,
					       row_scratch, row_scratch + n);
	CUDA_CHECK_LAUNCH();
	softmax_xent_mean_kernel<<<1, BLOCK, 0, s>>>(n, row_scratch, row_scratch + n, loss, correct);
	CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int softmax_xent_ls_cuda(cudaStream_t s, enum gp_dtype dt, int n, int k, const void *logits,
				    const int32_t *labels, double smoothing, void *dlogits, float *row_scratch,
				    double *loss, int *correct)
{
	if (n <= 0 || k <= 0)
		return gp_error(GP_EINVAL, "softmax cross-entropy of %d rows of %d classes", n, k);
	if (dt == GP_F32)
		return xent_ls_t<float>(s, n, k, logits, labels, smoothing, dlogits, row_scratch, loss, correct);
	return DISPATCH_H(dt, xent_ls_t, s, n, k, logits, labels, smoothing, dlogits, row_scratch, loss, correct);
}
