/* Files the user hands us and files we write. Every user file is opened through
 * file_open_read, which never blocks on a FIFO and refuses what is not a regular
 * file; every file we write goes through atomic_file, so that it appears complete or
 * not at all, and its temporary file is removed when SIGINT or SIGTERM ends the run. */
#ifndef GP_FILE_H
#define GP_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Open path for reading: O_RDONLY | O_NONBLOCK | O_CLOEXEC, so that opening a FIFO
 * does not wait for a writer, then fstat, then blocking reads again. Not a regular
 * file: GP_EFORMAT ("'x' is not a regular file (a FIFO)"); cannot open or stat:
 * GP_EIO. *size_bytes (when not NULL) receives the file's size. */
int file_open_read(const char *path, int *fd_out, long long *size_bytes);
/* The same, as a stdio stream ("rb"). */
int file_fopen_read(const char *path, FILE **out, long long *size_bytes);
/* The whole file in one malloc'ed buffer (free it), NUL-terminated: parsing from
 * memory is several times faster than stdio's getc for large JSON documents. */
int file_read_all(const char *path, char **buf, size_t *len_bytes);

/* A file that appears complete or not at all: written to ".NAME.tmp.PID" in the same
 * folder, then flushed, fsync'ed and renamed over path on commit. While open, the
 * temporary path is registered so that file_cleanup_on_signals' handler removes it. */
struct atomic_file {
	FILE *f;
	int slot;  /* in the registry of live temporary files; -1 when none */
	char path[4096];
	char tmp_path[4096];
};

int atomic_file_open(struct atomic_file *af, const char *path);
/* Close and rename into place; on any failure the temporary file is removed. */
int atomic_file_commit(struct atomic_file *af);
/* Give up: close and remove the temporary file. */
void atomic_file_abort(struct atomic_file *af);
/* Write len bytes as path, atomically. */
int atomic_file_write(const char *path, const void *data, size_t len);

/* A folder that appears complete or not at all: its files are written into
 * ".NAME.tmp.PID" beside path, which commit renames into place (exchanging it with an
 * existing folder of that name in one step, then removing the old files). Until then
 * the folder and the files named through atomic_dir_file are registered, so that
 * file_cleanup_on_signals' handler removes them. */
#define ATOMIC_DIR_FILES 8
struct atomic_dir {
	char path[4096];
	char tmp_path[4096];
	int slot;
	int file_slots[ATOMIC_DIR_FILES];
	int n_files;
};

int atomic_dir_open(struct atomic_dir *ad, const char *path);
/* The path (into out) of file `name` in the temporary folder, registered for removal;
 * write it with atomic_file (or atomic_file_write). */
int atomic_dir_file(struct atomic_dir *ad, const char *name, char *out, size_t cap);
int atomic_dir_commit(struct atomic_dir *ad);
/* Give up: remove the temporary folder and its files. */
void atomic_dir_abort(struct atomic_dir *ad);

/* Install SIGINT and SIGTERM handlers that unlink the live temporary files, then
 * die of the same signal (main calls this once). A command that handles a signal
 * itself restores this handler when it is done. */
int file_cleanup_on_signals(void);
/* How many temporary files are registered now (tests). */
int file_tmp_live_count(void);

#endif
