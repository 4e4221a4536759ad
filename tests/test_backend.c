/* The boundary between the net and its backend: what the net's creator chooses (the
 * device) is checked at set-up, on any machine. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/tuning.h"
#include "gpu/devinfo.h"
#include "nn/models.h"
#include "nn/net.h"
#include "test.h"

static struct net *small_net(void)
{
	struct model_opts o = model_defaults("simple_cnn");
	o.batch = 2;
	o.classes = 10;
	struct net *net = NULL;
	CHECK_MSG(model_build("simple_cnn", &o, &net) == 0, "%s", gp_errmsg());
	return net;
}

/* A device that is not there is one error naming it, and the net stays usable. */
TEST(net_setup_rejects_bad_device)
{
	struct net *net = small_net();
	if (!net)
		return;
	int devices[] = { 1, 7, -1 };
	for (int k = 0; k < 3; k++) {
		char want[32];
		net->device = devices[k];
		snprintf(want, sizeof(want), "device %d", devices[k]);
		CHECK_EQ_INT(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32), GP_ENODEV);
		CHECK_MSG(strstr(gp_errmsg(), want) != NULL, "message: %s", gp_errmsg());
		CHECK(strchr(gp_errmsg(), '\n') == NULL);
		CHECK_EQ_INT(net->mem.total_bytes, 0);
	}
	/* on CUDA: no such device here (or no GPU at all), never a crash or a set-up */
	net->device = 99;
	CHECK_EQ_INT(net_setup(net, BACKEND_CUDA, GP_F32, PREC_FP32), GP_ENODEV);
	CHECK_EQ_INT(net->mem.total_bytes, 0);
	net->device = 0;
	CHECK_MSG(net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32) == 0, "%s", gp_errmsg());
	net_free(net);
}

/* The tuning switches are one table, read once, shown by `info` and recorded in every
 * result's settings. */
TEST(tuning_shown_by_info_and_recorded_in_results)
{
	const struct tuning *t = tuning_get();
	CHECK(t == tuning_get());
	CHECK_EQ_INT(tuning_table_len, 14);
	for (int i = 0; i < tuning_table_len; i++)
		CHECK(!strncmp(tuning_table[i].name, "GPUPERF_", 8) && tuning_table[i].meaning[0]);
	CHECK(t->test.bn_fuse && t->test.bn_own && t->test.conv_ws_arena && t->test.wgrad_stream &&
	      t->test.bn_out_mask && t->test.bn_add_bn && t->test.bn_pool);

	char cmd[1024], out[8192], dir[600];
	snprintf(cmd, sizeof(cmd), "GPUPERF_CONV_WORKSPACE_MIB=1234 %s info", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "GPUPERF_CONV_WORKSPACE_MIB") && strstr(out, "1234"), "info: %s", out);
	CHECK_MSG(strstr(out, "GPUPERF_NVML_LIB") != NULL, "info: %s", out);
	/* a value out of range or not a number: one warning naming it, then the default */
	snprintf(cmd, sizeof(cmd), "GPUPERF_DECODE_BUFFERS=9 GPUPERF_CONV_WORKSPACE_MIB=12x "
		 "GPUPERF_NVJPEG_BACKEND=gpu GPUPERF_DWCONV_TILED=2 GPUPERF_RELU6_FOLD=yes GPUPERF_CONV_STEM=fast GPUPERF_CONV_1X1=own %s info", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "warning: GPUPERF_DECODE_BUFFERS='9' is not an integer from 2 to 4; "
			      "using 3\n"), "info: %s", out);
	CHECK_MSG(strstr(out, "warning: GPUPERF_CONV_WORKSPACE_MIB='12x' is not an integer"),
		  "info: %s", out);
	CHECK_MSG(strstr(out, "warning: GPUPERF_NVJPEG_BACKEND='gpu' is not auto, hardware or "
			      "cuda; using auto\n"), "info: %s", out);
	CHECK_MSG(strstr(out, "warning: GPUPERF_DWCONV_TILED='2' is not an integer from 0 to 1; "
			      "using 1\n"), "info: %s", out);
	CHECK_MSG(strstr(out, "warning: GPUPERF_RELU6_FOLD='yes' is not auto, always or never; "
			      "using auto\n"), "info: %s", out);
	CHECK_MSG(strstr(out, "warning: GPUPERF_CONV_STEM='fast' is not cudnn, auto or own; "
			      "using auto\n"), "info: %s", out);
	CHECK_MSG(strstr(out, "warning: GPUPERF_CONV_1X1='own' is not cudnn, auto or cublas; "
			      "using auto\n"), "info: %s", out);

	snprintf(dir, sizeof(dir), "%s/tuned", test_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "GPUPERF_CONV_LOG=1 GPUPERF_NVJPEG_BACKEND=cuda GPUPERF_DECODE_BUFFERS=2 GPUPERF_DWCONV_TILED=0 "
		 "GPUPERF_RELU6_FOLD=never GPUPERF_CONV_STEM=own GPUPERF_CONV_1X1=cublas %s compare --models simple_cnn --batch 2 --steps 1 --classes 10 --device cpu "
		 "--out %s",
		 test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "compare: %s", out);
	char path[700];
	snprintf(path, sizeof(path), "%s/compare.json", dir);
	json_error_t err;
	json_t *res = json_load_file(path, 0, &err);
	CHECK_MSG(res != NULL, "%s: %s", path, err.text);
	json_t *tuning = json_object_get(json_object_get(res, "settings"), "tuning");
	CHECK_MSG(json_is_object(tuning), "no settings.tuning in %s", path);
	const char *log = json_string_value(json_object_get(tuning, "GPUPERF_CONV_LOG"));
	CHECK_MSG(log && !strcmp(log, "1"), "GPUPERF_CONV_LOG recorded as %s", log ? log : "nothing");
	const char *nj = json_string_value(json_object_get(tuning, "GPUPERF_NVJPEG_BACKEND"));
	CHECK_MSG(nj && !strcmp(nj, "cuda"), "GPUPERF_NVJPEG_BACKEND recorded as %s",
		  nj ? nj : "nothing");
	const char *nb = json_string_value(json_object_get(tuning, "GPUPERF_DECODE_BUFFERS"));
	CHECK_MSG(nb && !strcmp(nb, "2"), "GPUPERF_DECODE_BUFFERS recorded as %s", nb ? nb : "nothing");
	CHECK_EQ_INT(json_object_size(tuning), tuning_table_len);
	/* every switch recorded as its value: GPUPERF_DWCONV_TILED was recorded as "?" (its
	 * value had no case in tuning_value_str) */
	const char *tiled = json_string_value(json_object_get(tuning, "GPUPERF_DWCONV_TILED"));
	CHECK_MSG(tiled && !strcmp(tiled, "0"), "GPUPERF_DWCONV_TILED recorded as %s", tiled ? tiled : "nothing");
	const char *fold = json_string_value(json_object_get(tuning, "GPUPERF_RELU6_FOLD"));
	CHECK_MSG(fold && !strcmp(fold, "never"), "GPUPERF_RELU6_FOLD recorded as %s", fold ? fold : "nothing");
	const char *stem = json_string_value(json_object_get(tuning, "GPUPERF_CONV_STEM"));
	CHECK_MSG(stem && !strcmp(stem, "own"), "GPUPERF_CONV_STEM recorded as %s", stem ? stem : "nothing");
	const char *pw = json_string_value(json_object_get(tuning, "GPUPERF_CONV_1X1"));
	CHECK_MSG(pw && !strcmp(pw, "cublas"), "GPUPERF_CONV_1X1 recorded as %s", pw ? pw : "nothing");
	const char *key;
	json_t *val;
	json_object_foreach(tuning, key, val)
	{
		const char *sv = json_string_value(val);
		CHECK_MSG(sv && *sv && strcmp(sv, "?"), "%s recorded as %s", key, sv ? sv : "not a string");
	}
	json_decref(res);
}

/* The CUDA settings gpuperf gives its process before any CUDA call: 32 hardware work
 * queues unless the environment names a number, which stays as it is. */
TEST(gpu_process_defaults_keep_a_set_value)
{
	const char *was = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	char saved[32] = "";
	if (was)
		snprintf(saved, sizeof(saved), "%s", was);
	unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
	gpu_process_defaults();
	const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	CHECK_MSG(v && !strcmp(v, "32"), "unset: %s", v ? v : "still unset");
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8", 1);
	gpu_process_defaults();
	v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	CHECK_MSG(v && !strcmp(v, "8"), "set to 8: %s", v ? v : "unset");
	if (was)
		setenv("CUDA_DEVICE_MAX_CONNECTIONS", saved, 1);
	else
		unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
	/* gpuperf sets it at its start, and `info` shows it */
	char cmd[600], out[8192];
	snprintf(cmd, sizeof(cmd), "env -u CUDA_DEVICE_MAX_CONNECTIONS %s info", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "CUDA_DEVICE_MAX_CONNECTIONS=32 ") != NULL, "info: %s", out);
	snprintf(cmd, sizeof(cmd), "CUDA_DEVICE_MAX_CONNECTIONS=8 %s info", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "CUDA_DEVICE_MAX_CONNECTIONS=8 ") != NULL, "info: %s", out);
}
