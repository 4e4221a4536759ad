/* The peaks table and the MFU arithmetic (report/mfu.h). */
#include "report/mfu.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "report/result.h"

/* Dense peaks from NVIDIA's datasheets, which print tensor-core rates with 2:4
 * sparsity ("*"): the dense rate is half of that. Sources:
 * - H100 SXM5 / PCIe / NVL: "NVIDIA H100 Tensor Core GPU" datasheet (FP32 67 / 51 / 60
 *   TFLOPS; TF32 989* / 756* / 835*; BF16 and FP16 1,979* / 1,513* / 1,671*; 3.35 /
 *   2.0 / 3.9 TB/s).
 * - H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" datasheet (FP32 67 / 60; TF32 989* /
 *   835*; BF16, FP16 1,979* / 1,671*; 4.8 TB/s both).
 * - A100: "NVIDIA A100 Tensor Core GPU" datasheet (FP32 19.5; TF32 156, 312*; BF16,
 *   FP16 312, 624*; 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s, 40GB 1,555 GB/s).
 * - L40S: "NVIDIA L40S" datasheet (FP32 91.6; TF32 183, 366*; BF16, FP16 362.05, 733*;
 *   864 GB/s).
 * - RTX 4090: "NVIDIA Ada GPU Architecture" whitepaper, appendix A (FP32 82.6; TF32
 *   82.6; FP16 and BF16 with FP32 accumulate 165.2, which GeForce runs at half the FP16
 *   accumulate rate; 1,008 GB/s).
 * Names are what cudaGetDeviceProperties and nvmlDeviceGetName report. */
static const struct gpu_peaks peaks_table[] = {
	{ "H100 SXM5 80GB", { "NVIDIA H100 80GB HBM3" }, 67.0, 494.5, 989.5, 989.5, 3350 },
	{ "H100 PCIe", { "NVIDIA H100 PCIe" }, 51.0, 378.0, 756.5, 756.5, 2000 },
	{ "H100 NVL", { "NVIDIA H100 NVL" }, 60.0, 417.5, 835.5, 835.5, 3900 },
	{ "H200 SXM 141GB", { "NVIDIA H200" }, 67.0, 494.5, 989.5, 989.5, 4800 },
	{ "H200 NVL", { "NVIDIA H200 NVL" }, 60.0, 417.5, 835.5, 835.5, 4800 },
	{ "A100 SXM4 80GB", { "NVIDIA A100-SXM4-80GB" }, 19.5, 156.0, 312.0, 312.0, 2039 },
	{ "A100 SXM4 40GB", { "NVIDIA A100-SXM4-40GB" }, 19.5, 156.0, 312.0, 312.0, 1555 },
	{ "A100 PCIe 80GB", { "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-80GB" }, 19.5, 156.0,
	  312.0, 312.0, 1935 },
	{ "A100 PCIe 40GB", { "NVIDIA A100-PCIE-40GB" }, 19.5, 156.0, 312.0, 312.0, 1555 },
	{ "L40S", { "NVIDIA L40S" }, 91.6, 183.0, 362.05, 362.05, 864 },
	{ "RTX 4090", { "NVIDIA GeForce RTX 4090" }, 82.6, 82.6, 165.2, 165.2, 1008 },
};

#define N_PEAKS (sizeof(peaks_table) / sizeof(peaks_table[0]))

const struct gpu_peaks *gpu_peaks_at(int i)
{
	return i >= 0 && (size_t)i < N_PEAKS ? &peaks_table[i] : NULL;
}

/* Equal ignoring case, blanks around, and a leading "NVIDIA " on either side (some
 * tools drop the vendor); anything more (a MIG slice's suffix) is another device. */
static int name_matches(const char *a, const char *b)
{
	while (isspace((unsigned char)*a))
		a++;
	if (!strncasecmp(a, "NVIDIA ", 7))
		a += 7;
	if (!strncasecmp(b, "NVIDIA ", 7))
		b += 7;
	size_t la = strlen(a), lb = strlen(b);
	while (la > 0 && isspace((unsigned char)a[la - 1]))
		la--;
	return la == lb && !strncasecmp(a, b, lb);
}

const struct gpu_peaks *gpu_peaks_find(const char *device_name)
{
	if (!device_name)
		return NULL;
	for (size_t i = 0; i < N_PEAKS; i++)
		for (int k = 0; k < 4 && peaks_table[i].names[k]; k++)
			if (name_matches(device_name, peaks_table[i].names[k]))
				return &peaks_table[i];
	return NULL;
}

double gpu_peaks_tflops(const struct gpu_peaks *g, enum precision p)
{
	switch (p) {
	case PREC_FP32: return g->fp32_tflops;
	case PREC_TF32: return g->tf32_tflops;
	case PREC_FP16: return g->fp16_tflops;
	case PREC_BF16: return g->bf16_tflops;
	}
	return -1;
}

void mfu_compute(struct mfu *m, double fwd_macs_per_image, double img_s, enum precision p,
		 int on_gpu, const char *device_name, int gpus)
{
	*m = (struct mfu){ .peak_tflops = -1, .mfu = -1, .energy_j_per_image = -1, .power_w = -1 };
	m->flops_per_image = mfu_train_flops_per_image(fwd_macs_per_image);
	m->tflops = m->flops_per_image * img_s / 1e12;
	const struct gpu_peaks *g = on_gpu ? gpu_peaks_find(device_name) : NULL;
	if (!g || gpus < 1)
		return;
	m->gpu_label = g->label;
	m->peak_tflops = gpu_peaks_tflops(g, p) * gpus;
	if (m->peak_tflops > 0 && img_s > 0)
		m->mfu = m->tflops / m->peak_tflops;
}

void mfu_set_energy(struct mfu *m, double energy_j, double seconds, double images)
{
	if (!(energy_j > 0 && seconds > 0 && images > 0))
		return;
	m->energy_j_per_image = energy_j / images;
	m->power_w = energy_j / seconds;
}

int mfu_json_set(json_t *obj, const struct mfu *m)
{
	int rc = 0;
	if (m->flops_per_image >= 0) {
		rc |= json_object_set_new(obj, "flops_per_image", result_real(m->flops_per_image));
		rc |= json_object_set_new(obj, "tflops", result_real(m->tflops));
	}
	if (m->mfu >= 0) {
		rc |= json_object_set_new(obj, "mfu", result_real(m->mfu));
		rc |= json_object_set_new(obj, "peak_tflops", result_real(m->peak_tflops));
		rc |= json_object_set_new(obj, "peak_source", json_string(m->gpu_label));
	}
	if (m->energy_j_per_image >= 0) {
		rc |= json_object_set_new(obj, "energy_j_per_image", result_real(m->energy_j_per_image));
		rc |= json_object_set_new(obj, "power_w", result_real(m->power_w));
	}
	return rc ? gp_error(GP_ENOMEM, "no memory for the MFU figures") : 0;
}

static double num_or(const json_t *obj, const char *key, double unknown)
{
	const json_t *v = json_object_get(obj, key);
	return json_is_number(v) ? json_number_value(v) : unknown;
}

void mfu_from_json(struct mfu *m, const json_t *obj)
{
	*m = (struct mfu){ 0 };
	m->flops_per_image = num_or(obj, "flops_per_image", -1);
	m->tflops = num_or(obj, "tflops", -1);
	m->mfu = num_or(obj, "mfu", -1);
	m->peak_tflops = num_or(obj, "peak_tflops", -1);
	m->energy_j_per_image = num_or(obj, "energy_j_per_image", -1);
	m->power_w = num_or(obj, "power_w", -1);
	m->gpu_label = json_string_value(json_object_get(obj, "peak_source"));
}

const char *mfu_pct_str(const struct mfu *m, int on_gpu, char *buf, size_t cap)
{
	if (m->mfu >= 0)
		snprintf(buf, cap, "%.1f%%", 100 * m->mfu);
	else
		snprintf(buf, cap, "%s", on_gpu ? "unknown" : "-");
	return buf;
}

const char *mfu_energy_str(const struct mfu *m, char *buf, size_t cap)
{
	if (m->energy_j_per_image >= 0)
		snprintf(buf, cap, "%.3f", m->energy_j_per_image);
	else
		snprintf(buf, cap, "-");
	return buf;
}
