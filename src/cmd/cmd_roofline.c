/* gpuperf roofline: where a step's time goes beyond what the GPU forces. It runs
 * `profile` (or reads a profile run with --from), takes the per-layer times of the
 * profile's op table by layer from its result.json, and sets each layer's forward and
 * backward against its roofline bound (report/roofline.h) on the GPU's peaks
 * (report/mfu.h). Reading the profile's result, not its analysis code, keeps this
 * command apart from how the analysis is computed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "gpu/devinfo.h"
#include "nn/models.h"
#include "nn/net.h"
#include "report/mfu.h"
#include "report/result.h"
#include "report/roofline.h"
#include "report/table.h"
#include "train/trainer.h"

/* What the roofline needs from a profile's result.json. */
struct profile_facts {
	const char *model, *precision, *device, *gpu;
	int batch, size, steps;
	int host_timed; /* no GPU work recorded: layer times are the CPU backend's */
	double step_ms; /* the mean profiled step */
	json_t *layers; /* analysis.op_layers (borrowed from res) */
};

static const char *str_or_empty(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

static int profile_facts_read(json_t *res, const char *path, struct profile_facts *p)
{
	json_t *set = json_object_get(res, "settings");
	json_t *a = json_object_get(json_object_get(res, "measurements"), "analysis");
	memset(p, 0, sizeof(*p));
	if (strcmp(str_or_empty(res, "command"), "profile"))
		return gp_error(GP_EFORMAT, "%s is not a `gpuperf profile` result", path);
	p->model = json_string_value(json_object_get(set, "model"));
	p->precision = json_string_value(json_object_get(set, "precision"));
	p->device = json_string_value(json_object_get(set, "device"));
	p->batch = (int)json_integer_value(json_object_get(set, "batch"));
	p->size = (int)json_integer_value(json_object_get(set, "size"));
	p->layers = json_object_get(a, "op_layers");
	p->steps = (int)json_array_size(json_object_get(a, "steps"));
	p->gpu = json_string_value(json_object_get(json_object_get(a, "meta"), "gpu"));
	p->host_timed = json_integer_value(json_object_get(a, "kernels")) == 0;
	p->step_ms = json_number_value(json_object_get(json_object_get(a, "mean_step"), "dur_ms"));
	if (!p->model || !p->precision || !p->device || p->batch < 1 || !json_is_array(p->layers) ||
	    p->steps < 1)
		return gp_error(GP_EFORMAT, "%s lacks the profile's settings or its op table by layer "
				"(run `gpuperf profile` first)", path);
	return 0;
}

/* Layer label's time per step from the op table by layer, -1 when it has no row. */
static double layer_ms(const struct profile_facts *p, const char *label)
{
	size_t i;
	json_t *r;
	json_array_foreach(p->layers, i, r) {
		if (strcmp(str_or_empty(r, "name"), label))
			continue;
		double ms = json_number_value(json_object_get(r, p->host_timed ? "cpu_total_ms" : "gpu_ms"));
		return ms / p->steps;
	}
	return -1;
}

/* The rows: each node's forward and, where a gradient flows, backward. Input and
 * flatten (a view) move nothing and are left out. */
static int roofline_rows(const struct net *net, const struct profile_facts *p, enum precision prec,
			 struct roofline_row *rows, int *n)
{
	double elem = precision_is_amp(prec) ? 2 : 4;
	char label[GP_NAME_MAX + 16], name[GP_NAME_MAX + 32];
	*n = 0;
	for (int i = 1; i < net->n_nodes; i++) {
		const struct node *nd = &net->nodes[i];
		if (nd->op == OP_FLATTEN)
			continue;
		int depthwise = nd->op == OP_CONV2D && nd->a.conv.groups > 1;
		int tensor = prec != PREC_FP32 && ((nd->op == OP_CONV2D && !depthwise) || nd->op == OP_LINEAR);
		net_node_label(net, i, label, sizeof(label));
		for (int bwd = 0; bwd < 2; bwd++) {
			if (bwd && !nd->needs_dx)
				continue;
			struct roofline_row *r = &rows[(*n)++];
			snprintf(r->op, sizeof(r->op), "%s %s", depthwise ? "dwconv2d" : op_name(nd->op),
				 bwd ? "backward" : "forward");
			snprintf(name, sizeof(name), bwd ? "%s.backward" : "%s", label);
			snprintf(r->layer, sizeof(r->layer), "%s", name);
			r->tensor = tensor;
			r->flops = node_flops(net, i, bwd);
			r->bytes = node_bytes(net, i, bwd, elem, elem);
			r->ms = layer_ms(p, name);
		}
	}
	return 0;
}

/* Run `profile` into dir/profile with the roofline's settings. */
static int run_profile(const char *model, const char *precision, const char *device, int batch,
		       int size, int steps, const char *dir, char *prof_dir, size_t cap)
{
	char b[16], s[16], st[16];
	snprintf(prof_dir, cap, "%s/profile", dir);
	snprintf(b, sizeof(b), "%d", batch);
	snprintf(s, sizeof(s), "%d", size);
	snprintf(st, sizeof(st), "%d", steps);
	char *argv[] = { "profile", "--model", (char *)model, "--precision", (char *)precision,
			 "--device", (char *)device, "--batch", b, "--steps", st, "--out", prof_dir,
			 "--overwrite", "--size", s, NULL };
	return cmd_profile(size ? 16 : 14, argv); /* without --size: the model's own */
}

int cmd_roofline(int argc, char **argv)
{
	const char *model = NULL, *precision = NULL, *device = NULL, *from = NULL, *gpu = NULL;
	const char *out = NULL;
	int batch = 0, size = 0, steps = 5, help = 0, overwrite = 0, csv = 0;
	struct opt opts[] = {
		OPT_MODEL(&model, "(resnet50)"),
		OPT_PRECISION(&precision, "(fp32; fp16/bf16: mixed precision)"),
		OPT_DEVICE(&device),
		OPT_BATCH(&batch, "batch size (64)"),
		OPT_SIZE(&size),
		OPT_STEPS(&steps, "profiled steps the layer times are averaged over (5)"),
		{ "from", OPT_PATH, &from, "a `gpuperf profile` run folder to read instead of profiling" },
		{ "gpu", OPT_STR, &gpu, "peaks of this GPU (a device name as nvidia-smi shows it, e.g. "
					"\"NVIDIA H100 80GB HBM3\") instead of the profiled one" },
		OPT_OUT(&out, "roofline.json, the profile run and roofline.csv", "roofline"),
		OPT_OVERWRITE(&overwrite, "roofline.json"),
		OPT_CSV(&csv, "the table"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf roofline [--model NAME] [--precision P] [--batch B] [--steps N] "
				"[--from PROFILE_DIR] [--gpu NAME] [--out DIR] [--csv]", opts);
		return 0;
	}
	if (from && (model || precision || device || batch || size))
		return gp_error(GP_EINVAL, "--from takes the model, precision, device, batch and size "
				"from the profile: leave those options out");
	if (gpu && !gpu_peaks_find(gpu)) {
		char known[1024] = "";
		size_t len = 0;
		for (int i = 0; gpu_peaks_at(i) && len < sizeof(known); i++)
			len += snprintf(known + len, sizeof(known) - len, "%s\"%s\"", i ? ", " : "",
					gpu_peaks_at(i)->names[0]);
		return gp_error(GP_EINVAL, "--gpu '%s' is not in the peaks table (src/report/mfu.c): "
				"known are %s", gpu, known);
	}
	char prof_dir[4200], path[4400], dir[3900];
	json_t *prof = NULL, *res = NULL;
	struct profile_facts p;
	enum precision prec;
	int rc;
	/* a profile to read is read before anything is written */
	if (from) {
		snprintf(path, sizeof(path), "%s/result.json", from);
		snprintf(prof_dir, sizeof(prof_dir), "%s", from);
		GP_TRY(result_read(path, &prof));
		if ((rc = profile_facts_read(prof, path, &p)) < 0 ||
		    (rc = train_parse_precision(p.precision, &prec)) < 0 ||
		    (rc = model_name_check(p.model)) < 0) {
			json_decref(prof);
			return rc;
		}
	} else {
		enum backend_kind be;
		GP_TRY(model_name_check(model ? model : "resnet50"));
		GP_TRY(train_pick_device(device, &be, 1));
		GP_TRY(train_parse_precision(precision ? precision : "fp32", &prec));
	}
	if ((rc = result_dir_prepare("roofline", "roofline", out, overwrite, dir, sizeof(dir))) < 0) {
		json_decref(prof);
		return rc;
	}
	if (!from) {
		rc = run_profile(model ? model : "resnet50", precision ? precision : "fp32",
				 device ? device : "auto", batch ? batch : 64, size, steps, dir, prof_dir,
				 sizeof(prof_dir));
		if (rc < 0)
			return gp_error(rc, "roofline: the profile failed: %s", gp_errmsg());
		snprintf(path, sizeof(path), "%s/result.json", prof_dir);
		GP_TRY(result_read(path, &prof));
		if ((rc = profile_facts_read(prof, path, &p)) < 0) {
			json_decref(prof);
			return rc;
		}
	}

	struct net *net = NULL;
	struct roofline_row *rows = NULL;
	struct roofline_type *types = NULL;
	struct table tab;
	int n_rows = 0, n_types = 0;
	table_init(&tab);
	struct model_opts mo = model_defaults(p.model);
	mo.batch = p.batch;
	if (p.size)
		mo.size = p.size;
	if ((rc = model_build(p.model, &mo, &net)) < 0)
		goto out;
	rows = calloc(2 * (size_t)net->n_nodes, sizeof(*rows));
	if (!rows) {
		rc = gp_error(GP_ENOMEM, "roofline: no memory for %d rows", 2 * net->n_nodes);
		goto out;
	}
	roofline_rows(net, &p, prec, rows, &n_rows);

	/* the peaks: the GPU asked for, else the one the profile ran on */
	struct gp_devinfo di;
	const char *gpu_name = gpu;
	if (!gpu_name && p.gpu && *p.gpu)
		gpu_name = p.gpu;
	if (!gpu_name && !strcmp(p.device, "cuda")) {
		devinfo_query(&di);
		gpu_name = di.gpu_count > 0 ? di.gpu_name : NULL;
	}
	const struct gpu_peaks *g = gpu_peaks_find(gpu_name);
	struct roofline_peak pk = { 0, 0, 0 };
	if (g)
		pk = (struct roofline_peak){ gpu_peaks_tflops(g, prec), g->fp32_tflops, g->mem_gb_s };
	if ((rc = roofline_by_type(rows, n_rows, &pk, &types, &n_types)) < 0 ||
	    (rc = roofline_table(&tab, types, n_types)) < 0)
		goto out;

	printf("\nroofline of %s, %s, batch %d (%s layer times from %s, mean of %d steps)\n", p.model,
	       p.precision, p.batch, p.host_timed ? "CPU" : "GPU", prof_dir, p.steps);
	if (g && prec == PREC_FP32)
		printf("peaks of %s: %.1f TFLOP/s FP32 (CUDA cores), %.0f GB/s\n\n", g->label,
		       pk.cuda_tflops, pk.mem_gb_s);
	else if (g)
		printf("peaks of %s: %.1f TFLOP/s %s tensor cores, %.1f TFLOP/s FP32 CUDA cores, "
		       "%.0f GB/s\n\n", g->label, pk.tensor_tflops, p.precision, pk.cuda_tflops,
		       pk.mem_gb_s);
	else
		printf("no peaks for %s: bounds not computed (--gpu NAME names a GPU of the table)\n\n",
		       gpu_name ? gpu_name : "the CPU backend");
	table_print(&tab, stdout);

	res = result_new("roofline", argc, argv);
	json_t *m = roofline_json(types, n_types, rows, n_rows, &pk);
	if (!res || !m) {
		json_decref(m);
		rc = gp_error(GP_ENOMEM, "out of memory building the roofline result");
		goto out;
	}
	json_object_set_new(m, "profile_step_ms", result_real(p.step_ms));
	json_object_set_new(m, "layer_times", json_string(p.host_timed ? "cpu" : "gpu"));
	json_object_set_new(res, "measurements", m);
	json_object_set_new(res, "settings", json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:o, s:o}",
		"model", p.model, "precision", p.precision, "device", p.device, "batch", p.batch,
		"size", mo.size, "profile", prof_dir, "gpu", result_string(gpu_name),
		"peak_source", g ? json_string(g->label) : json_null()));
	if ((rc = result_write(res, dir, "roofline", path, sizeof(path))) < 0)
		goto out;
	printf("\nwrote %s\n", path);
	if (csv) {
		if ((rc = table_write_csv_in(&tab, dir, "roofline.csv", path, sizeof(path))) < 0)
			goto out;
		printf("wrote %s\n", path);
	}
out:
	table_free(&tab);
	free(types);
	free(rows);
	net_free(net);
	json_decref(prof);
	json_decref(res);
	return rc;
}
