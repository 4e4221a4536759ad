/* The GPU augmentation kernel's launcher: crop, resize, flip and normalize of decoded
 * interleaved-RGB images into a batch buffer, one pass, with the arithmetic of
 * image_resample_chw (image.c): PIL's bilinear coefficients, antialiased when
 * shrinking, horizontal pass then vertical, weights normalized in double and
 * rounded to float, then (v / 255 - mean) / std. */
#ifndef GP_DATA_CUDA_GPU_AUGMENT_H
#define GP_DATA_CUDA_GPU_AUGMENT_H

#include <stddef.h>

#include "data/gpu_decode.h"
#include "data/ycc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sample: its decoded pixels on the device and where they go. */
struct gpu_augment_item {
	const unsigned char *src; /* interleaved RGB, w x h, pitch bytes per row */
	size_t pitch;
	int w, h;
	struct resample_box box;  /* in src's pixels */
	int flip;
	int dst;
};

/* Launch on stream (a cudaStream_t) for n items already on the device; table: device
 * memory of gpu_augment_table_bytes(n, size) for the filter windows. Checks the
 * launch. 0, or GP_EDEVICE with CUDA's message. */
size_t gpu_augment_table_bytes(int n, int size);
int gpu_augment_launch(const struct gpu_augment_item *items_dev, int n, int size,
		       enum gpu_batch_layout layout, const float mean[3], const float std[3],
		       void *table, void *out, void *stream);

/* One image decoded by nvJPEG as planes (NVJPEG_OUTPUT_YUV, or NVJPEG_OUTPUT_Y for a
 * grey JPEG: cb.p NULL), to become interleaved RGB at dst as TurboJPEG makes it, in
 * the region [x0, x0 + w) x [y0, y0 + h) of the image (what the augment reads of it,
 * image_resample_reach); dst is the image's pixel (0, 0). */
struct gpu_ycc_item {
	const unsigned char *y;
	size_t y_pitch;
	struct ycc_plane cb, cr;
	int x0, y0, w, h;
	unsigned char *dst;
	size_t dst_pitch;
};

/* Chroma upsampling and colour conversion (data/ycc.h) of n items already on the
 * device, on stream; max_w, max_h: the largest region width and height among them. */
int gpu_ycc_launch(const struct gpu_ycc_item *items_dev, int n, int max_w, int max_h,
		   void *stream);

/* One sample decoded by nvJPEG as planes (y, cb, cr as in gpu_ycc_item: pixel (x, y)
 * of the image at y[y * y_pitch + x], cb.p NULL for grey), made into the batch in one
 * pass: colour conversion, crop, resize, flip and normalize, each tile of the output
 * from its source pixels converted once into shared memory, the rows filtered there
 * horizontally and then combined vertically. The same pixels as gpu_ycc_launch then
 * gpu_augment_launch, bit for bit; a.src and a.pitch are not read. */
struct gpu_planar_item {
	struct gpu_augment_item a;
	const unsigned char *y;
	size_t y_pitch;
	struct ycc_plane cb, cr;
};

/* The shared memory a tile of box b at output size needs, or 0 when that is more than
 * the kernel takes (gpu_planar_shared_max, about 48 KB: at 224, a shrink by more than
 * about 3.5x on both axes), left to the two passes. */
size_t gpu_planar_shared_bytes(const struct resample_box *b, int size);
/* The most shared_bytes gpu_planar_launch takes (what gpu_planar_shared_bytes can give). */
size_t gpu_planar_shared_max(void);
/* Launch for n items already on the device, each of which gpu_planar_shared_bytes
 * took, shared_bytes the largest of theirs; table as for gpu_augment_launch. */
int gpu_planar_launch(const struct gpu_planar_item *items_dev, int n, int size,
		      enum gpu_batch_layout layout, const float mean[3], const float std[3],
		      size_t shared_bytes, void *table, void *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
