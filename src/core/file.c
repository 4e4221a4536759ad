#include "core/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"

static const char *file_kind(mode_t mode)
{
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	return "not a plain file";
}

int file_open_read(const char *path, int *fd_out, long long *size_bytes)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return gp_error(GP_EIO, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) != 0) {
		int err = errno;
		close(fd);
		return gp_error(GP_EIO, "cannot read '%s': %s", path, strerror(err));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return gp_error(GP_EFORMAT, "'%s' is not a regular file (%s)", path,
				file_kind(st.st_mode));
	}
	int flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
		int err = errno;
		close(fd);
		return gp_error(GP_EIO, "cannot read '%s': %s", path, strerror(err));
	}
	if (size_bytes)
		*size_bytes = (long long)st.st_size;
	*fd_out = fd;
	return 0;
}

int file_fopen_read(const char *path, FILE **out, long long *size_bytes)
{
	int fd;
	GP_TRY(file_open_read(path, &fd, size_bytes));
	FILE *f = fdopen(fd, "rb");
	if (!f) {
		int err = errno;
		close(fd);
		return gp_error(GP_EIO, "cannot read '%s': %s", path, strerror(err));
	}
	*out = f;
	return 0;
}

int file_read_all(const char *path, char **buf, size_t *len_bytes)
{
	int fd;
	long long size;
	GP_TRY(file_open_read(path, &fd, &size));
	size_t cap = (size_t)size + 1, len = 0;
	char *b = malloc(cap);
	if (!b) {
		close(fd);
		return gp_error(GP_ENOMEM, "out of memory reading '%s' (%lld bytes)", path, size);
	}
	for (;;) {
		if (len + 1 == cap) { /* the file grew since fstat */
			char *nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				close(fd);
				return gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
			}
			b = nb;
			cap *= 2;
		}
		ssize_t got = read(fd, b + len, cap - 1 - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			int err = errno;
			free(b);
			close(fd);
			return gp_error(GP_EIO, "cannot read '%s': %s", path, strerror(err));
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	b[len] = 0;
	*buf = b;
	*len_bytes = len;
	return 0;
}

/* --- live temporary files ------------------------------------------------------------
 * A slot is free (0), being filled (1) or live (2); the signal handler reads only live
 * slots, whose path no thread writes, so it needs no lock. */

#define TMP_SLOTS 64
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_LIVE };

static atomic_int tmp_state[TMP_SLOTS];
static char tmp_paths[TMP_SLOTS][4096];
/* a temporary folder (atomic_dir): removed after the files, once they are gone */
static atomic_int tmp_is_dir[TMP_SLOTS];

static int tmp_register_kind(const char *path, int is_dir)
{
	for (int i = 0; i < TMP_SLOTS; i++) {
		int expect = SLOT_FREE;
		if (!atomic_compare_exchange_strong(&tmp_state[i], &expect, SLOT_FILLING))
			continue;
		snprintf(tmp_paths[i], sizeof(tmp_paths[i]), "%s", path);
		atomic_store(&tmp_is_dir[i], is_dir);
		atomic_store(&tmp_state[i], SLOT_LIVE);
		return i;
	}
	return -1;
}

static int tmp_register(const char *path)
{
	return tmp_register_kind(path, 0);
}

static void tmp_unregister(int slot)
{
	if (slot >= 0)
		atomic_store(&tmp_state[slot], SLOT_FREE);
}

int file_tmp_live_count(void)
{
	int n = 0;
	for (int i = 0; i < TMP_SLOTS; i++)
		n += atomic_load(&tmp_state[i]) == SLOT_LIVE;
	return n;
}

/* Holding SIGINT and SIGTERM back guards only the thread that holds them: the
 * handler may run in another thread while this one creates a file. tmp_creating
 * counts the threads between open and registration; the handler first says it is
 * dying, then waits (at most a second) for them, so each file is registered before
 * it unlinks, or is never created. */
static atomic_int tmp_dying, tmp_creating;

/* unlink, rmdir, nanosleep and raise are async-signal-safe; the default action then ends
 * the process with the signal, so the parent sees what it sent. */
static void cleanup_on_signal(int sig)
{
	atomic_store(&tmp_dying, 1);
	for (int i = 0; i < 1000 && atomic_load(&tmp_creating) > 0; i++) {
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
	}
	for (int i = 0; i < TMP_SLOTS; i++)
		if (atomic_load(&tmp_state[i]) == SLOT_LIVE && !atomic_load(&tmp_is_dir[i]))
			unlink(tmp_paths[i]);
	for (int i = 0; i < TMP_SLOTS; i++)
		if (atomic_load(&tmp_state[i]) == SLOT_LIVE && atomic_load(&tmp_is_dir[i]))
			rmdir(tmp_paths[i]);
	signal(sig, SIG_DFL);
	raise(sig);
}

int file_cleanup_on_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = cleanup_on_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
		return gp_error(GP_EIO, "cannot install signal handlers: %s", strerror(errno));
	return 0;
}

/* --- temporary files of dead processes ---------------------------------------------
 * SIGKILL leaves no chance to remove a temporary file. The first write into a folder
 * removes those there that name a process no longer alive and have not changed for
 * a minute (a writer on another host or in another PID namespace keeps touching its
 * own); once per folder and process, for the first TMP_SWEPT_MAX folders. */
#define TMP_SWEPT_MAX 256
#define TMP_STALE_S 60
static pthread_mutex_t swept_lock = PTHREAD_MUTEX_INITIALIZER;
static char *swept[TMP_SWEPT_MAX];
static int n_swept;

/* The pid in ".NAME.tmp.PID" or ".NAME.tmp.PID.K", or 0. */
static long tmp_name_pid(const char *name)
{
	const char *t = NULL, *p = name;
	if (name[0] != '.')
		return 0;
	while ((p = strstr(p + 1, ".tmp.")))
		t = p;
	if (!t)
		return 0;
	char *end;
	errno = 0;
	long pid = strtol(t + 5, &end, 10);
	if (end == t + 5 || errno || pid <= 0)
		return 0;
	if (*end == '.') {
		const char *k = end + 1;
		strtol(k, &end, 10);
		if (end == k)
			return 0;
	}
	return *end ? 0 : pid;
}

static void dir_remove_files(const char *path);

static void tmp_sweep_stale(const char *dir)
{
	pthread_mutex_lock(&swept_lock);
	int i = 0;
	while (i < n_swept && strcmp(swept[i], dir))
		i++;
	int todo = i == n_swept && n_swept < TMP_SWEPT_MAX && (swept[n_swept] = strdup(dir));
	n_swept += todo;
	pthread_mutex_unlock(&swept_lock);
	if (!todo)
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	time_t now = time(NULL);
	struct dirent *e;
	struct stat st;
	while ((e = readdir(d))) {
		long pid = tmp_name_pid(e->d_name);
		if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || now - st.st_mtime <= TMP_STALE_S)
			continue;
		if (S_ISREG(st.st_mode))
			unlinkat(dirfd(d), e->d_name, 0);
		else if (S_ISDIR(st.st_mode)) { /* an atomic_dir's folder */
			char sub[4400];
			snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
			dir_remove_files(sub);
		}
	}
	closedir(d);
}

/* Create the temporary file and register it with SIGINT and SIGTERM held back, so
 * that no signal falls between the two. ".NAME.tmp.PID" names its owner; should it
 * exist (another thread writing the same path, or a dead process of the same pid),
 * a numbered name is tried instead. */
static int tmp_create(struct atomic_file *af, int dir_len)
{
	sigset_t block, old;
	int fd = -1, err = 0;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	atomic_fetch_add(&tmp_creating, 1);
	if (atomic_load(&tmp_dying)) {
		atomic_fetch_sub(&tmp_creating, 1);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		return gp_error(GP_EIO, "cannot write '%s': interrupted", af->path);
	}
	for (int k = 0; k < 100 && fd < 0; k++) {
		int n = k ? snprintf(af->tmp_path, sizeof(af->tmp_path), "%.*s.%s.tmp.%ld.%d",
				     dir_len, af->path, af->path + dir_len, (long)getpid(), k)
			  : snprintf(af->tmp_path, sizeof(af->tmp_path), "%.*s.%s.tmp.%ld",
				     dir_len, af->path, af->path + dir_len, (long)getpid());
		if (n >= (int)sizeof(af->tmp_path)) {
			err = ENAMETOOLONG;
			break;
		}
		fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		err = fd < 0 ? errno : 0;
		if (fd < 0 && err != EEXIST)
			break;
	}
	if (fd >= 0)
		af->slot = tmp_register(af->tmp_path);
	atomic_fetch_sub(&tmp_creating, 1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (fd < 0)
		return gp_error(GP_EIO, "cannot write '%s': %s", af->path, strerror(err));
	return fd;
}

int atomic_file_open(struct atomic_file *af, const char *path)
{
	const char *slash = strrchr(path, '/');
	int dir_len = slash ? (int)(slash - path + 1) : 0;

	af->f = NULL;
	af->slot = -1;
	af->tmp_path[0] = 0;
	if (snprintf(af->path, sizeof(af->path), "%s", path) >= (int)sizeof(af->path))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", path);
	/* the rename would put a plain file in place of a device node or a FIFO */
	struct stat st;
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
		return gp_error(GP_EIO, "cannot write '%s': it is %s, not a regular file", path,
				file_kind(st.st_mode));
	char dir[4096];
	snprintf(dir, sizeof(dir), "%.*s", dir_len ? dir_len : 1, dir_len ? path : ".");
	tmp_sweep_stale(dir);
	int fd = tmp_create(af, dir_len);
	if (fd < 0)
		return fd;
	af->f = fdopen(fd, "w");
	if (!af->f) {
		int err = errno;
		close(fd);
		unlink(af->tmp_path);
		tmp_unregister(af->slot);
		af->slot = -1;
		return gp_error(GP_EIO, "cannot write '%s': %s", path, strerror(err));
	}
	return 0;
}

int atomic_file_commit(struct atomic_file *af)
{
	int err = 0;
	errno = 0;
	if (fflush(af->f) != 0 || ferror(af->f))
		err = errno ? errno : EIO;
	else if (fsync(fileno(af->f)) != 0)
		err = errno;
	if (fclose(af->f) != 0 && !err)
		err = errno;
	af->f = NULL;
	if (!err && rename(af->tmp_path, af->path) != 0)
		err = errno;
	if (err)
		unlink(af->tmp_path);
	tmp_unregister(af->slot);
	af->slot = -1;
	if (err)
		return gp_error(GP_EIO, "cannot write '%s': %s", af->path, strerror(err));
	return 0;
}

void atomic_file_abort(struct atomic_file *af)
{
	if (af->f)
		fclose(af->f);
	af->f = NULL;
	if (af->tmp_path[0])
		unlink(af->tmp_path);
	tmp_unregister(af->slot);
	af->slot = -1;
}

int atomic_file_write(const char *path, const void *data, size_t len)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	if (len && fwrite(data, 1, len, af.f) != len) {
		int err = errno;
		atomic_file_abort(&af);
		return gp_error(GP_EIO, "cannot write '%s': %s", path, strerror(err ? err : EIO));
	}
	return atomic_file_commit(&af);
}

/* --- folders that appear complete or not at all ------------------------------------ */

/* Register path (a folder, or a file inside one) with SIGINT and SIGTERM held back,
 * creating the folder first when is_dir: no signal falls between the two. */
static int tmp_dir_register(const char *path, int is_dir, int *slot)
{
	sigset_t block, old;
	int rc = 0;
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &block, &old);
	atomic_fetch_add(&tmp_creating, 1);
	if (atomic_load(&tmp_dying))
		rc = gp_error(GP_EIO, "cannot write '%s': interrupted", path);
	else if (is_dir && mkdir(path, 0755) != 0)
		rc = gp_error(GP_EIO, "cannot create '%s': %s", path, strerror(errno));
	else if ((*slot = tmp_register_kind(path, is_dir)) < 0) {
		if (is_dir)
			rmdir(path);
		rc = gp_error(GP_EIO, "cannot write '%s': too many files in flight", path);
	}
	atomic_fetch_sub(&tmp_creating, 1);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* Remove a folder of plain files (what atomic_dir writes); anything else in it stays,
 * and so does the folder. */
static void dir_remove_files(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(path);
}

int atomic_dir_open(struct atomic_dir *ad, const char *path)
{
	memset(ad, 0, sizeof(*ad));
	ad->slot = -1;
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	if (len >= sizeof(ad->path) - 64)
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", path);
	memcpy(ad->path, path, len);
	ad->path[len] = 0;
	struct stat st;
	if (lstat(ad->path, &st) == 0 && !S_ISDIR(st.st_mode))
		return gp_error(GP_EIO, "cannot write '%s': it is %s, not a folder", ad->path,
				file_kind(st.st_mode));
	const char *slash = strrchr(ad->path, '/');
	int dir_len = slash ? (int)(slash - ad->path + 1) : 0;
	char parent[4096];
	snprintf(parent, sizeof(parent), "%.*s", dir_len ? dir_len : 1, dir_len ? ad->path : ".");
	tmp_sweep_stale(parent);
	if ((size_t)snprintf(ad->tmp_path, sizeof(ad->tmp_path), "%.*s.%s.tmp.%ld", dir_len, ad->path,
			     ad->path + dir_len, (long)getpid()) >= sizeof(ad->tmp_path))
		return gp_error(GP_EINVAL, "path too long: '%.64s...'", path);
	dir_remove_files(ad->tmp_path); /* a run of the same pid that died */
	return tmp_dir_register(ad->tmp_path, 1, &ad->slot);
}

int atomic_dir_file(struct atomic_dir *ad, const char *name, char *out, size_t cap)
{
	if (ad->n_files >= ATOMIC_DIR_FILES)
		return gp_error(GP_EINVAL, "more than %d files in '%s'", ATOMIC_DIR_FILES, ad->path);
	if ((size_t)snprintf(out, cap, "%s/%s", ad->tmp_path, name) >= cap)
		return gp_error(GP_EINVAL, "path too long: '%s/%s'", ad->path, name);
	GP_TRY(tmp_dir_register(out, 0, &ad->file_slots[ad->n_files]));
	ad->n_files++;
	return 0;
}

static void atomic_dir_unregister(struct atomic_dir *ad)
{
	for (int i = 0; i < ad->n_files; i++)
		tmp_unregister(ad->file_slots[i]);
	tmp_unregister(ad->slot);
	ad->n_files = 0;
	ad->slot = -1;
}

/* The folder in place: renamed where nothing is, else exchanged with the old one in
 * one step (renameat2's RENAME_EXCHANGE), whose files are then removed from the
 * temporary name. Where the file system cannot exchange, the old folder is moved
 * aside first: for a moment there is none. */
int atomic_dir_commit(struct atomic_dir *ad)
{
	int fd = open(ad->tmp_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	struct stat st;
	if (lstat(ad->path, &st) != 0) {
		if (rename(ad->tmp_path, ad->path) != 0)
			err = errno;
	} else if (renameat2(AT_FDCWD, ad->tmp_path, AT_FDCWD, ad->path, RENAME_EXCHANGE) == 0) {
		dir_remove_files(ad->tmp_path); /* the old folder, now under the temporary name */
	} else {
		char aside[4200];
		snprintf(aside, sizeof(aside), "%s.old", ad->tmp_path);
		if (rename(ad->path, aside) != 0 || rename(ad->tmp_path, ad->path) != 0)
			err = errno;
		dir_remove_files(aside);
	}
	if (err)
		dir_remove_files(ad->tmp_path);
	atomic_dir_unregister(ad);
	if (err)
		return gp_error(GP_EIO, "cannot write '%s': %s", ad->path, strerror(err));
	return 0;
}

void atomic_dir_abort(struct atomic_dir *ad)
{
	if (ad->slot < 0)
		return;
	dir_remove_files(ad->tmp_path);
	atomic_dir_unregister(ad);
}
