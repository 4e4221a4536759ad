/* What the process group's two halves share: dist.c (the API, its dispatch, the
 * world of one and MPI through the plugin) and tcp.c (the TCP transport). Not for
 * use outside src/dist/dist.c and src/dist/tcp.c. */
#ifndef GP_DIST_PRIV_H
#define GP_DIST_PRIV_H

#include <stddef.h>

#include "core/error.h"
#include "dist/dist.h"

struct dist_mpi_ops;

/* struct dist's kind: a world of one (no wire), TCP (tcp.c) or MPI (the plugin) */
enum { T_NONE = 0, T_TCP, T_MPI };

struct dist {
	int rank, world, local_rank;
	int kind;
	double timeout_s;
	char job[64];
	/* TCP: rank 0 holds fd[r] for every other rank r (fd[0] = -1); the others hold
	 * fd[0], the connection to rank 0. -1 once closed. */
	int *fd;
	/* rank 0, during a collective: owed[r] while rank r has not had all of it (its
	 * connection closing then is a failure; after, it may have left for good) */
	unsigned char *owed;
	/* bytes of the frame being sent on each connection still to go: an ABORT frame
	 * must not land in the middle of another */
	size_t *send_left;
	unsigned char *scratch; /* rank 0's receive chunk */
	/* MPI */
	const struct dist_mpi_ops *mpi;
	/* failure: failed once this rank or another has failed; message for callers */
	int failed, aborted;
	char failure[512];
	int fail_origin;    /* the rank that failed, and its reason, for relaying */
	char fail_why[400];
};

/* The error every call on a failed group returns: the failure as first recorded. */
static inline int group_error(struct dist *d)
{
	return gp_error(GP_EDEVICE, "%s", d->failure);
}

/* --- the TCP transport (tcp.c) --- */

/* Check MASTER_ADDR and MASTER_PORT, set up the connections' bookkeeping, then
 * rendezvous: rank 0 serves, the others join. On failure dist_open frees it all. */
int tcp_open(struct dist *d, const struct dist_env *env);
/* Tell the other ranks of this rank's failure (d->failure is set). */
void tcp_abort(struct dist *d, const char *why);
/* A look at the connections without waiting: 0, or the failure they report. */
int tcp_poll(struct dist *d);
int tcp_barrier(struct dist *d);
int tcp_bcast(struct dist *d, void *buf, size_t bytes, int root);
int tcp_allreduce(struct dist *d, void *buf, size_t count, enum gp_dtype dtype);
int tcp_gather(struct dist *d, const void *send, size_t bytes, void *recv, int root);

#endif
