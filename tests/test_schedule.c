/* Learning-rate schedules: closed-form values worked out by hand (always run), and the
 * first 1,000 rates (and OneCycleLR's momenta) of each schedule against what torch
 * gave, tests/data/lr_reference.json from tools/gen_lr_reference.py, to 1e-7. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "train/schedule.h"
#include "test.h"

#define REFERENCE "tests/data/lr_reference.json"
#define REF_TOL 1e-7

static struct lr_schedule_cfg cfg(enum lr_schedule kind, int warmup, int spe, long epochs)
{
	struct lr_schedule_cfg c = lr_schedule_defaults(kind, 0.1);
	c.warmup_epochs = warmup;
	c.steps_per_epoch = spe;
	c.total_steps = epochs * spe;
	return c;
}

TEST(schedule_constant_and_warmup)
{
	struct lr_schedule_cfg c = cfg(LR_CONSTANT, 0, 10, 100);
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	CHECK(!lr_schedule_varies(&c));
	CHECK_NEAR(lr_schedule_lr(&c, 0), 0.1, 0);
	CHECK_NEAR(lr_schedule_lr(&c, 999), 0.1, 0);
	double m;
	CHECK_EQ_INT(lr_schedule_momentum(&c, 5, &m), 0);
	/* LinearLR(start_factor=0.01, total_iters=5), stepped per epoch:
	 * epoch e < 5: 0.1 * (0.01 + 0.99 e / 5), constant within the epoch */
	c.warmup_epochs = 5;
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	CHECK(lr_schedule_varies(&c));
	CHECK_NEAR(lr_schedule_lr(&c, 0), 0.001, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 9), 0.001, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 10), 0.0208, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 49), 0.0802, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 50), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 999), 0.1, 1e-15);
}

TEST(schedule_step)
{
	/* StepLR(step_size=30, gamma=0.1) per epoch of 10 steps */
	struct lr_schedule_cfg c = cfg(LR_STEP, 0, 10, 100);
	c.step_epochs = 30;
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	CHECK_NEAR(lr_schedule_lr(&c, 0), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 299), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 300), 0.01, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 599), 0.01, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 600), 0.001, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 999), 0.0001, 1e-15);
	/* after a 5-epoch warmup, StepLR counts its epochs from the milestone */
	c.warmup_epochs = 5;
	CHECK_NEAR(lr_schedule_lr(&c, 40), 0.1 * (0.01 + 0.99 * 4 / 5), 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 50), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 349), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 350), 0.01, 1e-15);
	c.gamma = 0.5;
	CHECK_NEAR(lr_schedule_lr(&c, 650), 0.025, 1e-15);
}

TEST(schedule_cosine)
{
	/* CosineAnnealingLR(T_max=100): 0.05 (1 + cos(pi e / 100)) */
	struct lr_schedule_cfg c = cfg(LR_COSINE, 0, 10, 100);
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	CHECK_NEAR(lr_schedule_lr(&c, 0), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 505), 0.05, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 250), 0.05 * (1 + sqrt(0.5)), 1e-15);
	/* e = 99: 0.05 (1 - cos(pi / 100)) */
	CHECK_NEAR(lr_schedule_lr(&c, 999), 2.4671981713420e-05, 1e-16);
	/* with 5 warmup epochs the cosine spans the 95 after them */
	c.warmup_epochs = 5;
	CHECK_NEAR(lr_schedule_lr(&c, 20), 0.1 * (0.01 + 0.99 * 2 / 5), 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 50), 0.1, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 530), 0.05 * (1 + cos(M_PI * 48 / 95)), 1e-15);
}

TEST(schedule_onecycle)
{
	/* OneCycleLR(max_lr=0.1, total_steps=1000): the first phase ends at step 299 */
	struct lr_schedule_cfg c = cfg(LR_ONECYCLE, 0, 10, 100);
	double m = 0;
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	CHECK(lr_schedule_varies(&c));
	CHECK_NEAR(lr_schedule_lr(&c, 0), 0.004, 1e-15);
	CHECK(lr_schedule_momentum(&c, 0, &m));
	CHECK_NEAR(m, 0.95, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 299), 0.1, 1e-15);
	CHECK(lr_schedule_momentum(&c, 299, &m));
	CHECK_NEAR(m, 0.85, 1e-15);
	/* step 649 is halfway down: (0.1 + 4e-7) / 2, momentum 0.9 */
	CHECK_NEAR(lr_schedule_lr(&c, 649), 0.0500002, 1e-15);
	CHECK(lr_schedule_momentum(&c, 649, &m));
	CHECK_NEAR(m, 0.9, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 999), 4e-7, 1e-18);
	CHECK(lr_schedule_momentum(&c, 999, &m));
	CHECK_NEAR(m, 0.95, 1e-15);
	/* step 1: 0.0520 - 0.048 cos(pi / 299) / 1 ... written out: */
	CHECK_NEAR(lr_schedule_lr(&c, 1), 0.1 + (0.004 - 0.1) / 2 * (cos(M_PI / 299) + 1), 1e-17);
}

TEST(schedule_bad_configurations)
{
	struct lr_schedule_cfg c = cfg(LR_ONECYCLE, 2, 10, 100);
	CHECK(lr_schedule_check(&c) < 0);
	CHECK(strstr(gp_errmsg(), "onecycle") != NULL);
	c = cfg(LR_STEP, 0, 10, 100);
	CHECK(lr_schedule_check(&c) < 0);
	CHECK(strstr(gp_errmsg(), "--lr-step") != NULL);
	c = cfg(LR_COSINE, 0, 10, 100);
	c.step_epochs = 3;
	CHECK(lr_schedule_check(&c) < 0);
	c = cfg(LR_COSINE, 100, 10, 100);
	CHECK(lr_schedule_check(&c) < 0);
	CHECK(strstr(gp_errmsg(), "--warmup-epochs") != NULL);
	c = cfg(LR_COSINE, 99, 10, 100);
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	c = cfg(LR_STEP, 0, 10, 100);
	c.step_epochs = 1;
	c.gamma = 1.5;
	CHECK(lr_schedule_check(&c) < 0);
	/* zero stands for the defaults: gamma 0.1, start factor 0.01 */
	c.gamma = 0;
	c.warmup_factor = 0;
	c.warmup_epochs = 2;
	CHECK_EQ_INT(lr_schedule_check(&c), 0);
	CHECK_NEAR(lr_schedule_lr(&c, 0), 0.001, 1e-15);
	CHECK_NEAR(lr_schedule_lr(&c, 30), 0.01, 1e-15);
	enum lr_schedule k;
	CHECK(lr_schedule_parse("linear", &k) < 0);
	CHECK(strstr(gp_errmsg(), "constant, step, cosine or onecycle") != NULL);
	CHECK_EQ_INT(lr_schedule_parse("cosine", &k), 0);
	CHECK_EQ_INT(k, LR_COSINE);
	gp_error_clear();
}

/* --- the reference from torch ----------------------------------------------------------- */

struct ref_case {
	char name[64];
	struct lr_schedule_cfg cfg;
	int adamw;
	const json_t *lr, *momentum; /* momentum: NULL where the schedule leaves it alone */
};

static int ref_number(const json_t *o, const char *key, double *v)
{
	const json_t *j = json_object_get(o, key);
	if (!json_is_number(j))
		return gp_error(GP_EFORMAT, "key '%s' is missing or not a number", key);
	*v = json_number_value(j);
	if (!isfinite(*v))
		return gp_error(GP_EFORMAT, "key '%s' is not finite", key);
	return 0;
}

static int ref_int(const json_t *o, const char *key, long lo, long hi, long *v)
{
	const json_t *j = json_object_get(o, key);
	if (!json_is_integer(j) || json_integer_value(j) < lo || json_integer_value(j) > hi)
		return gp_error(GP_EFORMAT, "key '%s' is missing or not an integer in [%ld, %ld]", key, lo, hi);
	*v = (long)json_integer_value(j);
	return 0;
}

/* An array of exactly n finite numbers. */
static int ref_values(const json_t *a, size_t n, const char *what)
{
	if (!json_is_array(a) || json_array_size(a) != n)
		return gp_error(GP_EFORMAT, "%s is not an array of %zu numbers", what, n);
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(a, i);
		if (!json_is_number(v) || !isfinite(json_number_value(v)))
			return gp_error(GP_EFORMAT, "%s[%zu] is not a finite number", what, i);
	}
	return 0;
}

/* One case, every key known and checked; the schedule configured as the trainer
 * would from the same options. */
static int ref_case_read(const json_t *o, size_t steps, struct ref_case *rc)
{
	static const char *const keys[] = { "name", "schedule", "optimizer", "lr", "warmup_epochs",
					    "warmup_factor", "lr_step", "lr_gamma", "steps_per_epoch",
					    "epochs", "lr_values", "momentum_values" };
	const char *key;
	json_t *val;
	if (!json_is_object(o))
		return gp_error(GP_EFORMAT, "a case is not an object");
	json_object_foreach((json_t *)o, key, val) {
		size_t k = 0;
		while (k < sizeof(keys) / sizeof(keys[0]) && strcmp(keys[k], key))
			k++;
		if (k == sizeof(keys) / sizeof(keys[0]))
			return gp_error(GP_EFORMAT, "unknown key '%s' in a case", key);
	}
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *sched = json_string_value(json_object_get(o, "schedule"));
	const char *opt = json_string_value(json_object_get(o, "optimizer"));
	if (!name || !sched || !opt || strlen(name) >= sizeof(rc->name))
		return gp_error(GP_EFORMAT, "a case lacks its name, schedule or optimizer");
	snprintf(rc->name, sizeof(rc->name), "%s", name);
	enum lr_schedule kind;
	GP_TRY(lr_schedule_parse(sched, &kind));
	if (strcmp(opt, "sgd") && strcmp(opt, "adamw"))
		return gp_error(GP_EFORMAT, "%s: optimizer '%s' is not sgd or adamw", name, opt);
	rc->adamw = !strcmp(opt, "adamw");
	double lr, factor, gamma;
	long warmup, step, spe, epochs;
	if (ref_number(o, "lr", &lr) < 0 || ref_number(o, "warmup_factor", &factor) < 0 ||
	    ref_number(o, "lr_gamma", &gamma) < 0 || ref_int(o, "warmup_epochs", 0, 100000, &warmup) < 0 ||
	    ref_int(o, "lr_step", 0, 100000, &step) < 0 || ref_int(o, "steps_per_epoch", 1, 100000, &spe) < 0 ||
	    ref_int(o, "epochs", 1, 100000, &epochs) < 0)
		return gp_error(GP_EFORMAT, "%s: %s", name, gp_errmsg());
	rc->cfg = lr_schedule_defaults(kind, lr);
	rc->cfg.warmup_epochs = (int)warmup;
	rc->cfg.warmup_factor = factor;
	rc->cfg.step_epochs = (int)step;
	rc->cfg.gamma = gamma;
	rc->cfg.steps_per_epoch = (int)spe;
	rc->cfg.total_steps = spe * epochs;
	if (rc->cfg.total_steps < (long)steps)
		return gp_error(GP_EFORMAT, "%s: %ld steps, fewer than the %zu listed", name,
				rc->cfg.total_steps, steps);
	GP_TRY(lr_schedule_check(&rc->cfg));
	rc->lr = json_object_get(o, "lr_values");
	rc->momentum = json_object_get(o, "momentum_values");
	if (ref_values(rc->lr, steps, "lr_values") < 0)
		return gp_error(GP_EFORMAT, "%s: %s", name, gp_errmsg());
	if (json_is_null(rc->momentum) && kind != LR_ONECYCLE)
		rc->momentum = NULL;
	else if (ref_values(rc->momentum, steps, "momentum_values") < 0)
		return gp_error(GP_EFORMAT, "%s: %s", name, gp_errmsg());
	return 0;
}

/* The whole file, strictly: the keys it must have and no others, a case per known
 * schedule at least, each list complete. *doc holds what rc points into. */
static int ref_load(const char *path, json_t **doc, struct ref_case *cases, int max, int *n,
		    size_t *steps_out)
{
	json_error_t err;
	json_t *d = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
	if (!d)
		return gp_error(GP_EFORMAT, "%s:%d: %s", path, err.line, err.text);
	*doc = d;
	const char *key;
	json_t *val;
	json_object_foreach(d, key, val)
		if (strcmp(key, "generator") && strcmp(key, "torch") && strcmp(key, "steps") &&
		    strcmp(key, "cases"))
			return gp_error(GP_EFORMAT, "%s: unknown key '%s'", path, key);
	long steps;
	if (!json_is_string(json_object_get(d, "torch")) || ref_int(d, "steps", 1, 1000000, &steps) < 0)
		return gp_error(GP_EFORMAT, "%s: no torch version or step count", path);
	const json_t *cs = json_object_get(d, "cases");
	if (!json_is_array(cs) || json_array_size(cs) < 1 || (int)json_array_size(cs) > max)
		return gp_error(GP_EFORMAT, "%s: 'cases' is not an array of 1 to %d cases", path, max);
	int seen[4] = { 0 };
	for (size_t i = 0; i < json_array_size(cs); i++) {
		GP_TRY(ref_case_read(json_array_get(cs, i), (size_t)steps, &cases[i]));
		seen[cases[i].cfg.kind] = 1;
	}
	for (int k = 0; k < 4; k++)
		if (!seen[k])
			return gp_error(GP_EFORMAT, "%s: no case of schedule %s", path, lr_schedule_name_at(k));
	*n = (int)json_array_size(cs);
	*steps_out = (size_t)steps;
	return 0;
}

TEST(schedule_matches_torch)
{
	FILE *f = fopen(REFERENCE, "r");
	if (!f)
		SKIP(REFERENCE " missing: run tools/gen_lr_reference.py where torch is");
	fclose(f);
	struct ref_case cases[32];
	json_t *doc = NULL;
	int n = 0;
	size_t steps = 0;
	int rc = ref_load(REFERENCE, &doc, cases, 32, &n, &steps);
	CHECK_MSG(rc == 0, "%s", gp_errmsg());
	CHECK(steps >= 1000);
	for (int c = 0; rc == 0 && c < n; c++) {
		const struct ref_case *r = &cases[c];
		double worst = 0;
		long worst_at = -1;
		for (size_t i = 0; i < steps; i++) {
			double want = json_number_value(json_array_get(r->lr, i));
			double d = fabs(lr_schedule_lr(&r->cfg, (long)i) - want);
			if (d > worst) {
				worst = d;
				worst_at = (long)i;
			}
			double m;
			int cycles = lr_schedule_momentum(&r->cfg, (long)i, &m);
			CHECK_MSG(cycles == (r->momentum != NULL), "%s: momentum cycling differs", r->name);
			if (cycles && r->momentum) {
				double dm = fabs(m - json_number_value(json_array_get(r->momentum, i)));
				CHECK_MSG(dm <= REF_TOL, "%s: momentum at step %zu off by %.3g", r->name, i, dm);
			}
			if (test_failed())
				break;
		}
		CHECK_MSG(worst <= REF_TOL, "%s: lr at step %ld off by %.3g", r->name, worst_at, worst);
	}
	json_decref(doc);
	gp_error_clear();
}

/* The loader refuses what is not a complete reference: a test of the test, so that a
 * truncated or hand-edited file cannot pass by comparing nothing. */
TEST(schedule_reference_loader_is_strict)
{
	static const char *const bad[] = {
		"{}",
		"{\"torch\": \"2\", \"steps\": 2, \"cases\": []}",
		"{\"torch\": \"2\", \"steps\": 2, \"cases\": [], \"extra\": 1}",
		/* one case, but lr_values too short */
		"{\"torch\": \"2\", \"steps\": 2, \"cases\": [{\"name\": \"c\", \"schedule\": \"constant\", "
		"\"optimizer\": \"sgd\", \"lr\": 0.1, \"warmup_epochs\": 0, \"warmup_factor\": 0.01, "
		"\"lr_step\": 0, \"lr_gamma\": 0.1, \"steps_per_epoch\": 1, \"epochs\": 2, "
		"\"lr_values\": [0.1], \"momentum_values\": null}]}",
		/* a string among the values */
		"{\"torch\": \"2\", \"steps\": 2, \"cases\": [{\"name\": \"c\", \"schedule\": \"constant\", "
		"\"optimizer\": \"sgd\", \"lr\": 0.1, \"warmup_epochs\": 0, \"warmup_factor\": 0.01, "
		"\"lr_step\": 0, \"lr_gamma\": 0.1, \"steps_per_epoch\": 1, \"epochs\": 2, "
		"\"lr_values\": [0.1, \"x\"], \"momentum_values\": null}]}",
		/* complete, but only one of the four schedules */
		"{\"torch\": \"2\", \"steps\": 2, \"cases\": [{\"name\": \"c\", \"schedule\": \"constant\", "
		"\"optimizer\": \"sgd\", \"lr\": 0.1, \"warmup_epochs\": 0, \"warmup_factor\": 0.01, "
		"\"lr_step\": 0, \"lr_gamma\": 0.1, \"steps_per_epoch\": 1, \"epochs\": 2, "
		"\"lr_values\": [0.1, 0.1], \"momentum_values\": null}]}",
		/* a duplicate key */
		"{\"torch\": \"2\", \"torch\": \"2\", \"steps\": 2, \"cases\": []}",
	};
	char path[512];
	snprintf(path, sizeof(path), "%s/ref.json", test_tmpdir());
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f = fopen(path, "w");
		CHECK(f != NULL);
		if (!f)
			return;
		fputs(bad[i], f);
		fclose(f);
		struct ref_case cases[4];
		json_t *doc = NULL;
		int n = 0;
		size_t steps = 0;
		CHECK_MSG(ref_load(path, &doc, cases, 4, &n, &steps) < 0, "bad reference %zu was taken", i);
		json_decref(doc);
	}
	gp_error_clear();
}

/* A complete reference is taken, and the comparison finds a step that is off: the
 * file written here from the engine's own values, one of them moved by 1e-6. */
TEST(schedule_reference_loader_takes_a_complete_file)
{
	static const char *const kinds[] = { "constant", "step", "cosine", "onecycle" };
	const int steps = 20;
	char path[512];
	snprintf(path, sizeof(path), "%s/ref.json", test_tmpdir());
	json_t *cs = json_array();
	for (int k = 0; k < 4; k++) {
		struct lr_schedule_cfg c = cfg((enum lr_schedule)k, k == 2 ? 1 : 0, 4, 6);
		c.step_epochs = k == 1 ? 2 : 0;
		json_t *lr = json_array(), *mom = k == 3 ? json_array() : json_null();
		for (int i = 0; i < steps; i++) {
			double m;
			json_array_append_new(lr, json_real(lr_schedule_lr(&c, i) + (k == 2 && i == 7 ? 1e-6 : 0)));
			if (lr_schedule_momentum(&c, i, &m))
				json_array_append_new(mom, json_real(m));
		}
		json_array_append_new(cs, json_pack("{s:s, s:s, s:s, s:f, s:i, s:f, s:i, s:f, s:i, s:i, s:o, s:o}",
			"name", kinds[k], "schedule", kinds[k], "optimizer", "sgd", "lr", 0.1,
			"warmup_epochs", c.warmup_epochs, "warmup_factor", 0.01, "lr_step", c.step_epochs,
			"lr_gamma", 0.1, "steps_per_epoch", 4, "epochs", 6, "lr_values", lr,
			"momentum_values", mom));
	}
	json_t *d = json_pack("{s:s, s:s, s:i, s:o}", "generator", "test", "torch", "none", "steps", steps,
			      "cases", cs);
	CHECK(d && json_dump_file(d, path, JSON_REAL_PRECISION(17)) == 0);
	json_decref(d);
	struct ref_case cases[4];
	json_t *doc = NULL;
	int n = 0;
	size_t got_steps = 0;
	CHECK_MSG(ref_load(path, &doc, cases, 4, &n, &got_steps) == 0, "%s", gp_errmsg());
	CHECK_EQ_INT(n, 4);
	CHECK_EQ_INT(got_steps, steps);
	for (int k = 0; k < n && !test_failed(); k++)
		for (int i = 0; i < steps; i++) {
			double d = fabs(lr_schedule_lr(&cases[k].cfg, i) -
					json_number_value(json_array_get(cases[k].lr, i)));
			CHECK_MSG((d > REF_TOL) == (k == 2 && i == 7), "case %d step %d: diff %.3g", k, i, d);
		}
	json_decref(doc);
	gp_error_clear();
}
