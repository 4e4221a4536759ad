#include "data/dataset_impl.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int dataset_open(const char *spec, int train, int size, struct dataset **out)
{
	if (size < 1)
		return gp_error(GP_EINVAL, "image size must be at least 1 (got %d)", size);
	/* an empty folder name would read from '/' */
	if (!*spec)
		return gp_error(GP_EINVAL, "empty dataset path");
	if (!strcmp(spec, "cifar10:"))
		return gp_error(GP_EINVAL, "dataset 'cifar10:' names no folder (cifar10:DIR)");
	struct dataset *ds = calloc(1, sizeof(*ds));
	if (!ds)
		return gp_error(GP_ENOMEM, "out of memory");
	ds->train = train;
	ds->size = size;
	ds->scaled_decode = 1;
	int rc;
	if (!strcmp(spec, "synthetic") || !strncmp(spec, "synthetic:", 10))
		rc = synthetic_open(ds, spec[9] ? spec + 10 : "");
	else if (!strncmp(spec, "cifar10:", 8))
		rc = cifar10_open(ds, spec + 8);
	else
		rc = imagefolder_open(ds, spec);
	if (rc < 0) {
		dataset_close(ds);
		return rc;
	}
	*out = ds;
	return 0;
}

int dataset_has_val_split(const char *spec)
{
	if (!strncmp(spec, "cifar10:", 8))
		return cifar10_has_test_batch(spec + 8);
	if (!strcmp(spec, "synthetic") || !strncmp(spec, "synthetic:", 10))
		return 0;
	return imagefolder_has_split(spec);
}

int dataset_count(const struct dataset *ds) { return ds->count; }
int dataset_classes(const struct dataset *ds) { return ds->classes; }
int dataset_size(const struct dataset *ds) { return ds->size; }
int dataset_label(const struct dataset *ds, int index) { return ds->labels[index]; }

const char *dataset_class_name(const struct dataset *ds, int label)
{
	if (label < 0 || label >= ds->classes)
		return NULL;
	return ds->class_names[label];
}

const char *dataset_path(const struct dataset *ds, int index)
{
	return ds->paths && index >= 0 && index < ds->count ? ds->paths[index] : NULL;
}

void dataset_set_scaled_decode(struct dataset *ds, int on)
{
	ds->scaled_decode = on;
}

int dataset_load(const struct dataset *ds, struct image_ctx *ctx, int index,
		 uint64_t seed, float *out, int32_t *label, struct sample_cost *cost)
{
	memset(cost, 0, sizeof(*cost));
	*label = ds->labels[index];
	switch (ds->kind) {
	case DATASET_SYNTHETIC:
		synthetic_load(ds, index, out);
		return 0;
	case DATASET_FOLDER:
		return imagefolder_load(ds, ctx, index, seed, out, cost);
	case DATASET_CIFAR10:
		return cifar10_load(ds, ctx, index, seed, out);
	}
	return gp_error(GP_EINVAL, "unknown dataset kind");
}

void dataset_close(struct dataset *ds)
{
	if (!ds)
		return;
	if (ds->class_names)
		for (int i = 0; i < ds->classes; i++)
			free(ds->class_names[i]);
	free(ds->class_names);
	if (ds->paths)
		for (int i = 0; i < ds->count; i++)
			free(ds->paths[i]);
	free(ds->paths);
	free(ds->labels);
	free(ds->cifar);
	free(ds);
}
