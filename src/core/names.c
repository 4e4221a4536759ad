#include "core/names.h"

#include <stdio.h>
#include <string.h>

const char *names_join(char *buf, size_t cap, const char *(*name_at)(int i), const char *sep,
		       const char *last)
{
	size_t len = 0;
	if (cap == 0)
		return buf;
	buf[0] = 0;
	for (int i = 0; name_at(i); i++) {
		const char *before = i == 0 ? "" : name_at(i + 1) ? sep : last;
		int n = snprintf(buf + len, cap - len, "%s%s", before, name_at(i));
		/* a short buffer keeps what fits, cut at its end */
		if (n < 0 || (size_t)n >= cap - len)
			break;
		len += (size_t)n;
	}
	return buf;
}

int names_find(const char *(*name_at)(int i), const char *s)
{
	for (int i = 0; s && name_at(i); i++)
		if (!strcmp(s, name_at(i)))
			return i;
	return -1;
}
