/* gpuperf parity: the engine's half of the parity check against PyTorch
 * (tests/torch/parity.py drives it). Loads weights and a batch written by the
 * PyTorch side, trains a few steps, and writes what PyTorch will compare: the first
 * step's logits and parameter gradients, every step's loss, and the parameters and
 * running statistics after the last step. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "core/file.h"
#include "nn/checkpoint.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "report/result.h"

static int read_raw(const char *dir, const char *name, void *dst, size_t bytes)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f;
	GP_TRY(file_fopen_read(path, &f, NULL));
	size_t got = fread(dst, 1, bytes, f);
	int extra = fgetc(f) != EOF;
	fclose(f);
	if (got != bytes || extra)
		return gp_error(GP_EFORMAT, "'%s' holds %s bytes than the %zu expected", path,
				got != bytes ? "fewer" : "more", bytes);
	return 0;
}

static int write_raw(const char *dir, const char *name, const void *src, size_t bytes)
{
	char path[1024];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return gp_error(GP_EINVAL, "path too long: '%s/%s'", dir, name);
	return atomic_file_write(path, src, bytes);
}

/* Save the gradients under the parameter names: swap them into the host master for
 * the checkpoint writer, then swap the parameters back. */
static int save_grads(struct net *net, const float *grads, const char *path)
{
	float *keep = net->host_params;
	net->host_params = (float *)grads;
	int rc = checkpoint_save(net, path);
	net->host_params = keep;
	return rc;
}

int cmd_parity(int argc, char **argv)
{
	const char *model = NULL, *load = NULL, *input = NULL, *out = NULL, *device = "cpu", *prec = "fp32";
	int batch = 4, size = 0, classes = 10, steps = 3, help = 0, plain_bn = 0;
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	struct opt opts[] = {
		OPT_MODEL(&model, "(required)"),
		{ "load", OPT_PATH, &load, "weights written by PyTorch (safetensors)", 0 },
		{ "input", OPT_PATH, &input, "directory with x.f32 (N x 3 x S x S) and y.i32 (N)", 0 },
		{ "out", OPT_PATH, &out, "directory for logits.f32, grads.safetensors, after.safetensors, losses.json", 0 },
		OPT_DEVICE(&device),
		OPT_PRECISION(&prec, "(fp32)"),
		OPT_BATCH(&batch, "batch size (4)"),
		OPT_SIZE(&size),
		OPT_CLASSES(&classes, "output classes (10)"),
		OPT_STEPS(&steps, "SGD steps (3)"),
		OPT_LR(&sgd.lr, "learning rate (0.01)"),
		OPT_MOMENTUM(&sgd.momentum, "momentum (0.9)"),
		OPT_WEIGHT_DECAY(&sgd.weight_decay, "weight decay (0)"),
		{ "plain-bn", OPT_FLAG, &plain_bn, "batch norm on cuDNN's kernels, unfused, as PyTorch's (CUDA)", 0 },
		OPT_HELP(&help),
		OPT_END(),
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf parity --model M --load W --input DIR --out DIR [--device cuda]", opts);
		return 0;
	}
	if (!model || !load || !input || !out)
		return gp_error(GP_EINVAL, "parity needs --model, --load, --input and --out");
	enum backend_kind bk;
	enum precision precision;
	GP_TRY(train_pick_device(device, &bk, 1));
	GP_TRY(train_parse_precision(prec, &precision));
	GP_TRY(path_dir_prepare(out));
	struct model_opts mo = model_defaults(model);
	mo.batch = batch;
	mo.classes = classes;
	mo.dropout = 0; /* masks cannot match across frameworks */
	if (size)
		mo.size = size;
	struct net *net = NULL;
	float *x = NULL, *buf = NULL;
	int32_t *y = NULL;
	json_t *losses = json_array();
	GP_TRY(model_build(model, &mo, &net));
#ifdef GP_HAVE_CUDA
	/* Parity is about the arithmetic: FP32 convolutions by direct summation (no FFT or
	 * Winograd, which round differently and which the speed measurement may pick by
	 * timing), deterministic algorithms, as PyTorch without cudnn.benchmark mostly runs. */
	if (bk == BACKEND_CUDA)
		backend_cuda_set_conv_policy(net, precision == PREC_FP32, 1);
#endif
	net->tuning.test.bn_fuse = net->tuning.test.bn_own = !plain_bn;
	size_t in_count = (size_t)batch * 3 * mo.size * mo.size;
	size_t logits_count = (size_t)batch * classes;
	x = malloc(in_count * sizeof(float));
	y = malloc((size_t)batch * sizeof(int32_t));
	buf = malloc((net->params_count > logits_count ? net->params_count : logits_count) * sizeof(float));
	int rc = GP_ENOMEM;
	if (!x || !y || !buf) {
		gp_error(GP_ENOMEM, "cannot allocate the parity buffers");
		goto out;
	}
	char path[1024];
	if ((rc = checkpoint_load(net, load)) < 0 || (rc = read_raw(input, "x.f32", x, in_count * sizeof(float))) < 0 ||
	    (rc = read_raw(input, "y.i32", y, (size_t)batch * sizeof(int32_t))) < 0 ||
	    (rc = net_setup(net, bk, GP_F32, precision)) < 0 || (rc = net_set_batch_data(net, x, y)) < 0)
		goto out;
	for (int s = 0; s < steps; s++) {
		double loss;
		if ((rc = net_forward(net, 1)) < 0 || (rc = net_loss(net, &loss, NULL)) < 0)
			goto out;
		/* the logits' memory is reused during backward: read them first */
		if (s == 0 && ((rc = net_logits_to_host(net, buf)) < 0 ||
			       (rc = write_raw(out, "logits.f32", buf, logits_count * sizeof(float))) < 0))
			goto out;
		if ((rc = net_backward(net)) < 0)
			goto out;
		json_array_append_new(losses, result_real(loss));
		if (s == 0) {
			snprintf(path, sizeof(path), "%s/grads.safetensors", out);
			if ((rc = net_grads_to_host(net, buf)) < 0 || (rc = save_grads(net, buf, path)) < 0)
				goto out;
		}
		if ((rc = net_sgd_step(net, &sgd)) < 0)
			goto out;
	}
	snprintf(path, sizeof(path), "%s/after.safetensors", out);
	if ((rc = net_sync_to_host(net)) < 0 || (rc = checkpoint_save(net, path)) < 0)
		goto out;
	snprintf(path, sizeof(path), "%s/losses.json", out);
	rc = json_write_atomic(losses, path, 0);
out:
	json_decref(losses);
	free(x);
	free(y);
	free(buf);
	net_free(net);
	return rc;
}
