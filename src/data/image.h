/* Image files to pixels and pixels to normalized CHW floats: TurboJPEG decoding at
 * a reduced DCT scale where the crop allows, PNG through cairo, and a separable
 * bilinear resampler that antialiases when it shrinks (PIL's triangle filter). */
#ifndef GP_DATA_IMAGE_H
#define GP_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "data/transform.h"

struct jpeg_state;

enum image_kind { IMAGE_JPEG = 0, IMAGE_PNG };

/* Interleaved 8-bit RGB. */
struct image {
	uint8_t *pix;
	int w, h;
};

/* Per-thread state: a TurboJPEG handle and buffers that grow and are reused, so
 * decoding a stream of images does not allocate per image. */
struct image_ctx {
	void *tj;
	uint8_t *file;
	size_t file_cap_bytes;
	uint8_t *pix;
	size_t pix_cap_bytes;
	float *tmp;
	size_t tmp_cap_bytes;
	void *coef; /* the resampler's coefficient tables */
	struct jpeg_state *jpeg; /* libjpeg's decompressor, for region decodes */
	size_t coef_cap_bytes;
};

int image_ctx_init(struct image_ctx *c);
void image_ctx_free(struct image_ctx *c);

/* Read a whole file into c->file; *len_bytes receives its size. What is not a
 * regular file (a FIFO named a.jpg) is GP_EFORMAT, so the loader skips it. */
int image_read_file(struct image_ctx *c, const char *path, size_t *len_bytes);
/* The most pixels an image may have (PIL's MAX_IMAGE_PIXELS): a 1 MB PNG can claim
 * 20000 x 20000, gigabytes per decode per worker. */
#define IMAGE_MAX_PIXELS 89478485LL

/* Kind and full size from the file's first bytes; GP_EFORMAT if it is neither, or if
 * it has more than IMAGE_MAX_PIXELS pixels. */
int image_header(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
		 enum image_kind *kind, int *w, int *h);
/* The smallest TurboJPEG scale (largest reduction, at most 1) whose decode of a
 * w x h JPEG is at least need_w x need_h; writes the scaled size. */
void image_pick_scale(int w, int h, double need_w, double need_h, int *scaled_w,
		      int *scaled_h);
/* Decode into c->pix: a JPEG at scaled_w x scaled_h (from image_pick_scale, or
 * its full size), a PNG always at full size. GP_EFORMAT with libjpeg's message
 * for a broken file (warnings such as a truncated file included). */
int image_decode(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
		 enum image_kind kind, int scaled_w, int scaled_h, struct image *out);

/* Decode only what a resample reads: the JPEG at scaled_w x scaled_h (a size
 * image_pick_scale gives), but only rows and columns around want (x0, y0, x1, y1
 * of the scaled image, from image_resample_reach), into c->pix. *out is that
 * region and (*off_x, *off_y) its corner in the scaled image. Inside want the
 * pixels are those of image_decode's full decode, bit for bit; the rows outside
 * are still parsed, so a broken file fails as it fails there. JPEG only. */
int image_decode_region(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
			int scaled_w, int scaled_h, const int want[4], struct image *out,
			int *off_x, int *off_y);
/* The pixels image_resample_chw can read for box b at out_w x out_h: x0, y0, x1, y1
 * (ends excluded), inside the box's window. */
void image_resample_reach(const struct resample_box *b, int out_w, int out_h, int reach[4]);

/* Resample box b of img to out_w x out_h, mirror it if flip, and write
 * (v / 255 - mean) / std as CHW floats. Bilinear; when shrinking, the triangle
 * filter widens by the shrink factor (PIL's antialiasing). */
int image_resample_chw(struct image_ctx *c, const struct image *img,
		       const struct resample_box *b, int out_w, int out_h, int flip,
		       const float mean[3], const float std[3], float *out);

/* Encode RGB pixels as a JPEG (4:2:0); *jpeg must be freed with image_jpeg_free. */
int image_encode_jpeg(const uint8_t *rgb, int w, int h, int quality, uint8_t **jpeg,
		      size_t *len_bytes);
void image_jpeg_free(uint8_t *jpeg);

#endif
