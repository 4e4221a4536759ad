/* What the two halves of fusion_bench share: the driver (fusion_bench.c: options, the
 * shapes, the baseline, the checks against the CPU, the report) and the fused graph
 * through cuDNN's backend API (fusion_graph.c). */
#ifndef FUSION_BENCH_H
#define FUSION_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

/* Element types; the codes are those fusion_kernels.cu dispatches on. */
enum fb_dtype { FB_BF16 = 0, FB_F16 = 1, FB_F32 = 2 };

/* ---- error checks (fusion_bench.c) ----------------------------------------------- */

extern int verbose;
extern char last_dnn_error[1024];

int cuda_ok(cudaError_t e, const char *call, const char *file, int line);
/* quiet: a failure that probing expects (an unsupported pattern or engine); its text is
 * kept in last_dnn_error for the shape's report and printed only with --verbose. */
int dnn_ok(cudnnStatus_t s, const char *call, const char *file, int line, int quiet);

#define CUDA_OK(call) cuda_ok((call), #call, __FILE__, __LINE__)
#define DNN_OK(call) dnn_ok((call), #call, __FILE__, __LINE__, 0)
#define DNN_PROBE(call) dnn_ok((call), #call, __FILE__, __LINE__, 1)

/* ---- the shapes (the table is shapes[] in fusion_bench.c) ------------------------- */

/* One convolution: c -> k channels, hw x hw input, r x r kernel, stride; count: how many
 * ResNet-50 has; input: what feeds it in the network. */
struct conv_shape {
	const char *name;
	int c, k, hw, r, stride, count;
	const char *input;
};

static inline int shape_out(const struct conv_shape *s)
{
	return (s->hw + 2 * (s->r / 2) - s->r) / s->stride + 1;
}

/* ---- options ---------------------------------------------------------------------- */

struct opts {
	int batch, iters, warmup, plans, samples, wgrad, dgrad;
	int shape;      /* -1: all, or those whose name contains match */
	const char *match; /* NULL: every shape (with shape -1) */
	enum fb_dtype dtype;
	size_t ws_bytes;
};

static inline cudnnDataType_t dtype_cudnn(enum fb_dtype d)
{
	return d == FB_BF16 ? CUDNN_DATA_BFLOAT16 : d == FB_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* ---- one shape's device buffers ---------------------------------------------------- */

struct bufs {
	void *x, *xa, *w, *yb, *yf, *scale_io, *bias_io;
	float *scale_f, *bias_f, *stats_b, *stats_f; /* stats: sum[k] then sqsum[k] */
	void *dwb, *dwf; /* weight gradients (the weight-gradient pass; dy lives in yb) */
	void *da, *dzb, *dzf; /* data gradient, and after the ReLU backward (the data-gradient pass) */
};

/* ---- timing (fusion_bench.c) ------------------------------------------------------- */

struct timer {
	cudaStream_t st;
	cudaEvent_t t0, t1;
};

/* One run of what is timed; returns 1 when every call succeeded. */
typedef int (*run_fn)(void *ctx);

/* Median milliseconds of iters runs after warm runs, each between its own pair of events;
 * negative when a run failed. */
float time_median(struct timer *t, run_fn fn, void *ctx, int warm, int iters);

/* ---- the fused graph (fusion_graph.c) ---------------------------------------------- */

#define FZ_MAX_DESC 512

enum fz_kind { FZ_FWD, FZ_WGRAD, FZ_DGRAD };

/* Every descriptor of one graph, destroyed together (in reverse order) once its plan
 * is no longer needed: operations refer to tensors, the graph to operations, plans to
 * configurations. */
struct fused {
	cudnnBackendDescriptor_t d[FZ_MAX_DESC];
	int nd;
	cudnnBackendDescriptor_t plan, vpack;
	int64_t ws_bytes, engine;
	int rtc, tensor_core;
	const char *variant, *heur;
	int tried_cfgs, finalized;
	cudnnHandle_t h;
	cudaStream_t st;
	float *stats; /* zeroed before each run: sum[k], sqsum[k] */
	int k;
};

/* Finds a plan for shape s: for each variant, the heuristics in mode A then FALLBACK;
 * of the configurations they return, the first `plans` that finalize within the
 * workspace limit are timed and the fastest kept. Returns 1 with f->plan and f->vpack
 * set, 0 when no engine supports the pattern (f->nd left 0). */
int fz_setup(struct fused *f, struct timer *t, const struct conv_shape *s, const struct opts *o,
	     struct bufs *b, void *ws, int prologue, enum fz_kind kind);
/* One run of the plan (a run_fn): the statistics zeroed, then the graph executed. */
int fz_run(void *p);
/* Destroys every descriptor of the graph. */
void fz_free(struct fused *f);

#endif
