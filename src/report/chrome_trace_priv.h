/* What the writer (chrome_trace.c) and the reader (chrome_trace_read.c) of Chrome
 * trace files share. Not for use outside src/report/chrome_trace*.c. */
#ifndef GP_CHROME_TRACE_PRIV_H
#define GP_CHROME_TRACE_PRIV_H

#include <limits.h>
#include <stdlib.h>

/* N of "ProfilerStep#N", saturated to int's range (atoi's overflow is undefined). */
static inline int step_number(const char *digits)
{
	long long v = strtoll(digits, NULL, 10);
	return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
}

#endif
