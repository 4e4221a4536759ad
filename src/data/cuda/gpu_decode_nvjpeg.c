/* The nvJPEG side of the GPU decoder (gpu_decode_impl.h): its handles, the header
 * reads that route each item to the batched call, a single decode or the CPU, and
 * those calls, with regions of interest where the engines take them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "data/cuda/gpu_decode_impl.h"
#include "data/ycc.h"
#include "ops/cuda/cuda_common.h"

/* 0, or GP_EDEVICE naming the nvJPEG call and its status. */
static int nj_check(int status, const char *call)
{
	if (status == NVJPEG_STATUS_SUCCESS)
		return 0;
	return gp_error(status == NVJPEG_STATUS_ALLOCATOR_FAILURE ? GP_EDEVOOM : GP_EDEVICE,
			"%s: %s", call, nvjpeg_status_name(status));
}

#define NJ_TRY(call) GP_TRY(nj_check((call), #call))

/* nvjpegCreateEx, through our allocators where they are there. */
static int nj_create(struct gpu_decoder *d, int backend, unsigned flags, nvjpeg_handle *h)
{
	if (d->mem && !d->mem_unused)
		return nvjpeg_create_ex_v2()(backend, nj_memory_dev(d->mem), nj_memory_pinned(d->mem),
					     flags, h);
	return d->nj->nvjpegCreateEx(backend, NULL, NULL, flags, h);
}

/* Back to whole images: the parameter objects freed. */
void nj_decode_regions_destroy(struct gpu_decoder *d)
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
int nj_decode_handles_create(struct gpu_decoder *d, const struct gpu_decoder_opts *o)
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
void nj_decode_regions_create(struct gpu_decoder *d, const struct gpu_decoder_opts *o)
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
			nj_decode_regions_destroy(d);
			return;
		}
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

/* Which decoder takes each item: nvJPEG only for a JPEG whose header it reads with
 * the size TurboJPEG read and whose chroma ycc.h finishes (else TurboJPEG, for its
 * pixels: 4:4:0 and 4:1:1 are rare); the batched call only for what it supports,
 * and not for a grey JPEG (one output format per batched call: planes of three). */
void nj_decode_route(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
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
		d->bat_img[k] = gpu_decoder_item_image(d, &items[i], i, d->batched_fmt);
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
int nj_decode_batched(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
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
			nj_decode_regions_destroy(d);
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

int nj_decode_single(struct gpu_decoder *d, const struct gpu_decode_item *items, int n)
{
	for (int i = 0; i < n; i++) {
		if (d->route[i] != ROUTE_SINGLE)
			continue;
		struct nvjpeg_image img = gpu_decoder_item_image(d, &items[i], i, d->fmt[i]);
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
