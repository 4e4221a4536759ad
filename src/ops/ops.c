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
