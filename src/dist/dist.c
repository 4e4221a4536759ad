/* The process group (dist.h): its API and the dispatch of each call to a world of
 * one (no wire), MPI through the plugin (loaded here), or TCP (tcp.c). A group that
 * has failed answers every call with its failure. */
#include "dist/dist.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/tuning.h"
#include "dist/dist_priv.h"
#include "dist/mpi_plugin.h"

#define DIST_TIMEOUT_DEFAULT_S 300.0

struct dist_req {
	int rc;
	char msg[512];
	void *mpi_req;
};

struct dist_opts dist_opts_default(void)
{
	return (struct dist_opts){ .timeout_s = DIST_TIMEOUT_DEFAULT_S,
				   .transport = DIST_TRANSPORT_AUTO };
}

int dist_rank(const struct dist *d) { return d ? d->rank : 0; }
int dist_world(const struct dist *d) { return d ? d->world : 1; }
int dist_local_rank(const struct dist *d) { return d ? d->local_rank : 0; }
int dist_failed(const struct dist *d) { return d && d->failed; }
double dist_timeout_s(const struct dist *d) { return d ? d->timeout_s : DIST_TIMEOUT_DEFAULT_S; }
const char *dist_failure(const struct dist *d) { return d && d->failed ? d->failure : ""; }

const char *dist_transport_name(const struct dist *d)
{
	if (!d || d->kind == T_NONE)
		return "none";
	return d->kind == T_TCP ? "tcp" : "mpi";
}

/* The plugin beside the executable (or in lib/ beside it, as the bundle has it), or
 * GPUPERF_MPI_LIB. NULL with why set when none loads. */
static const struct dist_mpi_ops *mpi_plugin_load(char *why, size_t cap)
{
	char paths[2][PATH_MAX + 32];
	int n = 0;
	const char *forced = tuning_get()->mpi_lib;
	if (forced[0]) {
		snprintf(paths[n++], sizeof(paths[0]), "%s", forced);
	} else {
		char exe[PATH_MAX];
		ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (len <= 0)
			return snprintf(why, cap, "cannot find the executable's folder"), NULL;
		exe[len] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		snprintf(paths[n++], sizeof(paths[0]), "%s/%s", exe, DIST_MPI_PLUGIN_FILE);
		snprintf(paths[n++], sizeof(paths[0]), "%s/lib/%s", exe, DIST_MPI_PLUGIN_FILE);
	}
	why[0] = 0;
	for (int i = 0; i < n; i++) {
		/* global: Open MPI's own components resolve libmpi's symbols through it */
		void *h = dlopen(paths[i], RTLD_NOW | RTLD_GLOBAL);
		if (!h) {
			if (!why[0] || access(paths[i], F_OK) == 0)
				snprintf(why, cap, "%s", dlerror());
			continue;
		}
		dist_mpi_plugin_fn fn = (dist_mpi_plugin_fn)dlsym(h, DIST_MPI_PLUGIN_SYMBOL);
		const struct dist_mpi_ops *ops = fn ? fn() : NULL;
		if (ops && ops->version == DIST_MPI_PLUGIN_VERSION)
			return ops;
		snprintf(why, cap, "%.300s is not a gpuperf MPI plugin of version %d", paths[i],
			 DIST_MPI_PLUGIN_VERSION);
		dlclose(h);
	}
	return NULL;
}

static int mpi_error(struct dist *d, const char *call, int code)
{
	char s[256];
	d->mpi->errstr(code, s, sizeof(s));
	return gp_error(GP_EDEVICE, "%s: %s", call, s);
}

static int mpi_open(struct dist *d, const struct dist_env *env)
{
	int rank = -1, world = 0;
	char lib[128];
	int rc = d->mpi->init(&rank, &world, lib, sizeof(lib));
	if (rc)
		return mpi_error(d, "MPI_Init", rc);
	if (rank != env->rank || world != env->world)
		return gp_error(GP_EDEVICE, "MPI says rank %d of %d, the launcher's variables %d of %d",
				rank, world, env->rank, env->world);
	return 0;
}

int dist_open(const struct dist_env *env, const struct dist_opts *o, struct dist **out)
{
	struct dist_opts def = dist_opts_default();
	if (!o)
		o = &def;
	if (o->transport < DIST_TRANSPORT_AUTO || o->transport > DIST_TRANSPORT_MPI)
		return gp_error(GP_EINVAL, "unknown transport %d", o->transport);
	struct dist *d = calloc(1, sizeof(*d));
	if (!d)
		return gp_error(GP_ENOMEM, "out of memory");
	d->rank = env->rank;
	d->world = env->world;
	d->local_rank = env->local_rank;
	d->timeout_s = o->timeout_s > 0 ? o->timeout_s : DIST_TIMEOUT_DEFAULT_S;
	snprintf(d->job, sizeof(d->job), "%s", env->job);
	*out = NULL;
	int rc = 0;
	if (d->world == 1 && o->transport != DIST_TRANSPORT_MPI) {
		d->kind = T_NONE;
		*out = d;
		return 0;
	}
	if (o->transport == DIST_TRANSPORT_MPI && env->launcher != DIST_LAUNCH_MPI) {
		rc = gp_error(GP_EINVAL, "the MPI transport needs a run started by mpirun (this one: %s)",
			      dist_launcher_name(env->launcher));
		goto fail;
	}
	if (env->launcher == DIST_LAUNCH_MPI && o->transport != DIST_TRANSPORT_TCP) {
		char why[512];
		d->mpi = mpi_plugin_load(why, sizeof(why));
		if (d->mpi) {
			d->kind = T_MPI;
			if ((rc = mpi_open(d, env)) < 0)
				goto fail;
			*out = d;
			return 0;
		}
		if (o->transport == DIST_TRANSPORT_MPI) {
			rc = gp_error(GP_ENODEV, "the MPI transport cannot load: %s", why);
			goto fail;
		}
		if (d->rank == 0)
			fprintf(stderr, "note: MPI plugin not loaded (%s); using TCP\n", why);
	}
	if (d->world == 1) {
		d->kind = T_NONE;
		*out = d;
		return 0;
	}
	d->kind = T_TCP;
	if ((rc = tcp_open(d, env)) < 0)
		goto fail;
	*out = d;
	return 0;
fail:
	d->failed = 1; /* no MPI_Finalize after a failed start */
	dist_close(d);
	return rc;
}

void dist_close(struct dist *d)
{
	if (!d)
		return;
	if (d->kind == T_MPI && !d->failed)
		d->mpi->finalize();
	if (d->fd)
		for (int r = 0; r < d->world; r++)
			if (d->fd[r] >= 0)
				close(d->fd[r]);
	free(d->fd);
	free(d->send_left);
	free(d->owed);
	free(d->scratch);
	free(d);
}

void dist_abort(struct dist *d, const char *why)
{
	if (!d || d->aborted)
		return;
	d->aborted = 1;
	if (!d->failed) {
		d->failed = 1;
		snprintf(d->failure, sizeof(d->failure), "rank %d failed: %s", d->rank, why);
		d->fail_origin = d->rank;
		snprintf(d->fail_why, sizeof(d->fail_why), "%s", why);
	}
	if (d->kind == T_TCP)
		tcp_abort(d, why);
}

/* A call on a group that has failed, or one of transport T_NONE, needs no wire. */
#define GROUP_ENTER(d)                           \
	do {                                     \
		if ((d)->failed)                 \
			return group_error(d);   \
	} while (0)

int dist_poll(struct dist *d)
{
	if (!d)
		return 0;
	GROUP_ENTER(d);
	return d->kind == T_TCP ? tcp_poll(d) : 0;
}

int dist_barrier(struct dist *d)
{
	GROUP_ENTER(d);
	if (d->kind == T_MPI) {
		int rc = d->mpi->barrier();
		return rc ? mpi_error(d, "MPI_Barrier", rc) : 0;
	}
	if (d->kind == T_NONE)
		return 0;
	return tcp_barrier(d);
}

static int check_root(struct dist *d, int root, const char *what)
{
	if (root < 0 || root >= d->world)
		return gp_error(GP_EINVAL, "%s: root %d is not a rank of a world of %d", what, root,
				d->world);
	return 0;
}

int dist_bcast(struct dist *d, void *buf, size_t bytes, int root)
{
	GROUP_ENTER(d);
	GP_TRY(check_root(d, root, "dist_bcast"));
	if (d->kind == T_MPI) {
		int rc = d->mpi->bcast(buf, bytes, root);
		return rc ? mpi_error(d, "MPI_Bcast", rc) : 0;
	}
	if (d->kind == T_NONE)
		return 0;
	return tcp_bcast(d, buf, bytes, root);
}

static int check_dtype(enum gp_dtype t, const char *what)
{
	if (t != GP_F32 && t != GP_F64)
		return gp_error(GP_EINVAL, "%s: %s: only f32 and f64 are summed on the host", what,
				dtype_name(t));
	return 0;
}

int dist_allreduce_sum(struct dist *d, void *buf, size_t count, enum gp_dtype dtype)
{
	GROUP_ENTER(d);
	GP_TRY(check_dtype(dtype, "dist_allreduce_sum"));
	if (d->kind == T_MPI) {
		int rc = d->mpi->allreduce_sum(buf, count, dtype == GP_F64 ? DIST_MPI_F64 : DIST_MPI_F32);
		return rc ? mpi_error(d, "MPI_Allreduce", rc) : 0;
	}
	if (d->kind == T_NONE)
		return 0;
	return tcp_allreduce(d, buf, count, dtype);
}

int dist_gather(struct dist *d, const void *send, size_t bytes, void *recv, int root)
{
	GROUP_ENTER(d);
	GP_TRY(check_root(d, root, "dist_gather"));
	if (d->rank == root && !recv && bytes)
		return gp_error(GP_EINVAL, "dist_gather: the root needs a receive buffer");
	if (d->kind == T_MPI) {
		int rc = d->mpi->gather(send, bytes, recv, root);
		return rc ? mpi_error(d, "MPI_Gather", rc) : 0;
	}
	if (d->kind == T_NONE) {
		memcpy(recv, send, bytes);
		return 0;
	}
	return tcp_gather(d, send, bytes, recv, root);
}

int dist_iallreduce_sum(struct dist *d, void *buf, size_t count, enum gp_dtype dtype,
			struct dist_req **req)
{
	*req = NULL;
	GROUP_ENTER(d);
	GP_TRY(check_dtype(dtype, "dist_iallreduce_sum"));
	struct dist_req *q = calloc(1, sizeof(*q));
	if (!q)
		return gp_error(GP_ENOMEM, "out of memory");
	if (d->kind == T_MPI) {
		int rc = d->mpi->iallreduce_sum(buf, count, dtype == GP_F64 ? DIST_MPI_F64 : DIST_MPI_F32,
						&q->mpi_req);
		if (rc) {
			free(q);
			return mpi_error(d, "MPI_Iallreduce", rc);
		}
	} else {
		/* TCP has no progress of its own: the work is done now, its end kept */
		q->rc = dist_allreduce_sum(d, buf, count, dtype);
		if (q->rc < 0)
			snprintf(q->msg, sizeof(q->msg), "%s", gp_errmsg());
	}
	*req = q;
	return 0;
}

int dist_wait(struct dist *d, struct dist_req *req)
{
	if (!req)
		return gp_error(GP_EINVAL, "dist_wait: no request");
	int rc = req->rc;
	if (req->mpi_req) {
		int e = d->mpi->wait(req->mpi_req);
		rc = e ? mpi_error(d, "MPI_Wait", e) : 0;
	} else if (rc < 0) {
		gp_error(rc, "%s", req->msg);
	}
	free(req);
	return rc;
}
