/* gpuperf train: train a model on synthetic data (one fixed batch, as the PyTorch
 * yardstick does) or on a dataset through the data loader, printing the loss as it
 * goes and img/s (and, with a dataset, the data wait) at the end. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "nn/trainer.h"

int cmd_train(int argc, char **argv)
{
	struct train_opts o = train_opts_default();
	const char *device = "auto", *precision = "fp32", *load = NULL, *save = NULL, *data = "synthetic";
	int help = 0, json = 0, size = 0, warmup = -1, log_every = 0;
	/* 0 until given: the dataset's class count, 1000 for the synthetic batch */
	o.classes = 0;
	long long seed = 0;
	struct opt opts[] = {
		{ "model", OPT_STR, &o.model, "simple_cnn | resnet18 | resnet50 | mobilenet_v2", 0 },
		{ "device", OPT_STR, &device, "cuda | cpu | auto (auto: cuda when a GPU is present)", 0 },
		{ "precision", OPT_STR, &precision, "fp32 | tf32 (GPU math mode)", 0 },
		{ "batch", OPT_INT, &o.batch, "batch size (32)", 1 },
		{ "size", OPT_INT, &size, "input height and width (224; 32 for simple_cnn)", 8 },
		{ "classes", OPT_INT, &o.classes, "output classes (default: the dataset's; 1000 for synthetic)", 1 },
		{ "steps", OPT_INT, &o.steps, "training steps (20)", 1 },
		{ "warmup", OPT_INT, &warmup, "steps left out of the img/s figure (default: 10% of steps, at most 10)", 0 },
		{ "lr", OPT_DOUBLE, &o.sgd.lr, "learning rate (0.01)", 0 },
		{ "momentum", OPT_DOUBLE, &o.sgd.momentum, "SGD momentum (0.9)", 0 },
		{ "weight-decay", OPT_DOUBLE, &o.sgd.weight_decay, "SGD weight decay (0)", 0 },
		{ "nesterov", OPT_FLAG, &o.sgd.nesterov, "Nesterov momentum", 0 },
		{ "dropout", OPT_DOUBLE, &o.dropout, "override the model's dropout probability (0 disables)", 0 },
		{ "seed", OPT_I64, &seed, "seed for initialization and data (0)", 0 },
		{ "data", OPT_STR, &data, "synthetic (one fixed batch, the default) | DIR (ImageFolder) | cifar10:DIR", 0 },
		{ "workers", OPT_INT, &o.workers, "data-loader threads (0: decode in the training thread)", 0 },
		{ "prefetch", OPT_INT, &o.prefetch, "batches in flight per loader worker (2)", 1 },
		{ "epochs", OPT_INT, &o.epochs, "with a dataset: train this many epochs instead of --steps", 1 },
		{ "load", OPT_STR, &load, "load weights (safetensors, torchvision names) before training", 0 },
		{ "save", OPT_STR, &save, "save weights after training", 0 },
		{ "log-every", OPT_INT, &log_every, "print the loss every N steps (default: about 20 lines)", 1 },
		{ "no-graphs", OPT_FLAG, &o.no_graphs, "run each step op by op (no CUDA graph replay)", 0 },
		{ "json", OPT_FLAG, &json, "print a JSON summary at the end", 0 },
		{ "help", OPT_FLAG, &help, "show this help", 0 },
		{ 0 },
	};
	GP_TRY(args_parse(argc, argv, 1, opts));
	if (help) {
		args_print_help("gpuperf train --model NAME [--device cpu|cuda] [--batch B] [--size S] "
				"[--steps N] [--data synthetic|DIR|cifar10:DIR] [--workers N] [--prefetch K] "
				"[--epochs E]", opts);
		return 0;
	}
	int synthetic = !strcmp(data, "synthetic");
	if (synthetic && (o.workers || o.prefetch || o.epochs))
		return gp_error(GP_EINVAL, "--workers, --prefetch and --epochs need --data DIR or cifar10:DIR");
	o.data = data;
	if (!(o.sgd.lr > 0) || o.sgd.momentum < 0 || o.sgd.weight_decay < 0)
		return gp_error(GP_EINVAL, "--lr must be positive, --momentum and --weight-decay not negative");
	if (o.sgd.nesterov && !(o.sgd.momentum > 0))
		return gp_error(GP_EINVAL, "--nesterov needs a positive --momentum");
	o.seed = (uint64_t)seed;
	o.size = size;
	o.warmup = warmup;
	o.log_every = log_every;
	o.load = load;
	o.save = save;
	GP_TRY(train_pick_device(device, &o.backend, 0));
	GP_TRY(train_parse_precision(precision, &o.precision));
	struct train_result res;
	GP_TRY(train_run(&o, &res, stdout));
	if (json) {
		json_t *j = train_result_json(&o, &res);
		char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
		if (!s) {
			json_decref(j);
			return gp_error(GP_ENOMEM, "out of memory writing the JSON summary");
		}
		printf("%s\n", s);
		free(s);
		json_decref(j);
	}
	return 0;
}

