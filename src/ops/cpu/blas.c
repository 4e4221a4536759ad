/* cblas_sgemm through dlopen (blas.h says why). */
#include "ops/cpu/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* OpenBLAS first (Debian's libopenblas0 and the bundle carry libopenblas.so.0), then
 * any CBLAS the system's BLAS alternative provides. */
static const char *const blas_names[] = { "libopenblas.so.0", "libopenblas.so", "libcblas.so.3",
					  "libblas.so.3" };

static __typeof__(&cblas_sgemm) sgemm_fn;
static char load_why[1024];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void)
{
	size_t used = 0;
	for (size_t i = 0; i < sizeof(blas_names) / sizeof(blas_names[0]); i++) {
		void *h = dlopen(blas_names[i], RTLD_NOW | RTLD_LOCAL);
		const char *why = NULL;
		if (h) {
			void *f = dlsym(h, "cblas_sgemm");
			if (f) {
				sgemm_fn = (__typeof__(&cblas_sgemm))f;
				return;
			}
			why = "no cblas_sgemm in it";
			dlclose(h);
		} else {
			why = dlerror();
		}
		int n = snprintf(load_why + used, sizeof(load_why) - used, "%s%s: %s",
				 used ? "; " : "", blas_names[i], why ? why : "?");
		if (n > 0 && (size_t)n < sizeof(load_why) - used)
			used += (size_t)n;
	}
}

int blas_load(void)
{
	pthread_once(&load_once, load);
	if (sgemm_fn)
		return 0;
	return gp_error(GP_ENODEV, "the CPU backend needs OpenBLAS (libopenblas0) or another CBLAS "
			"library: %s", load_why);
}

void blas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
		int m, int n, int k, float alpha, const float *a, int lda, const float *b,
		int ldb, float beta, float *c, int ldc)
{
	if (!sgemm_fn && blas_load() < 0) {
		fprintf(stderr, "gpuperf: %s\n", gp_errmsg());
		abort();
	}
	sgemm_fn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
