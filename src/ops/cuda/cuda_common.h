/* Error plumbing for CUDA, cuDNN and cuBLAS calls: every call is wrapped so that a
 * failure becomes an ordinary error value whose message names the call, file and
 * line. Allocation failures map to GP_EDEVOOM, which callers may recover from. */
#ifndef GP_CUDA_COMMON_H
#define GP_CUDA_COMMON_H

#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Turn a status into 0 or a negative GP_E* code with a message naming the call.
 * The CUDA variant also clears the non-sticky error state (cudaGetLastError). */
int cuda_status_check(cudaError_t e, const char *call, const char *file, int line);
int cudnn_status_check(cudnnStatus_t s, const char *call, const char *file, int line);
int cublas_status_check(cublasStatus_t s, const char *call, const char *file, int line);

#ifdef __cplusplus
}
#endif

/* Expression forms, for `rc = CUDA_CHECK(...); if (rc < 0) goto free_x;`. */
#define CUDA_CHECK(call) cuda_status_check((call), #call, __FILE__, __LINE__)
#define CUDNN_CHECK(call) cudnn_status_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) cublas_status_check((call), #call, __FILE__, __LINE__)

/* Statement forms that return the error from the enclosing function. */
#define CUDA_TRY(call) GP_TRY(CUDA_CHECK(call))
#define CUDNN_TRY(call) GP_TRY(CUDNN_CHECK(call))
#define CUBLAS_TRY(call) GP_TRY(CUBLAS_CHECK(call))

/* After every kernel launch: a bad configuration shows up here, not later. */
#define CUDA_CHECK_LAUNCH() CUDA_TRY(cudaGetLastError())

#endif
