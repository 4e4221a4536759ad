/* The MPI transport as a run-time plugin: build/libgpuperf_mpi.so (mpi_plugin.c, built
 * with mpicc when MPI is found) exports dist_mpi_plugin(), and dist.c loads it with
 * dlopen only when mpirun started the run, so that gpuperf itself never links libmpi
 * and runs where MPI is absent. No MPI type crosses this interface: a call returns 0
 * or an MPI error code, which errstr turns into text.
 *
 * There is no abort: MPI_Abort would end this process before main prints why. A
 * failed rank leaves without MPI_Finalize instead, and mpirun then ends the others. */
#ifndef GP_DIST_MPI_PLUGIN_H
#define GP_DIST_MPI_PLUGIN_H

#include <stddef.h>

#define DIST_MPI_PLUGIN_VERSION 1
#define DIST_MPI_PLUGIN_SYMBOL "dist_mpi_plugin"
#define DIST_MPI_PLUGIN_FILE "libgpuperf_mpi.so"

enum dist_mpi_dtype { DIST_MPI_F32 = 0, DIST_MPI_F64 = 1 };

struct dist_mpi_ops {
	int version; /* DIST_MPI_PLUGIN_VERSION */
	/* MPI_Init (errors then return instead of ending the job); rank and size of
	 * MPI_COMM_WORLD; library: the MPI library's version line. */
	int (*init)(int *rank, int *world, char *library, size_t cap);
	int (*finalize)(void);
	int (*barrier)(void);
	int (*bcast)(void *buf, size_t bytes, int root);
	int (*allreduce_sum)(void *buf, size_t count, enum dist_mpi_dtype dtype);
	/* recv: world * bytes at root, rank-major */
	int (*gather)(const void *send, size_t bytes, void *recv, int root);
	/* *req is the plugin's; wait finishes and frees it */
	int (*iallreduce_sum)(void *buf, size_t count, enum dist_mpi_dtype dtype, void **req);
	int (*wait)(void *req);
	void (*errstr)(int code, char *buf, size_t cap);
};

typedef const struct dist_mpi_ops *(*dist_mpi_plugin_fn)(void);

#endif
