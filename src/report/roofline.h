/* A per-op roofline: for each op (a layer's forward or backward) its measured time
 * against the least time the GPU's peak math rate and memory bandwidth allow for its
 * FLOPs and bytes, max(flops / peak, bytes / bandwidth), summed by op type. The gap
 * (measured / bound) and the time above the bound say where a step's time goes beyond
 * what the hardware forces, and so which fusions can pay. docs/performance.md. */
#ifndef GP_ROOFLINE_H
#define GP_ROOFLINE_H

#include <jansson.h>

#include "report/table.h"

/* One measured op: the layer's forward or backward in one step. */
struct roofline_row {
	char op[40];     /* op type: "conv2d forward", "dwconv2d backward", ... */
	char layer[96];  /* "layer1.0.conv1", "relu#3.backward" */
	int tensor;      /* runs on tensor cores (convolutions, linear layers outside fp32) */
	double flops, bytes;
	double ms;       /* measured per step; < 0: not measured */
};

/* The ceilings: the tensor-core rate of the precision in use, the CUDA cores' FP32
 * rate (element-wise ops, depthwise convolutions and everything in fp32), DRAM
 * bandwidth. Zero where unknown: the bound is unknown then. */
struct roofline_peak {
	double tensor_tflops, cuda_tflops, mem_gb_s;
};

/* One op type's sums. bound_ms sums each row's own bound, and mem_bound_ms the bounds
 * of the rows that memory limits (their arithmetic intensity below the ridge). */
struct roofline_type {
	char op[40];
	int rows;
	double flops, bytes, ms, bound_ms, mem_bound_ms;
};

/* The least time of row r on pk, in ms; -1 when pk does not know a ceiling it needs. */
double roofline_bound_ms(const struct roofline_row *r, const struct roofline_peak *pk);
/* Is r limited by memory rather than math on pk (0 when unknown)? */
int roofline_memory_bound(const struct roofline_row *r, const struct roofline_peak *pk);

/* Sum rows by op type into *out (malloc'd, *n_out of them), sorted by measured time,
 * the longest first (by bound when nothing was measured). Bounds are -1 when unknown. */
int roofline_by_type(const struct roofline_row *rows, int n, const struct roofline_peak *pk,
		     struct roofline_type **out, int *n_out);

/* The table: op type, layers, ms/step, bound ms, gap, above bound, GFLOP, MB, achieved
 * TFLOP/s and GB/s, FLOP/byte, bound by; a total row last. */
int roofline_table(struct table *t, const struct roofline_type *types, int n);
/* {"peak": {...}, "types": [...], "layers": [...], "total": {...}}: every figure of the
 * table for each type, and each row with its own bound. */
json_t *roofline_json(const struct roofline_type *types, int n, const struct roofline_row *rows,
		      int n_rows, const struct roofline_peak *pk);

#endif
