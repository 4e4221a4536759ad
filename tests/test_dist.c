/* The process group: the launchers' variables, and worlds of 2 and 3 ranks made by
 * fork() on 127.0.0.1 that run the collectives, fail, abort, vanish and refuse each
 * other. Every rank is a child the test kills after a hard limit, so no case hangs. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/error.h"
#include "dist/dist.h"
#include "test.h"

/* ---- the launchers' variables ---- */

struct kv {
	const char *k, *v;
};

static const char *kv_get(const char *name, void *arg)
{
	for (const struct kv *p = arg; p->k; p++)
		if (!strcmp(p->k, name))
			return p->v;
	return NULL;
}

static int env_of(const struct kv *vars, struct dist_env *e)
{
	memset(e, 0x55, sizeof(*e));
	return dist_env_parse(kv_get, (void *)vars, e);
}

/* A malformed set of variables: GP_EINVAL whose message names what */
static void check_env_bad(const struct kv *vars, const char *what)
{
	struct dist_env e;
	gp_error_clear();
	int rc = env_of(vars, &e);
	CHECK_MSG(rc == GP_EINVAL, "expected an error naming '%s', got %d", what, rc);
	CHECK_MSG(strstr(gp_errmsg(), what) != NULL, "message '%s' does not name '%s'", gp_errmsg(),
		  what);
}

TEST(dist_env_without_launcher_is_a_world_of_one)
{
	struct kv none[] = { { NULL, NULL } };
	struct dist_env e;
	CHECK_EQ_INT(env_of(none, &e), 0);
	CHECK_EQ_INT(e.launcher, DIST_LAUNCH_NONE);
	CHECK_EQ_INT(e.rank, 0);
	CHECK_EQ_INT(e.world, 1);
	CHECK_EQ_INT(e.local_rank, 0);
	CHECK_EQ_INT(e.master_port, 0);
	CHECK(!strcmp(e.master_addr, ""));
	CHECK(!strcmp(dist_launcher_name(e.launcher), "none"));
}

TEST(dist_env_torchrun)
{
	struct kv vars[] = { { "RANK", "5" }, { "WORLD_SIZE", "8" }, { "LOCAL_RANK", "1" },
			     { "LOCAL_WORLD_SIZE", "4" }, { "MASTER_ADDR", "node7" },
			     { "MASTER_PORT", "1234" }, { "TORCHELASTIC_RUN_ID", "abc" },
			     { NULL, NULL } };
	struct dist_env e;
	CHECK_EQ_INT(env_of(vars, &e), 0);
	CHECK_EQ_INT(e.launcher, DIST_LAUNCH_TORCHRUN);
	CHECK_EQ_INT(e.rank, 5);
	CHECK_EQ_INT(e.world, 8);
	CHECK_EQ_INT(e.local_rank, 1);
	CHECK_EQ_INT(e.local_world, 4);
	CHECK(!strcmp(e.master_addr, "node7"));
	CHECK_EQ_INT(e.master_port, 1234);
	CHECK(!strcmp(e.job, "abc"));
	CHECK(!strcmp(dist_launcher_name(e.launcher), "torchrun"));

	/* all on this host, no address: the loopback at a port of the job's */
	struct kv local[] = { { "RANK", "1" }, { "WORLD_SIZE", "2" }, { "LOCAL_RANK", "1" },
			      { "LOCAL_WORLD_SIZE", "2" }, { NULL, NULL } };
	CHECK_EQ_INT(env_of(local, &e), 0);
	CHECK(!strcmp(e.master_addr, "127.0.0.1"));
	CHECK_EQ_INT(e.master_port, 29500);
	struct kv job[] = { { "RANK", "0" }, { "WORLD_SIZE", "2" }, { "LOCAL_WORLD_SIZE", "2" },
			    { "GPUPERF_DIST_JOB", "run-42" }, { NULL, NULL } };
	struct dist_env e2;
	CHECK_EQ_INT(env_of(job, &e), 0);
	CHECK_EQ_INT(env_of(job, &e2), 0);
	CHECK(!strcmp(e.job, "run-42"));
	CHECK(e.master_port >= 29500 && e.master_port < 31500);
	CHECK_EQ_INT(e.master_port, e2.master_port);
	/* hosts unknown, no address: left for dist_open to refuse */
	struct kv remote[] = { { "RANK", "1" }, { "WORLD_SIZE", "2" }, { NULL, NULL } };
	CHECK_EQ_INT(env_of(remote, &e), 0);
	CHECK(!strcmp(e.master_addr, ""));
	CHECK_EQ_INT(e.local_world, 0);
}

TEST(dist_env_torchrun_bad_values)
{
	check_env_bad((struct kv[]){ { "RANK", "0" }, { NULL, NULL } }, "WORLD_SIZE");
	check_env_bad((struct kv[]){ { "WORLD_SIZE", "2" }, { NULL, NULL } }, "RANK");
	check_env_bad((struct kv[]){ { "RANK", "2" }, { "WORLD_SIZE", "2" }, { NULL, NULL } },
		      "RANK=2");
	check_env_bad((struct kv[]){ { "RANK", "x1" }, { "WORLD_SIZE", "2" }, { NULL, NULL } },
		      "RANK='x1' is not an integer");
	check_env_bad((struct kv[]){ { "RANK", "" }, { "WORLD_SIZE", "2" }, { NULL, NULL } },
		      "RANK");
	check_env_bad((struct kv[]){ { "RANK", "0" }, { "WORLD_SIZE", "0" }, { NULL, NULL } },
		      "WORLD_SIZE=0");
	check_env_bad((struct kv[]){ { "RANK", "-1" }, { "WORLD_SIZE", "2" }, { NULL, NULL } },
		      "RANK=-1");
	check_env_bad((struct kv[]){ { "RANK", "0" }, { "WORLD_SIZE", "2" }, { "MASTER_PORT", "70000" },
				     { NULL, NULL } },
		      "MASTER_PORT=70000");
	check_env_bad((struct kv[]){ { "RANK", "0" }, { "WORLD_SIZE", "4" }, { "LOCAL_RANK", "2" },
				     { "LOCAL_WORLD_SIZE", "2" }, { NULL, NULL } },
		      "LOCAL_RANK=2");
	check_env_bad((struct kv[]){ { "RANK", "0" }, { "WORLD_SIZE", "2" },
				     { "LOCAL_WORLD_SIZE", "3" }, { NULL, NULL } },
		      "LOCAL_WORLD_SIZE");
}

TEST(dist_env_open_mpi)
{
	struct kv vars[] = { { "OMPI_COMM_WORLD_RANK", "3" }, { "OMPI_COMM_WORLD_SIZE", "4" },
			     { "OMPI_COMM_WORLD_LOCAL_RANK", "1" }, { "OMPI_COMM_WORLD_LOCAL_SIZE", "2" },
			     { "OMPI_MCA_ess_base_jobid", "1656815617" }, { NULL, NULL } };
	struct dist_env e;
	CHECK_EQ_INT(env_of(vars, &e), 0);
	CHECK_EQ_INT(e.launcher, DIST_LAUNCH_MPI);
	CHECK_EQ_INT(e.rank, 3);
	CHECK_EQ_INT(e.world, 4);
	CHECK_EQ_INT(e.local_rank, 1);
	CHECK_EQ_INT(e.local_world, 2);
	CHECK(!strcmp(e.job, "1656815617"));
	CHECK(!strcmp(e.master_addr, "")); /* two hosts: TCP would need MASTER_ADDR */
	check_env_bad((struct kv[]){ { "OMPI_COMM_WORLD_RANK", "4" }, { "OMPI_COMM_WORLD_SIZE", "4" },
				     { NULL, NULL } },
		      "OMPI_COMM_WORLD_RANK=4");
	check_env_bad((struct kv[]){ { "OMPI_COMM_WORLD_RANK", "1" }, { NULL, NULL } },
		      "OMPI_COMM_WORLD_SIZE");
	check_env_bad((struct kv[]){ { "OMPI_COMM_WORLD_RANK", "0" }, { "OMPI_COMM_WORLD_SIZE", "2" },
				     { "OMPI_COMM_WORLD_LOCAL_RANK", "zz" }, { NULL, NULL } },
		      "OMPI_COMM_WORLD_LOCAL_RANK");
	/* torchrun's variables win over MPI's, MPI's over Slurm's */
	struct kv both[] = { { "RANK", "1" }, { "WORLD_SIZE", "2" }, { "OMPI_COMM_WORLD_RANK", "0" },
			     { "OMPI_COMM_WORLD_SIZE", "3" }, { "SLURM_PROCID", "2" },
			     { "SLURM_NTASKS", "5" }, { NULL, NULL } };
	CHECK_EQ_INT(env_of(both, &e), 0);
	CHECK_EQ_INT(e.launcher, DIST_LAUNCH_TORCHRUN);
	CHECK_EQ_INT(e.world, 2);
	CHECK_EQ_INT(env_of(both + 2, &e), 0);
	CHECK_EQ_INT(e.launcher, DIST_LAUNCH_MPI);
	CHECK_EQ_INT(e.world, 3);
}

TEST(dist_env_slurm)
{
	struct kv vars[] = { { "SLURM_PROCID", "6" }, { "SLURM_NTASKS", "8" }, { "SLURM_LOCALID", "2" },
			     { "SLURM_NTASKS_PER_NODE", "4" }, { "SLURM_JOB_NODELIST", "gpu[003-005,007],cpu1" },
			     { "SLURM_JOB_ID", "9876" }, { "SLURM_STEP_ID", "0" }, { NULL, NULL } };
	struct dist_env e;
	CHECK_EQ_INT(env_of(vars, &e), 0);
	CHECK_EQ_INT(e.launcher, DIST_LAUNCH_SLURM);
	CHECK_EQ_INT(e.rank, 6);
	CHECK_EQ_INT(e.world, 8);
	CHECK_EQ_INT(e.local_rank, 2);
	CHECK_EQ_INT(e.local_world, 4);
	CHECK_MSG(!strcmp(e.master_addr, "gpu003"), "master_addr '%s'", e.master_addr);
	CHECK(!strcmp(e.job, "9876.0"));
	CHECK(e.master_port >= 29500 && e.master_port < 31500);
	/* the launch node's address is preferred; "2(x4)" is several hosts' counts */
	struct kv ip[] = { { "SLURM_PROCID", "0" }, { "SLURM_NTASKS", "8" },
			   { "SLURM_NTASKS_PER_NODE", "2(x4)" }, { "SLURM_LAUNCH_NODE_IPADDR", "10.0.0.9" },
			   { "SLURM_JOB_NODELIST", "a,b" }, { NULL, NULL } };
	CHECK_EQ_INT(env_of(ip, &e), 0);
	CHECK(!strcmp(e.master_addr, "10.0.0.9"));
	CHECK_EQ_INT(e.local_world, 0);
	struct kv plain[] = { { "SLURM_PROCID", "0" }, { "SLURM_NTASKS", "2" },
			      { "SLURM_NODELIST", "n1,n2" }, { NULL, NULL } };
	CHECK_EQ_INT(env_of(plain, &e), 0);
	CHECK(!strcmp(e.master_addr, "n1"));
	check_env_bad((struct kv[]){ { "SLURM_PROCID", "0" }, { NULL, NULL } }, "SLURM_NTASKS");
	check_env_bad((struct kv[]){ { "SLURM_PROCID", "3" }, { "SLURM_NTASKS", "2" }, { NULL, NULL } },
		      "SLURM_PROCID=3");
}

/* ---- worlds of forked ranks ---- */

#define MAX_RANKS 4
#define RANK_LIMIT_S 20.0

struct world {
	int n, port;
	double timeout_s;
	const char *job[MAX_RANKS]; /* NULL: "test" */
	int world_of[MAX_RANKS];    /* 0: n */
	int absent[MAX_RANKS];      /* not started */
	/* each rank's body: 0 for success, else msg says what went wrong */
	int (*body)(struct dist *d, int rank, char *msg, size_t cap);
	/* results */
	int open_rc[MAX_RANKS];
	int status[MAX_RANKS]; /* exit status; -1 when killed at the limit */
	double secs[MAX_RANKS];
	char msg[MAX_RANKS][600];
};

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int port = 0;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The child: open the group as rank r, run the body, report through fd. */
static void rank_main(struct world *w, int r, int fd)
{
	struct dist_env env = { .launcher = DIST_LAUNCH_TORCHRUN, .rank = r,
				.world = w->world_of[r] ? w->world_of[r] : w->n, .local_rank = r,
				.local_world = w->n, .master_port = w->port };
	snprintf(env.master_addr, sizeof(env.master_addr), "127.0.0.1");
	snprintf(env.job, sizeof(env.job), "%s", w->job[r] ? w->job[r] : "test");
	struct dist_opts o = dist_opts_default();
	o.timeout_s = w->timeout_s;
	o.transport = DIST_TRANSPORT_TCP;
	struct dist *d = NULL;
	char msg[600] = "";
	int rc = dist_open(&env, &o, &d);
	int code;
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "open: %s", gp_errmsg());
		code = 10;
	} else {
		code = w->body ? w->body(d, r, msg, sizeof(msg)) : 0;
	}
	if (write(fd, msg, strlen(msg)) < 0)
		code = 99;
	dist_close(d);
	_exit(code);
}

static void world_run(struct world *w)
{
	pid_t pid[MAX_RANKS] = { 0 };
	int pfd[MAX_RANKS][2];
	double t0 = mono_s();
	if (!w->port)
		w->port = free_port();
	fflush(stdout);
	for (int r = 0; r < w->n; r++) {
		w->status[r] = -2;
		w->msg[r][0] = 0;
		if (w->absent[r] || pipe(pfd[r]) < 0)
			continue;
		pid[r] = fork();
		if (pid[r] == 0) {
			close(pfd[r][0]);
			rank_main(w, r, pfd[r][1]);
		}
		close(pfd[r][1]);
	}
	int left = 0;
	for (int r = 0; r < w->n; r++)
		left += pid[r] > 0;
	while (left > 0) {
		for (int r = 0; r < w->n; r++) {
			int st;
			if (pid[r] <= 0 || waitpid(pid[r], &st, WNOHANG) != pid[r])
				continue;
			w->status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			w->secs[r] = mono_s() - t0;
			ssize_t k = read(pfd[r][0], w->msg[r], sizeof(w->msg[r]) - 1);
			w->msg[r][k > 0 ? k : 0] = 0;
			close(pfd[r][0]);
			pid[r] = 0;
			left--;
		}
		if (left && mono_s() - t0 > RANK_LIMIT_S) {
			for (int r = 0; r < w->n; r++)
				if (pid[r] > 0) {
					kill(pid[r], SIGKILL);
					waitpid(pid[r], NULL, 0);
					close(pfd[r][0]);
					w->status[r] = -1;
					snprintf(w->msg[r], sizeof(w->msg[r]), "killed after %g s",
						 RANK_LIMIT_S);
					pid[r] = 0;
				}
			left = 0;
		}
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
}

#define RCHECK(cond)                                                                 \
	do {                                                                         \
		if (!(cond)) {                                                       \
			snprintf(msg, cap, "rank %d line %d: %s (%s)", rank, __LINE__, #cond, \
				 gp_errmsg());                                       \
			return 1;                                                    \
		}                                                                    \
	} while (0)

#define BIG_COUNT (5u << 20) /* 20 MiB of floats: five of the transport's chunks */

static int body_collectives(struct dist *d, int rank, char *msg, size_t cap)
{
	int world = dist_world(d);
	RCHECK(dist_rank(d) == rank);
	RCHECK(!strcmp(dist_transport_name(d), "tcp"));
	RCHECK(dist_barrier(d) == 0);
	/* bcast from root 1 */
	int32_t b[1000];
	for (int i = 0; i < 1000; i++)
		b[i] = rank == 1 ? 7 * i + 1 : -1;
	RCHECK(dist_bcast(d, b, sizeof(b), 1) == 0);
	for (int i = 0; i < 1000; i++)
		RCHECK(b[i] == 7 * i + 1);
	/* gather at 0, then at the last rank */
	for (int root = 0; root < world; root += world - 1) {
		int32_t mine[3] = { rank, rank * 10, -rank }, all[3 * MAX_RANKS];
		memset(all, 0xff, sizeof(all));
		RCHECK(dist_gather(d, mine, sizeof(mine), rank == root ? all : NULL, root) == 0);
		if (rank == root)
			for (int r = 0; r < world; r++)
				RCHECK(all[3 * r] == r && all[3 * r + 1] == 10 * r && all[3 * r + 2] == -r);
	}
	/* small integers: the sums are exact in any order */
	float f[1001];
	double g[513];
	for (int i = 0; i < 1001; i++)
		f[i] = (float)(rank + i % 13);
	for (int i = 0; i < 513; i++)
		g[i] = rank * 1000.0 - i;
	RCHECK(dist_allreduce_sum(d, f, 1001, GP_F32) == 0);
	RCHECK(dist_allreduce_sum(d, g, 513, GP_F64) == 0);
	double ranks = world * (world - 1) / 2.0;
	for (int i = 0; i < 1001; i++)
		RCHECK(f[i] == (float)(ranks + world * (i % 13)));
	for (int i = 0; i < 513; i++)
		RCHECK(g[i] == ranks * 1000.0 - world * i);
	struct dist_req *q;
	RCHECK(dist_iallreduce_sum(d, f, 10, GP_F32, &q) == 0);
	RCHECK(dist_wait(d, q) == 0);
	RCHECK(f[3] == (float)(world * (ranks + world * 3)));
	/* larger than a chunk, and not a whole number of chunks */
	size_t n = BIG_COUNT + 77;
	float *big = malloc(n * sizeof(float));
	RCHECK(big != NULL);
	for (size_t i = 0; i < n; i++)
		big[i] = (float)((i % 1000) + rank);
	int rc = dist_allreduce_sum(d, big, n, GP_F32);
	int ok = rc == 0;
	for (size_t i = 0; ok && i < n; i++)
		ok = big[i] == (float)(world * (double)(i % 1000) + ranks);
	free(big);
	RCHECK(ok);
	RCHECK(dist_allreduce_sum(d, f, 1, GP_I32) == GP_EINVAL);
	RCHECK(dist_bcast(d, b, 4, world) == GP_EINVAL);
	RCHECK(dist_barrier(d) == 0);
	RCHECK(!dist_failed(d));
	return 0;
}

static void check_all_passed(struct world *w)
{
	for (int r = 0; r < w->n; r++)
		CHECK_MSG(w->status[r] == 0, "world of %d, rank %d: status %d: %s", w->n, r,
			  w->status[r], w->msg[r]);
}

TEST(dist_tcp_world_of_two_collectives)
{
	struct world w = { .n = 2, .timeout_s = 10, .body = body_collectives };
	world_run(&w);
	check_all_passed(&w);
}

TEST(dist_tcp_world_of_three_collectives)
{
	struct world w = { .n = 3, .timeout_s = 10, .body = body_collectives };
	world_run(&w);
	check_all_passed(&w);
}

TEST(dist_world_of_one_needs_no_transport)
{
	struct dist_env env = { .launcher = DIST_LAUNCH_NONE, .world = 1, .local_world = 1 };
	struct dist *d;
	CHECK_EQ_INT(dist_open(&env, NULL, &d), 0);
	CHECK(!strcmp(dist_transport_name(d), "none"));
	float f[3] = { 1, 2, 3 }, g[3];
	CHECK_EQ_INT(dist_barrier(d), 0);
	CHECK_EQ_INT(dist_allreduce_sum(d, f, 3, GP_F32), 0);
	CHECK_EQ_INT(dist_gather(d, f, sizeof(f), g, 0), 0);
	CHECK(f[2] == 3 && g[0] == 1 && g[2] == 3);
	CHECK_EQ_INT(dist_bcast(d, f, sizeof(f), 0), 0);
	CHECK_EQ_INT(dist_poll(d), 0);
	dist_abort(d, "stop");
	CHECK(dist_failed(d));
	CHECK_EQ_INT(dist_barrier(d), GP_EDEVICE);
	CHECK_MSG(strstr(gp_errmsg(), "rank 0 failed: stop") != NULL, "%s", gp_errmsg());
	dist_close(d);
	CHECK_EQ_INT(dist_rank(NULL), 0);
	CHECK_EQ_INT(dist_world(NULL), 1);
	dist_close(NULL);
}

/* rank 1 fails after a barrier; the others' next collective names it and its reason */
static int body_abort(struct dist *d, int rank, char *msg, size_t cap)
{
	RCHECK(dist_barrier(d) == 0);
	if (rank == 1) {
		dist_abort(d, "disk full while writing");
		RCHECK(dist_failed(d));
		RCHECK(dist_barrier(d) == GP_EDEVICE);
		struct timespec ts = { 0, 300000000 }; /* still there: the reason, not an end */
		nanosleep(&ts, NULL);
		return 0;
	}
	float f[4] = { 0 };
	int rc = dist_allreduce_sum(d, f, 4, GP_F32);
	snprintf(msg, cap, "%s", gp_errmsg());
	RCHECK(rc == GP_EDEVICE);
	RCHECK(dist_failed(d));
	RCHECK(strstr(dist_failure(d), "rank 1 failed: disk full while writing") != NULL);
	RCHECK(dist_barrier(d) == GP_EDEVICE);
	snprintf(msg, cap, "%s", dist_failure(d));
	return 0;
}

TEST(dist_abort_reaches_every_rank_with_its_reason)
{
	struct world w = { .n = 3, .timeout_s = 10, .body = body_abort };
	world_run(&w);
	check_all_passed(&w);
	for (int r = 0; r < 3; r++)
		CHECK_MSG(w.secs[r] < 5, "rank %d took %.1f s", r, w.secs[r]);
}

/* rank 1 ends without a word after a barrier */
static int body_vanish(struct dist *d, int rank, char *msg, size_t cap)
{
	RCHECK(dist_barrier(d) == 0);
	if (rank == 1)
		_exit(0);
	double t0 = mono_s();
	float f[4] = { 0 };
	int rc = dist_allreduce_sum(d, f, 4, GP_F32);
	snprintf(msg, cap, "%s", gp_errmsg());
	RCHECK(rc == GP_EDEVICE);
	RCHECK(strstr(gp_errmsg(), "rank 1 failed: exited or closed its connection") != NULL);
	RCHECK(mono_s() - t0 < 2.0);
	return 0;
}

TEST(dist_rank_that_exits_is_reported_at_once)
{
	struct world w = { .n = 3, .timeout_s = 30, .body = body_vanish };
	world_run(&w);
	check_all_passed(&w);
}

/* rank 1 aborts while rank 0 is in the middle of sending a frame of the gather to
 * root 2: rank 2 still reads rank 1's reason, not a broken stream */
static int body_abort_mid_frame(struct dist *d, int rank, char *msg, size_t cap)
{
	size_t bytes = (size_t)24 << 20;
	char *mine = calloc(bytes, 1), *all = rank == 2 ? malloc(3 * bytes) : NULL;
	RCHECK(mine && (rank != 2 || all));
	int rc = dist_gather(d, mine, bytes, all, 2);
	free(mine);
	free(all);
	if (rank == 1) {
		RCHECK(rc == 0);
		dist_abort(d, "out of paper");
		struct timespec ts = { 0, 300000000 };
		nanosleep(&ts, NULL);
		return 0;
	}
	if (rc == 0)
		rc = dist_barrier(d);
	snprintf(msg, cap, "%s", gp_errmsg());
	RCHECK(rc == GP_EDEVICE);
	RCHECK(strstr(gp_errmsg(), "rank 1 failed: out of paper") != NULL);
	return 0;
}

TEST(dist_abort_in_the_middle_of_a_frame_still_says_why)
{
	for (int i = 0; i < 3 && !test_failed(); i++) {
		struct world w = { .n = 3, .timeout_s = 10, .body = body_abort_mid_frame };
		world_run(&w);
		check_all_passed(&w);
	}
}

/* A rank that leaves after its last collective while rank 0 still sends the result
 * to the others is no failure: it has all it needs. */
static int body_leave_early(struct dist *d, int rank, char *msg, size_t cap)
{
	for (int round = 0; round < 3; round++) {
		size_t n = BIG_COUNT;
		float *big = calloc(n, sizeof(float));
		RCHECK(big != NULL);
		int rc = dist_allreduce_sum(d, big, n, GP_F32);
		free(big);
		RCHECK(rc == 0);
		int32_t g[2] = { rank, round }, all[2 * MAX_RANKS];
		RCHECK(dist_gather(d, g, sizeof(g), rank == 2 ? all : NULL, 2) == 0);
		if (rank == 2)
			RCHECK(all[2] == 1 && all[3] == round);
		if (rank == 1 && round == 2)
			return 0; /* and gone */
	}
	return 0;
}

TEST(dist_rank_that_leaves_after_its_last_collective_is_no_failure)
{
	struct world w = { .n = 3, .timeout_s = 10, .body = body_leave_early };
	world_run(&w);
	check_all_passed(&w);
}

/* rank 1 stops answering: rank 0 names it after the timeout, rank 2 hears it from 0,
 * and rank 1 itself, looking with dist_poll, learns that it was dropped */
static int body_stuck(struct dist *d, int rank, char *msg, size_t cap)
{
	RCHECK(dist_barrier(d) == 0);
	if (rank == 1) {
		double t0 = mono_s();
		int rc = 0;
		while (rc == 0 && mono_s() - t0 < 10) {
			struct timespec ts = { 0, 20000000 };
			nanosleep(&ts, NULL);
			rc = dist_poll(d);
		}
		snprintf(msg, cap, "%s", gp_errmsg());
		RCHECK(rc == GP_EDEVICE);
		RCHECK(strstr(gp_errmsg(), "rank 1 failed: no answer within 1 s") != NULL);
		return 0;
	}
	int rc = dist_barrier(d);
	snprintf(msg, cap, "%s", gp_errmsg());
	RCHECK(rc == GP_EDEVICE);
	RCHECK(strstr(gp_errmsg(), "rank 1 failed: no answer within 1 s") != NULL);
	return 0;
}

TEST(dist_rank_that_stops_answering_times_out)
{
	struct world w = { .n = 3, .timeout_s = 1, .body = body_stuck };
	world_run(&w);
	check_all_passed(&w);
	for (int r = 0; r < 3; r++)
		CHECK_MSG(w.secs[r] < 5, "rank %d took %.1f s", r, w.secs[r]);
}

/* (Two ranks that both wait to read, such as a barrier against a broadcast's
 * receiver, can only end at the timeout.) */
static int body_mismatch(struct dist *d, int rank, char *msg, size_t cap)
{
	float f = 1;
	int rc = rank == 0 ? dist_barrier(d) : dist_allreduce_sum(d, &f, 1, GP_F32);
	snprintf(msg, cap, "%s", gp_errmsg());
	RCHECK(rc == GP_EDEVICE);
	RCHECK(strstr(gp_errmsg(), "rank 1 failed: called dist_allreduce_sum where rank 0 "
				   "called dist_barrier") != NULL);
	return 0;
}

TEST(dist_collectives_called_out_of_order_fail)
{
	struct world w = { .n = 2, .timeout_s = 10, .body = body_mismatch };
	world_run(&w);
	check_all_passed(&w);
}

TEST(dist_rank_that_never_comes_fails_the_rendezvous)
{
	struct world w = { .n = 3, .timeout_s = 1, .absent = { 0, 0, 1 } };
	double t0 = mono_s();
	world_run(&w);
	CHECK_EQ_INT(w.status[0], 10);
	CHECK_MSG(strstr(w.msg[0], "rank 2 did not join within 1 s") != NULL, "%s", w.msg[0]);
	CHECK_EQ_INT(w.status[1], 10);
	CHECK_MSG(strstr(w.msg[1], "rank 2 did not join") != NULL, "%s", w.msg[1]);
	CHECK_MSG(mono_s() - t0 < 4, "took %.1f s", mono_s() - t0);
	/* and rank 0 absent: the others cannot reach it */
	struct world v = { .n = 2, .timeout_s = 1, .absent = { 1, 0 } };
	world_run(&v);
	CHECK_EQ_INT(v.status[1], 10);
	CHECK_MSG(strstr(v.msg[1], "rank 1 cannot reach rank 0 at 127.0.0.1:") != NULL &&
		  strstr(v.msg[1], "within 1 s") != NULL, "%s", v.msg[1]);
}

TEST(dist_hello_mismatch_is_refused)
{
	struct world w = { .n = 2, .timeout_s = 5, .job = { "job-a", "job-b" } };
	world_run(&w);
	CHECK_EQ_INT(w.status[0], 10);
	CHECK_MSG(strstr(w.msg[0], "rank 1 belongs to job 'job-b', rank 0 to 'job-a'") != NULL, "%s",
		  w.msg[0]);
	CHECK_EQ_INT(w.status[1], 10);
	CHECK_MSG(strstr(w.msg[1], "belongs to job 'job-b'") != NULL, "%s", w.msg[1]);
	struct world v = { .n = 2, .timeout_s = 5, .world_of = { 2, 3 } };
	world_run(&v);
	CHECK_EQ_INT(v.status[0], 10);
	CHECK_MSG(strstr(v.msg[0], "has a world of 3, rank 0 of 2") != NULL, "%s", v.msg[0]);
	CHECK_EQ_INT(v.status[1], 10);
}

TEST(dist_open_refuses_what_it_cannot_reach)
{
	struct dist_env env = { .launcher = DIST_LAUNCH_TORCHRUN, .rank = 1, .world = 2 };
	struct dist *d = NULL;
	CHECK_EQ_INT(dist_open(&env, NULL, &d), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "MASTER_ADDR is not set") != NULL, "%s", gp_errmsg());
	CHECK(d == NULL);
	/* rank 0 needs only the port it listens on */
	struct dist_env env0 = { .launcher = DIST_LAUNCH_TORCHRUN, .rank = 0, .world = 2,
				 .master_port = 70000 };
	CHECK_EQ_INT(dist_open(&env0, NULL, &d), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "MASTER_PORT=70000 is out of range") != NULL, "%s", gp_errmsg());
	struct dist_opts o = dist_opts_default();
	o.transport = DIST_TRANSPORT_MPI;
	CHECK_EQ_INT(dist_open(&env, &o, &d), GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "needs a run started by mpirun") != NULL, "%s", gp_errmsg());
}

/* ---- through the binary: gpuperf's launcher, torchrun's variables, mpirun (each
 * command under timeout(1)) ---- */

static double run_timed(const char *cmd, char *out, size_t cap, int *rc)
{
	double t0 = mono_s();
	*rc = test_run(cmd, out, cap);
	return mono_s() - t0;
}

TEST(dist_check_two_local_ranks)
{
	char cmd[1024], out[8192], path[600];
	int rc;
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "timeout 60 %s dist-check --nproc 2 --device cpu --size 8 --iters 2 "
		 "--out %s/r", test_bin(), dir);
	run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "world of 2 (torchrun), transport tcp") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "checks: barrier, bcast, gather, allreduce f32 and f64, iallreduce: ok"),
		  "%s", out);
	CHECK_MSG(strstr(out, "tcp    allreduce      8.0 MiB") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "dist-check: ok (2 ranks)") != NULL, "%s", out);
	/* rank 1's standard output went nowhere: one header, not two */
	const char *h = strstr(out, "dist-check: world");
	CHECK_MSG(h && !strstr(h + 1, "dist-check: world"), "%s", out);
	/* rank 0's result */
	snprintf(path, sizeof(path), "%s/r/dist-check.json", dir);
	json_error_t jerr;
	json_t *res = json_load_file(path, 0, &jerr);
	CHECK_MSG(res != NULL, "%s: %s", path, jerr.text);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements");
	CHECK_EQ_INT(json_integer_value(json_object_get(m, "world")), 2);
	CHECK(!strcmp(json_string_value(json_object_get(m, "transport")), "tcp"));
	CHECK(!strcmp(json_string_value(json_object_get(m, "launcher")), "torchrun"));
	json_t *ranks = json_object_get(m, "ranks");
	CHECK_EQ_INT(json_array_size(ranks), 2);
	CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(ranks, 1), "rank")), 1);
	json_t *bw = json_object_get(m, "host_allreduce");
	CHECK_EQ_INT(json_integer_value(json_object_get(bw, "bytes")), 8 << 20);
	CHECK_EQ_INT(json_integer_value(json_object_get(bw, "iters")), 2);
	double mean = json_real_value(json_object_get(bw, "mean_ms"));
	double busbw = json_real_value(json_object_get(bw, "busbw_gb_s"));
	CHECK_MSG(mean > 0 && json_real_value(json_object_get(bw, "min_ms")) <= mean, "mean %g", mean);
	/* two ranks: bus bandwidth equals algorithm bandwidth, bytes over the mean time */
	CHECK_NEAR(busbw, (8 << 20) / (mean * 1e-3) / 1e9, 1e-9 * busbw);
	json_decref(res);
}

TEST(dist_check_torchrun_variables)
{
	char cmd[2048], out[8192];
	int rc, port = free_port();
	const char *b = test_bin();
	snprintf(cmd, sizeof(cmd),
		 "export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d; "
		 "RANK=1 LOCAL_RANK=1 timeout 60 %s dist-check --device cpu --size 1 --iters 1 "
		 ">/dev/null & RANK=0 LOCAL_RANK=0 timeout 60 %s dist-check --device cpu --size 1 "
		 "--iters 1; r=$?; wait $! || r=9; exit $r",
		 port, b, b);
	run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "dist-check: ok (2 ranks)") != NULL, "%s", out);
}

/* One rank fails on purpose: one error line, naming it, and a quick end. */
static void check_launch_failure(const char *stage, const char *needle)
{
	char cmd[1024], out[8192];
	int rc;
	/* standard error alone: what the user sees of a failure */
	snprintf(cmd, sizeof(cmd), "(timeout 60 %s dist-check --nproc 3 --device cpu --size 1 "
		 "--iters 1 --fail-rank 1 --fail-at %s --timeout 2 2>&1 >/dev/null)", test_bin(), stage);
	double s = run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc == 1, "%s: exit %d: %s", stage, rc, out);
	CHECK_MSG(test_count_lines(out) == 1, "%s: %d lines: %s", stage, test_count_lines(out), out);
	CHECK_MSG(strstr(out, "gpuperf dist-check: error: rank 1 failed: ") == out, "%s: %s", stage, out);
	CHECK_MSG(strstr(out, needle) != NULL, "%s: '%s' lacks '%s'", stage, out, needle);
	CHECK_MSG(s < 10, "%s: took %.1f s", stage, s);
}

TEST(dist_launcher_ends_everything_with_one_line)
{
	check_launch_failure("allreduce", "failing at allreduce as asked (--fail-at) (exit status 1)");
	check_launch_failure("barrier", "failing at barrier as asked");
	check_launch_failure("crash", "killed by signal 9");
	check_launch_failure("start", "failing at start as asked");
	check_launch_failure("hang", "rank 1 failed: no answer within 2 s");
}

TEST(dist_check_bad_input)
{
	test_check_bad("dist-check --transport udp", "--transport must be auto, tcp or mpi");
	test_check_bad("dist-check --nproc 0", "--nproc must be between 1 and 256");
	test_check_bad("dist-check --fail-at never", "--fail-at must be");
	char args[256];
	/* on the CPU: on a one-GPU machine the GPU count would be the first complaint */
	snprintf(args, sizeof(args), "dist-check --nproc 2 --size 1 --device cpu");
	char cmd[1024], out[4096];
	snprintf(cmd, sizeof(cmd), "RANK=0 WORLD_SIZE=2 timeout 20 %s %s", test_bin(), args);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_EQ_INT(rc, 2);
	CHECK_MSG(strstr(out, "already started by torchrun (rank 0 of 2)") && test_count_lines(out) == 1,
		  "%s", out);
	snprintf(cmd, sizeof(cmd), "RANK=0 timeout 20 %s dist-check --size 1", test_bin());
	rc = test_run(cmd, out, sizeof(out));
	CHECK_EQ_INT(rc, 2);
	CHECK_MSG(strstr(out, "RANK is set but WORLD_SIZE is not") && test_count_lines(out) == 1,
		  "%s", out);
}

TEST(dist_check_under_mpirun)
{
	char out[8192], cmd[1024];
	if (test_run("command -v mpirun", out, sizeof(out)) != 0)
		SKIP("mpirun not found");
	/* the plugin lives beside the binary */
	snprintf(cmd, sizeof(cmd), "test -f \"$(dirname %s)/libgpuperf_mpi.so\"", test_bin());
	if (test_run(cmd, out, sizeof(out)) != 0)
		SKIP("libgpuperf_mpi.so not built (no mpicc)");
	/* (Open MPI does not free all it holds at exit: the ASan build's leak check would
	 * fail the ranks for MPI's own memory) */
	snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun "
		 "--allow-run-as-root --oversubscribe -np 2 %s dist-check --device cpu --size 4 "
		 "--iters 2 --transport mpi", test_bin());
	int rc;
	run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "world of 2 (mpi), transport mpi") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "dist-check: ok (2 ranks)") != NULL, "%s", out);
	/* a plugin that cannot load: auto falls back to TCP with a note, mpi refuses */
	snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 GPUPERF_MPI_LIB=/nonexistent/libx.so "
		 "timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 %s dist-check "
		 "--device cpu --size 1 "
		 "--iters 1", test_bin());
	run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "note: MPI plugin not loaded") && strstr(out, "transport tcp"), "%s", out);
	snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 GPUPERF_MPI_LIB=/nonexistent/libx.so "
		 "timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 %s dist-check "
		 "--device cpu --transport mpi",
		 test_bin());
	run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc != 0 && strstr(out, "the MPI transport cannot load"), "exit %d: %s", rc, out);
}

TEST(dist_launcher_forwards_sigterm)
{
	char cmd[1024], out[4096];
	int rc;
	/* rank 1 hangs, so only the signal can end the job before the 60 s timeout */
	snprintf(cmd, sizeof(cmd), "timeout 60 sh -c '%s dist-check --nproc 2 --device cpu --size 1 "
		 "--fail-rank 1 --fail-at hang --timeout 60 >/dev/null & p=$!; sleep 1; kill -TERM $p; "
		 "wait $p'", test_bin());
	double s = run_timed(cmd, out, sizeof(out), &rc);
	CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
	CHECK_MSG(strstr(out, "error: interrupted by Terminated: every rank was stopped") &&
		  test_count_lines(out) == 1, "%s", out);
	CHECK_MSG(s < 10, "took %.1f s", s);
}
