/* Shapes and element types shared by every backend. Activations are 4-D NCHW
 * (a linear layer's output is N x C x 1 x 1); parameters use PyTorch's shapes. */
#ifndef GP_TENSOR_H
#define GP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

enum gp_dtype {
	GP_F32 = 0,
	GP_F64,
	GP_F16,
	GP_BF16,
	GP_I64,
	GP_I32,
	GP_U8,
};

struct shape {
	int n, c, h, w;
};

static inline size_t shape_numel(struct shape s)
{
	return (size_t)s.n * s.c * s.h * s.w;
}

static inline size_t dtype_size(enum gp_dtype t)
{
	switch (t) {
	case GP_F64: case GP_I64: return 8;
	case GP_F16: case GP_BF16: return 2;
	case GP_U8: return 1;
	default: return 4;
	}
}

const char *dtype_name(enum gp_dtype t);

#endif
