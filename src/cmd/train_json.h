/* The JSON of training results and the facts about the GPU that go with them
 * (cmd/train_json.c). */
#ifndef GP_TRAIN_JSON_H
#define GP_TRAIN_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "report/mfu.h"
#include "train/trainer.h"

json_t *train_result_json(const struct train_opts *o, const struct train_result *r);
/* The training recipe for a result's settings: optimizer and its settings, learning
 * rate and schedule, label smoothing, micro-batches per step, gradient clipping. */
json_t *train_recipe_json(const struct train_opts *o);
/* What --decode auto measured, for a result's settings beside "decode" (the path
 * used): {gpu_img_s, cpu_img_s, cpu_workers, gpu_note}, gpu_img_s null where the
 * GPU loader failed (gpu_note says why); JSON null where nothing was measured. NULL
 * only when out of memory. */
json_t *train_decode_probe_json(const struct train_result *r);
/* Device memory of this process as nvidia-smi shows it, summed over every GPU that
 * NVML lists (NVML and CUDA may number devices differently). Needs nvml_open();
 * GP_ENOTFOUND when this process has no context on any GPU. *dev: the first NVML
 * index it was found on (may be NULL). */
int train_process_gpu_mem(size_t *bytes, int *dev);
/* The result's "gpu" object for a run on backend: NVML's static facts for NVML
 * device dev (plus CUDA runtime and cuDNN versions), else what devinfo knows; NULL
 * on the CPU backend. */
json_t *train_gpu_json(enum backend_kind backend, int dev);

/* NVML's energy counter read around a run's timed steps (the observer's timed
 * callback, train_energy_timed with the meter as user): on the CUDA backend only, and
 * silently absent where NVML or the counter is (energy_j stays 0). */
struct train_energy {
	int dev;                /* CUDA device, the NVML index when NVML does not list us */
	int open;               /* nvml_open held */
	int started;            /* the first reading is in mj0 */
	unsigned long long mj0;
	double t0;
	double energy_j, seconds; /* the last timed interval's */
};
void train_energy_start(struct train_energy *e, enum backend_kind backend, int dev);
int train_energy_timed(void *user, int begin);
void train_energy_stop(struct train_energy *e);

/* The MFU figures of run r (report/mfu.h) on the GPU that gpu (the result's "gpu"
 * object, NULL on the CPU) names: model FLOPs of all ranks, peaks of all ranks' GPUs,
 * energy per image of this rank's GPU over its own images. */
void train_mfu(const struct train_opts *o, const struct train_result *r, const json_t *gpu,
	       struct mfu *m);
/* The summary line: "model FLOPs 24.5 G/image, 142.1 TFLOP/s, MFU 14.4% of ...". */
void train_mfu_print(FILE *f, const struct mfu *m, enum precision p, int on_gpu);

#endif
