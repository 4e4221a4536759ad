/* The mask of the ReLU or ReLU6 fused into the own 16-bit batch norms' backward
 * (bn_nhwc16.cu), as two bounds on the pre-activation p. The unfused activation's
 * backward passes the gradient where the forward's output y = T(clamp(p, 0, cap)),
 * rounded to the 16-bit type T, is above 0 and below cap. Rounding to nearest even
 * makes that exactly lo < p < hi:
 * - lo is half T's smallest subnormal: p at or below it rounds to 0 (the tie to the
 *   even 0), p above it to a positive value;
 * - ReLU6: hi is the midpoint between 6 and the T value below it. 6's last significand
 *   bit is 0, so the tie rounds up to 6 and fails y < 6, as does every p above it;
 * - ReLU (cap infinity): hi is the midpoint between T's largest finite value and the
 *   next power of two; from there p rounds to infinity, which fails y < cap in the
 *   rounded form too.
 * NaN fails both comparisons, as it fails the rounded form's. Two comparisons instead
 * of the clamp, the rounding there and back and two comparisons. Plain C, so that a CPU
 * test holds the bounds against the rounding they stand for, around every 16-bit value
 * (tests/test_bn16_rule.c); a GPU test sweeps every float on the device. */
#ifndef GP_OPS_CUDA_BN16_MASK_H
#define GP_OPS_CUDA_BN16_MASK_H

#include <math.h>

struct bn16_pass {
	float lo, hi;
};

/* bf16: T is bfloat16 (else IEEE half); relu6: cap 6 (else ReLU, cap infinity) */
static inline struct bn16_pass bn16_pass_bounds(int bf16, int relu6)
{
	int p = bf16 ? 8 : 11; /* significand bits, the implicit one included */
	int emin = bf16 ? -126 : -14, emax = bf16 ? 127 : 15;
	struct bn16_pass b;
	b.lo = ldexpf(1.0f, emin - p);
	b.hi = relu6 ? 6.0f - ldexpf(1.0f, 2 - p) : ldexpf(2.0f - ldexpf(1.0f, -p), emax);
	return b;
}

#endif
