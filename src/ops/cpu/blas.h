/* The CPU backend's matrix products: cblas_sgemm of OpenBLAS (or another CBLAS),
 * loaded at run time rather than linked. OpenBLAS starts a thread per core when it
 * loads, each spinning about 0.1 s before it sleeps; linked, every gpuperf command paid
 * that at start, whatever it ran (on the 16-core H100 host 2.0 s of CPU beside
 * `analyze`'s 1.7 s, s13). Loaded at the first use, only CPU training does. */
#ifndef GP_OPS_CPU_BLAS_H
#define GP_OPS_CPU_BLAS_H

#include <cblas.h>

/* Load the library (once): 0, or GP_ENODEV with the names tried and why each failed.
 * The CPU backend calls it at set-up, so that a missing library is one line before any
 * work. */
int blas_load(void);
/* cblas_sgemm's contract. Loads the library at the first call if blas_load has not;
 * where none loads that is a broken install the set-up check was skipped for: the
 * reason on stderr and abort. */
void blas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
		int m, int n, int k, float alpha, const float *a, int lda, const float *b,
		int ldb, float beta, float *c, int ldc);

#endif
