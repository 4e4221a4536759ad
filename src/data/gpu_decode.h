/* The GPU half of `--decode gpu`: a batch of JPEG files, already read into host
 * memory with their sample geometry drawn on the CPU (transform.h), decoded by
 * nvJPEG and augmented in one kernel straight into a device batch buffer. nvJPEG's
 * hardware backend (the JPEG engines of A100/H100) decodes what it supports in one
 * batched call; the CUDA backend decodes the rest one by one; what nvJPEG refuses
 * (and PNGs) is decoded by TurboJPEG/cairo on the CPU and uploaded, so the same
 * kernel augments every sample. Only built with CUDA (data/cuda/gpu_decode.c);
 * elsewhere every call is GP_ENODEV. */
#ifndef GP_DATA_GPU_DECODE_H
#define GP_DATA_GPU_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "data/image.h"
#include "data/transform.h"

/* What the batch buffer holds: N x 3 x S x S floats (what net_stage_batch takes
 * today), or N x S x S x 3 in a 16-bit type for NHWC bf16/fp16 nets. */
enum gpu_batch_layout { GPU_BATCH_NCHW_F32 = 0, GPU_BATCH_NHWC_BF16, GPU_BATCH_NHWC_F16 };

static inline size_t gpu_batch_elem_bytes(enum gpu_batch_layout l)
{
	return l == GPU_BATCH_NCHW_F32 ? 4 : 2;
}

/* What nvJPEG reads of a JPEG's header to route it (gpu_decoder_parse), done ahead
 * of gpu_decoder_run by another thread, or by gpu_decoder_run itself when parsed is 0. */
struct gpu_decode_header {
	int parsed;
	int info_ok;          /* nvjpegGetImageInfo succeeded */
	int nc, css;          /* components, chroma subsampling (nvJPEG's enum) */
	int ws[4], hs[4];     /* per component */
	int batched_ok;       /* hardware backend: the batched call takes it */
};

struct gpu_decode_item {
	const uint8_t *data; /* the whole file, host memory */
	size_t len_bytes;
	enum image_kind kind;
	int w, h;            /* full size, from image_header */
	struct sample_geometry geo;
	int dst;             /* sample position in the batch buffer */
	struct gpu_decode_header hdr; /* zeroed: not parsed yet */
};

/* Counts over a decoder's life: which path made each sample. */
struct gpu_decode_stats {
	long hw_decoded;    /* nvJPEG's hardware backend, batched */
	long cuda_decoded;  /* nvJPEG's CUDA backend */
	long cpu_fallback;  /* nvJPEG refused it (or a PNG): decoded on the CPU */
	long failed;        /* no decoder could: corrupt */
	long nvjpeg_chroma; /* of the hardware/CUDA counts: RGB with nvJPEG's own chroma
			     * upsampling (the batched call refused planes), not TurboJPEG's */
	long cpu_shared;    /* decoded by the CPU threads beside nvJPEG (cpu_threads) */
	double decode_ms;   /* wall time of the decode, on the calling thread */
	double augment_ms;  /* GPU time from the colour conversion's start to the augment's
			     * end, waits for SMs included; counted once waited for */
	double parse_ms;    /* of decode_ms: nvJPEG reading the headers (the CPU) */
	long parsed_ahead;  /* items whose header a parser read before the run */
	long region_decoded; /* of hw_decoded: only the region the crop reads (ycc_roi) */
	double region_pixels, region_full_pixels; /* those regions' pixels, and their
						    * images' whole sizes */
	long one_pass;      /* decoded as planes and made into the batch by the one-pass
			     * kernel (gpu_planar_launch), not converted then augmented */
};

struct gpu_decoder;

/* A decoder on CUDA device `device` for batches of up to max_batch samples of
 * size x size; allocates `outputs` batch buffers (gpu_decoder_output), so that one
 * batch can be written while the net still copies in another. All its work runs
 * on its own non-blocking stream, so a thread of its own may decode while the net
 * computes. GP_ENODEV without a GPU or nvJPEG, with the reason. */
int gpu_decoder_create(int device, int max_batch, int size, enum gpu_batch_layout layout,
		       int outputs, struct gpu_decoder **out);
/* Which nvJPEG backend makes the batched call: the hardware one where it can be made
 * (else CUDA's; gpu_decoder_create's choice), or only one of the two (GP_ENODEV
 * where it cannot be made); hw_pipelined keeps nvJPEG's pipelined hardware decode,
 * which gpu_decoder_create turns off (gpu_decode_nvjpeg.c says why), for the test that
 * compares the two. */
enum gpu_decode_backend { GPU_DECODE_ANY = 0, GPU_DECODE_HARDWARE, GPU_DECODE_CUDA };
struct gpu_decoder_opts {
	enum gpu_decode_backend backend;
	int hw_pipelined;
	/* > 0: CPU threads that decode a share of each batch with TurboJPEG while nvJPEG
	 * decodes the rest, split so that both finish together (--decode-threads) */
	int cpu_threads;
	/* nvJPEG's own cudaMalloc/cudaHostAlloc allocators instead of the stream-ordered
	 * ones of the decoder (which are also dropped, with a note, where the device has
	 * no memory pools or nvJPEG refuses them) */
	int default_allocators;
	/* the hardware decoder's memory pool made at create for max_batch images
	 * (nvjpegDecodeBatchedPreAllocate), not grown over the first batches */
	int hw_preallocate;
	/* test-only: nvJPEG's work alone, neither the colour nor the augment kernels (the
	 * batch buffer left unwritten), to split what a batch costs the step beside it */
	int nvjpeg_only;
	/* test-only: the hardware backend decodes whole images, not only the region each
	 * crop reads (nvjpegDecodeBatchedEx), for the test that compares the two */
	int whole_images;
	/* test-only: planes converted to RGB by one kernel, then augmented by another, as
	 * before the one-pass kernel, for the tests that compare the two */
	int two_pass;
};
/* The options gpu_decoder_create uses: the backend GPUPERF_NVJPEG_BACKEND says, no
 * CPU threads, the pool made. */
struct gpu_decoder_opts gpu_decoder_opts_default(void);
int gpu_decoder_create_opts(int device, int max_batch, int size, enum gpu_batch_layout layout,
			    int outputs, const struct gpu_decoder_opts *opts,
			    struct gpu_decoder **out);
/* Decode and augment n items into batch buffer `output` at their dst; returns when
 * the buffer is written (its stream synchronized, not the device). failed[i] = 1
 * for an item no decoder could decode (its dst left unwritten; gpu_decoder_error(d,
 * i) says why), else 0. Errors other than a bad file (CUDA, allocation) are
 * returned. One thread at a time. */
int gpu_decoder_run(struct gpu_decoder *d, int output, const struct gpu_decode_item *items,
		    int n, unsigned char *failed);
/* gpu_decoder_run that returns once the buffer's writes are queued on the device:
 * failed[] is final, the pixels are there once gpu_decoder_output_wait(d, output)
 * returns. The next launch may start at once: it decodes into the other of two plane
 * buffers, and waits only for the kernels of the launch before the last. */
int gpu_decoder_launch(struct gpu_decoder *d, int output, const struct gpu_decode_item *items,
		       int n, unsigned char *failed);
/* Wait (the host) until the last launch into buffer `output` has written it. */
int gpu_decoder_output_wait(struct gpu_decoder *d, int output);
const char *gpu_decoder_error(const struct gpu_decoder *d, int i);
/* Device batch buffer `output`, max_batch samples in the decoder's layout. */
void *gpu_decoder_output(const struct gpu_decoder *d, int output);
/* Its read event (a cudaEvent_t): whoever reads buffer `output` on a stream of its
 * own records it there once done (net_set_batch_device does), and the next
 * gpu_decoder_run into that buffer makes its writes wait for it, on the device. */
void *gpu_decoder_output_event(const struct gpu_decoder *d, int output);
/* "hardware" or "cuda": the backend of the batched call. */
const char *gpu_decoder_backend(const struct gpu_decoder *d);
void gpu_decoder_get_stats(const struct gpu_decoder *d, struct gpu_decode_stats *out);
void gpu_decoder_destroy(struct gpu_decoder *d);

/* Reading the headers ahead: the batch's files are read on another thread while
 * gpu_decoder_run decodes the batch before, and nvJPEG's header parse (2.0-2.8 ms a
 * batch of 256 on the H100, s11) can go there too, off the decode thread. A parser
 * belongs to one thread (its own nvJPEG stream; the handle is shared, which nvJPEG
 * allows); it fills items[i].hdr, which gpu_decoder_run then uses as it is. The
 * decoder outlives its parsers. */
struct gpu_decode_parser;
int gpu_decode_parser_create(struct gpu_decoder *d, struct gpu_decode_parser **out);
void gpu_decoder_parse(struct gpu_decode_parser *p, struct gpu_decode_item *items, int n);
void gpu_decode_parser_destroy(struct gpu_decode_parser *p);

#endif
