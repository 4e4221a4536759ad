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

#endif
