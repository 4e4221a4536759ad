/* What conv_plan.c (the plan cache and the algorithm choice) gives conv_cudnn.c (running
 * planned convolutions): the plan of a shape, and the few rules both sides apply. */
#ifndef GP_OPS_CUDA_CONV_PLAN_H
#define GP_OPS_CUDA_CONV_PLAN_H

#include <stdint.h>

#include <cudnn.h>

#include "ops/cuda/cuda_ops.h"

struct conv_plan {
	struct conv2d_args a; /* has_bias cleared: the bias does not change the plan */
	int device, math, dtype, nhwc, policy;
	struct conv_plan *next;

	cudnnTensorDescriptor_t x_desc, y_desc;
	cudnnFilterDescriptor_t w_desc;
	/* One descriptor per direction: each carries the math type of its algorithm. */
	cudnnConvolutionDescriptor_t fwd_desc, bwd_data_desc, bwd_filter_desc;
	cudnnConvolutionFwdAlgo_t fwd_algo;
	cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
	cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
	size_t fwd_ws_bytes, bwd_data_ws_bytes, bwd_filter_ws_bytes;
	/* 1x1 convolutions: a direction as cuBLAS products (conv1x1_gemm_*_cuda) where
	 * that measured faster than cuDNN's best. The weight gradient comes out in float:
	 * in 16 bits into the master gradient (conv2d_bwd_filter_f32_cuda); in FP32 NCHW
	 * with scratch of bwd_filter_ws_bytes, on the main stream (cuBLAS's handle is
	 * bound to it). */
	int fwd_gemm, bwd_data_gemm, bwd_filter_gemm;
	/* 16-bit NHWC convolutions of few input channels (ResNet's stem): a direction on
	 * the own tensor-core kernels (conv_stem.cu) where GPUPERF_CONV_STEM lets it and
	 * that measured faster; the weight gradient then comes out in float too, its
	 * scratch being bwd_filter_ws_bytes. */
	int fwd_stem, bwd_filter_stem;
};

/* The plan of a's shape in ctx's mode, measured now (on bufs, or on scratch when bufs is
 * NULL) if the cache has none. Measuring synchronizes the device. */
int conv_plan_get(struct cuda_ctx *ctx, const struct conv2d_args *a, const struct conv_bufs *bufs,
		  struct conv_plan **out);
/* The cached plan of a's shape in ctx's mode, or NULL; never measures. */
const struct conv_plan *conv_plan_find(const struct cuda_ctx *ctx, const struct conv2d_args *a);

#endif
