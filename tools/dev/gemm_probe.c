/* gemm_probe: ResNet-50's 1x1 convolutions as the products gpuperf runs them in 16-bit NHWC
 * (src/ops/cuda/gemm_cublas.c: forward, backward data, weight gradient into float), timed
 * through cublasGemmEx's default pick and through every candidate cuBLASLt's heuristics
 * return, so the engine knows what a per-shape choice of product would buy. Outside the
 * product.
 *
 *   build/gemm_probe [--batch N] [--dtype bf16|fp16] [--algos K] [--ws MiB] */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define BK(x)                                                                                   \
	do {                                                                                    \
		cublasStatus_t s_ = (x);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                              \
			fprintf(stderr, "%s:%d cublas status %d\n", __FILE__, __LINE__, (int)s_); \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

/* ResNet-50's stride-1 1x1 convolutions: input pixels per image, channels in and out,
 * layers of that shape. */
static const struct shape {
	int px, cin, cout, count;
} shapes[] = {
	{ 3136, 64, 64, 1 },	{ 3136, 64, 256, 4 },  { 3136, 256, 64, 2 },   { 3136, 256, 128, 1 },
	{ 784, 128, 512, 4 },	{ 784, 512, 128, 3 },  { 784, 512, 256, 1 },   { 196, 256, 1024, 6 },
	{ 196, 1024, 256, 5 },	{ 196, 1024, 512, 1 }, { 49, 512, 2048, 3 },   { 49, 2048, 512, 2 },
};

struct prod {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	float beta;
	cudaDataType_t ct;
};

static cudaStream_t st;
static cudaEvent_t e0, e1;

/* Best of 3 rounds of 5 runs, mean ms a run, after 2 warm-up runs; run(i) < 0: failed. */
#define TIME(ms, call)                                                                     \
	do {                                                                               \
		int ok_ = 1;                                                               \
		for (int w_ = 0; w_ < 2; w_++)                                             \
			ok_ &= (call) == CUBLAS_STATUS_SUCCESS;                            \
		float best_ = 1e30f;                                                       \
		for (int r_ = 0; r_ < 3 && ok_; r_++) {                                    \
			CK(cudaEventRecord(e0, st));                                       \
			for (int i_ = 0; i_ < 5; i_++)                                     \
				ok_ &= (call) == CUBLAS_STATUS_SUCCESS;                    \
			CK(cudaEventRecord(e1, st));                                       \
			CK(cudaEventSynchronize(e1));                                      \
			float t_;                                                          \
			CK(cudaEventElapsedTime(&t_, e0, e1));                             \
			if (t_ / 5 < best_)                                                \
				best_ = t_ / 5;                                            \
		}                                                                          \
		(ms) = ok_ ? best_ : -1;                                                   \
		if (!ok_)                                                                  \
			cudaGetLastError();                                                \
	} while (0)

int main(int argc, char **argv)
{
	int batch = 256, nalgo = 32, ws_mib = 32;
	cudaDataType_t t = CUDA_R_16BF;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--batch"))
			batch = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--algos"))
			nalgo = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--ws"))
			ws_mib = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dtype"))
			t = !strcmp(argv[i + 1], "fp16") ? CUDA_R_16F : CUDA_R_16BF;
		else {
			fprintf(stderr, "gemm_probe: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (nalgo > 64)
		nalgo = 64;
	size_t maxa = 0, maxw = 0;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		size_t p = (size_t)batch * shapes[s].px, c = shapes[s].cin > shapes[s].cout ? shapes[s].cin : shapes[s].cout;
		if (p * c > maxa)
			maxa = p * c;
		if ((size_t)shapes[s].cin * shapes[s].cout > maxw)
			maxw = (size_t)shapes[s].cin * shapes[s].cout;
	}
	void *x, *y, *w, *ws;
	float *dw;
	size_t ws_bytes = (size_t)ws_mib << 20;
	CK(cudaMalloc(&x, maxa * 2));
	CK(cudaMalloc(&y, maxa * 2));
	CK(cudaMalloc(&w, maxw * 2));
	CK(cudaMalloc((void **)&dw, maxw * 4));
	CK(cudaMalloc(&ws, ws_bytes));
	CK(cudaMemset(x, 0x3c, maxa * 2)); /* about 0.01 in bf16, 1.0 in fp16 */
	CK(cudaMemset(y, 0x3c, maxa * 2));
	CK(cudaMemset(w, 0x3c, maxw * 2));
	CK(cudaMemset(dw, 0, maxw * 4));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	cublasHandle_t h;
	cublasLtHandle_t lt;
	BK(cublasCreate(&h));
	BK(cublasLtCreate(&lt));
	BK(cublasSetStream(h, st));
	BK(cublasSetWorkspace(h, ws, ws_bytes));
	printf("batch %d, %s, %d candidates, %d MiB workspace\n", batch, t == CUDA_R_16F ? "fp16" : "bf16", nalgo,
	       ws_mib);
	const char *dname[] = { "fwd", "dgrad", "dgrad+", "wgrad" };
	double tot_def = 0, tot_h0 = 0, tot_best = 0, tot_flop = 0;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		const struct shape *sh = &shapes[s];
		int P = batch * sh->px;
		for (int d = 0; d < 4; d++) {
			struct prod p;
			/* gemm_cublas.c: y^T = W x^T (T,N,out,P,in); dx^T = W^T dy^T (N,N,in,P,out);
			 * dW^T = x^T dy (N,T,in,out,P) */
			if (d == 0)
				p = (struct prod){ CUBLAS_OP_T, CUBLAS_OP_N, sh->cout, P, sh->cin, sh->cin, sh->cin, sh->cout,
						   0.f, t };
			else if (d <= 2)
				p = (struct prod){ CUBLAS_OP_N, CUBLAS_OP_N, sh->cin, P, sh->cout, sh->cin, sh->cout, sh->cin,
						   d == 2 ? 1.f : 0.f, t };
			else
				p = (struct prod){ CUBLAS_OP_N, CUBLAS_OP_T, sh->cin, sh->cout, P, sh->cin, sh->cout, sh->cin,
						   0.f, CUDA_R_32F };
			const void *A = d == 0 ? w : d <= 2 ? w : x, *B = d == 0 ? x : y;
			void *C = d == 0 ? y : d <= 2 ? x : (void *)dw;
			const float alpha = 1.f;
			float def_ms;
			TIME(def_ms, cublasGemmEx(h, p.ta, p.tb, p.m, p.n, p.k, &alpha, A, t, p.lda, B, t, p.ldb, &p.beta, C,
						  p.ct, p.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
			cublasLtMatmulDesc_t op;
			cublasLtMatrixLayout_t la, lb, lc;
			BK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
			BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
			BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
			BK(cublasLtMatrixLayoutCreate(&la, t, p.ta == CUBLAS_OP_N ? p.m : p.k, p.ta == CUBLAS_OP_N ? p.k : p.m,
						      p.lda));
			BK(cublasLtMatrixLayoutCreate(&lb, t, p.tb == CUBLAS_OP_N ? p.k : p.n, p.tb == CUBLAS_OP_N ? p.n : p.k,
						      p.ldb));
			BK(cublasLtMatrixLayoutCreate(&lc, p.ct, p.m, p.n, p.ldc));
			cublasLtMatmulPreference_t pref;
			BK(cublasLtMatmulPreferenceCreate(&pref));
			BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
								sizeof(ws_bytes)));
			cublasLtMatmulHeuristicResult_t res[64];
			int got = 0;
			BK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, nalgo, res, &got));
			float h0 = -1, best = 1e30f;
			int bi = -1;
			for (int i = 0; i < got; i++) {
				if (res[i].state != CUBLAS_STATUS_SUCCESS)
					continue;
				float ms;
				TIME(ms, cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &p.beta, C, lc, C, lc, &res[i].algo, ws,
							ws_bytes, st));
				if (i == 0)
					h0 = ms;
				if (ms > 0 && ms < best) {
					best = ms;
					bi = i;
				}
			}
			double flop = 2.0 * p.m * p.n * p.k;
			if (d != 2) { /* dgrad+ is printed, not summed: a step runs one of the two */
				tot_def += def_ms * sh->count;
				tot_h0 += h0 * sh->count;
				tot_best += best * sh->count;
				tot_flop += flop * sh->count;
			}
			printf("%5d px %4d -> %4d x%d %-6s  default %.4f  lt#0 %.4f  best %.4f (#%d of %d)  %.2fx  %.0f TFLOP/s\n",
			       sh->px, sh->cin, sh->cout, sh->count, dname[d], def_ms, h0, best, bi, got,
			       best > 0 ? def_ms / best : 0, flop / (best * 1e-3) / 1e12);
			cublasLtMatmulPreferenceDestroy(pref);
			cublasLtMatrixLayoutDestroy(la);
			cublasLtMatrixLayoutDestroy(lb);
			cublasLtMatrixLayoutDestroy(lc);
			cublasLtMatmulDescDestroy(op);
		}
	}
	printf("a step (forward, dgrad, wgrad): default %.3f ms, lt#0 %.3f, best %.3f (%.2fx); %.2f TFLOP, %.0f TFLOP/s at best\n",
	       tot_def, tot_h0, tot_best, tot_def / tot_best, tot_flop / 1e12, tot_flop / (tot_best * 1e-3) / 1e12);
	return 0;
}
