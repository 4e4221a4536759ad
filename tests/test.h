/* A small test harness: TEST(name) registers a function at load time; CHECK* record
 * a failure with file and line and go on; SKIP ends a test as skipped with a reason.
 * The runner prints one line per test and closes with "N passed, N failed, N skipped". */
#ifndef GP_TEST_H
#define GP_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

void test_register(const char *name, void (*fn)(void), const char *file);
void test_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void test_skip(const char *reason);
int test_failed(void);   /* has the running test failed so far */
int test_skipped(void);
/* Path of the gpuperf binary for command-line tests (GPUPERF_BIN or build/gpuperf). */
const char *test_bin(void);
/* Run a shell command; capture stdout+stderr (up to cap bytes) and the exit status. */
int test_run(const char *cmd, char *out, size_t cap);
/* A fresh temporary directory (removed at exit), another on each call: the string is
 * overwritten by the next call, so copy it to use it twice. */
const char *test_tmpdir(void);
/* Lines in s: its '\n' characters. */
int test_count_lines(const char *s);
/* Run gpuperf with args and check what bad input must give: a non-zero exit and one
 * line of output that contains needle. */
void test_check_bad(const char *args, const char *needle);

/* Pixels of a PNG read back: all, those off the white background, and those of
 * CHART_RED give or take antialiasing. */
struct test_pixel_counts {
	long total, not_white, red;
};
/* Check that path is a PNG of want_w x want_h, of a plausible file size, with more
 * than 1% of its pixels drawn (not blank); pc gets the counts (test_chart.c). */
void test_check_png(const char *path, unsigned want_w, unsigned want_h,
		    struct test_pixel_counts *pc);

#define TEST(name)                                                           \
	static void test_fn_##name(void);                                    \
	__attribute__((constructor)) static void test_reg_##name(void)      \
	{                                                                    \
		test_register(#name, test_fn_##name, __FILE__);              \
	}                                                                    \
	static void test_fn_##name(void)

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond))                                                 \
			test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);   \
	} while (0)

#define CHECK_MSG(cond, ...)                                                 \
	do {                                                                 \
		if (!(cond))                                                 \
			test_fail(__FILE__, __LINE__, __VA_ARGS__);          \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                            \
	do {                                                                          \
		long long ca_ = (long long)(a), cb_ = (long long)(b);                 \
		if (ca_ != cb_)                                                       \
			test_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
				  #a, ca_, #b, cb_);                                  \
	} while (0)

/* |a - b| <= tol, and neither is NaN. */
#define CHECK_NEAR(a, b, tol)                                                          \
	do {                                                                           \
		double na_ = (double)(a), nb_ = (double)(b), nt_ = (double)(tol);      \
		if (!(fabs(na_ - nb_) <= nt_))                                         \
			test_fail(__FILE__, __LINE__, "%s = %.10g, %s = %.10g, |diff| %.3g > %.3g", \
				  #a, na_, #b, nb_, fabs(na_ - nb_), nt_);             \
	} while (0)

/* An error measure at most tol (NaN fails). */
#define CHECK_LE(err, tol)                                                             \
	do {                                                                           \
		double ne_ = (double)(err), nt_ = (double)(tol);                       \
		if (!(ne_ <= nt_))                                                     \
			test_fail(__FILE__, __LINE__, "%s = %.3g > %.3g", #err, ne_, nt_); \
	} while (0)

#define SKIP(reason)                                                         \
	do {                                                                 \
		test_skip(reason);                                           \
		return;                                                      \
	} while (0)

/* ||a - b|| / ||b|| over n doubles (0 when both are zero). */
double rel_err_norm_f64(const double *a, const double *b, size_t n);
double rel_err_norm_f32(const float *a, const float *b, size_t n);

#endif
