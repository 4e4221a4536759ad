/* Who this rank is, from its launcher's variables. Reading the environment is this
 * module's purpose: the launcher's variables are the interface torchrun, mpirun and
 * srun define, read once per process by dist_env_read (the one getenv of dist/, as
 * core/tuning.c holds gpuperf's own switches). */
#include "dist/dist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define DIST_PORT_DEFAULT 29500
/* Derived ports stay below Linux's ephemeral range (32768 and up), where a connection's
 * own port could already hold them. */
#define DIST_PORT_SPAN 2000

typedef const char *(*env_get_fn)(const char *name, void *arg);

const char *dist_launcher_name(enum dist_launcher l)
{
	switch (l) {
	case DIST_LAUNCH_TORCHRUN: return "torchrun";
	case DIST_LAUNCH_MPI: return "mpi";
	case DIST_LAUNCH_SLURM: return "slurm";
	default: return "none";
	}
}

/* name's value as an integer in [min, max]; absent leaves *out and returns 0, so
 * callers test presence with get() first where it matters. */
static int env_int(env_get_fn get, void *arg, const char *name, long min, long max, int *out)
{
	const char *v = get(name, arg);
	if (!v)
		return 0;
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (!*v || end == v || *end)
		return gp_error(GP_EINVAL, "%s='%.40s' is not an integer", name, v);
	if (errno == ERANGE || x < min || x > max)
		return gp_error(GP_EINVAL, "%s=%s is out of range (%ld to %ld)", name, v, min, max);
	*out = (int)x;
	return 1;
}

/* Slurm's node list "gpu[003-005,007],cpu1" or "a,b": the first host's name. */
static void slurm_first_host(const char *list, char *out, size_t cap)
{
	size_t pre = strcspn(list, "[,");
	if (list[pre] != '[') {
		snprintf(out, cap, "%.*s", (int)pre, list);
		return;
	}
	const char *num = list + pre + 1;
	size_t digits = strcspn(num, "-,]");
	snprintf(out, cap, "%.*s%.*s", (int)pre, list, (int)digits, num);
}

static unsigned long job_number(const char *job)
{
	unsigned long h = 0;
	for (const char *p = job; *p; p++)
		h = h * 31 + (unsigned char)*p;
	return h;
}

/* The variables of a launcher that names rank, world and local values directly and
 * takes the rendezvous from MASTER_ADDR/MASTER_PORT (torchrun; Open MPI for the TCP
 * fallback); job ids in order of preference. */
struct launcher_vars {
	const char *rank, *world, *local_rank, *local_world, *job[2];
};

static const struct launcher_vars torchrun_vars = {
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
	{ "GPUPERF_DIST_JOB", "TORCHELASTIC_RUN_ID" },
};
static const struct launcher_vars mpi_vars = {
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
	"OMPI_COMM_WORLD_LOCAL_SIZE", { "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE" },
};

static int read_launcher(env_get_fn get, void *arg, const struct launcher_vars *v,
			 struct dist_env *e)
{
	if (!get(v->world, arg))
		return gp_error(GP_EINVAL, "%s is set but %s is not", v->rank, v->world);
	GP_TRY(env_int(get, arg, v->world, 1, 1 << 20, &e->world));
	GP_TRY(env_int(get, arg, v->rank, 0, INT_MAX, &e->rank));
	e->local_rank = e->rank;
	if (env_int(get, arg, v->local_rank, 0, INT_MAX, &e->local_rank) < 0)
		return GP_EINVAL;
	if (env_int(get, arg, v->local_world, 1, 1 << 20, &e->local_world) < 0)
		return GP_EINVAL;
	const char *addr = get("MASTER_ADDR", arg);
	if (addr)
		snprintf(e->master_addr, sizeof(e->master_addr), "%s", addr);
	if (env_int(get, arg, "MASTER_PORT", 1, 65535, &e->master_port) < 0)
		return GP_EINVAL;
	const char *job = get(v->job[0], arg);
	if (!job)
		job = get(v->job[1], arg);
	snprintf(e->job, sizeof(e->job), "%s", job ? job : "");
	return 0;
}

static int read_slurm(env_get_fn get, void *arg, struct dist_env *e)
{
	if (!get("SLURM_NTASKS", arg))
		return gp_error(GP_EINVAL, "SLURM_PROCID is set but SLURM_NTASKS is not");
	GP_TRY(env_int(get, arg, "SLURM_NTASKS", 1, 1 << 20, &e->world));
	GP_TRY(env_int(get, arg, "SLURM_PROCID", 0, INT_MAX, &e->rank));
	e->local_rank = e->rank;
	if (env_int(get, arg, "SLURM_LOCALID", 0, INT_MAX, &e->local_rank) < 0)
		return GP_EINVAL;
	/* "4" is this host's count; "4(x2)" or "4,2" name several hosts' counts */
	const char *per = get("SLURM_NTASKS_PER_NODE", arg);
	if (per && per[strspn(per, "0123456789")] == 0 &&
	    env_int(get, arg, "SLURM_NTASKS_PER_NODE", 1, 1 << 20, &e->local_world) < 0)
		return GP_EINVAL;
	const char *addr = get("MASTER_ADDR", arg);
	if (!addr)
		addr = get("SLURM_LAUNCH_NODE_IPADDR", arg);
	if (addr)
		snprintf(e->master_addr, sizeof(e->master_addr), "%s", addr);
	else if ((addr = get("SLURM_JOB_NODELIST", arg)) || (addr = get("SLURM_NODELIST", arg)))
		slurm_first_host(addr, e->master_addr, sizeof(e->master_addr));
	if (env_int(get, arg, "MASTER_PORT", 1, 65535, &e->master_port) < 0)
		return GP_EINVAL;
	const char *job = get("SLURM_JOB_ID", arg), *step = get("SLURM_STEP_ID", arg);
	snprintf(e->job, sizeof(e->job), "%s%s%s", job ? job : "", step ? "." : "",
		 step ? step : "");
	return 0;
}

int dist_env_parse(env_get_fn get, void *arg, struct dist_env *env)
{
	struct dist_env e = { .launcher = DIST_LAUNCH_NONE, .rank = 0, .world = 1,
			      .local_rank = 0, .local_world = 1 };
	int rc = 0;
	if (get("RANK", arg) || get("WORLD_SIZE", arg)) {
		e.launcher = DIST_LAUNCH_TORCHRUN;
		if (!get("RANK", arg))
			return gp_error(GP_EINVAL, "WORLD_SIZE is set but RANK is not");
		e.local_world = 0;
		rc = read_launcher(get, arg, &torchrun_vars, &e);
	} else if (get("OMPI_COMM_WORLD_RANK", arg) || get("OMPI_COMM_WORLD_SIZE", arg)) {
		e.launcher = DIST_LAUNCH_MPI;
		if (!get("OMPI_COMM_WORLD_RANK", arg))
			return gp_error(GP_EINVAL, "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not");
		e.local_world = 0;
		rc = read_launcher(get, arg, &mpi_vars, &e);
	} else if (get("SLURM_PROCID", arg)) {
		e.launcher = DIST_LAUNCH_SLURM;
		e.local_world = 0;
		rc = read_slurm(get, arg, &e);
	}
	if (rc < 0)
		return rc;
	const char *rank_var = e.launcher == DIST_LAUNCH_MPI ? "OMPI_COMM_WORLD_RANK"
			       : e.launcher == DIST_LAUNCH_SLURM ? "SLURM_PROCID" : "RANK";
	const char *local_var = e.launcher == DIST_LAUNCH_MPI ? "OMPI_COMM_WORLD_LOCAL_RANK"
				: e.launcher == DIST_LAUNCH_SLURM ? "SLURM_LOCALID" : "LOCAL_RANK";
	if (e.rank >= e.world)
		return gp_error(GP_EINVAL, "%s=%d is not below the world size %d", rank_var,
				e.rank, e.world);
	if (e.local_world > e.world)
		return gp_error(GP_EINVAL, "%d ranks on this host (%s) but a world of %d",
				e.local_world,
				e.launcher == DIST_LAUNCH_MPI ? "OMPI_COMM_WORLD_LOCAL_SIZE"
				: e.launcher == DIST_LAUNCH_SLURM ? "SLURM_NTASKS_PER_NODE"
				: "LOCAL_WORLD_SIZE", e.world);
	if (e.local_world > 0 && e.local_rank >= e.local_world)
		return gp_error(GP_EINVAL, "%s=%d is not below the %d ranks on this host",
				local_var, e.local_rank, e.local_world);
	if (e.world > 1 && !e.master_addr[0] && e.local_world == e.world)
		snprintf(e.master_addr, sizeof(e.master_addr), "127.0.0.1");
	if (e.world > 1 && !e.master_port)
		e.master_port = e.job[0] ? DIST_PORT_DEFAULT + (int)(job_number(e.job) % DIST_PORT_SPAN)
					 : DIST_PORT_DEFAULT;
	*env = e;
	return 0;
}

static const char *env_getenv(const char *name, void *arg)
{
	(void)arg;
	const char *v = getenv(name);
	return v; /* an empty value counts as given: it is refused where a number is due */
}

int dist_env_read(struct dist_env *env)
{
	return dist_env_parse(env_getenv, NULL, env);
}
