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

/* Default options for a model name (size 32 for simple_cnn, else 224). */
struct model_opts model_defaults(const char *name);
/* Build and initialize a model; *out is freed with net_free. */
int model_build(const char *name, const struct model_opts *opts, struct net **out);
/* 0 for a known model name, else GP_EINVAL naming the known ones; commands check
 * before anything else prints. */
int model_name_check(const char *name);
/* The known model names, comma separated, for messages. */
const char *model_names(void);

#endif
