#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_msg[1024];

int gp_error(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
	va_end(ap);
	return code;
}

int gp_error_wrap(int code, const char *fmt, ...)
{
	char old[sizeof(err_msg)];
	va_list ap;
	memcpy(old, err_msg, sizeof(old));
	va_start(ap, fmt);
	int len = vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
	va_end(ap);
	if (len >= 0 && (size_t)len < sizeof(err_msg))
		snprintf(err_msg + len, sizeof(err_msg) - len, ": %.*s",
			 (int)(sizeof(err_msg) - len), old);
	return code;
}

const char *gp_errmsg(void)
{
	return err_msg[0] ? err_msg : "unknown error";
}

void gp_error_clear(void)
{
	err_msg[0] = 0;
}
