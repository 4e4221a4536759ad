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

#endif
