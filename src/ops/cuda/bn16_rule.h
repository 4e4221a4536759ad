/* Which 16-bit NHWC training batch norms run on the own kernels (bn_nhwc16.cu) rather
 * than cuDNN's persistent ones, by GPUPERF_BN16 (core/tuning.h). Plain C, so that a
 * test holds the rule without a GPU.
 *
 * auto follows the twenty-first session's per-shape probe on an H200
 * (tests/gpu/test_cuda_bn16_probe.c, every batch norm of resnet18, resnet50 and
 * mobilenet_v2 at batch 256, forward and backward, docs/cuda.md): since the backward's
 * passes run one wave of blocks, the own kernels take 0.47-0.72x cuDNN's time on
 * MobileNetV2's large layers whose channels are not multiples of 64, 0.71-1.01x on 256
 * channels and more (0.71-0.90x before a residual add, whose cuDNN forward is slow
 * there; one layer of resnet50 loses, 1.11x), and they save cuDNN's unfused ReLU6
 * passes; cuDNN is faster on 64 and 128 channels (1.01-1.21x) and on ResNet's tensors
 * under 16 Mi elements (1.05-1.6x; MobileNetV2's small ones 0.89-1.32x). Since the
 * apply pass runs one wave (s22-5) the own kernels also win on 256 channels over 14 x 14
 * at batch 256 (12.25 Mi elements: 0.87-0.98x of cuDNN's, bf16 and fp16) and still lose
 * on 512 over 7 x 7 (6.1 Mi: 1.18-1.30x). Since their passes copy ahead through shared
 * memory (s27-3) they also win on MobileNetV2's 32 over 28 x 28 and 96 over 14 x 14
 * without an activation (6.1 and 4.6 Mi: 0.78-0.90x, bf16 and fp16) and still lose on
 * 160 over 7 x 7 (1.9 Mi: 1.16-1.47x). So: channels that are not a multiple of 64 from
 * BN16_OWN_ODD_MIN_ELEMS elements; or at least BN16_OWN_MIN_ELEMS elements and a ReLU6
 * after it that cuDNN would leave unfused, or a ReLU whose output nothing else keeps
 * for backward (spare: ResNet's stem, whose ReLU feeds the max pool): cuDNN's fused
 * backward reads that output, the own kernels take the mask from x, so the plan frees
 * it (392 MiB at batch 256, for 0.02-0.03 ms of a step, s22); or at least
 * BN16_OWN_WIDE_CHANNELS and BN16_OWN_WIDE_MIN_ELEMS. The rule
 * sees neither the op after the batch norm beyond these nor the direction, so that a
 * node's forward and backward always take the same kernels. */
#ifndef GP_OPS_CUDA_BN16_RULE_H
#define GP_OPS_CUDA_BN16_RULE_H

#include <stddef.h>

enum bn16_mode { BN16_CUDNN = 0, BN16_AUTO = 1, BN16_OWN = 2 };

#define BN16_OWN_MIN_ELEMS ((size_t)16 << 20)
/* channels not a multiple of 64, from how many elements */
#define BN16_OWN_ODD_MIN_ELEMS ((size_t)4 << 20)
/* channels in multiples of 64 from which the own kernels win, and from how many
 * elements */
#define BN16_OWN_WIDE_CHANNELS 256
#define BN16_OWN_WIDE_MIN_ELEMS ((size_t)12 << 20)
/* the own kernels' thread owns 8 adjacent channels */
#define BN16_CHANNEL_MULTIPLE 8

/* relu6: the batch norm is followed by a ReLU6 that it would otherwise leave to a pass
 * of its own (BN_FUSE_RELU6, not folded into the next convolution). spare: its fused
 * activation's output is kept for that activation's backward alone (bn_args). */
static inline int bn16_own_wanted(int mode, int n, int c, int h, int w, int relu6, int spare)
{
	if (mode == BN16_CUDNN || c <= 0 || c % BN16_CHANNEL_MULTIPLE)
		return 0;
	if (mode == BN16_OWN)
		return 1;
	size_t count = (size_t)n * c * h * w;
	return (count >= BN16_OWN_ODD_MIN_ELEMS && c % 64 != 0) || (count >= BN16_OWN_MIN_ELEMS && (relu6 || spare)) ||
	       (count >= BN16_OWN_WIDE_MIN_ELEMS && c >= BN16_OWN_WIDE_CHANNELS);
}

#endif
