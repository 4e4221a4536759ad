#include "core/rng.h"

#include <math.h>

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
	r->state = 0;
	r->inc = (stream << 1u) | 1u;
	rng_u32(r);
	r->state += seed;
	rng_u32(r);
}

uint32_t rng_u32(struct rng *r)
{
	uint64_t old = r->state;
	r->state = old * 6364136223846793005ULL + r->inc;
	uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
	uint32_t rot = (uint32_t)(old >> 59u);
	return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

double rng_uniform(struct rng *r)
{
	uint64_t hi = rng_u32(r), lo = rng_u32(r);
	return (double)((hi << 21) ^ lo) / 9007199254740992.0;
}

double rng_normal(struct rng *r)
{
	/* Box-Muller; u1 is kept away from 0 so log() stays finite. */
	double u1 = rng_uniform(r), u2 = rng_uniform(r);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint32_t rng_below(struct rng *r, uint32_t n)
{
	uint32_t threshold = (uint32_t)(-n) % n;
	for (;;) {
		uint32_t x = rng_u32(r);
		if (x >= threshold)
			return x % n;
	}
}
