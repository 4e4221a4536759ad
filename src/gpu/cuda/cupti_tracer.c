#include "gpu/tracer.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define TRACER_BUFFER_BYTES (8u << 20)
#define TRACER_ALIGN 8

/* Record the failing call's text, file and line. */
#define CUPTI_CHECK(call)                                                                  \
	do {                                                                               \
		CUptiResult cupti_rc_ = (call);                                            \
		if (cupti_rc_ != CUPTI_SUCCESS) {                                          \
			const char *cupti_msg_ = NULL;                                     \
			cuptiGetResultString(cupti_rc_, &cupti_msg_);                      \
			return gp_error(GP_EDEVICE, "%s failed at %s:%d: %s", #call,       \
					__FILE__, __LINE__, cupti_msg_ ? cupti_msg_ : "?"); \
		}                                                                          \
	} while (0)

static const CUpti_ActivityKind tracer_kinds[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMSET,
	CUPTI_ACTIVITY_KIND_RUNTIME,
};
#define TRACER_NKINDS (sizeof(tracer_kinds) / sizeof(tracer_kinds[0]))

/* CUPTI hands buffers back on its own thread while the training thread pushes host
 * ranges into the trace, so records go to a private staging trace under a lock and
 * move into the real one at tracer_stop. */
static struct {
	struct trace *target;
	struct trace staged;
	pthread_mutex_t lock;
	int64_t offset_ns; /* host clock minus CUPTI clock */
	int running;
	int failed;        /* a record could not be stored: stop reports it */
} tracer = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(TRACER_ALIGN, TRACER_BUFFER_BYTES);
	*size = *buffer ? TRACER_BUFFER_BYTES : 0;
	*max_records = 0;
}

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", as Kineto shows runtime calls. */
static void runtime_name(CUpti_CallbackId cbid, char *out, size_t cap)
{
	const char *name = NULL;
	if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || !name)
		name = "cudaRuntime";
	snprintf(out, cap, "%s", name);
	char *v = strstr(out, "_v");
	if (v)
		*v = 0;
}

static int record_convert(const CUpti_Activity *rec)
{
	struct trace *s = &tracer.staged;
	int64_t off = tracer.offset_ns;
	switch (rec->kind) {
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
	case CUPTI_ACTIVITY_KIND_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		struct trace_gpu g = {
			.name = k->name ? k->name : "kernel", .cat = TRACE_KERNEL,
			.device = (int)k->deviceId, .stream = (int)k->streamId,
			.start_ns = (int64_t)k->start + off, .end_ns = (int64_t)k->end + off,
			.correlation = k->correlationId,
			.grid = { k->gridX, k->gridY, k->gridZ },
			.block = { k->blockX, k->blockY, k->blockZ },
			.registers = k->registersPerThread,
			.shared_bytes = k->staticSharedMemory + k->dynamicSharedMemory,
		};
		return trace_add_gpu(s, &g);
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
		static const char *const kinds[] = { "Memcpy", "Memcpy HtoD", "Memcpy DtoH",
						     "Memcpy HtoA", "Memcpy AtoH", "Memcpy AtoA",
						     "Memcpy AtoD", "Memcpy DtoA", "Memcpy DtoD",
						     "Memcpy HtoH", "Memcpy PtoP" };
		struct trace_gpu g = {
			.name = m->copyKind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[m->copyKind]
									       : "Memcpy",
			.cat = TRACE_GPU_MEMCPY, .device = (int)m->deviceId,
			.stream = (int)m->streamId, .start_ns = (int64_t)m->start + off,
			.end_ns = (int64_t)m->end + off, .correlation = m->correlationId,
			.bytes = m->bytes,
		};
		return trace_add_gpu(s, &g);
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
		struct trace_gpu g = {
			.name = "Memset", .cat = TRACE_GPU_MEMSET, .device = (int)m->deviceId,
			.stream = (int)m->streamId, .start_ns = (int64_t)m->start + off,
			.end_ns = (int64_t)m->end + off, .correlation = m->correlationId,
			.bytes = m->bytes,
		};
		return trace_add_gpu(s, &g);
	}
	case CUPTI_ACTIVITY_KIND_RUNTIME: {
		const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
		char name[128];
		runtime_name(a->cbid, name, sizeof(name));
		/* Ranges are pushed from the training thread; the runtime calls we
		 * trace come from it too, so they share its row. */
		struct trace_range r = {
			.name = name, .cat = TRACE_CUDA_RUNTIME, .tid = tracer.target->tid,
			.start_ns = (int64_t)a->start + off, .end_ns = (int64_t)a->end + off,
			.correlation = a->correlationId,
		};
		return trace_add_range(s, &r);
	}
	default:
		return 0;
	}
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
				      size_t size, size_t valid_bytes)
{
	CUpti_Activity *rec = NULL;
	pthread_mutex_lock(&tracer.lock);
	while (cuptiActivityGetNextRecord(buffer, valid_bytes, &rec) == CUPTI_SUCCESS)
		if (record_convert(rec) < 0)
			tracer.failed = 1;
	pthread_mutex_unlock(&tracer.lock);
	free(buffer);
}

/* The offset from the CUPTI clock to CLOCK_MONOTONIC, read between two host reads. */
static int clock_offset(int64_t *offset_ns)
{
	uint64_t gpu_ns;
	int64_t h0 = trace_now_ns();
	CUPTI_CHECK(cuptiGetTimestamp(&gpu_ns));
	int64_t h1 = trace_now_ns();
	*offset_ns = h0 + (h1 - h0) / 2 - (int64_t)gpu_ns;
	return 0;
}

static void device_meta(struct trace *t)
{
	struct cudaDeviceProp p;
	int dev = 0;
	if (t->meta.gpu_name[0] || cudaGetDevice(&dev) != cudaSuccess ||
	    cudaGetDeviceProperties(&p, dev) != cudaSuccess)
		return;
	snprintf(t->meta.gpu_name, sizeof(t->meta.gpu_name), "%.127s", p.name);
	t->meta.device = dev;
	t->meta.cc_major = p.major;
	t->meta.cc_minor = p.minor;
	t->meta.sm_count = p.multiProcessorCount;
	t->meta.gpu_mem_bytes = p.totalGlobalMem;
}

static int kinds_enable(void)
{
	for (size_t i = 0; i < TRACER_NKINDS; i++)
		CUPTI_CHECK(cuptiActivityEnable(tracer_kinds[i]));
	return 0;
}

static void kinds_disable(void)
{
	for (size_t i = 0; i < TRACER_NKINDS; i++)
		cuptiActivityDisable(tracer_kinds[i]);
}

int tracer_start(struct trace *t)
{
	if (tracer.running)
		return gp_error(GP_EINVAL, "tracer: already running");
	device_meta(t);
	GP_TRY(trace_init(&tracer.staged));
	tracer.target = t;
	tracer.failed = 0;
	int rc = clock_offset(&tracer.offset_ns);
	if (rc < 0)
		goto free_staged;
	rc = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS
		     ? 0
		     : gp_error(GP_EDEVICE, "cuptiActivityRegisterCallbacks failed at %s:%d",
				__FILE__, __LINE__);
	if (rc < 0)
		goto free_staged;
	rc = kinds_enable();
	if (rc < 0)
		goto disable;
	tracer.running = 1;
	return 0;
disable:
	kinds_disable();
free_staged:
	trace_free(&tracer.staged);
	return rc;
}

/* The innermost cpu_op open at ts among ops sorted by start (they do not nest in
 * gpuperf: one per layer call), or 0. */
static uint64_t op_at(const struct trace *t, const size_t *ops, size_t n, int64_t ts)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->ranges[ops[mid]].start_ns <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return 0;
	const struct trace_range *r = &t->ranges[ops[lo - 1]];
	return r->end_ns >= ts ? r->external_id : 0;
}

/* Move the staged records into the target, linking each runtime call to the layer
 * range it ran in; host ranges are appended in start order, so the cpu_op index is
 * already sorted. */
static int staged_merge(void)
{
	struct trace *t = tracer.target, *s = &tracer.staged;
	size_t *ops = malloc((t->n_ranges ? t->n_ranges : 1) * sizeof(*ops)), n_ops = 0;
	int rc = 0;
	if (!ops)
		return gp_error(GP_ENOMEM, "tracer: out of memory");
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].cat == TRACE_CPU_OP)
			ops[n_ops++] = i;
	for (size_t i = 0; i < s->n_ranges && rc == 0; i++) {
		struct trace_range r = s->ranges[i];
		r.external_id = op_at(t, ops, n_ops, r.start_ns);
		rc = trace_add_range(t, &r);
	}
	for (size_t i = 0; i < s->n_gpu && rc == 0; i++)
		rc = trace_add_gpu(t, &s->gpu[i]);
	free(ops);
	return rc;
}

int tracer_stop(void)
{
	if (!tracer.running)
		return gp_error(GP_EINVAL, "tracer: not running");
	tracer.running = 0;
	int rc = 0;
	CUptiResult flush = cuptiActivityFlushAll(1);
	kinds_disable();
	if (flush != CUPTI_SUCCESS) {
		const char *msg = NULL;
		cuptiGetResultString(flush, &msg);
		rc = gp_error(GP_EDEVICE, "cuptiActivityFlushAll(1) failed at %s:%d: %s", __FILE__,
			      __LINE__, msg ? msg : "?");
	}
	pthread_mutex_lock(&tracer.lock);
	if (rc == 0 && tracer.failed)
		rc = gp_error(GP_ENOMEM, "tracer: some activity records could not be stored");
	if (rc == 0)
		rc = staged_merge();
	trace_free(&tracer.staged);
	pthread_mutex_unlock(&tracer.lock);
	tracer.target = NULL;
	return rc;
}
