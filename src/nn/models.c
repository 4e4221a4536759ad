/* SimpleCNN, ResNet-18/50 (v1.5) and MobileNetV2 as torchvision builds them, with
 * its module names (so state dicts exchange 1:1) and its initialization. */
#include "nn/models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"
#include "core/rng.h"

/* ---- initialization ------------------------------------------------------------------ */

enum init_rule {
	INIT_KAIMING_FAN_OUT,   /* kaiming_normal_(mode="fan_out", nonlinearity="relu") */
	INIT_TORCH_DEFAULT,     /* nn.Conv2d / nn.Linear reset_parameters(): U(+-1/sqrt(fan_in)) */
	INIT_LINEAR_NORMAL_001, /* mobilenet_v2's classifier: N(0, 0.01), bias 0 */
};

static void fill_normal(float *p, size_t n, double std, struct rng *r)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)(rng_normal(r) * std);
}

static void fill_uniform(float *p, size_t n, double bound, struct rng *r)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((2 * rng_uniform(r) - 1) * bound);
}

/* Initialize one node's parameters. fan_in = weight.size(1) * receptive field and
 * fan_out = weight.size(0) * receptive field, as torch.nn.init computes them. */
static void init_node(struct net *net, int idx, enum init_rule conv_rule, enum init_rule linear_rule,
		      struct rng *r)
{
	struct node *nd = &net->nodes[idx];
	if (nd->param_count == 0)
		return;
	struct state_entry *w = &net->state[nd->param_first];
	float *wp = net->host_params + w->offset;
	struct state_entry *b = nd->param_count > 1 ? &net->state[nd->param_first + 1] : NULL;
	float *bp = b ? net->host_params + b->offset : NULL;
	if (nd->op == OP_BATCHNORM2D) {
		for (size_t i = 0; i < w->numel; i++)
			wp[i] = 1.0f;
		memset(bp, 0, b->numel * sizeof(float));
		return;
	}
	size_t receptive = w->ndim == 4 ? (size_t)(w->dims[2] * w->dims[3]) : 1;
	double fan_in = (double)w->dims[1] * receptive, fan_out = (double)w->dims[0] * receptive;
	enum init_rule rule = nd->op == OP_CONV2D ? conv_rule : linear_rule;
	switch (rule) {
	case INIT_KAIMING_FAN_OUT:
		fill_normal(wp, w->numel, sqrt(2.0 / fan_out), r);
		if (bp)
			memset(bp, 0, b->numel * sizeof(float));
		break;
	case INIT_TORCH_DEFAULT:
		fill_uniform(wp, w->numel, 1.0 / sqrt(fan_in), r);
		if (bp)
			fill_uniform(bp, b->numel, 1.0 / sqrt(fan_in), r);
		break;
	case INIT_LINEAR_NORMAL_001:
		fill_normal(wp, w->numel, 0.01, r);
		if (bp)
			memset(bp, 0, b->numel * sizeof(float));
		break;
	}
}

static void init_all(struct net *net, enum init_rule conv_rule, enum init_rule linear_rule)
{
	struct rng r;
	rng_seed(&r, net->seed, 17);
	for (int i = 0; i < net->n_nodes; i++)
		init_node(net, i, conv_rule, linear_rule, &r);
}

static double pick_dropout(const struct model_opts *o, double model_p)
{
	return o->dropout < 0 ? model_p : o->dropout;
}

/* ---- SimpleCNN ------------------------------------------------------------------------
 * A small CNN for 32x32 images (CIFAR-10 sized), defined by this project:
 *   conv1 3->32 3x3 p1 + ReLU + MaxPool 2, conv2 32->64 + ReLU + MaxPool 2,
 *   conv3 64->128 + ReLU + MaxPool 2, flatten, fc1 128*(S/8)^2 -> 256 + ReLU,
 *   Dropout 0.5, fc2 256 -> classes. Convs and linears have biases, PyTorch's
 *   default initialization. tests/torch/models.py holds the same module. */
static int build_simple_cnn(struct net *net, const struct model_opts *o)
{
	if (o->size % 8)
		return gp_error(GP_EINVAL, "simple_cnn needs an input size divisible by 8 (got %d)", o->size);
	int x = net_input(net);
	x = net_relu(net, net_conv(net, "conv1", x, 32, 3, 1, 1, 1, 1));
	x = net_maxpool(net, x, 2, 2, 0);
	x = net_relu(net, net_conv(net, "conv2", x, 64, 3, 1, 1, 1, 1));
	x = net_maxpool(net, x, 2, 2, 0);
	x = net_relu(net, net_conv(net, "conv3", x, 128, 3, 1, 1, 1, 1));
	x = net_maxpool(net, x, 2, 2, 0);
	x = net_flatten(net, x);
	x = net_relu(net, net_linear(net, "fc1", x, 256, 1));
	x = net_dropout(net, x, pick_dropout(o, 0.5));
	net_linear(net, "fc2", x, o->classes, 1);
	GP_TRY(net_finalize(net));
	init_all(net, INIT_TORCH_DEFAULT, INIT_TORCH_DEFAULT);
	return 0;
}

/* ---- ResNet ---------------------------------------------------------------------------- */

static int conv_bn(struct net *net, const char *prefix, const char *conv, const char *bn, int x,
		   int c_out, int k, int stride, int pad)
{
	char cn[GP_NAME_MAX], bname[GP_NAME_MAX];
	snprintf(cn, sizeof(cn), "%s%s", prefix, conv);
	snprintf(bname, sizeof(bname), "%s%s", prefix, bn);
	return net_bn(net, bname, net_conv(net, cn, x, c_out, k, stride, pad, 1, 0));
}

/* torchvision BasicBlock (expansion 1) or Bottleneck (expansion 4, stride on the
 * 3x3 conv: ResNet v1.5). */
static int resnet_block(struct net *net, const char *p, int x, int in_c, int planes, int stride,
			int bottleneck)
{
	int expansion = bottleneck ? 4 : 1, out_c = planes * expansion, y;
	if (bottleneck) {
		y = net_relu(net, conv_bn(net, p, "conv1", "bn1", x, planes, 1, 1, 0));
		y = net_relu(net, conv_bn(net, p, "conv2", "bn2", y, planes, 3, stride, 1));
		y = conv_bn(net, p, "conv3", "bn3", y, out_c, 1, 1, 0);
	} else {
		y = net_relu(net, conv_bn(net, p, "conv1", "bn1", x, planes, 3, stride, 1));
		y = conv_bn(net, p, "conv2", "bn2", y, planes, 3, 1, 1);
	}
	int identity = x;
	if (stride != 1 || in_c != out_c)
		identity = conv_bn(net, p, "downsample.0", "downsample.1", x, out_c, 1, stride, 0);
	return net_relu(net, net_add(net, y, identity));
}

static int build_resnet(struct net *net, const struct model_opts *o, const int layers[4], int bottleneck)
{
	int x = net_input(net);
	x = net_relu(net, conv_bn(net, "", "conv1", "bn1", x, 64, 7, 2, 3));
	x = net_maxpool(net, x, 3, 2, 1);
	int in_c = 64;
	for (int l = 0; l < 4; l++) {
		int planes = 64 << l;
		for (int b = 0; b < layers[l]; b++) {
			char prefix[32];
			snprintf(prefix, sizeof(prefix), "layer%d.%d.", l + 1, b);
			int stride = (b == 0 && l > 0) ? 2 : 1;
			x = resnet_block(net, prefix, x, in_c, planes, stride, bottleneck);
			in_c = planes * (bottleneck ? 4 : 1);
		}
	}
	x = net_flatten(net, net_avgpool_global(net, x));
	net_linear(net, "fc", x, o->classes, 1);
	GP_TRY(net_finalize(net));
	init_all(net, INIT_KAIMING_FAN_OUT, INIT_TORCH_DEFAULT);
	return 0;
}

/* ---- MobileNetV2 ----------------------------------------------------------------------- */

/* Conv2dNormActivation: conv (no bias) + BN + ReLU6 as "<p>.0" and "<p>.1". */
static int conv_bn_relu6(struct net *net, const char *p, int x, int c_out, int k, int stride, int groups)
{
	char cn[GP_NAME_MAX], bname[GP_NAME_MAX];
	snprintf(cn, sizeof(cn), "%s.0", p);
	snprintf(bname, sizeof(bname), "%s.1", p);
	int y = net_conv(net, cn, x, c_out, k, stride, (k - 1) / 2, groups, 0);
	return net_relu6(net, net_bn(net, bname, y));
}

/* torchvision's _make_divisible: round to a multiple of 8, never below 90%. */
static int make_divisible(double v, int divisor)
{
	int nv = (int)(v + divisor / 2.0) / divisor * divisor;
	if (nv < divisor)
		nv = divisor;
	if (nv < 0.9 * v)
		nv += divisor;
	return nv;
}

static int inverted_residual(struct net *net, int idx, int x, int inp, int oup, int stride, int t)
{
	char p[GP_NAME_MAX], name[GP_NAME_MAX];
	int hidden = (int)lround(inp * (double)t), y = x, k = 0;
	if (t != 1) {
		snprintf(p, sizeof(p), "features.%d.conv.%d", idx, k++);
		y = conv_bn_relu6(net, p, y, hidden, 1, 1, 1);
	}
	snprintf(p, sizeof(p), "features.%d.conv.%d", idx, k++);
	y = conv_bn_relu6(net, p, y, hidden, 3, stride, hidden);
	snprintf(name, sizeof(name), "features.%d.conv.%d", idx, k++);
	y = net_conv(net, name, y, oup, 1, 1, 0, 1, 0);
	snprintf(name, sizeof(name), "features.%d.conv.%d", idx, k++);
	y = net_bn(net, name, y);
	if (stride == 1 && inp == oup)
		y = net_add(net, x, y);
	return y;
}

static int build_mobilenet_v2(struct net *net, const struct model_opts *o)
{
	static const int settings[7][4] = {
		{ 1, 16, 1, 1 }, { 6, 24, 2, 2 }, { 6, 32, 3, 2 }, { 6, 64, 4, 2 },
		{ 6, 96, 3, 1 }, { 6, 160, 3, 2 }, { 6, 320, 1, 1 },
	};
	int in_c = make_divisible(32, 8), last_c = make_divisible(1280, 8), idx = 0;
	int x = net_input(net);
	x = conv_bn_relu6(net, "features.0", x, in_c, 3, 2, 1);
	idx = 1;
	for (int s = 0; s < 7; s++) {
		int t = settings[s][0], c = make_divisible(settings[s][1], 8);
		for (int i = 0; i < settings[s][2]; i++) {
			x = inverted_residual(net, idx++, x, in_c, c, i == 0 ? settings[s][3] : 1, t);
			in_c = c;
		}
	}
	char p[GP_NAME_MAX];
	snprintf(p, sizeof(p), "features.%d", idx);
	x = conv_bn_relu6(net, p, x, last_c, 1, 1, 1);
	x = net_flatten(net, net_avgpool_global(net, x));
	x = net_dropout(net, x, pick_dropout(o, 0.2));
	net_linear(net, "classifier.1", x, o->classes, 1);
	GP_TRY(net_finalize(net));
	init_all(net, INIT_KAIMING_FAN_OUT, INIT_LINEAR_NORMAL_001);
	return 0;
}

/* ---- the table ------------------------------------------------------------------------
 * Every list of models (help texts, the menu, messages, look-ups, the build dispatch)
 * derives from this table: a model is added here and nowhere else. */

static int build_resnet18(struct net *net, const struct model_opts *o)
{
	static const int layers[4] = { 2, 2, 2, 2 };
	return build_resnet(net, o, layers, 0);
}

static int build_resnet50(struct net *net, const struct model_opts *o)
{
	static const int layers[4] = { 3, 4, 6, 3 };
	return build_resnet(net, o, layers, 1);
}

static const struct model_info models[] = {
	{ "simple_cnn", "a small CNN for 32x32 images (CIFAR-10 sized)", 32, 1000, build_simple_cnn },
	{ "resnet18", "ResNet-18, torchvision's", 224, 1000, build_resnet18 },
	{ "resnet50", "ResNet-50 v1.5 (stride on the 3x3 convolution), torchvision's", 224, 1000,
	  build_resnet50 },
	{ "mobilenet_v2", "MobileNetV2, torchvision's", 224, 1000, build_mobilenet_v2 },
};

#define N_MODELS ((int)(sizeof(models) / sizeof(models[0])))

const struct model_info *model_info_at(int i)
{
	return i >= 0 && i < N_MODELS ? &models[i] : NULL;
}

const char *model_name_at(int i)
{
	return i >= 0 && i < N_MODELS ? models[i].name : NULL;
}

const struct model_info *model_find(const char *name)
{
	int i = names_find(model_name_at, name);
	return i < 0 ? NULL : &models[i];
}

int model_name_check(const char *name)
{
	char known[256];
	if (model_find(name))
		return 0;
	return gp_error(GP_EINVAL, "unknown model '%s' (known: %s)", name,
			names_join(known, sizeof(known), model_name_at, ", ", ", "));
}

struct model_opts model_defaults(const char *name)
{
	const struct model_info *m = model_find(name);
	struct model_opts o = { .classes = 1000, .size = 224, .batch = 32, .seed = 0, .dropout = -1 };
	if (m) {
		o.classes = m->classes;
		o.size = m->size;
	}
	return o;
}

int model_build(const char *name, const struct model_opts *o, struct net **out)
{
	*out = NULL;
	GP_TRY(model_name_check(name));
	if (o->size < 8 || o->size > 4096)
		return gp_error(GP_EINVAL, "input size %d is out of range (8..4096)", o->size);
	if (o->batch < 1)
		return gp_error(GP_EINVAL, "batch size must be at least 1 (got %d)", o->batch);
	struct net *net = calloc(1, sizeof(*net));
	if (!net)
		return gp_error(GP_ENOMEM, "cannot allocate the network");
	int rc = net_init(net, name, o->classes, 3, o->size, o->size);
	if (rc < 0)
		goto fail;
	net->seed = o->seed;
	net->batch = o->batch;
	rc = model_find(name)->build(net, o);
	if (rc < 0)
		goto fail;
	*out = net;
	return 0;
fail:
	net_free(net);
	return rc;
}
