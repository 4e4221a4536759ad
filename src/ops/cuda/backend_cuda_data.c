/* Input-side helpers for the CUDA backend (see backend_cuda_data.h). */
#include "ops/cuda/backend_cuda_data.h"

#include "core/error.h"
#include "ops/cuda/device.h"

/* The backend's process-wide context (backend_cuda.c); every net on the CUDA
 * backend queues its work on this context's one stream. */
struct cuda_ctx *backend_cuda_ctx(void);

int cuda_net_wait(const struct net *net)
{
	struct cuda_ctx *ctx = backend_cuda_ctx();
	if (net->backend != BACKEND_CUDA || !net->bk || !ctx)
		return gp_error(GP_EINVAL, "cuda_net_wait: the net is not set up on the CUDA backend");
	return cuda_ctx_sync(ctx);
}
