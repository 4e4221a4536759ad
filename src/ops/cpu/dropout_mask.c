/* Dropout masks drawn on the host from a seed, so every backend drops the same
 * elements for the same seed and the CPU twin of a GPU step can be replayed. */
#include "core/rng.h"
#include "ops/ops.h"

/* An element is kept when u >= p for u uniform in [0, 1): p = 0 keeps all and
 * p = 1 keeps none, with no special case. */
void dropout_mask_cpu(size_t count, double p, uint64_t seed, uint8_t *mask)
{
	struct rng r;
	rng_seed(&r, seed, 0x64726f70 /* "drop" */);
	for (size_t i = 0; i < count; i++)
		mask[i] = rng_uniform(&r) >= p;
}
