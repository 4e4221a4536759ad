/* Batch norm (cuDNN, and the own kernels of bn.cu, fused with the ReLU and the residual
 * add or not) against the CPU f32 reference on fresh random inputs. Outputs are poisoned
 * with NaN before each run so unwritten elements fail the comparison. Tolerance
 * (relative error of the norm): strict FP32 1e-5 unless a test states another. Without a
 * device every test skips with the reason. */
#include <math.h>
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
