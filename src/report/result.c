/* JSON results: written atomically (core/file.h), read back with their schema checked. */
#include "report/result.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/memstat.h"
#include "core/tuning.h"
#include "core/version.h"

#define RESULT_JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(10))

json_t *result_real(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF), or 0. */
static int utf8_seq_len(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	int n = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
		: s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
	for (int i = 1; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
	    (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
		return 0;
	return n;
}

json_t *result_string(const char *s)
{
	if (!s)
		return json_null();
	size_t len = strlen(s);
	char *buf = malloc(3 * len + 1), *o = buf;
	if (!buf)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = utf8_seq_len(p);
		if (n) {
			memcpy(o, p, n);
			o += n;
			p += n;
		} else {
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			p++;
		}
	}
	*o = 0;
	json_t *j = json_string(buf);
	free(buf);
	return j;
}

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
		if (json_array_append_new(args, result_string(argv[i])) < 0)
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
	return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:i}",
			 "name", info->name,
			 "uuid", info->uuid,
			 "driver_version", info->driver_version,
			 "cuda_driver_version", cuda,
			 "memory_mib", result_real(info->mem_total_bytes / GP_MIB),
			 "power_limit_w", result_real(info->power_limit_mw / 1000.0),
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

int path_dir_prepare(const char *dir)
{
	char probe[4096];
	GP_TRY(path_mkdirs(dir));
	if (snprintf(probe, sizeof(probe), "%s/.gpuperf_probe.XXXXXX", dir) >= (int)sizeof(probe))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", dir);
	int fd = mkstemp(probe);
	if (fd < 0)
		return gp_error(GP_EIO, "cannot write in '%s': %s", dir, strerror(errno));
	close(fd);
	unlink(probe);
	return 0;
}

int path_file_prepare(const char *path)
{
	char dir[4096];
	struct stat st;
	const char *slash = strrchr(path, '/');
	/* the folder part: "." without a slash, "/" for a file at the root */
	size_t len = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
	if ((slash && !slash[1]) || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
		return gp_error(GP_EINVAL, "'%s' is a folder, not a file", path);
	/* a device or a FIFO would be replaced by a plain file, not written to */
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
		return gp_error(GP_EINVAL, "'%s' is not a regular file", path);
	if (len >= sizeof(dir))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", path);
	if (slash) {
		memcpy(dir, path, len);
		dir[len] = 0;
	} else {
		snprintf(dir, sizeof(dir), ".");
	}
	return path_dir_prepare(dir);
}

/* The run folder this process made, and what latest named before, so that a run
 * that fails before writing anything leaves no empty folder behind. */
static struct {
	char dir[4096], base[4096], old_latest[4096];
} run_made;

/* Point <base>/latest at name: a symlink made under a temporary name, then renamed
 * over the old one, so that readers always find a whole link. Relative, so that the
 * results folder can be moved. */
static int latest_link_update(const char *base, const char *name)
{
	char tmp[4096], link[4096];
	if (snprintf(tmp, sizeof(tmp), "%s/.latest.%ld", base, (long)getpid()) >= (int)sizeof(tmp) ||
	    snprintf(link, sizeof(link), "%s/latest", base) >= (int)sizeof(link))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", base);
	if (!run_made.old_latest[0]) {
		ssize_t n = readlink(link, run_made.old_latest, sizeof(run_made.old_latest) - 1);
		run_made.old_latest[n > 0 ? n : 0] = 0;
	}
	unlink(tmp);
	if (symlink(name, tmp) != 0)
		return gp_error(GP_EIO, "cannot create '%s': %s", tmp, strerror(errno));
	if (rename(tmp, link) != 0) {
		int err = errno;
		unlink(tmp);
		return gp_error(GP_EIO, "cannot replace '%s': %s", link, strerror(err));
	}
	return 0;
}

/* A new folder <base>/<command>_<stamp>[_<n>]: mkdir fails on a name that exists,
 * so a concurrent run that took it makes this one try the next n. */
static int run_dir_create(const char *base, const char *command, char *dir, size_t cap)
{
	char stamp[32], name[256];
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d_%H%M%S", &tm);
	GP_TRY(path_mkdirs(base));
	for (int n = 1; n <= 1000; n++) {
		if (n == 1)
			snprintf(name, sizeof(name), "%s_%s", command, stamp);
		else
			snprintf(name, sizeof(name), "%s_%s_%d", command, stamp, n);
		if (snprintf(dir, cap, "%s/%s", base, name) >= (int)cap)
			return gp_error(GP_EINVAL, "path too long: '%.64s...'", base);
		if (mkdir(dir, 0777) == 0) {
			snprintf(run_made.dir, sizeof(run_made.dir), "%s", dir);
			snprintf(run_made.base, sizeof(run_made.base), "%s", base);
			GP_TRY(path_dir_prepare(dir));
			return latest_link_update(base, name);
		}
		if (errno != EEXIST)
			return gp_error(GP_EIO, "cannot create directory '%s': %s", dir,
					strerror(errno));
	}
	return gp_error(GP_EIO, "cannot create a new run folder in '%s': 1000 exist for %s",
			base, stamp);
}

void result_run_dir_abandon(void)
{
	char link[sizeof(run_made.base) + 8];
	if (!run_made.dir[0] || rmdir(run_made.dir) != 0)
		return; /* something was written there: keep it */
	snprintf(link, sizeof(link), "%s/latest", run_made.base);
	if (run_made.old_latest[0])
		latest_link_update(run_made.base, run_made.old_latest);
	else
		unlink(link);
	run_made.dir[0] = 0;
}

int result_dir_prepare(const char *command, const char *basename, const char *out,
		       int overwrite, char *dir, size_t cap)
{
	char path[4096];
	struct stat st;
	if (!out)
		return run_dir_create(result_default_dir(), command, dir, cap);
	if (snprintf(dir, cap, "%s", out) >= (int)cap ||
	    snprintf(path, sizeof(path), "%s/%s.json", out, basename) >= (int)sizeof(path))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", out);
	if (!overwrite && lstat(path, &st) == 0)
		return gp_error(GP_EINVAL, "'%s' holds an earlier result (--overwrite replaces it, "
				"or leave out --out for a new run folder)", path);
	return path_dir_prepare(dir);
}

const char *result_default_dir(void)
{
	const char *d = tuning_get()->results_dir;
	return *d ? d : "results";
}

json_t *result_tuning_json(void)
{
	const struct tuning *t = tuning_get();
	json_t *o = json_object();
	char v[TUNING_PATH_MAX];
	for (int i = 0; o && i < tuning_table_len; i++) {
		tuning_value_str(t, i, v, sizeof(v));
		if (json_object_set_new(o, tuning_table[i].name, json_string(v)) < 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

/* Every result records the tuning it was measured under in its settings; one written
 * again (analyze, plot) keeps what it has. */
static int result_add_tuning(json_t *res)
{
	json_t *settings = json_object_get(res, "settings");
	if (!json_is_object(settings) || json_object_get(settings, "tuning"))
		return 0;
	if (json_object_set_new(settings, "tuning", result_tuning_json()) < 0)
		return gp_error(GP_ENOMEM, "cannot record the tuning in the result");
	return 0;
}

static int result_write_file(json_t *res, const char *dir, const char *basename, char *path_out,
			     size_t cap)
{
	char path[4096], finished[32];

	GP_TRY(path_mkdirs(dir));
	if (snprintf(path, sizeof(path), "%s/%s.json", dir, basename) >= (int)sizeof(path))
		return gp_error(GP_EINVAL, "result path too long in '%.64s...'", dir);
	result_utc_str(time(NULL), finished, sizeof(finished));
	if (json_object_set_new(res, "finished_utc", json_string(finished)) < 0)
		return gp_error(GP_ENOMEM, "cannot set the result's finish time");
	GP_TRY(result_add_tuning(res));
	GP_TRY(json_write_atomic(res, path, RESULT_JSON_FLAGS));
	if (path_out)
		snprintf(path_out, cap, "%s", path);
	return 0;
}

int result_write(json_t *res, const char *dir, const char *basename, char *path_out,
		 size_t cap)
{
	int rc = result_write_file(res, dir, basename, path_out, cap);
	if (rc < 0) {
		/* the measurements took the work; stdout is their last way out */
		fflush(stdout);
		if (json_dumpf(res, stdout, RESULT_JSON_FLAGS) == 0)
			fputc('\n', stdout);
		fflush(stdout);
	}
	return rc;
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

/* The one result in a run folder: <command>.json named by the folder's
 * <command>_<stamp> name, else the only *.json that reads as a result. */
int result_find_in_dir(const char *dir, char *path, size_t cap)
{
	char name[300], base[256];
	const char *slash = strrchr(dir, '/');
	snprintf(base, sizeof(base), "%s", slash && slash[1] ? slash + 1 : dir);
	/* a trailing slash: the component before it */
	if (slash && !slash[1]) {
		size_t len = slash - dir;
		const char *s = dir + len;
		while (s > dir && s[-1] != '/')
			s--;
		snprintf(base, sizeof(base), "%.*s", (int)(dir + len - s), s);
	}
	char *us = strchr(base, '_');
	if (us)
		*us = 0;
	snprintf(name, sizeof(name), "%s.json", base);
	if (snprintf(path, cap, "%s/%s", dir, name) < (int)cap && access(path, R_OK) == 0)
		return 0;
	DIR *d = opendir(dir);
	if (!d)
		return gp_error(GP_EINVAL, "cannot open '%s': %s", dir, strerror(errno));
	int found = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char p[4096];
		json_t *res;
		size_t nl = strlen(e->d_name);
		if (nl < 6 || strcmp(e->d_name + nl - 5, ".json") || e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (result_read(p, &res) < 0) {
			gp_error_clear();
			continue;
		}
		json_decref(res);
		if (found++ == 0)
			snprintf(path, cap, "%s", p);
	}
	closedir(d);
	if (found == 1)
		return 0;
	if (found == 0)
		return gp_error(GP_EINVAL, "'%s' holds no gpuperf result", dir);
	return gp_error(GP_EINVAL, "'%s' holds %d results: name the JSON file", dir, found);
}
