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
	/* kernel launches through the driver API (cuBLAS's, cuDNN's runtime-compiled
	 * engines): without them their kernels had no launching call, so no layer, and a
	 * 16-bit MobileNetV2 profile put 3.3 ms a step of 1x1 products in "(no layer)" */
	CUPTI_ACTIVITY_KIND_DRIVER,
	/* which layer range each call was made in, exactly: host ranges and CUPTI's
	 * records are on two clocks, and a launch inside a short range (the optimizer
	 * step's, a few microseconds) missed it by time alone */
	CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
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
	int system_tids;   /* runtime records carry the calling thread's gettid */
	struct trace_corr_link *links; /* runtime call -> layer range, from CUPTI */
	size_t n_links, cap_links;
} tracer = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(TRACER_ALIGN, TRACER_BUFFER_BYTES);
	*size = *buffer ? TRACER_BUFFER_BYTES : 0;
	*max_records = 0;
}

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel", as Kineto shows API calls. */
static void api_name(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, char *out, size_t cap)
{
	const char *name = NULL;
	if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name)
		name = domain == CUPTI_CB_DOMAIN_DRIVER_API ? "cuDriver" : "cudaRuntime";
	snprintf(out, cap, "%s", name);
	char *v = strstr(out, "_v");
	if (v)
		*v = 0;
}

/* The driver API calls the trace keeps: kernel launches. CUPTI records every driver
 * call a library makes (context queries, attribute reads), which would bury them. */
static int driver_launch(CUpti_CallbackId cbid)
{
	switch (cbid) {
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
		return 1;
	default:
		return 0;
	}
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
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
		int driver = rec->kind == CUPTI_ACTIVITY_KIND_DRIVER;
		if (driver && !driver_launch(a->cbid))
			return 0;
		char name[128];
		api_name(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, name,
			 sizeof(name));
		/* Each call on its thread's row: the training thread's share the row of
		 * the ranges it pushes (trace.tid, also a gettid); another thread's (the
		 * GPU decode thread's, a library's own) are not the loop's (analysis) */
		struct trace_range r = {
			.name = name, .cat = driver ? TRACE_CUDA_DRIVER : TRACE_CUDA_RUNTIME,
			.tid = tracer.system_tids && a->threadId ? (int)a->threadId : tracer.target->tid,
			.start_ns = (int64_t)a->start + off, .end_ns = (int64_t)a->end + off,
			.correlation = a->correlationId,
		};
		return trace_add_range(s, &r);
	}
	case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
		const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)rec;
		if (e->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
			return 0;
		if (tracer.n_links == tracer.cap_links) {
			size_t cap = tracer.cap_links ? 2 * tracer.cap_links : 4096;
			struct trace_corr_link *l = realloc(tracer.links, cap * sizeof(*l));
			if (!l)
				return GP_ENOMEM;
			tracer.links = l;
			tracer.cap_links = cap;
		}
		tracer.links[tracer.n_links++] =
			(struct trace_corr_link){ e->correlationId, e->externalId };
		return 0;
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

/* The offset from the CUPTI clock to CLOCK_MONOTONIC, read between two host reads:
 * the tightest of several pairs, after a first call that may initialise CUPTI (one
 * read around that call was off by as long as the initialisation took). */
static int clock_offset(int64_t *offset_ns)
{
	uint64_t gpu_ns;
	int64_t best = INT64_MAX;
	CUPTI_CHECK(cuptiGetTimestamp(&gpu_ns));
	for (int i = 0; i < 16; i++) {
		int64_t h0 = trace_now_ns();
		CUPTI_CHECK(cuptiGetTimestamp(&gpu_ns));
		int64_t h1 = trace_now_ns();
		if (h1 - h0 < best) {
			best = h1 - h0;
			*offset_ns = h0 + (h1 - h0) / 2 - (int64_t)gpu_ns;
		}
	}
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
	/* the kernel's thread ids, as trace.tid: without them, every runtime call goes on
	 * the training thread's row */
	tracer.system_tids = cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS;
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

void tracer_op_push(uint64_t external_id)
{
	if (tracer.running)
		cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
						       external_id);
}

void tracer_op_pop(void)
{
	uint64_t last;
	if (tracer.running)
		cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
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
		rc = trace_merge_staged(tracer.target, &tracer.staged, tracer.links, tracer.n_links,
					NULL);
	trace_free(&tracer.staged);
	free(tracer.links);
	tracer.links = NULL;
	tracer.n_links = tracer.cap_links = 0;
	pthread_mutex_unlock(&tracer.lock);
	tracer.target = NULL;
	return rc;
}
