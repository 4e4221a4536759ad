/* The boundary between the net and its backend: what the net's creator chooses (the
 * device) is checked at set-up, on any machine. */
#include <string.h>

#include "core/error.h"
#include "nn/models.h"
#include "nn/net.h"
#include "test.h"

static struct net *small_net(void)
{
	struct model_opts o = model_defaults("simple_cnn");
	o.batch = 2;
	o.classes = 10;
	struct net *net = NULL;
	CHECK_MSG(model_build("simple_cnn", &o, &net) == 0, "%s", gp_errmsg());
	return net;
}

/* A device that is not there is one error naming it, and the net stays usable. */
TEST(net_setup_rejects_bad_device)
{
	struct net *net = small_net();
	if (!net)
		return;
	int devices[] = { 1, 7, -1 };
	for (int k = 0; k < 3; k++) {
		char want[32];
		net->device = devices[k];
		snprintf(want, sizeof(want), "device %d", devices[k]);
		CHECK_EQ_INT(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32), GP_ENODEV);
		CHECK_MSG(strstr(gp_errmsg(), want) != NULL, "message: %s", gp_errmsg());
		CHECK(strchr(gp_errmsg(), '\n') == NULL);
		CHECK_EQ_INT(net->mem.total_bytes, 0);
	}
	/* on CUDA: no such device here (or no GPU at all), never a crash or a set-up */
	net->device = 99;
	CHECK_EQ_INT(net_setup(net, BACKEND_CUDA, GP_F32, PREC_FP32), GP_ENODEV);
	CHECK_EQ_INT(net->mem.total_bytes, 0);
	net->device = 0;
	CHECK_MSG(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	net_free(net);
}
