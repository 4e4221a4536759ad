/* Every CUDA op against its CPU f32 reference on fresh random inputs. Outputs are
 * poisoned with NaN before each run so unwritten elements fail the comparison.
 * Tolerances (relative error of the norm): elementwise ops exact or 1e-6, strict FP32
 * conv/linear/batch norm 1e-5, TF32 conv/linear 5e-3. Without a device every test
 * skips with the reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/rng.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"
#include "nn/models.h"

#define MIB ((size_t)1 << 20)

/* --- device, memory ------------------------------------------------------------------ */

TEST(cuda_device_info)
{
	struct gpu g;
	struct cuda_versions v;
	char name[256] = "";
	int sm = 0;
	size_t total = 0;

	GPU_OPEN(&g, 1);
	CHECK_OK(cuda_device_describe(0, name, sizeof(name), &sm, &total));
	CHECK(name[0] != 0);
	CHECK(sm > 0);
	CHECK(total > 1024 * MIB);
	CHECK_OK(cuda_versions_get(&v));
	CHECK(v.runtime >= 12000);
	CHECK(v.driver >= v.runtime / 1000 * 1000);
	CHECK(v.cudnn >= 90000);
	CHECK(v.cublas >= 120000);
	gpu_close(&g);
}

TEST(cuda_alloc_counts_and_recovers_from_oom)
{
	struct gpu g;
	size_t free0 = 0, free1 = 0, total = 0;
	void *p;

	GPU_OPEN(&g, 2);
	CHECK_EQ_INT(cudaDeviceSynchronize(), cudaSuccess);
	CHECK_OK(cuda_mem_info(&free0, &total));
	for (int i = 0; i < 10; i++) {
		p = (void *)&free0;
		int rc = cuda_alloc(g.ctx, &p, (size_t)1 << 50, MEM_ACTIV);
		CHECK_EQ_INT(rc, GP_EDEVOOM);
		CHECK(p == NULL);
		CHECK_MSG(strstr(gp_errmsg(), "MiB free of") && strstr(gp_errmsg(), "activations"),
			  "OOM message: %s", gp_errmsg());
	}
	CHECK_EQ_INT(cudaGetLastError(), cudaSuccess);
	CHECK_EQ_INT(g.mem.total_bytes, 0);
	CHECK_OK(cuda_mem_info(&free1, &total));
	/* nothing leaked; the driver may hand back one 2 MiB page it held for the context
	 * (seen once the context had a second stream and cuDNN handle: +2.0 MiB) */
	CHECK_MSG(free1 + MIB >= free0 && free1 <= free0 + 3 * MIB, "free %.1f MiB before 10 failed allocations, %.1f after",
		  free0 / (double)MIB, free1 / (double)MIB);

	/* The device still works: allocate, fill, read back, count, free. */
	CHECK_OK(cuda_alloc(g.ctx, &p, 64 * MIB, MEM_WEIGHTS));
	CHECK_EQ_INT(g.mem.cur_bytes[MEM_WEIGHTS], 64 * MIB);
	if (p) {
		float last = 0;
		CHECK_OK(fill_cuda(g.ctx->stream, p, 16 * MIB, 2.5f));
		CHECK_OK(cuda_copy_d2h(g.ctx, &last, (float *)p + 16 * MIB - 1, sizeof(last)));
		CHECK(last == 2.5f);
	}
	cuda_free(g.ctx, p, 64 * MIB, MEM_WEIGHTS);
	CHECK_EQ_INT(g.mem.cur_bytes[MEM_WEIGHTS], 0);
	CHECK_EQ_INT(g.mem.peak_bytes[MEM_WEIGHTS], 64 * MIB);
	gpu_close(&g);
}

/* --- elementwise ------------------------------------------------------------------------ */

typedef int (*act_fwd_cuda_fn)(cudaStream_t, enum gp_dtype, size_t, const void *, void *);
typedef int (*act_bwd_cuda_fn)(cudaStream_t, enum gp_dtype, size_t, const void *, const void *, void *, int);
typedef void (*act_fwd_cpu_fn)(size_t, const float *, float *);
typedef void (*act_bwd_cpu_fn)(size_t, const float *, const float *, float *, int);

/* n divisible by 4 takes the float4 kernels, otherwise the scalar ones */
static void check_activation(struct gpu *g, act_fwd_cuda_fn fwd, act_bwd_cuda_fn bwd,
			     act_fwd_cpu_fn fwd_cpu, act_bwd_cpu_fn bwd_cpu, size_t n)
{
	float *x = host_rand(g, n, 4.0, 1.0), *y = host_f(g, n);
	float *dy = host_rand(g, n, 1.0, 0.0), *dx0 = host_rand(g, n, 1.0, 0.0);
	float *d_x = dev_from(g, x, n), *d_y = dev_f(g, n), *d_dy = dev_from(g, dy, n);
	float *d_dx = dev_f(g, n);

	fwd_cpu(n, x, y);
	CHECK_OK(fwd(g->ctx->stream, GP_F32, n, d_x, d_y));
	CHECK_LE(max_abs_diff(down(g, d_y, n), y, n), 0);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, n);
		if (acc)
			put(g, d_dx, dx0, n * sizeof(float));
		else
			poison(g, d_dx, n * sizeof(float));
		bwd_cpu(n, y, dy, dx, acc);
		CHECK_OK(bwd(g->ctx->stream, GP_F32, n, d_y, d_dy, d_dx, acc));
		CHECK_LE(max_abs_diff(down(g, d_dx, n), dx, n), 0);
	}
}

TEST(cuda_relu_relu6_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 3);
	for (size_t n = 10007; n <= 10008; n++) {
		check_activation(&g, relu_fwd_cuda, relu_bwd_cuda, relu_fwd_cpu_f32, relu_bwd_cpu_f32, n);
		check_activation(&g, relu6_fwd_cuda, relu6_bwd_cuda, relu6_fwd_cpu_f32, relu6_bwd_cpu_f32, n);
	}
	gpu_close(&g);
}

TEST(cuda_add_grad_pass_fill_copy)
{
	struct gpu g;
	GPU_OPEN(&g, 4);
	for (size_t n = 4099; n <= 4100; n++) { /* scalar, then float4 kernels */
		float *a = host_rand(&g, n, 1, 0), *b = host_rand(&g, n, 1, 0), *y = host_f(&g, n);
		float *d_a = dev_from(&g, a, n), *d_b = dev_from(&g, b, n), *d_y = dev_f(&g, n);

		add_fwd_cpu_f32(n, a, b, y);
		CHECK_OK(add_fwd_cuda(g.ctx->stream, GP_F32, n, d_a, d_b, d_y));
		CHECK_LE(max_abs_diff(down(&g, d_y, n), y, n), 0);
		for (int acc = 0; acc <= 1; acc++) {
			float *dx = copy_f(&g, b, n);
			put(&g, d_y, b, n * sizeof(float));
			if (!acc)
				poison(&g, d_y, n * sizeof(float));
			grad_pass_cpu_f32(n, a, dx, acc);
			CHECK_OK(grad_pass_cuda(g.ctx->stream, GP_F32, n, d_a, d_y, acc));
			CHECK_LE(max_abs_diff(down(&g, d_y, n), dx, n), 0);
	}
	float *h = host_f(&g, n);
	CHECK_OK(fill_cuda(g.ctx->stream, d_y, n, -3.25f));
	get(&g, h, d_y, n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		CHECK_MSG(h[i] == -3.25f, "fill: h[%zu] = %g", i, h[i]);
	CHECK_OK(copy_cuda(g.ctx->stream, d_y, d_a, n));
	CHECK_LE(max_abs_diff(down(&g, d_y, n), a, n), 0);
	}
	gpu_close(&g);
}

/* The one-pass recompute kernel against the separate batch norm, add and activation
 * kernels it replaces: the same float operations in the same order, so equal bit for bit. */
TEST(cuda_bn_apply_fused_equals_separate_kernels)
{
	struct gpu g;
	GPU_OPEN(&g, 41);
	int n = 3, c = 7, hw = 29;
	size_t nx = (size_t)n * c * hw;
	float *x = host_rand(&g, nx, 4, 0), *id = host_rand(&g, nx, 4, 0);
	float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 2, 0);
	float *mean = host_rand(&g, c, 1, 0), *invstd = host_rand(&g, c, 0.1, 0.7);
	float *d_x = dev_from(&g, x, nx), *d_id = dev_from(&g, id, nx), *d_gamma = dev_from(&g, gamma, c);
	float *d_beta = dev_from(&g, beta, c), *d_mean = dev_from(&g, mean, c);
	float *d_invstd = dev_from(&g, invstd, c), *d_ref = dev_f(&g, nx), *d_y = dev_f(&g, nx);
	cudaStream_t s = g.ctx->stream;
	for (int act = BN_APPLY_LINEAR; act <= BN_APPLY_RELU6; act++)
		for (int with_id = 0; with_id <= 1; with_id++) {
			CHECK_OK(bn_apply_cuda(s, GP_F32, 0, n, c, hw, d_x, NULL, d_gamma, d_beta, d_mean, d_invstd,
					       BN_APPLY_LINEAR, d_ref));
			if (with_id)
				CHECK_OK(add_fwd_cuda(s, GP_F32, nx, d_ref, d_id, d_ref));
			if (act == BN_APPLY_RELU)
				CHECK_OK(relu_fwd_cuda(s, GP_F32, nx, d_ref, d_ref));
			if (act == BN_APPLY_RELU6)
				CHECK_OK(relu6_fwd_cuda(s, GP_F32, nx, d_ref, d_ref));
			CHECK_OK(bn_apply_cuda(s, GP_F32, 0, n, c, hw, d_x, with_id ? d_id : NULL, d_gamma, d_beta, d_mean,
					       d_invstd, (enum bn_apply_act)act, d_y));
			float *ref = down(&g, d_ref, nx), *y = down(&g, d_y, nx);
			size_t differ = 0, clipped = 0;
			for (size_t i = 0; i < nx; i++) {
				differ += f_bits(ref[i]) != f_bits(y[i]);
				clipped += y[i] == 0.0f || y[i] == 6.0f;
			}
			CHECK_MSG(differ == 0, "act %d identity %d: %zu of %zu differ", act, with_id, differ, nx);
			if (act != BN_APPLY_LINEAR) /* the inputs reach both clamps */
				CHECK_MSG(clipped > nx / 10, "act %d: only %zu of %zu clamped", act, clipped, nx);
		}
	gpu_close(&g);
}

TEST(cuda_bias_add_channel_sum)
{
	struct gpu g;
	const int n = 3, c = 5, hw = 37;
	const size_t count = (size_t)n * c * hw;
	GPU_OPEN(&g, 5);
	float *y = host_rand(&g, count, 1, 0), *b = host_rand(&g, c, 1, 0);
	float *d_y = dev_from(&g, y, count), *d_b = dev_from(&g, b, c), *d_db = dev_f(&g, c);
	float *want = host_f(&g, count), *want_db = host_f(&g, c);

	for (size_t i = 0; i < count; i++)
		want[i] = y[i] + b[i / hw % c];
	for (int ch = 0; ch < c; ch++) {
		double s = 0;
		for (int ni = 0; ni < n; ni++)
			for (int j = 0; j < hw; j++)
				s += y[((size_t)ni * c + ch) * hw + j];
		want_db[ch] = (float)s;
	}
	CHECK_OK(channel_sum_cuda(g.ctx->stream, GP_F32, 0, n, c, hw, d_y, d_db));
	CHECK_LE(rel_err_norm_f32(down(&g, d_db, c), want_db, c), 1e-6);
	CHECK_OK(bias_add_cuda(g.ctx->stream, GP_F32, 0, n, c, hw, d_b, d_y));
	CHECK_LE(max_abs_diff(down(&g, d_y, count), want, count), 0);
	gpu_close(&g);
}

/* --- pooling ----------------------------------------------------------------------------- */

TEST(cuda_maxpool_matches_cpu)
{
	static const int cfg[][6] = {
		/* n, c, h, k, stride, pad */
		{ 2, 3, 11, 3, 2, 1 }, /* ResNet stem pool */
		{ 2, 4, 8, 2, 2, 0 },
		{ 1, 2, 7, 3, 1, 1 },  /* overlapping windows: one input feeds several */
	};
	struct gpu g;
	GPU_OPEN(&g, 6);
	for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
		struct pool_args a = { .n = cfg[t][0], .c = cfg[t][1], .h_in = cfg[t][2],
				       .w_in = cfg[t][2] + 1, .k = cfg[t][3], .stride = cfg[t][4],
				       .pad = cfg[t][5] };
		a.h_out = conv_out_size(a.h_in, a.k, a.stride, a.pad);
		a.w_out = conv_out_size(a.w_in, a.k, a.stride, a.pad);
		size_t nx = (size_t)a.n * a.c * a.h_in * a.w_in, ny = (size_t)a.n * a.c * a.h_out * a.w_out;
		float *x = host_rand(&g, nx, 1, 0), *y = host_f(&g, ny), *dy = host_rand(&g, ny, 1, 0);
		float *dx0 = host_rand(&g, nx, 1, 0);
		int32_t *am = host_bytes(&g, ny * 4), *am_gpu = host_bytes(&g, ny * 4);
		float *d_x = dev_from(&g, x, nx), *d_y = dev_f(&g, ny), *d_dy = dev_from(&g, dy, ny);
		float *d_dx = dev_f(&g, nx);
		int32_t *d_am = dev_bytes(&g, ny * 4);

		maxpool_fwd_cpu_f32(&a, x, y, am);
		CHECK_OK(maxpool_fwd_cuda(g.ctx->stream, GP_F32, 0, &a, d_x, d_y, d_am));
		CHECK_LE(max_abs_diff(down(&g, d_y, ny), y, ny), 0);
		get(&g, am_gpu, d_am, ny * 4);
		CHECK(memcmp(am_gpu, am, ny * 4) == 0);
		for (int acc = 0; acc <= 1; acc++) {
			float *dx = copy_f(&g, dx0, nx);
			put(&g, d_dx, dx0, nx * sizeof(float));
			if (!acc)
				poison(&g, d_dx, nx * sizeof(float));
			maxpool_bwd_cpu_f32(&a, dy, am, dx, acc);
			CHECK_OK(maxpool_bwd_cuda(g.ctx->stream, GP_F32, 0, &a, d_dy, d_am, d_dx, acc));
			CHECK_LE(rel_err_norm_f32(down(&g, d_dx, nx), dx, nx), 1e-6);
		}
	}
	gpu_close(&g);
}

TEST(cuda_avgpool_global_matches_cpu)
{
	static const int cfg[][3] = { { 3, 5, 49 }, { 2, 7, 1 }, { 2, 3, 100 } };
	struct gpu g;
	GPU_OPEN(&g, 7);
	for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
		int n = cfg[t][0], c = cfg[t][1], hw = cfg[t][2];
		size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
		float *x = host_rand(&g, nx, 1, 0.5), *y = host_f(&g, ny), *dy = host_rand(&g, ny, 1, 0);
		float *dx0 = host_rand(&g, nx, 1, 0);
		float *d_x = dev_from(&g, x, nx), *d_y = dev_f(&g, ny), *d_dy = dev_from(&g, dy, ny);
		float *d_dx = dev_f(&g, nx);

		avgpool_global_fwd_cpu_f32(n, c, hw, x, y);
		CHECK_OK(avgpool_global_fwd_cuda(g.ctx->stream, GP_F32, 0, n, c, hw, d_x, d_y));
		CHECK_LE(rel_err_norm_f32(down(&g, d_y, ny), y, ny), 1e-6);
		for (int acc = 0; acc <= 1; acc++) {
			float *dx = copy_f(&g, dx0, nx);
			put(&g, d_dx, dx0, nx * sizeof(float));
			if (!acc)
				poison(&g, d_dx, nx * sizeof(float));
			avgpool_global_bwd_cpu_f32(n, c, hw, dy, dx, acc);
			CHECK_OK(avgpool_global_bwd_cuda(g.ctx->stream, GP_F32, 0, n, c, hw, d_dy, d_dx, acc));
			CHECK_LE(rel_err_norm_f32(down(&g, d_dx, nx), dx, nx), 1e-6);
		}
	}
	gpu_close(&g);
}

/* --- dropout ----------------------------------------------------------------------------- */

TEST(cuda_dropout_matches_cpu)
{
	struct gpu g;
	struct dropout_args a = { .count = 10001, .p = 0.3 };
	GPU_OPEN(&g, 8);
	size_t n = a.count;
	uint8_t *mask = host_bytes(&g, n);
	float *x = host_rand(&g, n, 1, 0), *y = host_f(&g, n), *dx0 = host_rand(&g, n, 1, 0);
	float *d_x = dev_from(&g, x, n), *d_y = dev_f(&g, n), *d_dx = dev_f(&g, n);
	uint8_t *d_mask = dev_bytes(&g, n);

	dropout_mask_cpu(n, a.p, 1234, mask);
	put(&g, d_mask, mask, n);
	dropout_fwd_cpu_f32(&a, mask, x, y);
	CHECK_OK(dropout_fwd_cuda(g.ctx->stream, GP_F32, &a, d_mask, d_x, d_y));
	CHECK_LE(rel_err_norm_f32(down(&g, d_y, n), y, n), 1e-6);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(&g, dx0, n);
		put(&g, d_dx, dx0, n * sizeof(float));
		if (!acc)
			poison(&g, d_dx, n * sizeof(float));
		dropout_bwd_cpu_f32(&a, mask, x, dx, acc);
		CHECK_OK(dropout_bwd_cuda(g.ctx->stream, GP_F32, &a, d_mask, d_x, d_dx, acc));
		CHECK_LE(rel_err_norm_f32(down(&g, d_dx, n), dx, n), 1e-6);
	}
	gpu_close(&g);
}

TEST(cuda_dropout_mask_is_counter_based)
{
	struct gpu g;
	const size_t n = (size_t)1 << 20, shift = 1000;
	GPU_OPEN(&g, 9);
	uint8_t *m1 = host_bytes(&g, n), *m2 = host_bytes(&g, n);
	uint8_t *d_m = dev_bytes(&g, n);
	size_t kept = 0, same = 0;

	CHECK_OK(dropout_mask_cuda(g.ctx->stream, n, 0.3, 42, 0, d_m));
	get(&g, m1, d_m, n);
	for (size_t i = 0; i < n; i++) {
		CHECK_MSG(m1[i] <= 1, "mask[%zu] = %d", i, m1[i]);
		kept += m1[i];
	}
	CHECK_NEAR((double)kept / n, 0.7, 0.003); /* 6 standard deviations */

	/* Element i of offset `shift` is element i + shift of offset 0. */
	CHECK_OK(dropout_mask_cuda(g.ctx->stream, n, 0.3, 42, shift, d_m));
	get(&g, m2, d_m, n);
	CHECK(memcmp(m2, m1 + shift, n - shift) == 0);

	/* Another seed gives another mask: about 2 p (1 - p) = 42% of places differ. */
	CHECK_OK(dropout_mask_cuda(g.ctx->stream, n, 0.3, 43, 0, d_m));
	get(&g, m2, d_m, n);
	for (size_t i = 0; i < n; i++)
		same += m1[i] == m2[i];
	CHECK_NEAR((double)same / n, 0.58, 0.01);

	CHECK_OK(dropout_mask_cuda(g.ctx->stream, n, 0.0, 42, 0, d_m));
	get(&g, m2, d_m, n);
	kept = 0;
	for (size_t i = 0; i < n; i++)
		kept += m2[i];
	CHECK_EQ_INT(kept, n);
	CHECK_OK(dropout_mask_cuda(g.ctx->stream, n, 1.0, 42, 0, d_m));
	get(&g, m2, d_m, n);
	kept = 0;
	for (size_t i = 0; i < n; i++)
		kept += m2[i];
	CHECK_EQ_INT(kept, 0);
	CHECK_EQ_INT(dropout_mask_cuda(g.ctx->stream, n, 1.5, 42, 0, d_m), GP_EINVAL);
	gpu_close(&g);
}

/* --- loss, optimizer ------------------------------------------------------------------------ */

TEST(cuda_softmax_xent_matches_cpu)
{
	static const int cfg[][2] = { { 37, 1000 }, { 64, 10 }, { 1, 3 } };
	struct gpu g;
	GPU_OPEN(&g, 10);
	for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
		int n = cfg[t][0], k = cfg[t][1], correct = -1, correct_gpu = -1;
		size_t nl = (size_t)n * k;
		float *logits = host_rand(&g, nl, 3, 0), *dl = host_f(&g, nl);
		int32_t *labels = host_bytes(&g, n * sizeof(int32_t));
		double loss_gpu = NAN;
		for (int i = 0; i < n; i++) {
			labels[i] = (int32_t)rng_below(&g.rng, k);
			if (i % 2) /* make about half of the predictions right */
				logits[(size_t)i * k + labels[i]] += 30.0f;
		}
		float *d_logits = dev_from(&g, logits, nl), *d_dl = dev_f(&g, nl);
		float *d_scratch = dev_f(&g, 2 * (size_t)n);
		int32_t *d_labels = dev_bytes(&g, n * sizeof(int32_t));
		double *d_loss = dev_bytes(&g, sizeof(double));
		int *d_correct = dev_bytes(&g, sizeof(int));
		put(&g, d_labels, labels, n * sizeof(int32_t));

		double loss = softmax_xent_cpu_f32(n, k, logits, labels, dl, &correct);
		CHECK_OK(softmax_xent_cuda(g.ctx->stream, GP_F32, n, k, d_logits, d_labels, d_dl, d_scratch,
					   d_loss, d_correct));
		get(&g, &loss_gpu, d_loss, sizeof(double));
		get(&g, &correct_gpu, d_correct, sizeof(int));
		CHECK_NEAR(loss_gpu, loss, 1e-6 * fabs(loss));
		CHECK_EQ_INT(correct_gpu, correct);
		CHECK(correct >= n / 2);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dl, nl), dl, nl), 1e-6);
	}
	gpu_close(&g);
}

TEST(cuda_sgd_matches_cpu)
{
	static const struct sgd_args cfg[] = {
		{ .lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4 },
		{ .lr = 0.05, .momentum = 0.9, .nesterov = 1 },
		{ .lr = 0.1, .momentum = 0.8, .dampening = 0.1, .weight_decay = 5e-4 },
		{ .lr = 0.2, .weight_decay = 1e-4 }, /* no momentum: no buffer */
	};
	const size_t n = 1003;
	struct gpu g;
	GPU_OPEN(&g, 11);
	for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
		/* Offset 0 takes the float4 path, offset 1 the unaligned scalar one. */
		for (int off = 0; off <= 1; off++) {
			float *p = host_rand(&g, n, 1, 0), *buf = host_f(&g, n);
			float *d_p = dev_f(&g, n + 1), *d_g = dev_f(&g, n + 1), *d_buf = dev_f(&g, n + 1);
			float *mbuf = cfg[t].momentum != 0 ? d_buf + off : NULL;
			put(&g, d_p + off, p, n * sizeof(float));
			for (int step = 0; step < 3; step++) {
				struct sgd_args a = cfg[t];
				float *grad = host_rand(&g, n, 1, 0);
				a.first_step = step == 0;
				put(&g, d_g + off, grad, n * sizeof(float));
				sgd_step_cpu_f32(&a, n, p, grad, buf);
				CHECK_OK(sgd_step_cuda(g.ctx->stream, &a, n, d_p + off, d_g + off, mbuf));
			}
			CHECK_LE(rel_err_norm_f32(down(&g, d_p + off, n), p, n), 1e-6);
			if (mbuf)
				CHECK_LE(rel_err_norm_f32(down(&g, mbuf, n), buf, n), 1e-6);
		}
	}
	gpu_close(&g);
}

/* --- convolution ------------------------------------------------------------------------ */

static struct conv2d_args conv_args(int n, int c_in, int h, int c_out, int k, int stride, int pad,
				    int groups, int bias)
{
	struct conv2d_args a = { .n = n, .c_in = c_in, .h_in = h, .w_in = h + 2, .c_out = c_out,
				 .kh = k, .kw = k, .stride = stride, .pad = pad, .groups = groups,
				 .has_bias = bias };
	a.h_out = conv_out_size(a.h_in, k, stride, pad);
	a.w_out = conv_out_size(a.w_in, k, stride, pad);
	return a;
}

static const struct conv2d_args *conv_cases(size_t *count)
{
	static struct conv2d_args cases[9];
	cases[0] = conv_args(2, 3, 17, 8, 7, 2, 3, 1, 0);    /* stem 7x7 s2 p3 */
	cases[1] = conv_args(2, 16, 9, 16, 3, 1, 1, 1, 0);   /* 3x3 s1 */
	cases[2] = conv_args(2, 16, 9, 32, 3, 2, 1, 1, 0);   /* 3x3 s2 */
	cases[3] = conv_args(2, 32, 8, 16, 1, 1, 0, 1, 0);   /* 1x1 */
	cases[4] = conv_args(2, 16, 8, 32, 1, 2, 0, 1, 0);   /* 1x1 s2 downsample */
	cases[5] = conv_args(2, 24, 10, 24, 3, 1, 1, 24, 0); /* depthwise 3x3 */
	cases[6] = conv_args(2, 24, 10, 24, 3, 2, 1, 24, 0); /* depthwise 3x3 s2 */
	cases[7] = conv_args(2, 8, 7, 12, 3, 1, 1, 2, 1);    /* groups 2, bias */
	cases[8] = conv_args(3, 5, 6, 7, 3, 1, 0, 1, 1);     /* bias, no padding */
	*count = sizeof(cases) / sizeof(cases[0]);
	return cases;
}

static void check_conv(struct gpu *g, const struct conv2d_args *a, double tol)
{
	size_t nx = (size_t)a->n * a->c_in * a->h_in * a->w_in;
	size_t ny = (size_t)a->n * a->c_out * a->h_out * a->w_out;
	size_t nw = (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw;
	size_t nb = a->has_bias ? a->c_out : 0;
	float *x = host_rand(g, nx, 1, 0), *w = host_rand(g, nw, 0.3, 0), *y = host_f(g, ny);
	float *b = nb ? host_rand(g, nb, 1, 0) : NULL, *db = nb ? host_f(g, nb) : NULL;
	float *dy = host_rand(g, ny, 1, 0), *dx0 = host_rand(g, nx, 1, 0), *dw = host_f(g, nw);
	float *d_x = dev_from(g, x, nx), *d_w = dev_from(g, w, nw), *d_y = dev_f(g, ny);
	float *d_b = nb ? dev_from(g, b, nb) : NULL, *d_db = nb ? dev_f(g, nb) : NULL;
	float *d_dy = dev_from(g, dy, ny), *d_dx = dev_f(g, nx), *d_dw = dev_f(g, nw);
	char what[160];

	snprintf(what, sizeof(what), "conv n%d %d->%d %dx%d k%d s%d p%d g%d bias%d", a->n,
		 a->c_in, a->c_out, a->h_in, a->w_in, a->kh, a->stride, a->pad, a->groups,
		 a->has_bias);
	conv2d_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(conv2d_fwd_cuda(g->ctx, a, NULL, d_x, d_w, d_b, d_y));
	double e = rel_err_norm_f32(down(g, d_y, ny), y, ny);
	CHECK_MSG(e <= tol, "%s: forward error %.3g > %.3g", what, e, tol);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put(g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(g, d_dx, nx * sizeof(float));
		conv2d_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(conv2d_bwd_data_cuda(g->ctx, a, NULL, d_dy, d_w, d_dx, acc));
		e = rel_err_norm_f32(down(g, d_dx, nx), dx, nx);
		CHECK_MSG(e <= tol, "%s: backward data (accumulate %d) error %.3g > %.3g", what, acc,
			  e, tol);
	}
	conv2d_bwd_filter_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(conv2d_bwd_filter_cuda(g->ctx, a, NULL, d_x, d_dy, d_dw, d_db));
	e = rel_err_norm_f32(down(g, d_dw, nw), dw, nw);
	CHECK_MSG(e <= tol, "%s: backward filter error %.3g > %.3g", what, e, tol);
	if (nb) {
		e = rel_err_norm_f32(down(g, d_db, nb), db, nb);
		CHECK_MSG(e <= 1e-5, "%s: bias gradient error %.3g", what, e);
	}
}

TEST(cuda_conv_fp32_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 12);
	const struct conv2d_args *cases = conv_cases(&n);
	for (size_t i = 0; i < n; i++)
		check_conv(&g, &cases[i], 1e-5);
	gpu_close(&g);
}

TEST(cuda_conv_tf32_matches_cpu)
{
	struct gpu g;
	size_t n;
	GPU_OPEN(&g, 13);
	CHECK_OK(cuda_ctx_set_math(g.ctx, CUDA_MATH_TF32));
	const struct conv2d_args *cases = conv_cases(&n);
	for (size_t i = 0; i < n; i++)
		check_conv(&g, &cases[i], 5e-3);
	gpu_close(&g);
}

/* Batches beyond cuDNN's int sizes run as slices: with the limit lowered to 3 images'
 * worth, 8 images run as 3 + 3 + 2, the weight gradient summed over the slices. */
TEST(cuda_conv_batch_slices_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 16);
	struct conv2d_args a = conv_args(8, 6, 10, 8, 3, 1, 1, 1, 1);
	conv_cuda_set_max_elems((size_t)3 * 8 * 10 * 12); /* the output: 8 x 10 x 12 per image */
	check_conv(&g, &a, 1e-5);
	struct conv2d_args dw = conv_args(7, 8, 9, 8, 3, 2, 1, 8, 0); /* depthwise, stride 2, 2+2+2+1 */
	conv_cuda_set_max_elems((size_t)2 * 8 * 9 * 11); /* the input: 8 x 9 x 11 per image */
	check_conv(&g, &dw, 1e-5);
	conv_cuda_set_max_elems(0);
	conv2d_plans_clear(g.ctx);
	gpu_close(&g);
}

TEST(cuda_conv_plan_cache)
{
	struct gpu g;
	GPU_OPEN(&g, 14);
	struct conv2d_args a = conv_args(4, 16, 14, 32, 3, 1, 1, 1, 0);
	conv2d_plans_clear(g.ctx); /* the cache is the device's, shared with earlier tests */
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 0);
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 1);
	a.has_bias = 1; /* the bias does not change the plan */
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 1);
	a.n = 8; /* another batch is another shape */
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 2);
	CHECK_OK(cuda_ctx_set_math(g.ctx, CUDA_MATH_TF32));
	CHECK_OK(conv2d_plan_cuda(g.ctx, &a));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 3);
	/* Measuring scratch is gone: the only workspace left is the shared one. */
	CHECK_EQ_INT(g.mem.cur_bytes[MEM_WORKSPACE], g.ctx->workspace_bytes);
	CHECK(g.ctx->workspace_bytes <= g.ctx->workspace_limit_bytes);
	CHECK(g.mem.peak_bytes[MEM_WORKSPACE] >= g.ctx->workspace_bytes);

	/* With no workspace allowed, a new shape still gets a plan and nothing grows. */
	size_t ws = g.ctx->workspace_bytes;
	g.ctx->workspace_limit_bytes = 0;
	struct conv2d_args b = conv_args(2, 32, 12, 64, 3, 2, 1, 1, 0);
	CHECK_OK(conv2d_plan_cuda(g.ctx, &b));
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 4);
	CHECK_EQ_INT(g.ctx->workspace_bytes, ws);
	check_conv(&g, &b, 5e-3);

	struct conv2d_args bad = conv_args(2, 6, 8, 8, 3, 1, 1, 4, 0); /* 6 % 4 != 0 */
	CHECK_EQ_INT(conv2d_plan_cuda(g.ctx, &bad), GP_EINVAL);
	conv2d_plans_clear(g.ctx);
	CHECK_EQ_INT(conv2d_plans_count(g.ctx), 0);
	gpu_close(&g);
}

/* --- batch norm --------------------------------------------------------------------------- */

/* own: through the own kernels (those of tensors beyond cuDNN's int sizes) */
static void check_batchnorm(const struct bn_args *args, int own)
{
	struct gpu g;
	struct bn_args a = *args;
	GPU_OPEN(&g, 15);
	bn_cuda_force_own(own);
	g.ctx->bn_cudnn = !own; /* FP32 NCHW takes the own kernels by default */
	CHECK_OK(bn_plan_cuda(g.ctx, &a));
	size_t nx = (size_t)a.n * a.c * a.h * a.w, c = a.c;
	float *x = host_rand(&g, nx, 2, 1), *y = host_f(&g, nx), *dy = host_rand(&g, nx, 1, 0);
	float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 1, 0);
	float *rm = host_rand(&g, c, 1, 0), *rv = host_rand(&g, c, 0.2, 1.5);
	float *mean = host_f(&g, c), *invstd = host_f(&g, c), *dx0 = host_rand(&g, nx, 1, 0);
	float *dgamma = host_f(&g, c), *dbeta = host_f(&g, c);
	float *d_x = dev_from(&g, x, nx), *d_y = dev_f(&g, nx), *d_dy = dev_from(&g, dy, nx);
	float *d_gamma = dev_from(&g, gamma, c), *d_beta = dev_from(&g, beta, c);
	float *d_rm = dev_from(&g, rm, c), *d_rv = dev_from(&g, rv, c);
	float *d_mean = dev_f(&g, c), *d_invstd = dev_f(&g, c), *d_dx = dev_f(&g, nx);
	float *d_dgamma = dev_f(&g, c), *d_dbeta = dev_f(&g, c);

	bn_fwd_train_cpu_f32(&a, x, gamma, beta, y, mean, invstd, rm, rv);
	CHECK_OK(bn_fwd_train_cuda(g.ctx, &a, d_x, d_gamma, d_beta, d_y, d_mean, d_invstd, d_rm,
				   d_rv));
	CHECK_LE(rel_err_norm_f32(down(&g, d_y, nx), y, nx), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_mean, c), mean, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_invstd, c), invstd, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_rm, c), rm, c), 1e-5);
	/* Unbiased running variance, as PyTorch: a biased one is off by m / (m - 1). */
	CHECK_LE(rel_err_norm_f32(down(&g, d_rv, c), rv, c), 1e-5);

	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(&g, dx0, nx);
		put(&g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(&g, d_dx, nx * sizeof(float));
		poison(&g, d_dgamma, c * sizeof(float));
		poison(&g, d_dbeta, c * sizeof(float));
		bn_bwd_cpu_f32(&a, x, dy, gamma, mean, invstd, dx, acc, dgamma, dbeta);
		CHECK_OK(bn_bwd_cuda(g.ctx, &a, d_x, d_dy, d_gamma, d_mean, d_invstd, d_dx, acc,
				     d_dgamma, d_dbeta));
		CHECK_LE(rel_err_norm_f32(down(&g, d_dx, nx), dx, nx), 1e-5);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dgamma, c), dgamma, c), 1e-5);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dbeta, c), dbeta, c), 1e-5);
	}

	/* Evaluation with the updated running statistics (same on both sides). */
	poison(&g, d_y, nx * sizeof(float));
	bn_fwd_eval_cpu_f32(&a, x, gamma, beta, rm, rv, y);
	put(&g, d_rm, rm, c * sizeof(float));
	put(&g, d_rv, rv, c * sizeof(float));
	CHECK_OK(bn_fwd_eval_cuda(g.ctx, &a, d_x, d_gamma, d_beta, d_rm, d_rv, d_y));
	CHECK_LE(rel_err_norm_f32(down(&g, d_y, nx), y, nx), 1e-5);
	bn_cuda_force_own(0);
	g.ctx->bn_cudnn = 0;
	gpu_close(&g);
}

TEST(cuda_batchnorm_matches_cpu)
{
	struct bn_args a = { .n = 8, .c = 16, .h = 12, .w = 11, .eps = 1e-5, .momentum = 0.1 };
	check_batchnorm(&a, 0);
}

/* More images than the own kernels' 64 slices, so that slices hold 2 images and the
 * last ones none. */
TEST(cuda_batchnorm_own_kernels_match_cpu)
{
	struct bn_args a = { .n = 70, .c = 24, .h = 7, .w = 9, .eps = 1e-5, .momentum = 0.1 };
	check_batchnorm(&a, 1);
	struct bn_args b = { .n = 3, .c = 5, .h = 12, .w = 11, .eps = 1e-5, .momentum = 0.1 };
	check_batchnorm(&b, 1);
}

/* FP32 NCHW batch norm fused with the activation after it (own kernels: cuDNN fuses only
 * 16-bit NHWC), against the CPU's batch norm, add and activation: forward y = act(bn(x)
 * (+ z)), backward from act's output gradient; and the recompute kernel reproduces the
 * forward's output bit for bit. */
static void check_bn_fused(const struct bn_args *args, enum bn_fuse op)
{
	struct gpu g;
	struct bn_args a = *args;
	GPU_OPEN(&g, 17);
	size_t nx = (size_t)a.n * a.c * a.h * a.w, c = a.c, reserve = 1;
	CHECK_EQ_INT(bn_fuse_plan_cuda(g.ctx, &a, op, &reserve), 1);
	CHECK_EQ_INT(reserve, 0);
	float *x = host_rand(&g, nx, 2, 0.5), *z = host_rand(&g, nx, 1, 0), *y = host_f(&g, nx);
	float *dy = host_rand(&g, nx, 1, 0), *t = host_f(&g, nx), *dx0 = host_rand(&g, nx, 1, 0);
	float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 1, 0);
	float *rm = host_rand(&g, c, 1, 0), *rv = host_rand(&g, c, 0.2, 1.5);
	float *mean = host_f(&g, c), *invstd = host_f(&g, c), *dgamma = host_f(&g, c), *dbeta = host_f(&g, c);
	float *d_x = dev_from(&g, x, nx), *d_z = dev_from(&g, z, nx), *d_y = dev_f(&g, nx);
	float *d_dy = dev_from(&g, dy, nx), *d_dx = dev_f(&g, nx), *d_r = dev_f(&g, nx);
	float *d_gamma = dev_from(&g, gamma, c), *d_beta = dev_from(&g, beta, c);
	float *d_rm = dev_from(&g, rm, c), *d_rv = dev_from(&g, rv, c);
	float *d_mean = dev_f(&g, c), *d_invstd = dev_f(&g, c), *d_dgamma = dev_f(&g, c), *d_dbeta = dev_f(&g, c);
	int six = op == BN_FUSE_RELU6, add = op == BN_FUSE_ADD_RELU;

	bn_fwd_train_cpu_f32(&a, x, gamma, beta, y, mean, invstd, rm, rv);
	if (add)
		add_fwd_cpu_f32(nx, y, z, y);
	if (six)
		relu6_fwd_cpu_f32(nx, y, y);
	else
		relu_fwd_cpu_f32(nx, y, y);
	CHECK_OK(bn_fwd_train_fused_cuda(g.ctx, &a, op, d_x, add ? d_z : NULL, d_gamma, d_beta, d_y, d_mean,
					 d_invstd, d_rm, d_rv, NULL, 0));
	float *gy = down(&g, d_y, nx);
	size_t zeros = 0;
	for (size_t i = 0; i < nx; i++)
		zeros += gy[i] == 0.0f;
	CHECK_MSG(zeros > nx / 10 && zeros < nx * 9 / 10, "op %d: %zu of %zu outputs are 0", op, zeros, nx);
	CHECK_LE(rel_err_norm_f32(gy, y, nx), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_mean, c), mean, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_invstd, c), invstd, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_rm, c), rm, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_rv, c), rv, c), 1e-5);

	CHECK_OK(bn_apply_cuda(g.ctx->stream, GP_F32, 0, a.n, a.c, a.h * a.w, d_x, add ? d_z : NULL, d_gamma, d_beta, d_mean,
			       d_invstd, six ? BN_APPLY_RELU6 : BN_APPLY_RELU, d_r));
	float *gr = down(&g, d_r, nx);
	size_t differ = 0;
	for (size_t i = 0; i < nx; i++)
		differ += f_bits(gr[i]) != f_bits(gy[i]);
	CHECK_MSG(differ == 0, "op %d: the recompute differs from the forward in %zu of %zu", op, differ, nx);

	if (add) /* its backward runs as the separate ops */
		goto out;
	float *gmean = down(&g, d_mean, c), *ginvstd = down(&g, d_invstd, c);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(&g, dx0, nx);
		put(&g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(&g, d_dx, nx * sizeof(float));
		poison(&g, d_dgamma, c * sizeof(float));
		poison(&g, d_dbeta, c * sizeof(float));
		/* the CPU's chain on the GPU's statistics and output, so that a mask differs
		 * only where the two round bn(x) across 0 (or 6) differently */
		if (six)
			relu6_bwd_cpu_f32(nx, gy, dy, t, 0);
		else
			relu_bwd_cpu_f32(nx, gy, dy, t, 0);
		bn_bwd_cpu_f32(&a, x, t, gamma, gmean, ginvstd, dx, acc, dgamma, dbeta);
		CHECK_OK(bn_bwd_relu_fused_cuda(g.ctx, &a, op, d_x, d_y, d_dy, d_gamma, d_beta, d_mean, d_invstd, d_dx,
						acc, d_dgamma, d_dbeta, NULL, 0));
		CHECK_LE(rel_err_norm_f32(down(&g, d_dx, nx), dx, nx), 1e-5);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dgamma, c), dgamma, c), 1e-5);
		CHECK_LE(rel_err_norm_f32(down(&g, d_dbeta, c), dbeta, c), 1e-5);
	}
out:
	gpu_close(&g);
}

/* Planes of whole float4s (8x8) and not (7x7); one image per slice (c = 24 gives 64
 * slices of 70 images: 2 per slice, the last ones empty) and a single slice (c = 2048). */
TEST(cuda_bn_fused_f32_matches_cpu)
{
	const struct bn_args shapes[] = {
		{ .n = 5, .c = 40, .h = 8, .w = 8, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 70, .c = 24, .h = 7, .w = 7, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 4, .c = 2048, .h = 3, .w = 4, .eps = 1e-5, .momentum = 0.1 },
	};
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		for (int op = BN_FUSE_RELU; op <= BN_FUSE_RELU6; op++)
			check_bn_fused(&shapes[k], (enum bn_fuse)op);
}

/* A channel whose values sit far from 0 (about 1000, spread about 1): each thread sums in
 * float about a shift inside the data, so the variance does not cancel (float sums of x
 * and x^2 would lose it entirely). y within 1e-3: one float ulp of the mean at 1000 is
 * already 1e-4 of the spread. */
TEST(cuda_bn_own_kernels_keep_variance_of_offset_data)
{
	struct gpu g;
	GPU_OPEN(&g, 19);
	struct bn_args a = { .n = 16, .c = 3, .h = 32, .w = 32, .eps = 1e-5, .momentum = 0.1 };
	bn_cuda_force_own(1);
	CHECK_OK(bn_plan_cuda(g.ctx, &a));
	size_t nx = (size_t)a.n * a.c * a.h * a.w, c = a.c;
	float *x = host_rand(&g, nx, 1, 1000), *y = host_f(&g, nx), *gamma = host_rand(&g, c, 0.5, 1);
	float *beta = host_rand(&g, c, 1, 0), *rm = host_f(&g, c), *rv = host_f(&g, c);
	float *mean = host_f(&g, c), *invstd = host_f(&g, c);
	float *d_x = dev_from(&g, x, nx), *d_y = dev_f(&g, nx), *d_gamma = dev_from(&g, gamma, c);
	float *d_beta = dev_from(&g, beta, c), *d_rm = dev_from(&g, rm, c), *d_rv = dev_from(&g, rv, c);
	float *d_mean = dev_f(&g, c), *d_invstd = dev_f(&g, c);
	bn_fwd_train_cpu_f32(&a, x, gamma, beta, y, mean, invstd, rm, rv);
	CHECK_OK(bn_fwd_train_cuda(g.ctx, &a, d_x, d_gamma, d_beta, d_y, d_mean, d_invstd, d_rm, d_rv));
	CHECK_LE(rel_err_norm_f32(down(&g, d_invstd, c), invstd, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(&g, d_mean, c), mean, c), 1e-6);
	CHECK_LE(rel_err_norm_f32(down(&g, d_y, nx), y, nx), 1e-3);
	bn_cuda_force_own(0);
	gpu_close(&g);
}

/* The own kernels are the FP32 default: they must be as accurate as cuDNN's batch norm,
 * both measured against the CPU in double (y, the saved statistics, dx, dgamma, dbeta),
 * on data off 0 (mean 1, spread 2), for ResNet-50's last stage at batch 4 (16 values per
 * channel) and a larger plane. Own within 2x cuDNN's error, or 2e-7 where both are
 * closer (a few float ulps). */
static double err_vs_f64(const float *got, const double *ref, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num += (got[i] - ref[i]) * (got[i] - ref[i]);
		den += ref[i] * ref[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double *to_f64(const float *x, size_t n)
{
	double *d = malloc(n * sizeof(double));
	for (size_t i = 0; d && i < n; i++)
		d[i] = x[i];
	return d;
}

TEST(cuda_bn_own_kernels_as_accurate_as_cudnn)
{
	const struct bn_args shapes[] = {
		{ .n = 4, .c = 512, .h = 2, .w = 2, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 16, .c = 64, .h = 28, .w = 28, .eps = 1e-5, .momentum = 0.1 },
	};
	const char *what[5] = { "y", "mean", "invstd", "dx", "dgamma" };
	for (size_t k = 0; k < 2; k++) {
		struct gpu g;
		struct bn_args a = shapes[k];
		GPU_OPEN(&g, 23 + k);
		size_t nx = (size_t)a.n * a.c * a.h * a.w, c = a.c;
		float *x = host_rand(&g, nx, 2, 1), *dy = host_rand(&g, nx, 1, 0);
		float *gamma = host_rand(&g, c, 0.5, 1), *beta = host_rand(&g, c, 1, 0);
		double *xd = to_f64(x, nx), *dyd = to_f64(dy, nx), *gd = to_f64(gamma, c), *bd = to_f64(beta, c);
		double *yd = calloc(nx, sizeof(double)), *dxd = calloc(nx, sizeof(double));
		double *md = calloc(c, sizeof(double)), *isd = calloc(c, sizeof(double));
		double *rmd = calloc(c, sizeof(double)), *rvd = calloc(c, sizeof(double));
		double *dgd = calloc(c, sizeof(double)), *dbd = calloc(c, sizeof(double));
		CHECK(xd && dyd && gd && bd && yd && dxd && md && isd && rmd && rvd && dgd && dbd);
		if (!(xd && dyd && gd && bd && yd && dxd && md && isd && rmd && rvd && dgd && dbd))
			goto next;
		bn_fwd_train_cpu_f64(&a, xd, gd, bd, yd, md, isd, rmd, rvd);
		bn_bwd_cpu_f64(&a, xd, dyd, gd, md, isd, dxd, 0, dgd, dbd);
		double e[2][5];
		for (int own = 0; own <= 1; own++) {
			g.ctx->bn_cudnn = !own;
			CHECK_OK(bn_plan_cuda(g.ctx, &a));
			float *d_x = dev_from(&g, x, nx), *d_dy = dev_from(&g, dy, nx), *d_y = dev_f(&g, nx);
			float *d_g = dev_from(&g, gamma, c), *d_b = dev_from(&g, beta, c), *d_dx = dev_f(&g, nx);
			float *d_m = dev_f(&g, c), *d_is = dev_f(&g, c), *d_rm = dev_f(&g, c), *d_rv = dev_f(&g, c);
			float *d_dg = dev_f(&g, c), *d_db = dev_f(&g, c);
			put(&g, d_rm, host_f(&g, c), c * sizeof(float));
			put(&g, d_rv, host_f(&g, c), c * sizeof(float));
			CHECK_OK(bn_fwd_train_cuda(g.ctx, &a, d_x, d_g, d_b, d_y, d_m, d_is, d_rm, d_rv));
			CHECK_OK(bn_bwd_cuda(g.ctx, &a, d_x, d_dy, d_g, d_m, d_is, d_dx, 0, d_dg, d_db));
			e[own][0] = err_vs_f64(down(&g, d_y, nx), yd, nx);
			e[own][1] = err_vs_f64(down(&g, d_m, c), md, c);
			e[own][2] = err_vs_f64(down(&g, d_is, c), isd, c);
			e[own][3] = err_vs_f64(down(&g, d_dx, nx), dxd, nx);
			e[own][4] = err_vs_f64(down(&g, d_dg, c), dgd, c);
		}
		g.ctx->bn_cudnn = 0;
		printf("      %dx%dx%dx%d against double, own / cuDNN:", a.n, a.c, a.h, a.w);
		for (int q = 0; q < 5; q++)
			printf(" %s %.1e / %.1e%s", what[q], e[1][q], e[0][q], q < 4 ? "," : "\n");
		for (int q = 0; q < 5; q++)
			CHECK_MSG(e[1][q] <= fmax(2e-7, 2 * e[0][q]), "%dx%dx%dx%d %s: own %.3g, cuDNN %.3g", a.n, a.c,
				  a.h, a.w, what[q], e[1][q], e[0][q]);
next:
		free(xd), free(dyd), free(gd), free(bd), free(yd), free(dxd);
		free(md), free(isd), free(rmd), free(rvd), free(dgd), free(dbd);
		gpu_close(&g);
	}
}

/* --- linear ----------------------------------------------------------------------------- */

static void check_linear(struct gpu *g, const struct linear_args *a, double tol)
{
	size_t nx = (size_t)a->n * a->in, ny = (size_t)a->n * a->out, nw = (size_t)a->out * a->in;
	size_t nb = a->has_bias ? a->out : 0;
	float *x = host_rand(g, nx, 1, 0), *w = host_rand(g, nw, 0.1, 0), *y = host_f(g, ny);
	float *b = nb ? host_rand(g, nb, 1, 0) : NULL, *db = nb ? host_f(g, nb) : NULL;
	float *dy = host_rand(g, ny, 1, 0), *dx0 = host_rand(g, nx, 1, 0), *dw = host_f(g, nw);
	float *d_x = dev_from(g, x, nx), *d_w = dev_from(g, w, nw), *d_y = dev_f(g, ny);
	float *d_b = nb ? dev_from(g, b, nb) : NULL, *d_db = nb ? dev_f(g, nb) : NULL;
	float *d_dy = dev_from(g, dy, ny), *d_dx = dev_f(g, nx), *d_dw = dev_f(g, nw);

	linear_fwd_cpu_f32(a, x, w, b, y);
	CHECK_OK(linear_fwd_cuda(g->ctx, a, d_x, d_w, d_b, d_y));
	CHECK_LE(rel_err_norm_f32(down(g, d_y, ny), y, ny), tol);
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put(g, d_dx, dx0, nx * sizeof(float));
		if (!acc)
			poison(g, d_dx, nx * sizeof(float));
		linear_bwd_data_cpu_f32(a, dy, w, dx, acc);
		CHECK_OK(linear_bwd_data_cuda(g->ctx, a, d_dy, d_w, d_dx, acc));
		CHECK_LE(rel_err_norm_f32(down(g, d_dx, nx), dx, nx), tol);
	}
	linear_bwd_weight_cpu_f32(a, x, dy, dw, db);
	CHECK_OK(linear_bwd_weight_cuda(g->ctx, a, d_x, d_dy, d_dw, d_db));
	CHECK_LE(rel_err_norm_f32(down(g, d_dw, nw), dw, nw), tol);
	if (nb)
		CHECK_LE(rel_err_norm_f32(down(g, d_db, nb), db, nb), 1e-5);
}

TEST(cuda_linear_matches_cpu)
{
	static const struct linear_args cfg[] = {
		{ .n = 33, .in = 517, .out = 129, .has_bias = 1 },
		{ .n = 8, .in = 64, .out = 10, .has_bias = 0 },
		{ .n = 64, .in = 2048, .out = 1000, .has_bias = 1 }, /* ResNet-50 head */
	};
	struct gpu g;
	GPU_OPEN(&g, 16);
	for (int math = CUDA_MATH_FP32; math <= CUDA_MATH_TF32; math++) {
		CHECK_OK(cuda_ctx_set_math(g.ctx, math));
		for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++)
			check_linear(&g, &cfg[t], math == CUDA_MATH_TF32 ? 5e-3 : 1e-5);
	}
	gpu_close(&g);
}

/* Every distinct convolution of the models at a small batch and size, under both
 * FP32 algorithm policies: all algorithms competing (the default, as PyTorch's
 * cudnn.benchmark) and direct summation only. */
static void check_model_convs(const char *model, int size, int batch, int direct_only)
{
	struct model_opts o = model_defaults(model);
	o.size = size;
	o.batch = batch;
	o.classes = 10;
	struct net *net = NULL;
	CHECK(model_build(model, &o, &net) == 0);
	if (!net)
		return;
	for (int i = 0; i < net->n_nodes; i++) {
		if (net->nodes[i].op != OP_CONV2D)
			continue;
		int seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = net->nodes[j].op == OP_CONV2D &&
			       !memcmp(&net->nodes[j].a.conv, &net->nodes[i].a.conv, sizeof(struct conv2d_args));
		if (seen)
			continue;
		struct gpu g;
		if (gpu_open(&g, 100 + i, GPU_RNG_STREAM) != 0) {
			test_fail(__FILE__, __LINE__, "gpu_open: %s", gp_errmsg());
			break;
		}
		g.ctx->fp32_direct_only = direct_only;
		int failed_before = test_failed();
		check_conv(&g, &net->nodes[i].a.conv, 1e-5);
		if (test_failed() && !failed_before)
			printf("      %s %s (%s)\n", model, net->nodes[i].name,
			       direct_only ? "direct algorithms only" : "all algorithms");
		gpu_close(&g);
	}
	net_free(net);
}

TEST(cuda_conv_model_layers_match_cpu)
{
	char why[256];
	if (!cuda_available(why, sizeof(why)))
		SKIP("no CUDA device");
	for (int direct = 1; direct >= 0; direct--) {
		check_model_convs("resnet18", 64, 8, direct);
		check_model_convs("mobilenet_v2", 64, 8, direct);
	}
}
