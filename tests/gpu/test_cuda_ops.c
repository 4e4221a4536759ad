/* The CUDA device and memory, and the own kernels' float paths against their CPU f32
 * reference on fresh random inputs: elementwise ops, bias helpers, pooling, dropout,
 * loss and the optimizer step (convolutions and linear layers: test_cuda_conv.c; batch
 * norm: test_cuda_bn.c; the 16-bit paths: test_cuda_amp.c). Outputs are poisoned with
 * NaN before each run so unwritten elements fail the comparison. Tolerances (relative
 * error of the norm): elementwise ops exact or 1e-6, the rest 1e-5. Without a device
 * every test skips with the reason. */
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

/* Bit for bit: the backward kernels sum each input's windows in the CPU's ascending
 * output order (ResNet's 3 x 3 / 2 / 1 pooling on its 2 x 2-block kernel: odd and even
 * heights and widths, so that blocks end both inside and at the edge). */
TEST(cuda_maxpool_matches_cpu)
{
	static const int cfg[][6] = {
		/* n, c, h, k, stride, pad (w = h + 1) */
		{ 2, 3, 11, 3, 2, 1 }, /* ResNet stem pool */
		{ 1, 2, 8, 3, 2, 1 },
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
		uint8_t *am = host_bytes(&g, ny), *am_gpu = host_bytes(&g, ny);
		float *d_x = dev_from(&g, x, nx), *d_y = dev_f(&g, ny), *d_dy = dev_from(&g, dy, ny);
		float *d_dx = dev_f(&g, nx);
		uint8_t *d_am = dev_bytes(&g, ny);

		maxpool_fwd_cpu_f32(&a, x, y, am);
		CHECK_OK(maxpool_fwd_cuda(g.ctx->stream, GP_F32, 0, &a, d_x, d_y, d_am));
		CHECK_LE(max_abs_diff(down(&g, d_y, ny), y, ny), 0);
		get(&g, am_gpu, d_am, ny);
		CHECK(memcmp(am_gpu, am, ny) == 0);
		for (int acc = 0; acc <= 1; acc++) {
			float *dx = copy_f(&g, dx0, nx);
			put(&g, d_dx, dx0, nx * sizeof(float));
			if (!acc)
				poison(&g, d_dx, nx * sizeof(float));
			maxpool_bwd_cpu_f32(&a, dy, am, dx, acc);
			CHECK_OK(maxpool_bwd_cuda(g.ctx->stream, GP_F32, 0, &a, d_dy, d_am, d_dx, acc));
			CHECK_MSG(max_abs_diff(down(&g, d_dx, nx), dx, nx) == 0, "case %zu accumulate %d", t, acc);
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
