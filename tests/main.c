/* The test runner: runs every registered test (or those whose name contains one of
 * the arguments) and closes with the counts. Exit status 1 if any test failed. */
#include "test.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/tuning.h"
#include "gpu/devinfo.h"

#define MAX_TESTS 1024

struct test_case {
	const char *name;
	void (*fn)(void);
	const char *file;
};

static struct test_case cases[MAX_TESTS];
static int n_cases;
static int cur_failed, cur_skipped, cur_fail_lines;
static char cur_skip_reason[256];
static char tmp_root[256];
static int tmp_counter;
static char cur_tmp[300];

void test_register(const char *name, void (*fn)(void), const char *file)
{
	if (n_cases < MAX_TESTS)
		cases[n_cases++] = (struct test_case){ name, fn, file };
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
	cur_failed = 1;
	if (++cur_fail_lines > 10)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stdout, "    %s:%d: ", file, line);
	vfprintf(stdout, fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
}

void test_skip(const char *reason)
{
	cur_skipped = 1;
	snprintf(cur_skip_reason, sizeof(cur_skip_reason), "%s", reason);
}

int test_failed(void) { return cur_failed; }
int test_skipped(void) { return cur_skipped; }

const char *test_bin(void)
{
	const char *b = getenv("GPUPERF_BIN");
	return b && *b ? b : "build/gpuperf";
}

int test_run(const char *cmd, char *out, size_t cap)
{
	char full[4096];
	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	FILE *p = popen(full, "r");
	if (!p)
		return -1;
	size_t len = 0;
	if (out && cap)
		out[0] = 0;
	char buf[4096];
	size_t got;
	while ((got = fread(buf, 1, sizeof(buf), p)) > 0) {
		if (out && len + 1 < cap) {
			size_t take = got < cap - 1 - len ? got : cap - 1 - len;
			memcpy(out + len, buf, take);
			len += take;
			out[len] = 0;
		}
	}
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int test_count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

void test_check_bad(const char *args, const char *needle)
{
	char cmd[2048], out[4096];
	snprintf(cmd, sizeof(cmd), "%.500s %.1500s", test_bin(), args);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc != 0, "'%s' exited 0", args);
	CHECK_MSG(test_count_lines(out) == 1, "'%s' printed %d lines: %s", args,
		  test_count_lines(out), out);
	CHECK_MSG(strstr(out, needle) != NULL, "'%s' said '%s', expected '%s'", args, out, needle);
}

const char *test_tmpdir(void)
{
	if (!tmp_root[0]) {
		snprintf(tmp_root, sizeof(tmp_root), "/tmp/gpuperf_tests.XXXXXX");
		if (!mkdtemp(tmp_root)) {
			perror("mkdtemp");
			return "/tmp";
		}
	}
	snprintf(cur_tmp, sizeof(cur_tmp), "%s/%d", tmp_root, ++tmp_counter);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", cur_tmp);
	if (system(cmd) != 0)
		return "/tmp";
	return cur_tmp;
}

double rel_err_norm_f64(const double *a, const double *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = a[i] - b[i];
		num += d * d;
		den += b[i] * b[i];
	}
	if (den == 0)
		return num == 0 ? 0 : INFINITY;
	return sqrt(num / den);
}

double rel_err_norm_f32(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		num += d * d;
		den += (double)b[i] * b[i];
	}
	if (den == 0)
		return num == 0 ? 0 : INFINITY;
	return sqrt(num / den);
}

/* Arguments select tests whose name contains one of them; an argument "-PART" leaves
 * out those whose name contains PART (only exclusions: every other test), so that the
 * suite can run in parallel parts. "--part K/N" (handled in main) is not a name. */
static int selected(const char *name, int argc, char **argv)
{
	int includes = 0, hit = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--part")) {
			i++;
			continue;
		}
		if (argv[i][0] == '-') {
			if (strstr(name, argv[i] + 1))
				return 0;
			continue;
		}
		includes++;
		hit |= strstr(name, argv[i]) != NULL;
	}
	return !includes || hit;
}

static int by_file_then_name(const void *a, const void *b)
{
	const struct test_case *x = a, *y = b;
	int c = strcmp(x->file, y->file);
	return c ? c : strcmp(x->name, y->name);
}

/* "--part K/N": of the selected tests in file order, the K-th of every N (1 <= K <= N),
 * so that a suite longer than one device call's limit runs as N calls, each test in
 * exactly one. 0 when absent, -1 (after a line on stderr) when malformed. */
static int part_parse(int argc, char **argv, int *k, int *n)
{
	*k = 1;
	*n = 1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--part"))
			continue;
		char tail;
		if (i + 1 >= argc || sscanf(argv[i + 1], "%d/%d%c", k, n, &tail) != 2 || *n < 1 ||
		    *k < 1 || *k > *n) {
			fprintf(stderr, "--part: give K/N with 1 <= K <= N (e.g. 1/2)\n");
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	int passed = 0, failed = 0, skipped = 0, part_k, part_n, nth = 0;
	if (part_parse(argc, argv, &part_k, &part_n) < 0)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	gpu_process_defaults(); /* the GPU tests run as gpuperf does */
	/* results the commands under test write without --out land in the scratch dir */
	setenv("GPUPERF_RESULTS", test_tmpdir(), 1);
	tuning_reload();
	qsort(cases, n_cases, sizeof(cases[0]), by_file_then_name);
	for (int i = 0; i < n_cases; i++) {
		if (!selected(cases[i].name, argc, argv) || nth++ % part_n != part_k - 1)
			continue;
		cur_failed = cur_skipped = cur_fail_lines = 0;
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		cases[i].fn();
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
		if (cur_failed) {
			failed++;
			printf("FAIL %-44s %8.1f ms\n", cases[i].name, ms);
		} else if (cur_skipped) {
			skipped++;
			printf("SKIP %-44s (%s)\n", cases[i].name, cur_skip_reason);
		} else {
			passed++;
			printf("ok   %-44s %8.1f ms\n", cases[i].name, ms);
		}
	}
	if (tmp_root[0]) {
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_root);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", tmp_root);
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
