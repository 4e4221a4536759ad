/* The own 16-bit NHWC batch norm kernels (bn_nhwc16.cu), reached through bn_cudnn.c's
 * calls with GPUPERF_BN16's own mode, in fp16 and bf16, plain and fused with ReLU,
 * ReLU6 and the residual add + ReLU:
 * - the statistics and running values against the CPU's double-precision reference
 *   on the same 16-bit inputs (1e-5, relative error of the norm);
 * - the output bit for bit against the host's evaluation of the same formula
 *   (bn_val.cuh's roundings, each explicit, then the activation, rounded once) on the
 *   device's statistics, so an element written twice, skipped or from the wrong
 *   channel is found exactly;
 * - backward (and accumulated) against the CPU's batch norm backward of dy masked where
 *   the device's output passes it (y > 0, and y < 6 for ReLU6: the unfused ReLU's
 *   backward on that output): dx to the 16-bit tolerance, the parameter gradients to
 *   1e-5.
 * Shapes: 3 channel groups of 8 (24 channels), a whole block's 32 groups (256, over
 * 105 rows: the slices uneven), two blocks of 20 groups (320), and 70 images of 3 x 3;
 * and again with the slices capped (bn16_cuda_set_max_slices), so that each thread
 * walks many rows: the unrolled loads, their remainder and the float sums' move into
 * double every 32 rows. Without a device every test skips with the reason. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "core/error.h"
#include "ops/cuda/bn16_mask.h"
#include "ops/cuda/bn16_rule.h"
#include "ops/cuda/cuda_common.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

static const enum gp_dtype HTS[] = { GP_F16, GP_BF16 };

/* bn_val.cuh's pre-activation on the host: the same roundings in the same order (ISO
 * C: no contraction across them). */
static float pre_host(float x, float id, float m, float is, float g, float b)
{
	float d = x - m;
	float xh = d * is;
	float p = fmaf(xh, g, b);
	return p + id;
}

static void *dev_h_from(struct gpu *g, enum gp_dtype ht, const float *nchw, int n, int c, int hw)
{
	size_t cnt = (size_t)n * c * hw;
	void *d = dev_bytes(g, cnt * 2);
	put_h(g, ht, d, host_to_nhwc(g, nchw, 4, n, c, hw), cnt);
	return d;
}

static float *down_nchw(struct gpu *g, enum gp_dtype ht, const void *d, int n, int c, int hw)
{
	return host_to_nchw(g, down_h(g, ht, d, (size_t)n * c * hw), 4, n, c, hw);
}

/* Bits of n 16-bit values on the device, as floats (exact): equal iff the bits are. */
static int same_h(struct gpu *g, enum gp_dtype ht, const void *a, const void *b, size_t n)
{
	return memcmp(down_h(g, ht, a, n), down_h(g, ht, b, n), n * sizeof(float)) == 0;
}

/* The backward of y = relu(bn(x) + z) with the ReLU's mask taken from y by the batch
 * norm (bn_bwd_out_masked_cuda, what a ResNet block's last batch norm runs at the end of
 * its backward) against the passes it replaces on the same device tensors: the ReLU's
 * backward into g, then the batch norm's backward of g. dz (the masked gradient the add
 * hands on), dx and the parameter gradients bit for bit, in place (dz over dy) and
 * into another buffer, dx written and accumulated; dx also against the CPU's batch
 * norm backward of the masked dy, to the 16-bit tolerance. */
static void check_out_masked(struct gpu *g, enum gp_dtype ht, const struct bn_args *a, const void *d_x,
			     const void *d_y, const void *d_dy, const float *d_gamma, const float *d_mean,
			     const float *d_invstd, const float *dx0, const float *x, const float *dy, const float *gy,
			     const float *gamma, const float *gm, const float *gi)
{
	int c = a->c, hw = a->h * a->w;
	size_t nx = (size_t)a->n * c * hw, bytes = nx * 2, masked = 0;
	CHECK_EQ_INT(bn_bwd_out_masks_cuda(g->ctx, a), 1);
	void *d_g = dev_bytes(g, bytes), *d_dxr = dev_bytes(g, bytes), *d_dz = dev_bytes(g, bytes);
	void *d_dx = dev_bytes(g, bytes);
	float *d_dgr = dev_f(g, c), *d_dbr = dev_f(g, c), *d_dg = dev_f(g, c), *d_db = dev_f(g, c);
	float *t = host_f(g, nx), *dgamma = host_f(g, c), *dbeta = host_f(g, c);
	void *dx0_nhwc = host_to_nhwc(g, dx0, 4, a->n, c, hw);
	if (test_failed())
		return;
	for (size_t i = 0; i < nx; i++) {
		t[i] = gy[i] > 0.0f && gy[i] < INFINITY ? dy[i] : 0.0f;
		masked += t[i] == 0.0f;
	}
	CHECK_MSG(masked > nx / 20 && masked < nx - nx / 20, "%zu of %zu gradients masked", masked, nx);
	for (int acc = 0; acc <= 1; acc++)
		for (int inplace = 0; inplace <= 1; inplace++) {
			put_h(g, ht, d_dxr, dx0_nhwc, nx);
			put_h(g, ht, d_dx, dx0_nhwc, nx);
			CHECK_OK(relu_bwd_cuda(g->ctx->stream, ht, nx, d_y, d_dy, d_g, 0));
			CHECK_OK(bn_bwd_cuda(g->ctx, a, d_x, d_g, d_gamma, d_mean, d_invstd, d_dxr, acc, d_dgr, d_dbr));
			poison(g, d_dz, bytes);
			if (inplace)
				dev_copy(g, d_dz, d_dy, bytes);
			poison(g, d_dg, c * sizeof(float));
			poison(g, d_db, c * sizeof(float));
			CHECK_OK(bn_bwd_out_masked_cuda(g->ctx, a, d_x, d_y, inplace ? d_dz : d_dy, d_dz, d_gamma, d_mean,
							d_invstd, d_dx, acc, d_dg, d_db));
			CHECK_MSG(same_h(g, ht, d_dz, d_g, nx) && same_h(g, ht, d_dx, d_dxr, nx) &&
					  !memcmp(down(g, d_dg, c), down(g, d_dgr, c), c * sizeof(float)) &&
					  !memcmp(down(g, d_db, c), down(g, d_dbr, c), c * sizeof(float)),
				  "%s %dx%dx%dx%d acc %d in place %d: the masked backward differs from the ReLU's pass "
				  "and the batch norm's (dz %d, dx %d)",
				  dtype_name(ht), a->n, c, a->h, a->w, acc, inplace, same_h(g, ht, d_dz, d_g, nx),
				  same_h(g, ht, d_dx, d_dxr, nx));
			float *dx = copy_f(g, dx0, nx);
			bn_bwd_cpu_f32(a, x, t, gamma, gm, gi, dx, acc, dgamma, dbeta);
			double e = rel_err_norm_f32(down_nchw(g, ht, d_dx, a->n, c, hw), dx, nx);
			CHECK_MSG(e <= tol_for(ht), "%s acc %d: masked dx off by %.3g", dtype_name(ht), acc, e);
			CHECK_LE(rel_err_norm_f32(down(g, d_dg, c), dgamma, c), 1e-5);
		}
	/* what it refuses: dz over x, y or dx */
	CHECK(bn_bwd_out_masked_cuda(g->ctx, a, d_x, d_y, d_dy, d_dx, d_gamma, d_mean, d_invstd, d_dx, 0, d_dg,
				     d_db) == GP_EINVAL);
	gp_error_clear();
}

/* x: x_scale times random values about x_shift */
static void check_bn16(struct gpu *g, enum gp_dtype ht, const struct bn_args *args, enum bn_fuse op,
		       double x_scale, double x_shift)
{
	struct bn_args a = *args;
	int c = a.c, hw = a.h * a.w, act = op != BN_FUSE_NONE, six = op == BN_FUSE_RELU6;
	int add = op == BN_FUSE_ADD_RELU;
	float cap = six ? 6.0f : INFINITY;
	size_t nx = (size_t)a.n * c * hw, reserve = 1;
	int dmark = g->n_dev, hmark = g->n_host;
	CHECK_OK(cuda_ctx_set_act(g->ctx, ht, 1));
	CHECK_OK(bn_plan_cuda(g->ctx, &a));
	if (act)
		CHECK_EQ_INT(bn_fuse_plan_cuda(g->ctx, &a, op, &reserve), 1);
	else
		reserve = 0;
	CHECK_EQ_INT(reserve, 0);
	float *x = host_rand_h(g, ht, nx, x_scale, x_shift), *z = host_rand_h(g, ht, nx, 1, 0);
	float *dy = host_rand_h(g, ht, nx, 1, 0), *dx0 = host_rand_h(g, ht, nx, 1, 0);
	float *gamma = host_f(g, c), *beta = host_f(g, c), *rm = host_rand(g, c, 1, 0);
	float *rv = host_rand(g, c, 0.2, 1.5), *mean = host_f(g, c), *invstd = host_f(g, c);
	float *yref = host_f(g, nx);
	for (int k = 0; k < c; k++) { /* a good share past 6, so the clip is exercised */
		gamma[k] = 4.0f + 0.05f * (k % 16);
		beta[k] = 1.0f;
	}
	float *d_gamma = dev_from(g, gamma, c), *d_beta = dev_from(g, beta, c);
	float *d_rm = dev_from(g, rm, c), *d_rv = dev_from(g, rv, c);
	float *d_mean = dev_f(g, c), *d_invstd = dev_f(g, c), *d_dg = dev_f(g, c), *d_db = dev_f(g, c);
	void *d_x = dev_h_from(g, ht, x, a.n, c, hw), *d_z = dev_h_from(g, ht, z, a.n, c, hw);
	void *d_dy = dev_h_from(g, ht, dy, a.n, c, hw), *d_y = dev_bytes(g, nx * 2);
	void *d_dx = dev_bytes(g, nx * 2);
	if (test_failed())
		goto out;

	bn_fwd_train_cpu_f32(&a, x, gamma, beta, yref, mean, invstd, rm, rv);
	if (act)
		CHECK_OK(bn_fwd_train_fused_cuda(g->ctx, &a, op, d_x, add ? d_z : NULL, d_gamma, d_beta, d_y, d_mean,
						 d_invstd, d_rm, d_rv, NULL, 0));
	else
		CHECK_OK(bn_fwd_train_cuda(g->ctx, &a, d_x, d_gamma, d_beta, d_y, d_mean, d_invstd, d_rm, d_rv));
	float *gm = down(g, d_mean, c), *gi = down(g, d_invstd, c);
	CHECK_LE(rel_err_norm_f32(gm, mean, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(gi, invstd, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(g, d_rm, c), rm, c), 1e-5);
	CHECK_LE(rel_err_norm_f32(down(g, d_rv, c), rv, c), 1e-5);

	/* the output, element by element, from the device's statistics */
	float *gy = down_nchw(g, ht, d_y, a.n, c, hw);
	size_t wrong = 0, zeros = 0, capped = 0, first = 0;
	for (size_t i = 0; i < nx; i++) {
		int k = (int)(i / hw % c);
		float v = pre_host(x[i], add ? z[i] : 0.0f, gm[k], gi[k], gamma[k], beta[k]);
		if (act) {
			v = v > 0.0f ? v : 0.0f;
			v = v > cap ? cap : v;
		}
		float want = h_round(ht, v);
		if (f_bits(gy[i]) != f_bits(want) && !wrong++)
			first = i;
		zeros += gy[i] == 0.0f;
		capped += gy[i] == 6.0f;
	}
	CHECK_MSG(wrong == 0, "%s %dx%dx%dx%d op %d: %zu of %zu outputs differ, the first at %zu: %g, want %g",
		  dtype_name(ht), a.n, c, a.h, a.w, op, wrong, nx, first, gy[first],
		  h_round(ht, pre_host(x[first], add ? z[first] : 0.0f, gm[first / hw % c], gi[first / hw % c],
				       gamma[first / hw % c], beta[first / hw % c])));
	if (act)
		CHECK_MSG(zeros > nx / 20 && (!six || capped > nx / 100), "op %d: %zu zeros, %zu at 6 of %zu", op,
			  zeros, capped, nx);
	if (add) { /* its backward: the batch norm's, masked by the ReLU's output */
		check_out_masked(g, ht, &a, d_x, d_y, d_dy, d_gamma, d_mean, d_invstd, dx0, x, dy, gy, gamma, gm, gi);
		goto out;
	}

	float *t = host_f(g, nx), *dgamma = host_f(g, c), *dbeta = host_f(g, c);
	for (size_t i = 0; i < nx; i++)
		t[i] = !act || (gy[i] > 0.0f && gy[i] < cap) ? dy[i] : 0.0f;
	for (int acc = 0; acc <= 1; acc++) {
		float *dx = copy_f(g, dx0, nx);
		put_h(g, ht, d_dx, host_to_nhwc(g, dx0, 4, a.n, c, hw), nx);
		if (!acc)
			poison(g, d_dx, nx * 2);
		poison(g, d_dg, c * sizeof(float));
		poison(g, d_db, c * sizeof(float));
		bn_bwd_cpu_f32(&a, x, t, gamma, gm, gi, dx, acc, dgamma, dbeta);
		if (act)
			CHECK_OK(bn_bwd_relu_fused_cuda(g->ctx, &a, op, d_x, d_y, d_dy, d_gamma, d_beta, d_mean, d_invstd,
							d_dx, acc, d_dg, d_db, NULL, 0));
		else
			CHECK_OK(bn_bwd_cuda(g->ctx, &a, d_x, d_dy, d_gamma, d_mean, d_invstd, d_dx, acc, d_dg, d_db));
		double e = rel_err_norm_f32(down_nchw(g, ht, d_dx, a.n, c, hw), dx, nx);
		CHECK_MSG(e <= tol_for(ht), "%s %dx%dx%dx%d op %d acc %d: dx off by %.3g", dtype_name(ht), a.n, c, a.h,
			  a.w, op, acc, e);
		CHECK_LE(rel_err_norm_f32(down(g, d_dg, c), dgamma, c), 1e-5);
		CHECK_LE(rel_err_norm_f32(down(g, d_db, c), dbeta, c), 1e-5);
	}
out:
	gpu_release(g, dmark, hmark);
}

TEST(cuda_bn16_own_kernels_match_cpu)
{
	struct gpu g;
	GPU_OPEN(&g, 23);
	g.ctx->bn16 = BN16_OWN;
	const struct bn_args shapes[] = {
		{ .n = 4, .c = 24, .h = 6, .w = 5, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 3, .c = 256, .h = 5, .w = 7, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 2, .c = 320, .h = 4, .w = 4, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 70, .c = 16, .h = 3, .w = 3, .eps = 1e-5, .momentum = 0.1 },
		{ .n = 16, .c = 8, .h = 32, .w = 32, .eps = 1e-5, .momentum = 0.1 },
	};
	/* uncapped, then 1 and 3 slices: 64 rows a thread at 16 x 8 x 32 x 32 */
	static const int caps[] = { 0, 1, 3 };
	for (int cap = 0; cap < 3 && !test_failed(); cap++) {
		bn16_cuda_set_max_slices(caps[cap]);
		for (int t = 0; t < 2 && !test_failed(); t++)
			for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]) && !test_failed(); k++)
				for (int op = BN_FUSE_NONE; op <= BN_FUSE_RELU6 && !test_failed(); op++)
					check_bn16(&g, HTS[t], &shapes[k], (enum bn_fuse)op, 2, 0.5);
		if (test_failed())
			printf("      with the slices capped at %d (0: none)\n", caps[cap]);
	}
	bn16_cuda_set_max_slices(0);
	g.ctx->bn16 = BN16_CUDNN;
	gpu_close(&g);
}

/* A tensor of many more 8-channel chunks than the backward's dx pass has threads (one
 * wave of blocks: about 67,000 threads on 132 SMs, to a multiple of the channel
 * groups): each thread takes about 20 chunks through its ring of copies in flight
 * (bn16_walk), which wraps several times and ends part-full on some threads. The
 * shapes above give every thread one chunk at most. 64 x 40 x 64 x 64: 1.31 million
 * chunks. */
TEST(cuda_bn16_dx_beyond_one_pass_of_threads)
{
	struct gpu g;
	GPU_OPEN(&g, 29);
	g.ctx->bn16 = BN16_OWN;
	const struct bn_args big = { .n = 64, .c = 40, .h = 64, .w = 64, .eps = 1e-5, .momentum = 0.1 };
	check_bn16(&g, GP_BF16, &big, BN_FUSE_RELU6, 2, 0.5);
	check_bn16(&g, GP_F16, &big, BN_FUSE_NONE, 2, 0.5);
	g.ctx->bn16 = BN16_CUDNN;
	gpu_close(&g);
}

/* The unfused activation's backward test on the forward's output, on the host:
 * y = T(clamp(p + 0, 0, cap)) passes where y > 0 and y < cap (bn_val.cuh's bn16_act
 * turns NaN into 0). */
static int passes_rounded(enum gp_dtype ht, float p, float cap)
{
	float v = p + 0.0f;
	v = v > 0.0f ? v : 0.0f;
	v = v > cap ? cap : v;
	float y = h_round(ht, v);
	return y > 0.0f && y < cap;
}

/* bn16_mask.h's bounds against the rounding they stand for, without a GPU: the mask can
 * change only where the rounded output does, at the midpoint between two adjacent
 * 16-bit values (and at 0), so every float within 4 of each 16-bit value and of each
 * midpoint, the infinities' neighbours and NaN included, for both types and both
 * activations: lo < p < hi exactly where the rounded form passes. */
TEST(bn16_mask_bounds_match_the_rounded_output)
{
	for (int t = 0; t < 2; t++)
		for (int relu6 = 0; relu6 <= 1; relu6++) {
			enum gp_dtype ht = HTS[t];
			struct bn16_pass b = bn16_pass_bounds(ht == GP_BF16, relu6);
			float cap = relu6 ? 6.0f : INFINITY;
			long checked = 0, bad = 0, passed = 0;
			for (uint32_t u = 0; u <= 0xffff; u++) {
				float a = h_val(ht, (uint16_t)u);
				if (isnan(a))
					continue;
				double centre[2] = { a, NAN };
				/* the midpoint to the next value away from 0; past the largest
				 * finite value, to the next power of two */
				if ((u & 0x7fff) != 0x7fff && !isinf(a)) {
					float n = h_val(ht, (uint16_t)(u + 1));
					if (isinf(n))
						centre[1] = (double)a + ((double)a - h_val(ht, (uint16_t)(u - 1))) / 2;
					else if (!isnan(n))
						centre[1] = ((double)a + n) / 2;
				}
				for (int k = 0; k < 2; k++) {
					if (isnan(centre[k]))
						continue;
					float m = (float)centre[k];
					for (int d = -4; d <= 4; d++) {
						float p = bits_f(f_bits(m) + (uint32_t)d);
						int want = passes_rounded(ht, p, cap), got = p > b.lo && p < b.hi;
						if (want != got && bad++ < 3)
							printf("      %s %s: p %a: rounded form %d, bounds %d\n",
							       ht == GP_BF16 ? "bf16" : "fp16", relu6 ? "relu6" : "relu",
							       (double)p, want, got);
						passed += want;
						checked++;
					}
				}
			}
			CHECK_MSG(bad == 0, "%ld floats where the bounds and the rounded form disagree", bad);
			CHECK(checked > 500000 && passed > 100000);
		}
}

/* The same on the device, over every float (2^32 bit patterns), with the device's own
 * rounding (bn16_cuda_mask_mismatches). */
TEST(cuda_bn16_mask_bounds_match_every_float)
{
	struct gpu g;
	GPU_OPEN(&g, 37);
	for (int t = 0; t < 2; t++)
		for (int act = BN_APPLY_RELU; act <= BN_APPLY_RELU6; act++) {
			unsigned long long n = 1;
			CHECK_OK(bn16_cuda_mask_mismatches(HTS[t], (enum bn_apply_act)act, &n));
			CHECK_MSG(n == 0, "%llu floats where the device's mask and rounded form disagree", n);
		}
	gpu_close(&g);
}

/* Values far from 0 (about 100, spread about 1, in fp16: steps of 1/16 there): the
 * sums about the channel's first element keep the variance; float sums of x and x^2
 * would lose most of it. Every check of check_bn16 (the statistics within 1e-5 of the
 * CPU's double ones), with the slices as they come and capped at one (256 rows a
 * thread: the float sums move into double 8 times). */
TEST(cuda_bn16_own_kernels_keep_variance_of_offset_data)
{
	struct gpu g;
	GPU_OPEN(&g, 29);
	g.ctx->bn16 = BN16_OWN;
	struct bn_args a = { .n = 16, .c = 8, .h = 32, .w = 32, .eps = 1e-5, .momentum = 0.1 };
	for (int cap = 0; cap <= 1 && !test_failed(); cap++) {
		bn16_cuda_set_max_slices(cap);
		check_bn16(&g, GP_F16, &a, BN_FUSE_NONE, 1, 100);
		check_bn16(&g, GP_F16, &a, BN_FUSE_RELU, 1, 100);
	}
	bn16_cuda_set_max_slices(0);
	g.ctx->bn16 = BN16_CUDNN;
	gpu_close(&g);
}

/* The mode reaches the routing (bn16_routed_own_cuda, the answer every call of the
 * node follows): under auto a small batch norm stays on cuDNN, and a large one takes
 * the own kernels before an unfused ReLU6 but not before a ReLU when its channels are
 * a multiple of 64 under 256 (MobileNetV2's 192 over 28 x 28 at batch 256), and before
 * a ReLU from 256 channels (256 over 28 x 28); a channel count the
 * kernels cannot take stays on cuDNN even under own; FP32 never takes them. Each
 * planned as fused where either path fuses it. (The reserve space cannot tell the paths apart: cuDNN 9.14's
 * fused ReLU keeps none on the H200, eighteenth session.) */
TEST(cuda_bn16_routing_follows_the_mode)
{
	struct gpu g;
	GPU_OPEN(&g, 31);
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_BF16, 1));
	struct bn_args small = { .n = 2, .c = 24, .h = 4, .w = 4, .eps = 1e-5, .momentum = 0.1 };
	struct bn_args odd = { .n = 4, .c = 20, .h = 6, .w = 5, .eps = 1e-5, .momentum = 0.1 };
	struct bn_args large = { .n = 256, .c = 192, .h = 28, .w = 28, .eps = 1e-5, .momentum = 0.1 };
	struct bn_args wide = { .n = 256, .c = 256, .h = 28, .w = 28, .eps = 1e-5, .momentum = 0.1 };
	const struct {
		enum bn16_mode mode;
		const struct bn_args *a;
		enum bn_fuse op;
		int own;
	} cases[] = {
		{ BN16_CUDNN, &small, BN_FUSE_RELU, 0 },  { BN16_CUDNN, &large, BN_FUSE_RELU6, 0 },
		{ BN16_AUTO, &small, BN_FUSE_RELU, 0 },   { BN16_AUTO, &large, BN_FUSE_RELU6, 1 },
		{ BN16_AUTO, &large, BN_FUSE_RELU, 0 },   { BN16_OWN, &small, BN_FUSE_RELU, 1 },
		{ BN16_OWN, &large, BN_FUSE_RELU, 1 },    { BN16_OWN, &odd, BN_FUSE_RELU, 0 },
		{ BN16_AUTO, &wide, BN_FUSE_RELU, 1 },    { BN16_CUDNN, &wide, BN_FUSE_RELU, 0 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]) && !test_failed(); k++) {
		g.ctx->bn16 = cases[k].mode;
		size_t reserve = 0;
		CHECK_EQ_INT(bn16_routed_own_cuda(g.ctx, cases[k].a, cases[k].op), cases[k].own);
		/* fused: on the own kernels, or cuDNN's ReLU (cuDNN declines ReLU6) */
		CHECK_EQ_INT(bn_fuse_plan_cuda(g.ctx, cases[k].a, cases[k].op, &reserve),
			     cases[k].own || cases[k].op == BN_FUSE_RELU);
		if (cases[k].own)
			CHECK(reserve == 0);
		if (test_failed())
			printf("      case %zu: mode %d, %d channels, op %d\n", k, (int)cases[k].mode,
			       cases[k].a->c, (int)cases[k].op);
	}
	g.ctx->bn16 = BN16_OWN;
	CHECK_OK(cuda_ctx_set_act(g.ctx, GP_F32, 0));
	CHECK_EQ_INT(bn16_routed_own_cuda(g.ctx, &small, BN_FUSE_RELU), 0);
	g.ctx->bn16 = BN16_CUDNN;
	gpu_close(&g);
}
