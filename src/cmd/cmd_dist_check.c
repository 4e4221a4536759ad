/* gpuperf dist-check: is the process group sound, and how fast does it move bytes?
 * As nccl-tests does for NCCL: every rank joins the group, runs a barrier, a broadcast,
 * a gather and sum all-reduces of known values (checked exactly), then times sum
 * all-reduces of --size MiB through the host transport and, with --device cuda,
 * through NCCL. Rank 0 prints the world, one row per rank, and the bandwidths
 * (nccl-tests' bus bandwidth: algorithm bandwidth x 2(n-1)/n).
 *
 * --fail-rank R --fail-at STAGE make rank R fail on purpose (for the tests of the
 * launcher and of failure propagation). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "cmd/launch.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "dist/dist.h"
#include "report/result.h"
#include "train/trainer.h"
#include "gpu/devinfo.h"
#ifdef GP_HAVE_CUDA
#include "dist/cuda/nccl.h"
#endif

#define CHECK_MAX_MIB 4096
/* rank 0 gathers each rank's times on its stack */
#define CHECK_MAX_RANKS 4096

static const char *const transport_names[] = { "auto", "tcp", "mpi" };
static const char *const fail_stages[] = { "start", "barrier", "allreduce", "crash", "hang" };

static const char *transport_at(int i)
{
	return i >= 0 && i < 3 ? transport_names[i] : NULL;
}

static const char *fail_stage_at(int i)
{
	return i >= 0 && i < 5 ? fail_stages[i] : NULL;
}

static int name_index(const char *(*at)(int), const char *s)
{
	for (int i = 0; at(i); i++)
		if (!strcmp(at(i), s))
			return i;
	return -1;
}

struct rank_info {
	int32_t rank, local_rank;
	int32_t pid;
	char host[64];
	char device[32];
};

struct check_opts {
	double size_mib, timeout_s;
	int iters, backend, transport, fail_rank, fail_stage;
	const char *out;
	int overwrite;
	int argc;
	char **argv;
};

/* What rank 0 measured, for the result. */
struct check_result {
	json_t *ranks; /* one object per rank */
	double host_mean_ms, host_min_ms, nccl_mean_ms, nccl_min_ms;
	int nccl;
};

static json_t *bw_json(size_t bytes, int iters, int world, double mean_ms, double min_ms)
{
	double alg = mean_ms > 0 ? bytes / (mean_ms * 1e-3) / 1e9 : 0;
	double bus = alg * (world > 1 ? 2.0 * (world - 1) / world : 1.0);
	return json_pack("{s:I, s:i, s:o, s:o, s:o, s:o}", "bytes", (json_int_t)bytes, "iters", iters,
			 "mean_ms", result_real(mean_ms), "min_ms", result_real(min_ms),
			 "algbw_gb_s", result_real(alg), "busbw_gb_s", result_real(bus));
}

static int check_write(const struct check_opts *o, struct dist *d, const struct dist_env *env,
		       const char *dir, size_t bytes, const struct check_result *cr)
{
	int world = dist_world(d);
	json_t *res = result_new("dist-check", o->argc, o->argv);
	if (!res)
		return gp_error(GP_ENOMEM, "out of memory writing the result");
	json_object_set_new(res, "settings",
			    json_pack("{s:o, s:i, s:s, s:s, s:o}", "size_mib", result_real(o->size_mib),
				      "iters", o->iters, "device", o->backend == BACKEND_CUDA ? "cuda" : "cpu",
				      "transport", dist_transport_name(d), "timeout_s",
				      result_real(o->timeout_s)));
	json_t *m = json_pack("{s:i, s:s, s:s, s:O, s:b}", "world", world, "launcher",
			      dist_launcher_name(env->launcher), "transport", dist_transport_name(d),
			      "ranks", cr->ranks, "checks_ok", 1);
	if (m && world > 1)
		json_object_set_new(m, "host_allreduce", bw_json(bytes, o->iters, world, cr->host_mean_ms,
								 cr->host_min_ms));
	if (m && cr->nccl)
		json_object_set_new(m, "nccl_allreduce", bw_json(bytes, o->iters, world, cr->nccl_mean_ms,
								 cr->nccl_min_ms));
	json_object_set_new(res, "measurements", m);
	char path[4096];
	int rc = m ? result_write(res, dir, "dist-check", path, sizeof(path))
		   : gp_error(GP_ENOMEM, "out of memory writing the result");
	if (rc == 0)
		printf("wrote %s\n", path);
	json_decref(res);
	return rc;
}

/* The test hook: rank fail_rank fails at stage as a real fault would. */
static int fail_hook(struct dist *d, const struct check_opts *o, int stage)
{
	if (o->fail_rank != dist_rank(d) || o->fail_stage != stage)
		return 0;
	if (stage == 3)
		raise(SIGKILL);
	if (stage == 4)
		for (;;)
			pause();
	char why[96];
	snprintf(why, sizeof(why), "failing at %s as asked (--fail-at)", fail_stages[stage]);
	dist_abort(d, why);
	return gp_error(GP_EIO, "%s", why);
}

/* A wrong value: every rank is told, this one returns why. */
static int mismatch(struct dist *d, const char *what, size_t i, double got, double want)
{
	char why[200];
	snprintf(why, sizeof(why), "%s: element %zu is %.17g, expected %.17g", what, i, got, want);
	dist_abort(d, why);
	return gp_error(GP_EDEVICE, "%s", why);
}

static int check_values(struct dist *d, int *n_checks)
{
	int rank = dist_rank(d), world = dist_world(d), root = world - 1;
	GP_TRY(dist_barrier(d));
	int32_t b[4096];
	for (int i = 0; i < 4096; i++)
		b[i] = rank == root ? 3 * i - 7 : 0;
	GP_TRY(dist_bcast(d, b, sizeof(b), root));
	for (int i = 0; i < 4096; i++)
		if (b[i] != 3 * i - 7)
			return mismatch(d, "dist_bcast", (size_t)i, b[i], 3 * i - 7);
	enum { N = 100003 };
	float *f = malloc(N * sizeof(float));
	double *g = malloc(N * sizeof(double));
	int rc = f && g ? 0 : gp_error(GP_ENOMEM, "out of memory");
	/* small integers: every order of summation gives the exact sum */
	for (int i = 0; rc == 0 && i < N; i++) {
		f[i] = (float)(rank + i % 101);
		g[i] = rank * 1e6 + i;
	}
	if (rc == 0)
		rc = dist_allreduce_sum(d, f, N, GP_F32);
	if (rc == 0)
		rc = dist_allreduce_sum(d, g, N, GP_F64);
	double ranks = world * (world - 1) / 2.0;
	for (int i = 0; rc == 0 && i < N; i++) {
		if (f[i] != (float)(ranks + (double)world * (i % 101)))
			rc = mismatch(d, "dist_allreduce_sum f32", (size_t)i, f[i],
				      ranks + (double)world * (i % 101));
		else if (g[i] != ranks * 1e6 + (double)world * i)
			rc = mismatch(d, "dist_allreduce_sum f64", (size_t)i, g[i],
				      ranks * 1e6 + (double)world * i);
	}
	struct dist_req *q = NULL;
	for (int i = 0; rc == 0 && i < 1000; i++)
		f[i] = (float)(rank + 1);
	if (rc == 0)
		rc = dist_iallreduce_sum(d, f, 1000, GP_F32, &q);
	if (rc == 0)
		rc = dist_wait(d, q);
	for (int i = 0; rc == 0 && i < 1000; i++)
		if (f[i] != (float)(ranks + world))
			rc = mismatch(d, "dist_iallreduce_sum", (size_t)i, f[i], ranks + world);
	free(f);
	free(g);
	*n_checks = 5;
	return rc;
}

/* Mean and least time of iters sum all-reduces of bytes, the slowest rank's. */
static int time_host_allreduce(struct dist *d, size_t bytes, int iters, double *mean_ms,
			       double *min_ms)
{
	size_t n = bytes / sizeof(float);
	float *buf = calloc(n ? n : 1, sizeof(float));
	if (!buf)
		return gp_error(GP_ENOMEM, "out of memory for %zu bytes", bytes);
	int rc = dist_allreduce_sum(d, buf, n, GP_F32); /* warm-up */
	double t[2] = { 0, 0 }; /* total, least */
	t[1] = 1e300;
	for (int i = 0; rc == 0 && i < iters; i++) {
		rc = dist_barrier(d);
		double t0 = gp_now_ms();
		if (rc == 0)
			rc = dist_allreduce_sum(d, buf, n, GP_F32);
		double ms = gp_now_ms() - t0;
		t[0] += ms;
		t[1] = ms < t[1] ? ms : t[1];
	}
	free(buf);
	GP_TRY(rc);
	double got[2 * CHECK_MAX_RANKS];
	int world = dist_world(d);
	GP_TRY(dist_gather(d, t, sizeof(t), got, 0));
	*mean_ms = *min_ms = 0;
	for (int r = 0; dist_rank(d) == 0 && r < world; r++) {
		*mean_ms = got[2 * r] / iters > *mean_ms ? got[2 * r] / iters : *mean_ms;
		*min_ms = got[2 * r + 1] > *min_ms ? got[2 * r + 1] : *min_ms;
	}
	return 0;
}

static void print_bw(const char *what, size_t bytes, int world, double mean_ms, double min_ms)
{
	double alg = bytes / (mean_ms * 1e-3) / 1e9;
	double bus = alg * (world > 1 ? 2.0 * (world - 1) / world : 1.0);
	printf("%-6s allreduce %8.1f MiB: %9.3f ms mean, %9.3f ms best, algbw %7.2f GB/s, "
	       "busbw %7.2f GB/s\n", what, bytes / 1048576.0, mean_ms, min_ms, alg, bus);
}

static int world_table(struct dist *d, const struct check_opts *o, struct check_result *cr)
{
	struct rank_info me = { .rank = dist_rank(d), .local_rank = dist_local_rank(d),
				.pid = (int32_t)getpid() };
	gethostname(me.host, sizeof(me.host) - 1);
	snprintf(me.device, sizeof(me.device), "%s", o->backend == BACKEND_CUDA ? "cuda" : "cpu");
#ifdef GP_HAVE_CUDA
	if (o->backend == BACKEND_CUDA) {
		struct gp_devinfo di;
		devinfo_query(&di);
		snprintf(me.device, sizeof(me.device), "cuda:%d",
			 di.gpu_count > 0 ? dist_local_rank(d) % di.gpu_count : 0);
	}
#endif
	int world = dist_world(d);
	struct rank_info *all = dist_rank(d) == 0 ? calloc((size_t)world, sizeof(*all)) : NULL;
	if (dist_rank(d) == 0 && !all)
		return gp_error(GP_ENOMEM, "out of memory");
	int rc = dist_gather(d, &me, sizeof(me), all, 0);
	if (rc == 0 && all) {
		printf("%6s %6s %-24s %8s %s\n", "rank", "local", "host", "pid", "device");
		for (int r = 0; r < world; r++) {
			if (all[r].rank != r)
				rc = mismatch(d, "dist_gather", (size_t)r, all[r].rank, r);
			printf("%6d %6d %-24.24s %8d %s\n", all[r].rank, all[r].local_rank, all[r].host,
			       all[r].pid, all[r].device);
			all[r].host[sizeof(all[r].host) - 1] = 0;
			all[r].device[sizeof(all[r].device) - 1] = 0;
			json_array_append_new(cr->ranks, json_pack("{s:i, s:i, s:o, s:i, s:s}", "rank",
				all[r].rank, "local_rank", all[r].local_rank, "host",
				result_string(all[r].host), "pid", all[r].pid, "device", all[r].device));
		}
	}
	free(all);
	return rc;
}

#ifdef GP_HAVE_CUDA
static int nccl_part(struct dist *d, const struct check_opts *o, size_t bytes,
		     struct check_result *cr)
{
	struct gp_devinfo di;
	devinfo_query(&di);
	int dev = di.gpu_count > 0 ? dist_local_rank(d) % di.gpu_count : 0;
	struct dist_nccl *c;
	GP_TRY(dist_nccl_open(d, dev, &c));
	struct dist_nccl_bench b;
	int rc = dist_nccl_selftest(c, bytes, o->iters, &b);
	double t[2] = { b.ms_mean, b.ms_min }, all[2 * CHECK_MAX_RANKS];
	if (rc == 0)
		rc = dist_gather(d, t, sizeof(t), all, 0);
	if (rc < 0)
		dist_abort(d, gp_errmsg());
	dist_nccl_close(c);
	if (rc == 0 && dist_rank(d) == 0) {
		double mean = 0, best = 0;
		for (int r = 0; r < dist_world(d); r++) {
			mean = all[2 * r] > mean ? all[2 * r] : mean;
			best = all[2 * r + 1] > best ? all[2 * r + 1] : best;
		}
		printf("nccl   sum and mean of f32 and bf16 values: ok\n");
		print_bw("nccl", bytes, dist_world(d), mean, best);
		cr->nccl = 1;
		cr->nccl_mean_ms = mean;
		cr->nccl_min_ms = best;
	}
	return rc;
}
#endif

static int run_check(const struct check_opts *o)
{
	if (o->fail_rank >= 0 && o->fail_stage == 0) {
		struct dist_env e;
		if (dist_env_read(&e) == 0 && e.rank == o->fail_rank)
			return gp_error(GP_EIO, "failing at start as asked (--fail-at)");
	}
	struct dist_env env;
	GP_TRY(dist_env_read(&env));
	struct dist_opts dop = dist_opts_default();
	dop.timeout_s = o->timeout_s;
	dop.transport = o->transport;
	struct gp_devinfo di;
	if (o->backend == BACKEND_CUDA && (devinfo_query(&di), env.local_world > di.gpu_count))
		return gp_error(GP_EINVAL, "%d ranks on this host with --device cuda, but %d GPU%s "
				"(one per rank)", env.local_world, di.gpu_count,
				di.gpu_count == 1 ? "" : "s");
	if (env.world > CHECK_MAX_RANKS)
		return gp_error(GP_EUNSUPPORTED, "dist-check takes at most %d ranks", CHECK_MAX_RANKS);
	struct dist *d;
	GP_TRY(dist_open(&env, &dop, &d));
	int rank = dist_rank(d), world = dist_world(d), n_checks = 0, rc = 0;
	/* rank 0 alone writes; its folder is settled before the work, as every command's */
	char dir[4096];
	struct check_result cr = { .ranks = json_array() };
	if (!cr.ranks)
		rc = gp_error(GP_ENOMEM, "out of memory");
	if (rc == 0 && rank == 0)
		rc = result_dir_prepare("dist-check", "dist-check", o->out, o->overwrite, dir, sizeof(dir));
	if (rc < 0)
		dist_abort(d, gp_errmsg());
	if (rc == 0 && rank == 0 && !strcmp(dist_transport_name(d), "tcp"))
		printf("dist-check: world of %d (%s), transport tcp, rank 0 at %s:%d\n", world,
		       dist_launcher_name(env.launcher), env.master_addr, env.master_port);
	else if (rc == 0 && rank == 0)
		printf("dist-check: world of %d (%s), transport %s\n", world,
		       dist_launcher_name(env.launcher), dist_transport_name(d));
	if (rc == 0)
		rc = fail_hook(d, o, 1);
	if (rc == 0)
		rc = world_table(d, o, &cr);
	if (rc == 0)
		rc = check_values(d, &n_checks);
	if (rc == 0 && rank == 0)
		printf("checks: barrier, bcast, gather, allreduce f32 and f64, iallreduce: ok\n");
	if (rc == 0)
		rc = fail_hook(d, o, 2);
	if (rc == 0)
		rc = fail_hook(d, o, 3);
	if (rc == 0)
		rc = fail_hook(d, o, 4);
	size_t bytes = (size_t)(o->size_mib * 1048576.0) / 4 * 4;
	/* a world of one moves nothing on the host: no bandwidth to speak of */
	if (rc == 0 && world > 1)
		rc = time_host_allreduce(d, bytes, o->iters, &cr.host_mean_ms, &cr.host_min_ms);
	if (rc == 0 && rank == 0 && world > 1)
		print_bw(dist_transport_name(d), bytes, world, cr.host_mean_ms, cr.host_min_ms);
#ifdef GP_HAVE_CUDA
	if (rc == 0 && o->backend == BACKEND_CUDA)
		rc = nccl_part(d, o, bytes, &cr);
#endif
	if (rc == 0)
		rc = dist_barrier(d);
	if (rc < 0 && !dist_failed(d))
		dist_abort(d, gp_errmsg());
	if (rc == 0 && rank == 0)
		printf("dist-check: ok (%d ranks)\n", world);
	if (rc == 0 && rank == 0)
		rc = check_write(o, d, &env, dir, bytes, &cr);
	json_decref(cr.ranks);
	dist_close(d);
	return rc;
}

int cmd_dist_check(int argc, char **argv)
{
	int nproc = 1, port = 0, iters = 10, help = 0, fail_rank = -1;
	double size_mib = 64, timeout_s = 300;
	const char *device = "auto", *transport = "auto", *fail_at = "allreduce", *out = NULL;
	int overwrite = 0;
	const struct opt opts[] = {
		{ "nproc", OPT_INT, &nproc, "start N local ranks, as torchrun --nproc-per-node "
		  "(default 1: the ranks a launcher started)", 1, 256 },
		{ "master-port", OPT_INT, &port, "with --nproc: the port rank 0 listens on "
		  "(default: a free one)", 1, 65535 },
		{ "size", OPT_DOUBLE, &size_mib, "MiB per timed all-reduce (default 64)", .min_d = 0,
		  .max_d = CHECK_MAX_MIB, .range = OPT_MIN_INCL | OPT_MAX_INCL },
		{ "iters", OPT_INT, &iters, "timed all-reduces (default 10)", 1, 100000 },
		OPT_DEVICE(&device),
		{ "transport", OPT_STR, &transport, "host transport (default auto: MPI under "
		  "mpirun when its plugin loads, else TCP)", .choices = transport_at },
		{ "timeout", OPT_DOUBLE, &timeout_s, "seconds a rank may wait for the others "
		  "(default 300)", .min_d = 0, .max_d = 86400, .range = OPT_MIN_EXCL | OPT_MAX_INCL },
		{ "fail-rank", OPT_INT, &fail_rank, "(for tests) this rank fails on purpose", 0,
		  1 << 20 },
		{ "fail-at", OPT_STR, &fail_at, "(for tests) where --fail-rank fails "
		  "(default allreduce)", .choices = fail_stage_at },
		OPT_OUT(&out, "dist-check.json", "dist-check"),
		OPT_OVERWRITE(&overwrite, "dist-check.json"),
		OPT_HELP(&help),
		OPT_END(),
	};
	const char *usage = "gpuperf dist-check [--nproc N] [--size MiB] [--device cpu|cuda] "
			    "[--transport auto|tcp|mpi]";
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help(usage, opts);
		return 0;
	}
	struct check_opts o = { .size_mib = size_mib, .timeout_s = timeout_s, .iters = iters,
				.fail_rank = fail_rank, .out = out, .overwrite = overwrite,
				.argc = argc, .argv = argv };
	if ((o.transport = name_index(transport_at, transport)) < 0)
		return gp_error(GP_EINVAL, "--transport must be auto, tcp or mpi (got '%s')", transport);
	if ((o.fail_stage = name_index(fail_stage_at, fail_at)) < 0)
		return gp_error(GP_EINVAL, "--fail-at must be start, barrier, allreduce, crash or "
				"hang (got '%s')", fail_at);
	enum backend_kind be;
	GP_TRY(train_pick_device(device, &be, 1));
	o.backend = (int)be;
	/* one GPU per rank: NCCL refuses two ranks on one device */
	struct gp_devinfo di;
	if (be == BACKEND_CUDA && nproc > 1 && (devinfo_query(&di), nproc > di.gpu_count))
		return gp_error(GP_EINVAL, "--nproc %d with --device cuda: this host has %d GPU%s "
				"(one per rank)", nproc, di.gpu_count, di.gpu_count == 1 ? "" : "s");
	if (nproc > 1) {
		struct dist_env env;
		GP_TRY(dist_env_read(&env));
		if (env.launcher != DIST_LAUNCH_NONE)
			return gp_error(GP_EINVAL, "--nproc: this run was already started by %s "
					"(rank %d of %d)", dist_launcher_name(env.launcher), env.rank,
					env.world);
		struct launch_opts lo = { .master_port = port };
		return launch_local(nproc, argc, argv, &lo);
	}
	return run_check(&o);
}
