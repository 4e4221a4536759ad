/* stem_probe: ResNet's stem convolution (7x7, stride 2, pad 3, 64 filters, 224 x 224) in
 * 16-bit NHWC through the legacy cuDNN API, with its 3 input channels and padded to 4
 * and 8 with zeros: every forward and weight-gradient algorithm FindEx times, so the
 * engine knows what padding the input buys (docs/dev/stem.md). Outside the product.
 *
 *   build/stem_probe [--batch N] [--dtype bf16|fp16] [--channels 3,4,8] */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			return 1;                                                              \
		}                                                                              \
	} while (0)
#define DK(x)                                                                                  \
	do {                                                                                   \
		cudnnStatus_t s_ = (x);                                                        \
		if (s_ != CUDNN_STATUS_SUCCESS) {                                              \
			fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudnnGetErrorString(s_)); \
			return 1;                                                              \
		}                                                                              \
	} while (0)

static int probe(cudnnHandle_t h, int n, int c, cudnnDataType_t dt, void *ws, size_t ws_bytes)
{
	const int k = 64, r = 7, hi = 224, ho = 112;
	size_t xb = (size_t)n * hi * hi * c * 2, wb = (size_t)k * r * r * c * 2, yb = (size_t)n * ho * ho * k * 2;
	void *x, *w, *y;
	CK(cudaMalloc(&x, xb));
	CK(cudaMalloc(&w, wb));
	CK(cudaMalloc(&y, yb));
	CK(cudaMemset(x, 0x3c, xb)); /* about 1.0 in both 16-bit types' high bytes */
	CK(cudaMemset(w, 0x3c, wb));
	CK(cudaMemset(y, 0x3c, yb));
	cudnnTensorDescriptor_t xd, yd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	DK(cudnnCreateTensorDescriptor(&xd));
	DK(cudnnCreateTensorDescriptor(&yd));
	DK(cudnnCreateFilterDescriptor(&wd));
	DK(cudnnCreateConvolutionDescriptor(&cd));
	DK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, dt, n, c, hi, hi));
	DK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, dt, n, k, ho, ho));
	DK(cudnnSetFilter4dDescriptor(wd, dt, CUDNN_TENSOR_NHWC, k, c, r, r));
	DK(cudnnSetConvolution2dDescriptor(cd, 3, 3, 2, 2, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
	DK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
	cudnnConvolutionFwdAlgoPerf_t fp[16];
	cudnnConvolutionBwdFilterAlgoPerf_t bp[16];
	int nf = 0, nb = 0;
	DK(cudnnFindConvolutionForwardAlgorithmEx(h, xd, x, wd, w, cd, yd, y, 16, &nf, fp, ws, ws_bytes));
	for (int i = 0; i < nf; i++)
		if (fp[i].status == CUDNN_STATUS_SUCCESS)
			printf("C=%d fwd   algo %d  %.3f ms  ws %zu MiB  math %d\n", c, (int)fp[i].algo, fp[i].time,
			       fp[i].memory >> 20, (int)fp[i].mathType);
	DK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, xd, x, yd, y, cd, wd, w, 16, &nb, bp, ws, ws_bytes));
	for (int i = 0; i < nb; i++)
		if (bp[i].status == CUDNN_STATUS_SUCCESS)
			printf("C=%d wgrad algo %d  %.3f ms  ws %zu MiB  math %d\n", c, (int)bp[i].algo, bp[i].time,
			       bp[i].memory >> 20, (int)bp[i].mathType);
	cudnnDestroyTensorDescriptor(xd);
	cudnnDestroyTensorDescriptor(yd);
	cudnnDestroyFilterDescriptor(wd);
	cudnnDestroyConvolutionDescriptor(cd);
	cudaFree(x);
	cudaFree(w);
	cudaFree(y);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 256;
	cudnnDataType_t dt = CUDNN_DATA_BFLOAT16;
	const char *chans = "3,4,8";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
			dt = strcmp(argv[++i], "fp16") ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
		else if (!strcmp(argv[i], "--channels") && i + 1 < argc)
			chans = argv[++i];
		else {
			fprintf(stderr, "usage: stem_probe [--batch N] [--dtype bf16|fp16] [--channels 3,4,8]\n");
			return 2;
		}
	}
	cudnnHandle_t h;
	DK(cudnnCreate(&h));
	size_t ws_bytes = (size_t)1 << 30;
	void *ws;
	CK(cudaMalloc(&ws, ws_bytes));
	for (const char *p = chans; *p;) {
		int c = atoi(p);
		if (c > 0 && probe(h, n, c, dt, ws, ws_bytes))
			return 1;
		p = strchr(p, ',');
		if (!p)
			break;
		p++;
	}
	cudaFree(ws);
	cudnnDestroy(h);
	return 0;
}
