/* Batch norm over several ranks on the GPU (SyncBatchNorm), in pieces between which
 * the caller all-reduces per-channel sums (double): statistics sums, their
 * finalization into mean/invstd and running values, the normalization, the backward
 * sums and the input gradient. x, y, dy and dx are in dtype (GP_F32, GP_F16, GP_BF16)
 * and NCHW or NHWC (nhwc); statistics, running values and parameter gradients are
 * float; sums are double. stream is a cudaStream_t. */
#ifndef GP_BN_SYNC_H
#define GP_BN_SYNC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/tensor.h"
#include "ops/ops.h"

/* sums[0..c) = sum of x, sums[c..2c) = sum of x^2, per channel (sums zeroed here). */
int bn_sync_sums_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
		      const void *x, double *sums);
/* From summed sums over count elements: save_mean, save_invstd, and the running
 * values (momentum, unbiased variance). */
int bn_sync_finalize_cuda(void *stream, const struct bn_args *a, const double *sums, double count,
			  float *save_mean, float *save_invstd, float *run_mean, float *run_var);
int bn_sync_apply_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
		       const void *x, const float *gamma, const float *beta, const float *mean,
		       const float *invstd, void *y);
/* sums[0..c) = sum of dy, sums[c..2c) = sum of dy * xhat (zeroed here); dgamma and
 * dbeta get this rank's values (float). */
int bn_sync_bwd_sums_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
			  const void *x, const void *dy, const float *mean, const float *invstd,
			  double *sums, float *dgamma, float *dbeta);
int bn_sync_bwd_dx_cuda(void *stream, enum gp_dtype dt, int nhwc, const struct bn_args *a,
			const void *x, const void *dy, const float *gamma, const float *mean,
			const float *invstd, const double *sums, double count, void *dx,
			int accumulate);

#ifdef __cplusplus
}
#endif

#endif
