/* Geometry of torchvision's transforms, kept apart from pixels so tests can check
 * it by hand: RandomResizedCrop's get_params, Resize of the shorter side plus
 * CenterCrop, CIFAR's padded random crop, and the per-sample seed. */
#ifndef GP_DATA_TRANSFORM_H
#define GP_DATA_TRANSFORM_H

#include <stdint.h>

#include "core/rng.h"

/* torchvision's ImageNet normalization (ToTensor then Normalize). */
extern const float imagenet_mean[3], imagenet_std[3];

/* An integer crop of an image: left, top, width, height (torchvision's j, i, w, h). */
struct crop_box {
	int x, y, w, h;
};

/* What a resampler reads: the region [x0, x1) x [y0, y1) of the source (fractional
 * pixels) is mapped onto the output, and the filter only sees source pixels inside
 * the window [wx0, wx1) x [wy0, wy1), as if the image had been cropped to it. */
struct resample_box {
	double x0, y0, x1, y1;
	int wx0, wy0, wx1, wy1;
};

/* A seed for one sample's augmentation that depends only on (seed, epoch, index),
 * so a batch is the same whichever worker makes it and whenever. */
uint64_t sample_seed(uint64_t seed, int epoch, int index);
uint64_t mix64(uint64_t x);

/* RandomResizedCrop.get_params(scale=(0.08, 1), ratio=(3/4, 4/3)): ten tries of a
 * random area and log-uniform aspect ratio, then the center-crop fallback.
 * Returns how many tries were used (11 means the fallback). */
int rrc_get_params(struct rng *r, int width, int height, struct crop_box *out);
/* The fallback alone (the whole image, or its center at the extreme ratio). */
void rrc_fallback(int width, int height, struct crop_box *out);

/* Resize(resize_to) of the shorter side, as torchvision computes the longer one
 * (truncated, not rounded). */
void resize_short_side(int width, int height, int resize_to, int *out_w, int *out_h);
/* CenterCrop's offset: int(round((in - out) / 2.0)) with Python's rounding. */
int center_crop_offset(int in, int out);
/* The eval pipeline (Resize(resize_to) then CenterCrop(size)) as one resample of
 * the full width x height image. */
void eval_resample_box(int width, int height, int resize_to, int size,
		       struct resample_box *out);
/* RandomResizedCrop's crop as a resample box (the filter stays inside the crop). */
void crop_resample_box(const struct crop_box *c, struct resample_box *out);
/* Scale a box from a width x height image to a scaled_w x scaled_h decode of it;
 * the window grows to whole pixels so nothing inside the box is cut off. */
void resample_box_scale(const struct resample_box *in, int width, int height,
			int scaled_w, int scaled_h, struct resample_box *out);

/* Where one sample's pixels come from, drawn from its seed: the resample box in the
 * full-size image, the mirror flag, and the smallest decode size that keeps the box's
 * detail (what a reduced-scale decode may go down to). Train: RandomResizedCrop then a
 * flip with probability 1/2, both from rng_seed(seed, 0); eval: Resize of the shorter
 * side to eval_resize_size(size), then CenterCrop(size). The CPU decoder
 * (imagefolder.c) and the GPU decoder (data/gpu_loader.c) both take it from here, so
 * the same seed gives the same crop on either path. */
struct sample_geometry {
	struct resample_box box;
	int flip;
	double need_w, need_h;
};
void sample_geometry_make(int train, int size, uint64_t seed, int width, int height,
			  struct sample_geometry *out);

/* The eval Resize target for an output of size (256 for 224, as ImageNet recipes). */
static inline int eval_resize_size(int size)
{
	return size * 256 / 224;
}

#endif
