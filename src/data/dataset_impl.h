/* The inside of struct dataset, shared by the files that implement its kinds. */
#ifndef GP_DATA_DATASET_IMPL_H
#define GP_DATA_DATASET_IMPL_H

#include <stdint.h>

#include "data/dataset.h"

enum dataset_kind { DATASET_SYNTHETIC = 0, DATASET_FOLDER, DATASET_CIFAR10 };

struct dataset {
	enum dataset_kind kind;
	int train, size;
	int count, classes;
	char **class_names;
	int32_t *labels;
	int scaled_decode;
	char **paths;      /* ImageFolder: one per sample */
	uint8_t *cifar;    /* CIFAR-10: count records of 3 x 32 x 32 bytes (CHW) */
	uint64_t synthetic_seed;
};

/* Does root hold train/ and val/ (then train mode reads one, eval mode the other)? */
int imagefolder_has_split(const char *root);
int imagefolder_open(struct dataset *ds, const char *dir);
int imagefolder_load(const struct dataset *ds, struct image_ctx *ctx, int index,
		     uint64_t seed, float *out, struct sample_cost *cost);
/* Is DIR/test_batch.bin there (what eval mode reads)? */
int cifar10_has_test_batch(const char *dir);
int cifar10_open(struct dataset *ds, const char *dir);
int cifar10_load(const struct dataset *ds, struct image_ctx *ctx, int index,
		 uint64_t seed, float *out);
int synthetic_open(struct dataset *ds, const char *args);
void synthetic_load(const struct dataset *ds, int index, float *out);

#endif
