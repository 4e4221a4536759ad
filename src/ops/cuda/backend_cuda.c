/* Placeholder until the CUDA op layer lands: every entry says the backend is not ready. */
#include "core/error.h"
#include "nn/backend.h"

static int not_ready(struct net *net)
{
	return gp_error(GP_EUNSUPPORTED, "the CUDA backend is not built yet");
}

static void teardown(struct net *net) {}
static int set_data(struct net *net, const float *x, const int32_t *l) { return not_ready(net); }
static int fwd(struct net *net, int i, int t) { return not_ready(net); }
static int loss(struct net *net, double *l, int *c) { return not_ready(net); }
static int bwd(struct net *net, int i) { return not_ready(net); }
static int sgd(struct net *net, const struct sgd_args *a) { return not_ready(net); }
static size_t ws(struct net *net) { return 0; }

const struct backend_ops backend_cuda_ops = {
	.name = "cuda", .setup = not_ready, .teardown = teardown, .set_batch_data = set_data,
	.forward_node = fwd, .loss = loss, .backward_node = bwd, .sgd_step = sgd,
	.sync_to_host = not_ready, .sync_from_host = not_ready, .workspace_bytes = ws,
};
