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
