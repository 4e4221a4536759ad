/* Page-locked host memory for batch buffers, so copies to the GPU run at full
 * speed and asynchronously. Only built with CUDA (src/data/cuda/pinned.c). */
#ifndef GP_DATA_PINNED_H
#define GP_DATA_PINNED_H

#include <stddef.h>

/* Install cudaHostAlloc/cudaFreeHost as the loader's host allocator;
 * GP_ENODEV if no GPU can be used. */
int data_use_pinned_memory(void);

/* Page-locks the `bytes` at p (cudaHostRegister), which malloc gave, so that copies
 * from them to the GPU run at the link's rate, as from the loader's batches; undone by
 * data_unpin before p is freed. An error when the system refuses (a memlock limit). */
int data_pin(void *p, size_t bytes);
void data_unpin(void *p);
/* Whether p lies in page-locked host memory (pinned or registered). */
int data_is_pinned(const void *p);

#endif
