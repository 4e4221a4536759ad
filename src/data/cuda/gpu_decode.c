/* nvJPEG batched decoding into one device staging area, then two launches: chroma
 * upsampling and colour conversion as TurboJPEG does them (data/ycc.h), then the
 * augmentation. nvJPEG is asked for the planes (NVJPEG_OUTPUT_YUV), not RGB, because
 * its own upsampling repeats chroma samples where TurboJPEG filters them: off by up
 * to 65/255 at sharp colour edges on the H100, against 0 with the planes finished
 * here. The hardware backend is tried first (A100/H100 JPEG engines); where the handle
 * cannot be made (no engines) the batched call runs on the CUDA backend. Files are
 * decoded strictly (NVJPEG_FLAGS_BITSTREAM_STRICT), so that a truncated file fails
 * here as libjpeg's warning fails it on the CPU, and goes to the CPU decoder, which
 * decides whether it is corrupt. */
#include "data/gpu_decode.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "core/tuning.h"
#include "core/timeutil.h"
#include "data/cuda/decode_share.h"
#include "data/cuda/gpu_augment.h"
#include "data/cuda/nj_memory.h"
#include "data/decode_split.h"
#include "data/nvjpeg.h"
#include "data/ycc.h"
#include "ops/cuda/cuda_common.h"

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
	 * refused (decode_batched) */
	nvjpeg_decode_params *params;
	cudaStream_t stream;       /* colour conversion, augment and their copies */
	cudaStream_t nj_stream;    /* nvJPEG's calls, synchronized after each */
	int device, max_batch, size;
	int nvjpeg_only;           /* gpu_decoder_opts' */
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
	void *aug_table;           /* the augment kernel's filter windows, device */

	/* per item of the running batch */
	size_t *offset;
	size_t *yuv_offset;
	int *route;                /* ROUTE_* */
	int *fmt;                  /* NVJPEG_OUTPUT_YUV, or _Y for a grey JPEG */
	int (*chroma)[4];          /* cw, ch, hs, vs of a YUV item */
	int (*region)[4];          /* x0, y0, x1, y1 of what nvJPEG decodes: the whole
				    * image, or (regions) ycc_roi of the crop's reach */
	unsigned char *planar;     /* 1: decoded as planes, to be converted */
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

/* 0, or GP_EDEVICE naming the nvJPEG call and its status. */
static int nj_check(int status, const char *call)
{
	if (status == NVJPEG_STATUS_SUCCESS)
		return 0;
	return gp_error(status == NVJPEG_STATUS_ALLOCATOR_FAILURE ? GP_EDEVOOM : GP_EDEVICE,
			"%s: %s", call, nvjpeg_status_name(status));
}

#define NJ_TRY(call) GP_TRY(nj_check((call), #call))

/* The allocators, where the library has nvjpegCreateExV2 and they are not declined
 * (else d->mem stays NULL: nvJPEG's defaults). */
static int nj_memory_pick(struct gpu_decoder *d, const struct gpu_decoder_opts *o)
{
	if (!nvjpeg_create_ex_v2() || o->default_allocators)
		return 0;
	return nj_memory_create(d->device, &d->mem);
}

/* nvjpegCreateEx, through our allocators where they are there. */
static int nj_create(struct gpu_decoder *d, int backend, unsigned flags, nvjpeg_handle *h)
{
	if (d->mem && !d->mem_unused)
		return nvjpeg_create_ex_v2()(backend, nj_memory_dev(d->mem), nj_memory_pinned(d->mem),
					     flags, h);
	return d->nj->nvjpegCreateEx(backend, NULL, NULL, flags, h);
}

/* Back to whole images: the parameter objects freed. */
static void regions_destroy(struct gpu_decoder *d)
{
	if (!d->params)
		return;
	for (int i = 0; i < d->max_batch; i++)
		if (d->params[i])
			d->nj->nvjpegDecodeParamsDestroy(d->params[i]);
	free(d->params);
	d->params = NULL;
}

/* Hardware with strict parsing, hardware, CUDA strict, CUDA: the first that nvJPEG
 * agrees to make, of the backends asked for. The hardware handle without pipelining
 * where nvJPEG takes the flag: pipelined, the batched call moves each image's planes
 * out of the engines' buffers with copies on streams of nvJPEG's own, one image after
 * another with a host wait between, and each copy needs SMs that the net's kernels
 * hold. Beside a training step (resnet50 bf16, H100, s11-2) a batch then took the
 * step's time plus its own, 58.9 ms; without pipelining 31.1 ms, and training from
 * JPEGs went from 4,204 to 5,428 img/s. Beside a queue of matrix products the
 * pipelined call waits for the whole queue (test gpu_decode_beside_a_busy_gpu). */
static int handles_create(struct gpu_decoder *d, const struct gpu_decoder_opts *o)
{
	enum gpu_decode_backend want = o->backend;
	const unsigned nopipe = o->hw_pipelined ? 0 : NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE;
	const struct {
		int backend;
		unsigned flags;
	} tries[] = {
		{ NVJPEG_BACKEND_HARDWARE, NVJPEG_FLAGS_BITSTREAM_STRICT | nopipe },
		{ NVJPEG_BACKEND_HARDWARE, nopipe },
		{ NVJPEG_BACKEND_HARDWARE, NVJPEG_FLAGS_BITSTREAM_STRICT },
		{ NVJPEG_BACKEND_HARDWARE, 0 },
		{ NVJPEG_BACKEND_DEFAULT, NVJPEG_FLAGS_BITSTREAM_STRICT },
		{ NVJPEG_BACKEND_DEFAULT, 0 },
	};
	int status = NVJPEG_STATUS_NOT_INITIALIZED;
	/* with our allocators, then (if nvJPEG refused every handle with them) its own;
	 * d->mem stays until destroy, unused */
	for (int pass = 0; pass < 2 && !d->h; pass++) {
		if (pass == 1 && !d->mem)
			break;
		d->mem_unused = pass;
		for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]) && !d->h; i++) {
			int hw = tries[i].backend == NVJPEG_BACKEND_HARDWARE;
			if ((want == GPU_DECODE_HARDWARE && !hw) || (want == GPU_DECODE_CUDA && hw))
				continue;
			status = nj_create(d, tries[i].backend, tries[i].flags, &d->h);
			if (status == NVJPEG_STATUS_SUCCESS)
				d->hw = hw;
			else
				d->h = NULL;
		}
	}
	if (!d->h)
		return gp_error(GP_ENODEV, "nvjpegCreateEx: %s", nvjpeg_status_name(status));
	if (d->mem_unused)
		fprintf(stderr, "note: nvJPEG refused the decoder's stream-ordered allocators; "
				"it keeps its own, which wait for the device when they free\n");
	NJ_TRY(d->nj->nvjpegJpegStateCreate(d->h, &d->st));
	NJ_TRY(d->nj->nvjpegJpegStreamCreate(d->h, &d->js));
	/* The hardware decoder's memory pool, made for the whole batch at the start.
	 * Training from JPEGs on the H100 (s14-1, same call): mobilenet_v2 bf16 7,322 ->
	 * 7,658 img/s, resnet50 5,351 -> 5,514; a batch beside resnet50's training 30-31
	 * ms -> 26-27 (gpu_decode_keeps_up_beside_training). NVIDIA's nvImageCodec makes
	 * it always, for ">20%" in 8-GPU training. A refusal costs only the pool. */
	if (d->hw && o->hw_preallocate && d->nj->nvjpegDecodeBatchedPreAllocate)
		d->nj->nvjpegDecodeBatchedPreAllocate(d->h, d->st, d->max_batch, PREALLOCATE_W,
						      PREALLOCATE_H, NVJPEG_CSS_420,
						      NVJPEG_OUTPUT_YUV);
	status = nj_create(d, NVJPEG_BACKEND_DEFAULT, NVJPEG_FLAGS_BITSTREAM_STRICT, &d->h_single);
	if (status != NVJPEG_STATUS_SUCCESS)
		NJ_TRY(nj_create(d, NVJPEG_BACKEND_DEFAULT, 0, &d->h_single));
	NJ_TRY(d->nj->nvjpegJpegStateCreate(d->h_single, &d->st_single));
	return 0;
}

/* Region decodes: the engines decode only the MCUs a crop reads (ycc_roi), about half
 * of a 500x375 image's pixels under RandomResizedCrop (gpu_decode_options_give_the_
 * same_batch prints the share). Made where the hardware backend and
 * nvjpegDecodeBatchedEx are there; a parameter object that cannot be made leaves the
 * decoder on whole images. */
static void regions_create(struct gpu_decoder *d, const struct gpu_decoder_opts *o)
{
	const struct nvjpeg_api *nj = d->nj;
	if (!d->hw || o->whole_images || !nj->nvjpegDecodeBatchedEx ||
	    !nj->nvjpegDecodeParamsCreate || !nj->nvjpegDecodeParamsDestroy ||
	    !nj->nvjpegDecodeParamsSetROI)
		return;
	d->params = calloc((size_t)d->max_batch, sizeof(*d->params));
	if (!d->params)
		return;
	for (int i = 0; i < d->max_batch; i++)
		if (nj->nvjpegDecodeParamsCreate(d->h, &d->params[i]) != NVJPEG_STATUS_SUCCESS) {
			d->params[i] = NULL;
			regions_destroy(d);
			return;
		}
}

int gpu_decoder_create(int device, int max_batch, int size, enum gpu_batch_layout layout,
		       int outputs, struct gpu_decoder **out)
{
	struct gpu_decoder_opts o = gpu_decoder_opts_default();
	return gpu_decoder_create_opts(device, max_batch, size, layout, outputs, &o, out);
}

struct gpu_decoder_opts gpu_decoder_opts_default(void)
{
	return (struct gpu_decoder_opts){
		.backend = (enum gpu_decode_backend)tuning_get()->nvjpeg_backend,
		.hw_preallocate = 1,
	};
}

int gpu_decoder_create_opts(int device, int max_batch, int size, enum gpu_batch_layout layout,
			    int outputs, const struct gpu_decoder_opts *opts,
			    struct gpu_decoder **out)
{
	if (opts->backend < GPU_DECODE_ANY || opts->backend > GPU_DECODE_CUDA)
		return gp_error(GP_EINVAL, "gpu decoder: backend %d", (int)opts->backend);
	if (max_batch < 1 || max_batch > 65535 || size < 1 || outputs < 1 || outputs > 8)
		return gp_error(GP_EINVAL, "gpu decoder: batch 1..65535, size >= 1 and 1..8 "
				"outputs (got %d, %d, %d)", max_batch, size, outputs);
	int n_dev = 0;
	if (cudaGetDeviceCount(&n_dev) != cudaSuccess || device < 0 || device >= n_dev) {
		cudaGetLastError();
		return gp_error(GP_ENODEV, "gpu decoder: no CUDA device %d", device);
	}
	struct gpu_decoder *d = calloc(1, sizeof(*d));
	if (!d)
		return gp_error(GP_ENOMEM, "out of memory");
	d->device = device;
	d->max_batch = max_batch;
	d->size = size;
	d->layout = layout;
	d->nvjpeg_only = opts->nvjpeg_only;
	d->batched_n = -1;
	d->batched_fmt = NVJPEG_OUTPUT_YUV;
	d->cur = &d->side[0];
	int rc = nvjpeg_open(&d->nj);
	if (rc < 0) {
		free(d);
		return rc;
	}
	size_t n = (size_t)max_batch;
	d->offset = calloc(n, sizeof(*d->offset));
	d->yuv_offset = calloc(n, sizeof(*d->yuv_offset));
	d->route = calloc(n, sizeof(*d->route));
	d->fmt = calloc(n, sizeof(*d->fmt));
	d->chroma = calloc(n, sizeof(*d->chroma));
	d->region = calloc(n, sizeof(*d->region));
	d->planar = calloc(n, 1);
	d->bat_data = calloc(n, sizeof(*d->bat_data));
	d->bat_len = calloc(n, sizeof(*d->bat_len));
	d->bat_img = calloc(n, sizeof(*d->bat_img));
	d->bat_item = calloc(n, sizeof(*d->bat_item));
	d->errmsg = calloc(n, sizeof(*d->errmsg));
	d->out = calloc(outputs, sizeof(*d->out));
	d->out_read = calloc(outputs, sizeof(*d->out_read));
	d->out_ready = calloc(outputs, sizeof(*d->out_ready));
	if (!d->out || !d->out_read || !d->out_ready || !d->offset || !d->yuv_offset || !d->route || !d->fmt ||
	    !d->chroma || !d->region || !d->planar || !d->bat_data || !d->bat_len || !d->bat_img ||
	    !d->bat_item || !d->errmsg) {
		rc = gp_error(GP_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = image_ctx_init(&d->cpu)) < 0)
		goto fail;
	if ((rc = CUDA_CHECK(cudaSetDevice(device))) < 0 ||
	    (rc = CUDA_CHECK(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking))) < 0 ||
	    (rc = CUDA_CHECK(cudaStreamCreateWithFlags(&d->nj_stream, cudaStreamNonBlocking))) < 0)
		goto fail;
	for (; d->outputs < outputs; d->outputs++) {
		int k = d->outputs;
		if ((rc = CUDA_CHECK(cudaMalloc(&d->out[k], n * 3 * size * size *
						gpu_batch_elem_bytes(layout)))) < 0)
			goto fail;
		if ((rc = CUDA_CHECK(cudaEventCreateWithFlags(&d->out_read[k],
							      cudaEventDisableTiming))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreateWithFlags(&d->out_ready[k],
							      cudaEventDisableTiming))) < 0) {
			if (d->out_read[k])
				cudaEventDestroy(d->out_read[k]);
			cudaFree(d->out[k]);
			goto fail;
		}
	}
	if ((rc = CUDA_CHECK(cudaMalloc((void **)&d->items_dev, n * sizeof(*d->items_dev)))) < 0 ||
	    (rc = CUDA_CHECK(cudaMalloc(&d->aug_table, gpu_augment_table_bytes(max_batch, size)))) < 0 ||
	    (rc = CUDA_CHECK(cudaMalloc((void **)&d->ycc_dev, n * sizeof(*d->ycc_dev)))) < 0)
		goto fail;
	for (int k = 0; k < 2; k++) {
		struct gpu_decode_side *sd = &d->side[k];
		if ((rc = CUDA_CHECK(cudaMallocHost((void **)&sd->items_host,
						    n * sizeof(*sd->items_host)))) < 0 ||
		    (rc = CUDA_CHECK(cudaMallocHost((void **)&sd->ycc_host,
						    n * sizeof(*sd->ycc_host)))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreate(&sd->start))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreate(&sd->done))) < 0)
			goto fail;
	}
	if ((rc = nj_memory_pick(d, opts)) < 0 || (rc = handles_create(d, opts)) < 0)
		goto fail;
	regions_create(d, opts);
	if (opts->cpu_threads > 0) {
		d->share_idx = calloc(n, sizeof(*d->share_idx));
		d->share_failed = calloc(n, 1);
		if (!d->share_idx || !d->share_failed) {
			rc = gp_error(GP_ENOMEM, "out of memory");
			goto fail;
		}
		if ((rc = decode_share_create(device, opts->cpu_threads, size, &d->share)) < 0)
			goto fail;
		d->share_threads = opts->cpu_threads;
	}
	*out = d;
	return 0;
fail:
	gpu_decoder_destroy(d);
	return rc;
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* Room for every item's decoded RGB, rows of 3w bytes, each image 256-byte aligned. */
static int staging_reserve(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		d->offset[i] = total;
		total += align_up((size_t)items[i].w * 3 * items[i].h, 256);
	}
	if (total <= d->staging_cap)
		return 0;
	CUDA_TRY(cudaStreamSynchronize(d->stream));
	cudaFree(d->staging);
	d->staging = NULL;
	d->staging_cap = 0;
	size_t cap = total + total / 4;
	CUDA_TRY(cudaMalloc((void **)&d->staging, cap));
	d->staging_cap = cap;
	return 0;
}

/* Room for one plane of item i: a full-size one, even for subsampled chroma. nvJPEG's
 * documents give the chroma planes their subsampled size, which is what ycc.h reads;
 * the room beyond it costs 1.5 bytes a pixel and guards the next image against a
 * decoder that would write more. Rows are packed: 256-byte rows (pitch) kept nvJPEG's
 * copies out of the engines' buffers just the same (s14-3). */
static size_t plane_room(const struct gpu_decode_item *it)
{
	return align_up((size_t)it->w * it->h, 256);
}

/* Bytes of item i's planes: Y, then Cb and Cr for a YUV item. */
static size_t planes_bytes(const struct gpu_decoder *d, const struct gpu_decode_item *it, int i)
{
	return (d->fmt[i] == NVJPEG_OUTPUT_YUV ? 3 : 1) * plane_room(it);
}

/* Room for the planes of the items nvJPEG decodes (after route_items). */
static int yuv_reserve(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	struct gpu_decode_side *sd = d->cur;
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		d->yuv_offset[i] = total;
		if (d->route[i] == ROUTE_BATCHED || d->route[i] == ROUTE_SINGLE)
			total += planes_bytes(d, &items[i], i);
	}
	if (total <= sd->yuv_cap)
		return 0;
	CUDA_TRY(cudaStreamSynchronize(d->stream));
	cudaFree(sd->yuv);
	sd->yuv = NULL;
	sd->yuv_cap = 0;
	size_t cap = total + total / 4;
	CUDA_TRY(cudaMalloc((void **)&sd->yuv, cap));
	sd->yuv_cap = cap;
	return 0;
}

/* Where nvJPEG writes item i in format fmt: its planes, region-sized (d->region[i]),
 * or (RGBI) its RGB staging. */
static struct nvjpeg_image item_image(struct gpu_decoder *d, const struct gpu_decode_item *it,
				      int i, int fmt)
{
	struct nvjpeg_image img;
	memset(&img, 0, sizeof(img));
	if (fmt == NVJPEG_OUTPUT_RGBI) {
		img.channel[0] = d->staging + d->offset[i];
		img.pitch[0] = (size_t)it->w * 3;
		return img;
	}
	const int *r = d->region[i];
	img.channel[0] = d->cur->yuv + d->yuv_offset[i];
	img.pitch[0] = (size_t)(r[2] - r[0]);
	if (fmt == NVJPEG_OUTPUT_YUV) {
		int hs = d->chroma[i][2];
		img.channel[1] = img.channel[0] + plane_room(it);
		img.channel[2] = img.channel[1] + plane_room(it);
		img.pitch[1] = img.pitch[2] = (size_t)((r[2] + hs - 1) / hs - r[0] / hs);
	}
	return img;
}

/* The chroma layout that ycc.h finishes as TurboJPEG does: 4:4:4, 4:2:2 (h2v1) and
 * 4:2:0 (h2v2), with plane sizes as libjpeg rounds them; 0 for any other. */
static int chroma_layout(int css, int w, int h, const int *ws, const int *hs, int *out)
{
	int sx = css == NVJPEG_CSS_444 ? 1 : css == NVJPEG_CSS_422 || css == NVJPEG_CSS_420 ? 2 : 0;
	int sy = css == NVJPEG_CSS_420 ? 2 : 1;
	if (!sx)
		return 0;
	int cw = (w + sx - 1) / sx, ch = (h + sy - 1) / sy;
	if (ws[1] != cw || hs[1] != ch || ws[2] != cw || hs[2] != ch)
		return 0;
	out[0] = cw;
	out[1] = ch;
	out[2] = sx;
	out[3] = sy;
	return 1;
}

/* Which decoder takes each item: nvJPEG only for a JPEG whose header it reads with
 * the size TurboJPEG read and whose chroma ycc.h finishes (else TurboJPEG, for its
 * pixels: 4:4:0 and 4:1:1 are rare); the batched call only for what it supports,
 * and not for a grey JPEG (one output format per batched call: planes of three). */
/* nvJPEG's view of the item's header, into *hd, through jpeg stream js (one per thread). */
static void header_read(const struct gpu_decoder *d, nvjpeg_stream js,
			const struct gpu_decode_item *it, struct gpu_decode_header *hd)
{
	memset(hd, 0, sizeof(*hd));
	hd->parsed = 1;
	if (it->kind != IMAGE_JPEG)
		return;
	hd->info_ok = d->nj->nvjpegGetImageInfo(d->h, it->data, it->len_bytes, &hd->nc, &hd->css,
						 hd->ws, hd->hs) == NVJPEG_STATUS_SUCCESS;
	if (!hd->info_ok || !d->hw)
		return;
	int unsupported = 1;
	hd->batched_ok = d->nj->nvjpegJpegStreamParseHeader(d->h, it->data, it->len_bytes, js) ==
				 NVJPEG_STATUS_SUCCESS &&
			 d->nj->nvjpegDecodeBatchedSupported(d->h, js, &unsupported) ==
				 NVJPEG_STATUS_SUCCESS &&
			 !unsupported;
}

static void route_items(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	for (int i = 0; i < n; i++) {
		const struct gpu_decode_item *it = &items[i];
		struct gpu_decode_header own;
		const struct gpu_decode_header *hd = &it->hdr;
		if (!hd->parsed) {
			header_read(d, d->js, it, &own);
			hd = &own;
		} else {
			d->stats.parsed_ahead++;
		}
		d->errmsg[i][0] = 0;
		d->route[i] = ROUTE_CPU;
		d->fmt[i] = NVJPEG_OUTPUT_YUV;
		d->region[i][0] = d->region[i][1] = 0;
		d->region[i][2] = it->w;
		d->region[i][3] = it->h;
		if (it->kind != IMAGE_JPEG || !hd->info_ok || hd->ws[0] != it->w ||
		    hd->hs[0] != it->h || (hd->nc != 1 && hd->nc != 3))
			continue;
		if (hd->nc == 1 || hd->css == NVJPEG_CSS_GRAY) {
			d->fmt[i] = NVJPEG_OUTPUT_Y;
			d->route[i] = ROUTE_SINGLE;
			continue;
		}
		if (!chroma_layout(hd->css, it->w, it->h, hd->ws, hd->hs, d->chroma[i]))
			continue;
		d->route[i] = ROUTE_BATCHED;
		if (d->hw && !hd->batched_ok)
			d->route[i] = ROUTE_SINGLE;
	}
}

struct gpu_decode_parser {
	const struct gpu_decoder *d;
	nvjpeg_stream js;
};

int gpu_decode_parser_create(struct gpu_decoder *d, struct gpu_decode_parser **out)
{
	struct gpu_decode_parser *p = calloc(1, sizeof(*p));
	if (!p)
		return gp_error(GP_ENOMEM, "out of memory");
	p->d = d;
	int status = d->nj->nvjpegJpegStreamCreate(d->h, &p->js);
	if (status != NVJPEG_STATUS_SUCCESS) {
		free(p);
		return gp_error(GP_EDEVICE, "nvjpegJpegStreamCreate: %s", nvjpeg_status_name(status));
	}
	*out = p;
	return 0;
}

void gpu_decoder_parse(struct gpu_decode_parser *p, struct gpu_decode_item *items, int n)
{
	for (int i = 0; i < n; i++)
		header_read(p->d, p->js, &items[i], &items[i].hdr);
}

void gpu_decode_parser_destroy(struct gpu_decode_parser *p)
{
	if (!p)
		return;
	p->d->nj->nvjpegJpegStreamDestroy(p->js);
	free(p);
}

/* Whether a JPEG's data end with its EOI marker (within a few bytes of padding). A
 * truncated file must fail on the engines as it fails on the CPU, and a region that
 * ends before the truncation would decode: such a file is decoded whole. */
static int jpeg_ends_whole(const unsigned char *p, size_t len)
{
	for (size_t k = 2; k <= len && k <= 32; k++)
		if (p[len - k] == 0xFF && p[len - k + 1] == 0xD9)
			return 1;
	return 0;
}

/* Item i's region: what its crop reads (ycc_roi), or (whole, or a file without its
 * end) the image. */
static void region_set(struct gpu_decoder *d, const struct gpu_decode_item *it, int i,
		       int whole)
{
	int *r = d->region[i];
	if (whole || !jpeg_ends_whole(it->data, it->len_bytes)) {
		r[0] = r[1] = 0;
		r[2] = it->w;
		r[3] = it->h;
		return;
	}
	int reach[4];
	image_resample_reach(&it->geo.box, d->size, d->size, reach);
	ycc_roi(it->w, it->h, d->chroma[i][2], d->chroma[i][3], reach, r);
}

/* The batched call's destinations for its nb items, with regions or whole images;
 * 0, or the status of the first region nvJPEG refused. */
static int batched_prepare(struct gpu_decoder *d, const struct gpu_decode_item *items, int nb,
			   int regions)
{
	for (int k = 0; k < nb; k++) {
		int i = d->bat_item[k];
		region_set(d, &items[i], i, !regions);
		d->bat_img[k] = item_image(d, &items[i], i, d->batched_fmt);
		if (!regions)
			continue;
		const int *r = d->region[i];
		int status = d->nj->nvjpegDecodeParamsSetROI(d->params[k], r[0], r[1], r[2] - r[0],
							     r[3] - r[1]);
		if (status != NVJPEG_STATUS_SUCCESS)
			return status;
	}
	return NVJPEG_STATUS_SUCCESS;
}

/* One batched call over the nb items of bat_*, with regions or not: initialized for
 * nb when it was not, made on nj_stream and waited for. */
static int batched_call(struct gpu_decoder *d, const struct gpu_decode_item *items, int nb,
			int regions)
{
	int status = NVJPEG_STATUS_SUCCESS;
	if (d->batched_n != nb) {
		status = d->nj->nvjpegDecodeBatchedInitialize(d->h, d->st, nb, 1, d->batched_fmt);
		d->batched_n = status == NVJPEG_STATUS_SUCCESS ? nb : -1;
	}
	if (status == NVJPEG_STATUS_SUCCESS)
		status = batched_prepare(d, items, nb, regions);
	if (status == NVJPEG_STATUS_SUCCESS)
		status = regions ? d->nj->nvjpegDecodeBatchedEx(d->h, d->st, d->bat_data, d->bat_len,
								d->bat_img, d->params, d->nj_stream)
				 : d->nj->nvjpegDecodeBatched(d->h, d->st, d->bat_data, d->bat_len,
							      d->bat_img, d->nj_stream);
	if (status == NVJPEG_STATUS_SUCCESS)
		status = cudaStreamSynchronize(d->nj_stream) == cudaSuccess
				 ? NVJPEG_STATUS_SUCCESS : NVJPEG_STATUS_EXECUTION_FAILED;
	if (status != NVJPEG_STATUS_SUCCESS) {
		cudaGetLastError();
		d->batched_n = -1; /* the docs ask for a new initialization after a failure */
	}
	return status;
}

/* The batched call over the items routed to it; if it fails as a whole, they go one
 * by one (a single bad file must not cost the others their GPU decode).
 * The hardware path writes its planes when the call is made, not in the stream's
 * order (measured on H100s with nvJPEG 12.3 to 13.2, torchcodec #1634): work still
 * queued that reads the same planes would see them overwritten. None is: the planes
 * are the running side's, whose last kernels gpu_decoder_launch waited for; RGB
 * (RGBI) goes straight into the staging that the last batch's augment may still
 * read, so the stream is synchronized first; yuv_reserve synchronizes it before it
 * replaces a buffer. The call gets a stream of its own (nvJPEG makes its engines'
 * work wait for what is queued on it), synchronized after it. Splitting a batch into
 * two calls made at once from two threads (own states and streams) brought back the
 * wait for the net's queue on the H100 (s11-5: 226 ms a batch beside resnet50's
 * training), so one call it is. With regions, a failed call is made again on whole
 * images: if that one succeeds, the engines refused the regions (three calls in a
 * row, and the decoder keeps to whole images from then on); if it fails too, a file
 * was bad. */
static int decode_batched(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	int nb = 0;
	for (int i = 0; i < n; i++) {
		if (d->route[i] != ROUTE_BATCHED)
			continue;
		d->bat_data[nb] = items[i].data;
		d->bat_len[nb] = items[i].len_bytes;
		d->bat_item[nb++] = i;
	}
	if (nb == 0)
		return 0;
	if (d->batched_n != nb && d->batched_fmt == NVJPEG_OUTPUT_YUV) {
		int init = d->nj->nvjpegDecodeBatchedInitialize(d->h, d->st, nb, 1, d->batched_fmt);
		d->batched_n = init == NVJPEG_STATUS_SUCCESS ? nb : -1;
		if (init != NVJPEG_STATUS_SUCCESS) /* planes refused: nvJPEG's RGB (its chroma
						    * upsampling), counted */
			d->batched_fmt = NVJPEG_OUTPUT_RGBI;
	}
	if (d->batched_fmt == NVJPEG_OUTPUT_RGBI) /* staging, which the last augment reads */
		CUDA_TRY(cudaStreamSynchronize(d->stream));
	int regions = d->params && d->batched_fmt == NVJPEG_OUTPUT_YUV;
	int status = batched_call(d, items, nb, regions);
	if (status != NVJPEG_STATUS_SUCCESS && status != NVJPEG_STATUS_ALLOCATOR_FAILURE &&
	    regions) {
		status = batched_call(d, items, nb, 0);
		if (status == NVJPEG_STATUS_SUCCESS && ++d->region_refusals >= 3) {
			fprintf(stderr, "note: nvJPEG's engines refused region decodes in %d batches "
					"in a row; whole images from now on\n", d->region_refusals);
			regions_destroy(d);
		}
		regions = 0;
	} else if (status == NVJPEG_STATUS_SUCCESS && regions) {
		d->region_refusals = 0;
	}
	if (status == NVJPEG_STATUS_SUCCESS) {
		if (d->hw)
			d->stats.hw_decoded += nb;
		else
			d->stats.cuda_decoded += nb;
		for (int k = 0; k < nb; k++) {
			int i = d->bat_item[k];
			const int *r = d->region[i];
			d->planar[i] = d->batched_fmt != NVJPEG_OUTPUT_RGBI;
			if (regions) {
				d->stats.region_pixels += (double)(r[2] - r[0]) * (r[3] - r[1]);
				d->stats.region_full_pixels += (double)items[i].w * items[i].h;
			}
		}
		if (regions)
			d->stats.region_decoded += nb;
		if (d->batched_fmt == NVJPEG_OUTPUT_RGBI)
			d->stats.nvjpeg_chroma += nb;
		else
			d->yuv_batch_failures = 0;
		return 0;
	}
	if (status == NVJPEG_STATUS_ALLOCATOR_FAILURE)
		return nj_check(status, "nvjpegDecodeBatched");
	for (int k = 0; k < nb; k++) {
		int i = d->bat_item[k];
		d->route[i] = ROUTE_SINGLE;
		region_set(d, &items[i], i, 1);
	}
	/* Whole batched calls failing again and again with planes, while one bad file
	 * fails only its own batch: the engines take planes at initialization but not at
	 * decode. Then speed wins over TurboJPEG's chroma, and the count says so. */
	if (d->batched_fmt == NVJPEG_OUTPUT_YUV && ++d->yuv_batch_failures >= 3)
		d->batched_fmt = NVJPEG_OUTPUT_RGBI;
	return 0;
}

static int decode_single(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	for (int i = 0; i < n; i++) {
		if (d->route[i] != ROUTE_SINGLE)
			continue;
		struct nvjpeg_image img = item_image(d, &items[i], i, d->fmt[i]);
		int status = d->nj->nvjpegDecode(d->h_single, d->st_single, items[i].data,
						 items[i].len_bytes, d->fmt[i], &img, d->nj_stream);
		if (status == NVJPEG_STATUS_SUCCESS &&
		    cudaStreamSynchronize(d->nj_stream) != cudaSuccess)
			status = NVJPEG_STATUS_EXECUTION_FAILED;
		if (status == NVJPEG_STATUS_ALLOCATOR_FAILURE)
			return nj_check(status, "nvjpegDecode");
		if (status == NVJPEG_STATUS_SUCCESS) {
			d->stats.cuda_decoded++;
			d->planar[i] = 1;
		} else {
			cudaGetLastError();
			d->route[i] = ROUTE_CPU;
		}
	}
	return 0;
}

/* TurboJPEG (or cairo) at full size, then up to the item's staging place. The copy
 * goes on the decoder's stream: a plain cudaMemcpy would run on the legacy default
 * stream and wait for the net's work. From pageable memory it returns once the
 * pixels are staged, so img.pix may be reused for the next item. */
static int decode_cpu(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	for (int i = 0; i < n; i++) {
		if (d->route[i] != ROUTE_CPU)
			continue;
		const struct gpu_decode_item *it = &items[i];
		struct image img;
		int rc = image_decode(&d->cpu, it->data, it->len_bytes, it->kind, it->w, it->h, &img);
		if (rc == GP_EFORMAT || (rc == 0 && (img.w != it->w || img.h != it->h))) {
			snprintf(d->errmsg[i], GPU_DECODE_ERRMSG, "%s",
				 rc < 0 ? gp_errmsg() : "decoded size differs from the header's");
			d->route[i] = ROUTE_FAILED;
			d->stats.failed++;
			continue;
		}
		GP_TRY(rc);
		size_t bytes = (size_t)img.w * img.h * 3;
		CUDA_TRY(cudaMemcpyAsync(d->staging + d->offset[i], img.pix, bytes,
					 cudaMemcpyHostToDevice, d->stream));
		d->stats.cpu_fallback++;
	}
	return 0;
}

/* Where sample (0, 0) of a plane would be, given the address of sample (x, y), the
 * region's corner: the colour kernel indexes planes by image coordinates. For the
 * reach's pixels it reads only inside the region (ycc_roi); for the few pixels it
 * converts beside the reach (its groups of four start on a multiple of 4) it may read
 * a chroma sample just outside, which stays inside the item's plane room (plane_room:
 * full-size rooms) and reaches no pixel the augment reads. Device addresses, computed
 * as integers. */
static const unsigned char *plane_origin(const unsigned char *p, size_t pitch, int x, int y)
{
	return (const unsigned char *)((uintptr_t)p - (size_t)y * pitch - (size_t)x);
}

/* Items decoded as planes become RGB in their staging place, TurboJPEG's way, but
 * only where the augment reads (image_resample_reach): a random crop's reach is about
 * half the image on average, and the conversion's time goes with its pixels. */
static int planes_to_rgb(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	int m = 0, max_w = 0, max_h = 0;
	for (int i = 0; i < n; i++) {
		if (!d->planar[i] || d->route[i] == ROUTE_FAILED || d->route[i] == ROUTE_CPU)
			continue;
		const struct gpu_decode_item *it = &items[i];
		struct nvjpeg_image img = item_image(d, it, i, d->fmt[i]);
		struct gpu_ycc_item *y = &d->cur->ycc_host[m++];
		const int *r = d->region[i];
		memset(y, 0, sizeof(*y));
		y->y = plane_origin(img.channel[0], img.pitch[0], r[0], r[1]);
		y->y_pitch = img.pitch[0];
		if (d->fmt[i] == NVJPEG_OUTPUT_YUV) {
			const int *c = d->chroma[i];
			y->cb = (struct ycc_plane){
				plane_origin(img.channel[1], img.pitch[1], r[0] / c[2], r[1] / c[3]),
				img.pitch[1], c[0], c[1], c[2], c[3] };
			y->cr = y->cb;
			y->cr.p = plane_origin(img.channel[2], img.pitch[2], r[0] / c[2], r[1] / c[3]);
		}
		int reach[4];
		image_resample_reach(&it->geo.box, d->size, d->size, reach);
		y->x0 = reach[0];
		y->y0 = reach[1];
		y->w = reach[2] - reach[0];
		y->h = reach[3] - reach[1];
		y->dst = d->staging + d->offset[i];
		y->dst_pitch = (size_t)it->w * 3;
		max_w = y->w > max_w ? y->w : max_w;
		max_h = y->h > max_h ? y->h : max_h;
	}
	if (m == 0)
		return 0;
	CUDA_TRY(cudaMemcpyAsync(d->ycc_dev, d->cur->ycc_host, (size_t)m * sizeof(*d->ycc_dev),
				 cudaMemcpyHostToDevice, d->stream));
	return gpu_ycc_launch(d->ycc_dev, m, max_w, max_h, d->stream);
}

/* With CPU threads: the last of the items routed to the batched call go to them
 * instead, as many as the split gives (decode_split.h); their indices in share_idx. */
static int share_pick(struct gpu_decoder *d, int n)
{
	if (!d->share)
		return 0;
	int nb = 0;
	for (int i = 0; i < n; i++)
		nb += d->route[i] == ROUTE_BATCHED;
	int k = decode_split_cpu_count(&d->split, nb, d->share_threads), j = 0;
	for (int i = n - 1; i >= 0 && j < k; i--) {
		if (d->route[i] != ROUTE_BATCHED)
			continue;
		d->route[i] = ROUTE_SHARE;
		d->share_idx[j++] = i;
	}
	return j;
}

/* Wait for the threads' k items (rc: the GPU side's result so far): what TurboJPEG
 * could not decode is failed as on the CPU path, the rest counted, and both sides'
 * times go into the next split. */
static int share_finish(struct gpu_decoder *d, int k, int rc, double batched_ms,
			long batched_n)
{
	double thread_ms = 0;
	int src = decode_share_wait(d->share, &thread_ms);
	if (rc == 0)
		rc = src;
	if (rc < 0)
		return rc;
	int ok = 0;
	for (int j = 0; j < k; j++) {
		int i = d->share_idx[j];
		if (d->share_failed[i]) {
			d->route[i] = ROUTE_FAILED;
			d->stats.failed++;
		} else {
			ok++;
		}
	}
	d->stats.cpu_shared += ok;
	decode_split_update(&d->split, batched_ms, (int)batched_n, thread_ms, k);
	return 0;
}

/* Wait for side sd's last kernels, and count their GPU time. */
static int side_settle(struct gpu_decoder *d, struct gpu_decode_side *sd)
{
	if (!sd->pending)
		return 0;
	sd->pending = 0;
	CUDA_TRY(cudaEventSynchronize(sd->done));
	float ms = 0;
	CUDA_TRY(cudaEventElapsedTime(&ms, sd->start, sd->done));
	d->stats.augment_ms += ms;
	return 0;
}

int gpu_decoder_launch(struct gpu_decoder *d, int output, const struct gpu_decode_item *items,
		       int n, unsigned char *failed)
{
	if (n < 0 || n > d->max_batch)
		return gp_error(GP_EINVAL, "gpu decoder: %d items for a batch of %d", n,
				d->max_batch);
	if (output < 0 || output >= d->outputs)
		return gp_error(GP_EINVAL, "gpu decoder: output %d of %d", output, d->outputs);
	for (int i = 0; i < n; i++)
		if (items[i].dst < 0 || items[i].dst >= d->max_batch)
			return gp_error(GP_EINVAL, "gpu decoder: item %d goes to sample %d of %d", i,
					items[i].dst, d->max_batch);
	CUDA_TRY(cudaSetDevice(d->device));
	d->cur = &d->side[d->cur == &d->side[0]];
	GP_TRY(side_settle(d, d->cur)); /* the launch before the last: done long since */
	double t0 = gp_now_ms();
	GP_TRY(staging_reserve(d, items, n));
	double tp = gp_now_ms();
	route_items(d, items, n);
	d->stats.parse_ms += gp_now_ms() - tp;
	int k = share_pick(d, n);
	GP_TRY(yuv_reserve(d, items, n));
	memset(d->planar, 0, (size_t)n);
	if (k > 0) /* the threads write staging on their own stream: the last augment first */
		CUDA_TRY(cudaStreamSynchronize(d->stream));
	if (k > 0)
		decode_share_start(d->share, items, d->share_idx, k, d->staging, d->offset,
				   d->share_failed, d->errmsg);
	long hw0 = d->stats.hw_decoded + d->stats.cuda_decoded;
	double tb = gp_now_ms();
	int rc = decode_batched(d, items, n);
	double batched_ms = gp_now_ms() - tb;
	long batched_n = d->stats.hw_decoded + d->stats.cuda_decoded - hw0;
	if (rc == 0)
		rc = decode_single(d, items, n);
	if (rc == 0)
		rc = decode_cpu(d, items, n);
	if (k > 0) /* waited for even after an error: the threads write staging */
		rc = share_finish(d, k, rc, batched_ms, batched_n);
	GP_TRY(rc);
	double t1 = gp_now_ms();
	struct gpu_decode_side *sd = d->cur;
	CUDA_TRY(cudaEventRecord(sd->start, d->stream));
	if (!d->nvjpeg_only)
		GP_TRY(planes_to_rgb(d, items, n));
	int m = 0;
	for (int i = 0; i < n; i++) {
		failed[i] = d->route[i] == ROUTE_FAILED;
		if (failed[i])
			continue;
		struct gpu_augment_item *a = &sd->items_host[m++];
		const struct gpu_decode_item *it = &items[i];
		a->src = d->staging + d->offset[i];
		a->pitch = (size_t)it->w * 3;
		a->w = it->w;
		a->h = it->h;
		a->box = it->geo.box;
		a->flip = it->geo.flip;
		a->dst = it->dst;
	}
	if (m > 0 && !d->nvjpeg_only) {
		CUDA_TRY(cudaMemcpyAsync(d->items_dev, sd->items_host, (size_t)m * sizeof(*d->items_dev),
					 cudaMemcpyHostToDevice, d->stream));
		/* the buffer's last reader done (a never recorded event is no wait) */
		CUDA_TRY(cudaStreamWaitEvent(d->stream, d->out_read[output], 0));
		GP_TRY(gpu_augment_launch(d->items_dev, m, d->size, d->layout, imagenet_mean,
					  imagenet_std, d->aug_table, d->out[output], d->stream));
	}
	CUDA_TRY(cudaEventRecord(d->out_ready[output], d->stream));
	CUDA_TRY(cudaEventRecord(sd->done, d->stream));
	sd->pending = 1;
	d->stats.decode_ms += t1 - t0;
	return 0;
}

int gpu_decoder_run(struct gpu_decoder *d, int output, const struct gpu_decode_item *items,
		    int n, unsigned char *failed)
{
	GP_TRY(gpu_decoder_launch(d, output, items, n, failed));
	return side_settle(d, d->cur);
}

int gpu_decoder_output_wait(struct gpu_decoder *d, int output)
{
	if (output < 0 || output >= d->outputs)
		return gp_error(GP_EINVAL, "gpu decoder: output %d of %d", output, d->outputs);
	return CUDA_CHECK(cudaEventSynchronize(d->out_ready[output]));
}

const char *gpu_decoder_error(const struct gpu_decoder *d, int i)
{
	return i >= 0 && i < d->max_batch ? d->errmsg[i] : "";
}

void *gpu_decoder_output(const struct gpu_decoder *d, int output)
{
	return output >= 0 && output < d->outputs ? d->out[output] : NULL;
}

void *gpu_decoder_output_event(const struct gpu_decoder *d, int output)
{
	return output >= 0 && output < d->outputs ? (void *)d->out_read[output] : NULL;
}

const char *gpu_decoder_backend(const struct gpu_decoder *d)
{
	return d->hw ? "hardware" : "cuda";
}

void gpu_decoder_get_stats(const struct gpu_decoder *d, struct gpu_decode_stats *out)
{
	*out = d->stats;
}

void gpu_decoder_destroy(struct gpu_decoder *d)
{
	if (!d)
		return;
	if (d->stream)
		cudaStreamSynchronize(d->stream);
	if (d->nj_stream)
		cudaStreamSynchronize(d->nj_stream);
	decode_share_destroy(d->share); /* idle between runs: joined at once */
	free(d->share_idx);
	free(d->share_failed);
	if (d->nj) {
		regions_destroy(d);
		if (d->js)
			d->nj->nvjpegJpegStreamDestroy(d->js);
		if (d->st)
			d->nj->nvjpegJpegStateDestroy(d->st);
		if (d->st_single)
			d->nj->nvjpegJpegStateDestroy(d->st_single);
		if (d->h)
			d->nj->nvjpegDestroy(d->h);
		if (d->h_single)
			d->nj->nvjpegDestroy(d->h_single);
		if (d->stream)
			cudaStreamSynchronize(d->stream);
		if (d->nj_stream)
			cudaStreamSynchronize(d->nj_stream);
		nj_memory_free(d->mem); /* after the handles: they free through it */
		nvjpeg_close();
	}
	cudaFree(d->staging);
	cudaFree(d->ycc_dev);
	for (int k = 0; k < 2; k++) {
		struct gpu_decode_side *sd = &d->side[k];
		cudaFree(sd->yuv);
		cudaFreeHost(sd->ycc_host);
		cudaFreeHost(sd->items_host);
		if (sd->start)
			cudaEventDestroy(sd->start);
		if (sd->done)
			cudaEventDestroy(sd->done);
	}
	for (int k = 0; k < d->outputs; k++) {
		cudaFree(d->out[k]);
		cudaEventDestroy(d->out_read[k]);
		cudaEventDestroy(d->out_ready[k]);
	}
	free(d->out);
	free(d->out_read);
	free(d->out_ready);
	cudaFree(d->items_dev);
	cudaFree(d->aug_table);
	if (d->stream)
		cudaStreamDestroy(d->stream);
	if (d->nj_stream)
		cudaStreamDestroy(d->nj_stream);
	image_ctx_free(&d->cpu);
	free(d->offset);
	free(d->yuv_offset);
	free(d->route);
	free(d->fmt);
	free(d->chroma);
	free(d->region);
	free(d->planar);
	free(d->bat_data);
	free(d->bat_len);
	free(d->bat_img);
	free(d->bat_item);
	free(d->errmsg);
	free(d);
}
