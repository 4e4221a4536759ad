/* Result JSON (`gpuperf plot RESULT.json`): result_read checks the schema, then
 * plots_draw reads the measurements of whichever command the result names and draws
 * its chart, as the plot command does. */
#include "fuzz.h"

#include "core/error.h"
#include "report/plots.h"
#include "report/result.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_json_seed();
	fuzz_out_dir();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *res = NULL;
	if (result_read(fuzz_input_file(data, size), &res) == 0) {
		plots_draw(res, fuzz_out_dir());
		json_decref(res);
	}
	gp_error_clear();
	return 0;
}
