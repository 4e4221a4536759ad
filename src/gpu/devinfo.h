/* What GPU this process sees, and the CUDA library versions: for `info`, result
 * files and the default device choice. Works (and says why not) without a GPU. */
#ifndef GP_DEVINFO_H
#define GP_DEVINFO_H

#include <stddef.h>

struct gp_devinfo {
	int cuda_built;
	int gpu_count;
	char gpu_name[96];  /* truncated to fit */
	size_t mem_total_bytes;
	int cc_major, cc_minor, sm_count;
	int cudart_version, driver_version, cudnn_version, cublas_version;
	char note[200]; /* why there is no GPU, when there is none */
};

void devinfo_query(struct gp_devinfo *d);

/* Before any CUDA call of the process: the hardware work queues CUDA spreads streams
 * over (CUDA_DEVICE_MAX_CONNECTIONS) at their most, 32, unless the environment sets
 * them. With the default 8, nvJPEG's seven copy streams, the decoder's, the net's
 * and NCCL's share queues, and a copy waits behind the training kernels queued
 * ahead of it on another stream (docs/cuda.md, "Streams and hardware queues"). */
void gpu_process_defaults(void);

#endif
