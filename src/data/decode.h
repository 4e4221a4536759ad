/* Where JPEGs become pixels: `--decode cpu|gpu|auto`. cpu is the threaded loader
 * (TurboJPEG + the resampler in image.c); gpu decodes with nvJPEG and augments on the
 * GPU (data/gpu_loader.h); auto is cpu where the GPU path cannot run, else the faster
 * of the two as measured on the run's data (data/decode_probe.h). */
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
/* The choice for a command, before any data is read: *out is mode, except that auto
 * becomes cpu where the GPU path cannot run (decode_gpu_probe says no, or can_take_gpu
 * is 0: data that is not files, or a training run off the GPU) and stays auto where
 * it can, for decode_probe_run to settle once the data is open (small images can
 * decode faster on the CPU's workers than through nvJPEG, docs/data.md). gpu where it
 * cannot run is GP_EINVAL with one line naming why, so the command stops before any
 * work (exit 2); auto never fails. */
int decode_resolve(enum decode_mode mode, int can_take_gpu, const char *cmd,
		   enum decode_mode *out);

#endif
