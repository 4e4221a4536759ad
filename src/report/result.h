/* Results: every measuring command writes one JSON document first, and tables and
 * charts are drawn from it (`gpuperf plot` redraws them anywhere). The schema is in
 * docs/results.md:
 *   {"schema": "gpuperf.result/1", "gpuperf_version", "command", "argv",
 *    "started_utc", "finished_utc", "host", "gpu", "settings", "measurements"} */
#ifndef GP_RESULT_H
#define GP_RESULT_H

#include <stddef.h>
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "core/file.h"
#include "gpu/nvml.h"

#define RESULT_SCHEMA "gpuperf.result/1"

/* A new result for command run as argv[0..argc) (the subcommand's argv), with empty
 * "settings" and "measurements" objects to fill; NULL when out of memory. */
json_t *result_new(const char *command, int argc, char **argv);
/* A JSON number for v, or null when v is NaN or infinite (JSON has no such numbers,
 * and jansson refuses them): every real in a result goes through this. NULL only
 * when out of memory. */
json_t *result_real(double v);
/* The process's tuning switches (core/tuning.h), name to value as text, which
 * result_write records in "settings" as "tuning": what a measurement ran under. NULL
 * when out of memory. */
json_t *result_tuning_json(void);
/* A JSON string for s, a path or an argument as the user gave it: bytes that are not
 * UTF-8 (which jansson refuses, and JSON cannot hold) become U+FFFD; json null for
 * NULL. NULL only when out of memory. */
json_t *result_string(const char *s);
/* Where results go when --out is not given: $GPUPERF_RESULTS, else "results". */
const char *result_default_dir(void);
/* Where a measuring command's result goes, settled before any work: with out
 * (--out DIR), that folder, refused when it already holds <basename>.json from an
 * earlier run unless overwrite; without out, a new run folder
 * <results>/<command>_<YYYYmmdd_HHMMSS>[_<n>] (made with mkdir, so that two runs
 * never share one) and <results>/latest, a symlink to it. Either folder is created
 * and proved writable; dir gets its path. */
int result_dir_prepare(const char *command, const char *basename, const char *out,
		       int overwrite, char *dir, size_t cap);
/* A command that failed: remove the run folder result_dir_prepare made when it is
 * still empty, and point latest back where it pointed. */
void result_run_dir_abandon(void);
/* Set "gpu" to an object (name, driver and library versions); takes the reference. */
int result_set_gpu(json_t *res, json_t *gpu);
/* {"name", "uuid", "driver_version", "cuda_driver_version": "12.4", "memory_mib",
 * "power_limit_w", "max_sm_clock_mhz", "max_mem_clock_mhz"} from NVML; the CUDA
 * backend adds its runtime and cuDNN versions to the same object. */
json_t *result_gpu_from_nvml(const struct nvml_static_info *info);
/* Set "finished_utc" and write <dir>/<basename>.json atomically (dir is created if
 * needed); the path written goes to path_out when that is not NULL. When the write
 * fails the result goes to stdout, so that the measurements are not lost. */
int result_write(json_t *res, const char *dir, const char *basename, char *path_out,
		 size_t cap);
/* Write any JSON document as path, atomically (flags as for json_dumpf). */
int json_write_atomic(const json_t *j, const char *path, size_t flags);
/* Read a result and check its schema; *out is a new reference. */
int result_read(const char *path, json_t **out);

/* The result in run folder dir (path gets it): <command>.json named by the folder's
 * <command>_<stamp> name, else the only *.json in it that reads as a result;
 * GP_EINVAL when it holds none or several. */
int result_find_in_dir(const char *dir, char *path, size_t cap);

/* "2025-03-01T14:05:09Z" for t (UTC). */
void result_utc_str(time_t t, char *buf, size_t cap);

/* mkdir -p. */
int path_mkdirs(const char *dir);
/* mkdir -p, then prove the folder writable by creating and removing a file in it:
 * an output location is tried before the work that fills it. */
int path_dir_prepare(const char *dir);
/* The same for a file to be written later at path (its folder is created and
 * tried); path must not be a folder. Nothing is left at path. */
int path_file_prepare(const char *path);

#endif
