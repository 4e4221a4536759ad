/* The double build of the reference kernels: what finite differences check. */
#define REAL double
#define SUFFIX f64
#include "ops/cpu/ref_kernels.inc"
