/* NCCL over a process group of one rank (the GPU machine has one GPU): the
 * communicator opens, sums and means of f32 and bf16 values come back as they were
 * (a world of one), and the self-test dist-check runs passes. */
#include <string.h>

#include "dist/cuda/nccl.h"
#include "dist/dist.h"
#include "harness.h"

TEST(nccl_world_of_one_allreduce_f32_bf16_avg)
{
	struct gpu g;
	GPU_OPEN(&g, 5);
	struct dist_env env = { .launcher = DIST_LAUNCH_NONE, .world = 1, .local_world = 1 };
	struct dist_opts o = dist_opts_default();
	o.timeout_s = 60;
	struct dist *d = NULL;
	struct dist_nccl *c = NULL;
	CHECK_OK(dist_open(&env, &o, &d));
	if (!d)
		goto out;
	CHECK_OK(dist_nccl_open(d, 0, &c));
	if (!c)
		goto out;
	enum { N = 1000 };
	cudaStream_t s;
	CHECK(cudaStreamCreate(&s) == cudaSuccess);
	/* f32: a mean over one rank is the value itself */
	float *h = host_f(&g, N);
	for (int i = 0; i < N; i++)
		h[i] = 0.25f * (float)(i % 37) - 3.0f;
	float *dv = dev_from(&g, h, N);
	CHECK_OK(dist_nccl_allreduce(c, dv, N, GP_F32, 1, s));
	CHECK_OK(dist_nccl_allreduce(c, dv, N, GP_F32, 0, s));
	CHECK(cudaStreamSynchronize(s) == cudaSuccess);
	float *back = down(&g, dv, N);
	CHECK_EQ_INT(max_abs_diff(back, h, N) == 0, 1);
	/* bf16 */
	uint16_t *hb = host_bytes(&g, N * 2);
	for (int i = 0; i < N; i++)
		hb[i] = f32_to_bf16(h[i]);
	void *db = dev_bytes(&g, N * 2);
	put(&g, db, hb, N * 2);
	CHECK_OK(dist_nccl_allreduce(c, db, N, GP_BF16, 1, s));
	CHECK(cudaStreamSynchronize(s) == cudaSuccess);
	uint16_t *hb2 = host_bytes(&g, N * 2);
	get(&g, hb2, db, N * 2);
	for (int i = 0; i < N; i++)
		CHECK_MSG(bf16_to_f32(hb2[i]) == h[i], "bf16 element %d: %g, expected %g", i,
			  bf16_to_f32(hb2[i]), h[i]);
	CHECK_OK(dist_nccl_bcast(c, dv, N, GP_F32, 0, s));
	CHECK_OK(dist_nccl_check(c));
	CHECK_EQ_INT(dist_nccl_allreduce(c, dv, N, GP_I32, 0, s), GP_EINVAL);
	struct dist_nccl_bench b = { 0, 0 };
	CHECK_OK(dist_nccl_selftest(c, 1 << 20, 3, &b));
	CHECK(b.ms_mean > 0 && b.ms_min > 0 && b.ms_min <= b.ms_mean);
	cudaStreamDestroy(s);
out:
	dist_nccl_close(c);
	dist_close(d);
	gpu_close(&g);
}
