/* The include graph of src/ against the layers (DESIGN.md, "The layers, and the one
 * rule about them"): tools/check_layers.py finds no arrow pointing up or sideways and
 * no include cycle. */
#include <stdio.h>
#include <unistd.h>

#include "test.h"

TEST(layers_every_include_points_down)
{
	char out[16384];
	if (test_run("python3 --version", out, sizeof(out)) != 0)
		SKIP("python3 not found");
	if (access("tools/check_layers.py", R_OK) != 0 || access("src", R_OK) != 0)
		SKIP("tools/check_layers.py or src/ not readable (run from the repository root)");
	int rc = test_run("python3 tools/check_layers.py src", out, sizeof(out));
	CHECK_MSG(rc == 0, "check_layers exited %d:\n%s", rc, out);
}
