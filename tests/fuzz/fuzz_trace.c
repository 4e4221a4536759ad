/* Chrome/Kineto traces (`gpuperf analyze DIR`): chrome_trace_read, then the whole
 * analysis, its printout, report, JSON summary and charts, as analyze runs them. */
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
		profile_charts_draw(&a, fuzz_out_dir(), fuzz_devnull());
		json_decref(analysis_to_json(&a));
		analysis_free(&a);
	}
	trace_free(&t);
	gp_error_clear();
	return 0;
}
