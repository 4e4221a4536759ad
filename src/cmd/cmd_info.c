/* gpuperf info: the machine, or a model's layers, parameters, MACs and the memory
 * that training it at a batch size needs (from the memory plan, nothing allocated). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "core/memstat.h"
#include "core/names.h"
#include "core/tuning.h"
#include "core/version.h"
#include "gpu/devinfo.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/mfu.h"
#include "report/result.h"

static double mib(size_t b)
{
	return b / GP_MIB;
}

static void shape_str(const struct shape *s, char *buf, size_t cap)
{
	snprintf(buf, cap, "%dx%dx%d", s->c, s->h, s->w);
}

static size_t node_params(const struct net *net, const struct node *nd)
{
	size_t n = 0;
	for (int k = 0; k < nd->param_count; k++)
		n += net->state[nd->param_first + k].numel;
	return n;
}

/* Bytes of activations still alive at the loss: what training keeps for backward. */
static size_t kept_for_backward_bytes(const struct net *net)
{
	size_t sum = 0;
	int loss_step = net->n_nodes;
	for (int i = 0; i < net->n_tensors; i++) {
		const struct plan_tensor *t = &net->tensors[i];
		if (t->alias_of < 0 && t->first_step <= loss_step && t->last_step > loss_step)
			sum += t->bytes;
	}
	return sum;
}

static int info_system(int json)
{
	struct gp_devinfo d;
	devinfo_query(&d);
	if (json) {
		json_t *o = json_pack("{s:s, s:i, s:b, s:s, s:s, s:o?}", "gpuperf_version", GPUPERF_VERSION,
				      "cpu_cores", (int)sysconf(_SC_NPROCESSORS_ONLN), "cuda_built",
				      d.cuda_built, "gpu", d.gpu_name, "note", d.note, "tuning", result_tuning_json());
		char *s = json_dumps(o, JSON_INDENT(2));
		printf("%s\n", s);
		free(s);
		json_decref(o);
		return 0;
	}
	printf("gpuperf %s\n", GPUPERF_VERSION);
	printf("  CPU cores       %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
	printf("  CUDA backend    %s\n", d.cuda_built ? "built" : "not built");
	if (d.gpu_count > 0)
		printf("  GPU             %s (%d found), %.0f MiB, compute %d.%d, %d SMs\n", d.gpu_name,
		       d.gpu_count, mib(d.mem_total_bytes), d.cc_major, d.cc_minor, d.sm_count);
	else
		printf("  GPU             none (%s)\n", d.note);
	if (d.cudnn_version)
		printf("  CUDA runtime    %d, driver %d, cuDNN %d, cuBLAS %d\n", d.cudart_version,
		       d.driver_version, d.cudnn_version, d.cublas_version);
	char models[256];
	printf("  models          %s\n", names_join(models, sizeof(models), model_name_at, ", ", ", "));
	const char *queues = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	printf("  CUDA queues     CUDA_DEVICE_MAX_CONNECTIONS=%s (gpuperf's default 32; a value "
	       "in the environment wins)\n", queues ? queues : "unset");
	printf("  tuning (environment)\n");
	for (int i = 0; i < tuning_table_len; i++) {
		char v[TUNING_PATH_MAX];
		tuning_value_str(tuning_get(), i, v, sizeof(v));
		printf("    %-28s %-18s %s\n", tuning_table[i].name, v, tuning_table[i].meaning);
	}
	return 0;
}

int cmd_info(int argc, char **argv)
{
	const char *model = NULL, *precision = "fp32";
	int batch = 32, size = 0, classes = 1000, json = 0, help = 0, recompute = 0, recompute_blocks = 0;
	struct opt opts[] = {
		OPT_MODEL(&model, "(without it: this machine)"),
		OPT_BATCH(&batch, "batch size for the training-memory figures (32)"),
		OPT_SIZE(&size),
		OPT_CLASSES(&classes, "output classes (1000)"),
		OPT_JSON(&json, "print JSON instead of tables"),
		{ "recompute", OPT_FLAG, &recompute, "plan with BN+ReLU outputs recomputed in backward", 0 },
		{ "recompute-blocks", OPT_FLAG, &recompute_blocks, "and residual blocks' outputs too", 0 },
		OPT_PRECISION(&precision, "(fp32; the GPU's training memory in that mode)"),
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf info [--model NAME] [--batch B] [--size S] [--precision P] [--json]", opts);
		printf("\nmodels:\n");
		for (int i = 0; model_info_at(i); i++) {
			const struct model_info *m = model_info_at(i);
			printf("  %-14s %s; %dx%d, %d classes by default\n", m->name, m->summary,
			       m->size, m->size, m->classes);
		}
		return 0;
	}
	enum precision prec;
	GP_TRY(train_parse_precision(precision, &prec));
	if (!model)
		return info_system(json);
	struct model_opts mo = model_defaults(model);
	mo.batch = batch;
	mo.classes = classes;
	if (size)
		mo.size = size;
	struct net *net;
	GP_TRY(model_build(model, &mo, &net));
	net->recompute = recompute_blocks ? 2 : recompute;
	/* as the CUDA backend plans it: 2-byte activations under fp16/bf16, with float
	 * master weights beside their 16-bit copies, and the outputs its fused batch norms
	 * never read in backward freed early */
	int rc = net_plan_predict(net, BACKEND_CUDA, GP_F32, prec);
	if (rc < 0)
		goto out;
	size_t params = net->params_count, kept = kept_for_backward_bytes(net);
	double macs1 = net_total_macs(net) / batch;
	if (json) {
		json_t *layers = json_array();
		for (int i = 1; i < net->n_nodes; i++) {
			const struct node *nd = &net->nodes[i];
			json_array_append_new(layers, json_pack("{s:s, s:s, s:[i,i,i], s:I, s:o}",
				"name", nd->name, "op", op_name(nd->op), "output", nd->out.c, nd->out.h,
				nd->out.w, "params", (json_int_t)node_params(net, nd), "macs", result_real(nd->macs / batch)));
		}
		json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:s, s:I, s:o, s:o, s:o, s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o}",
			"model", model, "size", mo.size, "classes", classes, "batch", batch,
			"precision", train_precision_name(prec),
			"params", (json_int_t)params, "forward_macs_per_image", result_real(macs1),
			"forward_flops_per_image", result_real(2 * macs1),
			"train_flops_per_image", result_real(mfu_train_flops_per_image(macs1)),
			"macs_count", "conv2d and linear layers (multiply-accumulates, bias adds excluded)",
			"training_bytes", "weights", (json_int_t)net->plan.weights_bytes,
			"gradients", (json_int_t)net->plan.grads_bytes,
			"optimizer", (json_int_t)net->plan.optim_bytes,
			"activations_kept_for_backward", (json_int_t)kept,
			"activation_arena_peak", (json_int_t)net->plan.arena_bytes,
			"activation_no_reuse", (json_int_t)net->plan.no_reuse_bytes,
			"layers", layers);
		char *s = json_dumps(o, JSON_INDENT(2));
		printf("%s\n", s);
		free(s);
		json_decref(o);
		goto out;
	}
	printf("%s, input 3x%dx%d, %d classes\n\n", model, mo.size, mo.size, classes);
	printf("%4s  %-28s %-16s %-14s %12s %12s\n", "#", "layer", "op", "output", "params", "MMACs");
	for (int i = 1; i < net->n_nodes; i++) {
		const struct node *nd = &net->nodes[i];
		char shp[48];
		shape_str(&nd->out, shp, sizeof(shp));
		printf("%4d  %-28s %-16s %-14s %12zu %12.2f\n", i, nd->name[0] ? nd->name : "-",
		       op_name(nd->op), shp, node_params(net, nd), nd->macs / batch / 1e6);
	}
	printf("\nparameters            %zu (%.2f M)\n", params, params / 1e6);
	printf("forward MACs          %.3f G per image (conv2d and linear layers; bias, BN, "
	       "activations and pooling not counted)\n", macs1 / 1e9);
	printf("FLOPs per image       %.3f G forward (2 per MAC), %.3f G training (x 3: forward, "
	       "data and weight gradients)\n", 2 * macs1 / 1e9, mfu_train_flops_per_image(macs1) / 1e9);
	printf("\ntraining memory at batch %d, %s%s (from the memory plan):\n", batch, train_precision_name(prec),
	       precision_is_amp(prec) ? ", 16-bit activations, float master weights" : "");
	printf("  weights + BN stats  %10.1f MiB\n", mib(net->plan.weights_bytes));
	printf("  gradients           %10.1f MiB\n", mib(net->plan.grads_bytes));
	printf("  optimizer (SGD m.)  %10.1f MiB\n", mib(net->plan.optim_bytes));
	printf("  activations kept    %10.1f MiB  (alive at the loss, needed by backward)\n", mib(kept));
	printf("  activation arena    %10.1f MiB  (peak with reuse; %.1f MiB without)\n",
	       mib(net->plan.arena_bytes), mib(net->plan.no_reuse_bytes));
	printf("  input + labels      %10.1f MiB\n", mib(net->plan.other_bytes));
	printf("  total (no workspace)%10.1f MiB\n", mib(net->plan.total_bytes));
out:
	net_free(net);
	return rc;
}
