/* Op names and forward MAC counts, shared by every backend and by `info`. */
#include "ops/ops.h"

const char *op_name(enum op_type op)
{
	switch (op) {
	case OP_INPUT: return "input";
	case OP_CONV2D: return "conv2d";
	case OP_BATCHNORM2D: return "batchnorm2d";
	case OP_RELU: return "relu";
	case OP_RELU6: return "relu6";
	case OP_MAXPOOL2D: return "maxpool2d";
	case OP_AVGPOOL_GLOBAL: return "avgpool_global";
	case OP_FLATTEN: return "flatten";
	case OP_LINEAR: return "linear";
	case OP_ADD: return "add";
	case OP_DROPOUT: return "dropout";
	case OP_COUNT: break;
	}
	return "unknown";
}

/* Each output element takes (c_in / groups) * kh * kw multiply-adds; the bias add is
 * not counted, as in the usual model-zoo tables. */
double conv2d_macs(const struct conv2d_args *a)
{
	double out = (double)a->n * a->c_out * a->h_out * a->w_out;
	return out * (a->c_in / a->groups) * a->kh * a->kw;
}

double linear_macs(const struct linear_args *a)
{
	return (double)a->n * a->in * a->out;
}

/* Weights and bias of the layer, in elements. */
static double conv2d_weight_elems(const struct conv2d_args *a)
{
	return (double)a->c_out * (a->c_in / a->groups) * a->kh * a->kw + (a->has_bias ? a->c_out : 0);
}

/* Forward x + w + y; backward dy twice (one pass per gradient kernel), x, dw, and
 * with dx also w and dx. */
static double gemm_like_bytes(double x, double y, double w, int backward, int with_dx,
			      double act_bytes, double w_bytes)
{
	if (!backward)
		return (x + y) * act_bytes + w * w_bytes;
	double bytes = (y + x) * act_bytes + w * w_bytes; /* weight gradient: dy, x -> dw */
	if (with_dx)
		bytes += (y + x) * act_bytes + w * w_bytes; /* data gradient: dy, w -> dx */
	return bytes;
}

double conv2d_bytes(const struct conv2d_args *a, int backward, int with_dx, double act_bytes,
		    double w_bytes)
{
	double x = (double)a->n * a->c_in * a->h_in * a->w_in;
	double y = (double)a->n * a->c_out * a->h_out * a->w_out;
	return gemm_like_bytes(x, y, conv2d_weight_elems(a), backward, with_dx, act_bytes, w_bytes);
}

double linear_bytes(const struct linear_args *a, int backward, int with_dx, double act_bytes,
		    double w_bytes)
{
	double x = (double)a->n * a->in, y = (double)a->n * a->out;
	double w = (double)a->in * a->out + (a->has_bias ? a->out : 0);
	return gemm_like_bytes(x, y, w, backward, with_dx, act_bytes, w_bytes);
}
