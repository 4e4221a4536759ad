#include "gpu/devinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GP_HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#endif

void devinfo_query(struct gp_devinfo *d)
{
	memset(d, 0, sizeof(*d));
#ifdef GP_HAVE_CUDA
	d->cuda_built = 1;
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		snprintf(d->note, sizeof(d->note), "no CUDA device: %s",
			 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		cudaGetLastError();
		return;
	}
	struct cudaDeviceProp p;
	if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
		snprintf(d->gpu_name, sizeof(d->gpu_name), "%.95s", p.name);
		d->mem_total_bytes = p.totalGlobalMem;
		d->cc_major = p.major;
		d->cc_minor = p.minor;
		d->sm_count = p.multiProcessorCount;
	}
	d->gpu_count = n;
	cudaRuntimeGetVersion(&d->cudart_version);
	cudaDriverGetVersion(&d->driver_version);
	d->cudnn_version = (int)cudnnGetVersion();
	d->cublas_version = (int)cublasGetCudartVersion();
#else
	snprintf(d->note, sizeof(d->note), "this gpuperf was built without CUDA");
#endif
}

void gpu_process_defaults(void)
{
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}
