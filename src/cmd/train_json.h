/* The JSON of training results and the facts about the GPU that go with them
 * (cmd/train_json.c). */
#ifndef GP_TRAIN_JSON_H
#define GP_TRAIN_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "train/trainer.h"

json_t *train_result_json(const struct train_opts *o, const struct train_result *r);
/* The training recipe for a result's settings: optimizer and its settings, learning
 * rate and schedule, label smoothing, micro-batches per step, gradient clipping. */
json_t *train_recipe_json(const struct train_opts *o);
/* Device memory of this process as nvidia-smi shows it, summed over every GPU that
 * NVML lists (NVML and CUDA may number devices differently). Needs nvml_open();
 * GP_ENOTFOUND when this process has no context on any GPU. *dev: the first NVML
 * index it was found on (may be NULL). */
int train_process_gpu_mem(size_t *bytes, int *dev);
/* The result's "gpu" object for a run on backend: NVML's static facts for NVML
 * device dev (plus CUDA runtime and cuDNN versions), else what devinfo knows; NULL
 * on the CPU backend. */
json_t *train_gpu_json(enum backend_kind backend, int dev);

#endif
