/* Options and outputs at their edges: every number bounded and finite, no empty
 * paths, results that survive a diverging run, and output locations proved before
 * the work. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
	struct scratch_req *req = net_scratch_reqs(net);
	CHECK(req != NULL);
	for (int i = 0; req && i < net->n_nodes; i++)
		if (net->nodes[i].op == OP_CONV2D)
			req[i].fwd_bytes = SIZE_MAX / 2;
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

/* A file where a folder should be: every command that writes refuses it at once,
 * before the first step, in one line. */
TEST(outputs_unwritable_locations_fail_before_the_work)
{
	const char *dir = test_tmpdir();
	char file[600], args[2048], out[16384];
	snprintf(file, sizeof(file), "%s/afile", dir);
	FILE *f = fopen(file, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fclose(f);
	static const char *cmds[] = {
		"train --device cpu --steps 200 --out %s",
		"train --device cpu --steps 200 --out %s/sub",
		"train --device cpu --steps 200 --save %s/w.safetensors",
		"train --device cpu --epochs 2 --profile-epochs 0 1 --out %s",
		"profile --device cpu --model simple_cnn --out %s",
		"compare --device cpu --models simple_cnn --out %s",
		"amp --device cpu --model simple_cnn --precisions fp32 --out %s",
		"maxbatch --device cpu --model simple_cnn --out %s",
		"workers --device cpu --data somewhere --out %s",
		"advise --device cpu --model simple_cnn --out %s",
		"dataset make --out %s/ds",
		"parity --model simple_cnn --load w --input in --out %s",
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char rest[1024];
		snprintf(rest, sizeof(rest), cmds[i], file);
		snprintf(args, sizeof(args), "%s 2>&1", rest);
		int rc = run(args, out, sizeof(out));
		CHECK_MSG(rc != 0, "'%s' exited 0", rest);
		CHECK_MSG(test_count_lines(out) == 1, "'%s' printed %d lines: %s", rest,
			  test_count_lines(out), out);
		CHECK_MSG(strstr(out, "cannot create directory") != NULL, "'%s' said: %s", rest, out);
	}
	/* --save naming a folder is refused before training, too */
	snprintf(args, sizeof(args), "train --device cpu --steps 200 --save %s --out %s/o", dir, dir);
	int rc = run(args, out, sizeof(out));
	CHECK_MSG(rc != 0 && test_count_lines(out) == 1 && strstr(out, "is a folder, not a file"),
		  "exit %d: %s", rc, out);
}

/* Without --out each run gets a folder of its own, also when runs start in the same
 * second, and results/latest names the newest. */
TEST(outputs_each_run_gets_a_new_folder)
{
	const char *dir = test_tmpdir();
	char cmd[2048], out[65536], path[2500], link[600], target[600], bin[PATH_MAX];
	if (!realpath(test_bin(), bin))
		snprintf(bin, sizeof(bin), "%s", test_bin());
	snprintf(cmd, sizeof(cmd), "cd %.400s && for i in 1 2 3; do GPUPERF_RESULTS=res %.1000s train "
		 "--device cpu --steps 1 --batch 2 --classes 10 > log$i 2>&1 & done; wait; "
		 "cat log1 log2 log3", dir, bin);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	char seen[3][600];
	int n = 0;
	for (const char *p = out; (p = strstr(p, "wrote res/train_")) && n < 3; p++) {
		CHECK_EQ_INT(sscanf(p, "wrote %599s", seen[n]), 1);
		snprintf(path, sizeof(path), "%s/%s", dir, seen[n]);
		FILE *f = fopen(path, "r");
		CHECK_MSG(f != NULL, "no %s", path);
		if (f)
			fclose(f);
		n++;
	}
	CHECK_EQ_INT(n, 3);
	if (n == 3) {
		CHECK(strcmp(seen[0], seen[1]) && strcmp(seen[0], seen[2]) && strcmp(seen[1], seen[2]));
	}
	/* the next run becomes latest */
	snprintf(cmd, sizeof(cmd), "cd %.400s && GPUPERF_RESULTS=res %.1000s train --device cpu --steps 1 "
		 "--batch 2 --classes 10", dir, bin);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	const char *w = strstr(out, "wrote res/");
	CHECK(w != NULL);
	snprintf(link, sizeof(link), "%s/res/latest", dir);
	ssize_t len = readlink(link, target, sizeof(target) - 1);
	CHECK(len > 0);
	if (w && len > 0) {
		target[len] = 0;
		char want[700];
		snprintf(want, sizeof(want), "wrote res/%s/train.json", target);
		CHECK_MSG(!strncmp(w, want, strlen(want)), "latest -> %s, but %s", target, w);
	}
}

/* An explicit --out that holds a result is refused, unless --overwrite. */
TEST(outputs_out_with_a_result_is_not_overwritten)
{
	const char *dir = test_tmpdir();
	char args[1024], out[65536], path[700];
	snprintf(args, sizeof(args), "train --device cpu --steps 1 --batch 2 --classes 10 --out %s/o",
		 dir);
	CHECK_EQ_INT(run(args, out, sizeof(out)), 0);
	snprintf(path, sizeof(path), "%s/o/train.json", dir);
	json_error_t jerr;
	json_t *first = json_load_file(path, 0, &jerr);
	CHECK(first != NULL);
	char want[900];
	snprintf(want, sizeof(want), "'%s' holds an earlier result", path);
	check_bad_option(args, want);
	json_t *again = json_load_file(path, 0, &jerr);
	CHECK(first && again && json_equal(first, again));
	strcat(args, " --overwrite");
	CHECK_EQ_INT(run(args, out, sizeof(out)), 0);
	json_t *third = json_load_file(path, 0, &jerr);
	CHECK(third && first && !json_equal(first, third)); /* a new start time */
	json_decref(first);
	json_decref(again);
	json_decref(third);
	/* profile's result is result.json */
	snprintf(args, sizeof(args), "profile --device cpu --model simple_cnn --batch 2 --classes 10 "
		 "--steps 1 --baseline-steps 1 --out %s/o", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/o/result.json", dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	snprintf(want, sizeof(want), "'%s' holds an earlier result", path);
	check_bad_option(args, want);
}

/* Run gpuperf with args in the background, and once it printed its first step,
 * replace what sits at victim with a file: the write at the end then fails. */
static int run_then_block(const char *args, const char *victim, char *out, size_t cap)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd),
		 "%.500s %.1000s > %.300s.log 2>&1 & pid=$!; "
		 "while ! grep -q 'step ' %.300s.log && kill -0 $pid 2>/dev/null; do sleep 0.01; done; "
		 "rm -rf %.300s && touch %.300s; wait $pid; rc=$?; cat %.300s.log; exit $rc",
		 test_bin(), args, victim, victim, victim, victim, victim);
	return test_run(cmd, out, cap);
}

/* The folder of --save is gone when training ends: the result is written all the
 * same, and the run ends with the save's error. */
TEST(outputs_failed_save_keeps_the_result)
{
	const char *dir = test_tmpdir();
	char args[1024], out[65536], victim[600], path[700];
	snprintf(victim, sizeof(victim), "%s/sv", dir);
	snprintf(args, sizeof(args), "train --device cpu --steps 100 --batch 1 --classes 10 "
		 "--save %s/w.safetensors --out %s/o", victim, dir);
	int rc = run_then_block(args, victim, out, sizeof(out));
	CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "gpuperf train: error: ") != NULL, "said: %s", out);
	snprintf(path, sizeof(path), "%s/o/train.json", dir);
	json_error_t jerr;
	json_t *res = json_load_file(path, 0, &jerr);
	CHECK_MSG(res != NULL, "%s: %s", path, jerr.text);
	CHECK(strstr(out, "wrote ") != NULL);
	json_decref(res);
}

/* The result folder is gone when training ends: the result comes on stdout as JSON,
 * then one error line. */
TEST(outputs_failed_result_write_prints_the_result)
{
	const char *dir = test_tmpdir();
	char args[1024], out[65536], victim[600];
	snprintf(victim, sizeof(victim), "%s/o", dir);
	snprintf(args, sizeof(args), "train --device cpu --steps 100 --batch 1 --classes 10 --out %s",
		 victim);
	int rc = run_then_block(args, victim, out, sizeof(out));
	CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
	const char *j = strstr(out, "\n{\n");
	CHECK_MSG(j != NULL, "no JSON in: %s", out);
	if (!j)
		return;
	json_error_t jerr;
	json_t *res = json_loads(j + 1, JSON_DISABLE_EOF_CHECK, &jerr);
	CHECK_MSG(res != NULL, "%s", jerr.text);
	CHECK(json_is_string(json_object_get(res, "command")));
	CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(res, "measurements"), "steps")),
		     100);
	json_decref(res);
	const char *e = strstr(j, "gpuperf train: error: cannot");
	CHECK_MSG(e != NULL, "said: %s", j);
	CHECK(e && test_count_lines(e) == 1);
}

/* A run that fails before writing anything leaves no empty run folder, and latest
 * still names the last run that did. */
TEST(outputs_failed_run_leaves_no_empty_folder)
{
	const char *dir = test_tmpdir();
	char cmd[4096], out[65536], link[700], target[600], bin[PATH_MAX];
	if (!realpath(test_bin(), bin))
		snprintf(bin, sizeof(bin), "%s", test_bin());
	snprintf(cmd, sizeof(cmd), "cd %.400s && GPUPERF_RESULTS=res %.1000s train --device cpu "
		 "--model vgg16", dir, bin);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 2);
	/* (a bad model is refused before any folder is made) */
	snprintf(cmd, sizeof(cmd), "cd %.400s && { [ ! -e res ] || ls -A res; }", dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(out[0] == 0, "res/ holds: %s", out);
	snprintf(cmd, sizeof(cmd), "cd %.400s && GPUPERF_RESULTS=res %.1000s train --device cpu "
		 "--steps 1 --batch 2 --classes 10 && GPUPERF_RESULTS=res %.1000s train --device cpu "
		 "--load nowhere.safetensors 2>&1; ls res", dir, bin, bin);
	CHECK(test_run(cmd, out, sizeof(out)) == 0);
	CHECK_MSG(strstr(out, "cannot open 'nowhere.safetensors'") != NULL, "said: %s", out);
	snprintf(link, sizeof(link), "%s/res/latest", dir);
	ssize_t len = readlink(link, target, sizeof(target) - 1);
	CHECK(len > 0);
	if (len > 0) {
		target[len] = 0;
		char want[700];
		snprintf(want, sizeof(want), "wrote res/%s/train.json", target);
		CHECK_MSG(strstr(out, want) != NULL, "latest -> %s: %s", target, out);
		/* only the good run's folder and latest */
		const char *ls = strstr(out, "latest\n");
		CHECK(ls && test_count_lines(ls) == 2);
	}
}
