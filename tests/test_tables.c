/* One table per concept: the names helper. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"
#include "test.h"

static const char *abc_at(int i)
{
	static const char *const names[] = { "a", "bb", "c" };
	return i >= 0 && i < 3 ? names[i] : NULL;
}

static const char *none_at(int i)
{
	(void)i;
	return NULL;
}

TEST(names_join_and_find)
{
	char buf[64];
	CHECK(!strcmp(names_join(buf, sizeof(buf), abc_at, ", ", " or "), "a, bb or c"));
	CHECK(!strcmp(names_join(buf, sizeof(buf), abc_at, " | ", " | "), "a | bb | c"));
	CHECK(!strcmp(names_join(buf, sizeof(buf), none_at, ", ", " or "), ""));
	/* a short buffer keeps the names that fit whole */
	CHECK_MSG(!strcmp(names_join(buf, 6, abc_at, ", ", " or "), "a, bb"), "got '%s'", buf);
	CHECK_EQ_INT(names_find(abc_at, "bb"), 1);
	CHECK_EQ_INT(names_find(abc_at, "b"), -1);
	CHECK_EQ_INT(names_find(abc_at, NULL), -1);
}
