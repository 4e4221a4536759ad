/* Live memory along one training step, from the memory plan: at each step of the
 * plan (forward of each node, the loss, backward of each node, the optimizer), the
 * bytes alive by category, the peak and the largest tensors alive there. The arena
 * is allocated once, so an allocator sees a flat line; this is what the step uses
 * inside it. */
#ifndef GP_MEM_TIMELINE_H
#define GP_MEM_TIMELINE_H

#include <stddef.h>

#include "nn/net.h"

enum mem_tl_cat {
	MTL_WEIGHTS = 0,  /* parameters and running statistics (and 16-bit copies) */
	MTL_GRADS,        /* parameter gradients */
	MTL_OPTIM,        /* optimizer state (momentum) */
	MTL_INPUT,        /* the input batch, labels and loss */
	MTL_ACTIV,        /* layer outputs and what backward keeps or recomputes */
	MTL_ACT_GRADS,    /* gradients of layer outputs */
	MTL_WORKSPACE,    /* backend scratch (convolution workspaces) */
	MTL_NCAT
};

/* "weights", "gradients", "optimizer", "input", "activations",
 * "activation_gradients", "workspace". */
const char *mem_tl_cat_name(int cat);

#define MEM_TL_LABEL 96
#define MEM_TL_TOP 10

struct mem_tl_point {
	char label[MEM_TL_LABEL]; /* "conv1", "conv1.backward", "loss", "optimizer" */
	int plan_step;            /* as struct plan_tensor's steps; the optimizer 2n + 1 */
	size_t bytes[MTL_NCAT];
	size_t total;
};

/* A tensor of the plan, for the list of the largest alive at the peak. */
struct mem_tl_tensor {
	char what[MEM_TL_LABEL + 32]; /* "output of conv1", "gradient of fc", ... */
	int cat;
	size_t bytes;
	int first_step, last_step;
};

struct mem_timeline {
	struct mem_tl_point *points;
	int n_points;
	int peak;                 /* index of the first point with the largest total */
	struct mem_tl_tensor top[MEM_TL_TOP]; /* largest alive at the peak, largest first */
	int n_top;
	size_t plan_total_bytes;  /* net->plan.total_bytes */
	size_t arena_bytes;       /* net->plan.arena_bytes (>= the live activations' peak) */
};

/* The timeline of net's current plan (net_plan_memory done, for training). */
int net_mem_timeline(const struct net *net, struct mem_timeline *out);
void mem_timeline_free(struct mem_timeline *tl);

#endif
