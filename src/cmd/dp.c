/* Joining a data-parallel run from a command: what the launcher says, the transport
 * asked for, and the GPU each rank takes (its local rank, as torchrun's LOCAL_RANK). */
#include "cmd/dp.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"
#include "gpu/devinfo.h"

static const char *const transport_names[] = { "auto", "tcp", "mpi" };

const char *cmd_dist_transport_at(int i)
{
	return i >= 0 && i < (int)(sizeof(transport_names) / sizeof(transport_names[0]))
		       ? transport_names[i] : NULL;
}

int cmd_dist_launched(void)
{
	struct dist_env env;
	return dist_env_read(&env) == 0 && env.launcher != DIST_LAUNCH_NONE;
}

int cmd_dist_gpu_count(void)
{
	struct gp_devinfo d;
	devinfo_query(&d);
	return d.gpu_count;
}

int cmd_dist_check_nproc(int nproc, enum backend_kind backend)
{
	if (nproc < 1)
		return gp_error(GP_EINVAL, "--nproc must be at least 1 (got %d)", nproc);
	if (cmd_dist_launched())
		return gp_error(GP_EINVAL, "--nproc inside a run a launcher started (RANK or "
				"OMPI_COMM_WORLD_RANK or SLURM_PROCID is set): let that launcher start the ranks");
	if (backend == BACKEND_CUDA) {
		int n = cmd_dist_gpu_count();
		if (nproc > n)
			return gp_error(GP_ENODEV, "--nproc %d: this machine has %d GPU%s (one rank per GPU)",
					nproc, n, n == 1 ? "" : "s");
	}
	return 0;
}

int cmd_dist_join(enum backend_kind backend, const struct cmd_dist_opts *o, struct dist **out,
		  int *device)
{
	struct dist_env env;
	*out = NULL;
	*device = 0;
	GP_TRY(dist_env_read(&env));
	if (env.launcher == DIST_LAUNCH_NONE)
		return 0;
	if (backend == BACKEND_CUDA) {
		int n = cmd_dist_gpu_count();
		if (env.local_rank >= n)
			return gp_error(GP_ENODEV, "rank %d (local rank %d) has no GPU: this host has %d "
					"(one rank per GPU)", env.rank, env.local_rank, n);
		*device = env.local_rank;
	}
	struct dist_opts d = dist_opts_default();
	if (o && o->timeout_s > 0)
		d.timeout_s = o->timeout_s;
	if (o && o->transport) {
		int t = names_find(cmd_dist_transport_at, o->transport);
		char known[64];
		if (t < 0)
			return gp_error(GP_EINVAL, "--rendezvous must be %s (got '%s')",
					names_join(known, sizeof(known), cmd_dist_transport_at, ", ", " or "),
					o->transport);
		d.transport = t == 1 ? DIST_TRANSPORT_TCP : t == 2 ? DIST_TRANSPORT_MPI : DIST_TRANSPORT_AUTO;
	}
	return dist_open(&env, &d, out);
}

/* Is argv[i] the option name (as "--name" or "--name=...")? 1: a value follows in
 * argv[i + 1]; 2: the value is inside; 0: another argument. */
static int is_opt(const char *arg, const char *name)
{
	size_t n = strlen(name);
	if (strncmp(arg, "--", 2) || strncmp(arg + 2, name, n))
		return 0;
	return arg[2 + n] == '\0' ? 1 : arg[2 + n] == '=' ? 2 : 0;
}

int cmd_dist_child_argv(int argc, char **argv, const char *dir, int *child_argc, char ***child)
{
	char **v = malloc(sizeof(char *) * ((size_t)argc + 3));
	if (!v)
		return gp_error(GP_ENOMEM, "out of memory");
	int n = 0;
	for (int i = 0; i < argc; i++) {
		int k = is_opt(argv[i], "nproc");
		if (!k)
			k = is_opt(argv[i], "out");
		if (k == 1)
			i++; /* its value */
		else if (!k)
			v[n++] = argv[i];
	}
	v[n++] = (char *)"--out";
	v[n++] = (char *)dir;
	v[n] = NULL;
	*child_argc = n;
	*child = v;
	return 0;
}
