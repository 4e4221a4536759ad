/* Hostile numbers: times and batches beyond what the program can represent are
 * refused in one line. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "test.h"

/* analyze with times no int64_t holds: one line naming the field, no undefined
 * behaviour (the sanitizer build aborts on any). */
TEST(scale_analyze_refuses_out_of_range_times)
{
	static const char *const cases[][2] = {
		{ "\"baseTimeNanoseconds\":9223372036854775807,", "\"baseTimeNanoseconds\" must be an integer from 0 to" },
		{ "\"baseTimeNanoseconds\":-1,", "\"baseTimeNanoseconds\" must be an integer from 0 to" },
		{ "\"baseTimeNanoseconds\":1e300,", "\"baseTimeNanoseconds\" must be an integer from 0 to" },
		{ "", "event 0 (\"ProfilerStep#1\"): \"dur\" of -1e+12 us is outside 0 .. 1e+13" },
		{ "", "event 0 (\"ProfilerStep#1\"): \"ts\" of 1e+300 us is outside -1e+15 .. 1e+15" },
	};
	static const char *const events[] = {
		"{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"ts\":0,\"dur\":10}",
		"{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"ts\":0,\"dur\":10}",
		"{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"ts\":0,\"dur\":10}",
		"{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"ts\":5,\"dur\":-1e12}",
		"{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#1\",\"ts\":1e300,\"dur\":1}",
	};
	for (int i = 0; i < 5; i++) {
		const char *dir = test_tmpdir();
		char path[600], cmd[1024], out[4096];
		snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
		FILE *f = fopen(path, "w");
		CHECK(f != NULL);
		if (!f)
			return;
		fprintf(f, "{%s\"traceEvents\":[%s]}\n", cases[i][0], events[i]);
		fclose(f);
		snprintf(cmd, sizeof(cmd), "%s analyze '%s'", test_bin(), dir);
		int rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc == 1, "case %d exited %d: %s", i, rc, out);
		CHECK_MSG(test_count_lines(out) == 1 && strstr(out, cases[i][1]), "case %d: %s", i, out);
	}
	/* The largest accepted values still analyse (a step 1e13 us long, 115 days). */
	const char *dir = test_tmpdir();
	char path[600], cmd[1024], out[8192];
	snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fprintf(f, "{\"baseTimeNanoseconds\":4000000000000000000,\"traceEvents\":["
		   "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#99999999999\","
		   "\"ts\":1e15,\"dur\":1e13},{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\","
		   "\"ts\":-1e15,\"dur\":1e13}]}\n");
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s analyze '%s'", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	CHECK(strstr(out, "2147483647 10000000000.000") != NULL); /* step number saturated */
}

/* An amp result of n cells: precisions fp32 and bf16 over n / 2 batches, in
 * descending order (the worst case of an insertion sort). */
static int amp_result_write(const char *path, int n, double first_batch)
{
	json_t *cells = json_array();
	for (int i = 0; i < n; i++) {
		double batch = i < 2 ? first_batch : (double)(n - i / 2);
		int fp32 = i % 2 == 0;
		json_array_append_new(cells, json_pack("{s:s, s:f, s:s, s:f, s:o}", "precision",
						       fp32 ? "fp32" : "bf16", "batch", batch,
						       "status", "ok", "img_s", batch * (fp32 ? 1 : 2),
						       "speedup", fp32 ? json_null() : json_real(2)));
	}
	json_t *res = json_pack("{s:s, s:s, s:{}, s:{s:s, s:o}}", "schema", "gpuperf.result/1",
				"command", "amp", "settings", "measurements", "model", "resnet50",
				"cells", cells);
	int rc = json_dump_file(res, path, JSON_COMPACT);
	json_decref(res);
	return rc;
}

/* A batch of 1e308 overflowed the conversion to long long (undefined behaviour). */
TEST(scale_plot_refuses_huge_batch)
{
	char path[600], cmd[1024];
	snprintf(path, sizeof(path), "%s/huge.json", test_tmpdir());
	CHECK_EQ_INT(amp_result_write(path, 4, 1e308), 0);
	snprintf(cmd, sizeof(cmd), "plot '%s'", path);
	test_check_bad(cmd, "amp cell 0: \"batch\" must be from 1 to 2147483647 (got 1e+308)");
}
