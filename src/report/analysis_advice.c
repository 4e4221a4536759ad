/* The advice rules: each fires on a measured figure past its threshold. */
#include "report/analysis_priv.h"

#include <stdlib.h>
#include <string.h>

#include <stdarg.h>
#include <stdio.h>

#include "core/error.h"

static void advice_add(struct analysis *a, const char *rule, double value, double threshold,
		       const char *fmt, ...) GP_PRINTF(5, 6);

static void advice_add(struct analysis *a, const char *rule, double value, double threshold,
		       const char *fmt, ...)
{
	struct analysis_advice *ad = &a->advice[a->n_advice++];
	va_list ap;
	snprintf(ad->rule, sizeof(ad->rule), "%s", rule);
	ad->value = value;
	ad->threshold = threshold;
	va_start(ap, fmt);
	vsnprintf(ad->text, sizeof(ad->text), fmt, ap);
	va_end(ap);
}

/* The rules, with thresholds documented in docs/profile.md. GPU rules need GPU work
 * in the trace: a CPU run has nothing to say about kernels. */
void advice_rules(struct analysis *a)
{
	if (a->data_wait_share > 0.10)
		advice_add(a, "loader_workers", a->data_wait_share, 0.10,
			   "steps wait for data %.1f%% of the time (> %d%%): add data loader "
			   "workers (gpuperf workers finds the knee)",
			   100 * a->data_wait_share, 10);
	if (a->n_kernels == 0)
		return;
	if (a->kernel_median_us < 20 && a->gpu_idle_share > 0.20)
		advice_add(a, "cuda_graphs", a->kernel_median_us, 20,
			   "median kernel lasts %.1f us with the GPU idle %.1f%% of the step: "
			   "launch overhead dominates; capture the step in a CUDA graph",
			   a->kernel_median_us, 100 * a->gpu_idle_share);
	int tensor_cores = a->meta.cc_major >= 7;
	if (tensor_cores && !strcmp(a->meta.precision, "fp32"))
		advice_add(a, "amp", a->meta.cc_major + a->meta.cc_minor / 10.0, 7.0,
			   "FP32 math on a compute capability %.1f GPU with tensor cores: try "
			   "mixed precision (--precision fp16 or bf16)",
			   a->meta.cc_major + a->meta.cc_minor / 10.0);
	if (a->gpu_busy_share < 0.50)
		advice_add(a, "bigger_batch", a->gpu_busy_share, 0.50,
			   "the GPU is busy only %.1f%% of the step (< %d%%): a bigger batch "
			   "gives it more work per launch",
			   100 * a->gpu_busy_share, 50);
}
