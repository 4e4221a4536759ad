/* JSON results: written atomically (core/file.h), read back with their schema checked. */
#include "report/result.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/memstat.h"
#include "core/version.h"

void result_utc_str(time_t t, char *buf, size_t cap)
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *result_new(const char *command, int argc, char **argv)
{
	char started[32], host[256] = "";
	json_t *args = json_array();
	if (!args)
		return NULL;
	for (int i = 0; i < argc; i++)
		if (json_array_append_new(args, json_string(argv[i])) < 0)
			goto free_args;
	if (gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "unknown");
	result_utc_str(time(NULL), started, sizeof(started));
	/* "o" steals args, also when pack fails. */
	return json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:n, s:{}, s:{}}",
			 "schema", RESULT_SCHEMA,
			 "gpuperf_version", GPUPERF_VERSION,
			 "command", command,
			 "argv", args,
			 "started_utc", started,
			 "host", host,
			 "gpu",
			 "settings",
			 "measurements");
free_args:
	json_decref(args);
	return NULL;
}

int result_set_gpu(json_t *res, json_t *gpu)
{
	if (!json_is_object(gpu)) {
		json_decref(gpu);
		return gp_error(GP_EINVAL, "result gpu must be a JSON object");
	}
	if (json_object_set_new(res, "gpu", gpu) < 0)
		return gp_error(GP_ENOMEM, "cannot set the result's gpu");
	return 0;
}

json_t *result_gpu_from_nvml(const struct nvml_static_info *info)
{
	char cuda[16];
	snprintf(cuda, sizeof(cuda), "%d.%d", info->cuda_driver_version / 1000,
		 info->cuda_driver_version % 1000 / 10);
	return json_pack("{s:s, s:s, s:s, s:s, s:f, s:f, s:i, s:i}",
			 "name", info->name,
			 "uuid", info->uuid,
			 "driver_version", info->driver_version,
			 "cuda_driver_version", cuda,
			 "memory_mib", info->mem_total_bytes / GP_MIB,
			 "power_limit_w", info->power_limit_mw / 1000.0,
			 "max_sm_clock_mhz", (json_int_t)info->max_sm_clock_mhz,
			 "max_mem_clock_mhz", (json_int_t)info->max_mem_clock_mhz);
}

int path_mkdirs(const char *dir)
{
	char buf[4096];
	size_t len = strlen(dir);
	if (len == 0)
		return 0;
	if (len >= sizeof(buf))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", dir);
	memcpy(buf, dir, len + 1);
	/* Create each prefix ending before a '/', then the whole path. */
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char saved = buf[i];
		buf[i] = 0;
		if (mkdir(buf, 0777) != 0 && errno != EEXIST)
			return gp_error(GP_EIO, "cannot create directory '%s': %s", buf,
					strerror(errno));
		buf[i] = saved;
	}
	struct stat st;
	if (stat(dir, &st) != 0)
		return gp_error(GP_EIO, "cannot create directory '%s': %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return gp_error(GP_EIO, "cannot create directory '%s': %s", dir,
				strerror(ENOTDIR));
	return 0;
}

const char *result_default_dir(void)
{
	const char *d = getenv("GPUPERF_RESULTS");
	return d && *d ? d : "results";
}

int result_write(json_t *res, const char *dir, const char *basename, char *path_out,
		 size_t cap)
{
	char path[4096], finished[32];

	GP_TRY(path_mkdirs(dir));
	if (snprintf(path, sizeof(path), "%s/%s.json", dir, basename) >= (int)sizeof(path))
		return gp_error(GP_EINVAL, "result path too long in '%.64s...'", dir);
	result_utc_str(time(NULL), finished, sizeof(finished));
	if (json_object_set_new(res, "finished_utc", json_string(finished)) < 0)
		return gp_error(GP_ENOMEM, "cannot set the result's finish time");
	GP_TRY(json_write_atomic(res, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)));
	if (path_out)
		snprintf(path_out, cap, "%s", path);
	return 0;
}

int json_write_atomic(const json_t *j, const char *path, size_t flags)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	if (json_dumpf(j, af.f, flags) != 0 || fputc('\n', af.f) == EOF) {
		atomic_file_abort(&af);
		return gp_error(GP_EIO, "cannot write '%s': %s", path, strerror(errno));
	}
	return atomic_file_commit(&af);
}

int result_read(const char *path, json_t **out)
{
	json_error_t jerr;
	char *text;
	size_t len;
	GP_TRY(file_read_all(path, &text, &len));
	json_t *res = json_loadb(text, len, 0, &jerr);
	free(text);
	if (!res)
		return gp_error(GP_EFORMAT, "'%s' line %d: %s", path, jerr.line, jerr.text);
	const char *schema = json_string_value(json_object_get(res, "schema"));
	if (!schema || strcmp(schema, RESULT_SCHEMA) != 0) {
		int rc = gp_error(GP_EFORMAT, "'%s' is not a gpuperf result (schema '%s', expected '%s')",
				  path, schema ? schema : "missing", RESULT_SCHEMA);
		json_decref(res);
		return rc;
	}
	if (!json_is_string(json_object_get(res, "command")) ||
	    !json_is_object(json_object_get(res, "measurements"))) {
		json_decref(res);
		return gp_error(GP_EFORMAT, "'%s' lacks \"command\" or \"measurements\"", path);
	}
	*out = res;
	return 0;
}
