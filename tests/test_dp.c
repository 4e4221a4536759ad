/* Data parallelism on the CPU backend: N ranks at batch B compute what one rank
 * computes at N x B (gradients averaged over ranks, synchronized batch norm), ranks
 * forked here and meeting over TCP on 127.0.0.1; and a group of one changes nothing. */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error.h"
#include "core/timeutil.h"
#include "dist/dist.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "nn/net.h"
#include "train/trainer.h"
#include "test.h"

static struct net *build(const char *name, int size, int batch, int classes)
{
	struct model_opts o = model_defaults(name);
	o.size = size;
	o.batch = batch;
	o.classes = classes;
	o.seed = 11;
	o.dropout = 0;
	struct net *net = NULL;
	int rc = model_build(name, &o, &net);
	CHECK_MSG(rc == 0, "model_build(%s): %s", name, gp_errmsg());
	return net;
}

/* Three SGD steps on rows [first, first + batch) of the batch of all ranks; the
 * parameters and running statistics after them into params (params_count floats)
 * and running (running_count floats). */
static int train3(const char *model, int batch, int first, int all, struct dist *d, int sync_bn,
		  float *params, float *running)
{
	struct net *net = build(model, 32, batch, 10);
	if (!net)
		return GP_EINVAL;
	float *x = NULL;
	int32_t *labels = NULL;
	int rc = net_set_dist(net, d, sync_bn, 1 << 16); /* small buckets: several in flight */
	if (rc == 0)
		rc = net_setup(net, BACKEND_CPU, GP_F64, PREC_FP32);
	if (rc == 0)
		rc = train_synthetic_batch(all, 3, 32, 32, 10, 3, &x, &labels);
	size_t row = 3 * 32 * 32;
	if (rc == 0)
		rc = net_set_batch_data(net, x + row * first, labels + first);
	struct sgd_args sgd = { .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4 };
	for (int s = 0; s < 3 && rc == 0; s++)
		rc = net_train_step(net, &sgd, NULL, NULL);
	if (rc == 0)
		rc = net_sync_to_host(net);
	if (rc == 0) {
		memcpy(params, net->host_params, net->params_count * sizeof(float));
		memcpy(running, net->host_running, net->running_count * sizeof(float));
	}
	free(x);
	free(labels);
	net_free(net);
	return rc;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
	double d = 0, s = 0;
	for (size_t i = 0; i < n; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		s += (double)b[i] * b[i];
	}
	return sqrt(d) / (sqrt(s) + 1e-30);
}

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

/* world ranks forked at batch B; rank 0's parameters and statistics come back through
 * a file. Returns 0 when every rank ended well. */
static int run_ranks(const char *model, int world, int batch, int sync_bn, size_t np, size_t nr,
		     float *params, float *running)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/rank0.bin", test_tmpdir());
	int port = free_port();
	pid_t pid[8];
	for (int r = 0; r < world; r++) {
		pid[r] = fork();
		if (pid[r] == 0) {
			alarm(120); /* never hang the suite */
			struct dist_env env = { .launcher = DIST_LAUNCH_TORCHRUN, .rank = r, .world = world,
						.local_rank = r, .local_world = world, .master_port = port };
			snprintf(env.master_addr, sizeof(env.master_addr), "127.0.0.1");
			struct dist_opts o = dist_opts_default();
			o.timeout_s = 60;
			o.transport = DIST_TRANSPORT_TCP;
			struct dist *d = NULL;
			float *p = malloc(np * sizeof(float)), *q = malloc((nr ? nr : 1) * sizeof(float));
			int rc = dist_open(&env, &o, &d);
			if (rc == 0)
				rc = train3(model, batch, r * batch, world * batch, d, sync_bn, p, q);
			if (rc < 0) {
				fprintf(stderr, "rank %d: %s\n", r, gp_errmsg());
				dist_abort(d, gp_errmsg());
			}
			if (rc == 0 && r == 0) {
				FILE *f = fopen(path, "wb");
				rc = f && fwrite(p, sizeof(float), np, f) == np &&
				     fwrite(q, sizeof(float), nr, f) == nr ? 0 : -1;
				if (f)
					fclose(f);
			}
			dist_close(d);
			_exit(rc == 0 ? 0 : 1);
		}
	}
	int ok = 1;
	for (int r = 0; r < world; r++) {
		int st = 0;
		waitpid(pid[r], &st, 0);
		ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	if (!ok)
		return -1;
	FILE *f = fopen(path, "rb");
	int rc = f && fread(params, sizeof(float), np, f) == np &&
		 fread(running, sizeof(float), nr, f) == nr ? 0 : -1;
	if (f)
		fclose(f);
	return rc;
}

static void check_equivalence(const char *model, int world, int batch, int sync_bn)
{
	struct net *probe = build(model, 32, batch, 10);
	if (!probe)
		return;
	size_t np = probe->params_count, nr = probe->running_count;
	net_free(probe);
	float *p1 = malloc(np * sizeof(float)), *pn = malloc(np * sizeof(float));
	float *r1 = malloc((nr + 1) * sizeof(float)), *rn = malloc((nr + 1) * sizeof(float));
	CHECK_EQ_INT(train3(model, world * batch, 0, world * batch, NULL, 0, p1, r1), 0);
	CHECK_EQ_INT(run_ranks(model, world, batch, sync_bn, np, nr, pn, rn), 0);
	if (!test_failed()) {
		double dp = rel_diff(pn, p1, np);
		CHECK_MSG(dp <= 1e-5, "%s: %d ranks x %d against 1 x %d: parameters differ by %.3g "
			  "(relative norm)", model, world, batch, world * batch, dp);
		/* and training moved them: the comparison is not of two untouched copies */
		struct net *init = build(model, 32, batch, 10);
		if (init) {
			CHECK(rel_diff(init->host_params, p1, np) > 1e-4);
			net_free(init);
		}
		if (nr && sync_bn) {
			double dr = rel_diff(rn, r1, nr);
			CHECK_MSG(dr <= 1e-5, "%s: running statistics differ by %.3g", model, dr);
		}
	}
	free(p1);
	free(pn);
	free(r1);
	free(rn);
}

TEST(dp_cpu_two_ranks_equal_one_at_twice_the_batch_simple_cnn)
{
	check_equivalence("simple_cnn", 2, 4, 0);
}

TEST(dp_cpu_two_ranks_sync_bn_equal_one_at_twice_the_batch_resnet18)
{
	check_equivalence("resnet18", 2, 2, 1);
}

TEST(dp_cpu_three_ranks_sync_bn_resnet18)
{
	check_equivalence("resnet18", 3, 2, 1);
}

/* A group of one: synchronized batch norm and the bucket all-reduce go through the
 * group's calls and change nothing, bit for bit. */
TEST(dp_cpu_group_of_one_changes_nothing)
{
	struct dist_env env = { 0 };
	struct dist *d = NULL;
	CHECK_EQ_INT(dist_env_read(&env), 0); /* the suite runs without a launcher */
	struct dist_env alone = { .launcher = DIST_LAUNCH_NONE, .world = 1 };
	struct dist_opts o = dist_opts_default();
	CHECK_EQ_INT(dist_open(&alone, &o, &d), 0);
	CHECK_EQ_INT(dist_world(d), 1);
	struct net *probe = build("resnet18", 32, 4, 10);
	if (!probe || test_failed())
		return;
	size_t np = probe->params_count, nr = probe->running_count;
	net_free(probe);
	float *a = malloc(np * 4), *b = malloc(np * 4), *ra = malloc(nr * 4), *rb = malloc(nr * 4);
	CHECK_EQ_INT(train3("resnet18", 4, 0, 4, NULL, 0, a, ra), 0);
	CHECK_EQ_INT(train3("resnet18", 4, 0, 4, d, 1, b, rb), 0);
	CHECK(!memcmp(a, b, np * 4));
	CHECK(!memcmp(ra, rb, nr * 4));
	free(a);
	free(b);
	free(ra);
	free(rb);
	dist_close(d);
}

/* --- through the command line ------------------------------------------------------ */

static int run_cli(const char *args, char *out, size_t cap)
{
	char cmd[3072];
	snprintf(cmd, sizeof(cmd), "timeout 120 %.500s %.2500s", test_bin(), args);
	return test_run(cmd, out, cap);
}

static json_t *measurements(const char *path)
{
	json_t *j = json_load_file(path, 0, NULL);
	CHECK_MSG(j != NULL, "cannot read %s", path);
	json_t *m = json_incref(json_object_get(j, "measurements"));
	json_decref(j);
	return m;
}

/* --nproc 2 on the CPU: two ranks over TCP, one result (rank 0's) holding both
 * ranks' times, one progress log. */
TEST(dp_cli_train_nproc_two_cpu_ranks)
{
	char out[16384], args[1024], path[600], tmp[400];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(args, sizeof(args), "train --model simple_cnn --device cpu --batch 4 --size 32 "
		 "--steps 4 --log-every 1 --nproc 2 --out %s/nproc", tmp);
	int rc = run_cli(args, out, sizeof(out));
	CHECK_MSG(rc == 0, "train --nproc 2 exited %d: %s", rc, out);
	CHECK(strstr(out, "data parallel: 2 ranks (tcp), batch 4 per rank, 8 in all") != NULL);
	/* one progress log: rank 1's standard output is not shown */
	const char *s = strstr(out, "step     4/4"), *again = s ? strstr(s + 1, "step     4/4") : NULL;
	CHECK(s != NULL && again == NULL);
	snprintf(path, sizeof(path), "%s/nproc/train.json", tmp);
	json_t *m = measurements(path);
	if (m) {
		CHECK_EQ_INT(json_integer_value(json_object_get(m, "world")), 2);
		CHECK_EQ_INT(json_array_size(json_object_get(m, "rank_ms_per_step")), 2);
		CHECK(!strcmp(json_string_value(json_object_get(m, "transport")), "tcp"));
		CHECK(json_number_value(json_object_get(m, "allreduce_ms")) > 0);
		double img = json_number_value(json_object_get(m, "img_s"));
		double per = json_number_value(json_object_get(m, "img_s_per_rank"));
		CHECK_NEAR(per * 2, img, 1e-6 * img);
	}
	json_decref(m);
}

/* Under mpirun, the MPI plugin carries the group (skips where Open MPI is missing).
 * Open MPI's own allocations outlive MPI_Finalize: leak checks are off for mpirun runs. */
TEST(dp_cli_train_under_mpirun)
{
	char out[16384], args[1024], path[600], tmp[400];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	if (test_run("command -v mpirun >/dev/null", NULL, 0) != 0)
		SKIP("no mpirun (Open MPI: apt-get install openmpi-bin libopenmpi-dev)");
	snprintf(args, sizeof(args), "train --model simple_cnn --device cpu --batch 4 --size 32 "
		 "--steps 3 --out %s/mpirun", tmp);
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s",
		 test_bin(), args);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "mpirun exited %d: %s", rc, out);
	snprintf(path, sizeof(path), "%s/mpirun/train.json", tmp);
	json_t *m = measurements(path);
	if (m) {
		CHECK_EQ_INT(json_integer_value(json_object_get(m, "world")), 2);
		CHECK(!strcmp(json_string_value(json_object_get(m, "transport")), "mpi"));
	}
	json_decref(m);
}

/* scale on CPU ranks: a run per count, 1 first, efficiency against N x the first. */
TEST(dp_cli_scale_cpu_ranks)
{
	char out[16384], args[1024], path[600], tmp[400];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(args, sizeof(args), "scale --model simple_cnn --device cpu --batch 4 --size 32 "
		 "--steps 4 --gpus 2 --out %s/scale", tmp);
	int rc = run_cli(args, out, sizeof(out));
	CHECK_MSG(rc == 0, "scale exited %d: %s", rc, out);
	snprintf(path, sizeof(path), "%s/scale/scale.json", tmp);
	json_t *m = measurements(path);
	json_t *runs = json_object_get(m, "runs");
	CHECK_EQ_INT(json_array_size(runs), 2);
	if (json_array_size(runs) == 2) {
		json_t *a = json_array_get(runs, 0), *b = json_array_get(runs, 1);
		CHECK_EQ_INT(json_integer_value(json_object_get(a, "gpus")), 1);
		CHECK_EQ_INT(json_integer_value(json_object_get(b, "gpus")), 2);
		CHECK_NEAR(json_number_value(json_object_get(a, "efficiency")), 1.0, 1e-12);
		double e = json_number_value(json_object_get(b, "efficiency"));
		double want = json_number_value(json_object_get(b, "img_s")) /
			      (2 * json_number_value(json_object_get(a, "img_s")));
		CHECK_NEAR(e, want, 1e-9);
		/* model FLOPs of both ranks: simple_cnn's 11,102,208 MACs x 6 per image, at
		 * the img/s of all ranks; CPU ranks have no MFU */
		CHECK_NEAR(json_number_value(json_object_get(b, "flops_per_image")), 66613248.0, 0);
		double tf = json_number_value(json_object_get(b, "tflops"));
		CHECK_NEAR(tf, 66613248.0 * json_number_value(json_object_get(b, "img_s")) / 1e12,
			   1e-8 * tf);
		CHECK(json_object_get(b, "mfu") == NULL);
	}
	json_decref(m);
	snprintf(path, sizeof(path), "%s/scale/scaling.png", tmp);
	FILE *f = fopen(path, "rb");
	CHECK_MSG(f != NULL, "no %s", path);
	if (f)
		fclose(f);
}

/* scale --csv wrote its flag (an int) into a string pointer and crashed; the CSV is
 * scaling.csv in the run folder, the table's columns and one row per count. */
TEST(dp_cli_scale_csv)
{
	char out[16384], args[1024], path[600], tmp[400], text[4096];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(args, sizeof(args), "scale --model simple_cnn --device cpu --batch 2 --size 32 "
		 "--steps 2 --gpus 1 --csv --out %s/scale", tmp);
	int rc = run_cli(args, out, sizeof(out));
	CHECK_MSG(rc == 0, "scale --csv exited %d: %s", rc, out);
	snprintf(path, sizeof(path), "%s/scale/scaling.csv", tmp);
	CHECK_MSG(strstr(out, path) != NULL, "no 'wrote %s' in: %s", path, out);
	FILE *f = fopen(path, "rb");
	CHECK_MSG(f != NULL, "no %s", path);
	if (!f)
		return;
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = 0;
	const char *want = "GPUs,img/s,img/s/GPU,efficiency,ms/step,all-reduce ms,hidden,"
			   "slowest rank,TFLOP/s,MFU,J/img\r\n1,";
	CHECK_MSG(!strncmp(text, want, strlen(want)), "%s", text);
	CHECK_EQ_INT(test_count_lines(text), 2);
}

/* scale --data: every count's run reads the folder through the loader (each rank its
 * shard), the table gains "data wait" and scale.json says what was read and how much
 * of each step waited for it. Run again into the same folder with --overwrite it
 * replaces the runs too (the runs' own train.json refused before, exit 2). */
TEST(dp_cli_scale_data_and_overwrite)
{
	char out[16384], args[1024], path[600], tmp[400];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(args, sizeof(args), "scale --model simple_cnn --device cpu --batch 2 --size 32 "
		 "--steps 3 --gpus 2 --data tests/data/bad --workers 1 --out %s/scale", tmp);
	int rc = run_cli(args, out, sizeof(out));
	CHECK_MSG(rc == 0, "scale --data exited %d: %s", rc, out);
	CHECK_MSG(strstr(out, "data wait") != NULL, "%s", out);
	snprintf(path, sizeof(path), "%s/scale/scale.json", tmp);
	json_t *res = json_load_file(path, 0, NULL);
	CHECK_MSG(res != NULL, "no %s", path);
	json_t *set = json_object_get(res, "settings");
	CHECK(!strcmp(json_string_value(json_object_get(set, "data")), "tests/data/bad"));
	CHECK_EQ_INT(json_integer_value(json_object_get(set, "workers")), 1);
	CHECK(!strcmp(json_string_value(json_object_get(set, "decode")), "cpu"));
	json_t *runs = json_object_get(json_object_get(res, "measurements"), "runs");
	CHECK_EQ_INT(json_array_size(runs), 2);
	for (size_t i = 0; i < json_array_size(runs); i++) {
		json_t *dw = json_object_get(json_array_get(runs, i), "data_wait_pct");
		CHECK_MSG(json_is_number(dw) && json_number_value(dw) >= 0 &&
			  json_number_value(dw) <= 100, "run %zu: data_wait_pct", i);
	}
	json_decref(res);
	snprintf(args, sizeof(args), "scale --model simple_cnn --device cpu --batch 2 --size 32 "
		 "--steps 2 --gpus 2 --overwrite --out %s/scale", tmp);
	rc = run_cli(args, out, sizeof(out));
	CHECK_MSG(rc == 0, "scale --overwrite exited %d: %s", rc, out);
	CHECK_MSG(strstr(out, "data wait") == NULL, "%s", out);
	res = json_load_file(path, 0, NULL);
	set = json_object_get(res, "settings");
	CHECK(!strcmp(json_string_value(json_object_get(set, "data")), "synthetic"));
	CHECK(json_is_null(json_object_get(set, "workers")));
	runs = json_object_get(json_object_get(res, "measurements"), "runs");
	CHECK(json_is_null(json_object_get(json_array_get(runs, 1), "data_wait_pct")));
	json_decref(res);
}

TEST(dp_cli_bad_input_one_line)
{
	test_check_bad("train --model simple_cnn --device cpu --nproc 0", "--nproc must be between 1 and");
	test_check_bad("train --model simple_cnn --device cpu --sync-bn", "are for data-parallel runs");
	test_check_bad("train --model simple_cnn --device cpu --nproc 2 --rendezvous pigeon",
		       "--rendezvous must be auto, tcp or mpi (got 'pigeon')");
	test_check_bad("scale --device cpu --precision bf16", "--precision bf16 needs the CUDA backend");
	test_check_bad("scale --device cpu --transport socket", "--transport socket is NCCL's");
	test_check_bad("scale --device cpu --workers 2", "--workers needs --data DIR or cifar10:DIR");
	test_check_bad("scale --device cpu --data /nonexistent/gpuperf_data",
		       "dataset folder '/nonexistent/gpuperf_data' does not exist");
	/* a launched rank may not launch */
	char out[4096], cmd[1024];
	snprintf(cmd, sizeof(cmd), "RANK=0 WORLD_SIZE=1 %s train --model simple_cnn --device cpu "
		 "--nproc 2", test_bin());
	int rc = test_run(cmd, out, sizeof(out));
	CHECK(rc == 2);
	CHECK(strstr(out, "--nproc inside a run a launcher started") != NULL);
	CHECK_EQ_INT(test_count_lines(out), 1);
}

/* A rank killed in the middle of training: the launcher ends the other at once, with
 * one line naming the rank, and no rank waits out its timeout. */
TEST(dp_cli_rank_killed_mid_training_ends_all_with_one_line)
{
	char tmp[400], script[3072], out[16384];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(script, sizeof(script),
		 "(timeout 60 %s train --model simple_cnn --device cpu --batch 4 --size 32 "
		 "--steps 1000000 --log-every 1000000 --nproc 2 --seed 4242 --out %s/run > %s/out.txt 2>&1; "
		 "echo \"rc=$?\" >> %s/out.txt) & "
		 "sleep 1; for i in $(seq 100); do sleep 0.1; "
		 "  for p in $(pgrep -f 'seed 4242'); do "
		 "    if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=1; then kill -9 $p; break 2; fi; "
		 "  done; done; "
		 "wait; cat %s/out.txt",
		 test_bin(), tmp, tmp, tmp, tmp);
	double t0 = gp_now_s();
	test_run(script, out, sizeof(out));
	double took = gp_now_s() - t0;
	CHECK_MSG(took < 30, "the run took %.1f s to end after rank 1 was killed", took);
	CHECK_MSG(strstr(out, "error: rank 1 failed") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "signal 9") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "rc=0") == NULL && strstr(out, "rc=") != NULL, "%s", out);
	int errors = 0;
	for (const char *p = out; (p = strstr(p, "error:")) != NULL; p++)
		errors++;
	CHECK_MSG(errors == 1, "%d error lines: %s", errors, out);
}

/* The same equivalence through the command line under mpirun (the MPI transport):
 * `train` on 2 ranks at batch B and on one at 2B, both saved, load within bound:
 * 1e-5, or for resnet18 with synchronized batch norm 5e-5. Summing the batch in two
 * halves rounds differently, and 3 steps of batch norm grow that: on the 16-core
 * AVX-512 host of the H100 the pair was 1.71e-5 apart (s11; 2 cores here: below 1e-5),
 * and two sound one-GPU runs of the same recipe that differ only in their convolution
 * algorithms are 4.92e-5 apart (test_cuda_dp.c, s10-4). */
static void mpirun_equivalence(const char *model, const char *extra, double bound)
{
	char tmp[400], cmd[3072], out[16384], a[600], b[600];
	if (test_run("command -v mpirun >/dev/null", NULL, 0) != 0)
		SKIP("no mpirun (Open MPI: apt-get install openmpi-bin libopenmpi-dev)");
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(a, sizeof(a), "%s/two.safetensors", tmp);
	snprintf(b, sizeof(b), "%s/one.safetensors", tmp);
	const char *common = "--device cpu --size 64 --classes 10 --steps 3 --lr 0.01 --dropout 0";
	snprintf(cmd, sizeof(cmd), "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 %s train "
		 "--model %s %s %s --batch 8 --save %s --out %s/two", test_bin(), model, common, extra, a, tmp);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0 && strstr(out, "(mpi)"), "mpirun train exited %d: %s", rc, out);
	snprintf(cmd, sizeof(cmd), "timeout 120 %s train --model %s %s --batch 16 --save %s --out %s/one",
		 test_bin(), model, common, b, tmp);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train exited %d: %s", rc, out);
	if (test_failed())
		return;
	struct net *x = build(model, 64, 8, 10), *y = build(model, 64, 8, 10), *z = build(model, 64, 8, 10);
	if (!x || !y || !z)
		return;
	CHECK_EQ_INT(checkpoint_load(x, a), 0);
	CHECK_EQ_INT(checkpoint_load(y, b), 0);
	double d = rel_diff(x->host_params, y->host_params, x->params_count);
	printf("    %s: 2 ranks under mpirun against 1 at twice the batch: %.3g (bound %.0e)\n",
	       model, d, bound);
	CHECK_MSG(d <= bound, "%s: 2 ranks under mpirun against 1 at twice the batch: %.3g",
		  model, d);
	CHECK(rel_diff(z->host_params, y->host_params, x->params_count) > 1e-4); /* it trained */
	net_free(x);
	net_free(y);
	net_free(z);
}

TEST(dp_cli_mpirun_two_ranks_equal_one_simple_cnn)
{
	mpirun_equivalence("simple_cnn", "", 1e-5);
}

TEST(dp_cli_mpirun_two_ranks_sync_bn_equal_one_resnet18)
{
	mpirun_equivalence("resnet18", "--sync-bn", 5e-5);
}
