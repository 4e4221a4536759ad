/* The trace event scanner: what it takes it reads exactly as jansson does (the
 * value, the type, where the event ends), what it declines goes to jansson, and the
 * reader gives the same trace and the same error messages either way. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "report/chrome_trace.h"
#include "core/trace.h"
#include "report/trace_event.h"
#include "test.h"

/* Scan text; when taken, jansson must read the same. Returns whether it was taken;
 * *ev gets the scanned fields. */
static int scan_and_compare(const char *text, struct trace_event *ev)
{
	const char *end = text + strlen(text), *next = NULL;
	if (!trace_event_scan(text, end, ev, &next))
		return 0;
	json_error_t err;
	json_t *v = json_loadb(text, strlen(text), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &err);
	CHECK_MSG(v != NULL, "%s: taken, but jansson says %s", text, err.text);
	if (!v)
		return 1;
	CHECK_MSG(text + err.position == next, "%s: ends at %td, jansson at %d", text,
		  next - text, err.position);
	struct trace_event parsed;
	trace_event_from_json(v, &parsed);
	for (int f = 0; f < TF_COUNT; f++)
		CHECK_MSG(trace_value_same(&ev->f[f], &parsed.f[f]), "%s: field %d differs", text, f);
	CHECK_MSG(!memcmp(ev->grid, parsed.grid, sizeof(ev->grid)) &&
		  !memcmp(ev->block, parsed.block, sizeof(ev->block)), "%s: grid/block differ",
		  text);
	json_decref(v);
	return 1;
}

TEST(trace_event_scan_takes_what_jansson_reads_the_same)
{
	static const char *const taken[] = {
		/* what chrome_trace_write and Kineto write */
		"{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"_Z6kernelv\",\"pid\":0,\"tid\":7,"
		"\"ts\":102.000,\"dur\":5.000,\"args\":{\"External id\":3,\"device\":0,\"stream\":7,"
		"\"correlation\":3,\"grid\":[128,1,1],\"block\":[256,1,1]}}",
		"{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"cpu_instant_event\",\"name\":\"[memory]\","
		"\"pid\":1,\"tid\":1,\"ts\":7.250,\"args\":{\"Total Allocated\":1048576,"
		"\"Bytes\":-4096,\"Device Id\":0,\"Category\":\"activation\",\"Layer\":\"conv1\"}}",
		"{\"ph\":\"s\",\"id\":3,\"pid\":1,\"tid\":1,\"ts\":101.000,\"cat\":\"ac2g\","
		"\"name\":\"ac2g\"}",
		"{ \"name\" : \"sp aced\" ,\t\"ts\"\n:\r-0 , \"args\" : { } } ",
		/* numbers: jansson's integers and strtod's reals, bit for bit */
		"{\"ts\":0.1,\"dur\":123456789012345678,\"pid\":-9,\"tid\":1E+2,\"x\":-0.0}",
		"{\"ts\":1.5e-3,\"dur\":9007199254740993.5,\"pid\":0.30000000000000004}",
		"{\"ts\":1e-400,\"dur\":123456.789012345678,\"tid\":4.9e-324,\"pid\":1e22}",
		"{\"ts\":1e23,\"dur\":8.5e307,\"pid\":0e99999,\"tid\":1e0000001}",
		/* other values are checked and kept as "other" */
		"{\"ph\":true,\"cat\":null,\"name\":[\"a\",{\"b\":[]}],\"x\":{\"y\":false}}",
		/* a later key replaces an earlier one, args and grid included */
		"{\"name\":\"a\",\"name\":\"b\",\"args\":{\"correlation\":1,\"grid\":[1,2,3]},"
		"\"args\":{\"grid\":[4]}}",
		"{\"args\":{\"correlation\":1},\"args\":5}",
		/* grid elements that are not integers read as 0 */
		"{\"args\":{\"grid\":[1,2.5,\"x\",4],\"block\":7}}",
		"{}",
	};
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		struct trace_event ev;
		CHECK_MSG(scan_and_compare(taken[i], &ev), "declined: %s", taken[i]);
	}
	struct trace_event ev;
	CHECK(scan_and_compare(taken[9], &ev));
	CHECK(ev.f[TF_NAME].len == 1 && ev.f[TF_NAME].s[0] == 'b');
	CHECK_EQ_INT(ev.f[TF_CORRELATION].type, TRACE_VALUE_NONE);
	CHECK(ev.grid[0] == 4 && ev.grid[1] == 0);
	CHECK(scan_and_compare(taken[11], &ev));
	CHECK(ev.grid[0] == 1 && ev.grid[1] == 0 && ev.grid[2] == 0 && ev.block[0] == 0);
}

TEST(trace_event_scan_leaves_the_rest_to_jansson)
{
	static const char *const declined[] = {
		/* valid, but not read here: escapes, UTF-8, long integers, non-objects */
		"{\"name\":\"a\\\"b\"}", "{\"name\":\"\xc3\xa9\"}", "{\"n\\u0061me\":1}",
		"{\"ts\":1234567890123456789}", "[1]", "5", "\"x\"",
		"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
		/* invalid: jansson's message names the problem */
		"{\"a\":1,}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":+1}", "{\"a\":1e}",
		"{\"a\":tru}", "{\"a\":truex}", "{\"a\" 1}", "{\"a\":1 \"b\":2}", "{a:1}",
		"{\"a\":\"tab\there\"}", "{\"a\":\"open}", "{\"a\":1", "{\"a\":[1,]}",
		"{\"ts\":12345678901234567890}", "{\"ts\":1e400}", "{\"ts\":-1e309}", "{",
	};
	for (size_t i = 0; i < sizeof(declined) / sizeof(declined[0]); i++) {
		struct trace_event ev;
		CHECK_MSG(!scan_and_compare(declined[i], &ev), "taken: %s", declined[i]);
	}
}

/* Events the scanner declines are read by jansson: the same names as written, and
 * an event that is not JSON gives jansson's message with the line. */
TEST(trace_event_reader_falls_back_to_jansson)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/trace.json", test_tmpdir());
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("{\"traceEvents\":[\n"
	      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"aten::add(\\\"x\\\")\",\"ts\":1,\"dur\":2},\n"
	      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"caf\xc3\xa9\",\"ts\":3,\"dur\":1},\n"
	      "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"plain\",\"ts\":4,\"dur\":1,"
	      "\"args\":{\"External id\":12345678901234567}},\n"
	      "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":5,\"dur\":1,"
	      "\"args\":{\"grid\":[2,3,4],\"block\":[1e0,5,6],\"device\":3}}\n"
	      "]}\n", f);
	fclose(f);
	struct trace t;
	CHECK_EQ_INT(chrome_trace_read(path, &t), 0);
	if (test_failed())
		return;
	CHECK(t.n_ranges == 3 && t.n_gpu == 1);
	if (t.n_ranges == 3 && t.n_gpu == 1) {
		CHECK(!strcmp(t.ranges[0].name, "aten::add(\"x\")"));
		CHECK(!strcmp(t.ranges[1].name, "caf\xc3\xa9"));
		CHECK(t.ranges[1].start_ns == 3000 && t.ranges[1].end_ns == 4000);
		CHECK(t.ranges[2].external_id == 12345678901234567ull);
		CHECK(t.gpu[0].grid[2] == 4 && t.gpu[0].block[0] == 0 && t.gpu[0].block[1] == 5);
		CHECK_EQ_INT(t.gpu[0].device, 3);
		CHECK_EQ_INT(t.gpu[0].stream, 0);
	}
	trace_free(&t);

	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("{\"traceEvents\":[\n{\"ph\":\"X\",\"ts\":1},\n{\"ph\":\"X\",}\n]}\n", f);
	fclose(f);
	CHECK(chrome_trace_read(path, &t) == GP_EFORMAT);
	CHECK_MSG(strstr(gp_errmsg(), "is not valid JSON (line 3: string or '}' expected near "
				      "'}')") != NULL, "%s", gp_errmsg());
	gp_error_clear();
}
