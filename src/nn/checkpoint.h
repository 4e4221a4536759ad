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

/* Files of named tensors that are not a net's weights (a training checkpoint's
 * optimizer state and history), in the same safetensors layout, with string metadata. */
enum ckpt_dtype { CKPT_F32 = 0, CKPT_F64, CKPT_I64 };
struct ckpt_blob {
	const char *name;
	enum ckpt_dtype dtype;
	int ndim;         /* 1 or 2 */
	int64_t dims[2];  /* reading: dims[0] -1 takes any length (data malloc'ed, free it) */
	void *data;
};

/* Write the n tensors, and meta[0..2 n_meta) as key, value pairs of __metadata__,
 * atomically. */
int checkpoint_write_tensors(const char *path, const struct ckpt_blob *t, int n,
			     const char *const *meta, int n_meta);
/* Read every t[i] (its name, dtype and shape must be in the file; GP_EFORMAT naming the
 * first that is not) into t[i].data, and call meta(user, key, value) for each metadata
 * pair first (meta may be NULL; a negative return stops the read with it). */
int checkpoint_read_tensors(const char *path, struct ckpt_blob *t, int n,
			    int (*meta)(void *user, const char *key, const char *value), void *user);

/* Print one line per tensor ("name dtype [d0, d1]") in file order, after checking
 * the file's layout; for debugging files from elsewhere. */
int checkpoint_list(const char *path, FILE *out);

#endif
