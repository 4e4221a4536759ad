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
	char rule[24];     /* "loader_workers", "h2d_copies", "syncs", "cuda_graphs", "amp",
			      "bigger_batch", "memory_pressure", "bandwidth_bound" */
	double value;      /* the measured number that fired the rule */
	double threshold;
	double est_speedup; /* estimated step time now / after the fix (docs/profile.md);
			       1 for a fix that is about fitting, not speed */
	char text[256];
};

/* What the advice rules read beyond the breakdown, means per step
 * (analysis_advice_evidence fills them from the trace). */
struct analysis_evidence {
	double syncs_per_step;   /* host waits for the device: *Synchronize calls */
	double sync_refill_ms;   /* GPU idle after each such wait until its next work */
	double launch_idle_ms;   /* GPU idle inside the step outside the data wait */
	double kernels_per_step;
	double math_share;       /* tensor-core work (convolutions, GEMMs) / step time */
	double membound_share;   /* batch norm, activations, pooling, adds / step time */
	double copy_exposed_share; /* copies with no kernel running / step time */
};

#define ANALYSIS_TOP 10
#define ANALYSIS_MAX_ADVICE 10

/* A row of an op table, as torch.profiler's key_averages().table(): by op type
 * ("conv forward", "conv backward", "batch norm forward", ..., "loss", "copy",
 * "optimizer", "CUDA runtime") or by layer ("layer1.0.conv1.backward"). Host time is
 * the layer's range (total) and the range less the CUDA runtime calls inside it
 * (self; the runtime calls are a row of their own); GPU time is the kernels, copies
 * and memsets it launched (layers do not nest, so self and total are the same). */
struct analysis_oprow {
	char name[96];
	char shapes[128];    /* input shapes (layer rows, --record-shapes); "" when none */
	long calls;          /* host calls; 0 for a GPU-only row */
	long gpu_calls;      /* GPU activities */
	double cpu_self_ms, cpu_total_ms, gpu_ms;
};

/* Holistic Trace Analysis' figures, computed natively over the GPU work HTA keeps
 * (work whose launch started before the last step, when there are two or more):
 * temporal breakdown, kernel types and their overlap, idle time by cause and launch
 * delays per stream. docs/profile.md gives each definition. */
#define ANALYSIS_MAX_STREAMS 16

struct analysis_stream {
	int device, stream;
	long kernels;          /* GPU activities on the stream */
	double busy_us;
	double idle_host_wait_us, idle_kernel_wait_us, idle_other_us;
	long launches;         /* those with a launching runtime call */
	double launch_delay_mean_us, launch_delay_median_us, launch_delay_max_us;
	double launch_cpu_mean_us; /* the runtime call's own duration */
};

struct analysis_hta {
	int valid;             /* 0: no GPU work with a launch */
	double span_us;        /* first start to last end: HTA's kernel_time */
	double idle_us, compute_us, non_compute_us;
	double communication_us, memory_us, other_us; /* unions by kernel type */
	double compute_comm_overlap_us, compute_memory_overlap_us;
	struct analysis_stream streams[ANALYSIS_MAX_STREAMS];
	int n_streams;         /* the busiest ANALYSIS_MAX_STREAMS */
};

/* Kernels grouped by name and launch configuration, with the occupancy CUPTI's
 * record lets us estimate (docs/profile.md: an estimate from the compute
 * capability's limits, -1 where the registers or the GPU are unknown). */
struct analysis_kconf {
	char name[96];
	int grid[3], block[3];
	int registers, shared_bytes;
	long calls;
	double total_ms, mean_us;
	double theoretical_occupancy; /* resident warps / the SM's maximum, 0..1 */
	double achieved_occupancy;    /* est.: limited also by the grid's blocks per SM */
};

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

	/* Op tables, sorted by GPU time (sort_by_gpu) or host total time. */
	struct analysis_oprow *op_types, *op_layers;
	int n_op_types, n_op_layers;
	int sort_by_gpu;
	int have_shapes;            /* some layer row has input shapes */
	double steps_total_ms;      /* sum of step times: what "% of step" divides by */
	struct analysis_kconf kconf[ANALYSIS_TOP];
	int n_kconf;

	struct analysis_hta hta;

	/* Memory trend for the memory chart: ms since the first step, bytes allocated. */
	double *mem_t_ms, *mem_total_bytes;
	int n_mem;
	double mem_peak_bytes;

	struct analysis_evidence ev;
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
/* The --sort choices: "gpu", "cpu", then NULL. */
const char *analysis_sort_name_at(int i);
/* 0 when s (NULL: not given) is one of them, else GP_EINVAL naming them. */
int analysis_sort_check(const char *s);
/* Sort the op tables by GPU time (by_gpu) or by host total time. */
void analysis_sort_ops(struct analysis *a, int by_gpu);
/* Theoretical and estimated achieved occupancy of a kernel launch on a GPU of
 * compute capability cc_major.cc_minor with sm_count SMs (0: unknown; achieved is
 * then -1); both -1 when the registers or the compute capability are unknown. */
void analysis_occupancy(int cc_major, int cc_minor, int sm_count, const int grid[3],
			const int block[3], int registers, int shared_bytes,
			double *theoretical, double *achieved);
/* Fill a->hta from t (analysis_run calls it). */
int analysis_hta_run(const struct trace *t, struct analysis *a);
/* The same figures as JSON ("hta" in analysis.json) and as report text. */
json_t *analysis_hta_json(const struct analysis_hta *h);
void analysis_hta_print(const struct analysis_hta *h, FILE *f, int markdown);
/* Attach a copy of the plan's memory timeline: the report, JSON and charts show it. */
int analysis_set_mem_timeline(struct analysis *a, const struct mem_timeline *tl);

/* The advice rules over a's figures and a->ev (analysis_run calls it; a test may
 * call it on hand-made figures): a->advice is replaced. */
void analysis_advise(struct analysis *a);
/* The estimates the rules and `advise` share (docs/profile.md, "Advice rules"):
 * a share of the step removed (1 / (1 - share)); tensor cores on a share of math
 * (1 / (1 - m + m / ADVICE_TC_FACTOR)); twice the batch at a GPU busy share b
 * (2 / (1 + b)); a share of bandwidth-bound work fused (1 / (1 - s / 2)). */
#define ADVICE_TC_FACTOR 2.0
#define ADVICE_GRAPH_GAP_US 2.0 /* a kernel's launch gap inside a CUDA graph */
double advice_est_removed(double share);
double advice_est_tensor_cores(double math_share);
double advice_est_bigger_batch(double busy_share);
double advice_est_fused(double membound_share);

void analysis_print(const struct analysis *a, FILE *f);
/* A JSON summary (new reference), or NULL when out of memory. */
json_t *analysis_to_json(const struct analysis *a);
/* profile_report.md: key figures, tables and advice, written atomically. */
int analysis_write_markdown(const struct analysis *a, const char *path);
/* The same report to an open stream (for a writer that adds sections of its own). */
void analysis_markdown_print(const struct analysis *a, FILE *f);

#endif
