/* Model FLOPs utilization: the GPUs' datasheet peaks (one table), and what a training
 * rate means against them: model FLOPs per image, achieved TFLOP/s, MFU, and the energy
 * per image from NVML's counter. Used by every measuring command's result and by the
 * roofline (report/roofline.h). */
#ifndef GP_MFU_H
#define GP_MFU_H

#include <jansson.h>
#include <stddef.h>

#include "ops/graph.h"

/* One GPU's dense peaks (no 2:4 sparsity) as NVIDIA's datasheets state them. fp32: the
 * CUDA cores' FMA rate (what --precision fp32 uses, TF32 off); tf32, fp16, bf16: the
 * tensor cores with float accumulation, which cuDNN and cuBLAS use for our 16-bit
 * precisions. */
struct gpu_peaks {
	const char *label;    /* "H100 SXM5 80GB" */
	const char *names[4]; /* device names as the CUDA runtime and NVML give them */
	double fp32_tflops, tf32_tflops, fp16_tflops, bf16_tflops;
	double mem_gb_s;      /* DRAM bandwidth, GB/s (10^9 bytes) */
};

/* The row whose names hold device_name (case and surrounding blanks ignored); NULL for
 * a GPU the table does not know: its MFU is unknown, never guessed. */
const struct gpu_peaks *gpu_peaks_find(const char *device_name);
/* Row i of the table, NULL past the last. */
const struct gpu_peaks *gpu_peaks_at(int i);
/* The peak TFLOP/s of precision p on g. */
double gpu_peaks_tflops(const struct gpu_peaks *g, enum precision p);

/* Model FLOPs per image of one training step: forward MACs x 2 FLOPs x 3 (forward,
 * data gradient, weight gradient), as MFU is usually counted. */
static inline double mfu_train_flops_per_image(double fwd_macs_per_image)
{
	return fwd_macs_per_image * 2.0 * 3.0;
}

/* What a training rate comes to. Unknown values are negative. */
struct mfu {
	double flops_per_image; /* model FLOPs of training, per image */
	double tflops;          /* achieved: flops_per_image x img/s / 1e12 */
	double peak_tflops;     /* of all the GPUs used, for the precision; < 0 unknown */
	double mfu;             /* tflops / peak_tflops, a fraction; < 0 unknown */
	double energy_j_per_image, power_w; /* from NVML's energy counter; < 0 unknown */
	const char *gpu_label;  /* the peaks row, NULL when unknown */
};

/* The figures for img_s images per second (all gpus together) of a model with
 * fwd_macs_per_image, trained in precision p on gpus GPUs named device_name (NULL or
 * on_gpu 0: the CPU backend, no MFU). */
void mfu_compute(struct mfu *m, double fwd_macs_per_image, double img_s, enum precision p,
		 int on_gpu, const char *device_name, int gpus);
/* Energy: energy_j spent over seconds while images were trained (all three > 0, else
 * the energy stays unknown). */
void mfu_set_energy(struct mfu *m, double energy_j, double seconds, double images);
/* Set "flops_per_image", "tflops", and where known "mfu", "peak_tflops",
 * "peak_source", "energy_j_per_image", "power_w" on obj. */
int mfu_json_set(json_t *obj, const struct mfu *m);
/* The same figures read back from a result object (absent keys: unknown). */
void mfu_from_json(struct mfu *m, const json_t *obj);
/* "14.2%" or "unknown" (on the GPU, peak unknown) or "-" (no MFU: CPU), for tables. */
const char *mfu_pct_str(const struct mfu *m, int on_gpu, char *buf, size_t cap);
/* "1.23" J/image or "-". */
const char *mfu_energy_str(const struct mfu *m, char *buf, size_t cap);

#endif
