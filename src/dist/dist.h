/* Processes that train one model together (data parallelism).
 *
 * A rank learns who it is from its launcher's variables (dist_env_read): torchrun's
 * RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, Open MPI's OMPI_COMM_WORLD_*,
 * Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, or gpuperf's own launcher
 * (`--nproc`, which sets torchrun's). dist_open joins the group: through MPI when the
 * run was started by mpirun and the MPI plugin loads, otherwise through a small TCP
 * rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 listens, every other rank connects).
 * The host collectives below go through that transport; gradients on a GPU go through
 * NCCL (dist/cuda/nccl.h), whose unique id travels by dist_bcast.
 *
 * Every rank calls the collectives in the same order (one thread at a time per group).
 * A rank that fails calls dist_abort with its reason: every other rank's pending and
 * later calls then return GP_EDEVICE with the message "rank R failed: REASON"; a rank
 * that dies or stops answering for timeout_s is reported as "rank R ..." in the same
 * way, so no rank hangs. Errors are values: nothing here exits. */
#ifndef GP_DIST_H
#define GP_DIST_H

#include <stddef.h>

#include "core/tensor.h"

enum dist_launcher {
	DIST_LAUNCH_NONE = 0, /* one process, no variables */
	DIST_LAUNCH_TORCHRUN, /* RANK, WORLD_SIZE, LOCAL_RANK (also gpuperf --nproc) */
	DIST_LAUNCH_MPI,      /* OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE */
	DIST_LAUNCH_SLURM,    /* SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID */
};

struct dist_env {
	enum dist_launcher launcher;
	int rank, world;            /* 0 and 1 without a launcher */
	int local_rank, local_world; /* on this host; local_world 0 when unknown */
	char master_addr[256];      /* "" when not given */
	int master_port;            /* 0 when not given */
	/* The launch this rank belongs to (the launcher's job id, "" when none): ranks
	 * of two jobs that meet at one port refuse each other. */
	char job[64];
};

/* Read the launcher's variables. Without any, a world of one. Inconsistent or
 * malformed values (RANK without WORLD_SIZE, rank >= world, a port out of range) are
 * GP_EINVAL with a message naming the variable. When every rank is on this host and
 * no MASTER_ADDR is given, the rendezvous is 127.0.0.1 at a port derived from the job
 * id (29500 without one). */
int dist_env_read(struct dist_env *env);
/* The same from a lookup function instead of the process's environment (tests). */
int dist_env_parse(const char *(*get)(const char *name, void *arg), void *arg,
		   struct dist_env *env);
const char *dist_launcher_name(enum dist_launcher l);

struct dist_opts {
	double timeout_s;  /* rendezvous and each collective; 0: 300 s */
	int transport;     /* DIST_TRANSPORT_AUTO, _TCP or _MPI */
};
enum { DIST_TRANSPORT_AUTO = 0, DIST_TRANSPORT_TCP, DIST_TRANSPORT_MPI };
struct dist_opts dist_opts_default(void);

struct dist;
/* Join the group described by env. A world of one needs no transport and always
 * succeeds. */
int dist_open(const struct dist_env *env, const struct dist_opts *o, struct dist **out);
/* Leave the group (after a failure, without waiting for the others). NULL is fine.
 * A rank that fails calls dist_abort first: under MPI a plain close is MPI_Finalize,
 * which waits for the other ranks. */
void dist_close(struct dist *d);

int dist_rank(const struct dist *d);       /* 0 for NULL */
int dist_world(const struct dist *d);      /* 1 for NULL */
int dist_local_rank(const struct dist *d); /* 0 for NULL */
const char *dist_transport_name(const struct dist *d); /* "none", "tcp" or "mpi" */
double dist_timeout_s(const struct dist *d); /* what each wait may take */

/* Host collectives; buf in host memory. dtype GP_F32 or GP_F64 for the reductions. */
int dist_barrier(struct dist *d);
int dist_bcast(struct dist *d, void *buf, size_t bytes, int root);
int dist_allreduce_sum(struct dist *d, void *buf, size_t count, enum gp_dtype dtype);
/* recv (world * bytes, rank-major) is filled at root only; may be NULL elsewhere. */
int dist_gather(struct dist *d, const void *send, size_t bytes, void *recv, int root);
/* Start a sum all-reduce of buf in place; dist_wait finishes it (buf must stay
 * valid until then). A transport without overlap may do the work in either call. */
struct dist_req;
int dist_iallreduce_sum(struct dist *d, void *buf, size_t count, enum gp_dtype dtype,
			struct dist_req **req);
int dist_wait(struct dist *d, struct dist_req *req);

/* Tell every other rank that this one failed (one line, why) and make the group
 * unusable; safe to call more than once and from the failing path only. */
void dist_abort(struct dist *d, const char *why);
/* Look, without waiting, whether another rank has failed or gone (for long waits
 * outside the collectives, such as NCCL's set-up): 0, or the group's GP_EDEVICE. */
int dist_poll(struct dist *d);
/* 1 once another rank has failed (its message in dist_failure), else 0. */
int dist_failed(const struct dist *d);
const char *dist_failure(const struct dist *d);

#endif
