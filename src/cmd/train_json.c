/* The JSON of training results, built where the trainer's structs and the report
 * layer's result helpers meet (train/ and report/ are siblings and include neither
 * the other): the run's measurements, the GPU it ran on, and this process's device
 * memory as NVML sees it. */
#include "cmd/train_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "gpu/devinfo.h"
#include "gpu/nvml.h"
#ifdef GP_HAVE_CUDA
#include "ops/cuda/device.h"
#endif
#include "report/result.h"

/* Per-epoch summaries as "history" (the keys the PyTorch side of the time-to-accuracy
 * recipe writes too; val_* null for epochs not validated), with "best_val_top1" and
 * "final_val_top1" (null without validation), and the validation set's size. */
static int train_history_json(json_t *j, const struct train_result *r)
{
	json_t *h = json_array();
	double best_v = NAN, final_v = NAN;
	int validated = 0;
	if (!h)
		return gp_error(GP_ENOMEM, "out of memory writing the history");
	for (int i = 0; i < r->n_history; i++) {
		const struct train_epoch_summary *e = &r->history[i];
		json_t *v = e->has_val ? NULL : json_null();
		json_t *row = json_pack("{s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			"epoch", e->epoch, "step", (json_int_t)e->step, "time_s", result_real(e->time_s),
			"lr", result_real(e->lr), "train_loss", result_real(e->train_loss),
			"train_top1", result_real(e->train_top1),
			"val_loss", v ? json_incref(v) : result_real(e->val_loss),
			"val_top1", v ? json_incref(v) : result_real(e->val_top1),
			"val_top5", v ? json_incref(v) : result_real(e->val_top5),
			"val_img_s", v ? json_incref(v) : result_real(e->val_img_s),
			"img_s", result_real(e->img_s), "data_wait_pct", result_real(e->data_wait_pct));
		if (!row || json_array_append_new(h, row) < 0) {
			json_decref(h);
			return gp_error(GP_ENOMEM, "out of memory writing the history");
		}
		if (e->has_val) {
			final_v = e->val_top1;
			best_v = e->val_top1 > best_v || isnan(best_v) ? e->val_top1 : best_v;
			validated = 1;
		}
	}
	json_object_set_new(j, "history", h);
	json_object_set_new(j, "best_val_top1", validated ? result_real(best_v) : json_null());
	json_object_set_new(j, "final_val_top1", validated ? result_real(final_v) : json_null());
	json_object_set_new(j, "val_images", r->val_images ? json_integer(r->val_images) : json_null());
	return 0;
}

json_t *train_result_json(const struct train_opts *o, const struct train_result *r)
{
	json_t *mem = json_object();
	for (int c = 0; c < MEM_NCAT; c++)
		json_object_set_new(mem, mem_cat_name(c), json_integer((json_int_t)r->mem.peak_bytes[c]));
	json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:I, s:I}",
		"model", o->model, "device", train_device_name(o->backend),
		"precision", train_precision_name(o->precision), "batch", o->batch, "steps", r->steps,
		"ms_per_step", result_real(r->ms_per_step), "img_s", result_real(r->img_s),
		"total_s", result_real(r->total_s),
		"first_loss", result_real(r->first_loss), "last_loss", result_real(r->last_loss),
		"nonfinite_loss_step", r->nonfinite_step ? json_integer(r->nonfinite_step) : json_null(),
		"params", (json_int_t)r->params,
		"peak_bytes_by_category", mem, "peak_bytes", (json_int_t)r->mem.total_peak_bytes,
		"predicted_peak_bytes", (json_int_t)r->plan.total_bytes);
	if (j && r->steps)
		json_object_set_new(j, "last_lr", result_real(r->last_lr));
	/* a run stopped by SIGINT or SIGTERM holds what it did; a resumed one says where
	 * its checkpoint's run had got to (its steps and log count from the start) */
	if (j)
		json_object_set_new(j, "interrupted", json_boolean(r->interrupted));
	if (j && o->resume)
		json_object_set_new(j, "resumed", json_pack("{s:s, s:i, s:i}", "from", o->resume, "step",
							    r->resumed_step, "epoch", r->resumed_epoch));
	if (j && r->log) {
		json_t *lg = json_array();
		for (int i = 0; lg && i < r->n_log; i++)
			json_array_append_new(lg, json_pack("{s:i, s:o, s:o, s:o}", "step", r->log[i].step,
							    "loss", result_real(r->log[i].loss),
							    "accuracy", result_real(r->log[i].accuracy),
							    "lr", result_real(r->log[i].lr)));
		json_object_set_new(j, "log", lg ? lg : json_null());
	}
	if (j && r->history && train_history_json(j, r) < 0) {
		json_decref(j);
		j = NULL;
	}
	if (j && o->backend == BACKEND_CUDA)
		json_object_set_new(j, "layout", json_string(train_layout_name(
			o->layout == LAYOUT_NHWC || (o->layout == LAYOUT_AUTO && precision_is_amp(o->precision))
			? LAYOUT_NHWC : LAYOUT_NCHW)));
	/* Data parallel: the ranks, each one's step time and data wait, the slowest. */
	if (j && r->world > 1) {
		json_t *ms = json_array(), *dw = json_array();
		for (int k = 0; k < r->world; k++) {
			json_array_append_new(ms, result_real(r->rank_ms_per_step[k]));
			json_array_append_new(dw, result_real(r->rank_data_wait_ms[k]));
		}
		json_t *d = json_pack("{s:i, s:o, s:b, s:o, s:o, s:i, s:i}", "world", r->world,
			"transport", result_string(r->transport), "sync_bn", o->sync_bn,
			"rank_ms_per_step", ms, "rank_data_wait_ms", dw, "slowest_rank", r->slowest_rank,
			"global_batch", o->batch * r->world);
		json_t *per = result_real(r->img_s_per_rank);
		if (d) {
			json_object_set_new(d, "allreduce_ms", result_real(r->allreduce_ms));
			json_object_set_new(d, "grad_buckets", json_integer(r->buckets));
			json_object_set_new(d, "grad_bytes", json_integer((json_int_t)r->params * 4));
		}
		if (!d || !per || json_object_set_new(d, "img_s_per_rank", per) < 0 ||
		    json_object_update(j, d) < 0) {
			json_decref(j);
			j = NULL;
		}
		json_decref(d);
	}
	/* A run on a dataset also says where its data came from and what it cost. */
	if (j && train_uses_dataset(o)) {
		json_t *d = json_pack("{s:o, s:i, s:i, s:i, s:o, s:o, s:o, s:I, s:s, s:o, s:o}",
			"data", result_string(o->data),
			"classes", r->classes, "workers", o->workers, "batches_per_epoch", r->batches_per_epoch,
			"data_wait_ms", result_real(r->data_wait_ms), "copy_ms", result_real(r->copy_ms),
			"data_wait_pct", result_real(r->data_wait_pct),
			"skipped_corrupt", (json_int_t)r->skipped_corrupt,
			"decode", r->decode_gpu ? "gpu" : "cpu",
			"cpu_cores", result_real(r->cpu.proc_cores),
			"machine_cpu_pct", r->cpu.machine_pct >= 0 ? result_real(r->cpu.machine_pct)
								   : json_null());
		if (!d || json_object_update(j, d) < 0) {
			json_decref(j);
			j = NULL;
		}
		json_decref(d);
	}
	return j;
}

json_t *train_recipe_json(const struct train_opts *o)
{
	const struct sgd_args *a = &o->sgd;
	const struct lr_schedule_cfg *c = &o->schedule;
	json_t *j = json_pack("{s:s, s:o, s:s, s:i, s:o, s:o, s:i, s:o, s:o}",
		"optimizer", train_optimizer_name_at(a->kind), "lr", result_real(a->lr),
		"lr_schedule", lr_schedule_name_at(c->kind), "warmup_epochs", c->warmup_epochs,
		"warmup_factor", c->warmup_epochs ? result_real(c->warmup_factor > 0 ? c->warmup_factor : 0.01) : json_null(),
		"weight_decay", result_real(a->weight_decay), "grad_accum", o->grad_accum > 1 ? o->grad_accum : 1,
		"label_smoothing", result_real(o->label_smoothing),
		"clip_grad_norm", a->clip_norm > 0 ? result_real(a->clip_norm) : json_null());
	if (!j)
		return NULL;
	if (c->kind == LR_STEP) {
		json_object_set_new(j, "lr_step", json_integer(c->step_epochs));
		json_object_set_new(j, "lr_gamma", result_real(c->gamma > 0 ? c->gamma : 0.1));
	}
	if (a->kind == OPTIM_ADAMW) {
		json_object_set_new(j, "betas", json_pack("[o, o]", result_real(a->beta1), result_real(a->beta2)));
		json_object_set_new(j, "eps", result_real(a->eps));
	} else {
		json_object_set_new(j, "momentum", result_real(a->momentum));
		json_object_set_new(j, "nesterov", json_boolean(a->nesterov));
	}
	return j;
}

int train_process_gpu_mem(size_t *bytes, int *dev)
{
	int n = 0, found = -1;
	*bytes = 0;
	GP_TRY(nvml_device_count(&n));
	for (int d = 0; d < n; d++) {
		size_t b = 0;
		int rc = nvml_process_mem_bytes(d, (unsigned)getpid(), &b);
		if (rc == GP_ENOTFOUND)
			continue;
		if (rc < 0)
			return rc;
		*bytes += b;
		if (found < 0)
			found = d;
	}
	if (found < 0)
		return gp_error(GP_ENOTFOUND, "this process has no context on any of %d GPUs", n);
	if (dev)
		*dev = found;
	return 0;
}

/* Library versions as "13.0" and "9.10.2", for the result's gpu object. */
static void gpu_json_add_versions(json_t *gpu)
{
#ifdef GP_HAVE_CUDA
	struct cuda_versions v;
	char buf[32];
	if (cuda_versions_get(&v) < 0) {
		gp_error_clear();
		return;
	}
	snprintf(buf, sizeof(buf), "%d.%d", v.runtime / 1000, v.runtime % 1000 / 10);
	json_object_set_new(gpu, "cuda_runtime_version", json_string(buf));
	snprintf(buf, sizeof(buf), "%zu.%zu.%zu", v.cudnn / 10000, v.cudnn % 10000 / 100,
		 v.cudnn % 100);
	json_object_set_new(gpu, "cudnn_version", json_string(buf));
#else
	(void)gpu;
#endif
}

json_t *train_decode_probe_json(const struct train_result *r)
{
	const struct decode_probe *p = &r->decode_probe;
	if (!r->decode_probed)
		return json_null();
	return json_pack("{s:o, s:o, s:i, s:o}",
			 "gpu_img_s", p->note[0] ? json_null() : result_real(p->gpu_img_s),
			 "cpu_img_s", result_real(p->cpu_img_s), "cpu_workers", p->cpu_workers,
			 "gpu_note", p->note[0] ? json_string(p->note) : json_null());
}

json_t *train_gpu_json(enum backend_kind backend, int dev)
{
	if (backend != BACKEND_CUDA)
		return NULL;
	struct nvml_static_info info;
	json_t *gpu = NULL;
	if (nvml_static_info(dev, &info) == 0) {
		gpu = result_gpu_from_nvml(&info);
	} else {
		struct gp_devinfo d;
		gp_error_clear();
		devinfo_query(&d);
		if (d.gpu_count > 0)
			gpu = json_pack("{s:s, s:o}", "name", d.gpu_name, "memory_mib",
					result_real(d.mem_total_bytes / GP_MIB));
	}
	if (gpu)
		gpu_json_add_versions(gpu);
	return gpu;
}

void train_energy_start(struct train_energy *e, enum backend_kind backend, int dev)
{
	memset(e, 0, sizeof(*e));
	e->dev = dev;
	if (backend != BACKEND_CUDA)
		return;
	e->open = nvml_open() == 0;
	if (!e->open)
		gp_error_clear();
}

/* The NVML index is looked up once the run holds a context (NVML and CUDA may number
 * devices differently); a failed reading leaves the energy unknown, never the run
 * failed. */
int train_energy_timed(void *user, int begin)
{
	struct train_energy *e = user;
	unsigned long long mj = 0;
	if (!e->open)
		return 0;
	if (begin) {
		size_t bytes;
		int dev;
		e->started = 0;
		if (train_process_gpu_mem(&bytes, &dev) == 0)
			e->dev = dev;
		gp_error_clear();
		if (nvml_energy_mj(e->dev, &e->mj0) < 0) {
			gp_error_clear();
			return 0;
		}
		e->t0 = gp_now_s();
		e->started = 1;
		return 0;
	}
	if (!e->started || nvml_energy_mj(e->dev, &mj) < 0 || mj < e->mj0) {
		gp_error_clear();
		return 0;
	}
	e->energy_j = (mj - e->mj0) / 1e3;
	e->seconds = gp_now_s() - e->t0;
	return 0;
}

void train_energy_stop(struct train_energy *e)
{
	if (e->open)
		nvml_close();
	e->open = 0;
}

void train_mfu(const struct train_opts *o, const struct train_result *r, const json_t *gpu,
	       struct mfu *m)
{
	int world = r->world > 0 ? r->world : 1, k = o->grad_accum > 1 ? o->grad_accum : 1;
	const char *name = json_string_value(json_object_get(gpu, "name"));
	mfu_compute(m, r->fwd_macs_per_image, r->img_s, o->precision, o->backend == BACKEND_CUDA,
		    name, world);
	mfu_set_energy(m, r->energy_j, r->energy_s, (double)o->batch * k * r->timed_steps);
}

void train_mfu_print(FILE *f, const struct mfu *m, enum precision p, int on_gpu)
{
	fprintf(f, "model FLOPs %.2f G/image (training), %.2f TFLOP/s", m->flops_per_image / 1e9,
		m->tflops);
	if (m->mfu >= 0)
		fprintf(f, ", MFU %.1f%% of %s's dense %s peak %.1f TFLOP/s", 100 * m->mfu,
			m->gpu_label, train_precision_name(p), m->peak_tflops);
	else if (on_gpu)
		fprintf(f, ", MFU unknown (no peaks for this GPU in src/report/mfu.c)");
	if (m->energy_j_per_image >= 0)
		fprintf(f, "; %.3f J/image at %.0f W", m->energy_j_per_image, m->power_w);
	fprintf(f, "\n");
}
