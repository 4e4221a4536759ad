/* The in-memory trace: host ranges, GPU activities, memory events and steps, all in
 * nanoseconds on one clock (CLOCK_MONOTONIC; the CUPTI tracer converts its timestamps).
 * The profile command fills it, chrome_trace writes and reads it, analysis reads it.
 * Names are interned in the trace, so events hold plain pointers that live as long as
 * the trace, and range push/pop allocate nothing once the arrays have grown. */
#ifndef GP_TRACE_H
#define GP_TRACE_H

#include <stddef.h>
#include <stdint.h>

enum trace_cat {
	TRACE_USER_ANNOTATION = 0, /* ProfilerStep#N, data, forward, backward, optimizer */
	TRACE_CPU_OP,              /* one range per layer call */
	TRACE_CUDA_RUNTIME,        /* a runtime API call; carries a correlation id */
	TRACE_CUDA_DRIVER,         /* a driver API launch (cuBLAS's, cuDNN's runtime-compiled
				    * kernels); carries a correlation id */
	TRACE_KERNEL,
	TRACE_GPU_MEMCPY,
	TRACE_GPU_MEMSET,
	TRACE_NCAT
};

/* Kineto's category names ("user_annotation", "kernel", ...). */
const char *trace_cat_name(enum trace_cat c);
/* The category of a Kineto name, or -1. */
int trace_cat_parse(const char *name);
/* A CUDA API call (runtime or driver) whose correlation id names what it launched. */
static inline int trace_cat_is_api(enum trace_cat c)
{
	return c == TRACE_CUDA_RUNTIME || c == TRACE_CUDA_DRIVER;
}

struct trace_range {
	const char *name;
	enum trace_cat cat;       /* one of the four host categories */
	int tid;
	int64_t start_ns, end_ns; /* end_ns is 0 while the range is open */
	uint64_t correlation;     /* runtime calls: matches a GPU activity; else 0 */
	uint64_t external_id;     /* cpu_op / annotation: its own id; runtime: the enclosing cpu_op's */
};

struct trace_gpu {
	const char *name;
	enum trace_cat cat;       /* kernel, memcpy or memset */
	int device, stream;
	int64_t start_ns, end_ns;
	uint64_t correlation;
	uint64_t external_id;     /* filled when written, from the launching runtime call */
	int grid[3], block[3];    /* kernels */
	int registers;            /* kernels: registers per thread; 0 when unknown */
	int shared_bytes;         /* kernels: static + dynamic shared memory per block */
	uint64_t bytes;           /* memcpy, memset */
};

/* What a layer name (a cpu_op's name, without ".backward") is: its op type and,
 * when shapes were recorded, its input shapes as JSON text ("[[64, 3, 32, 32]]").
 * The op tables group layer calls by it. */
struct trace_layer {
	const char *name;
	const char *op;           /* "conv2d", "batchnorm2d", ... (ops/ops.h's op_name) */
	const char *shapes;       /* NULL when not recorded */
};

struct trace_mem {
	int64_t ts_ns;
	int64_t total_bytes;      /* allocated on the device after this event */
	int64_t delta_bytes;      /* positive for an allocation, negative for a free */
	const char *category;     /* mem_cat_name() */
	const char *layer;        /* NULL when not charged to a layer */
};

struct trace_step {
	int step;
	int64_t start_ns, end_ns;
	int64_t data_wait_ns;     /* time the step waited for its batch */
};

struct trace_meta {
	char model[32];
	int batch;
	char precision[16];       /* "fp32", "tf32", "fp16", "bf16" */
	char gpu_name[128];
	int device;
	int cc_major, cc_minor;   /* compute capability; 0 when unknown */
	int sm_count;
	uint64_t gpu_mem_bytes;
	int pid;
	char host[64];
	int written_by_us;        /* read from a trace gpuperf wrote (its "gpuperf" object) */
};

#define TRACE_STACK_MAX 64

struct trace {
	struct trace_meta meta;
	int64_t base_ns;          /* the clock at trace_init: the trace's time origin */

	struct trace_range *ranges;
	size_t n_ranges, cap_ranges;
	struct trace_gpu *gpu;
	size_t n_gpu, cap_gpu;
	struct trace_mem *mem;
	size_t n_mem, cap_mem;
	struct trace_step *steps;
	size_t n_steps, cap_steps;
	struct trace_layer *layers;
	size_t n_layers, cap_layers;

	size_t stack[TRACE_STACK_MAX]; /* open ranges (indices), innermost last */
	int depth;
	int tid;                       /* the thread that called trace_init and pushes ranges */
	uint64_t next_external_id;

	/* interned names: an open-addressing table of strings */
	char **names;
	size_t n_names, cap_names;
};

/* The host clock every event uses. */
int64_t trace_now_ns(void);

/* Start an empty trace; meta.pid, meta.host and base_ns are filled in. */
int trace_init(struct trace *t);
void trace_free(struct trace *t);
/* Grow every array so that a run of this size needs no allocation. */
int trace_reserve(struct trace *t, size_t ranges, size_t gpu, size_t mem);

/* A stable copy of s owned by the trace (the same pointer for equal strings). */
const char *trace_intern(struct trace *t, const char *s);
/* The same for the len bytes at s (no NUL among them). */
const char *trace_intern_len(struct trace *t, const char *s, size_t len);

/* Open a host range now (cat is "user_annotation", "cpu_op" or "cuda_runtime") and
 * close the innermost one. Meant for the training thread; cheap after warm-up. */
int trace_range_push(struct trace *t, const char *name, const char *cat);
int trace_range_pop(struct trace *t);

/* Append fully formed events (the tracer, the reader and tests use these). */
int trace_add_range(struct trace *t, const struct trace_range *r);
int trace_add_gpu(struct trace *t, const struct trace_gpu *g);
int trace_add_mem(struct trace *t, int64_t ts_ns, int64_t total_bytes, int64_t delta_bytes,
		  const char *category, const char *layer);

/* A training step: step_begin opens a "ProfilerStep#N" annotation and records the
 * step; step_end closes both and stores how long the step waited for data. */
int trace_step_begin(struct trace *t, int step);
int trace_step_end(struct trace *t, int64_t data_wait_ns);
int trace_add_step(struct trace *t, const struct trace_step *s);
/* Describe a layer (shapes may be NULL); the strings are interned. */
int trace_add_layer(struct trace *t, const char *name, const char *op, const char *shapes);

/* One exact link from a runtime call to the layer range (cpu_op) open when it was
 * made: CUPTI's external correlation record of the call. */
struct trace_corr_link {
	uint64_t correlation, external_id;
};

/* Move a tracer's staged runtime calls and GPU activities into t and link each
 * runtime call to its layer range: by links[] (sorted here) where one names the
 * call, else by time (the cpu_op open at the call's start). The staged times come
 * from a clock offset measured once; where the links show that offset wrong (calls
 * outside the ranges they were made in), every staged time is shifted by the
 * correction the links agree on (the shift closest to none that puts every linked
 * call inside its range, else the median of each call's own), so that launches
 * land in their ranges and GPU work in its steps. *shift_ns (may be NULL) gets it. */
int trace_merge_staged(struct trace *t, const struct trace *staged, struct trace_corr_link *links,
		       size_t n_links, int64_t *shift_ns);

#endif
