/* nvJPEG batched decoding into one device staging area, then two launches: chroma
 * upsampling and colour conversion as TurboJPEG does them (data/ycc.h), then the
 * augmentation. nvJPEG is asked for the planes (NVJPEG_OUTPUT_YUV), not RGB, because
 * its own upsampling repeats chroma samples where TurboJPEG filters them: off by up
 * to 65/255 at sharp colour edges on the H100, against 0 with the planes finished
 * here. The hardware backend is tried first (A100/H100 JPEG engines); where the handle
 * cannot be made (no engines) the batched call runs on the CUDA backend. Files are
 * decoded strictly (NVJPEG_FLAGS_BITSTREAM_STRICT), so that a truncated file fails
 * here as libjpeg's warning fails it on the CPU, and goes to the CPU decoder, which
 * decides whether it is corrupt. This file holds the decoder's buffers, its launches
 * and the CPU's share; gpu_decode_nvjpeg.c the nvJPEG calls (gpu_decode_impl.h). */
#include "data/gpu_decode.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "core/tuning.h"
#include "core/timeutil.h"
#include "data/cuda/gpu_decode_impl.h"
#include "ops/cuda/cuda_common.h"

/* The allocators, where the library has nvjpegCreateExV2 and they are not declined
 * (else d->mem stays NULL: nvJPEG's defaults). */
static int nj_memory_pick(struct gpu_decoder *d, const struct gpu_decoder_opts *o)
{
	if (!nvjpeg_create_ex_v2() || o->default_allocators)
		return 0;
	return nj_memory_create(d->device, &d->mem);
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
	d->two_pass = opts->two_pass;
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
	d->one_pass = calloc(n, 1);
	d->bat_data = calloc(n, sizeof(*d->bat_data));
	d->bat_len = calloc(n, sizeof(*d->bat_len));
	d->bat_img = calloc(n, sizeof(*d->bat_img));
	d->bat_item = calloc(n, sizeof(*d->bat_item));
	d->errmsg = calloc(n, sizeof(*d->errmsg));
	d->out = calloc(outputs, sizeof(*d->out));
	d->out_read = calloc(outputs, sizeof(*d->out_read));
	d->out_ready = calloc(outputs, sizeof(*d->out_ready));
	if (!d->out || !d->out_read || !d->out_ready || !d->offset || !d->yuv_offset || !d->route || !d->fmt ||
	    !d->chroma || !d->region || !d->planar || !d->one_pass || !d->bat_data || !d->bat_len || !d->bat_img ||
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
	    (rc = CUDA_CHECK(cudaMalloc((void **)&d->planar_dev, n * sizeof(*d->planar_dev)))) < 0 ||
	    (rc = CUDA_CHECK(cudaMalloc(&d->aug_table, gpu_augment_table_bytes(max_batch, size)))) < 0 ||
	    (rc = CUDA_CHECK(cudaMalloc((void **)&d->ycc_dev, n * sizeof(*d->ycc_dev)))) < 0)
		goto fail;
	for (int k = 0; k < 2; k++) {
		struct gpu_decode_side *sd = &d->side[k];
		if ((rc = CUDA_CHECK(cudaMallocHost((void **)&sd->items_host,
						    n * sizeof(*sd->items_host)))) < 0 ||
		    (rc = CUDA_CHECK(cudaMallocHost((void **)&sd->planar_host,
						    n * sizeof(*sd->planar_host)))) < 0 ||
		    (rc = CUDA_CHECK(cudaMallocHost((void **)&sd->ycc_host,
						    n * sizeof(*sd->ycc_host)))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreate(&sd->start))) < 0 ||
		    (rc = CUDA_CHECK(cudaEventCreate(&sd->done))) < 0)
			goto fail;
	}
	if ((rc = nj_memory_pick(d, opts)) < 0 || (rc = nj_decode_handles_create(d, opts)) < 0)
		goto fail;
	nj_decode_regions_create(d, opts);
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

/* Room for the planes of the items nvJPEG decodes (after nj_decode_route). */
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
struct nvjpeg_image gpu_decoder_item_image(struct gpu_decoder *d, const struct gpu_decode_item *it,
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

/* Items decoded as planes go to the one-pass kernel (gpu_planar_launch: colour,
 * crop, resize, flip and normalize straight into the batch) where its shared memory
 * holds a tile's source span, into sd->planar_host (*np of them, *shared the most
 * shared memory one asks for). The others (a shrink by more than about 5x, or
 * two_pass) become RGB in their staging place, TurboJPEG's way, but only where the
 * augment reads (image_resample_reach): a random crop's reach is about half the image
 * on average, and the conversion's time goes with its pixels. */
static int planes_to_rgb(struct gpu_decoder *d, const struct gpu_decode_item *items, int n,
			 int *np, size_t *shared)
{
	int m = 0, max_w = 0, max_h = 0;
	*np = 0;
	*shared = 0;
	for (int i = 0; i < n; i++) {
		if (!d->planar[i] || d->route[i] == ROUTE_FAILED || d->route[i] == ROUTE_CPU)
			continue;
		const struct gpu_decode_item *it = &items[i];
		struct nvjpeg_image img = gpu_decoder_item_image(d, it, i, d->fmt[i]);
		struct gpu_ycc_item yi;
		const int *r = d->region[i];
		memset(&yi, 0, sizeof(yi));
		yi.y = plane_origin(img.channel[0], img.pitch[0], r[0], r[1]);
		yi.y_pitch = img.pitch[0];
		if (d->fmt[i] == NVJPEG_OUTPUT_YUV) {
			const int *c = d->chroma[i];
			yi.cb = (struct ycc_plane){
				plane_origin(img.channel[1], img.pitch[1], r[0] / c[2], r[1] / c[3]),
				img.pitch[1], c[0], c[1], c[2], c[3] };
			yi.cr = yi.cb;
			yi.cr.p = plane_origin(img.channel[2], img.pitch[2], r[0] / c[2], r[1] / c[3]);
		}
		size_t sb = d->two_pass ? 0 : gpu_planar_shared_bytes(&it->geo.box, d->size);
		if (sb > 0) {
			struct gpu_planar_item *p = &d->cur->planar_host[(*np)++];
			memset(p, 0, sizeof(*p));
			p->a = (struct gpu_augment_item){ .w = it->w, .h = it->h, .box = it->geo.box,
							  .flip = it->geo.flip, .dst = it->dst };
			p->y = yi.y;
			p->y_pitch = yi.y_pitch;
			p->cb = yi.cb;
			p->cr = yi.cr;
			*shared = sb > *shared ? sb : *shared;
			d->one_pass[i] = 1;
			continue;
		}
		int reach[4];
		image_resample_reach(&it->geo.box, d->size, d->size, reach);
		yi.x0 = reach[0];
		yi.y0 = reach[1];
		yi.w = reach[2] - reach[0];
		yi.h = reach[3] - reach[1];
		yi.dst = d->staging + d->offset[i];
		yi.dst_pitch = (size_t)it->w * 3;
		max_w = yi.w > max_w ? yi.w : max_w;
		max_h = yi.h > max_h ? yi.h : max_h;
		d->cur->ycc_host[m++] = yi;
	}
	d->stats.one_pass += *np;
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
	nj_decode_route(d, items, n);
	d->stats.parse_ms += gp_now_ms() - tp;
	int k = share_pick(d, n);
	GP_TRY(yuv_reserve(d, items, n));
	memset(d->planar, 0, (size_t)n);
	memset(d->one_pass, 0, (size_t)n);
	if (k > 0) /* the threads write staging on their own stream: the last augment first */
		CUDA_TRY(cudaStreamSynchronize(d->stream));
	if (k > 0)
		decode_share_start(d->share, items, d->share_idx, k, d->staging, d->offset,
				   d->share_failed, d->errmsg);
	long hw0 = d->stats.hw_decoded + d->stats.cuda_decoded;
	double tb = gp_now_ms();
	int rc = nj_decode_batched(d, items, n);
	double batched_ms = gp_now_ms() - tb;
	long batched_n = d->stats.hw_decoded + d->stats.cuda_decoded - hw0;
	if (rc == 0)
		rc = nj_decode_single(d, items, n);
	if (rc == 0)
		rc = decode_cpu(d, items, n);
	if (k > 0) /* waited for even after an error: the threads write staging */
		rc = share_finish(d, k, rc, batched_ms, batched_n);
	GP_TRY(rc);
	double t1 = gp_now_ms();
	struct gpu_decode_side *sd = d->cur;
	CUDA_TRY(cudaEventRecord(sd->start, d->stream));
	int np = 0;
	size_t shared = 0;
	if (!d->nvjpeg_only)
		GP_TRY(planes_to_rgb(d, items, n, &np, &shared));
	int m = 0;
	for (int i = 0; i < n; i++) {
		failed[i] = d->route[i] == ROUTE_FAILED;
		if (failed[i] || d->one_pass[i])
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
	if (m + np > 0 && !d->nvjpeg_only) {
		/* the buffer's last reader done (a never recorded event is no wait) */
		CUDA_TRY(cudaStreamWaitEvent(d->stream, d->out_read[output], 0));
		if (m > 0) {
			CUDA_TRY(cudaMemcpyAsync(d->items_dev, sd->items_host,
						 (size_t)m * sizeof(*d->items_dev),
						 cudaMemcpyHostToDevice, d->stream));
			GP_TRY(gpu_augment_launch(d->items_dev, m, d->size, d->layout, imagenet_mean,
						  imagenet_std, d->aug_table, d->out[output], d->stream));
		}
		if (np > 0) { /* its windows after the two-pass items' in the table */
			CUDA_TRY(cudaMemcpyAsync(d->planar_dev, sd->planar_host,
						 (size_t)np * sizeof(*d->planar_dev),
						 cudaMemcpyHostToDevice, d->stream));
			GP_TRY(gpu_planar_launch(d->planar_dev, np, d->size, d->layout, imagenet_mean,
						 imagenet_std, shared,
						 (char *)d->aug_table + gpu_augment_table_bytes(m, d->size),
						 d->out[output], d->stream));
		}
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
		nj_decode_regions_destroy(d);
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
		cudaFreeHost(sd->planar_host);
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
	cudaFree(d->planar_dev);
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
	free(d->one_pass);
	free(d->bat_data);
	free(d->bat_len);
	free(d->bat_img);
	free(d->bat_item);
	free(d->errmsg);
	free(d);
}
