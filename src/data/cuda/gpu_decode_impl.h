/* The GPU decoder's state, shared by its two files: gpu_decode.c (the decoder's
 * buffers, launches and the CPU's share) and gpu_decode_nvjpeg.c (nvJPEG's handles,
 * header reads and routing, and its batched and single decodes). Internal to
 * data/cuda. */
#ifndef GP_DATA_CUDA_GPU_DECODE_IMPL_H
#define GP_DATA_CUDA_GPU_DECODE_IMPL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "data/cuda/decode_share.h"
#include "data/cuda/gpu_augment.h"
#include "data/cuda/nj_memory.h"
#include "data/decode_split.h"
#include "data/gpu_decode.h"
#include "data/image.h"
#include "data/nvjpeg.h"
/* The image size the hardware decoder's pool is made for: ImageNet's typical 500x375,
 * rounded up to whole 4:2:0 blocks. */
#define PREALLOCATE_W 512
#define PREALLOCATE_H 384

/* nvjpegCreateEx flags (docs 2.2.17 "nvJPEG Flags"). */
#define NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE 1u
#define NVJPEG_FLAGS_BITSTREAM_STRICT 4u

struct gpu_decoder {
	const struct nvjpeg_api *nj;
	struct nj_memory *mem;     /* NULL: nvJPEG's default allocators */
	int mem_unused;            /* nvJPEG refused mem's allocators: its defaults */
	nvjpeg_handle h;           /* the batched call's: hardware if it could be made */
	nvjpeg_state st;
	nvjpeg_handle h_single;    /* CUDA backend, one image at a time */
	nvjpeg_state st_single;
	nvjpeg_stream js;
	int hw, batched_n;         /* batched_n: the size last initialized, -1 none */
	/* Region decodes: one parameter object per batch position, or NULL where the
	 * hardware backend or nvjpegDecodeBatchedEx is missing, or they were declined or
	 * refused (nj_decode_batched) */
	nvjpeg_decode_params *params;
	cudaStream_t stream;       /* colour conversion, augment and their copies */
	cudaStream_t nj_stream;    /* nvJPEG's calls, synchronized after each */
	int device, max_batch, size;
	int nvjpeg_only, two_pass; /* gpu_decoder_opts' */
	enum gpu_batch_layout layout;

	unsigned char *staging;    /* decoded RGB of the whole batch, device */
	size_t staging_cap;
	/* Two sides, used by launches in turn, so that nvJPEG writes the planes of one
	 * batch while the kernels of the last still read the other side's: the hardware
	 * writes when the call is made, not in a stream's order. */
	struct gpu_decode_side {
		unsigned char *yuv;        /* nvJPEG's planes of the whole batch, device */
		size_t yuv_cap;
		struct gpu_ycc_item *ycc_host;       /* pinned, copied to ycc_dev */
		struct gpu_augment_item *items_host; /* pinned, copied to items_dev */
		struct gpu_planar_item *planar_host; /* pinned, copied to planar_dev */
		cudaEvent_t start, done;   /* around its kernels, on stream */
		int pending;               /* done recorded, not yet waited for */
	} side[2], *cur;
	int batched_fmt;           /* NVJPEG_OUTPUT_YUV, or RGBI where the batched call refuses it */
	int yuv_batch_failures;    /* whole batched calls with planes that failed */
	int region_refusals;       /* batched calls in a row that failed with regions only */
	struct gpu_ycc_item *ycc_dev;
	void **out;                /* the batch buffers, device */
	cudaEvent_t *out_read;     /* each: recorded by the reader of out[k] once it is read */
	cudaEvent_t *out_ready;    /* each: recorded after the last launch's writes into out[k] */
	int outputs;
	struct gpu_augment_item *items_dev;
	struct gpu_planar_item *planar_dev;
	void *aug_table;           /* the augment kernels' filter windows, device */

	/* per item of the running batch */
	size_t *offset;
	size_t *yuv_offset;
	int *route;                /* ROUTE_* */
	int *fmt;                  /* NVJPEG_OUTPUT_YUV, or _Y for a grey JPEG */
	int (*chroma)[4];          /* cw, ch, hs, vs of a YUV item */
	int (*region)[4];          /* x0, y0, x1, y1 of what nvJPEG decodes: the whole
				    * image, or (regions) ycc_roi of the crop's reach */
	unsigned char *planar;     /* 1: decoded as planes, to be converted */
	unsigned char *one_pass;   /* of those: 1 for the one-pass kernel (planes_to_rgb) */
	const unsigned char **bat_data;
	size_t *bat_len;
	struct nvjpeg_image *bat_img;
	int *bat_item;
	char (*errmsg)[GPU_DECODE_ERRMSG];

	struct image_ctx cpu;      /* TurboJPEG/cairo for what nvJPEG refuses */
	struct decode_share *share; /* CPU threads taking a share of each batch, or NULL */
	int share_threads;
	struct decode_split split;
	int *share_idx;            /* the items of the running batch that they take */
	unsigned char *share_failed; /* per item: 1 when TurboJPEG could not decode it */
	struct gpu_decode_stats stats;
};

enum { ROUTE_BATCHED = 0, ROUTE_SINGLE, ROUTE_CPU, ROUTE_FAILED, ROUTE_SHARE };

/* gpu_decode_nvjpeg.c: the handles (hardware first, as the options allow) and the
 * region-decode parameter objects; 0 or a negative error. */
int nj_decode_handles_create(struct gpu_decoder *d, const struct gpu_decoder_opts *o);
void nj_decode_regions_create(struct gpu_decoder *d, const struct gpu_decoder_opts *o);
void nj_decode_regions_destroy(struct gpu_decoder *d);
/* Which decoder takes each of the n items (d->route, d->fmt, d->chroma, d->region). */
void nj_decode_route(struct gpu_decoder *d, const struct gpu_decode_item *items, int n);
/* The batched call over the items routed to it, then the single decodes. */
int nj_decode_batched(struct gpu_decoder *d, const struct gpu_decode_item *items, int n);
int nj_decode_single(struct gpu_decoder *d, const struct gpu_decode_item *items, int n);

/* gpu_decode.c: where nvJPEG writes item i in format fmt. */
struct nvjpeg_image gpu_decoder_item_image(struct gpu_decoder *d, const struct gpu_decode_item *it,
					   int i, int fmt);

#endif
