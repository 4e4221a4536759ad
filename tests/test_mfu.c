/* Model FLOPs utilization: the models' FLOP counts against torchvision's, the peaks
 * table looked up by the names real GPUs report, and the MFU and energy arithmetic. */
#include <jansson.h>
#include <string.h>

#include "cmd/train_scalars.h"
#include "core/error.h"
#include "nn/models.h"
#include "report/mfu.h"
#include "test.h"

static double model_macs(const char *name)
{
	struct model_opts o = model_defaults(name);
	o.size = 224;
	o.batch = 1;
	o.classes = 1000;
	struct net *net = NULL;
	int rc = model_build(name, &o, &net);
	CHECK_MSG(rc == 0, "model_build(%s): %s", name, gp_errmsg());
	if (rc < 0)
		return -1;
	double macs = net_total_macs(net);
	net_free(net);
	return macs;
}

/* torchvision's model cards give 4.09, 1.81 and 0.30 GFLOPS (which are GMACs of the
 * convolutions and linear layers, at 224x224): ours must round to the same, and the
 * exact counts are pinned so that a changed count shows. */
TEST(mfu_model_flops_match_torchvision)
{
	static const struct { const char *name; double macs, published_g; } want[] = {
		{ "resnet50", 4089184256.0, 4.09 },
		{ "resnet18", 1814073344.0, 1.81 },
		{ "mobilenet_v2", 300774272.0, 0.30 },
	};
	for (int i = 0; i < 3; i++) {
		double macs = model_macs(want[i].name);
		CHECK_NEAR(macs, want[i].macs, 0);
		CHECK_MSG(fabs(macs / 1e9 - want[i].published_g) <= 0.005, "%s: %.4f GMACs, torchvision %.2f",
			  want[i].name, macs / 1e9, want[i].published_g);
	}
	/* resnet50: 8.18 GFLOPs forward, 24.5 training per image */
	CHECK_NEAR(mfu_train_flops_per_image(4089184256.0), 24535105536.0, 0);
}

TEST(mfu_peaks_by_device_name)
{
	const struct gpu_peaks *g = gpu_peaks_find("NVIDIA H100 80GB HBM3");
	CHECK(g != NULL);
	if (g) {
		CHECK(!strcmp(g->label, "H100 SXM5 80GB"));
		CHECK_NEAR(gpu_peaks_tflops(g, PREC_FP32), 67.0, 0);
		CHECK_NEAR(gpu_peaks_tflops(g, PREC_TF32), 494.5, 0);
		CHECK_NEAR(gpu_peaks_tflops(g, PREC_FP16), 989.5, 0);
		CHECK_NEAR(gpu_peaks_tflops(g, PREC_BF16), 989.5, 0);
		CHECK_NEAR(g->mem_gb_s, 3350, 0);
	}
	g = gpu_peaks_find("NVIDIA H100 PCIe");
	CHECK(g && !strcmp(g->label, "H100 PCIe") && g->tf32_tflops == 378.0 && g->mem_gb_s == 2000);
	g = gpu_peaks_find("NVIDIA H200");
	CHECK(g && !strcmp(g->label, "H200 SXM 141GB") && g->bf16_tflops == 989.5 && g->mem_gb_s == 4800);
	/* the NVL card is another row, not the SXM one by prefix */
	g = gpu_peaks_find("NVIDIA H200 NVL");
	CHECK(g && !strcmp(g->label, "H200 NVL") && g->bf16_tflops == 835.5);
	g = gpu_peaks_find("NVIDIA A100-SXM4-80GB");
	CHECK(g && g->tf32_tflops == 156.0 && g->fp32_tflops == 19.5 && g->mem_gb_s == 2039);
	g = gpu_peaks_find("NVIDIA A100-SXM4-40GB");
	CHECK(g && g->mem_gb_s == 1555);
	g = gpu_peaks_find("NVIDIA A100 80GB PCIe");
	CHECK(g && g->mem_gb_s == 1935);
	g = gpu_peaks_find("NVIDIA L40S");
	CHECK(g && g->fp16_tflops == 362.05 && g->mem_gb_s == 864);
	g = gpu_peaks_find("NVIDIA GeForce RTX 4090");
	CHECK(g && g->bf16_tflops == 165.2 && g->tf32_tflops == 82.6);
	/* case, blanks and a missing vendor prefix do not matter */
	CHECK(gpu_peaks_find("  nvidia h100 80gb hbm3 ") == gpu_peaks_find("NVIDIA H100 80GB HBM3"));
	CHECK(gpu_peaks_find("H100 PCIe") == gpu_peaks_find("NVIDIA H100 PCIe"));
	/* unknown: a MIG slice (a fraction of the peak), another GPU, nothing */
	CHECK(gpu_peaks_find("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == NULL);
	CHECK(gpu_peaks_find("Fake GPU B") == NULL);
	CHECK(gpu_peaks_find("NVIDIA H100") == NULL);
	CHECK(gpu_peaks_find("") == NULL);
	CHECK(gpu_peaks_find(NULL) == NULL);
	/* every row: tensor rates at least the CUDA cores', 16-bit at least TF32's, a
	 * bandwidth, and a unique name */
	for (int i = 0; gpu_peaks_at(i); i++) {
		const struct gpu_peaks *r = gpu_peaks_at(i);
		CHECK_MSG(r->fp32_tflops > 0 && r->tf32_tflops >= r->fp32_tflops &&
				  r->fp16_tflops >= r->tf32_tflops && r->bf16_tflops == r->fp16_tflops &&
				  r->mem_gb_s > 0, "row %s", r->label);
		CHECK_MSG(gpu_peaks_find(r->names[0]) == r, "row %s is shadowed", r->label);
	}
}

TEST(mfu_arithmetic)
{
	struct mfu m;
	char buf[32];
	/* issue 24's figure: resnet50 bf16 at 5,802 img/s on the H100 is 14% MFU */
	mfu_compute(&m, 4089184256.0, 5802, PREC_BF16, 1, "NVIDIA H100 80GB HBM3", 1);
	CHECK_NEAR(m.flops_per_image, 24535105536.0, 0);
	CHECK_NEAR(m.tflops, 24535105536.0 * 5802 / 1e12, 1e-9);
	CHECK_NEAR(m.tflops, 142.35, 0.01);
	CHECK_NEAR(m.peak_tflops, 989.5, 0);
	CHECK_NEAR(m.mfu, m.tflops / 989.5, 1e-12);
	CHECK_NEAR(m.mfu, 0.1439, 0.0001);
	CHECK(!strcmp(mfu_pct_str(&m, 1, buf, sizeof(buf)), "14.4%"));
	/* fp32 counts against the CUDA cores, tf32 against the tensor cores */
	mfu_compute(&m, 4089184256.0, 1152, PREC_FP32, 1, "NVIDIA H100 80GB HBM3", 1);
	CHECK_NEAR(m.mfu, 24535105536.0 * 1152 / 1e12 / 67.0, 1e-12);
	mfu_compute(&m, 4089184256.0, 2606, PREC_TF32, 1, "NVIDIA H100 80GB HBM3", 1);
	CHECK_NEAR(m.mfu, 24535105536.0 * 2606 / 1e12 / 494.5, 1e-12);
	/* 4 GPUs: img/s of all of them against 4 peaks */
	mfu_compute(&m, 4089184256.0, 4 * 5802, PREC_BF16, 1, "NVIDIA H100 80GB HBM3", 4);
	CHECK_NEAR(m.peak_tflops, 4 * 989.5, 0);
	CHECK_NEAR(m.mfu, 0.1439, 0.0001);
	/* an unknown GPU: TFLOP/s, but MFU unknown */
	mfu_compute(&m, 4089184256.0, 5802, PREC_BF16, 1, "NVIDIA B200", 1);
	CHECK_NEAR(m.tflops, 142.35, 0.01);
	CHECK(m.mfu < 0 && m.peak_tflops < 0 && m.gpu_label == NULL);
	CHECK(!strcmp(mfu_pct_str(&m, 1, buf, sizeof(buf)), "unknown"));
	/* the CPU backend: no MFU even on a machine with a known GPU */
	mfu_compute(&m, 4089184256.0, 20, PREC_FP32, 0, "NVIDIA H100 80GB HBM3", 1);
	CHECK(m.mfu < 0);
	CHECK(!strcmp(mfu_pct_str(&m, 0, buf, sizeof(buf)), "-"));
}

TEST(mfu_energy_and_json)
{
	struct mfu m, back;
	char buf[32];
	mfu_compute(&m, 4089184256.0, 5802, PREC_BF16, 1, "NVIDIA H100 80GB HBM3", 1);
	CHECK(m.energy_j_per_image < 0 && m.power_w < 0);
	CHECK(!strcmp(mfu_energy_str(&m, buf, sizeof(buf)), "-"));
	mfu_set_energy(&m, 0, 2.0, 1000); /* no counter read: stays unknown */
	CHECK(m.energy_j_per_image < 0);
	mfu_set_energy(&m, 1300.0, 2.0, 11604); /* 650 W for 2 s over 11,604 images */
	CHECK_NEAR(m.energy_j_per_image, 1300.0 / 11604, 1e-15);
	CHECK_NEAR(m.power_w, 650.0, 1e-12);
	CHECK(!strcmp(mfu_energy_str(&m, buf, sizeof(buf)), "0.112"));

	json_t *o = json_object();
	CHECK_EQ_INT(mfu_json_set(o, &m), 0);
	CHECK_NEAR(json_number_value(json_object_get(o, "flops_per_image")), 24535105536.0, 0);
	CHECK_NEAR(json_number_value(json_object_get(o, "tflops")), m.tflops, 0);
	CHECK_NEAR(json_number_value(json_object_get(o, "mfu")), m.mfu, 0);
	CHECK_NEAR(json_number_value(json_object_get(o, "peak_tflops")), 989.5, 0);
	CHECK(!strcmp(json_string_value(json_object_get(o, "peak_source")), "H100 SXM5 80GB"));
	CHECK_NEAR(json_number_value(json_object_get(o, "energy_j_per_image")), 1300.0 / 11604, 0);
	CHECK_NEAR(json_number_value(json_object_get(o, "power_w")), 650.0, 0);
	mfu_from_json(&back, o);
	CHECK_NEAR(back.mfu, m.mfu, 0);
	CHECK_NEAR(back.energy_j_per_image, m.energy_j_per_image, 0);
	json_decref(o);

	/* unknown figures are left out, not written as zeros */
	mfu_compute(&m, 1e9, 100, PREC_FP32, 0, NULL, 1);
	o = json_object();
	CHECK_EQ_INT(mfu_json_set(o, &m), 0);
	CHECK(json_object_get(o, "tflops") != NULL);
	CHECK(json_object_get(o, "mfu") == NULL && json_object_get(o, "peak_tflops") == NULL);
	CHECK(json_object_get(o, "energy_j_per_image") == NULL);
	mfu_from_json(&back, o);
	CHECK(back.mfu < 0 && back.energy_j_per_image < 0);
	json_decref(o);
}

/* train's summary line and result on the CPU: FLOPs and TFLOP/s, no MFU, no energy;
 * info prints FLOPs beside MACs. */
TEST(mfu_train_and_info_commands_cpu)
{
	char cmd[1200], out[16384], path[700];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s train --model simple_cnn --device cpu --batch 4 --steps 3 "
		 "--out '%s/t' 2>&1", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	CHECK_MSG(strstr(out, "model FLOPs 0.07 G/image (training), ") != NULL, "%s", out);
	CHECK_MSG(strstr(out, "MFU") == NULL, "an MFU on the CPU: %s", out);
	snprintf(path, sizeof(path), "%s/t/train.json", dir);
	json_error_t err;
	json_t *res = json_load_file(path, 0, &err);
	CHECK(res != NULL);
	json_t *m = json_object_get(res, "measurements");
	double img_s = json_number_value(json_object_get(m, "img_s"));
	CHECK_NEAR(json_number_value(json_object_get(m, "flops_per_image")), 66613248.0, 0);
	CHECK_NEAR(json_number_value(json_object_get(m, "tflops")), 66613248.0 * img_s / 1e12,
		   1e-8 * 66613248.0 * img_s / 1e12);
	CHECK(json_object_get(m, "mfu") == NULL && json_object_get(m, "energy_j_per_image") == NULL);
	json_decref(res);

	static char info[65536]; /* resnet50's layer table is long */
	snprintf(cmd, sizeof(cmd), "%s info --model resnet50", test_bin());
	CHECK_EQ_INT(test_run(cmd, info, sizeof(info)), 0);
	CHECK_MSG(strstr(info, "FLOPs per image       8.178 G forward (2 per MAC), 24.535 G training") != NULL,
		  "%s", info);
}

static int timed_calls[2];

static int count_timed(void *user, int begin)
{
	(void)user;
	timed_calls[begin ? 1 : 0]++;
	return 0;
}

/* train's scalar writers wrap the energy meter's observer: its timed callback must
 * come through, and nothing that would turn off the graph-replayed step. */
TEST(mfu_scalars_observer_passes_timed_on)
{
	struct train_scalars s;
	memset(&s, 0, sizeof(s));
	struct train_observer inner = { .timed = count_timed };
	const struct train_observer *o = train_scalars_observer(&s, &inner);
	CHECK(o->timed != NULL);
	CHECK(o->step_begin == NULL && o->stage == NULL && o->step_end == NULL);
	if (o->timed) {
		CHECK_EQ_INT(o->timed(o->user, 1), 0);
		CHECK_EQ_INT(o->timed(o->user, 0), 0);
	}
	CHECK_EQ_INT(timed_calls[1], 1);
	CHECK_EQ_INT(timed_calls[0], 1);
	o = train_scalars_observer(&s, NULL);
	CHECK(o->timed == NULL);
}
