/* GPU activity tracing through CUPTI's Activity API: kernels, memcpys, memsets and
 * runtime calls, converted to the host clock and appended to a trace. Built only with
 * CUDA; one tracer per process, since CUPTI's activity callbacks are global. */
#ifndef GP_TRACER_H
#define GP_TRACER_H

#include "core/trace.h"

/* Start recording into t; fills t->meta's GPU fields when gpu_name is empty. */
int tracer_start(struct trace *t);
/* Flush every buffer, stop recording, and append the activities to the trace given
 * to tracer_start (call it from the thread that owns the trace). */
int tracer_stop(void);
/* Around a layer range: CUDA calls made between push and pop are linked to the range
 * with this external id exactly (CUPTI's external correlation), not by timestamps
 * that come from two clocks. No-ops while the tracer is not running. */
void tracer_op_push(uint64_t external_id);
void tracer_op_pop(void);

#endif
