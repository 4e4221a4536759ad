/* What a first-time user meets: the menu on a machine without a GPU, advise's last
 * line, analyze on a profile folder, options that must be refused, and the
 * train/ + val/ dataset layout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmds.h"
#include "test.h"

/* The last line never recommends what the table calls "no gain": a 1.01x change
 * leaves the baseline as the advice; of the kept ones, the fastest wins. */
TEST(advise_pick_only_what_the_table_keeps)
{
	double img_s[] = { 100.0, 101.0, 90.0 };
	int kept_none[] = { 0, 0, 0 };
	CHECK_EQ_INT(advise_pick(img_s, kept_none, 3), 0);
	double img_s2[] = { 100.0, 120.0, 130.0, 125.0, 140.0 };
	int kept2[] = { 0, 1, 0, 1, 0 }; /* 130 is "faster, not best"; 140 not kept */
	CHECK_EQ_INT(advise_pick(img_s2, kept2, 5), 3);
	/* kept fixes together measured slower than one alone: the one alone */
	double img_s3[] = { 100.0, 120.0, 110.0, 115.0 };
	int kept3[] = { 0, 1, 1, 1 };
	CHECK_EQ_INT(advise_pick(img_s3, kept3, 4), 1);
}
