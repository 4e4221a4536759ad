/* Checkpoints in the safetensors format with torchvision's state_dict keys, so a file
 * written here loads into a torchvision model with load_state_dict(strict=True) and a
 * torchvision state dict saved with safetensors loads here. See docs/checkpoints.md. */
#ifndef GP_CHECKPOINT_H
#define GP_CHECKPOINT_H

#include <stdio.h>

#include "nn/net.h"

/* Write every state entry of net (F32 parameters and running statistics, I64
 * counters) to path, atomically: a temporary file in the same directory is
 * written, synced and renamed over path; on failure path is left as it was. */
int checkpoint_save(const struct net *net, const char *path);

/* Read path into net's host master copy. Strict like load_state_dict(strict=True):
 * the file must hold exactly the net's keys with the net's shapes. Float tensors may
 * be F32, F64, F16 or BF16, counters I64 or I32. The net is modified only when the
 * whole file is valid. */
int checkpoint_load(struct net *net, const char *path);

/* Print one line per tensor ("name dtype [d0, d1]") in file order, after checking
 * the file's layout; for debugging files from elsewhere. */
int checkpoint_list(const char *path, FILE *out);

#endif
