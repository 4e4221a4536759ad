/* nvJPEG's memory through allocators of the GPU decoder's own (nvjpegCreateExV2):
 * device memory from a stream-ordered pool kept once taken, pinned host blocks reused
 * once the stream work queued before their free is done. nvJPEG's defaults
 * (cudaFree, cudaFreeHost) wait for the whole device, so a free in the decode thread
 * would wait for the training step. Internal to the GPU decoder (data/cuda/gpu_decode*.c). */
#ifndef GP_DATA_CUDA_NJ_MEMORY_H
#define GP_DATA_CUDA_NJ_MEMORY_H

#include "data/nvjpeg.h"

struct nj_memory;

/* *out the allocators of CUDA device `device`, or NULL (and 0) where its nvJPEG
 * defaults must stay: a device without memory pools, with a note. */
int nj_memory_create(int device, struct nj_memory **out);
/* After every nvJPEG handle made with it is destroyed (NULL is fine). */
void nj_memory_free(struct nj_memory *m);
struct nvjpeg_dev_allocator_v2 *nj_memory_dev(struct nj_memory *m);
struct nvjpeg_pinned_allocator_v2 *nj_memory_pinned(struct nj_memory *m);

#endif
