/* Byte counts by category with peaks: every backend allocation is charged to one
 * category, so `train --json`, `compare` and the memory planner speak one language. */
#ifndef GP_MEMSTAT_H
#define GP_MEMSTAT_H

#include <stddef.h>

/* Bytes in a MiB, for every figure a report or message gives in MiB. */
#define GP_MIB 1048576.0

enum mem_cat {
	MEM_WEIGHTS = 0, /* parameters and batch-norm running statistics */
	MEM_GRADS,       /* parameter gradients */
	MEM_OPTIM,       /* optimizer state (momentum) */
	MEM_ACTIV,       /* activations, their gradients and saved tensors */
	MEM_WORKSPACE,   /* library scratch (cuDNN workspace, im2col) */
	MEM_OTHER,       /* inputs, labels, loss, anything else */
	MEM_NCAT
};

struct mem_stats {
	size_t cur_bytes[MEM_NCAT];
	size_t peak_bytes[MEM_NCAT];
	size_t total_bytes;
	size_t total_peak_bytes;
};

const char *mem_cat_name(enum mem_cat c);
void mem_stats_add(struct mem_stats *m, enum mem_cat c, size_t bytes);
void mem_stats_sub(struct mem_stats *m, enum mem_cat c, size_t bytes);
void mem_stats_reset_peak(struct mem_stats *m);

#endif
