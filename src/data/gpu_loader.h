/* Batches made on the GPU (`--decode gpu`): the CPU reads each file, its header and
 * draws the sample's geometry from the same seed as the CPU loader (so the crops and
 * flips are the same), nvJPEG decodes and one kernel augments into a device batch
 * (data/gpu_decode.h). Sample order, replacement of corrupt files and the counts
 * follow loader.h. Decode threads run up to GPUPERF_DECODE_BUFFERS - 1 batches ahead
 * of the caller, into their decoders' other batch buffers and on their own streams,
 * so that decoding overlaps the training step and a slow batch does not stall it.
 * Where there are two decoders (GPUPERF_DECODERS; two on the JPEG engines), each has
 * its own thread and takes every other batch; each decode thread has a reader thread
 * that reads the files of its next batch while it decodes one. */
#ifndef GP_DATA_GPU_LOADER_H
#define GP_DATA_GPU_LOADER_H

#include <stdint.h>

#include "core/tuning.h"
#include "data/dataset.h"
#include "data/gpu_decode.h"
#include "data/loader.h"

struct gpu_loader_config {
	int batch;
	int size;      /* must equal the dataset's size */
	int train;     /* shuffle each epoch; RandomResizedCrop + flip, else Resize + CenterCrop */
	int drop_last;
	uint64_t seed;
	int device;    /* CUDA device */
	enum gpu_batch_layout layout;
	long start_batch; /* the first batch delivered, counted over epochs (a resumed run's) */
	int decode_threads; /* CPU threads decoding a share of each batch (0: nvJPEG alone) */
	/* Data parallelism: shard `shard` of `shards` (0 or 1: all), as loader_config's:
	 * the samples and batches of the CPU loader with the same shard */
	int shard, shards;
};

struct gpu_batch {
	void *x;         /* device: n samples in the layout asked for, written */
	void *read_event; /* x's read event (gpu_decoder_output_event), NULL for a
			   * caller's decoder without one */
	int32_t *labels; /* host, n */
	int n;
	int epoch, index;
};

struct gpu_loader;

/* GP_EINVAL for a dataset that is not files (synthetic, CIFAR-10); GP_ENODEV without
 * a GPU or nvJPEG. */
int gpu_loader_create(struct dataset *ds, const struct gpu_loader_config *cfg,
		      struct gpu_loader **out);
/* Batch buffers the loader cycles through: the caller holds one while the decode
 * threads write the next ones, up to GPUPERF_DECODE_BUFFERS - 1 batches ahead
 * (tuning.h, rounded up to a multiple of the decoders), at most GPU_LOADER_OUTPUTS_MAX
 * in all, shared evenly among at most GPU_LOADER_DECODERS_MAX decoders. */
#define GPU_LOADER_OUTPUTS_MAX 4
#define GPU_LOADER_DECODERS_MAX TUNING_DECODERS_MAX

/* What turns read files into a batch buffer: the nvJPEG decoder (gpu_decode.h) for
 * gpu_loader_create; a test puts a CPU decoder in its place to check the order,
 * replacements, counts and the decode threads on a machine without a GPU. With d
 * decoders, each has GPU_LOADER_OUTPUTS_MAX buffers, of which the loader uses
 * gpu_loader_outputs / d; run and error are called from its decode thread only. */
struct gpu_loader_decoder {
	void *self;
	/* as gpu_decoder_run */
	int (*run)(void *self, int output, const struct gpu_decode_item *items, int n,
		   unsigned char *failed);
	const char *(*error)(void *self, int i);
	void *(*output)(void *self, int output);
	void *(*output_event)(void *self, int output); /* may be NULL: none */
	/* may be NULL: run returns with the buffer written; else run may return once
	 * the writes are queued (gpu_decoder_launch), and wait blocks until they are done
	 * (gpu_decoder_output_wait), which gpu_loader_next calls before it returns */
	int (*wait)(void *self, int output);
};

/* gpu_loader_create with n_decs other decoders (1..GPU_LOADER_DECODERS_MAX), which
 * the caller keeps and frees; decoder j makes the batches b with b % n_decs == j. */
int gpu_loader_create_with(struct dataset *ds, const struct gpu_loader_config *cfg,
			   const struct gpu_loader_decoder *decs, int n_decs,
			   struct gpu_loader **out);
/* The next batch, in order, endless; blocks until the decode thread has it written.
 * Its x and labels stay valid until the next call, and nothing may read x after it,
 * unless the reading is queued on a stream before it and x's read_event recorded
 * behind it (net_set_batch_device with the event): the next call hands x's buffer
 * back to the decode thread, whose writes wait for that event. An error of the decode thread (a batch with no valid
 * image, CUDA, memory) comes back at the call for the batch it was making, and at
 * every call after. */
int gpu_loader_next(struct gpu_loader *l, struct gpu_batch *out);
int gpu_loader_batches_per_epoch(const struct gpu_loader *l);
/* The batch buffers it cycles through (GPUPERF_DECODE_BUFFERS). */
int gpu_loader_outputs(const struct gpu_loader *l);
/* Its decoders, each with its own thread. */
int gpu_loader_decoders(const struct gpu_loader *l);
/* Counts over the batches delivered so far (not those decoded ahead); gs is zero
 * with a caller's decoder. */
void gpu_loader_get_stats(const struct gpu_loader *l, struct loader_stats *st,
			  struct gpu_decode_stats *gs);
const char *gpu_loader_backend(const struct gpu_loader *l);
/* Stops the threads (the decode thread ends the batch it is on) and frees all; the
 * batch last returned becomes invalid. */
void gpu_loader_destroy(struct gpu_loader *l);

#endif
