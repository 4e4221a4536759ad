/* Deterministic random numbers (PCG32) for initialization, dropout masks and
 * synthetic data: the same seed gives the same model on every machine. */
#ifndef GP_RNG_H
#define GP_RNG_H

#include <stdint.h>

struct rng {
	uint64_t state, inc;
};

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);
uint32_t rng_u32(struct rng *r);
double rng_uniform(struct rng *r);               /* [0, 1) */
double rng_normal(struct rng *r);                /* mean 0, std 1 */
uint32_t rng_below(struct rng *r, uint32_t n);   /* [0, n) without modulo bias */

#endif
