/* What a profile says: a per-step time breakdown in the manner of TensorBoard's
 * profiler overview, stage times, the top operators by CPU time, GPU time and memory,
 * and advice rules that each carry the number that fired them. docs/profile.md
 * defines every figure. */
#ifndef GP_ANALYSIS_H
#define GP_ANALYSIS_H

#include <jansson.h>
#include <stdio.h>

#include "core/trace.h"
#include "nn/mem_timeline.h"

/* The parts of a step, in the priority that assigns each instant to one part. */
enum analysis_part {
	PART_KERNEL = 0,
	PART_MEMCPY,
	PART_MEMSET,
	PART_RUNTIME,
	PART_DATA,
	PART_CPU,
	PART_IDLE,
	PART_COUNT
};

/* Annotation ranges the training loop opens inside each step. */
enum analysis_stage { STAGE_DATA = 0, STAGE_FORWARD, STAGE_BACKWARD, STAGE_OPTIMIZER, STAGE_COUNT };

const char *analysis_stage_name(int stage);

/* Where each instant of a step went on the device: the stage whose GPU work (kernel,
 * copy or memset) ran then, by the layer and phase that launched it; nccl* kernels
 * are communication; idle when nothing ran. On the CPU backend, the compute
 * thread's stages. An instant two stages share goes to the first in the order
 * forward, backward, optimizer, communication, data, other, so communication and
 * copies count only where no compute hides them. The parts sum to the step. */
enum analysis_dstage {
	DSTAGE_DATA = 0, /* data/copy: the batch's upload, copies outside layers */
	DSTAGE_FORWARD,  /* forward layers and the loss */
	DSTAGE_BACKWARD,
	DSTAGE_OPTIMIZER,
	DSTAGE_COMM,     /* kernels named nccl* */
	DSTAGE_OTHER,    /* GPU work no layer or stage claims */
	DSTAGE_IDLE,
	DSTAGE_COUNT
};

const char *analysis_dstage_name(int dstage);

struct analysis_step {
	int step;
	double dur_ms;
	double part_ms[PART_COUNT];   /* sums to dur_ms */
	double gpu_busy_ms;           /* union of kernel, memcpy and memset intervals */
	double data_wait_ms;
	double stage_ms[STAGE_COUNT]; /* host time in each stage's annotation */
	double device_ms[DSTAGE_COUNT]; /* device time by stage; sums to dur_ms */
};

/* One row of a top-10 table: time rows in ms, memory rows in bytes. */
struct analysis_op {
	char name[96];
	long count;
	double total;
	double mean;
};

struct analysis_advice {
	char rule[24];     /* "loader_workers", "cuda_graphs", "amp", "bigger_batch" */
	double value;      /* the measured number that fired the rule */
	double threshold;
	char text[256];
};

#define ANALYSIS_TOP 10
#define ANALYSIS_MAX_ADVICE 4

struct analysis {
	struct trace_meta meta;
	struct analysis_step *steps;
	int n_steps;
	struct analysis_step mean;  /* every field averaged over the steps */
	int device_from_host;       /* 1: no GPU work in the trace, device_ms is the
				       compute thread's stages (the CPU backend) */

	double gpu_busy_share;      /* sum of gpu_busy_ms / sum of dur_ms */
	double gpu_idle_share;      /* 1 - gpu_busy_share */
	double data_wait_share;     /* sum of data_wait_ms / sum of dur_ms */
	long n_kernels;
	double kernel_total_ms, kernel_median_us;

	struct analysis_op top_cpu[ANALYSIS_TOP]; /* cpu_op ranges by name, ms */
	struct analysis_op top_gpu[ANALYSIS_TOP]; /* kernels by launching layer, ms */
	struct analysis_op top_mem[ANALYSIS_TOP]; /* allocations by layer, bytes */
	struct analysis_op top_kernels[ANALYSIS_TOP]; /* kernels by (demangled) name, ms */
	int n_top_cpu, n_top_gpu, n_top_mem, n_top_kernels;

	/* Memory trend for the memory chart: ms since the first step, bytes allocated. */
	double *mem_t_ms, *mem_total_bytes;
	int n_mem;
	double mem_peak_bytes;

	struct analysis_advice advice[ANALYSIS_MAX_ADVICE];
	int n_advice;

	/* Live memory along the step from the plan (have_mem_tl 0: none, as for a
	 * torch.profiler trace); set by analysis_set_mem_timeline. */
	struct mem_timeline mem_tl;
	int have_mem_tl;
};

/* Analyse t (which needs at least one step); a is owned by the caller and released
 * with analysis_free. */
int analysis_run(const struct trace *t, struct analysis *a);
void analysis_free(struct analysis *a);
/* Attach a copy of the plan's memory timeline: the report, JSON and charts show it. */
int analysis_set_mem_timeline(struct analysis *a, const struct mem_timeline *tl);

void analysis_print(const struct analysis *a, FILE *f);
/* A JSON summary (new reference), or NULL when out of memory. */
json_t *analysis_to_json(const struct analysis *a);
/* profile_report.md: key figures, tables and advice, written atomically. */
int analysis_write_markdown(const struct analysis *a, const char *path);
/* The same report to an open stream (for a writer that adds sections of its own). */
void analysis_markdown_print(const struct analysis *a, FILE *f);

#endif
