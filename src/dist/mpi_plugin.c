/* The MPI transport (see mpi_plugin.h), built apart from libgpuperf with mpicc into
 * libgpuperf_mpi.so. Counts above INT_MAX go in slices, as MPI counts are int. */
#include "dist/mpi_plugin.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#define SLICE ((size_t)1 << 30)

static int plugin_init(int *rank, int *world, char *library, size_t cap)
{
	int inited = 0, rc;
	MPI_Initialized(&inited);
	if (!inited && (rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS)
		return rc;
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, rank)) != MPI_SUCCESS ||
	    (rc = MPI_Comm_size(MPI_COMM_WORLD, world)) != MPI_SUCCESS)
		return rc;
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int len = 0;
	MPI_Get_library_version(v, &len);
	/* the first line: "Open MPI v4.1.4, package: ..." up to the comma */
	int n = 0;
	while (n < len && v[n] && v[n] != ',' && v[n] != '\n')
		n++;
	snprintf(library, cap, "%.*s", n, v);
	return MPI_SUCCESS;
}

static int plugin_finalize(void)
{
	return MPI_Finalize();
}

static int plugin_barrier(void)
{
	return MPI_Barrier(MPI_COMM_WORLD);
}

static int plugin_bcast(void *buf, size_t bytes, int root)
{
	for (size_t off = 0; off < bytes; off += SLICE) {
		size_t n = bytes - off < SLICE ? bytes - off : SLICE;
		int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return rc;
	}
	return MPI_SUCCESS;
}

static MPI_Datatype mpi_type(enum dist_mpi_dtype t, size_t *elem)
{
	*elem = t == DIST_MPI_F64 ? 8 : 4;
	return t == DIST_MPI_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

static int plugin_allreduce_sum(void *buf, size_t count, enum dist_mpi_dtype dtype)
{
	size_t elem;
	MPI_Datatype t = mpi_type(dtype, &elem);
	for (size_t off = 0; off < count; off += SLICE) {
		size_t n = count - off < SLICE ? count - off : SLICE;
		int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * elem, (int)n, t, MPI_SUM,
				       MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return rc;
	}
	return MPI_SUCCESS;
}

static int plugin_gather(const void *send, size_t bytes, void *recv, int root)
{
	if (bytes > INT_MAX)
		return MPI_ERR_COUNT;
	return MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root,
			  MPI_COMM_WORLD);
}

/* One request per slice; the handle holds them all. */
struct plugin_req {
	int n;
	MPI_Request r[];
};

static int plugin_iallreduce_sum(void *buf, size_t count, enum dist_mpi_dtype dtype, void **req)
{
	size_t elem;
	MPI_Datatype t = mpi_type(dtype, &elem);
	int slices = (int)((count + SLICE - 1) / SLICE);
	struct plugin_req *q = malloc(sizeof(*q) + (size_t)(slices ? slices : 1) * sizeof(MPI_Request));
	if (!q)
		return MPI_ERR_NO_MEM;
	q->n = 0;
	for (size_t off = 0; off < count; off += SLICE) {
		size_t n = count - off < SLICE ? count - off : SLICE;
		int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * elem, (int)n, t, MPI_SUM,
					MPI_COMM_WORLD, &q->r[q->n]);
		if (rc != MPI_SUCCESS) {
			MPI_Waitall(q->n, q->r, MPI_STATUSES_IGNORE);
			free(q);
			return rc;
		}
		q->n++;
	}
	*req = q;
	return MPI_SUCCESS;
}

static int plugin_wait(void *req)
{
	struct plugin_req *q = req;
	int rc = MPI_Waitall(q->n, q->r, MPI_STATUSES_IGNORE);
	free(q);
	return rc;
}

static void plugin_errstr(int code, char *buf, size_t cap)
{
	char s[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
		len = snprintf(s, sizeof(s), "MPI error %d", code);
	snprintf(buf, cap, "%.*s", len, s);
}

static const struct dist_mpi_ops ops = {
	.version = DIST_MPI_PLUGIN_VERSION,
	.init = plugin_init,
	.finalize = plugin_finalize,
	.barrier = plugin_barrier,
	.bcast = plugin_bcast,
	.allreduce_sum = plugin_allreduce_sum,
	.gather = plugin_gather,
	.iallreduce_sum = plugin_iallreduce_sum,
	.wait = plugin_wait,
	.errstr = plugin_errstr,
};

__attribute__((visibility("default"))) const struct dist_mpi_ops *dist_mpi_plugin(void)
{
	return &ops;
}
