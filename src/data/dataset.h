/* Datasets: a list of labelled samples and how one sample becomes a normalized
 * 3 x size x size float image. Specs: "synthetic[:IMAGES[:CLASSES]]", a directory
 * (ImageFolder, torchvision's layout and label order), or "cifar10:DIR" (the
 * binary version). `train` picks the augmenting transforms and CIFAR's split. */
#ifndef GP_DATA_DATASET_H
#define GP_DATA_DATASET_H

#include <stdint.h>

#include "data/image.h"

struct dataset;

int dataset_open(const char *spec, int train, int size, struct dataset **out);
/* Does spec name a validation split beside its training one, which dataset_open
 * with train 0 reads? A folder holding train/ and val/ (val/), CIFAR-10 with its test
 * batch; not a plain ImageFolder, CIFAR-10 without test_batch.bin, nor synthetic data. */
int dataset_has_val_split(const char *spec);
int dataset_count(const struct dataset *ds);
int dataset_classes(const struct dataset *ds);
const char *dataset_class_name(const struct dataset *ds, int label);
int dataset_label(const struct dataset *ds, int index);
/* For files: the path of sample index, else NULL. */
const char *dataset_path(const struct dataset *ds, int index);
int dataset_size(const struct dataset *ds);
/* Turn TurboJPEG's reduced-scale decoding off (1 = on, the default), to compare
 * with a full-size decode. */
void dataset_set_scaled_decode(struct dataset *ds, int on);
void dataset_close(struct dataset *ds);

/* What loading one sample cost. */
struct sample_cost {
	double decode_ms;      /* reading and decoding the file */
	double decoded_pixels; /* pixels the decoder produced */
	double full_pixels;    /* pixels of the full-size image */
};

/* Load sample index into out (3 x size x size floats, CHW) with its augmentation
 * drawn from seed. GP_EFORMAT (message set) for a file that is not a valid image:
 * the loader skips those; any other error is fatal. Thread-safe for distinct ctx. */
int dataset_load(const struct dataset *ds, struct image_ctx *ctx, int index,
		 uint64_t seed, float *out, int32_t *label, struct sample_cost *cost);

#endif
