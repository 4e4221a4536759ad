/* Commands that train as one rank of several (train, scale): joining the group the
 * launcher describes, and the rank's GPU. */
#ifndef GP_CMD_DP_H
#define GP_CMD_DP_H

#include "dist/dist.h"
#include "ops/graph.h"

struct cmd_dist_opts {
	const char *transport; /* auto | tcp | mpi */
	double timeout_s;      /* 0: the group's default */
};

/* Join the group the launcher's variables describe (*out NULL when the process runs
 * alone, without any launcher); on the CUDA backend *device is the rank's local
 * rank, checked against the GPUs there are. */
int cmd_dist_join(enum backend_kind backend, const struct cmd_dist_opts *o, struct dist **out,
		  int *device);
/* GPUs on this machine (0 without a driver). */
int cmd_dist_gpu_count(void);
/* Was this process started as a rank (a launcher's variables are set)? */
int cmd_dist_launched(void);
/* Refuse --nproc N where it cannot work: inside a launched run, N below 1, or more
 * GPUs than there are on the CUDA backend. */
int cmd_dist_check_nproc(int nproc, enum backend_kind backend);
/* The command line of each rank a --nproc launch starts: argv without --nproc and
 * --out (either as "--opt VALUE" or "--opt=VALUE"), then "--out DIR", the folder the
 * launch prepared. *child (NULL-terminated) is allocated as one block: free() it. */
int cmd_dist_child_argv(int argc, char **argv, const char *dir, int *child_argc, char ***child);
/* The names --transport takes, in table order, NULL past the last. */
const char *cmd_dist_transport_at(int i);

#endif
