/* Model builders that mirror torchvision's architectures, names and initialization. */
#ifndef GP_MODELS_H
#define GP_MODELS_H

#include <stdint.h>

#include "nn/net.h"

struct model_opts {
	int classes;     /* 1000 by default */
	int size;        /* input height = width; 224 (32 for simple_cnn) by default */
	int batch;
	uint64_t seed;   /* initialization */
	double dropout;  /* < 0: the model's own probability; 0 disables dropout */
};

/* One row of the model table. */
struct model_info {
	const char *name;    /* what --model takes; torchvision's name where it has one */
	const char *summary; /* one line, for listings */
	int size;            /* default input height = width */
	int classes;         /* default output classes */
	int (*build)(struct net *net, const struct model_opts *o);
};

/* The i-th row of the model table, NULL past the last: the order in which models are
 * listed everywhere. */
const struct model_info *model_info_at(int i);
/* The i-th model's name, NULL past the last (for core/names.h and option choices). */
const char *model_name_at(int i);
/* The row of a model name, NULL for an unknown one. */
const struct model_info *model_find(const char *name);
/* Default options for a model name (its size and classes; 224 and 1000 when unknown). */
struct model_opts model_defaults(const char *name);
/* Build and initialize a model; *out is freed with net_free. */
int model_build(const char *name, const struct model_opts *opts, struct net **out);
/* 0 for a known model name, else GP_EINVAL naming the known ones; commands check
 * before anything else prints. */
int model_name_check(const char *name);

#endif
