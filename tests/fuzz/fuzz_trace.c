/* Chrome/Kineto traces (`gpuperf analyze DIR`): chrome_trace_read, then the whole
 * analysis, its printout, report, JSON summary and charts, as analyze runs them.
 * Compressing the two PNGs costs some twenty times the rest, so the charts are
 * drawn for one input in sixteen (picked by a hash of the input, so that a run
 * replays the same way); fuzz_result covers the chart code itself. */
#include "fuzz.h"

#include <stdio.h>

#include "core/error.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
#include "report/profile_charts.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
