/* How a GPU batch is split between nvJPEG and the CPU threads of `--decode-threads N`
 * (data/cuda/decode_share.h): so that both finish together. Each batch measures the
 * batched call's wall time per image (beside training it waits for SMs, which is what
 * the split must absorb) and the CPU threads' time per image; their moving averages
 * give the rates, and the CPU threads take their rate's share of the next batch. At
 * least one image goes each way, so both keep being measured. Pure arithmetic, for
 * the unit test (tests/test_data_decode.c). */
#ifndef GP_DATA_DECODE_SPLIT_H
#define GP_DATA_DECODE_SPLIT_H

#define DECODE_SPLIT_EMA 0.3 /* weight of the newest batch */

struct decode_split {
	double gpu_ms_img, cpu_ms_img; /* moving averages, 0 until measured */
};

/* Fold one batch in: gpu_ms over gpu_n images in the batched call, cpu_ms summed over
 * the threads for cpu_n images (either n may be 0: nothing learned). */
static inline void decode_split_update(struct decode_split *s, double gpu_ms, int gpu_n,
				       double cpu_ms, int cpu_n)
{
	if (gpu_n > 0 && gpu_ms > 0) {
		double g = gpu_ms / gpu_n;
		s->gpu_ms_img = s->gpu_ms_img > 0 ? (1 - DECODE_SPLIT_EMA) * s->gpu_ms_img +
							    DECODE_SPLIT_EMA * g : g;
	}
	if (cpu_n > 0 && cpu_ms > 0) {
		double c = cpu_ms / cpu_n;
		s->cpu_ms_img = s->cpu_ms_img > 0 ? (1 - DECODE_SPLIT_EMA) * s->cpu_ms_img +
							    DECODE_SPLIT_EMA * c : c;
	}
}

/* How many of nb images the CPU threads take next: nb / 8 until both rates are known,
 * then nb x cpu rate / (gpu rate + cpu rate), at least 1 and at most nb - 1 (0 for a
 * batch of fewer than 2, or without threads). */
static inline int decode_split_cpu_count(const struct decode_split *s, int nb, int threads)
{
	if (nb < 2 || threads < 1)
		return 0;
	int k;
	if (s->gpu_ms_img <= 0 || s->cpu_ms_img <= 0) {
		k = nb / 8;
	} else {
		double rg = 1.0 / s->gpu_ms_img, rc = threads / s->cpu_ms_img;
		k = (int)(nb * rc / (rg + rc) + 0.5);
	}
	return k < 1 ? 1 : k > nb - 1 ? nb - 1 : k;
}

#endif
