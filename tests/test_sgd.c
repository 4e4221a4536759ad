/* sgd_step against values worked out by hand from torch.optim.SGD's update rule.
 * Every case starts from param = (1, -2), first gradient (0.5, 1), second gradient
 * (0.2, -0.4), lr = 0.1. */
#include <stddef.h>

#include "ops/ops.h"
#include "test.h"

static const double g1[2] = { 0.5, 1 }, g2[2] = { 0.2, -0.4 };

/* Two steps in double and in float; checks the parameters after each. */
static void sgd_two_steps(struct sgd_args a, const double after1[2], const double after2[2])
{
	double p[2] = { 1, -2 }, buf[2] = { 123, 456 }; /* garbage: the first step must not read it */
	float pf[2] = { 1, -2 }, buff[2] = { 123, 456 };
	float g1f[2] = { 0.5f, 1 }, g2f[2] = { 0.2f, -0.4f };
	double *mom = a.momentum != 0 ? buf : NULL;
	float *momf = a.momentum != 0 ? buff : NULL;

	a.first_step = 1;
	sgd_step_cpu_f64(&a, 2, p, g1, mom);
	sgd_step_cpu_f32(&a, 2, pf, g1f, momf);
	CHECK_NEAR(p[0], after1[0], 1e-12);
	CHECK_NEAR(p[1], after1[1], 1e-12);
	CHECK_NEAR(pf[0], after1[0], 1e-6);
	CHECK_NEAR(pf[1], after1[1], 1e-6);
	a.first_step = 0;
	sgd_step_cpu_f64(&a, 2, p, g2, mom);
	sgd_step_cpu_f32(&a, 2, pf, g2f, momf);
	CHECK_NEAR(p[0], after2[0], 1e-12);
	CHECK_NEAR(p[1], after2[1], 1e-12);
	CHECK_NEAR(pf[0], after2[0], 1e-6);
	CHECK_NEAR(pf[1], after2[1], 1e-6);
}

TEST(sgd_plain)
{
	/* p -= lr * g, no momentum buffer at all. */
	struct sgd_args a = { .lr = 0.1 };
	sgd_two_steps(a, (double[]){ 0.95, -2.1 }, (double[]){ 0.93, -2.06 });
}

TEST(sgd_weight_decay)
{
	/* d = g + 0.01 p: (0.51, 0.98) -> p = (0.949, -2.098);
	 * then (0.20949, -0.42098) -> p = (0.928051, -2.055902). */
	struct sgd_args a = { .lr = 0.1, .weight_decay = 0.01 };
	sgd_two_steps(a, (double[]){ 0.949, -2.098 }, (double[]){ 0.928051, -2.055902 });
}

TEST(sgd_momentum_first_and_second_step)
{
	/* buf = g1 = (0.5, 1) -> p = (0.95, -2.1);
	 * buf = 0.9 buf + g2 = (0.65, 0.5) -> p = (0.885, -2.15). */
	struct sgd_args a = { .lr = 0.1, .momentum = 0.9 };
	sgd_two_steps(a, (double[]){ 0.95, -2.1 }, (double[]){ 0.885, -2.15 });
}

TEST(sgd_dampening)
{
	/* First step: buf = g1, undampened -> p = (0.95, -2.1);
	 * then buf = 0.9 buf + 0.5 g2 = (0.55, 0.7) -> p = (0.895, -2.17). */
	struct sgd_args a = { .lr = 0.1, .momentum = 0.9, .dampening = 0.5 };
	sgd_two_steps(a, (double[]){ 0.95, -2.1 }, (double[]){ 0.895, -2.17 });
}

TEST(sgd_nesterov)
{
	/* buf = (0.5, 1), d = g1 + 0.9 buf = (0.95, 1.9) -> p = (0.905, -2.19);
	 * buf = (0.65, 0.5), d = g2 + 0.9 buf = (0.785, 0.05) -> p = (0.8265, -2.195). */
	struct sgd_args a = { .lr = 0.1, .momentum = 0.9, .nesterov = 1 };
	sgd_two_steps(a, (double[]){ 0.905, -2.19 }, (double[]){ 0.8265, -2.195 });
}

TEST(sgd_nesterov_weight_decay_buffer)
{
	/* One element, wd 0.1: d = 0.5 + 0.1 = 0.6 = buf, step 0.6 + 0.54 -> p = 0.886;
	 * d = 0.2 + 0.0886 = 0.2886, buf = 0.54 + 0.2886 = 0.8286,
	 * step 0.2886 + 0.74574 = 1.03434 -> p = 0.782566. */
	struct sgd_args a = { .lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = 1,
			      .first_step = 1 };
	double p = 1, buf = 0, g = 0.5;
	sgd_step_cpu_f64(&a, 1, &p, &g, &buf);
	CHECK_NEAR(p, 0.886, 1e-12);
	CHECK_NEAR(buf, 0.6, 1e-12);
	a.first_step = 0;
	g = 0.2;
	sgd_step_cpu_f64(&a, 1, &p, &g, &buf);
	CHECK_NEAR(buf, 0.8286, 1e-12);
	CHECK_NEAR(p, 0.782566, 1e-12);
}
