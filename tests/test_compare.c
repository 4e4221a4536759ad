/* gpuperf compare on the CPU at tiny sizes: the result document holds every number,
 * and the numbers agree with each other and with what the models are. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/memstat.h"
#include "report/result.h"
#include "test.h"

static double num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	CHECK_MSG(json_is_number(v), "\"%s\" is missing or not a number", key);
	return json_number_value(v);
}

TEST(compare_cpu_result_and_csv)
{
	char dir[512], cmd[2048], out[16384], path[600];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s compare --models simple_cnn,resnet18 --size 32 --batch 2 "
		 "--steps 3 --classes 10 --device cpu --out %s --csv", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "compare exited %d: %s", rc, out);
	CHECK(strstr(out, "simple_cnn: step 3/3") != NULL);
	CHECK(strstr(out, "resnet18: step 3/3") != NULL);
	snprintf(path, sizeof(path), "%s/compare.json", dir);
	CHECK(strstr(out, path) != NULL);

	json_t *res = NULL;
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	CHECK(!strcmp(json_string_value(json_object_get(res, "command")), "compare"));
	CHECK(json_is_null(json_object_get(res, "gpu")));
	json_t *set = json_object_get(res, "settings");
	CHECK_EQ_INT(num(set, "batch"), 2);
	CHECK_EQ_INT(num(set, "steps"), 3);
	CHECK_EQ_INT(num(set, "size"), 32);
	CHECK(!strcmp(json_string_value(json_object_get(set, "device")), "cpu"));
	CHECK(!strcmp(json_string_value(json_object_get(set, "precision")), "fp32"));
	json_t *models = json_object_get(json_object_get(res, "measurements"), "models");
	CHECK_EQ_INT(json_array_size(models), 2);
	static const char *names[] = { "simple_cnn", "resnet18" };
	double params_seen[2] = { 0, 0 };
	for (size_t i = 0; i < json_array_size(models) && i < 2; i++) {
		json_t *m = json_array_get(models, i);
		CHECK(!strcmp(json_string_value(json_object_get(m, "model")), names[i]));
		double params = num(m, "params"), alloc = num(m, "alloc_bytes");
		double peak = num(m, "alloc_peak_bytes"), predicted = num(m, "predicted_peak_bytes");
		params_seen[i] = params;
		CHECK(params > 0);
		CHECK_NEAR(num(m, "params_m"), params / 1e6, 1e-8 * params); /* 10 digits in JSON */
		CHECK_NEAR(num(m, "param_mib"), params * 4 / 1048576.0, 1e-8 * params);
		CHECK(alloc > 0);
		CHECK(peak >= alloc);
		/* the CPU backend allocates the plan exactly (the plan adds 64 bytes of slack) */
		CHECK_NEAR(predicted, peak, 64);
		CHECK(num(m, "train_s") > 0);
		CHECK(num(m, "img_s") > 0);
		CHECK(num(m, "ms_per_step") > 0);
		CHECK(json_is_null(json_object_get(m, "process_setup_mib")));
		CHECK(json_is_null(json_object_get(m, "process_peak_mib")));
		json_t *cat = json_object_get(m, "category_bytes");
		double sum = 0;
		for (int c = 0; c < MEM_NCAT; c++)
			sum += num(cat, mem_cat_name(c));
		CHECK_EQ_INT(sum, alloc);
		/* weights, gradients and momentum: one fp32 copy of the parameters each */
		CHECK_EQ_INT(num(cat, "gradients"), params * 4);
		CHECK_EQ_INT(num(cat, "optimizer"), params * 4);
		CHECK(num(cat, "weights") >= params * 4);
		CHECK(num(cat, "activations") > 0);
	}
	/* resnet18 with 10 classes: 11,181,642 parameters, as torchvision counts them */
	CHECK_EQ_INT(params_seen[1], 11181642);
	CHECK(params_seen[0] < params_seen[1]);
	json_decref(res);

	char csv[8192];
	snprintf(path, sizeof(path), "%s/compare.csv", dir);
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL);
	if (!f)
		return;
	size_t n = fread(csv, 1, sizeof(csv) - 1, f);
	csv[n] = 0;
	fclose(f);
	CHECK(!strncmp(csv, "model,size,params (M),param MiB,", 32));
	CHECK_EQ_INT(test_count_lines(csv), 3);
	CHECK(strstr(csv, "\r\nsimple_cnn,32,") != NULL);
	CHECK(strstr(csv, "\r\nresnet18,32,11.18,") != NULL);
	snprintf(path, sizeof(path), "%s/compare_memory.csv", dir);
	f = fopen(path, "rb");
	CHECK(f != NULL);
	if (f) {
		n = fread(csv, 1, sizeof(csv) - 1, f);
		csv[n] = 0;
		fclose(f);
		CHECK(!strncmp(csv, "model,weights,gradients,optimizer,activations,workspace,other,total", 67));
		CHECK_EQ_INT(test_count_lines(csv), 3);
	}
}

TEST(compare_bad_input_one_clear_line)
{
	test_check_bad("compare --models simple_cnn,vgg16 --device cpu", "unknown model 'vgg16'");
	test_check_bad("compare --models simple_cnn,,resnet18 --device cpu", "--models");
	test_check_bad("compare --steps 0 --device cpu", "--steps must be between 1 and 10000000 (got 0)");
	test_check_bad("compare --device cpu --precision fp8", "--precision must be");
}
