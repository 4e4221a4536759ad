/* What the parts of the analysis share (analysis.c runs them in order): the
 * attribution of GPU work (analysis_attrib.c), the step breakdown
 * (analysis_steps.c), the top-N tables and kernel launch configurations
 * (analysis_kernels.c), the op tables (analysis_ops.c), the advice rules
 * (analysis_advice.c) and the writers (analysis_write.c). Not for use outside
 * src/report/analysis*.c. */
#ifndef GP_ANALYSIS_PRIV_H
#define GP_ANALYSIS_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "report/analysis.h"

extern const char *const analysis_part_names[PART_COUNT];
extern const char *const analysis_stage_names[STAGE_COUNT];
extern const char *const analysis_dstage_names[DSTAGE_COUNT];
/* The device stage each host stage annotation stands for. */
extern const int stage_dstage[STAGE_COUNT];

static inline int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !memcmp(s + n - m, suffix, m);
}

/* --- which host threads are the training loop's (analysis_attrib.c) --- */

/* A thread is the loop's when it is the trace's own (t->tid, or 0: unspecified) or
 * carries any range besides CUDA runtime calls: ops, annotations (PyTorch's autograd
 * thread does). A thread with runtime calls alone is a helper's (gpuperf's GPU
 * decode thread, a library's own): its waits are not the loop's host time, syncs or
 * launches. More threads than fit: every one counts as the loop's. */
#define LOOP_TIDS_MAX 256
struct loop_tids {
	int tid[LOOP_TIDS_MAX];
	int n, all;
};

void loop_tids_find(const struct trace *t, struct loop_tids *lt);
int range_on_loop(const struct loop_tids *lt, const struct trace_range *r);

/* --- who launched what (analysis_attrib.c) --- */

struct id_entry {
	uint64_t id;
	size_t idx;
};

/* A stage annotation, for finding the one a host timestamp falls in. */
struct stage_span {
	int64_t start_ns, end_ns;
	int stage;
};

/* Maps from a GPU activity to the runtime call that launched it (correlation id),
 * from there to the layer range it ran in (external id), and from a host time to
 * the stage annotation around it. */
struct attrib {
	struct id_entry *corr, *ext;
	size_t n_corr, n_ext;
	struct stage_span *stages;
	size_t n_stages;
};

long id_find(const struct id_entry *tab, size_t n, uint64_t id);
int attrib_build(const struct trace *t, struct attrib *at);
void attrib_free(struct attrib *at);
/* The stage annotation that covers host time ts (the latest to start), or -1. */
int attrib_stage_at(const struct attrib *at, int64_t ts);
/* The runtime call that launched g, or -1. */
long attrib_launch(const struct attrib *at, const struct trace_gpu *g);
/* The layer range (cpu_op) in which g was launched, or -1. */
long attrib_op(const struct attrib *at, const struct trace *t, const struct trace_gpu *g);
/* The host stage a range is the annotation of, or -1. */
int stage_of(const struct trace_range *r);
/* The device stage of a layer range by its name. */
int op_dstage(const char *name);
/* The device stage one GPU activity counts towards. */
int gpu_dstage(const struct attrib *at, const struct trace *t, const struct trace_gpu *g);

/* --- the step breakdown (analysis_steps.c) --- */

/* Fill a->steps, a->mean and the shares from t; dstage[i] is t->gpu[i]'s device stage. */
int steps_analyse(const struct trace *t, const signed char *dstage, struct analysis *a);

/* --- top-N tables and kernels (analysis_kernels.c) --- */

struct keyed {
	const char *name; /* interned: equal names are equal pointers */
	double value;
};

/* Sum values by name and keep the ANALYSIS_TOP largest totals. */
int top_by_name(struct keyed *k, size_t n, struct analysis_op *top, int *n_top);
int top_gpu_ops(const struct trace *t, const struct attrib *at, struct analysis *a,
		struct keyed *k);
int top_kernels(const struct trace *t, struct analysis *a, struct keyed *k);
const char *kernel_label(const char *name, char *buf, size_t cap);
int memory_trend(const struct trace *t, struct analysis *a, struct keyed *k);
int kernel_stats(const struct trace *t, struct analysis *a);
int kernel_configs(const struct trace *t, struct analysis *a);

/* --- op tables (analysis_ops.c) --- */

int op_tables(const struct trace *t, const struct attrib *at, const signed char *dstage,
	      struct analysis *a);

/* --- advice (analysis_advice.c) --- */

/* Fill a->ev from t (after the breakdown and the op tables). */
int advice_evidence(const struct trace *t, struct analysis *a);

#endif
