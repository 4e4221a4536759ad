/* The float build of the reference kernels: what the CPU backend trains with. */
#define REAL float
#define SUFFIX f32
#include "ops/cpu/ref_kernels.inc"
