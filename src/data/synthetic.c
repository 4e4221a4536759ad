/* Synthetic data for the CPU engine: images and labels drawn from the sample
 * index alone (the same every epoch, like a dataset on disk), already in
 * normalized units. Each class shifts the channel means a little so that a model
 * has something to learn. */
#include "data/dataset_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

#define SYNTHETIC_IMAGES 1024
#define SYNTHETIC_CLASSES 10
#define SYNTHETIC_SEED 0x5eedULL

int synthetic_open(struct dataset *ds, const char *args)
{
	int images = SYNTHETIC_IMAGES, classes = SYNTHETIC_CLASSES;
	char *end = (char *)args;
	if (*args) {
		images = (int)strtol(args, &end, 10);
		if (*end == ':')
			classes = (int)strtol(end + 1, &end, 10);
	}
	if (*end)
		return gp_error(GP_EINVAL, "bad synthetic spec 'synthetic:%s' "
				"(want synthetic[:IMAGES[:CLASSES]])", args);
	if (images < 1 || classes < 1 || classes > 100000)
		return gp_error(GP_EINVAL, "synthetic dataset needs at least one image and "
				"1..100000 classes (got %d images, %d classes)", images, classes);
	ds->kind = DATASET_SYNTHETIC;
	ds->synthetic_seed = SYNTHETIC_SEED;
	ds->count = images;
	ds->labels = malloc(sizeof(int32_t) * images);
	ds->class_names = calloc(classes, sizeof(char *));
	if (!ds->labels || !ds->class_names)
		return gp_error(GP_ENOMEM, "out of memory");
	ds->classes = classes;
	for (int c = 0; c < classes; c++) {
		char name[32];
		snprintf(name, sizeof(name), "class_%03d", c);
		ds->class_names[c] = strdup(name);
		if (!ds->class_names[c])
			return gp_error(GP_ENOMEM, "out of memory");
	}
	struct rng r;
	rng_seed(&r, ds->synthetic_seed, 1);
	for (int i = 0; i < images; i++)
		ds->labels[i] = (int32_t)rng_below(&r, (uint32_t)classes);
	return 0;
}

void synthetic_load(const struct dataset *ds, int index, float *out)
{
	struct rng r;
	int label = ds->labels[index];
	size_t plane = (size_t)ds->size * ds->size;
	rng_seed(&r, ds->synthetic_seed, 2 + (uint64_t)index);
	for (int c = 0; c < 3; c++) {
		float shift = (float)((label * 3 + c) % 7 - 3) * 0.25f;
		for (size_t i = 0; i < plane; i++)
			out[c * plane + i] = (float)rng_normal(&r) + shift;
	}
}
