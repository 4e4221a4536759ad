#include "data/pinned.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "data/loader.h"

static void *pinned_alloc(size_t bytes)
{
	void *p = NULL;
	if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess)
		return NULL;
	return p;
}

static void pinned_free(void *p)
{
	if (p)
		cudaFreeHost(p);
}

int data_use_pinned_memory(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0)
		return gp_error(GP_ENODEV, "no CUDA device for pinned memory: %s",
				e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
	loader_set_host_allocator(pinned_alloc, pinned_free);
	return 0;
}

int data_pin(void *p, size_t bytes)
{
	cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		cudaGetLastError(); /* not sticky: clear it */
		return gp_error(GP_ENOMEM, "cannot page-lock %zu bytes of host memory for copies to the GPU: %s",
				bytes, cudaGetErrorString(e));
	}
	return 0;
}

void data_unpin(void *p)
{
	if (p && cudaHostUnregister(p) != cudaSuccess)
		cudaGetLastError();
}

int data_is_pinned(const void *p)
{
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeHost;
}
