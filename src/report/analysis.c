/* The analysis's entry point: attribute the GPU work, break the steps down, build
 * the tables, then the advice. The parts live in analysis_*.c by concern
 * (analysis_priv.h lists them). */
#include "report/analysis.h"

#include <stdlib.h>
#include <string.h>

#include "core/sort.h"
#include "core/error.h"
#include "report/analysis_priv.h"
#include "report/mem_report.h"

const char *const analysis_part_names[PART_COUNT] = {
	"kernel", "memcpy", "memset", "runtime", "data", "cpu", "idle",
};
const char *const analysis_stage_names[STAGE_COUNT] = { "data", "forward", "backward", "optimizer" };
const char *const analysis_dstage_names[DSTAGE_COUNT] = {
	"data", "forward", "backward", "optimizer", "communication", "other", "idle",
};

const char *analysis_stage_name(int stage)
{
	return stage >= 0 && stage < STAGE_COUNT ? analysis_stage_names[stage] : "?";
}

const char *analysis_dstage_name(int dstage)
{
	return dstage >= 0 && dstage < DSTAGE_COUNT ? analysis_dstage_names[dstage] : "?";
}

int analysis_run(const struct trace *t, struct analysis *a)
{
	memset(a, 0, sizeof(*a));
	a->meta = t->meta;
	if (t->n_steps == 0)
		return gp_error(GP_EFORMAT, "the trace has no steps (no ProfilerStep#N ranges)");
	size_t cap = t->n_ranges + t->n_gpu + t->n_mem + 1;
	struct keyed *k = malloc(cap * sizeof(*k));
	signed char *dstage = malloc(t->n_gpu ? t->n_gpu : 1);
	struct attrib at;
	int rc;
	if (!k || !dstage) {
		free(k);
		free(dstage);
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	}
	rc = attrib_build(t, &at);
	if (rc < 0) {
		free(k);
		free(dstage);
		return rc;
	}
	for (size_t i = 0; i < t->n_gpu; i++)
		dstage[i] = (signed char)gpu_dstage(&at, t, &t->gpu[i]);
	a->device_from_host = t->n_gpu == 0;
	rc = steps_analyse(t, dstage, a);
	if (rc < 0)
		goto fail;
	size_t n = 0;
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].cat == TRACE_CPU_OP)
			k[n++] = (struct keyed){ t->ranges[i].name,
						 (t->ranges[i].end_ns - t->ranges[i].start_ns) / 1e6 };
	rc = top_by_name(k, n, a->top_cpu, &a->n_top_cpu);
	if (rc < 0)
		goto fail;
	rc = top_gpu_ops(t, &at, a, k);
	if (rc < 0)
		goto fail;
	rc = top_kernels(t, a, k);
	if (rc < 0)
		goto fail;
	rc = memory_trend(t, a, k);
	if (rc < 0)
		goto fail;
	rc = kernel_stats(t, a);
	if (rc < 0)
		goto fail;
	rc = op_tables(t, &at, dstage, a);
	if (rc < 0)
		goto fail;
	rc = kernel_configs(t, a);
	if (rc < 0)
		goto fail;
	rc = analysis_hta_run(t, a);
	if (rc < 0)
		goto fail;
	for (int i = 0; i < a->n_steps; i++)
		a->steps_total_ms += a->steps[i].dur_ms;
	analysis_sort_ops(a, a->n_kernels > 0);
	rc = advice_evidence(t, a);
	if (rc < 0)
		goto fail;
	analysis_advise(a);
	free(k);
	free(dstage);
	attrib_free(&at);
	return 0;
fail:
	free(k);
	free(dstage);
	attrib_free(&at);
	analysis_free(a);
	return rc;
}

int analysis_set_mem_timeline(struct analysis *a, const struct mem_timeline *tl)
{
	if (a->have_mem_tl)
		mem_timeline_free(&a->mem_tl);
	a->have_mem_tl = 0;
	GP_TRY(mem_timeline_copy(tl, &a->mem_tl));
	a->have_mem_tl = 1;
	return 0;
}

void analysis_free(struct analysis *a)
{
	if (a->have_mem_tl)
		mem_timeline_free(&a->mem_tl);
	a->have_mem_tl = 0;
	free(a->op_types);
	free(a->op_layers);
	a->op_types = a->op_layers = NULL;
	a->n_op_types = a->n_op_layers = 0;
	free(a->steps);
	free(a->mem_t_ms);
	free(a->mem_total_bytes);
	a->steps = NULL;
	a->mem_t_ms = a->mem_total_bytes = NULL;
	a->n_steps = a->n_mem = 0;
}
