/* What the model-level GPU tests share (test_cuda_net.c, test_cuda_net_amp.c): the skip
 * without a device, a model built with fixed test settings, one synthetic batch set on
 * two nets, and the relative error of the norm. */
#ifndef GP_TESTS_GPU_NET_UTIL_H
#define GP_TESTS_GPU_NET_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "nn/models.h"
#include "nn/net.h"
#include "train/trainer.h"
#include "ops/cuda/device.h"
#include "../test.h"

#define NEED_GPU()                                                        \
	do {                                                              \
		char why_[256];                                           \
		if (!cuda_available(why_, sizeof(why_))) {                \
			char msg_[300];                                   \
			snprintf(msg_, sizeof(msg_), "no CUDA device: %s", why_); \
			SKIP(msg_);                                       \
		}                                                         \
	} while (0)

static inline struct net *build(const char *name, int size, int batch, int classes)
{
	struct model_opts o = model_defaults(name);
	o.size = size;
	o.batch = batch;
	o.classes = classes;
	o.seed = 3;
	o.dropout = 0;
	struct net *net = NULL;
	CHECK_MSG(model_build(name, &o, &net) == 0, "%s", gp_errmsg());
	return net;
}

/* One synthetic batch (3 channels, size x size, classes, seed) set on both nets. */
static inline void same_batch(struct net *a, struct net *b, int batch, int size, int classes, uint64_t seed)
{
	float *x = NULL;
	int32_t *y = NULL;
	CHECK(train_synthetic_batch(batch, 3, size, size, classes, seed, &x, &y) == 0);
	if (x && y)
		CHECK(net_set_batch_data(a, x, y) == 0 && net_set_batch_data(b, x, y) == 0);
	free(x);
	free(y);
}

static inline double dist(const float *a, const float *b, size_t n)
{
	return rel_err_norm_f32(a, b, n);
}

#endif
