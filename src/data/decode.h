/* Where JPEGs become pixels: `--decode cpu|gpu|auto`. cpu is the threaded loader
 * (TurboJPEG + the resampler in image.c); gpu decodes with nvJPEG and augments on the
 * GPU (data/gpu_loader.h); auto takes gpu where a CUDA GPU and nvJPEG are present and
 * the command can take GPU-made batches, else cpu. */
#ifndef GP_DATA_DECODE_H
#define GP_DATA_DECODE_H

#include <stddef.h>

enum decode_mode { DECODE_CPU = 0, DECODE_GPU, DECODE_AUTO };

/* The i-th name ("cpu", "gpu", "auto"), NULL past the last (names.h's table form). */
const char *decode_mode_name_at(int i);
/* GP_EINVAL naming the choices for anything else. */
int decode_mode_parse(const char *s, enum decode_mode *out);
/* 1 when GPU decoding can run here: a CUDA build, a CUDA device, and nvJPEG loads
 * (then unloaded); else 0 with the reason in why. */
int decode_gpu_probe(char *why, size_t cap);
/* The choice for a command: *use_gpu 0 or 1. gpu where decode_gpu_probe says no, or
 * where the command cannot take GPU-made batches (can_take_gpu 0: data that is not
 * files, or a training run off the GPU), is GP_EINVAL with one line naming why, so
 * the command stops before any work (exit 2). auto never fails: it takes gpu exactly
 * where both hold (a CUDA GPU, nvJPEG, a folder of image files, a GPU run); nvJPEG
 * on an H100 or A100 outruns the 16 cores beside it (docs/data.md), so it does not
 * measure first. */
int decode_resolve(enum decode_mode mode, int can_take_gpu, const char *cmd, int *use_gpu);

#endif
