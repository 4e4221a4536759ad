/* The GPU tests' harness (harness.c): one test's device context with every buffer it
 * allocated (freed in gpu_close), host/device copies, random inputs, and 16-bit values
 * on the host (bit-level round to nearest even, as __float2half_rn / __float2bfloat16_rn,
 * so the tests do not depend on the host compiler's half support). */
#ifndef GP_TESTS_GPU_HARNESS_H
#define GP_TESTS_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "../test.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/device.h"
#include "ops/ops.h"

#define MAX_BUFS 1024

/* The random stream of a file's tests (gpu_open's third argument in GPU_OPEN). */
#ifndef GPU_RNG_STREAM
#define GPU_RNG_STREAM 7
#endif

/* One test's device context plus every buffer it allocated, freed in gpu_close (or
 * back to a mark by gpu_release, between cases). */
struct gpu {
	struct cuda_ctx *ctx;
	struct mem_stats mem;
	struct rng rng;
	void *dev[MAX_BUFS];
	size_t dev_bytes[MAX_BUFS];
	int n_dev;
	void *host[MAX_BUFS];
	int n_host;
	char why[300];
};

/* 0: ready; 1: no device (why says so); -1: the context could not be made. */
int gpu_open(struct gpu *g, uint64_t seed, uint64_t stream);
void gpu_release(struct gpu *g, int dev_mark, int host_mark);
/* Frees everything and checks that the byte counts went back to zero. */
void gpu_close(struct gpu *g);
/* 0xff bytes: NaN in float and in both 16-bit types. */
void poison(struct gpu *g, void *d, size_t bytes);
/* Buffers owned by g: device (poisoned), host (zeroed; a test cannot go on without
 * them, so a failed host allocation aborts). */
void *dev_bytes(struct gpu *g, size_t bytes);
float *dev_f(struct gpu *g, size_t n);
void *host_bytes(struct gpu *g, size_t bytes);
float *host_f(struct gpu *g, size_t n);
float *host_rand(struct gpu *g, size_t n, double scale, double shift);
void put(struct gpu *g, void *d, const void *h, size_t bytes);
void get(struct gpu *g, void *h, const void *d, size_t bytes);
/* Device to device, ordered with the context's stream. */
void dev_copy(struct gpu *g, void *dst, const void *src, size_t bytes);
float *dev_from(struct gpu *g, const float *h, size_t n);
float *down(struct gpu *g, const float *d, size_t n);
float *copy_f(struct gpu *g, const float *src, size_t n);
double max_abs_diff(const float *a, const float *b, size_t n);
/* 16-bit kernels' tolerance (relative error of the norm): bf16 1e-2, fp16 2e-3. */
double tol_for(enum gp_dtype ht);
uint32_t f_bits(float f);
float bits_f(uint32_t u);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t h_bits(enum gp_dtype ht, float f);
float h_val(enum gp_dtype ht, uint16_t b);
float h_round(enum gp_dtype ht, float f);
float *host_rand_h(struct gpu *g, enum gp_dtype ht, size_t n, double scale, double shift);
void put_h(struct gpu *g, enum gp_dtype ht, void *d, const float *h, size_t n);
float *down_h(struct gpu *g, enum gp_dtype ht, const void *d, size_t n);
/* N,C,HW <-> N,HW,C on the host, for elements of elem bytes: a copy owned by g. */
void *host_to_nhwc(struct gpu *g, const void *src, size_t elem, int n, int c, int hw);
void *host_to_nchw(struct gpu *g, const void *src, size_t elem, int n, int c, int hw);

/* A depthwise convolution (groups = channels, square k x k window) and its output size. */
struct conv2d_args dw_args(int n, int c, int h, int w, int k, int stride, int pad, int bias);

#define GPU_OPEN(g, seed)                                                                  \
	do {                                                                               \
		int open_rc_ = gpu_open(g, seed, GPU_RNG_STREAM);                          \
		if (open_rc_ > 0)                                                          \
			SKIP((g)->why);                                                    \
		if (open_rc_ < 0) {                                                        \
			test_fail(__FILE__, __LINE__, "cuda_ctx_create: %s", gp_errmsg()); \
			return;                                                            \
		}                                                                          \
	} while (0)

#define CHECK_OK(expr)                                                                    \
	do {                                                                              \
		int ok_rc_ = (expr);                                                      \
		CHECK_MSG(ok_rc_ == 0, "%s = %d: %s", #expr, ok_rc_, gp_errmsg());        \
	} while (0)

#endif
