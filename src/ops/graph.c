/* Queries on a net's graph shared by the planner (nn/plan.c) and the backends. */
#include "ops/graph.h"

#include <string.h>

#include "core/error.h"
#include "core/names.h"

int op_bwd_needs_input(enum op_type op)
{
	return op == OP_CONV2D || op == OP_BATCHNORM2D || op == OP_LINEAR;
}

int op_bwd_needs_output(enum op_type op)
{
	return op == OP_RELU || op == OP_RELU6;
}

size_t node_saved_bytes(const struct node *nd, size_t elem_bytes)
{
	switch (nd->op) {
	case OP_BATCHNORM2D: /* statistics stay float under 16-bit activations */
		return 2 * (size_t)nd->a.bn.c * (elem_bytes < sizeof(float) ? sizeof(float) : elem_bytes);
	case OP_MAXPOOL2D: /* a byte per output: the argmax's offset in its window */
		return shape_numel(nd->out) * sizeof(uint8_t);
	case OP_DROPOUT:
		return nd->a.drop.count;
	default:
		return 0;
	}
}

int node_has_grad(const struct net *net, int i)
{
	const struct node *nd = &net->nodes[i];
	return nd->needs_dx && (i == net->n_nodes - 1 || nd->last_consumer >= 0);
}

static int node_input_needs_dx(const struct net *net, const struct node *nd)
{
	return nd->n_in > 0 && net->nodes[nd->in[0]].needs_dx;
}

/* Element-wise ops in FLOPs per element (a convention, as they are bound by memory
 * anyway): ReLU, ReLU6 and dropout 1 (2 backward), add 1 (0 backward: the gradient
 * passes through), batch norm 4 in training forward (sum, sum of squares, normalize,
 * scale and shift) and 6 backward, global average pooling 1 per input element, max
 * pooling one comparison per window element. */
double node_flops(const struct net *net, int i, int backward)
{
	const struct node *nd = &net->nodes[i];
	double out = (double)shape_numel(nd->out);
	switch (nd->op) {
	case OP_CONV2D:
	case OP_LINEAR:
		return 2 * nd->macs * (backward ? 1 + node_input_needs_dx(net, nd) : 1);
	case OP_BATCHNORM2D:
		return (backward ? 6 : 4) * out;
	case OP_RELU:
	case OP_RELU6:
	case OP_DROPOUT:
		return (backward ? 2 : 1) * out;
	case OP_ADD:
		return backward ? 0 : out;
	case OP_MAXPOOL2D:
		return backward ? out : out * nd->a.pool.k * nd->a.pool.k;
	case OP_AVGPOOL_GLOBAL:
		return (double)shape_numel(net->nodes[nd->in[0]].out);
	default:
		return 0;
	}
}

/* Forward reads each input and writes the output; backward reads the output gradient
 * (and the op's saved input, output or mask) and writes each input gradient. */
double node_bytes(const struct net *net, int i, int backward, double act_bytes, double w_bytes)
{
	const struct node *nd = &net->nodes[i];
	double out = (double)shape_numel(nd->out), a = act_bytes;
	double in = nd->n_in > 0 ? (double)shape_numel(net->nodes[nd->in[0]].out) : 0;
	int dx = node_input_needs_dx(net, nd);
	switch (nd->op) {
	case OP_CONV2D:
		return conv2d_bytes(&nd->a.conv, backward, dx, a, w_bytes);
	case OP_LINEAR:
		return linear_bytes(&nd->a.lin, backward, dx, a, w_bytes);
	case OP_BATCHNORM2D: /* gamma, beta and the statistics: float */
		return (backward ? 3 * out : 2 * out) * a + 4.0 * nd->a.bn.c * sizeof(float);
	case OP_RELU:
	case OP_RELU6: /* backward: y, dy -> dx */
		return (backward ? 2 * out + dx * in : in + out) * a;
	case OP_ADD: /* backward: dy -> da, db */
		return backward ? (out + 2 * in) * a : (2 * in + out) * a;
	case OP_DROPOUT: /* the mask: one byte per element */
		return backward ? (out + dx * in) * a + out : (in + out) * a + out;
	case OP_MAXPOOL2D: /* the argmax: a byte per output */
		return backward ? out * a + out + dx * in * a : (in + out) * a + out;
	case OP_AVGPOOL_GLOBAL:
		return backward ? out * a + dx * in * a : (in + out) * a;
	default:
		return 0;
	}
}

/* The identity input of a residual add whose other input is a batch norm read only
 * there (the block's last one); -1 when nd is not such an add. */
int node_add_identity(const struct net *net, const struct node *nd)
{
	if (nd->op != OP_ADD || nd->in[0] == nd->in[1])
		return -1;
	for (int k = 0; k < 2; k++) {
		const struct node *b = &net->nodes[nd->in[k]];
		if (b->op == OP_BATCHNORM2D && b->consumers == 1)
			return nd->in[1 - k];
	}
	return -1;
}

int node_recompute_identity(const struct net *net, int r)
{
	const struct node *rn = &net->nodes[r];
	return rn->t_re >= 0 && rn->op == OP_RELU && net->nodes[rn->in[0]].op == OP_ADD
		       ? node_add_identity(net, &net->nodes[rn->in[0]])
		       : -1;
}

/* Indexed by enum precision; the names that --precision takes and results record;
 * messages, help texts and the menu derive from it. */
static const char *const precision_names[] = { "fp32", "tf32", "fp16", "bf16" };

const char *train_precision_name_at(int i)
{
	int n = (int)(sizeof(precision_names) / sizeof(precision_names[0]));
	return i >= 0 && i < n ? precision_names[i] : NULL;
}

const char *train_precision_name(enum precision p)
{
	return precision_names[p];
}

int train_parse_precision(const char *s, enum precision *out)
{
	char known[64];
	int i = names_find(train_precision_name_at, s);
	if (i < 0)
		return gp_error(GP_EINVAL, "--precision must be %s (got '%s')",
				names_join(known, sizeof(known), train_precision_name_at, ", ", " or "),
				s);
	*out = (enum precision)i;
	return 0;
}
