/* CPU threads that decode a share of a GPU batch (`--decode gpu --decode-threads N`)
 * at the same time as nvJPEG's batched call decodes the rest: TurboJPEG decodes each
 * of its JPEGs at full size, only the rows and columns the sample's crop reads
 * (image_decode_region: bit for bit the full decode's pixels there), and copies them
 * into the item's place in the decoder's RGB staging buffer, on a stream of the
 * thread's own. The same kernel then augments every sample, so the batch is the one
 * the GPU alone makes (whose pixels are TurboJPEG's too, data/ycc.h). Internal to
 * data/cuda/gpu_decode.c. */
#ifndef GP_DATA_CUDA_DECODE_SHARE_H
#define GP_DATA_CUDA_DECODE_SHARE_H

#include <stddef.h>

#include "data/gpu_decode.h"

#define GPU_DECODE_ERRMSG 160

struct decode_share;

/* threads >= 1 threads on CUDA device `device`, idle until a start. */
int decode_share_create(int device, int threads, int size, struct decode_share **out);
/* Start decoding items[idx[j]] for j < k into staging + offset[idx[j]] (interleaved
 * RGB, 3 w bytes a row); returns at once. failed[idx[j]] becomes 1 and errmsg[idx[j]]
 * the reason for a file TurboJPEG cannot decode, else 0. Everything passed must stay
 * until decode_share_wait. */
void decode_share_start(struct decode_share *s, const struct gpu_decode_item *items,
			const int *idx, int k, unsigned char *staging, const size_t *offset,
			unsigned char *failed, char (*errmsg)[GPU_DECODE_ERRMSG]);
/* Wait for the share started last, its copies on the device included; *thread_ms: the
 * threads' summed time on it. A CUDA or memory error is returned (the first one),
 * after every thread has stopped on this share. */
int decode_share_wait(struct decode_share *s, double *thread_ms);
void decode_share_destroy(struct decode_share *s);

#endif
