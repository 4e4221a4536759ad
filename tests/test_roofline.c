/* The per-op roofline: bytes per op from the shapes, the bound and gap arithmetic on
 * hand-made rows, sums by op type, the table and the JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "nn/models.h"
#include "report/result.h"
#include "report/roofline.h"
#include "test.h"

TEST(roofline_op_bytes_from_shapes)
{
	/* resnet50's stem at batch 1: x 3x224x224, y 64x112x112, w 64x3x7x7, no bias */
	struct conv2d_args stem = { 1, 3, 224, 224, 64, 112, 112, 7, 7, 2, 3, 1, 0 };
	double x = 150528, y = 802816, w = 9408;
	CHECK_NEAR(conv2d_bytes(&stem, 0, 1, 4, 4), (x + y + w) * 4, 0);
	CHECK_NEAR(conv2d_bytes(&stem, 0, 1, 2, 2), (x + y + w) * 2, 0);
	/* backward: weight gradient (x, dy -> dw), and the data gradient only with dx */
	CHECK_NEAR(conv2d_bytes(&stem, 1, 0, 4, 4), (x + y + w) * 4, 0);
	CHECK_NEAR(conv2d_bytes(&stem, 1, 1, 4, 4), 2 * (x + y + w) * 4, 0);
	/* resnet50's fc at batch 2: x 2x2048, y 2x1000, w 2048x1000 + 1000 bias */
	struct linear_args fc = { 2, 2048, 1000, 1 };
	CHECK_NEAR(linear_bytes(&fc, 0, 1, 2, 2), (4096 + 2000 + 2049000) * 2.0, 0);
	CHECK_NEAR(linear_bytes(&fc, 1, 1, 4, 4), 2 * (4096 + 2000 + 2049000) * 4.0, 0);

	struct model_opts o = model_defaults("resnet50");
	o.size = 224;
	o.batch = 1;
	o.classes = 1000;
	struct net *net = NULL;
	int rc = model_build("resnet50", &o, &net);
	CHECK_MSG(rc == 0, "model_build: %s", gp_errmsg());
	if (rc < 0)
		return;
	CHECK(net->nodes[1].op == OP_CONV2D && !strcmp(net->nodes[1].name, "conv1"));
	CHECK(net->nodes[3].op == OP_RELU);
	/* the stem's input is the image: no data gradient, in bytes or FLOPs */
	CHECK_NEAR(node_bytes(net, 1, 0, 4, 4), (x + y + w) * 4, 0);
	CHECK_NEAR(node_bytes(net, 1, 1, 4, 4), (x + y + w) * 4, 0);
	CHECK_NEAR(node_flops(net, 1, 0), 2 * 118013952.0, 0);
	CHECK_NEAR(node_flops(net, 1, 1), 2 * 118013952.0, 0);
	/* the next convolution's backward computes both gradients: twice its forward */
	int k = 5;
	while (k < net->n_nodes && net->nodes[k].op != OP_CONV2D)
		k++;
	CHECK(k < net->n_nodes && !strcmp(net->nodes[k].name, "layer1.0.conv1"));
	CHECK_NEAR(node_flops(net, k, 1), 2 * node_flops(net, k, 0), 0);
	/* ReLU after bn1 on 64x112x112: forward x, y; backward y, dy -> dx */
	CHECK_NEAR(node_bytes(net, 3, 0, 4, 4), 2 * y * 4, 0);
	CHECK_NEAR(node_bytes(net, 3, 1, 2, 2), 3 * y * 2, 0);
	CHECK_NEAR(node_flops(net, 3, 0), y, 0);
	/* batch norm: x, y forward; x, dy, dx backward; gamma, beta, mean, invstd in float */
	CHECK_NEAR(node_bytes(net, 2, 0, 2, 2), 2 * y * 2 + 4 * 64 * 4, 0);
	CHECK_NEAR(node_bytes(net, 2, 1, 2, 2), 3 * y * 2 + 4 * 64 * 4, 0);
	net_free(net);
}

/* Peaks of round numbers: 1000 TFLOP/s tensor, 50 CUDA cores, 2000 GB/s. */
static const struct roofline_peak test_peak = { 1000, 50, 2000 };

static const struct roofline_row test_rows[] = {
	/* math bound: 1e9 FLOP / 1000 TFLOP/s = 0.001 ms > 1e6 B / 2000 GB/s = 0.0005 ms */
	{ "conv2d forward", "conv1", 1, 1e9, 1e6, 0.004 },
	/* memory bound: 8e6 B / 2000 GB/s = 0.004 ms > 1e6 FLOP / 50 TFLOP/s */
	{ "relu forward", "relu#2", 0, 1e6, 8e6, 0.005 },
	{ "relu backward", "relu#2.backward", 0, 2e6, 12e6, 0.012 },
	{ "conv2d forward", "conv2", 1, 3e9, 1e6, 0.006 },
};

TEST(roofline_bounds_and_types)
{
	const struct roofline_row *r = test_rows;
	CHECK_NEAR(roofline_bound_ms(&r[0], &test_peak), 0.001, 1e-15);
	CHECK(!roofline_memory_bound(&r[0], &test_peak));
	CHECK_NEAR(roofline_bound_ms(&r[1], &test_peak), 0.004, 1e-15);
	CHECK(roofline_memory_bound(&r[1], &test_peak));
	/* the same conv on CUDA cores: 1e9 / 50 TFLOP/s = 0.02 ms */
	struct roofline_row cuda = r[0];
	cuda.tensor = 0;
	CHECK_NEAR(roofline_bound_ms(&cuda, &test_peak), 0.02, 1e-15);
	/* an unknown GPU: no bound */
	struct roofline_peak none = { 0, 0, 0 };
	CHECK_NEAR(roofline_bound_ms(&r[0], &none), -1, 0);

	struct roofline_type *t = NULL;
	int n = 0;
	CHECK_EQ_INT(roofline_by_type(test_rows, 4, &test_peak, &t, &n), 0);
	CHECK_EQ_INT(n, 3);
	if (n == 3) {
		/* longest measured first: relu backward 0.012, conv2d forward 0.010, relu 0.005 */
		CHECK(!strcmp(t[0].op, "relu backward"));
		CHECK(!strcmp(t[1].op, "conv2d forward"));
		CHECK(!strcmp(t[2].op, "relu forward"));
		CHECK_EQ_INT(t[1].rows, 2);
		CHECK_NEAR(t[1].flops, 4e9, 0);
		CHECK_NEAR(t[1].bytes, 2e6, 0);
		CHECK_NEAR(t[1].ms, 0.010, 1e-15);
		CHECK_NEAR(t[1].bound_ms, 0.001 + 0.003, 1e-15);
		CHECK_NEAR(t[1].mem_bound_ms, 0, 0);
		CHECK_NEAR(t[0].bound_ms, 0.006, 1e-15);
		CHECK_NEAR(t[0].mem_bound_ms, 0.006, 1e-15);
	}

	/* the JSON: gap 2.5x and 0.006 ms above the bound for the convolutions, 400
	 * TFLOP/s and 200 GB/s achieved, 2000 FLOP/byte, math bound */
	json_t *j = roofline_json(t, n, test_rows, 4, &test_peak);
	CHECK(j != NULL);
	json_t *conv = json_array_get(json_object_get(j, "types"), 1);
	CHECK_NEAR(json_number_value(json_object_get(conv, "gap")), 2.5, 1e-12);
	CHECK_NEAR(json_number_value(json_object_get(conv, "above_bound_ms")), 0.006, 1e-12);
	CHECK_NEAR(json_number_value(json_object_get(conv, "tflops")), 400, 1e-9);
	CHECK_NEAR(json_number_value(json_object_get(conv, "gb_s")), 200, 1e-9);
	CHECK_NEAR(json_number_value(json_object_get(conv, "flop_per_byte")), 2000, 1e-9);
	CHECK(!strcmp(json_string_value(json_object_get(conv, "bound_by")), "math"));
	json_t *relu_b = json_array_get(json_object_get(j, "types"), 0);
	CHECK(!strcmp(json_string_value(json_object_get(relu_b, "bound_by")), "memory"));
	json_t *total = json_object_get(j, "total");
	CHECK_NEAR(json_number_value(json_object_get(total, "ms")), 0.027, 1e-12);
	CHECK_NEAR(json_number_value(json_object_get(total, "bound_ms")), 0.014, 1e-12);
	json_t *l0 = json_array_get(json_object_get(j, "layers"), 0);
	CHECK(!strcmp(json_string_value(json_object_get(l0, "layer")), "conv1"));
	CHECK_NEAR(json_number_value(json_object_get(l0, "gap")), 4.0, 1e-12);
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(j, "peak"), "mem_gb_s")), 2000, 0);
	json_decref(j);

	/* the table: a row per type and the total */
	struct table tab;
	table_init(&tab);
	CHECK_EQ_INT(roofline_table(&tab, t, n), 0);
	CHECK_EQ_INT(tab.n_rows, 4);
	char path[600], text[4096] = "";
	snprintf(path, sizeof(path), "%s/roofline.txt", test_tmpdir());
	FILE *f = fopen(path, "w+");
	CHECK(f != NULL);
	if (f) {
		table_print(&tab, f);
		rewind(f);
		size_t got = fread(text, 1, sizeof(text) - 1, f);
		text[got] = 0;
		fclose(f);
	}
	CHECK_MSG(strstr(text, "conv2d forward") && strstr(text, "2.50x") && strstr(text, "total"),
		  "table:\n%s", text);
	table_free(&tab);
	free(t);
}

TEST(roofline_unknown_peak_and_unmeasured_rows)
{
	struct roofline_peak none = { 0, 0, 0 };
	struct roofline_type *t = NULL;
	int n = 0;
	CHECK_EQ_INT(roofline_by_type(test_rows, 4, &none, &t, &n), 0);
	for (int i = 0; i < n; i++)
		CHECK_NEAR(t[i].bound_ms, -1, 0);
	json_t *j = roofline_json(t, n, test_rows, 4, &none);
	json_t *ty = json_array_get(json_object_get(j, "types"), 0);
	CHECK(json_is_null(json_object_get(ty, "bound_ms")) && json_is_null(json_object_get(ty, "gap")));
	CHECK(json_is_number(json_object_get(ty, "tflops")));
	json_decref(j);
	free(t);
	/* rows without a measured time: bounds only, sorted by bound */
	struct roofline_row rows[2] = { test_rows[0], test_rows[1] };
	rows[0].ms = rows[1].ms = -1;
	CHECK_EQ_INT(roofline_by_type(rows, 2, &test_peak, &t, &n), 0);
	CHECK_EQ_INT(n, 2);
	if (n == 2) {
		CHECK(!strcmp(t[0].op, "relu forward")); /* bound 0.004 > 0.001 */
		CHECK_NEAR(t[0].ms, -1, 0);
	}
	free(t);
}

static json_t *type_row(json_t *res, const char *op)
{
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(json_object_get(res, "measurements"), "types"), i, t)
		if (!strcmp(json_string_value(json_object_get(t, "op")), op))
			return t;
	return NULL;
}

/* The command on the CPU backend: profile, layer times, FLOPs from the shapes; no
 * bounds without a GPU; then the same profile against the H100's peaks (--from,
 * --gpu), each layer's bound recomputed here from its FLOPs and bytes. */
TEST(roofline_command_cpu_then_h100_peaks)
{
	char cmd[2048], out[16384], path[1200];
	const char *dir = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "%s roofline --model simple_cnn --batch 4 --steps 2 --device cpu "
		 "--out '%s/r1' 2>&1", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	CHECK_MSG(strstr(out, "conv2d forward") && strstr(out, "no peaks"), "%s", out);
	json_t *res = NULL;
	snprintf(path, sizeof(path), "%s/r1/roofline.json", dir);
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	json_t *m = json_object_get(res, "measurements");
	CHECK(!strcmp(json_string_value(json_object_get(m, "layer_times")), "cpu"));
	json_t *conv = type_row(res, "conv2d forward");
	CHECK(conv != NULL);
	/* 3 convolutions, 2 x 4 images x (884,736 + 4,718,592 + 4,718,592) MACs */
	CHECK_EQ_INT(json_integer_value(json_object_get(conv, "layers")), 3);
	CHECK_NEAR(json_number_value(json_object_get(conv, "flops")), 2.0 * 4 * 10321920, 0);
	CHECK(json_number_value(json_object_get(conv, "ms")) > 0);
	CHECK(json_is_null(json_object_get(conv, "bound_ms")));
	/* the stem's backward has no data gradient: as many FLOPs as its forward */
	json_t *layers = json_object_get(m, "layers"), *l;
	size_t i;
	double conv1_f = -1, conv1_b = -2;
	json_array_foreach(layers, i, l) {
		const char *name = json_string_value(json_object_get(l, "layer"));
		if (!strcmp(name, "conv1"))
			conv1_f = json_number_value(json_object_get(l, "flops"));
		if (!strcmp(name, "conv1.backward"))
			conv1_b = json_number_value(json_object_get(l, "flops"));
	}
	CHECK_NEAR(conv1_b, conv1_f, 0);
	json_decref(res);

	snprintf(cmd, sizeof(cmd), "%s roofline --from '%s/r1/profile' --gpu 'NVIDIA H100 80GB HBM3' "
		 "--out '%s/r2' --csv 2>&1", test_bin(), dir, dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "%s", out);
	CHECK_MSG(strstr(out, "peaks of H100 SXM5 80GB: 67.0 TFLOP/s FP32"), "%s", out);
	snprintf(path, sizeof(path), "%s/r2/roofline.json", dir);
	res = NULL;
	CHECK_EQ_INT(result_read(path, &res), 0);
	if (!res)
		return;
	m = json_object_get(res, "measurements");
	CHECK_NEAR(json_number_value(json_object_get(json_object_get(m, "peak"), "mem_gb_s")), 3350, 0);
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(res, "settings"), "peak_source")),
		      "H100 SXM5 80GB"));
	int checked = 0;
	json_array_foreach(json_object_get(m, "layers"), i, l) {
		double f = json_number_value(json_object_get(l, "flops"));
		double b = json_number_value(json_object_get(l, "bytes"));
		double want = fmax(f / (67.0 * 1e9), b / (3350.0 * 1e6)); /* fp32: CUDA cores */
		CHECK_NEAR(json_number_value(json_object_get(l, "bound_ms")), want, 1e-8 * want); /* JSON keeps 10 digits */
		checked++;
	}
	CHECK(checked >= 20);
	conv = type_row(res, "conv2d forward");
	double gap = json_number_value(json_object_get(conv, "gap"));
	CHECK_NEAR(gap, json_number_value(json_object_get(conv, "ms")) /
			json_number_value(json_object_get(conv, "bound_ms")), 1e-8 * gap);
	json_decref(res);
	snprintf(path, sizeof(path), "%s/r2/roofline.csv", dir);
	CHECK(access(path, R_OK) == 0);
}

TEST(roofline_command_bad_input_one_clear_line)
{
	test_check_bad("roofline --from /nonexistent/run", "/nonexistent/run/result.json");
	test_check_bad("roofline --from /tmp --model resnet50", "--from takes the model");
	test_check_bad("roofline --gpu 'NVIDIA B200'", "not in the peaks table");
	test_check_bad("roofline --model nosuchnet", "nosuchnet");
	test_check_bad("roofline --precision fp8", "fp8");
}
