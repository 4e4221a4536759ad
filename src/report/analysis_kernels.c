/* Top-N tables by name (CPU ops, layers by GPU time, kernels, memory by layer),
 * kernel statistics and launch configurations with their estimated occupancy. */
#include "report/analysis_priv.h"

#include <stdlib.h>
#include <string.h>

#include "core/sort.h"
#include "core/error.h"

static int keyed_by_name(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->value < y->value ? -1 : x->value > y->value);
}

static int op_by_total(const void *a, const void *b)
{
	const struct analysis_op *x = a, *y = b;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Sum values by name and keep the ANALYSIS_TOP largest totals. */
int top_by_name(struct keyed *k, size_t n, struct analysis_op *top, int *n_top)
{
	gp_qsort(k, n, sizeof(*k), keyed_by_name);
	struct analysis_op *all = malloc((n ? n : 1) * sizeof(*all));
	if (!all)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (!m || strcmp(all[m - 1].name, k[i].name)) {
			memset(&all[m], 0, sizeof(all[m]));
			snprintf(all[m].name, sizeof(all[m].name), "%s", k[i].name);
			m++;
		}
		all[m - 1].count++;
		all[m - 1].total += k[i].value;
	}
	gp_qsort(all, m, sizeof(*all), op_by_total);
	*n_top = m < ANALYSIS_TOP ? (int)m : ANALYSIS_TOP;
	for (int i = 0; i < *n_top; i++) {
		top[i] = all[i];
		top[i].mean = all[i].total / all[i].count;
	}
	free(all);
	return 0;
}

/* Kernel time by layer: kernel -> launching runtime call (correlation id) -> its
 * enclosing cpu_op (external id). Kernels whose chain breaks count as "(no layer)". */
int top_gpu_ops(const struct trace *t, const struct attrib *at, struct analysis *a,
		       struct keyed *k)
{
	size_t n = 0;
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (g->cat != TRACE_KERNEL)
			continue;
		long op = attrib_op(at, t, g);
		k[n].name = op >= 0 ? t->ranges[op].name : "(no layer)";
		k[n++].value = (g->end_ns - g->start_ns) / 1e6;
	}
	return top_by_name(k, n, a->top_gpu, &a->n_top_gpu);
}

/* A readable kernel name: the function of an Itanium-mangled name ("_Z13add_kernelmPKfS0_Pf"
 * -> "add_kernel", "_ZN7cutlass6KernelI...E" -> "cutlass::Kernel"), else the name as it
 * is (cuDNN's and cuBLAS's kernels are mostly plain names). */
const char *kernel_label(const char *name, char *buf, size_t cap)
{
	if (strncmp(name, "_Z", 2))
		return name;
	const char *p = name + 2;
	int nested = *p == 'N';
	size_t len = 0;
	p += nested;
	buf[0] = 0;
	while (*p >= '1' && *p <= '9') {
		char *end;
		long n = strtol(p, &end, 10);
		if (n <= 0 || (long)strlen(end) < n)
			break;
		int w = snprintf(buf + len, cap - len, "%s%.*s", len ? "::" : "", (int)n, end);
		if (w < 0 || (size_t)w >= cap - len)
			break;
		len += (size_t)w;
		p = end + n;
		if (!nested)
			break;
	}
	return len ? buf : name;
}

/* Kernel time by kernel: which kernels the step's GPU time goes to, to set beside
 * another engine's profile (torch.profiler's kernel table). */
int top_kernels(const struct trace *t, struct analysis *a, struct keyed *k)
{
	size_t n = 0;
	char (*labels)[96] = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*labels));
	if (!labels)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (g->cat != TRACE_KERNEL)
			continue;
		const char *l = kernel_label(g->name ? g->name : "?", labels[n], sizeof(labels[n]));
		if (l != labels[n])
			snprintf(labels[n], sizeof(labels[n]), "%s", l);
		k[n].name = labels[n];
		k[n].value = (g->end_ns - g->start_ns) / 1e6;
		n++;
	}
	int rc = top_by_name(k, n, a->top_kernels, &a->n_top_kernels);
	free(labels);
	return rc;
}

/* Per-SM limits by compute capability (CUDA's occupancy tables): resident warps and
 * blocks, 32-bit registers, shared memory in KiB. */
static const struct sm_limit {
	int cc, warps, blocks, regs, smem_kib;
} sm_limits[] = {
	{ 70, 64, 32, 65536, 96 }, { 72, 64, 32, 65536, 96 }, { 75, 32, 16, 65536, 64 },
	{ 80, 64, 32, 65536, 164 }, { 86, 48, 16, 65536, 100 }, { 87, 48, 16, 65536, 164 },
	{ 89, 48, 24, 65536, 100 }, { 90, 64, 32, 65536, 228 }, { 100, 64, 32, 65536, 228 },
	{ 103, 64, 32, 65536, 228 }, { 120, 48, 32, 65536, 100 },
};

void analysis_occupancy(int cc_major, int cc_minor, int sm_count, const int grid[3],
			const int block[3], int registers, int shared_bytes,
			double *theoretical, double *achieved)
{
	*theoretical = *achieved = -1;
	const struct sm_limit *lim = NULL;
	int cc = 10 * cc_major + cc_minor;
	for (size_t i = 0; i < sizeof(sm_limits) / sizeof(sm_limits[0]); i++)
		if (sm_limits[i].cc == cc)
			lim = &sm_limits[i];
	long long threads = (long long)block[0] * block[1] * block[2];
	if (!lim || registers <= 0 || threads <= 0 || threads > 1024 || shared_bytes < 0)
		return;
	int warps = (int)((threads + 31) / 32);
	/* registers are allocated per warp in units of 256 */
	int regs_per_warp = (registers * 32 + 255) / 256 * 256;
	int by_warps = lim->warps / warps;
	int by_regs = lim->regs / regs_per_warp / warps;
	int by_smem = lim->blocks;
	if (shared_bytes > 0) /* each block also reserves 1 KiB for the system */
		by_smem = (int)((long long)lim->smem_kib * 1024 / (shared_bytes + 1024));
	int blocks = lim->blocks;
	if (by_warps < blocks)
		blocks = by_warps;
	if (by_regs < blocks)
		blocks = by_regs;
	if (by_smem < blocks)
		blocks = by_smem;
	*theoretical = (double)blocks * warps / lim->warps;
	if (sm_count <= 0)
		return;
	/* as Kineto estimates it: no more blocks per SM than the grid gives each */
	double grid_per_sm = (double)grid[0] * grid[1] * grid[2] / sm_count;
	double resident = grid_per_sm < blocks ? grid_per_sm : blocks;
	*achieved = resident * warps / lim->warps;
}

static int kconf_same(const struct trace_gpu *x, const struct trace_gpu *y)
{
	return !memcmp(x->grid, y->grid, sizeof(x->grid)) &&
	       !memcmp(x->block, y->block, sizeof(x->block)) && x->registers == y->registers &&
	       x->shared_bytes == y->shared_bytes;
}

struct kidx {
	const char *label;
	const struct trace_gpu *g;
};

static int kidx_cmp(const void *a, const void *b)
{
	const struct kidx *x = a, *y = b;
	int c = strcmp(x->label, y->label);
	if (c)
		return c;
	c = memcmp(x->g->grid, y->g->grid, sizeof(x->g->grid));
	if (c)
		return c;
	c = memcmp(x->g->block, y->g->block, sizeof(x->g->block));
	if (c)
		return c;
	if (x->g->registers != y->g->registers)
		return x->g->registers < y->g->registers ? -1 : 1;
	return (x->g->shared_bytes > y->g->shared_bytes) - (x->g->shared_bytes < y->g->shared_bytes);
}

static int kconf_by_total(const void *a, const void *b)
{
	const struct analysis_kconf *x = a, *y = b;
	if (x->total_ms != y->total_ms)
		return x->total_ms > y->total_ms ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The kernels by name and launch configuration, the ANALYSIS_TOP longest in total. */
int kernel_configs(const struct trace *t, struct analysis *a)
{
	size_t n = 0;
	struct kidx *k = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*k));
	char (*labels)[96] = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*labels));
	struct analysis_kconf *all = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*all));
	if (!k || !labels || !all) {
		free(k);
		free(labels);
		free(all);
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	}
	for (size_t i = 0; i < t->n_gpu; i++) {
		const struct trace_gpu *g = &t->gpu[i];
		if (g->cat != TRACE_KERNEL)
			continue;
		const char *lb = kernel_label(g->name ? g->name : "?", labels[n], sizeof(labels[n]));
		if (lb != labels[n])
			snprintf(labels[n], sizeof(labels[n]), "%s", lb);
		k[n] = (struct kidx){ labels[n], g };
		n++;
	}
	gp_qsort(k, n, sizeof(*k), kidx_cmp);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		const struct trace_gpu *g = k[i].g;
		if (!m || strcmp(all[m - 1].name, k[i].label) || !kconf_same(k[i - 1].g, g)) {
			struct analysis_kconf *c = &all[m++];
			memset(c, 0, sizeof(*c));
			snprintf(c->name, sizeof(c->name), "%s", k[i].label);
			memcpy(c->grid, g->grid, sizeof(c->grid));
			memcpy(c->block, g->block, sizeof(c->block));
			c->registers = g->registers;
			c->shared_bytes = g->shared_bytes;
			analysis_occupancy(a->meta.cc_major, a->meta.cc_minor, a->meta.sm_count,
					   g->grid, g->block, g->registers, g->shared_bytes,
					   &c->theoretical_occupancy, &c->achieved_occupancy);
		}
		all[m - 1].calls++;
		all[m - 1].total_ms += (g->end_ns - g->start_ns) / 1e6;
	}
	gp_qsort(all, m, sizeof(*all), kconf_by_total);
	a->n_kconf = m < ANALYSIS_TOP ? (int)m : ANALYSIS_TOP;
	for (int i = 0; i < a->n_kconf; i++) {
		a->kconf[i] = all[i];
		a->kconf[i].mean_us = all[i].total_ms * 1e3 / all[i].calls;
	}
	free(k);
	free(labels);
	free(all);
	return 0;
}

static int dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int kernel_stats(const struct trace *t, struct analysis *a)
{
	double *d = malloc((t->n_gpu ? t->n_gpu : 1) * sizeof(*d));
	if (!d)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	size_t n = 0;
	for (size_t i = 0; i < t->n_gpu; i++)
		if (t->gpu[i].cat == TRACE_KERNEL)
			d[n++] = (t->gpu[i].end_ns - t->gpu[i].start_ns) / 1e3;
	gp_qsort(d, n, sizeof(*d), dbl_cmp);
	a->n_kernels = (long)n;
	for (size_t i = 0; i < n; i++)
		a->kernel_total_ms += d[i] / 1e3;
	if (n)
		a->kernel_median_us = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
	free(d);
	return 0;
}

int memory_trend(const struct trace *t, struct analysis *a, struct keyed *k)
{
	size_t n = 0;
	int64_t t0 = t->n_steps ? t->steps[0].start_ns : t->base_ns;
	a->mem_t_ms = malloc((t->n_mem ? t->n_mem : 1) * sizeof(double));
	a->mem_total_bytes = malloc((t->n_mem ? t->n_mem : 1) * sizeof(double));
	if (!a->mem_t_ms || !a->mem_total_bytes)
		return gp_error(GP_ENOMEM, "analysis: out of memory");
	for (size_t i = 0; i < t->n_mem; i++) {
		const struct trace_mem *m = &t->mem[i];
		a->mem_t_ms[i] = (m->ts_ns - t0) / 1e6;
		a->mem_total_bytes[i] = (double)m->total_bytes;
		if (m->total_bytes > a->mem_peak_bytes)
			a->mem_peak_bytes = (double)m->total_bytes;
		if (m->layer && m->delta_bytes > 0) {
			k[n].name = m->layer;
			k[n++].value = (double)m->delta_bytes;
		}
	}
	a->n_mem = (int)t->n_mem;
	return top_by_name(k, n, a->top_mem, &a->n_top_mem);
}
