/* Which 16-bit NHWC training batch norms run on the own kernels (bn_nhwc16.cu) rather
 * than cuDNN's persistent ones, by GPUPERF_BN16 (core/tuning.h). Plain C, so that a
 * test holds the rule without a GPU.
 *
 * auto follows the sixteenth session's per-shape probe on the H100 (docs/cuda.md, "16-bit
 * batch norm on own kernels"): the own kernels won on MobileNetV2's channel counts
 * (16 to 144) over planes of 56x56 and larger, and wherever they save cuDNN's unfused
 * ReLU6 passes; cuDNN won on every ResNet shape (channels in multiples of 64) and on
 * small tensors. So: at least BN16_OWN_MIN_ELEMS elements, and either a ReLU6 after
 * it that cuDNN would leave unfused or channels that are not a multiple of 64. */
#ifndef GP_OPS_CUDA_BN16_RULE_H
#define GP_OPS_CUDA_BN16_RULE_H

#include <stddef.h>

enum bn16_mode { BN16_CUDNN = 0, BN16_AUTO = 1, BN16_OWN = 2 };

#define BN16_OWN_MIN_ELEMS ((size_t)16 << 20)
/* the own kernels' thread owns 8 adjacent channels */
#define BN16_CHANNEL_MULTIPLE 8

/* relu6: the batch norm is followed by a ReLU6 that it would otherwise leave to a pass
 * of its own (BN_FUSE_RELU6, not folded into the next convolution). */
static inline int bn16_own_wanted(int mode, int n, int c, int h, int w, int relu6)
{
	if (mode == BN16_CUDNN || c <= 0 || c % BN16_CHANNEL_MULTIPLE)
		return 0;
	if (mode == BN16_OWN)
		return 1;
	size_t count = (size_t)n * c * h * w;
	return count >= BN16_OWN_MIN_ELEMS && (relu6 || c % 64 != 0);
}

#endif
