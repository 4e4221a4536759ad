/* Chrome/Kineto traces (`gpuperf analyze DIR`): chrome_trace_read, then the whole
 * analysis, its printout, report, JSON summary and charts, as analyze runs them.
 * Compressing the two PNGs costs some twenty times the rest, so the charts are
 * drawn for one input in sixteen (picked by a hash of the input, so that a run
 * replays the same way); fuzz_result covers the chart code itself.
 * The reader's event scanner must read every event it takes exactly as jansson
 * would: the input's first few objects are read both ways and compared. */
#include "fuzz.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
#include "report/profile_charts.h"
#include "report/trace_event.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_json_seed();
	fuzz_out_dir();
	return 0;
}

static uint32_t fnv1a(const uint8_t *data, size_t size)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 16777619u;
	return h;
}

/* When the scanner takes the value at p, jansson must parse it, end at the same
 * place and give the same fields. */
static void scan_check(const char *p, const char *end)
{
	struct trace_event scanned, parsed;
	const char *next;
	json_error_t err;
	if (!trace_event_scan(p, end, &scanned, &next))
		return;
	json_t *v = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY,
			       &err);
	if (!v)
		fuzz_die("the scanner took an event jansson refuses");
	if (p + err.position != next)
		fuzz_die("the scanner and jansson end the event at different places");
	trace_event_from_json(v, &parsed);
	for (int f = 0; f < TF_COUNT; f++)
		if (!trace_value_same(&scanned.f[f], &parsed.f[f]))
			fuzz_die("the scanner and jansson read a field differently");
	if (memcmp(scanned.grid, parsed.grid, sizeof(parsed.grid)) ||
	    memcmp(scanned.block, parsed.block, sizeof(parsed.block)))
		fuzz_die("the scanner and jansson read grid or block differently");
	json_decref(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data, *end = text + size;
	int checked = 0;
	for (const char *p = text; p < end && checked < 8; p++)
		if (*p == '{') {
			scan_check(p, end);
			checked++;
		}

	struct trace t;
	struct analysis a;
	char path[256];

	if (chrome_trace_read(fuzz_input_file(data, size), &t) < 0) {
		gp_error_clear();
		return 0;
	}
	if (analysis_run(&t, &a) == 0) {
		analysis_print(&a, fuzz_devnull());
		snprintf(path, sizeof(path), "%s/profile_report.md", fuzz_out_dir());
		analysis_write_markdown(&a, path);
		if (fnv1a(data, size) % 16 == 0)
			profile_charts_draw(&a, fuzz_out_dir(), fuzz_devnull());
		json_decref(analysis_to_json(&a));
		analysis_free(&a);
	}
	trace_free(&t);
	gp_error_clear();
	return 0;
}
