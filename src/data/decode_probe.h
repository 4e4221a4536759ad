/* `--decode auto` where both paths can run: time a few batches through the CPU
 * loader (the run's workers) and through the GPU loader, each created, timed and
 * destroyed, and take the faster. The run then creates the chosen loader afresh at
 * its own start batch, so the probe changes nothing in the batches it sees. */
#ifndef GP_DATA_DECODE_PROBE_H
#define GP_DATA_DECODE_PROBE_H

#include "data/dataset.h"
#include "data/gpu_loader.h"
#include "data/loader.h"

/* Seconds each path may take before its probe stops at the next whole round of
 * batches (a round: one batch per CPU worker, one batch on the GPU path). */
#define DECODE_PROBE_CAP_S 2.0
/* Batches timed after the warm-up round, at least (rounded up to whole rounds). */
#define DECODE_PROBE_BATCHES 3

struct decode_probe_config {
	struct loader_config cpu;     /* the run's CPU loader */
	struct gpu_loader_config gpu; /* the run's GPU loader */
	double cap_s;                 /* per path; 0: DECODE_PROBE_CAP_S */
};

struct decode_probe {
	double cpu_img_s, gpu_img_s; /* 0: not measured */
	int cpu_workers;
	int use_gpu;                 /* the pick */
	char note[256];              /* why gpu was not taken without a rate (GPU loader failed) */
};

/* Measure both paths on ds and pick the faster (a tie goes to cpu, which leaves the
 * GPU to the step). A GPU loader that fails to start or to make its batches leaves
 * cpu with the reason in out->note, not an error; a CPU loader that fails is one. */
int decode_probe_run(struct dataset *ds, const struct decode_probe_config *cfg,
		     struct decode_probe *out);
/* decode_probe_run with the GPU side made by dec (gpu_loader_create_with), for tests. */
int decode_probe_run_with(struct dataset *ds, const struct decode_probe_config *cfg,
			  const struct gpu_loader_decoder *dec, struct decode_probe *out);
/* The log line: "decode auto: gpu 12440 img/s, cpu 8007 img/s (16 workers) -> gpu". */
void decode_probe_describe(const struct decode_probe *p, char *buf, size_t cap);

#endif
