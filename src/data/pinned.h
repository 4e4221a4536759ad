/* Page-locked host memory for batch buffers, so copies to the GPU run at full
 * speed and asynchronously. Only built with CUDA (src/data/cuda/pinned.c). */
#ifndef GP_DATA_PINNED_H
#define GP_DATA_PINNED_H

/* Install cudaHostAlloc/cudaFreeHost as the loader's host allocator;
 * GP_ENODEV if no GPU can be used. */
int data_use_pinned_memory(void);

#endif
