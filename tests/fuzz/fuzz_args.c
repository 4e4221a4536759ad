/* The option parser: the input, split at NUL bytes, is an argv parsed against a table
 * with one option of every type, as each command's table is. */
#include "fuzz.h"

#include <string.h>

#include "cmd/args.h"
#include "core/error.h"

#define FUZZ_ARGV_MAX 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *argv[FUZZ_ARGV_MAX + 1];
	int argc = 0, flag = 0, num = 0, batch = 0;
	long long big = 0;
	double lr = 0, drop = 0;
	const char *out = NULL, *data_path = NULL;
	struct int_list workers = { 0 };
	const struct opt opts[] = {
		{ .name = "json", .type = OPT_FLAG, .dst = &flag, .help = "a flag" },
		{ .name = "steps", .type = OPT_INT, .dst = &num, .help = "an int", .min_int = 0,
		  .max_int = 10000000 },
		{ .name = "batch", .type = OPT_INT, .dst = &batch, .help = "an int", .min_int = 1,
		  .max_int = 65536 },
		{ .name = "mem-limit-mib", .type = OPT_I64, .dst = &big, .help = "an i64" },
		{ .name = "lr", .type = OPT_DOUBLE, .dst = &lr, .help = "a double", .min_d = 0,
		  .range = OPT_MIN_EXCL },
		{ .name = "dropout", .type = OPT_DOUBLE, .dst = &drop, .help = "a bounded double",
		  .min_d = 0, .max_d = 1, .range = OPT_MIN_INCL | OPT_MAX_EXCL },
		{ .name = "data", .type = OPT_PATH, .dst = &data_path, .help = "a path" },
		{ .name = "out", .type = OPT_STR, .dst = &out, .help = "a string" },
		{ .name = "workers", .type = OPT_INT_LIST, .dst = &workers, .help = "a list",
		  .min_int = 0, .max_int = 256 },
		{ 0 },
	};

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;
	for (size_t i = 0; i <= size && argc < FUZZ_ARGV_MAX;) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	argv[argc] = NULL;
	if (args_parse(argc, argv, 0, opts) == 0 && out)
		(void)strlen(out);
	gp_error_clear();
	free(buf);
	return 0;
}
