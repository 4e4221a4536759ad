/* Device collectives through NCCL for a group opened with dist_open: one
 * communicator per net and device, made from the group's ranks (rank 0 makes the
 * unique id and dist_bcast carries it). Calls are enqueued on the caller's stream and
 * return at once; NCCL's own failures, and a peer's abort seen through the group,
 * come back as GP_EDEVICE (the communicator is then aborted so no kernel hangs). */
#ifndef GP_DIST_NCCL_H
#define GP_DIST_NCCL_H

#include <stddef.h>

#include "core/tensor.h"
#include "dist/dist.h"

struct dist_nccl;
/* device: the CUDA device this rank uses (made current by the caller). */
int dist_nccl_open(struct dist *d, int device, struct dist_nccl **out);
void dist_nccl_close(struct dist_nccl *c);
/* In-place all-reduce of count elements of dtype (GP_F32, GP_F16, GP_BF16) on stream
 * (a cudaStream_t): the sum, or the mean over ranks when avg. */
int dist_nccl_allreduce(struct dist_nccl *c, void *buf, size_t count, enum gp_dtype dtype,
			int avg, void *stream);
int dist_nccl_bcast(struct dist_nccl *c, void *buf, size_t count, enum gp_dtype dtype,
		    int root, void *stream);
/* Poll for an asynchronous NCCL error or a failure elsewhere in the group. */
int dist_nccl_check(struct dist_nccl *c);

/* dist-check's NCCL part: sum and mean all-reduces of known f32 and bf16 values
 * checked exactly, then iters timed sum all-reduces of bytes of f32. */
struct dist_nccl_bench {
	double ms_mean, ms_min;
};
int dist_nccl_selftest(struct dist_nccl *c, size_t bytes, int iters, struct dist_nccl_bench *out);

#endif
