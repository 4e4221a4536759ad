/* nvJPEG's memory through allocators of our own (nj_memory.h). */
#include "data/cuda/nj_memory.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"

/* Device memory comes from a pool of the decoder's own, stream-ordered, kept once
 * taken; pinned host memory is kept for reuse, a block handed out again only once the
 * stream work queued before its free is done (an event per block), all of it
 * released with the decoder. Needed for the
 * decode thread to overlap training, not enough: on the H100 (s10-6) a batch still
 * decoded in about the training step's time plus its own beside training, which was
 * nvJPEG's pipelining (gpu_decode_nvjpeg.c, nj_decode_handles_create). */
struct pinned_block {
	void *p;
	size_t size;
	cudaEvent_t freed; /* recorded on the stream nvJPEG freed it on */
	int busy;
};

struct nj_memory {
	cudaMemPool_t pool;
	pthread_mutex_t lock;
	struct pinned_block *blocks;
	int n, cap;
	struct nvjpeg_dev_allocator_v2 dev;
	struct nvjpeg_pinned_allocator_v2 pinned;
};

static int nj_dev_malloc(void *ctx, void **ptr, size_t size, nvjpeg_cuda_stream stream)
{
	struct nj_memory *m = ctx;
	return cudaMallocFromPoolAsync(ptr, size, m->pool, (cudaStream_t)stream) != cudaSuccess;
}

static int nj_dev_free(void *ctx, void *ptr, size_t size, nvjpeg_cuda_stream stream)
{
	(void)ctx;
	(void)size;
	return ptr && cudaFreeAsync(ptr, (cudaStream_t)stream) != cudaSuccess;
}

/* The smallest free block that fits and whose last user's stream work is done; else
 * a new one. */
static int nj_pinned_malloc(void *ctx, void **ptr, size_t size, nvjpeg_cuda_stream stream)
{
	(void)stream;
	struct nj_memory *m = ctx;
	int rc = 1;
	pthread_mutex_lock(&m->lock);
	struct pinned_block *best = NULL;
	for (int i = 0; i < m->n; i++) {
		struct pinned_block *b = &m->blocks[i];
		if (!b->busy && b->size >= size && (!best || b->size < best->size) &&
		    cudaEventQuery(b->freed) == cudaSuccess)
			best = b;
	}
	cudaGetLastError(); /* a query of a pending event leaves cudaErrorNotReady */
	if (!best && m->n == m->cap) {
		int cap = m->cap ? 2 * m->cap : 16;
		struct pinned_block *nb = realloc(m->blocks, (size_t)cap * sizeof(*nb));
		if (!nb)
			goto out;
		m->blocks = nb;
		m->cap = cap;
	}
	if (!best) {
		struct pinned_block b = { .size = size ? size : 1 };
		if (cudaHostAlloc(&b.p, b.size, cudaHostAllocDefault) != cudaSuccess) {
			cudaGetLastError();
			goto out;
		}
		if (cudaEventCreateWithFlags(&b.freed, cudaEventDisableTiming) != cudaSuccess) {
			cudaGetLastError();
			cudaFreeHost(b.p);
			goto out;
		}
		m->blocks[m->n] = b;
		best = &m->blocks[m->n++];
	}
	best->busy = 1;
	*ptr = best->p;
	rc = 0;
out:
	pthread_mutex_unlock(&m->lock);
	return rc;
}

static int nj_pinned_free(void *ctx, void *ptr, size_t size, nvjpeg_cuda_stream stream)
{
	(void)size;
	struct nj_memory *m = ctx;
	int rc = ptr != NULL;
	pthread_mutex_lock(&m->lock);
	for (int i = 0; ptr && i < m->n; i++) {
		if (m->blocks[i].p != ptr)
			continue;
		rc = cudaEventRecord(m->blocks[i].freed, (cudaStream_t)stream) != cudaSuccess;
		m->blocks[i].busy = 0;
		break;
	}
	pthread_mutex_unlock(&m->lock);
	return ptr ? rc : 0;
}

void nj_memory_free(struct nj_memory *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n; i++) {
		cudaEventSynchronize(m->blocks[i].freed);
		cudaEventDestroy(m->blocks[i].freed);
		cudaFreeHost(m->blocks[i].p);
	}
	free(m->blocks);
	if (m->pool)
		cudaMemPoolDestroy(m->pool); /* released once nvJPEG's frees are done */
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* nvJPEG's defaults where the device has no memory pools (cudaDevAttrMemoryPoolsSupported
 * 0: some virtual GPUs), with a note: decoding still works, it only waits for the
 * device when nvJPEG frees. */
int nj_memory_create(int device, struct nj_memory **out)
{
	*out = NULL;
	int pools = 0;
	if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess ||
	    !pools) {
		cudaGetLastError();
		fprintf(stderr, "note: GPU %d has no memory pools: nvJPEG keeps its own allocators, "
				"which wait for the device when they free\n", device);
		return 0;
	}
	struct nj_memory *m = calloc(1, sizeof(*m));
	if (!m)
		return gp_error(GP_ENOMEM, "out of memory");
	pthread_mutex_init(&m->lock, NULL);
	struct cudaMemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = device;
	cudaError_t ce = cudaMemPoolCreate(&m->pool, &props);
	if (ce != cudaSuccess)
		m->pool = NULL;
	uint64_t keep = UINT64_MAX; /* what the pool took stays: no release at each sync */
	if (ce == cudaSuccess)
		ce = cudaMemPoolSetAttribute(m->pool, cudaMemPoolAttrReleaseThreshold, &keep);
	if (ce != cudaSuccess) {
		nj_memory_free(m);
		return gp_error(GP_EDEVICE, "gpu decoder: memory pool: %s", cudaGetErrorString(ce));
	}
	m->dev = (struct nvjpeg_dev_allocator_v2){ nj_dev_malloc, nj_dev_free, m };
	m->pinned = (struct nvjpeg_pinned_allocator_v2){ nj_pinned_malloc, nj_pinned_free, m };
	*out = m;
	return 0;
}

struct nvjpeg_dev_allocator_v2 *nj_memory_dev(struct nj_memory *m)
{
	return &m->dev;
}

struct nvjpeg_pinned_allocator_v2 *nj_memory_pinned(struct nj_memory *m)
{
	return &m->pinned;
}
