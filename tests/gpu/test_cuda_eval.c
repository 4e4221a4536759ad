/* Validation's forward on the GPU (net_forward in eval mode) against the CPU's, the
 * reference (running statistics, no dropout; test_train_val.c checks it): the same
 * weights and running statistics on both, after the CUDA net has trained a few steps
 * (its graph captured, its batch norms fused in training) so that eval mode has to
 * undo every training-only path. fp32 and fp16 (NHWC), ResNet-18 (BN+ReLU and
 * add+BN+ReLU fusions) and MobileNetV2 (ReLU6 folded into the convolution). Without
 * a device every test skips. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "backend/backend.h"
#include "net_util.h"

TEST(cuda_eval_forward_matches_cpu)
{
	NEED_GPU();
	const char *models[] = { "resnet18", "mobilenet_v2" };
	const enum precision precs[] = { PREC_FP32, PREC_FP16 };
	const int size = 64, batch = 8, classes = 10;
	for (int m = 0; m < 2; m++)
		for (int p = 0; p < 2; p++) {
			struct net *cpu = build(models[m], size, batch, classes);
			struct net *gpu = build(models[m], size, batch, classes);
			size_t nl = (size_t)batch * classes;
			float *lc = malloc(nl * sizeof(float)), *lg = malloc(nl * sizeof(float));
			if (!cpu || !gpu)
				goto next;
			gpu->use_graphs = 1;
			CHECK_OK(net_setup(cpu, BACKEND_CPU, GP_F32, PREC_FP32));
			CHECK_OK(net_setup(gpu, BACKEND_CUDA, GP_F32, precs[p]));
			if (test_failed())
				goto next;
			struct sgd_args sgd = { .lr = 0.05, .momentum = 0.9 };
			same_batch(cpu, gpu, batch, size, classes, 11);
			for (int s = 0; s < 3; s++) { /* eager, then graph replays */
				CHECK_OK(net_train_step(cpu, &sgd, NULL, NULL));
				CHECK_OK(net_train_step(gpu, &sgd, NULL, NULL));
			}
			/* the CPU's weights and running statistics into the GPU net */
			CHECK_OK(net_sync_to_host(cpu));
			memcpy(gpu->host_params, cpu->host_params, cpu->params_count * sizeof(float));
			memcpy(gpu->host_running, cpu->host_running, cpu->running_count * sizeof(float));
			CHECK_OK(net_sync_from_host(gpu));
			same_batch(cpu, gpu, batch, size, classes, 12);
			CHECK_OK(net_forward(cpu, 0));
			CHECK_OK(net_forward(gpu, 0));
			CHECK_OK(net_logits_to_host(cpu, lc));
			CHECK_OK(net_logits_to_host(gpu, lg));
			double e = dist(lg, lc, nl), tol = precs[p] == PREC_FP32 ? 1e-4 : 2e-2;
			printf("      %s %s: eval logits %.2e from the CPU's (tolerance %.0e)\n", models[m],
			       precs[p] == PREC_FP32 ? "fp32" : "fp16", e, tol);
			CHECK_LE(e, tol);
			/* and a training step after it still matches its twin's loss */
			double l_cpu = 0, l_gpu = 0;
			CHECK_OK(net_train_step(cpu, &sgd, &l_cpu, NULL));
			CHECK_OK(net_train_step(gpu, &sgd, &l_gpu, NULL));
			CHECK_NEAR(l_gpu, l_cpu, (precs[p] == PREC_FP32 ? 1e-3 : 3e-2) * fabs(l_cpu));
next:
			free(lc);
			free(lg);
			net_free(cpu);
			net_free(gpu);
		}
}
