/* One execution context per net: two nets on the same device, each with its own
 * streams, handles and workspace, trained at once on two threads, give what each
 * gives alone. */
#include <pthread.h>
#include <string.h>

#include "backend/backend.h"
#include "net_util.h"

#define CTX_STEPS 4

struct ctx_run {
	const char *model;
	int size, batch;
	struct net *net;
	double loss[CTX_STEPS];
	int rc;
	char err[256];
};

/* Build and set up on the calling thread (deterministic algorithms: the same sums
 * each run), with one synthetic batch. */
static int ctx_run_setup(struct ctx_run *r)
{
	r->net = build(r->model, r->size, r->batch, 10);
	if (!r->net)
		return -1;
	r->net->use_graphs = 1;
	backend_cuda_set_conv_policy(r->net, 0, 1);
	int rc = net_setup(r->net, BACKEND_CUDA, GP_F32, PREC_FP32);
	float *x = NULL;
	int32_t *y = NULL;
	if (rc == 0)
		rc = train_synthetic_batch(r->batch, 3, r->size, r->size, 10, 11, &x, &y);
	if (rc == 0)
		rc = net_set_batch_data(r->net, x, y);
	free(x);
	free(y);
	CHECK_MSG(rc == 0, "%s: %s", r->model, gp_errmsg());
	return rc;
}

static void *ctx_run_steps(void *arg)
{
	struct ctx_run *r = arg;
	static const struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	r->rc = 0;
	for (int s = 0; s < CTX_STEPS && r->rc == 0; s++)
		r->rc = net_train_step(r->net, &sgd, &r->loss[s], NULL);
	if (r->rc < 0)
		snprintf(r->err, sizeof(r->err), "%s", gp_errmsg());
	return NULL;
}

TEST(cuda_two_nets_on_two_threads_match_alone)
{
	NEED_GPU();
	struct ctx_run alone[2] = { { .model = "simple_cnn", .size = 32, .batch = 16 },
				     { .model = "resnet18", .size = 64, .batch = 8 } };
	struct ctx_run both[2] = { { .model = "simple_cnn", .size = 32, .batch = 16 },
				     { .model = "resnet18", .size = 64, .batch = 8 } };
	for (int k = 0; k < 2; k++) {
		if (ctx_run_setup(&alone[k]) == 0) {
			ctx_run_steps(&alone[k]);
			CHECK_MSG(alone[k].rc == 0, "%s alone: %s", alone[k].model, alone[k].err);
		}
		net_free(alone[k].net);
		alone[k].net = NULL;
	}
	if (ctx_run_setup(&both[0]) < 0 || ctx_run_setup(&both[1]) < 0)
		goto out;
	pthread_t th[2];
	int started[2] = { 0, 0 };
	for (int k = 0; k < 2; k++)
		started[k] = pthread_create(&th[k], NULL, ctx_run_steps, &both[k]) == 0;
	for (int k = 0; k < 2; k++)
		if (started[k])
			pthread_join(th[k], NULL);
	for (int k = 0; k < 2; k++) {
		CHECK_MSG(started[k], "thread %d did not start", k);
		CHECK_MSG(both[k].rc == 0, "%s beside the other: %s", both[k].model, both[k].err);
		for (int s = 0; s < CTX_STEPS && both[k].rc == 0 && alone[k].rc == 0; s++)
			CHECK_MSG(both[k].loss[s] == alone[k].loss[s], "%s step %d: loss %.17g beside the other, %.17g alone",
				  both[k].model, s, both[k].loss[s], alone[k].loss[s]);
	}
out:
	net_free(both[0].net);
	net_free(both[1].net);
}
