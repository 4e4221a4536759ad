/* Options and outputs at their edges: every number bounded and finite, no empty
 * paths, results that survive a diverging run, and output locations proved before
 * the work. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "nn/models.h"
#include "report/result.h"
#include "test.h"

static int run(const char *args, char *out, size_t cap)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "%.500s %.3500s", test_bin(), args);
	return test_run(cmd, out, cap);
}

/* Bad options: exit 2 and one line that contains needle. */
static void check_bad_option(const char *args, const char *needle)
{
	char out[4096];
	int rc = run(args, out, sizeof(out));
	CHECK_MSG(rc == 2, "'%.80s' exited %d, expected 2: %s", args, rc, out);
	CHECK_MSG(test_count_lines(out) == 1, "'%.80s' printed %d lines: %s", args,
		  test_count_lines(out), out);
	CHECK_MSG(strstr(out, needle) != NULL, "'%.80s' said '%s', expected '%s'", args, out,
		  needle);
}

TEST(outputs_integer_options_have_upper_bounds)
{
	check_bad_option("train --device cpu --batch 99999999999",
			 "--batch must be between 1 and 65536 (got 99999999999)");
	check_bad_option("train --device cpu --batch 0", "--batch must be between 1 and 65536 (got 0)");
	check_bad_option("train --device cpu --steps 2147483647",
			 "--steps must be between 1 and 10000000 (got 2147483647)");
	check_bad_option("profile --device cpu --steps 2147483647",
			 "--steps must be between 1 and 10000000 (got 2147483647)");
	check_bad_option("train --device cpu --data /nonexistent --workers 4 --prefetch 1073741824",
			 "--prefetch must be between 1 and 64 (got 1073741824)");
	check_bad_option("info --model resnet50 --batch 2147483647 --size 4096",
			 "--batch must be between 1 and 65536 (got 2147483647)");
	check_bad_option("info --model resnet50 --size 100000", "--size must be between 8 and 4096");
	check_bad_option("amp --device cpu --batches 8,99999999999999999999999",
			 "--batches must be between 1 and 65536 (got 99999999999999999999999)");
	/* the bounds are in the help */
	char out[16384];
	CHECK_EQ_INT(run("train --help", out, sizeof(out)), 0);
	CHECK(strstr(out, "batch size (32) [1..65536]") != NULL);
	CHECK(strstr(out, "learning rate (0.01) (0..inf)") != NULL);
	CHECK(strstr(out, "(0 disables) [0..1)") != NULL);
}

/* A list is read whole however long its text: 31 zero-padded epochs (over 511
 * characters) and then 31; a cut list loses the last value and reads a part of one. */
TEST(outputs_long_lists_are_read_whole)
{
	char list[1024] = "", args[2048];
	size_t len = 0;
	for (int i = 0; i <= 31; i++)
		len += snprintf(list + len, sizeof(list) - len, "%s%018d", i ? "," : "", i);
	CHECK(len > 511);
	snprintf(args, sizeof(args), "train --device cpu --epochs 31 --profile-epochs %s", list);
	check_bad_option(args, "--profile-epochs 31 is beyond --epochs 31");
	/* more values than a list holds is an error, not a cut */
	len = 0;
	for (int i = 0; i < 40; i++)
		len += snprintf(list + len, sizeof(list) - len, "%s%d", i ? "," : "", i + 1);
	snprintf(args, sizeof(args), "amp --device cpu --batches %s", list);
	check_bad_option(args, "--batches: more than 32 values");
}

TEST(outputs_real_options_are_finite_and_in_range)
{
	check_bad_option("train --device cpu --lr nan", "--lr must be a finite number (got nan)");
	check_bad_option("train --device cpu --lr inf", "--lr must be a finite number (got inf)");
	check_bad_option("train --device cpu --momentum -inf", "--momentum must be a finite number");
	check_bad_option("train --device cpu --weight-decay nan", "--weight-decay must be a finite number");
	check_bad_option("train --device cpu --lr 1e999", "--lr must be a finite number (got 1e999)");
	check_bad_option("train --device cpu --lr 0", "--lr must be greater than 0 (got 0)");
	check_bad_option("train --device cpu --momentum 1.5",
			 "--momentum must be at least 0 and at most 1 (got 1.5)");
	check_bad_option("train --device cpu --weight-decay -0.1",
			 "--weight-decay must be at least 0 (got -0.1)");
	check_bad_option("train --device cpu --dropout 1",
			 "--dropout must be at least 0 and less than 1 (got 1)");
	check_bad_option("parity --lr nan", "--lr must be a finite number (got nan)");
	check_bad_option("workers --data x --interval nan", "--interval must be a finite number");
	check_bad_option("monitor --interval 0", "--interval must be at least 0.01 and at most 3600 (got 0)");
}

TEST(outputs_empty_paths_are_refused)
{
	check_bad_option("train --device cpu --out ''", "--out: empty path");
	check_bad_option("train --device cpu --save ''", "--save: empty path");
	check_bad_option("train --device cpu --load ''", "--load: empty path");
	check_bad_option("train --device cpu --data ''", "--data: empty path");
	check_bad_option("dataset make --out ''", "--out: empty path");
	check_bad_option("profile --device cpu --out ''", "--out: empty path");
	check_bad_option("parity --out ''", "--out: empty path");
	check_bad_option("plot x.json --out ''", "--out: empty path");
	/* "cifar10:" with no folder would read /data_batch_1.bin */
	char out[4096];
	int rc = run("train --device cpu --steps 1 --data cifar10: --out /nonexistent_gp", out,
		     sizeof(out));
	CHECK_MSG(rc == 2, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "dataset 'cifar10:' names no folder") != NULL, "said: %s", out);
	CHECK(strstr(out, "data_batch_1.bin") == NULL);
}

TEST(outputs_result_real_turns_non_finite_into_null)
{
	json_t *v = result_real(NAN);
	CHECK(json_is_null(v));
	json_decref(v);
	v = result_real(-INFINITY);
	CHECK(json_is_null(v));
	json_decref(v);
	v = result_real(2.5);
	CHECK(json_is_real(v) && json_real_value(v) == 2.5);
	json_decref(v);
}

/* A plan whose byte counts would wrap 64 bits is an error, not a small number. */
TEST(outputs_memory_plan_checks_overflow)
{
	struct model_opts o = model_defaults("simple_cnn");
	o.batch = 2;
	o.classes = 10;
	struct net *net = NULL;
	CHECK_EQ_INT(model_build("simple_cnn", &o, &net), 0);
	if (!net)
		return;
	CHECK_EQ_INT(net_plan_memory(net, 1, 4, 0), 0);
	CHECK(net->plan.total_bytes > 0);
	CHECK_EQ_INT(net_plan_memory(net, 1, 4, SIZE_MAX - 1000), GP_EINVAL);
	CHECK(strstr(gp_errmsg(), "exceeds 64-bit byte counts") != NULL);
	for (int i = 0; i < net->n_nodes; i++)
		if (net->nodes[i].op == OP_CONV2D)
			net->nodes[i].ws_fwd = SIZE_MAX / 2;
	CHECK_EQ_INT(net_plan_memory(net, 1, 4, 0), GP_EINVAL);
	net_free(net);
}

/* lr 2 diverges within a few steps: the run still ends well and its result has the
 * non-finite loss as null and the step where it first read non-finite. */
TEST(outputs_diverging_run_keeps_its_result)
{
	char args[1024], out[65536], path[600];
	const char *dir = test_tmpdir();
	snprintf(args, sizeof(args), "train --device cpu --batch 8 --steps 20 --lr 2 --classes 10 "
		 "--out %s/diverge", dir);
	int rc = run(args, out, sizeof(out));
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	const char *w = strstr(out, "warning: the loss became NaN at step ");
	CHECK_MSG(w != NULL, "no warning in: %s", out);
	CHECK(w && strstr(w + 1, "warning:") == NULL); /* once */
	int warned = w ? atoi(w + strlen("warning: the loss became NaN at step ")) : 0;
	snprintf(path, sizeof(path), "%s/diverge/train.json", dir);
	json_error_t jerr;
	json_t *res = json_load_file(path, 0, &jerr);
	CHECK_MSG(res != NULL, "%s: %s", path, jerr.text);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements");
	CHECK(json_is_real(json_object_get(m, "first_loss")));
	CHECK(json_is_null(json_object_get(m, "last_loss")));
	json_t *step = json_object_get(m, "nonfinite_loss_step");
	CHECK(json_is_integer(step));
	CHECK(json_integer_value(step) >= 2 && json_integer_value(step) <= 20);
	CHECK_EQ_INT(json_integer_value(step), warned);
	json_decref(res);
}
