/* Errors are values: a function returns 0 or a negative GP_E* code and leaves a
 * one-line message in a thread-local slot that the caller (ultimately main) prints. */
#ifndef GP_ERROR_H
#define GP_ERROR_H

enum gp_err {
	GP_OK = 0,
	GP_EINVAL = -1,    /* bad argument or option */
	GP_ENOMEM = -2,    /* host allocation failed */
	GP_EIO = -3,       /* file could not be read or written */
	GP_EFORMAT = -4,   /* file content is not what it should be */
	GP_ENODEV = -5,    /* no GPU, driver or library */
	GP_EDEVOOM = -6,   /* device out of memory: ordinary and recoverable */
	GP_EDEVICE = -7,   /* any other CUDA/cuDNN/cuBLAS/NCCL/CUPTI/NVML failure */
	GP_EUNSUPPORTED = -8,
	GP_ENOTFOUND = -9,
	GP_EINTR = -10,    /* stopped by SIGINT or SIGTERM (core/interrupt.h); main exits 128 + it */
};

#if defined(__GNUC__)
#define GP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GP_PRINTF(a, b)
#endif

/* Record a message for code and return code, so call sites read
 * `return gp_error(GP_EIO, "cannot open '%s'", path);`. */
int gp_error(int code, const char *fmt, ...) GP_PRINTF(2, 3);
/* Prefix the current message with more context ("loading 'x': ..."); returns code. */
int gp_error_wrap(int code, const char *fmt, ...) GP_PRINTF(2, 3);
const char *gp_errmsg(void);
void gp_error_clear(void);

/* Propagate a negative return value. */
#define GP_TRY(expr)                          \
	do {                                  \
		int gp_try_rc_ = (expr);      \
		if (gp_try_rc_ < 0)           \
			return gp_try_rc_;    \
	} while (0)

#endif
