/* The CPU reference kernels against central finite differences in double, the float
 * build against the double one, `accumulate` against overwrite, and a few hand
 * values (batch-norm statistics, cross-entropy, MAC counts). Every gradient check
 * differentiates L = sum(y * r) for a random r, for inputs and parameters alike. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/ops.h"
#include "test.h"

#define FD_STEP 1e-6
#define FD_TOL 1e-6   /* analytic vs finite differences, double */
#define F32_TOL 1e-5  /* float kernels vs double kernels */

/* Normal values rounded to float, so the float and double builds see equal inputs. */
static double *rand_vec(struct rng *r, size_t n, double mean, double std)
{
	double *v = malloc((n ? n : 1) * sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = (float)(mean + std * rng_normal(r));
	return v;
}

/* A buffer full of NaN: a kernel that reads what it should overwrite shows up. */
static double *nan_vec(size_t n)
{
	double *v = malloc((n ? n : 1) * sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = NAN;
	return v;
}

static float *to_f32(const double *v, size_t n)
{
	float *f = malloc((n ? n : 1) * sizeof(*f));
	for (size_t i = 0; i < n; i++)
		f[i] = (float)(v ? v[i] : 0.0);
	return f;
}

static double dot(const double *a, const double *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* ||f - d|| / ||d|| for a float result against its double twin. */
static double rel_err_f32_f64(const float *f, const double *d, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		num += ((double)f[i] - d[i]) * ((double)f[i] - d[i]);
		den += d[i] * d[i];
	}
	return den == 0 ? (num == 0 ? 0 : INFINITY) : sqrt(num / den);
}

/* Relative error of an analytic gradient against central differences of loss()
 * with respect to every element of v (restored afterwards). */
static double fd_check(double (*loss)(void *), void *ctx, double *v, size_t n,
		       const double *analytic)
{
	double *g = malloc((n ? n : 1) * sizeof(*g));
	for (size_t i = 0; i < n; i++) {
		double keep = v[i];
		v[i] = keep + FD_STEP;
		double lp = loss(ctx);
		v[i] = keep - FD_STEP;
		double lm = loss(ctx);
		v[i] = keep;
		g[i] = (lp - lm) / (2 * FD_STEP);
	}
	double err = rel_err_norm_f64(analytic, g, n);
	free(g);
	return err;
}

/* dx computed with accumulate = 1 on top of base must equal base + the overwrite
 * result; returns the largest deviation. */
static double accumulate_err(const double *base, const double *acc, const double *over, size_t n)
{
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs(acc[i] - (base[i] + over[i]));
		worst = d > worst || isnan(d) ? d : worst;
	}
	return worst;
}

/* --- convolution ------------------------------------------------------------------ */

static struct conv2d_args conv_make(int n, int c_in, int h, int w, int c_out, int k,
				    int stride, int pad, int groups, int bias)
{
	return (struct conv2d_args){
		.n = n, .c_in = c_in, .h_in = h, .w_in = w, .c_out = c_out,
		.h_out = conv_out_size(h, k, stride, pad), .w_out = conv_out_size(w, k, stride, pad),
		.kh = k, .kw = k, .stride = stride, .pad = pad, .groups = groups, .has_bias = bias,
	};
}

struct conv_ctx {
	const struct conv2d_args *a;
	double *x, *w, *b, *y, *r;
	size_t ny;
};

static double conv_loss(void *p)
{
	struct conv_ctx *c = p;
	conv2d_fwd_cpu_f64(c->a, c->x, c->w, c->b, c->y);
	return dot(c->y, c->r, c->ny);
}

static void conv_check(const struct conv2d_args *a, uint64_t seed)
{
	struct rng rg;
	rng_seed(&rg, seed, 1);
	size_t nx = (size_t)a->n * a->c_in * a->h_in * a->w_in;
	size_t ny = (size_t)a->n * a->c_out * a->h_out * a->w_out;
	size_t nw = (size_t)a->c_out * (a->c_in / a->groups) * a->kh * a->kw;
	size_t nb = a->has_bias ? (size_t)a->c_out : 0;
	struct conv_ctx c = { a, rand_vec(&rg, nx, 0, 1), rand_vec(&rg, nw, 0, 0.5),
			      a->has_bias ? rand_vec(&rg, nb, 0, 0.5) : NULL, nan_vec(ny),
			      rand_vec(&rg, ny, 0, 1), ny };
	double *dx = nan_vec(nx), *dw = nan_vec(nw), *db = nan_vec(a->c_out);
	double *base = rand_vec(&rg, nx, 0, 1), *acc = malloc(nx * sizeof(*acc));
	float *xf = to_f32(c.x, nx), *wf = to_f32(c.w, nw), *bf = to_f32(c.b, a->c_out);
	float *rf = to_f32(c.r, ny), *yf = malloc(ny * sizeof(*yf)), *dxf = malloc(nx * sizeof(*dxf));
	float *dwf = malloc(nw * sizeof(*dwf)), *dbf = malloc(a->c_out * sizeof(*dbf));

	conv2d_bwd_data_cpu_f64(a, c.r, c.w, dx, 0);
	conv2d_bwd_filter_cpu_f64(a, c.x, c.r, dw, a->has_bias ? db : NULL);
	CHECK_LE(fd_check(conv_loss, &c, c.x, nx, dx), FD_TOL);
	CHECK_LE(fd_check(conv_loss, &c, c.w, nw, dw), FD_TOL);
	if (a->has_bias)
		CHECK_LE(fd_check(conv_loss, &c, c.b, nb, db), FD_TOL);

	memcpy(acc, base, nx * sizeof(*acc));
	conv2d_bwd_data_cpu_f64(a, c.r, c.w, acc, 1);
	CHECK_LE(accumulate_err(base, acc, dx, nx), 1e-12);

	conv_loss(&c);
	conv2d_fwd_cpu_f32(a, xf, wf, a->has_bias ? bf : NULL, yf);
	conv2d_bwd_data_cpu_f32(a, rf, wf, dxf, 0);
	conv2d_bwd_filter_cpu_f32(a, xf, rf, dwf, dbf);
	CHECK_LE(rel_err_f32_f64(yf, c.y, ny), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dxf, dx, nx), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dwf, dw, nw), F32_TOL);
	if (a->has_bias)
		CHECK_LE(rel_err_f32_f64(dbf, db, nb), F32_TOL);

	free(c.x); free(c.w); free(c.b); free(c.y); free(c.r);
	free(dx); free(dw); free(db); free(base); free(acc);
	free(xf); free(wf); free(bf); free(rf); free(yf); free(dxf); free(dwf); free(dbf);
}

TEST(conv2d_3x3_s1_p1_bias_grad)
{
	struct conv2d_args a = conv_make(2, 3, 5, 6, 4, 3, 1, 1, 1, 1);
	conv_check(&a, 11);
}

TEST(conv2d_3x3_s2_p1_nobias_grad)
{
	struct conv2d_args a = conv_make(2, 3, 7, 6, 4, 3, 2, 1, 1, 0);
	conv_check(&a, 12);
}

TEST(conv2d_3x3_s1_p0_groups2_grad)
{
	struct conv2d_args a = conv_make(2, 4, 5, 7, 6, 3, 1, 0, 2, 1);
	conv_check(&a, 13);
}

TEST(conv2d_depthwise_s1_p1_bias_grad)
{
	struct conv2d_args a = conv_make(2, 4, 5, 6, 4, 3, 1, 1, 4, 1);
	conv_check(&a, 14);
}

TEST(conv2d_depthwise_s2_p1_grad)
{
	struct conv2d_args a = conv_make(2, 4, 7, 5, 4, 3, 2, 1, 4, 0);
	conv_check(&a, 15);
}

TEST(conv2d_1x1_and_7x7_grad)
{
	struct conv2d_args a = conv_make(2, 5, 4, 3, 3, 1, 1, 0, 1, 1);
	conv_check(&a, 16);
	a = conv_make(2, 5, 5, 4, 3, 1, 2, 0, 1, 0);
	conv_check(&a, 17);
	a = conv_make(1, 2, 9, 8, 3, 7, 2, 3, 1, 0);
	conv_check(&a, 18);
}

/* A 2x2 stride-2 window on an odd input leaves the last row and column unread:
 * their gradient must be exactly zero, not left over. */
TEST(conv2d_uncovered_input_gets_zero_grad)
{
	struct conv2d_args a = conv_make(1, 1, 5, 5, 1, 2, 2, 0, 1, 0);
	double w[4] = { 1, 2, 3, 4 }, dy[4] = { 1, 1, 1, 1 }, dx[25];
	for (int i = 0; i < 25; i++)
		dx[i] = NAN;
	conv2d_bwd_data_cpu_f64(&a, dy, w, dx, 0);
	CHECK_EQ_INT(a.h_out, 2);
	CHECK_NEAR(dx[0], 1, 0);
	CHECK_NEAR(dx[6], 4, 0);
	CHECK_NEAR(dx[4], 0, 0);
	CHECK_NEAR(dx[24], 0, 0);
	CHECK_NEAR(dx[22], 0, 0);
}

TEST(conv2d_forward_hand_values)
{
	/* 1 x 1 x 3 x 3 input 1..9, a 2x2 all-ones kernel, pad 0, bias 0.5: each output
	 * is the sum of a 2x2 block plus 0.5. */
	struct conv2d_args a = conv_make(1, 1, 3, 3, 1, 2, 1, 0, 1, 1);
	double x[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, w[4] = { 1, 1, 1, 1 }, b = 0.5, y[4];
	conv2d_fwd_cpu_f64(&a, x, w, &b, y);
	CHECK_NEAR(y[0], 12.5, 0);
	CHECK_NEAR(y[1], 16.5, 0);
	CHECK_NEAR(y[2], 24.5, 0);
	CHECK_NEAR(y[3], 28.5, 0);
}

TEST(op_macs_known_layers)
{
	/* ResNet-50's stem at batch 1: 112 x 112 x 64 outputs, 3 x 7 x 7 each. */
	struct conv2d_args stem = conv_make(1, 3, 224, 224, 64, 7, 2, 3, 1, 0);
	CHECK_NEAR(conv2d_macs(&stem), 118013952.0, 0);
	/* A MobileNetV2 depthwise 3x3 on 32 x 112 x 112, batch 2: 9 per output. */
	struct conv2d_args dw = conv_make(2, 32, 112, 112, 32, 3, 1, 1, 32, 0);
	CHECK_NEAR(conv2d_macs(&dw), 2.0 * 32 * 112 * 112 * 9, 0);
	struct linear_args fc = { .n = 4, .in = 2048, .out = 1000, .has_bias = 1 };
	CHECK_NEAR(linear_macs(&fc), 4.0 * 2048 * 1000, 0);
	CHECK(!strcmp(op_name(OP_CONV2D), "conv2d"));
	CHECK(!strcmp(op_name(OP_AVGPOOL_GLOBAL), "avgpool_global"));
}

/* --- batch norm ------------------------------------------------------------------- */

struct bn_ctx {
	const struct bn_args *a;
	double *x, *gamma, *beta, *y, *r, *mean, *invstd, *rm, *rv;
	size_t ny;
};

static double bn_loss(void *p)
{
	struct bn_ctx *c = p;
	bn_fwd_train_cpu_f64(c->a, c->x, c->gamma, c->beta, c->y, c->mean, c->invstd, c->rm, c->rv);
	return dot(c->y, c->r, c->ny);
}

TEST(batchnorm_train_grad)
{
	struct rng rg;
	rng_seed(&rg, 21, 1);
	struct bn_args a = { .n = 3, .c = 4, .h = 3, .w = 2, .eps = 1e-5, .momentum = 0.1 };
	size_t nx = (size_t)a.n * a.c * a.h * a.w;
	struct bn_ctx c = { &a, rand_vec(&rg, nx, 2, 3), rand_vec(&rg, a.c, 1, 0.5),
			    rand_vec(&rg, a.c, 0, 0.5), nan_vec(nx), rand_vec(&rg, nx, 0, 1),
			    nan_vec(a.c), nan_vec(a.c), rand_vec(&rg, a.c, 0, 1),
			    rand_vec(&rg, a.c, 2, 0.1), nx };
	double *dx = nan_vec(nx), *dgamma = nan_vec(a.c), *dbeta = nan_vec(a.c);
	double *base = rand_vec(&rg, nx, 0, 1), *acc = malloc(nx * sizeof(*acc));

	bn_loss(&c);
	bn_bwd_cpu_f64(&a, c.x, c.r, c.gamma, c.mean, c.invstd, dx, 0, dgamma, dbeta);
	CHECK_LE(fd_check(bn_loss, &c, c.x, nx, dx), FD_TOL);
	CHECK_LE(fd_check(bn_loss, &c, c.gamma, a.c, dgamma), FD_TOL);
	CHECK_LE(fd_check(bn_loss, &c, c.beta, a.c, dbeta), FD_TOL);

	memcpy(acc, base, nx * sizeof(*acc));
	bn_loss(&c);
	bn_bwd_cpu_f64(&a, c.x, c.r, c.gamma, c.mean, c.invstd, acc, 1, dgamma, dbeta);
	CHECK_LE(accumulate_err(base, acc, dx, nx), 1e-12);

	/* The float build, inputs with a large mean so that a float one-pass variance
	 * would lose digits. */
	for (size_t i = 0; i < nx; i++)
		c.x[i] = (float)(c.x[i] + 1000.0);
	bn_loss(&c);
	bn_bwd_cpu_f64(&a, c.x, c.r, c.gamma, c.mean, c.invstd, dx, 0, dgamma, dbeta);
	float *xf = to_f32(c.x, nx), *gf = to_f32(c.gamma, a.c), *bf = to_f32(c.beta, a.c);
	float *rf = to_f32(c.r, nx), *yf = malloc(nx * sizeof(*yf)), *dxf = malloc(nx * sizeof(*dxf));
	float *mf = malloc(a.c * sizeof(*mf)), *sf = malloc(a.c * sizeof(*sf));
	float *rmf = to_f32(c.rm, a.c), *rvf = to_f32(c.rv, a.c);
	float *dgf = malloc(a.c * sizeof(*dgf)), *dbf = malloc(a.c * sizeof(*dbf));
	bn_fwd_train_cpu_f32(&a, xf, gf, bf, yf, mf, sf, rmf, rvf);
	bn_bwd_cpu_f32(&a, xf, rf, gf, mf, sf, dxf, 0, dgf, dbf);
	CHECK_LE(rel_err_f32_f64(yf, c.y, nx), F32_TOL);
	CHECK_LE(rel_err_f32_f64(mf, c.mean, a.c), F32_TOL);
	CHECK_LE(rel_err_f32_f64(sf, c.invstd, a.c), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dxf, dx, nx), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dgf, dgamma, a.c), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dbf, dbeta, a.c), F32_TOL);

	free(c.x); free(c.gamma); free(c.beta); free(c.y); free(c.r); free(c.mean);
	free(c.invstd); free(c.rm); free(c.rv); free(dx); free(dgamma); free(dbeta);
	free(base); free(acc); free(xf); free(gf); free(bf); free(rf); free(yf); free(dxf);
	free(mf); free(sf); free(rmf); free(rvf); free(dgf); free(dbf);
}

TEST(batchnorm_running_stats_hand_values)
{
	/* Two images, two channels, 1 x 2 planes. Channel 0 holds 1, 2, 3, 6: mean 3,
	 * biased var 3.5, unbiased 14/3. Channel 1 holds 10, 10, 10, 14: mean 11,
	 * biased var 3, unbiased 4. */
	struct bn_args a = { .n = 2, .c = 2, .h = 1, .w = 2, .eps = 1e-5, .momentum = 0.1 };
	double x[8] = { 1, 2, 10, 10, 3, 6, 10, 14 };
	double gamma[2] = { 2, 1 }, beta[2] = { 0.5, -1 }, y[8], mean[2], invstd[2];
	double rm[2] = { 0.5, 0 }, rv[2] = { 2, 1 };
	bn_fwd_train_cpu_f64(&a, x, gamma, beta, y, mean, invstd, rm, rv);
	CHECK_NEAR(mean[0], 3, 1e-12);
	CHECK_NEAR(mean[1], 11, 1e-12);
	CHECK_NEAR(invstd[0], 1 / sqrt(3.5 + 1e-5), 1e-12);
	CHECK_NEAR(invstd[1], 1 / sqrt(3 + 1e-5), 1e-12);
	CHECK_NEAR(rm[0], 0.9 * 0.5 + 0.1 * 3, 1e-12);
	CHECK_NEAR(rm[1], 0.1 * 11, 1e-12);
	CHECK_NEAR(rv[0], 0.9 * 2 + 0.1 * 14.0 / 3.0, 1e-12);
	CHECK_NEAR(rv[1], 0.9 * 1 + 0.1 * 4, 1e-12);
	CHECK_NEAR(y[0], (1 - 3) / sqrt(3.5 + 1e-5) * 2 + 0.5, 1e-12);
	CHECK_NEAR(y[7], (14 - 11) / sqrt(3 + 1e-5) * 1 - 1, 1e-12);

	float xf[8], gf[2] = { 2, 1 }, bf[2] = { 0.5f, -1 }, yf[8], mf[2], sf[2];
	float rmf[2] = { 0.5f, 0 }, rvf[2] = { 2, 1 };
	for (int i = 0; i < 8; i++)
		xf[i] = (float)x[i];
	bn_fwd_train_cpu_f32(&a, xf, gf, bf, yf, mf, sf, rmf, rvf);
	CHECK_NEAR(rvf[0], 0.9 * 2 + 0.1 * 14.0 / 3.0, 1e-6);
	CHECK_NEAR(rvf[1], 1.3, 1e-6);
}

TEST(batchnorm_eval_uses_running_stats)
{
	/* eps = 0 keeps the hand values exact: (x - rm) / sqrt(rv) * gamma + beta. */
	struct bn_args a = { .n = 2, .c = 2, .h = 1, .w = 1, .eps = 0, .momentum = 0.1 };
	double x[4] = { 3, -1, 5, 0 }, gamma[2] = { 2, 0.5 }, beta[2] = { 0.5, 1 };
	double rm[2] = { 1, -2 }, rv[2] = { 4, 0.25 }, y[4];
	bn_fwd_eval_cpu_f64(&a, x, gamma, beta, rm, rv, y);
	CHECK_NEAR(y[0], 2.5, 1e-15);
	CHECK_NEAR(y[1], 2, 1e-15);
	CHECK_NEAR(y[2], 4.5, 1e-15);
	CHECK_NEAR(y[3], 3, 1e-15);
	float xf[4] = { 3, -1, 5, 0 }, gf[2] = { 2, 0.5f }, bf[2] = { 0.5f, 1 };
	float rmf[2] = { 1, -2 }, rvf[2] = { 4, 0.25f }, yf[4];
	bn_fwd_eval_cpu_f32(&a, xf, gf, bf, rmf, rvf, yf);
	CHECK_NEAR(yf[0], 2.5, 1e-6);
	CHECK_NEAR(yf[3], 3, 1e-6);
}

/* --- activations ------------------------------------------------------------------ */

struct act_ctx {
	void (*fwd)(size_t, const double *, double *);
	double *x, *y, *r;
	size_t n;
};

static double act_loss(void *p)
{
	struct act_ctx *c = p;
	c->fwd(c->n, c->x, c->y);
	return dot(c->y, c->r, c->n);
}

/* Inputs drawn in [lo, hi) and pushed at least 0.01 away from each kink, so that a
 * step of FD_STEP never crosses one. */
static double *rand_away_from(struct rng *rg, size_t n, double lo, double hi,
			      const double *kinks, int n_kinks)
{
	double *v = malloc(n * sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		double t = lo + (hi - lo) * rng_uniform(rg);
		for (int k = 0; k < n_kinks; k++)
			if (fabs(t - kinks[k]) < 0.01)
				t = kinks[k] + (t < kinks[k] ? -0.01 : 0.01);
		v[i] = (float)t;
	}
	return v;
}

static void act_check(int six, uint64_t seed)
{
	struct rng rg;
	rng_seed(&rg, seed, 1);
	const double kinks[2] = { 0, 6 };
	size_t n = 64;
	struct act_ctx c = { six ? relu6_fwd_cpu_f64 : relu_fwd_cpu_f64,
			     rand_away_from(&rg, n, six ? -3 : -2, six ? 9 : 2, kinks, 2),
			     nan_vec(n), rand_vec(&rg, n, 0, 1), n };
	double *dx = nan_vec(n), *base = rand_vec(&rg, n, 0, 1), *acc = malloc(n * sizeof(*acc));
	void (*bwd)(size_t, const double *, const double *, double *, int) =
		six ? relu6_bwd_cpu_f64 : relu_bwd_cpu_f64;

	act_loss(&c);
	bwd(n, c.y, c.r, dx, 0);
	CHECK_LE(fd_check(act_loss, &c, c.x, n, dx), FD_TOL);
	memcpy(acc, base, n * sizeof(*acc));
	bwd(n, c.y, c.r, acc, 1);
	CHECK_LE(accumulate_err(base, acc, dx, n), 1e-15);

	/* Both sides of every kink occur, or the check above proved little. */
	int below = 0, inside = 0, above = 0;
	for (size_t i = 0; i < n; i++) {
		below += c.x[i] < 0;
		inside += c.x[i] > 0 && c.x[i] < 6;
		above += c.x[i] > 6;
	}
	CHECK(below > 0 && inside > 0 && (!six || above > 0));

	/* In place, as the backend runs it: y overwrites x and backward reads y. */
	float *xf = to_f32(c.x, n), *rf = to_f32(c.r, n), *dxf = malloc(n * sizeof(*dxf));
	(six ? relu6_fwd_cpu_f32 : relu_fwd_cpu_f32)(n, xf, xf);
	(six ? relu6_bwd_cpu_f32 : relu_bwd_cpu_f32)(n, xf, rf, dxf, 0);
	act_loss(&c);
	CHECK_LE(rel_err_f32_f64(xf, c.y, n), 1e-7);
	CHECK_LE(rel_err_f32_f64(dxf, dx, n), 1e-7);

	free(c.x); free(c.y); free(c.r); free(dx); free(base); free(acc);
	free(xf); free(rf); free(dxf);
}

TEST(relu_grad)
{
	act_check(0, 31);
}

TEST(relu6_grad)
{
	act_check(1, 32);
}

TEST(relu_relu6_values)
{
	double x[5] = { -1, 0, 2.5, 6, 7.5 }, y[5], y6[5];
	relu_fwd_cpu_f64(5, x, y);
	relu6_fwd_cpu_f64(5, x, y6);
	CHECK_NEAR(y[0], 0, 0);
	CHECK_NEAR(y[2], 2.5, 0);
	CHECK_NEAR(y[4], 7.5, 0);
	CHECK_NEAR(y6[0], 0, 0);
	CHECK_NEAR(y6[2], 2.5, 0);
	CHECK_NEAR(y6[4], 6, 0);
	/* At the kinks the gradient is zero: y = 0 and y = 6 do not pass. */
	double dy[5] = { 1, 1, 1, 1, 1 }, dx[5];
	relu6_bwd_cpu_f64(5, y6, dy, dx, 0);
	CHECK_NEAR(dx[1], 0, 0);
	CHECK_NEAR(dx[2], 1, 0);
	CHECK_NEAR(dx[3], 0, 0);
	relu_bwd_cpu_f64(5, y, dy, dx, 0);
	CHECK_NEAR(dx[1], 0, 0);
	CHECK_NEAR(dx[4], 1, 0);
}

/* --- pooling ---------------------------------------------------------------------- */

struct pool_ctx {
	const struct pool_args *a;
	double *x, *y, *r;
	uint8_t *argmax;
	size_t ny;
};

static double maxpool_loss(void *p)
{
	struct pool_ctx *c = p;
	maxpool_fwd_cpu_f64(c->a, c->x, c->y, c->argmax);
	return dot(c->y, c->r, c->ny);
}

static void maxpool_check(int h, int w, int k, int stride, int pad, uint64_t seed)
{
	struct rng rg;
	rng_seed(&rg, seed, 1);
	struct pool_args a = { .n = 2, .c = 3, .h_in = h, .w_in = w,
			       .h_out = conv_out_size(h, k, stride, pad),
			       .w_out = conv_out_size(w, k, stride, pad),
			       .k = k, .stride = stride, .pad = pad };
	size_t nx = (size_t)a.n * a.c * h * w, ny = (size_t)a.n * a.c * a.h_out * a.w_out;
	struct pool_ctx c = { &a, rand_vec(&rg, nx, 0, 1), nan_vec(ny), rand_vec(&rg, ny, 0, 1),
			      malloc(ny), ny };
	double *dx = nan_vec(nx), *base = rand_vec(&rg, nx, 0, 1), *acc = malloc(nx * sizeof(*acc));

	maxpool_loss(&c);
	maxpool_bwd_cpu_f64(&a, c.r, c.argmax, dx, 0);
	CHECK_LE(fd_check(maxpool_loss, &c, c.x, nx, dx), FD_TOL);
	memcpy(acc, base, nx * sizeof(*acc));
	maxpool_bwd_cpu_f64(&a, c.r, c.argmax, acc, 1);
	CHECK_LE(accumulate_err(base, acc, dx, nx), 1e-15);

	/* All-negative input: were padding read as 0 it would win somewhere. */
	for (size_t i = 0; i < nx; i++)
		c.x[i] = (float)(-1 - fabs(c.x[i]));
	maxpool_loss(&c);
	int bad = 0;
	for (size_t i = 0; i < ny; i++) {
		size_t plane = i / ((size_t)a.h_out * a.w_out), q = i % ((size_t)a.h_out * a.w_out);
		int oh = (int)(q / a.w_out), ow = (int)(q % a.w_out);
		int ih = oh * stride - pad + c.argmax[i] / k, iw = ow * stride - pad + c.argmax[i] % k;
		bad += !(c.y[i] < 0) || c.argmax[i] >= k * k || ih < 0 || ih >= h || iw < 0 ||
		       iw >= w || c.x[plane * h * w + (size_t)ih * w + iw] != c.y[i];
	}
	CHECK_EQ_INT(bad, 0);

	float *xf = to_f32(c.x, nx), *yf = malloc(ny * sizeof(*yf)), *rf = to_f32(c.r, ny);
	float *dxf = malloc(nx * sizeof(*dxf));
	uint8_t *argf = malloc(ny);
	maxpool_fwd_cpu_f32(&a, xf, yf, argf);
	maxpool_bwd_cpu_f32(&a, rf, argf, dxf, 0);
	maxpool_bwd_cpu_f64(&a, c.r, c.argmax, dx, 0);
	CHECK_LE(rel_err_f32_f64(yf, c.y, ny), 1e-7);
	CHECK_LE(rel_err_f32_f64(dxf, dx, nx), 1e-7);

	free(c.x); free(c.y); free(c.r); free(c.argmax); free(dx); free(base); free(acc);
	free(xf); free(yf); free(rf); free(dxf); free(argf);
}

TEST(maxpool_3x3_s2_p1_grad)
{
	maxpool_check(7, 6, 3, 2, 1, 41);
	maxpool_check(8, 8, 3, 2, 1, 42);
}

TEST(maxpool_2x2_s2_and_3x3_s1_grad)
{
	maxpool_check(6, 5, 2, 2, 0, 43);
	maxpool_check(5, 4, 3, 1, 1, 44);
}

/* The argmax is a byte, the offset in the window: the largest window it holds
 * (15 x 15, offsets up to 224), padded, at strides 8 and 4 (at stride 1 each input
 * sums up to 225 windows, beyond the float check's 1e-7). */
TEST(maxpool_15x15_argmax_offsets_grad)
{
	maxpool_check(17, 16, MAXPOOL_K_MAX, 8, 7, 45);
	maxpool_check(20, 19, MAXPOOL_K_MAX, 4, 3, 46);
}

struct avg_ctx {
	int n, c, hw;
	double *x, *y, *r;
};

static double avgpool_loss(void *p)
{
	struct avg_ctx *c = p;
	avgpool_global_fwd_cpu_f64(c->n, c->c, c->hw, c->x, c->y);
	return dot(c->y, c->r, (size_t)c->n * c->c);
}

TEST(avgpool_global_grad)
{
	struct rng rg;
	rng_seed(&rg, 51, 1);
	struct avg_ctx c = { 2, 3, 10, NULL, NULL, NULL };
	size_t nx = 60, ny = 6;
	c.x = rand_vec(&rg, nx, 0, 1);
	c.y = nan_vec(ny);
	c.r = rand_vec(&rg, ny, 0, 1);
	double *dx = nan_vec(nx), *base = rand_vec(&rg, nx, 0, 1), *acc = malloc(nx * sizeof(*acc));
	avgpool_global_bwd_cpu_f64(c.n, c.c, c.hw, c.r, dx, 0);
	CHECK_LE(fd_check(avgpool_loss, &c, c.x, nx, dx), FD_TOL);
	memcpy(acc, base, nx * sizeof(*acc));
	avgpool_global_bwd_cpu_f64(c.n, c.c, c.hw, c.r, acc, 1);
	CHECK_LE(accumulate_err(base, acc, dx, nx), 1e-15);

	avgpool_loss(&c);
	double mean0 = 0;
	for (int i = 0; i < 10; i++)
		mean0 += c.x[i] / 10;
	CHECK_NEAR(c.y[0], mean0, 1e-12);
	float *xf = to_f32(c.x, nx), *yf = malloc(ny * sizeof(*yf));
	float *rf = to_f32(c.r, ny), *dxf = malloc(nx * sizeof(*dxf));
	avgpool_global_fwd_cpu_f32(c.n, c.c, c.hw, xf, yf);
	avgpool_global_bwd_cpu_f32(c.n, c.c, c.hw, rf, dxf, 0);
	CHECK_LE(rel_err_f32_f64(yf, c.y, ny), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dxf, dx, nx), F32_TOL);

	free(c.x); free(c.y); free(c.r); free(dx); free(base); free(acc); free(xf); free(yf);
	free(rf); free(dxf);
}

/* --- linear, add, dropout --------------------------------------------------------- */

struct linear_ctx {
	const struct linear_args *a;
	double *x, *w, *b, *y, *r;
};

static double linear_loss(void *p)
{
	struct linear_ctx *c = p;
	linear_fwd_cpu_f64(c->a, c->x, c->w, c->b, c->y);
	return dot(c->y, c->r, (size_t)c->a->n * c->a->out);
}

static void linear_check(int bias, uint64_t seed)
{
	struct rng rg;
	rng_seed(&rg, seed, 1);
	struct linear_args a = { .n = 3, .in = 7, .out = 5, .has_bias = bias };
	size_t nx = 21, nw = 35, ny = 15;
	struct linear_ctx c = { &a, rand_vec(&rg, nx, 0, 1), rand_vec(&rg, nw, 0, 0.5),
				bias ? rand_vec(&rg, 5, 0, 0.5) : NULL, nan_vec(ny),
				rand_vec(&rg, ny, 0, 1) };
	double *dx = nan_vec(nx), *dw = nan_vec(nw), *db = nan_vec(5);
	double *base = rand_vec(&rg, nx, 0, 1), *acc = malloc(nx * sizeof(*acc));

	linear_bwd_data_cpu_f64(&a, c.r, c.w, dx, 0);
	linear_bwd_weight_cpu_f64(&a, c.x, c.r, dw, bias ? db : NULL);
	CHECK_LE(fd_check(linear_loss, &c, c.x, nx, dx), FD_TOL);
	CHECK_LE(fd_check(linear_loss, &c, c.w, nw, dw), FD_TOL);
	if (bias)
		CHECK_LE(fd_check(linear_loss, &c, c.b, 5, db), FD_TOL);
	memcpy(acc, base, nx * sizeof(*acc));
	linear_bwd_data_cpu_f64(&a, c.r, c.w, acc, 1);
	CHECK_LE(accumulate_err(base, acc, dx, nx), 1e-12);

	linear_loss(&c);
	float *xf = to_f32(c.x, nx), *wf = to_f32(c.w, nw), *bf = to_f32(c.b, 5);
	float *rf = to_f32(c.r, ny), *yf = malloc(ny * sizeof(*yf)), *dxf = malloc(nx * sizeof(*dxf));
	float *dwf = malloc(nw * sizeof(*dwf)), *dbf = malloc(5 * sizeof(*dbf));
	linear_fwd_cpu_f32(&a, xf, wf, bias ? bf : NULL, yf);
	linear_bwd_data_cpu_f32(&a, rf, wf, dxf, 0);
	linear_bwd_weight_cpu_f32(&a, xf, rf, dwf, dbf);
	CHECK_LE(rel_err_f32_f64(yf, c.y, ny), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dxf, dx, nx), F32_TOL);
	CHECK_LE(rel_err_f32_f64(dwf, dw, nw), F32_TOL);
	if (bias)
		CHECK_LE(rel_err_f32_f64(dbf, db, 5), F32_TOL);

	free(c.x); free(c.w); free(c.b); free(c.y); free(c.r); free(dx); free(dw); free(db);
	free(base); free(acc); free(xf); free(wf); free(bf); free(rf); free(yf); free(dxf);
	free(dwf); free(dbf);
}

TEST(linear_grad)
{
	linear_check(1, 61);
	linear_check(0, 62);
}

struct add_ctx {
	double *a, *b, *y, *r;
	size_t n;
};

static double add_loss(void *p)
{
	struct add_ctx *c = p;
	add_fwd_cpu_f64(c->n, c->a, c->b, c->y);
	return dot(c->y, c->r, c->n);
}

/* The backward of add is grad_pass into each input; the residual input's gradient
 * arrives by accumulate on top of what the other branch left there. */
TEST(add_grad_and_grad_pass)
{
	struct rng rg;
	rng_seed(&rg, 71, 1);
	size_t n = 40;
	struct add_ctx c = { rand_vec(&rg, n, 0, 1), rand_vec(&rg, n, 0, 1), nan_vec(n),
			     rand_vec(&rg, n, 0, 1), n };
	double *da = nan_vec(n), *db = nan_vec(n), *base = rand_vec(&rg, n, 0, 1);
	double *acc = malloc(n * sizeof(*acc));
	grad_pass_cpu_f64(n, c.r, da, 0);
	grad_pass_cpu_f64(n, c.r, db, 0);
	CHECK_LE(fd_check(add_loss, &c, c.a, n, da), FD_TOL);
	CHECK_LE(fd_check(add_loss, &c, c.b, n, db), FD_TOL);
	memcpy(acc, base, n * sizeof(*acc));
	grad_pass_cpu_f64(n, c.r, acc, 1);
	CHECK_LE(accumulate_err(base, acc, da, n), 1e-15);

	float *af = to_f32(c.a, n), *bf = to_f32(c.b, n), *yf = malloc(n * sizeof(*yf));
	add_loss(&c);
	add_fwd_cpu_f32(n, af, bf, yf);
	CHECK_LE(rel_err_f32_f64(yf, c.y, n), 1e-7);
	/* Float grad_pass, accumulating: af becomes a + r. */
	float *rf = to_f32(c.r, n);
	grad_pass_cpu_f32(n, rf, af, 1);
	for (size_t i = 0; i < n; i++)
		acc[i] = c.a[i] + c.r[i];
	CHECK_LE(rel_err_f32_f64(af, acc, n), 1e-7);
	free(rf);

	free(c.a); free(c.b); free(c.y); free(c.r); free(da); free(db); free(base); free(acc);
	free(af); free(bf); free(yf);
}

struct drop_ctx {
	const struct dropout_args *a;
	const uint8_t *mask;
	double *x, *y, *r;
};

static double dropout_loss(void *p)
{
	struct drop_ctx *c = p;
	dropout_fwd_cpu_f64(c->a, c->mask, c->x, c->y);
	return dot(c->y, c->r, c->a->count);
}

TEST(dropout_grad)
{
	struct rng rg;
	rng_seed(&rg, 81, 1);
	struct dropout_args a = { .count = 50, .p = 0.3 };
	uint8_t mask[50];
	dropout_mask_cpu(a.count, a.p, 5, mask);
	struct drop_ctx c = { &a, mask, rand_vec(&rg, 50, 0, 1), nan_vec(50), rand_vec(&rg, 50, 0, 1) };
	double *dx = nan_vec(50), *base = rand_vec(&rg, 50, 0, 1), *acc = malloc(50 * sizeof(*acc));
	dropout_bwd_cpu_f64(&a, mask, c.r, dx, 0);
	CHECK_LE(fd_check(dropout_loss, &c, c.x, 50, dx), FD_TOL);
	memcpy(acc, base, 50 * sizeof(*acc));
	dropout_bwd_cpu_f64(&a, mask, c.r, acc, 1);
	CHECK_LE(accumulate_err(base, acc, dx, 50), 1e-15);

	dropout_loss(&c);
	int kept = 0, scaled = 0;
	for (int i = 0; i < 50; i++) {
		kept += mask[i];
		scaled += mask[i] ? fabs(c.y[i] - c.x[i] / 0.7) < 1e-12 : c.y[i] == 0;
	}
	CHECK(kept > 0 && kept < 50);
	CHECK_EQ_INT(scaled, 50);
	float *xf = to_f32(c.x, 50), *yf = malloc(50 * sizeof(*yf));
	dropout_fwd_cpu_f32(&a, mask, xf, yf);
	CHECK_LE(rel_err_f32_f64(yf, c.y, 50), 1e-7);

	free(c.x); free(c.y); free(c.r); free(dx); free(base); free(acc); free(xf); free(yf);
}

TEST(dropout_mask_rate_seed_and_extremes)
{
	size_t n = 100000;
	uint8_t *m = malloc(n), *m2 = malloc(n);
	dropout_mask_cpu(n, 0.3, 7, m);
	size_t kept = 0, same = 0;
	for (size_t i = 0; i < n; i++)
		kept += m[i];
	CHECK_NEAR((double)kept / n, 0.7, 0.01);
	dropout_mask_cpu(n, 0.3, 7, m2);
	CHECK(!memcmp(m, m2, n));
	dropout_mask_cpu(n, 0.3, 8, m2);
	for (size_t i = 0; i < n; i++)
		same += m[i] == m2[i];
	CHECK(same < n - 1000);

	/* p = 0 keeps everything unscaled; p = 1 drops everything, with no 1/0. */
	dropout_mask_cpu(n, 0, 7, m);
	dropout_mask_cpu(n, 1, 7, m2);
	kept = 0;
	for (size_t i = 0; i < n; i++)
		kept += m[i] + m2[i];
	CHECK_EQ_INT(kept, n);
	struct dropout_args all = { .count = 3, .p = 0 }, none = { .count = 3, .p = 1 };
	float x[3] = { 1, -2, 3 }, y[3], dx[3];
	dropout_fwd_cpu_f32(&all, m, x, y);
	CHECK_NEAR(y[1], -2, 0);
	dropout_fwd_cpu_f32(&none, m2, x, y);
	dropout_bwd_cpu_f32(&none, m2, x, dx, 0);
	CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0 && dx[0] == 0 && dx[2] == 0);
	free(m);
	free(m2);
}

/* --- loss ------------------------------------------------------------------------- */

struct xent_ctx {
	int n, k;
	double *logits;
	const int32_t *labels;
};

static double xent_loss(void *p)
{
	struct xent_ctx *c = p;
	return softmax_xent_cpu_f64(c->n, c->k, c->logits, c->labels, NULL, NULL);
}

TEST(softmax_xent_grad)
{
	struct rng rg;
	rng_seed(&rg, 91, 1);
	int32_t labels[6] = { 0, 4, 2, 2, 1, 3 };
	struct xent_ctx c = { 6, 5, rand_vec(&rg, 30, 0, 2), labels };
	double *d = nan_vec(30);
	int correct = -1;
	double loss = softmax_xent_cpu_f64(c.n, c.k, c.logits, labels, d, &correct);
	CHECK_LE(fd_check(xent_loss, &c, c.logits, 30, d), FD_TOL);
	CHECK(loss > 0);

	int expect = 0;
	for (int r = 0; r < c.n; r++) {
		int top = 0;
		for (int j = 1; j < c.k; j++)
			top = c.logits[r * c.k + j] > c.logits[r * c.k + top] ? j : top;
		expect += top == labels[r];
	}
	CHECK_EQ_INT(correct, expect);

	float *lf = to_f32(c.logits, 30), *df = malloc(30 * sizeof(*df));
	int correct_f = -1;
	double loss_f = softmax_xent_cpu_f32(c.n, c.k, lf, labels, df, &correct_f);
	CHECK_NEAR(loss_f, loss, 1e-6 * loss);
	CHECK_LE(rel_err_f32_f64(df, d, 30), F32_TOL);
	CHECK_EQ_INT(correct_f, correct);
	free(c.logits); free(d); free(lf); free(df);
}

TEST(softmax_xent_hand_values_and_large_logits)
{
	/* Row 0: logits 1, 2, 3, label 2: log(e + e^2 + e^3) - 3 = 0.40760596444438.
	 * Row 1: logits 0.5, 0, -1, label 1: log(e^0.5 + 1 + e^-1) = 1.10413060533673.
	 * Only row 0 is predicted right. */
	double logits[6] = { 1, 2, 3, 0.5, 0, -1 }, d[6];
	int32_t labels[2] = { 2, 1 };
	int correct = -1;
	double loss = softmax_xent_cpu_f64(2, 3, logits, labels, d, &correct);
	CHECK_NEAR(loss, 0.7558682848905542, 1e-14);
	CHECK_EQ_INT(correct, 1);
	CHECK_NEAR(d[0], 0.04501528658519023, 1e-15);
	CHECK_NEAR(d[2], -0.16737952211258905, 1e-15);

	/* A shift of every logit changes nothing, even where exp() would overflow. */
	float big[6] = { 1001, 1002, 1003, 1000.5f, 1000, 999 }, dbig[6];
	double loss_big = softmax_xent_cpu_f32(2, 3, big, labels, dbig, NULL);
	CHECK_NEAR(loss_big, 0.7558682848905542, 1e-5);
	CHECK_NEAR(dbig[2], -0.16737952211258905, 1e-6);
}
