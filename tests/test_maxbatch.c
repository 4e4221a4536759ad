/* gpuperf maxbatch on the CPU under a memory cap: the answer is exactly the largest
 * batch whose plan fits, the trials follow doubling and then bisection, every
 * out-of-memory is recovered from with nothing left allocated, and the chart is drawn. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "nn/models.h"
#include "report/plots.h"
#include "report/result.h"
#include "test.h"

#define LIMIT_MIB 40
#define LIMIT_BYTES ((size_t)LIMIT_MIB << 20)

static struct net *simple_cnn32(void)
{
	struct model_opts mo = model_defaults("simple_cnn");
	struct net *net = NULL;
	CHECK_EQ_INT(model_build("simple_cnn", &mo, &net), 0);
	return net;
}

/* The bytes net_setup plans for the CPU at batch, found by setting up without a cap. */
static size_t planned_bytes(struct net *net, int batch)
{
	size_t saved = net->mem_limit_bytes, bytes = 0;
	net->mem_limit_bytes = 0;
	CHECK_EQ_INT(net_set_batch(net, batch), 0);
	CHECK_EQ_INT(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32), 0);
	bytes = net->plan.total_bytes;
	net_teardown(net);
	net->mem_limit_bytes = saved;
	return bytes;
}

TEST(maxbatch_mem_limit_fails_cleanly)
{
	struct net *net = simple_cnn32();
	if (!net)
		return;
	size_t b64 = planned_bytes(net, 64);
	net->mem_limit_bytes = b64;
	CHECK_EQ_INT(net_set_batch(net, 64), 0);
	CHECK_EQ_INT(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32), 0);
	CHECK(net->mem.total_bytes > 0 && net->mem.total_bytes <= b64);
	net_teardown(net);
	CHECK_EQ_INT(net->mem.total_bytes, 0);
	CHECK_EQ_INT(net_set_batch(net, 65), 0);
	int rc = net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32);
	CHECK_EQ_INT(rc, GP_ENOMEM);
	CHECK(strstr(gp_errmsg(), "batch 65 needs") != NULL);
	CHECK(strstr(gp_errmsg(), "over the memory limit") != NULL);
	CHECK(net->bk == NULL);
	CHECK_EQ_INT(net->mem.total_bytes, 0);
	/* and the net still works at a batch that fits */
	CHECK_EQ_INT(net_set_batch(net, 8), 0);
	CHECK_EQ_INT(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32), 0);
	CHECK(net->bk != NULL);
	net_free(net);
}

TEST(maxbatch_cpu_finds_the_plan_answer)
{
	struct net *net = simple_cnn32();
	if (!net)
		return;
	/* Expected: the largest batch whose plan fits, by a plain scan; and the largest
	 * that leaves the default 5% margin (the CPU's peak is its plan). */
	int expected = 0, expected_rec = 0, fits[1024] = { 0 };
	for (int b = 1; b < 1024; b++) {
		size_t bytes = planned_bytes(net, b);
		fits[b] = bytes <= LIMIT_BYTES;
		if (bytes <= 0.95 * LIMIT_BYTES)
			expected_rec = b;
		if (fits[b])
			expected = b;
		else
			break;
	}
	net_free(net);
	CHECK(expected > 8 && expected < 512);
	CHECK(expected_rec > 8 && expected_rec < expected);
	/* The trial sequence doubling from 8 and then bisecting must produce. */
	int seq[64], n_seq = 0, lo = 0, hi = 0;
	for (int b = 8; !hi; b *= 2) {
		seq[n_seq++] = b;
		if (b <= expected)
			lo = b;
		else
			hi = b;
	}
	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2;
		seq[n_seq++] = mid;
		if (mid <= expected)
			lo = mid;
		else
			hi = mid;
	}
	CHECK_EQ_INT(lo, expected);

	char dir[512], cmd[2048], out[16384], path[600];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s maxbatch --model simple_cnn --size 32 --device cpu "
		 "--mem-limit-mib %d --start 8 --out %s --csv", test_bin(), LIMIT_MIB, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "maxbatch exited %d: %s", rc, out);
	char want[64];
	snprintf(want, sizeof(want), "largest batch %d ", expected);
	CHECK_MSG(strstr(out, want) != NULL, "expected '%s' in: %s", want, out);
	snprintf(path, sizeof(path), "%s/batch_size_memory_usage.png", dir);
	CHECK(strstr(out, path) != NULL);

	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/maxbatch.json", dir);
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements");
	CHECK(!strcmp(json_string_value(json_object_get(m, "model")), "simple_cnn"));
	CHECK(!strcmp(json_string_value(json_object_get(m, "precision")), "fp32"));
	CHECK_NEAR(json_number_value(json_object_get(m, "capacity_mib")), LIMIT_MIB, 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "max_batch")), expected);
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "predicted_max_batch")), expected);
	CHECK(json_number_value(json_object_get(m, "search_s")) > 0);
	/* the answer confirmed over 5 steps, and the batch that keeps 5% free */
	char rec_line[96];
	snprintf(rec_line, sizeof(rec_line), "recommended batch %d: ", expected_rec);
	CHECK_MSG(strstr(out, rec_line) != NULL, "expected '%s' in: %s", rec_line, out);
	CHECK(!strcmp(json_string_value(json_object_get(m, "device")), "cpu"));
	/* the train command keeps the search's memory savings (recompute) */
	char train_cmd[256];
	snprintf(train_cmd, sizeof(train_cmd), "gpuperf train --model simple_cnn --device cpu "
		 "--precision fp32 --size 32 --classes 1000 --batch %d --recompute", expected_rec);
	const char *tc = json_string_value(json_object_get(m, "train_command"));
	CHECK_MSG(tc && !strcmp(tc, train_cmd), "train_command: %s", tc ? tc : "(none)");
	CHECK(strstr(out, train_cmd) != NULL);
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "largest_batch")), expected);
	CHECK(json_is_true(json_object_get(m, "confirmed")));
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "confirm_steps")), 5);
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "recommended_batch")), expected_rec);
	CHECK(json_is_true(json_object_get(m, "recommended_confirmed")));
	CHECK_NEAR(json_number_value(json_object_get(m, "margin_pct")), 5, 0);
	CHECK_NEAR(json_number_value(json_object_get(m, "margin_mib")), 0.05 * LIMIT_MIB, 1e-9);
	double rec_mib = json_number_value(json_object_get(m, "recommended_mib"));
	CHECK(rec_mib > 0.8 * LIMIT_MIB && rec_mib <= 0.95 * LIMIT_MIB);
	CHECK(json_number_value(json_object_get(m, "largest_mib")) > 0.95 * LIMIT_MIB);
	CHECK(!strcmp(json_string_value(json_object_get(m, "memory_compared")), "peak_alloc_mib"));
	json_t *conf = json_object_get(m, "confirmations");
	size_t n_conf = json_array_size(conf);
	CHECK(n_conf >= 2);
	if (n_conf >= 2) {
		json_t *c0 = json_array_get(conf, 0), *cl = json_array_get(conf, n_conf - 1);
		CHECK_EQ_INT(json_integer_value(json_object_get(c0, "batch")), expected);
		CHECK(!strcmp(json_string_value(json_object_get(c0, "purpose")), "largest"));
		CHECK_EQ_INT(json_integer_value(json_object_get(c0, "steps")), 5);
		CHECK(json_is_true(json_object_get(c0, "ok")));
		CHECK_EQ_INT(json_integer_value(json_object_get(cl, "batch")), expected_rec);
		CHECK(!strcmp(json_string_value(json_object_get(cl, "purpose")), "recommended"));
		CHECK(json_is_true(json_object_get(cl, "ok")));
		CHECK_NEAR(json_number_value(json_object_get(cl, "peak_alloc_mib")), rec_mib, 1e-9);
	}
	json_t *trials = json_object_get(m, "trials");
	CHECK_EQ_INT(json_array_size(trials), n_seq);
	for (size_t i = 0; i < json_array_size(trials) && i < (size_t)n_seq; i++) {
		json_t *t = json_array_get(trials, i);
		int b = (int)json_integer_value(json_object_get(t, "batch"));
		CHECK_EQ_INT(b, seq[i]);
		int ok = json_is_true(json_object_get(t, "ok"));
		CHECK_EQ_INT(ok, b <= expected);
		double pred = json_number_value(json_object_get(t, "predicted_mib"));
		CHECK(pred > 0);
		CHECK_EQ_INT(pred <= LIMIT_MIB, ok);
		if (ok) {
			double peak = json_number_value(json_object_get(t, "peak_alloc_mib"));
			CHECK(peak > 0 && peak <= LIMIT_MIB);
			CHECK_NEAR(peak, pred, 1e-3); /* the CPU allocates the plan */
			CHECK(json_number_value(json_object_get(t, "process_mib")) > 0);
			CHECK(json_number_value(json_object_get(t, "step_ms")) > 0);
			CHECK(json_object_get(t, "error") == NULL);
		} else {
			CHECK(json_object_get(t, "peak_alloc_mib") == NULL);
			CHECK(json_object_get(t, "step_ms") == NULL);
			const char *err = json_string_value(json_object_get(t, "error"));
			CHECK(err && strstr(err, "over the memory limit of 40.0 MiB"));
		}
	}
	json_decref(res);

	unsigned char png[8] = { 0 };
	snprintf(path, sizeof(path), "%s/batch_size_memory_usage.png", dir);
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL);
	if (f) {
		CHECK_EQ_INT(fread(png, 1, 8, f), 8);
		fclose(f);
	}
	CHECK(!memcmp(png, "\x89PNG\r\n\x1a\n", 8));
	char csv[4096];
	snprintf(path, sizeof(path), "%s/maxbatch.csv", dir);
	f = fopen(path, "rb");
	CHECK(f != NULL);
	if (f) {
		size_t n = fread(csv, 1, sizeof(csv) - 1, f);
		csv[n] = 0;
		fclose(f);
		CHECK(!strncmp(csv, "batch,result,predicted MiB,peak alloc MiB,process MiB,step ms\r\n", 63));
		CHECK_EQ_INT(test_count_lines(csv), n_seq + 1);
	}
}

/* A first batch that does not fit: bisection down from it still finds the answer. */
TEST(maxbatch_start_too_large_bisects_down)
{
	char dir[512], cmd[2048], out[16384], path[600];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s maxbatch --model simple_cnn --size 32 --device cpu "
		 "--mem-limit-mib %d --start 1000 --confirm-steps 0 --out %s", test_bin(), LIMIT_MIB, dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "maxbatch exited %d: %s", rc, out);
	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/maxbatch.json", dir);
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements");
	json_t *t0 = json_array_get(json_object_get(m, "trials"), 0);
	CHECK_EQ_INT(json_integer_value(json_object_get(t0, "batch")), 1000);
	CHECK(json_is_false(json_object_get(t0, "ok")));
	json_t *t1 = json_array_get(json_object_get(m, "trials"), 1);
	CHECK_EQ_INT(json_integer_value(json_object_get(t1, "batch")), 500);
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "max_batch")),
		     json_integer_value(json_object_get(m, "predicted_max_batch")));
	CHECK(json_integer_value(json_object_get(m, "max_batch")) > 8);
	json_decref(res);
}

TEST(maxbatch_bad_input_one_clear_line)
{
	test_check_bad("maxbatch --model vgg16 --device cpu --mem-limit-mib 40", "unknown model 'vgg16'");
	test_check_bad("maxbatch --model simple_cnn --device cpu --start 0", "--start must be between 1 and 65536 (got 0)");
	test_check_bad("maxbatch --model simple_cnn --device cpu --mem-limit-mib 0",
		  "--mem-limit-mib must be between 1 and 16777216 (got 0)");
	test_check_bad("maxbatch --model simple_cnn --device cpu --mem-limit-mib 40 --margin 100",
		       "--margin must be a percent from 0 to below 100 (got 100)");
	test_check_bad("maxbatch --model simple_cnn --device cpu --mem-limit-mib 40 --margin -1",
		       "--margin must be a percent from 0 to below 100 (got -1)");
}

/* Nothing fits: the trials are still written, and the exit says so. */
TEST(maxbatch_nothing_fits_is_an_error)
{
	char cmd[2048], out[16384];
	snprintf(cmd, sizeof(cmd), "%s maxbatch --model simple_cnn --device cpu --mem-limit-mib 1 "
		 "--start 4 --out %s", test_bin(), test_tmpdir());
	CHECK(test_run(cmd, out, sizeof(out)) != 0);
	CHECK(strstr(out, "error: simple_cnn does not train even at batch 1 in 1 MiB") != NULL);
	CHECK(strstr(out, "batch      1  OOM") != NULL);
	CHECK(strstr(out, "maxbatch.json") != NULL);
}

/* Without confirmation the recommended batch is the straight line between the
 * measured batches around capacity less the margin, and is said to be interpolated;
 * with no margin it is the largest batch itself. */
TEST(maxbatch_margin_and_no_confirmation)
{
	char dir[512], cmd[2048], out[16384], path[600];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s maxbatch --model simple_cnn --size 32 --device cpu "
		 "--mem-limit-mib %d --confirm-steps 0 --margin 20 --out %s", test_bin(), LIMIT_MIB, dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK(strstr(out, "interpolated") != NULL);
	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/maxbatch.json", dir);
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements");
	CHECK(json_is_false(json_object_get(m, "confirmed")));
	CHECK(json_is_false(json_object_get(m, "recommended_confirmed")));
	CHECK_EQ_INT(json_array_size(json_object_get(m, "confirmations")), 0);
	CHECK_NEAR(json_number_value(json_object_get(m, "margin_mib")), 8, 1e-9);
	int largest = (int)json_integer_value(json_object_get(m, "largest_batch"));
	int rec = (int)json_integer_value(json_object_get(m, "recommended_batch"));
	CHECK_EQ_INT(largest, json_integer_value(json_object_get(m, "max_batch")));
	double rec_mib = json_number_value(json_object_get(m, "recommended_mib"));
	CHECK_MSG(rec > 8 && rec < largest && rec_mib <= 32 && rec_mib > 25,
		  "recommended %d at %.2f MiB (largest %d)", rec, rec_mib, largest);
	/* the interpolation between the trials that ran on either side of the 32 MiB
	 * target: the largest batch under it and the smallest over it (64 and 80 images
	 * since max pooling keeps a byte per output; 32 and 64 before) */
	int lo = 0, hi = 0;
	double m_lo = 0, m_hi = 0;
	json_t *trials = json_object_get(m, "trials");
	for (size_t i = 0; i < json_array_size(trials); i++) {
		json_t *t = json_array_get(trials, i);
		int b = (int)json_integer_value(json_object_get(t, "batch"));
		json_t *jm = json_object_get(t, "peak_alloc_mib");
		if (!json_is_number(jm)) /* out of memory */
			continue;
		double mib = json_number_value(jm);
		if (mib <= 32 && b > lo) {
			lo = b;
			m_lo = mib;
		}
		if (mib > 32 && (hi == 0 || b < hi)) {
			hi = b;
			m_hi = mib;
		}
	}
	CHECK_MSG(lo > 0 && hi > lo, "bracket %d (%.2f MiB) .. %d (%.2f MiB)", lo, m_lo, hi, m_hi);
	if (hi > lo)
		CHECK_EQ_INT(rec, lo + (int)((32 - m_lo) * (hi - lo) / (m_hi - m_lo)));
	json_decref(res);

	snprintf(cmd, sizeof(cmd), "%s maxbatch --model simple_cnn --size 32 --device cpu "
		 "--mem-limit-mib %d --confirm-steps 2 --margin 0 --out %s --overwrite", test_bin(), LIMIT_MIB, dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	m = json_object_get(res, "measurements");
	CHECK(json_is_true(json_object_get(m, "confirmed")));
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "recommended_batch")),
		     json_integer_value(json_object_get(m, "largest_batch")));
	CHECK_EQ_INT(json_array_size(json_object_get(m, "confirmations")), 1);
	json_decref(res);
}

static long file_bytes(const char *path, unsigned char *buf, long cap)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	long n = (long)fread(buf, 1, cap, f);
	fclose(f);
	return n;
}

/* The chart speaks of host memory on the CPU (the same result with "device": "cuda"
 * draws the GPU chart, byte for byte), and marks the largest and the recommended
 * batch where the result has them: the first failure folds into the largest's mark. */
TEST(maxbatch_chart_device_words_and_marks)
{
	json_t *res = NULL;
	if (result_read("tests/data/sample_maxbatch.json", &res) < 0)
		SKIP("tests/data/sample_maxbatch.json not readable (run from the repository root)");
	static unsigned char a[1 << 20], b[1 << 20];
	char dir[512], path[600];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(path, sizeof(path), "%s/batch_size_memory_usage.png", dir);
	json_t *m = json_object_get(res, "measurements");
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	long na = file_bytes(path, a, sizeof(a));
	json_object_set_new(m, "device", json_string("cuda"));
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	long nb = file_bytes(path, b, sizeof(b));
	CHECK(na > 0 && na == nb && !memcmp(a, b, na));
	json_object_set_new(m, "device", json_string("cpu"));
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	nb = file_bytes(path, b, sizeof(b));
	CHECK(nb > 0 && (nb != na || memcmp(a, b, na)));

	struct test_pixel_counts pc;
	json_object_set_new(m, "device", json_string("cuda"));
	test_check_png(path, 900, 560, &pc);
	CHECK(pc.red > 150); /* the out-of-memory dot */
	double cap = json_number_value(json_object_get(m, "capacity_mib"));
	json_int_t maxb = json_integer_value(json_object_get(m, "max_batch"));
	json_object_set_new(m, "largest_batch", json_integer(maxb));
	json_object_set_new(m, "largest_mib", json_real(0.99 * cap));
	json_object_set_new(m, "recommended_batch", json_integer(maxb * 9 / 10));
	json_object_set_new(m, "recommended_mib", json_real(0.93 * cap));
	json_object_set_new(m, "margin_pct", json_real(5));
	json_object_set_new(m, "margin_mib", json_real(0.05 * cap));
	CHECK_EQ_INT(plots_draw(res, dir), 0);
	test_check_png(path, 900, 560, &pc);
	CHECK_MSG(pc.red < 20, "%ld red pixels: the failure should fold into the largest's mark", pc.red);
	nb = file_bytes(path, b, sizeof(b));
	CHECK(nb > 0 && (nb != na || memcmp(a, b, na)));
	json_decref(res);
}
