/* Data parallelism on the GPU. With one rank (what a one-GPU machine can show): the
 * gradient buckets through NCCL, rank 0's statistics sent before each forward, and
 * the NCCL calls inside a captured training step change nothing; synchronized batch
 * norm's own kernels train as batch norm does, in FP32 and bf16 (NHWC). With two GPUs
 * (skipped on fewer): two ranks at batch B train as one rank at 2B. scale --torch
 * sets PyTorch DDP beside gpuperf at each count (skipped without python3 and torch). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <jansson.h>

#include "backend/backend.h"
#include "dist/dist.h"
#include "net_util.h"
#include "nn/checkpoint.h"

static struct dist *group_of_one(void)
{
	struct dist_env env = { .launcher = DIST_LAUNCH_NONE, .world = 1 };
	struct dist_opts o = dist_opts_default();
	struct dist *d = NULL;
	CHECK_MSG(dist_open(&env, &o, &d) == 0, "%s", gp_errmsg());
	return d;
}

/* steps SGD steps of resnet18 (32 x 32, batch 8) on the GPU; parameters out. */
static int train_gpu(struct dist *d, int sync_bn, enum precision prec, int graphs, int steps,
		     float *params, double *first_loss)
{
	struct net *net = build("resnet18", 32, 8, 10), *cpu = build("resnet18", 32, 8, 10);
	if (!net || !cpu)
		return GP_EINVAL;
	net->use_graphs = graphs;
	/* the same convolution algorithms in every run, by cuDNN's heuristics: timed
	 * choices differ from one set-up to the next, and their rounding with them (the
	 * H100 once gave the plain path 2e-5 to float64 and the synchronized one 1.5e-4
	 * with the same batch-norm arithmetic); batch norm is what these tests compare */
	backend_cuda_set_conv_policy(net, 0, 1);
	backend_cuda_set_conv_heuristics(net, 1);
	int rc = net_set_dist(net, d, sync_bn, 1 << 20);
	if (rc == 0)
		rc = net_setup(net, BACKEND_CUDA, GP_F32, prec);
	if (rc == 0)
		rc = net_setup(cpu, BACKEND_CPU, GP_F32, PREC_FP32);
	if (rc == 0)
		same_batch(net, cpu, 8, 32, 10, 5);
	struct sgd_args sgd = { .lr = 0.02, .momentum = 0.9 };
	for (int s = 0; s < steps && rc == 0; s++)
		rc = net_train_step(net, &sgd, s == 0 ? first_loss : NULL, NULL);
	if (rc == 0)
		rc = net_sync_to_host(net);
	if (rc == 0)
		memcpy(params, net->host_params, net->params_count * sizeof(float));
	if (rc < 0)
		CHECK_MSG(0, "train_gpu: %s", gp_errmsg());
	net_free(net);
	net_free(cpu);
	return rc;
}

static size_t n_params(void)
{
	struct net *n = build("resnet18", 32, 8, 10);
	size_t c = n ? n->params_count : 0;
	net_free(n);
	return c;
}

TEST(cuda_dp_group_of_one_through_nccl_changes_nothing)
{
	NEED_GPU();
	struct dist *d = group_of_one();
	size_t np = n_params();
	float *a = malloc(np * 4), *b = malloc(np * 4), *c = malloc(np * 4);
	double la = 0, lb = 0, lc = 0;
	CHECK_EQ_INT(train_gpu(NULL, 0, PREC_FP32, 0, 4, a, &la), 0);
	CHECK_EQ_INT(train_gpu(d, 0, PREC_FP32, 0, 4, b, &lb), 0);
	CHECK_EQ_INT(train_gpu(d, 0, PREC_FP32, 1, 4, c, &lc), 0); /* steps 2-4 replayed */
	if (!test_failed()) {
		CHECK_NEAR(la, lb, 1e-6);
		CHECK_LE(dist(b, a, np), 1e-5);
		CHECK_LE(dist(c, b, np), 1e-5);
	}
	free(a);
	free(b);
	free(c);
	dist_close(d);
}

/* The same 3 steps on the CPU in double: the yardstick both GPU paths are measured
 * against (two sound batch-norm implementations part after a few steps of a deep net
 * at batch 8, so they are compared by their distance to float64, not to each other). */
static int train_f64(int steps, float *params)
{
	struct net *net = build("resnet18", 32, 8, 10), *other = build("resnet18", 32, 8, 10);
	if (!net || !other)
		return GP_EINVAL;
	int rc = net_setup(net, BACKEND_CPU, GP_F64, PREC_FP32);
	if (rc == 0)
		rc = net_setup(other, BACKEND_CPU, GP_F32, PREC_FP32);
	if (rc == 0)
		same_batch(net, other, 8, 32, 10, 5);
	struct sgd_args sgd = { .lr = 0.02, .momentum = 0.9 };
	for (int s = 0; s < steps && rc == 0; s++)
		rc = net_train_step(net, &sgd, NULL, NULL);
	if (rc == 0)
		rc = net_sync_to_host(net);
	if (rc == 0)
		memcpy(params, net->host_params, net->params_count * sizeof(float));
	net_free(net);
	net_free(other);
	return rc;
}

/* Synchronized batch norm over one rank against the plain path: the first loss as
 * close as the precision allows, and after 3 steps at most 1.5x the plain path's
 * distance to float64 (the project's rule for two sound engines). */
static void sync_bn_case(enum precision prec)
{
	struct dist *d = group_of_one();
	size_t np = n_params();
	float *a = malloc(np * 4), *b = malloc(np * 4), *ref = malloc(np * 4);
	double la = 0, lb = 0;
	CHECK_EQ_INT(train_gpu(NULL, 0, prec, 0, 3, a, &la), 0);
	CHECK_EQ_INT(train_gpu(d, 1, prec, 1, 3, b, &lb), 0);
	CHECK_EQ_INT(train_f64(3, ref), 0);
	if (!test_failed()) {
		double da = dist(a, ref, np), db = dist(b, ref, np);
		printf("      resnet18 %s after 3 steps, to float64: batch norm %.3g, synchronized %.3g; "
		       "apart %.3g\n", prec == PREC_FP32 ? "fp32" : "bf16", da, db, dist(b, a, np));
		CHECK_NEAR(la, lb, prec == PREC_FP32 ? 1e-5 : 1e-2);
		CHECK_LE(db, 1.5 * da);
	}
	free(a);
	free(b);
	free(ref);
	dist_close(d);
}

TEST(cuda_dp_sync_bn_of_one_rank_trains_as_batch_norm_fp32)
{
	NEED_GPU();
	sync_bn_case(PREC_FP32);
}

TEST(cuda_dp_sync_bn_of_one_rank_trains_as_batch_norm_bf16)
{
	NEED_GPU();
	sync_bn_case(PREC_BF16);
}

/* The GPU half of the equivalence (issue 19): `train --nproc 2` on two GPUs at batch B
 * and a run on one at 2B, FP32, deterministic algorithms by cuDNN's heuristics, both
 * saved: parameters after 3 steps within 1e-5 relative norm, or, where FP32 rounding
 * alone spreads further, within 1.5x the distance between two sound one-GPU runs at 2B
 * that differ only in their convolution algorithms (timed choices against heuristic
 * ones). The runs differ only in how the batch is split: cuDNN's algorithms and
 * reductions over B and over 2B, and NCCL's average of two halves. A wrong split or
 * unsynchronized batch norm is orders of magnitude further (46 on the CPU). */
static void two_gpus_case(const char *model, const char *extra)
{
	NEED_GPU();
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
		SKIP("needs 2 GPUs");
	char tmp[400], cmd[3072], out[16384], a[600], b[600], c[600];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(a, sizeof(a), "%s/two.safetensors", tmp);
	snprintf(b, sizeof(b), "%s/one.safetensors", tmp);
	snprintf(c, sizeof(c), "%s/one_timed.safetensors", tmp);
	const char *common = "--device cuda --precision fp32 --size 64 --classes 10 --steps 3 --lr 0.01 "
			     "--dropout 0 --seed 5";
	snprintf(cmd, sizeof(cmd), "NCCL_NVLS_ENABLE=0 timeout 120 %s train --model %s %s --deterministic %s "
		 "--nproc 2 --batch 16 --save %s --out %s/two", test_bin(), model, common, extra, a, tmp);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train --nproc 2 exited %d: %s", rc, out);
	snprintf(cmd, sizeof(cmd), "timeout 120 %s train --model %s %s --deterministic --batch 32 --save %s "
		 "--out %s/one", test_bin(), model, common, b, tmp);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train exited %d: %s", rc, out);
	snprintf(cmd, sizeof(cmd), "timeout 120 %s train --model %s %s --batch 32 --save %s --out %s/one_timed",
		 test_bin(), model, common, c, tmp);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train exited %d: %s", rc, out);
	if (test_failed())
		return;
	struct net *x = build(model, 64, 16, 10), *y = build(model, 64, 16, 10), *t = build(model, 64, 16, 10),
		   *z = build(model, 64, 16, 10);
	if (!x || !y || !t || !z)
		return;
	CHECK_EQ_INT(checkpoint_load(x, a), 0);
	CHECK_EQ_INT(checkpoint_load(y, b), 0);
	CHECK_EQ_INT(checkpoint_load(t, c), 0);
	size_t np = x->params_count;
	double d = rel_err_norm_f32(x->host_params, y->host_params, np);
	double spread = rel_err_norm_f32(t->host_params, y->host_params, np);
	double moved = rel_err_norm_f32(z->host_params, y->host_params, np);
	printf("      %s%s: 2 GPUs x 16 against 1 x 32 after 3 steps: %.3g; two 1-GPU runs (algorithms "
	       "timed or not): %.3g; moved %.3g\n", model, *extra ? " --sync-bn" : "", d, spread, moved);
	double bound = spread * 1.5 > 1e-5 ? spread * 1.5 : 1e-5;
	CHECK_MSG(d <= bound, "%s: 2 GPUs against 1 at twice the batch: %.3g (bound %.3g)", model, d, bound);
	CHECK(moved > 1e-4); /* it trained */
	net_free(x);
	net_free(y);
	net_free(t);
	net_free(z);
}

TEST(cuda_dp_two_gpus_equal_one_at_twice_the_batch_simple_cnn)
{
	two_gpus_case("simple_cnn", "");
}

TEST(cuda_dp_two_gpus_sync_bn_equal_one_at_twice_the_batch_resnet18)
{
	two_gpus_case("resnet18", "--sync-bn");
}

/* scale --torch on the GPUs there are (1, and 2 over sockets where there are two):
 * PyTorch DDP ran after gpuperf at each count, its img/s and the ratio beside; where
 * python3 with torch is missing, the one note and a skip. */
static void scale_torch_case(int gpus, const char *extra)
{
	NEED_GPU();
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < gpus)
		SKIP("needs 2 GPUs");
	char tmp[400], cmd[2048], out[32768], path[700];
	snprintf(tmp, sizeof(tmp), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "timeout 500 %s scale --model resnet18 --device cuda --precision bf16 "
		 "--gpus %d --batch 64 --steps 20 %s --torch --csv --out %s/s", test_bin(), gpus, extra, tmp);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "scale --torch exited %d: %s", rc, out);
	snprintf(path, sizeof(path), "%s/s/scale.json", tmp);
	json_t *res = json_load_file(path, 0, NULL);
	CHECK_MSG(res != NULL, "no %s: %s", path, out);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements"), *pt = json_object_get(m, "pytorch");
	const char *status = json_string_value(json_object_get(pt, "status"));
	if (status && !strcmp(status, "skipped")) {
		char why[300];
		snprintf(why, sizeof(why), "%s", json_string_value(json_object_get(pt, "note")));
		CHECK(strstr(out, "PyTorch DDP yardstick skipped: ") != NULL);
		json_decref(res);
		SKIP(why);
	}
	CHECK_MSG(status && !strcmp(status, "ran"), "%s", out);
	const char *command = json_string_value(json_object_get(pt, "command"));
	CHECK(command && !strncmp(command, "NCCL_NVLS_ENABLE=0 ", 19));
	CHECK(command && strstr(command, "--nproc-per-node N ") && strstr(command, "--precision bf16") &&
	      strstr(command, "--batch 64"));
	if (*extra)
		CHECK(command && strstr(command, "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "));
	CHECK(json_is_string(json_object_get(pt, "torch")));
	json_t *runs = json_object_get(m, "runs");
	CHECK_EQ_INT(json_array_size(runs), gpus == 1 ? 1 : 2);
	for (size_t i = 0; i < json_array_size(runs); i++) {
		json_t *r = json_array_get(runs, i), *t = json_object_get(r, "torch");
		CHECK_MSG(!strcmp(json_string_value(json_object_get(t, "status")), "ok"), "run %zu: %s", i,
			  json_string_value(json_object_get(t, "note")));
		double ours = json_number_value(json_object_get(r, "img_s"));
		double theirs = json_number_value(json_object_get(t, "img_s"));
		double ratio = json_number_value(json_object_get(t, "ratio"));
		printf("      %lld GPU(s)%s: gpuperf %.1f img/s, PyTorch DDP %.1f img/s: %.3fx\n",
		       (long long)json_integer_value(json_object_get(r, "gpus")), extra, ours, theirs, ratio);
		CHECK(ours > 0 && theirs > 0);
		CHECK_NEAR(ratio, ours / theirs, 1e-9 * ratio);
		CHECK(json_number_value(json_object_get(t, "peak_reserved_mib")) > 100);
		CHECK(json_number_value(json_object_get(t, "ms_per_step")) > 0);
	}
	json_decref(res);
	CHECK(strstr(out, "x torch") != NULL);
	CHECK(strstr(out, "gpuperf / PyTorch DDP img/s: ") != NULL);
	snprintf(path, sizeof(path), "%s/s/gpus_1/torch.jsonl", tmp);
	FILE *f = fopen(path, "r");
	CHECK_MSG(f != NULL, "no %s", path);
	if (f)
		fclose(f);
}

TEST(cuda_dp_scale_torch_one_gpu)
{
	scale_torch_case(1, "");
}

TEST(cuda_dp_scale_torch_two_gpus_over_sockets)
{
	scale_torch_case(2, "--transport socket");
}
