/* The profiler: the glue between a net's execution hooks, the in-memory trace and,
 * on the CUDA backend, the CUPTI tracer. It records a step range per training step,
 * the data/forward/backward/optimizer stages, one cpu_op per layer call and a memory
 * event at the end of each, and writes everything `gpuperf profile` promises.
 *
 * A profile session (profile_session_*) drives it from the training loop as a
 * train_observer: it owns the schedule (which steps are timed without the profiler,
 * which are warm-up, which are recorded) and writes each window's outputs. */
#ifndef GP_PROFILER_H
#define GP_PROFILER_H

#include <jansson.h>
#include <stdint.h>

#include "core/memstat.h"
#include "nn/mem_timeline.h"
#include "nn/net.h"
#include "nn/observer.h"
#include "core/trace.h"

struct analysis;

struct profiler {
	struct trace trace;
	struct net *net;
	struct net_hooks saved_hooks;
	/* Names interned once, so a hook call only pushes a pointer. */
	const char *fwd_name[GP_MAX_NODES], *bwd_name[GP_MAX_NODES];
	const char *opt_name;
	const char *stage_name[4];
	const char *cat_name[MEM_NCAT];
	size_t last_mem[MEM_NCAT];   /* net->mem.cur_bytes at the last memory event */
	int attached, tracing;
	int err;                     /* first error inside a hook (hooks return nothing) */
	int64_t keep_from_ns;        /* GPU activity before this is warm-up and dropped */
	struct mem_timeline mem_tl;  /* live memory along the step, from the net's plan */
	int have_mem_tl;
};

/* Prepare to record max_steps steps of net numbered from first_step: intern every
 * name and reserve the arrays so the hooks allocate nothing. Each layer's op type
 * goes into the trace, with its input shapes when record_shapes. */
int profiler_init(struct profiler *p, struct net *net, int first_step, int max_steps,
		  int record_shapes);
/* Install the hooks and, on the CUDA backend, start CUPTI. */
int profiler_start(struct profiler *p);
int profiler_step_begin(struct profiler *p, int step);
int profiler_stage(struct profiler *p, enum train_stage stage, int begin);
int profiler_step_end(struct profiler *p, int64_t data_wait_ns);
/* Forget what was recorded so far (the warm-up steps); keeps the grown arrays. */
int profiler_discard(struct profiler *p);
/* Remove the hooks, stop CUPTI and merge its records; returns the first hook error. */
int profiler_stop(struct profiler *p);
/* Free the trace (and stop CUPTI if still running); does not touch the net. */
void profiler_free(struct profiler *p);

/* Wait for the device's queued work (nothing to wait for on the CPU backend). */
int profiler_device_sync(enum backend_kind backend);

/* Step times of the profiled and of the unprofiled steps, for the overhead line. */
struct profile_overhead {
	double baseline_ms;   /* mean unprofiled step; 0 when none was timed */
	int baseline_steps;
	double profiled_ms;   /* mean recorded step */
	int profiled_steps;
	double ratio;         /* profiled / baseline; 0 when there is no baseline */
};

/* profile_report.md at path: the analysis, then (ov not NULL) the profiler's own
 * cost, in one atomic write. */
int profile_report_write(const struct analysis *a, const char *path,
			 const struct profile_overhead *ov, long long trace_bytes);

/* Write every output of a recorded trace into dir (created): the Chrome trace and
 * its profiler_logs copy, TensorBoard scalars, analysis (printed, markdown, JSON)
 * with the plan's memory timeline tl (NULL: none) and op tables sorted by sort
 * ("gpu", "cpu"; NULL: GPU time when kernels ran), the two charts and result.json
 * (command, argv, settings merged in). */
int profile_write_outputs(struct trace *t, const char *dir, const struct profile_overhead *ov,
			  const struct mem_timeline *tl, const char *sort, const char *command,
			  int argc, char **argv, json_t *settings);

/* One recorded window: from step first (global), warmup steps recorded and dropped,
 * then active steps kept; outputs go to dir (made when the window ends). */
struct profile_window {
	int first, warmup, active;
	int epoch;            /* for the settings; -1 when not an epoch window */
	char dir[4096];
};

#define PROFILE_MAX_WINDOWS 32

struct profile_session {
	/* set by the caller */
	struct profile_window w[PROFILE_MAX_WINDOWS];
	int n_windows;
	int baseline_first, baseline_steps; /* steps timed unprofiled; baseline_steps < 0:
					       every unprofiled step but the first */
	enum backend_kind backend;
	const char *command;
	int argc;
	char **argv;
	json_t *settings;     /* borrowed; copied into each result */
	int quiet;
	int record_shapes;    /* layers' input shapes into the trace (--record-shapes) */
	const char *sort;     /* op tables by "gpu" or "cpu" time; NULL: gpu when kernels ran */
	/* state */
	struct profiler prof;
	int cur;              /* the window being recorded, or -1 */
	int step, recording;
	int64_t step_t0;
	double base_sum_ms, prof_sum_ms;
	int base_n, prof_n;
	int windows_written;
};

void profile_session_init(struct profile_session *s);
struct train_observer profile_session_observer(struct profile_session *s);
/* Release a window left open by an error. */
void profile_session_free(struct profile_session *s);

#endif
