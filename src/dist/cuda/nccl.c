/* NCCL communicators over a process group (nccl.h). The communicator is
 * non-blocking (ncclConfig_t.blocking = 0): set-up, collectives and finalize may
 * answer ncclInProgress, and every wait for them polls ncclCommGetAsyncError together
 * with the group (dist_poll) and the group's timeout, so that a peer that dies while
 * NCCL connects or reduces ends this rank with its name instead of a hang; the
 * communicator is then aborted, which also ends kernels waiting for that peer. */
#include "dist/cuda/nccl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/error.h"

struct dist_nccl {
	struct dist *d;
	ncclComm_t comm;
	int device;
	int broken; /* aborted: every later call fails */
	double timeout_s;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void nap(void)
{
	struct timespec t = { 0, 200000 };
	nanosleep(&t, NULL);
}

/* Abort the communicator (once) and return code with the message already set. */
static int nccl_break(struct dist_nccl *c, int code)
{
	if (!c->broken && c->comm) {
		ncclCommAbort(c->comm);
		c->comm = NULL;
	}
	c->broken = 1;
	return code;
}

static int nccl_fail(struct dist_nccl *c, const char *call, ncclResult_t r, const char *file,
		     int line)
{
	const char *last = c->comm ? ncclGetLastError(c->comm) : NULL;
	gp_error(GP_EDEVICE, "%s: %s%s%s (%s:%d)", call, ncclGetErrorString(r),
		 last && *last ? ": " : "", last ? last : "", file, line);
	return nccl_break(c, GP_EDEVICE);
}

/* Wait until the communicator has no operation in progress. */
static int nccl_settle(struct dist_nccl *c, const char *call, const char *file, int line)
{
	double deadline = now_s() + c->timeout_s;
	for (;;) {
		ncclResult_t st = ncclInProgress;
		ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
		if (r != ncclSuccess)
			return nccl_fail(c, "ncclCommGetAsyncError", r, file, line);
		if (st == ncclSuccess)
			return 0;
		if (st != ncclInProgress)
			return nccl_fail(c, call, st, file, line);
		if (dist_poll(c->d) < 0)
			return nccl_break(c, GP_EDEVICE);
		if (now_s() > deadline) {
			gp_error(GP_EDEVICE, "%s: not done within %g s (a rank may be stuck) (%s:%d)",
				 call, c->timeout_s, file, line);
			return nccl_break(c, GP_EDEVICE);
		}
		nap();
	}
}

#define NCCL_TRY(c, call)                                                          \
	do {                                                                       \
		ncclResult_t nr_ = (call);                                         \
		if (nr_ == ncclInProgress)                                         \
			GP_TRY(nccl_settle((c), #call, __FILE__, __LINE__));       \
		else if (nr_ != ncclSuccess)                                       \
			return nccl_fail((c), #call, nr_, __FILE__, __LINE__);     \
	} while (0)

#define CUDA_TRY(call)                                                                      \
	do {                                                                                \
		cudaError_t ce_ = (call);                                                   \
		if (ce_ != cudaSuccess)                                                     \
			return gp_error(ce_ == cudaErrorMemoryAllocation ? GP_EDEVOOM : GP_EDEVICE, \
					"%s: %s (%s:%d)", #call, cudaGetErrorString(ce_),   \
					__FILE__, __LINE__);                                \
	} while (0)

static int nccl_open_comm(struct dist_nccl *c, ncclUniqueId id)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	NCCL_TRY(c, ncclCommInitRankConfig(&c->comm, dist_world(c->d), id, dist_rank(c->d), &cfg));
	/* a non-blocking init may answer ncclSuccess while it still connects */
	return nccl_settle(c, "ncclCommInitRankConfig", __FILE__, __LINE__);
}

int dist_nccl_open(struct dist *d, int device, struct dist_nccl **out)
{
	*out = NULL;
	struct dist_nccl *c = calloc(1, sizeof(*c));
	if (!c)
		return gp_error(GP_ENOMEM, "out of memory");
	c->d = d;
	c->device = device;
	c->timeout_s = dist_timeout_s(d);
	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	int rc = 0;
	cudaError_t ce = cudaSetDevice(device);
	if (ce != cudaSuccess)
		rc = gp_error(GP_EDEVICE, "cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
	ncclResult_t r = ncclSuccess;
	if (rc == 0 && dist_rank(d) == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
		rc = gp_error(GP_EDEVICE, "ncclGetUniqueId: %s", ncclGetErrorString(r));
	/* a rank that cannot take part says so before the others wait for it */
	if (rc < 0)
		dist_abort(d, gp_errmsg());
	else
		rc = dist_bcast(d, &id, sizeof(id), 0);
	if (rc == 0)
		rc = nccl_open_comm(c, id);
	if (rc < 0) {
		if (!dist_failed(d))
			dist_abort(d, gp_errmsg());
		nccl_break(c, rc);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void dist_nccl_close(struct dist_nccl *c)
{
	if (!c)
		return;
	if (!c->broken && c->comm && dist_failed(c->d))
		nccl_break(c, 0);
	if (!c->broken && c->comm) {
		char keep[512];
		snprintf(keep, sizeof(keep), "%s", gp_errmsg());
		/* finalize flushes what is queued; a peer gone meanwhile means abort */
		ncclResult_t r = ncclCommFinalize(c->comm);
		int rc = r == ncclSuccess || r == ncclInProgress
				 ? nccl_settle(c, "ncclCommFinalize", __FILE__, __LINE__) : -1;
		if (rc == 0)
			ncclCommDestroy(c->comm);
		else
			nccl_break(c, 0);
		gp_error(0, "%s", keep);
	}
	free(c);
}

static int nccl_type(enum gp_dtype t, ncclDataType_t *out)
{
	switch (t) {
	case GP_F32: *out = ncclFloat32; return 0;
	case GP_F64: *out = ncclFloat64; return 0;
	case GP_F16: *out = ncclFloat16; return 0;
	case GP_BF16: *out = ncclBfloat16; return 0;
	default:
		return gp_error(GP_EINVAL, "NCCL all-reduce of %s: only floating types", dtype_name(t));
	}
}

static int nccl_enter(struct dist_nccl *c)
{
	if (c->broken)
		return gp_error(GP_EDEVICE, "the NCCL communicator was aborted%s%s",
				dist_failed(c->d) ? ": " : "", dist_failure(c->d));
	if (dist_failed(c->d)) {
		gp_error(GP_EDEVICE, "%s", dist_failure(c->d));
		return nccl_break(c, GP_EDEVICE);
	}
	return 0;
}

int dist_nccl_allreduce(struct dist_nccl *c, void *buf, size_t count, enum gp_dtype dtype,
			int avg, void *stream)
{
	ncclDataType_t t;
	GP_TRY(nccl_enter(c));
	GP_TRY(nccl_type(dtype, &t));
	NCCL_TRY(c, ncclAllReduce(buf, buf, count, t, avg ? ncclAvg : ncclSum, c->comm,
				  (cudaStream_t)stream));
	return 0;
}

int dist_nccl_bcast(struct dist_nccl *c, void *buf, size_t count, enum gp_dtype dtype, int root,
		    void *stream)
{
	ncclDataType_t t;
	GP_TRY(nccl_enter(c));
	if (dtype == GP_I32 || dtype == GP_I64 || dtype == GP_U8)
		t = dtype == GP_I32 ? ncclInt32 : dtype == GP_I64 ? ncclInt64 : ncclUint8;
	else
		GP_TRY(nccl_type(dtype, &t));
	if (root < 0 || root >= dist_world(c->d))
		return gp_error(GP_EINVAL, "dist_nccl_bcast: root %d is not a rank of %d", root,
				dist_world(c->d));
	NCCL_TRY(c, ncclBroadcast(buf, buf, count, t, root, c->comm, (cudaStream_t)stream));
	return 0;
}

int dist_nccl_check(struct dist_nccl *c)
{
	GP_TRY(nccl_enter(c));
	ncclResult_t st = ncclSuccess;
	ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
	if (r != ncclSuccess)
		return nccl_fail(c, "ncclCommGetAsyncError", r, __FILE__, __LINE__);
	if (st != ncclSuccess && st != ncclInProgress)
		return nccl_fail(c, "NCCL (asynchronous)", st, __FILE__, __LINE__);
	if (dist_poll(c->d) < 0)
		return nccl_break(c, GP_EDEVICE);
	return 0;
}

/* Wait for stream's work, watching NCCL and the group: a kernel that waits for a
 * dead peer never ends by itself. */
static int stream_wait(struct dist_nccl *c, cudaStream_t s)
{
	double deadline = now_s() + c->timeout_s;
	for (;;) {
		cudaError_t e = cudaStreamQuery(s);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotReady)
			return gp_error(GP_EDEVICE, "cudaStreamQuery: %s", cudaGetErrorString(e));
		GP_TRY(dist_nccl_check(c));
		if (now_s() > deadline) {
			gp_error(GP_EDEVICE, "NCCL all-reduce not done within %g s (a rank may be stuck)",
				 c->timeout_s);
			return nccl_break(c, GP_EDEVICE);
		}
		nap();
	}
}

static uint16_t bf16_from(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float bf16_to(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Sum and mean of small integers in f32 and bf16: value i of rank r is r + i % 5. */
#define SELF_N 4099

static int selftest_values(struct dist_nccl *c, cudaStream_t s, void *dev)
{
	int rank = dist_rank(c->d), world = dist_world(c->d);
	double ranks = world * (world - 1) / 2.0;
	static float hf[SELF_N];
	static uint16_t hb[SELF_N];
	for (int dt = 0; dt < 2; dt++)
		for (int avg = 0; avg < 2; avg++) {
			for (int i = 0; i < SELF_N; i++) {
				hf[i] = (float)(rank + i % 5);
				hb[i] = bf16_from(hf[i]);
			}
			size_t bytes = dt ? SELF_N * 2 : SELF_N * 4;
			CUDA_TRY(cudaMemcpyAsync(dev, dt ? (void *)hb : (void *)hf, bytes,
						 cudaMemcpyHostToDevice, s));
			GP_TRY(dist_nccl_allreduce(c, dev, SELF_N, dt ? GP_BF16 : GP_F32, avg, s));
			CUDA_TRY(cudaMemcpyAsync(dt ? (void *)hb : (void *)hf, dev, bytes,
						 cudaMemcpyDeviceToHost, s));
			GP_TRY(stream_wait(c, s));
			for (int i = 0; i < SELF_N; i++) {
				double want = ranks + (double)world * (i % 5);
				if (avg)
					want /= world;
				double got = dt ? bf16_to(hb[i]) : hf[i];
				/* sums of small integers are exact; a mean within rounding */
				double tol = avg ? fabs(want) * (dt ? 1.0 / 128 : 1e-6) : 0;
				if (!(fabs(got - want) <= tol)) {
					gp_error(GP_EDEVICE, "NCCL %s of %s: element %d is %.9g, expected %.9g",
						 avg ? "mean" : "sum", dt ? "bf16" : "f32", i, got, want);
					dist_abort(c->d, gp_errmsg());
					return nccl_break(c, GP_EDEVICE);
				}
			}
		}
	return 0;
}

static int selftest_time(struct dist_nccl *c, cudaStream_t s, void *dev, size_t bytes, int iters,
			 struct dist_nccl_bench *out)
{
	cudaEvent_t e0, e1;
	CUDA_TRY(cudaEventCreate(&e0));
	cudaError_t ce = cudaEventCreate(&e1);
	if (ce != cudaSuccess) {
		cudaEventDestroy(e0);
		return gp_error(GP_EDEVICE, "cudaEventCreate: %s", cudaGetErrorString(ce));
	}
	size_t n = bytes / 4;
	int rc = dist_nccl_allreduce(c, dev, n, GP_F32, 0, s); /* warm-up */
	if (rc == 0)
		rc = stream_wait(c, s);
	double total = 0, best = INFINITY;
	for (int i = 0; rc == 0 && i < iters; i++) {
		rc = dist_barrier(c->d);
		float ms = 0;
		if (rc == 0 && (ce = cudaEventRecord(e0, s)) != cudaSuccess)
			rc = gp_error(GP_EDEVICE, "cudaEventRecord: %s", cudaGetErrorString(ce));
		if (rc == 0)
			rc = dist_nccl_allreduce(c, dev, n, GP_F32, 0, s);
		if (rc == 0 && (ce = cudaEventRecord(e1, s)) != cudaSuccess)
			rc = gp_error(GP_EDEVICE, "cudaEventRecord: %s", cudaGetErrorString(ce));
		if (rc == 0)
			rc = stream_wait(c, s);
		if (rc == 0 && (ce = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess)
			rc = gp_error(GP_EDEVICE, "cudaEventElapsedTime: %s", cudaGetErrorString(ce));
		total += ms;
		best = ms < best ? ms : best;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	out->ms_mean = iters > 0 ? total / iters : 0;
	out->ms_min = iters > 0 ? best : 0;
	return rc;
}

int dist_nccl_selftest(struct dist_nccl *c, size_t bytes, int iters, struct dist_nccl_bench *out)
{
	GP_TRY(nccl_enter(c));
	cudaStream_t s;
	void *dev = NULL;
	size_t cap = bytes > SELF_N * 4 ? bytes : SELF_N * 4;
	CUDA_TRY(cudaSetDevice(c->device));
	CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaError_t ce = cudaMalloc(&dev, cap);
	int rc = 0;
	if (ce != cudaSuccess)
		rc = gp_error(ce == cudaErrorMemoryAllocation ? GP_EDEVOOM : GP_EDEVICE,
			      "cudaMalloc(%zu): %s", cap, cudaGetErrorString(ce));
	if (rc == 0)
		rc = selftest_values(c, s, dev);
	if (rc == 0 && (ce = cudaMemsetAsync(dev, 0, cap, s)) != cudaSuccess)
		rc = gp_error(GP_EDEVICE, "cudaMemsetAsync: %s", cudaGetErrorString(ce));
	if (rc == 0)
		rc = selftest_time(c, s, dev, bytes, iters, out);
	if (rc < 0)
		cudaStreamSynchronize(s); /* the communicator is aborted: nothing waits long */
	cudaFree(dev);
	cudaStreamDestroy(s);
	return rc;
}
