/* The `--decode auto` probe (decode_probe.h). */
#include "data/decode_probe.h"

#include <stdio.h>

#include "core/error.h"
#include "core/timeutil.h"

/* The CPU probe reads batches this far past the GPU probe's, so that neither path
 * reads files the other has just brought into the page cache: the GPU probe takes at
 * most 1 + DECODE_PROBE_BATCHES batches and its threads read two more ahead. */
#define PROBE_CPU_OFFSET_BATCHES (2 * (1 + DECODE_PROBE_BATCHES))

/* One path as the timing loop sees it: the next batch's image count, in order. */
struct probe_path {
	void *l;
	int (*next)(void *l, int *n);
	int round; /* batches made side by side: one per CPU worker, one on the GPU path */
};

static int probe_cpu_next(void *l, int *n)
{
	struct batch *b;
	GP_TRY(loader_next(l, &b));
	*n = b->n;
	loader_release(l, b);
	return 0;
}

static int probe_gpu_next(void *l, int *n)
{
	struct gpu_batch b;
	GP_TRY(gpu_loader_next(l, &b));
	*n = b.n;
	return 0;
}

static int probe_round(struct probe_path *p, long *images)
{
	for (int i = 0; i < p->round; i++) {
		int n;
		GP_TRY(p->next(p->l, &n));
		*images += n;
	}
	return 0;
}

/* img/s in steady state. The first round is the warm-up (threads, nvJPEG's first
 * allocations, a full ring): W workers that start together hand over W batches at
 * about the same time, so only whole rounds after it give the rate. Past cap_s the
 * loop stops at the end of a round; a warm-up that alone passes it gives the rate of
 * that round, start-up included (a path that slow loses anyway). */
static int probe_time(struct probe_path *p, double cap_s, double *img_s)
{
	long images = 0;
	double t0 = gp_now_s();
	GP_TRY(probe_round(p, &images));
	double tw = gp_now_s(), t = tw;
	if (tw - t0 >= cap_s) {
		*img_s = images / (tw - t0 > 1e-9 ? tw - t0 : 1e-9);
		return 0;
	}
	int rounds = (DECODE_PROBE_BATCHES + p->round - 1) / p->round;
	images = 0;
	for (int r = 0; r < rounds && (r == 0 || t - t0 < cap_s); r++) {
		GP_TRY(probe_round(p, &images));
		t = gp_now_s();
	}
	*img_s = images / (t - tw > 1e-9 ? t - tw : 1e-9);
	return 0;
}

/* The GPU side: any failure is a reason to stay on the CPU, kept in out->note. */
static void probe_gpu(struct dataset *ds, const struct decode_probe_config *cfg,
		      const struct gpu_loader_decoder *dec, double cap_s, struct decode_probe *out)
{
	struct gpu_loader *gl = NULL;
	int rc = dec ? gpu_loader_create_with(ds, &cfg->gpu, dec, 1, &gl)
		     : gpu_loader_create(ds, &cfg->gpu, &gl);
	if (rc == 0) {
		struct probe_path p = { gl, probe_gpu_next, 1 };
		rc = probe_time(&p, cap_s, &out->gpu_img_s);
	}
	if (rc < 0) {
		snprintf(out->note, sizeof(out->note), "%s", gp_errmsg());
		gp_error_clear();
		out->gpu_img_s = 0;
	}
	gpu_loader_destroy(gl);
}

static int probe_cpu(struct dataset *ds, const struct decode_probe_config *cfg, double cap_s,
		     struct decode_probe *out)
{
	struct loader_config lc = cfg->cpu;
	lc.start_batch += PROBE_CPU_OFFSET_BATCHES;
	struct loader *l;
	GP_TRY(loader_create(ds, &lc, &l));
	struct probe_path p = { l, probe_cpu_next, lc.workers > 1 ? lc.workers : 1 };
	int rc = probe_time(&p, cap_s, &out->cpu_img_s);
	loader_destroy(l);
	return rc;
}

int decode_probe_run_with(struct dataset *ds, const struct decode_probe_config *cfg,
			  const struct gpu_loader_decoder *dec, struct decode_probe *out)
{
	double cap_s = cfg->cap_s > 0 ? cfg->cap_s : DECODE_PROBE_CAP_S;
	*out = (struct decode_probe){ .cpu_workers = cfg->cpu.workers };
	probe_gpu(ds, cfg, dec, cap_s, out);
	GP_TRY(probe_cpu(ds, cfg, cap_s, out));
	out->use_gpu = !out->note[0] && out->gpu_img_s > out->cpu_img_s;
	return 0;
}

int decode_probe_run(struct dataset *ds, const struct decode_probe_config *cfg,
		     struct decode_probe *out)
{
	return decode_probe_run_with(ds, cfg, NULL, out);
}

void decode_probe_describe(const struct decode_probe *p, char *buf, size_t cap)
{
	char gpu[300];
	if (p->note[0])
		snprintf(gpu, sizeof(gpu), "gpu did not run (%s)", p->note);
	else
		snprintf(gpu, sizeof(gpu), "gpu %.0f img/s", p->gpu_img_s);
	snprintf(buf, cap, "decode auto: %s, cpu %.0f img/s (%d worker%s) -> %s", gpu,
		 p->cpu_img_s, p->cpu_workers, p->cpu_workers == 1 ? "" : "s",
		 p->use_gpu ? "gpu" : "cpu");
}
