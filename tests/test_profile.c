/* gpuperf profile and train --profile-epochs on the CPU backend (simple_cnn, 32x32,
 * batch 4, 3 steps): every output file, the trace read back and counted against the
 * net's nodes, the TensorBoard scalars, both charts, the overhead line, and errors.
 * The profiler's promise not to allocate while recording is checked in-process. */
#include <cairo.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "nn/models.h"
#include "nn/net.h"
#include "report/chrome_trace.h"
#include "report/profile_charts.h"
#include "report/profiler.h"
#include "train/trainer.h"
#include "test.h"

#define TINY "--model simple_cnn --size 32 --batch 4 --device cpu"

static int exists(const char *dir, const char *name)
{
	char path[4096];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* The first entry of dir whose name starts with prefix and ends with suffix. */
static int find_entry(const char *dir, const char *prefix, const char *suffix, char *out,
		      size_t cap)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct dirent *e;
	int found = 0;
	while (!found && (e = readdir(d))) {
		size_t n = strlen(e->d_name), ns = strlen(suffix);
		if (!strncmp(e->d_name, prefix, strlen(prefix)) && n >= ns &&
		    !strcmp(e->d_name + n - ns, suffix)) {
			snprintf(out, cap, "%s/%s", dir, e->d_name);
			found = 1;
		}
	}
	closedir(d);
	return found;
}

static int count_entries(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/* A PNG of w x h with enough ink: at least 2% of pixels not white, and some pixel
 * of the given colour (a bar or the line, not only axes and text). */
static void check_png(const char *path, int w, int h, double r, double g, double b)
{
	cairo_surface_t *s = cairo_image_surface_create_from_png(path);
	CHECK_MSG(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS, "'%s' is not a PNG", path);
	if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
		cairo_surface_destroy(s);
		return;
	}
	cairo_surface_flush(s);
	CHECK_EQ_INT(cairo_image_surface_get_width(s), w);
	CHECK_EQ_INT(cairo_image_surface_get_height(s), h);
	const unsigned char *data = cairo_image_surface_get_data(s);
	int stride = cairo_image_surface_get_stride(s), W = cairo_image_surface_get_width(s);
	long ink = 0, colour = 0;
	for (int y = 0; y < cairo_image_surface_get_height(s); y++)
		for (int x = 0; x < W; x++) {
			uint32_t px = *(const uint32_t *)(data + (size_t)y * stride + 4 * x);
			int pr = px >> 16 & 255, pg = px >> 8 & 255, pb = px & 255;
			ink += pr < 240 || pg < 240 || pb < 240;
			colour += abs(pr - (int)(r * 255)) < 8 && abs(pg - (int)(g * 255)) < 8 &&
				  abs(pb - (int)(b * 255)) < 8;
		}
	CHECK_MSG(ink > (long)w * h / 50, "'%s' looks blank: %ld inked pixels", path, ink);
	CHECK_MSG(colour > 100, "'%s' has only %ld pixels of the data colour", path, colour);
	cairo_surface_destroy(s);
}

static long range_count(const struct trace *t, const char *name, enum trace_cat cat)
{
	long n = 0;
	for (size_t i = 0; i < t->n_ranges; i++)
		n += t->ranges[i].cat == cat && !strcmp(t->ranges[i].name, name);
	return n;
}

/* The tiny net as the profiler saw it: its nodes and which have a backward. */
static struct net *tiny_net(void)
{
	struct model_opts mo = model_defaults("simple_cnn");
	mo.batch = 4;
	mo.size = 32;
	struct net *net = NULL;
	if (model_build("simple_cnn", &mo, &net) < 0)
		return NULL;
	if (net_setup(net, BACKEND_CPU, GP_F32, PREC_FP32) < 0) {
		net_free(net);
		return NULL;
	}
	return net;
}

/* Every step range, the four stages inside each step, a forward and (where the
 * node has one) a backward range per node and step, memory events. */
static void check_trace(const char *path, int steps, int first_step)
{
	struct trace t;
	CHECK_EQ_INT(chrome_trace_read(path, &t), 0);
	if (test_failed())
		return;
	struct net *net = tiny_net();
	CHECK(net != NULL);
	if (!net) {
		trace_free(&t);
		return;
	}
	CHECK_EQ_INT(t.n_steps, steps);
	char name[64];
	for (int s = 0; s < steps; s++) {
		snprintf(name, sizeof(name), "ProfilerStep#%d", first_step + s);
		CHECK_EQ_INT(range_count(&t, name, TRACE_USER_ANNOTATION), 1);
	}
	long steps_seen = 0;
	for (size_t i = 0; i < t.n_ranges; i++)
		steps_seen += !strncmp(t.ranges[i].name, "ProfilerStep#", 13);
	CHECK_EQ_INT(steps_seen, steps);
	static const char *stages[] = { "data", "forward", "backward", "optimizer" };
	for (int st = 0; st < 4; st++) {
		CHECK_EQ_INT(range_count(&t, stages[st], TRACE_USER_ANNOTATION), steps);
		/* one per step, inside the step's window */
		for (size_t k = 0; k < t.n_steps; k++) {
			int inside = 0;
			for (size_t i = 0; i < t.n_ranges; i++) {
				const struct trace_range *r = &t.ranges[i];
				inside += r->cat == TRACE_USER_ANNOTATION && !strcmp(r->name, stages[st]) &&
					  r->start_ns >= t.steps[k].start_ns &&
					  r->end_ns <= t.steps[k].end_ns;
			}
			CHECK_EQ_INT(inside, 1);
		}
	}
	long fwd = 0, bwd = 0, ops = 0;
	char label[GP_NAME_MAX + 16], bname[GP_NAME_MAX + 32];
	for (int i = 1; i < net->n_nodes; i++) {
		net_node_label(net, i, label, sizeof(label));
		snprintf(bname, sizeof(bname), "%s.backward", label);
		CHECK_EQ_INT(range_count(&t, label, TRACE_CPU_OP), steps);
		CHECK_EQ_INT(range_count(&t, bname, TRACE_CPU_OP), net->nodes[i].t_dy >= 0 ? steps : 0);
		fwd++;
		bwd += net->nodes[i].t_dy >= 0;
	}
	for (size_t i = 0; i < t.n_ranges; i++)
		ops += t.ranges[i].cat == TRACE_CPU_OP;
	/* layers, their backwards and one optimizer step each */
	CHECK_EQ_INT(ops, steps * (fwd + bwd + 1));
	CHECK(bwd >= 5);
	/* a baseline per category, then one sample per layer call and optimizer step */
	CHECK_EQ_INT(t.n_mem, MEM_NCAT + steps * (fwd + bwd + 1));
	CHECK_EQ_INT(t.mem[t.n_mem - 1].total_bytes, net->mem.total_bytes);
	CHECK(t.mem[t.n_mem - 1].total_bytes > 0);
	net_free(net);
	trace_free(&t);
}

/* The scalar tags of a TFRecord event file, by a plain scan of each record. */
static int tb_count_tag(const char *path, const char *tag)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	unsigned char hdr[12], data[4096], crc[4];
	int n = 0;
	while (fread(hdr, 1, 12, f) == 12) {
		uint64_t len = 0;
		for (int i = 0; i < 8; i++)
			len |= (uint64_t)hdr[i] << (8 * i);
		if (len > sizeof(data) || fread(data, 1, len, f) != len || fread(crc, 1, 4, f) != 4) {
			n = -1;
			break;
		}
		n += memmem(data, len, tag, strlen(tag)) != NULL;
	}
	fclose(f);
	return n;
}

TEST(profile_writes_every_output)
{
	char dir[512], cmd[1024], out[16384], path[4096], logs[600];
	snprintf(dir, sizeof(dir), "%s/prof", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s profile " TINY " --steps 3 --out '%s'", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "profile failed (%d): %s", rc, out);
	if (rc)
		return;
	static const char *files[] = { "profiler_trace.json", "profile_report.md", "analysis.json",
				       "result.json", "stage_breakdown.png", "memory_timeline.png" };
	for (int i = 0; i < 6; i++)
		CHECK_MSG(exists(dir, files[i]), "missing %s", files[i]);
	snprintf(logs, sizeof(logs), "%s/profiler_logs", dir);
	CHECK(find_entry(logs, "", ".pt.trace.json", path, sizeof(path)));
	CHECK(strstr(out, "profiler_trace.json (") && strstr(out, " MB)"));
	CHECK(strstr(out, "overhead: profiled ") != NULL);

	/* wait 1 + 3 timed + warmup 1: the recorded steps are 5, 6, 7 */
	snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
	check_trace(path, 3, 5);

	CHECK(find_entry(logs, "events.out.tfevents.", "", path, sizeof(path)));
	CHECK_EQ_INT(tb_count_tag(path, "profile/step_time_ms"), 3);
	CHECK_EQ_INT(tb_count_tag(path, "profile/img_per_s"), 3);
	CHECK_EQ_INT(tb_count_tag(path, "profile/memory_mib"), 3);
	if (test_run("python3 -c 'import tensorboard' ", out, sizeof(out)) == 0) {
		snprintf(cmd, sizeof(cmd), "python3 tools/check_tb.py '%s'", logs);
		rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc == 0, "check_tb.py failed (%d): %s", rc, out);
		CHECK(strstr(out, "profile/step_time_ms 5 ") && strstr(out, "profile/step_time_ms 7 "));
	}

	snprintf(path, sizeof(path), "%s/stage_breakdown.png", dir);
	check_png(path, PROFILE_CHART_W, PROFILE_CHART_H, 0.122, 0.467, 0.706);
	snprintf(path, sizeof(path), "%s/memory_timeline.png", dir);
	check_png(path, PROFILE_CHART_W, PROFILE_CHART_H, 0.122, 0.467, 0.706);

	snprintf(path, sizeof(path), "%s/profile_report.md", dir);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
	out[n] = 0;
	if (f)
		fclose(f);
	double ratio = 0;
	const char *line = strstr(out, "- overhead ratio: ");
	CHECK(line && sscanf(line, "- overhead ratio: %lfx", &ratio) == 1);
	CHECK(ratio > 0.2 && ratio < 5);
	CHECK(strstr(out, "- trace size: ") != NULL);

	json_t *res = json_load_file((snprintf(path, sizeof(path), "%s/result.json", dir), path), 0,
				     NULL);
	CHECK(res != NULL);
	if (res) {
		json_t *m = json_object_get(res, "measurements");
		CHECK(!strcmp(json_string_value(json_object_get(res, "command")), "profile"));
		CHECK_NEAR(json_real_value(json_object_get(m, "overhead_ratio")), ratio, 1e-3);
		CHECK(json_real_value(json_object_get(m, "baseline_ms_per_step")) > 0);
		CHECK_EQ_INT(json_integer_value(json_object_get(m, "baseline_steps")), 3);
		CHECK_EQ_INT(json_integer_value(json_object_get(m, "profiled_steps")), 3);
		/* the compute thread's time by stage sums to each step within 1% */
		json_t *steps = json_object_get(json_object_get(m, "analysis"), "steps");
		CHECK_EQ_INT(json_array_size(steps), 3);
		for (size_t i = 0; i < json_array_size(steps); i++) {
			json_t *st = json_array_get(steps, i), *v;
			const char *k;
			double sum = 0, dur = json_real_value(json_object_get(st, "dur_ms"));
			json_object_foreach(json_object_get(st, "device_stage_ms"), k, v)
				sum += json_real_value(v);
			CHECK(dur > 0 && fabs(sum - dur) <= 0.01 * dur);
			CHECK(json_real_value(json_object_get(json_object_get(st, "device_stage_ms"),
							       "forward")) > 0);
		}
		/* the plan's memory timeline: its peak is what the plan allocates, or up to 1%
		 * less for the greedy layout's gaps (test_mem_timeline.c) */
		json_t *tl = json_object_get(json_object_get(m, "analysis"), "memory_timeline");
		json_t *peak = json_object_get(tl, "peak");
		json_int_t pk = json_integer_value(json_object_get(peak, "total_bytes"));
		json_int_t plan = json_integer_value(json_object_get(tl, "plan_total_bytes"));
		CHECK(pk > 0);
		CHECK_MSG(pk <= plan && plan - pk <= plan / 100, "peak %lld, plan %lld", (long long)pk,
			  (long long)plan);
		CHECK(json_array_size(json_object_get(tl, "largest_at_peak")) > 0);
		json_decref(res);
	}

	/* analyze redraws both charts from the trace */
	snprintf(path, sizeof(path), "%s/stage_breakdown.png", dir);
	remove(path);
	snprintf(path, sizeof(path), "%s/memory_timeline.png", dir);
	remove(path);
	snprintf(cmd, sizeof(cmd), "%s analyze '%s'", test_bin(), dir);
	rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "analyze failed (%d): %s", rc, out);
	snprintf(path, sizeof(path), "%s/stage_breakdown.png", dir);
	check_png(path, PROFILE_CHART_W, PROFILE_CHART_H, 0.122, 0.467, 0.706);
	snprintf(path, sizeof(path), "%s/memory_timeline.png", dir);
	check_png(path, PROFILE_CHART_W, PROFILE_CHART_H, 0.122, 0.467, 0.706);
}

TEST(profile_train_epochs)
{
	char dir[512], cmd[1024], out[32768], sub[4096], path[4300];
	snprintf(dir, sizeof(dir), "%s/train", test_tmpdir());
	snprintf(cmd, sizeof(cmd),
		 "%s train " TINY " --profile-epochs 0 2 --epochs 3 --epoch-steps 2 "
		 "--profile-steps 1 --out '%s'", test_bin(), dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "train failed (%d): %s", rc, out);
	CHECK_EQ_INT(count_entries(dir, "profile_epoch_"), 2);
	CHECK(strstr(out, "6 steps") != NULL);
	/* epoch e starts at global step 2e; one recorded step each */
	for (int e = 0; e <= 2; e += 2) {
		char prefix[32];
		snprintf(prefix, sizeof(prefix), "profile_epoch_%d_", e);
		CHECK(find_entry(dir, prefix, "", sub, sizeof(sub)));
		snprintf(path, sizeof(path), "%s/profiler_trace.json", sub);
		check_trace(path, 1, 2 * e);
		CHECK(exists(sub, "stage_breakdown.png") && exists(sub, "memory_timeline.png") &&
		      exists(sub, "result.json") && exists(sub, "profile_report.md"));
	}
}

/* Each bad input: a non-zero exit and a single line that says what is wrong. */
TEST(profile_bad_input)
{
	static const struct {
		const char *args, *needle;
	} cases[] = {
		{ "profile " TINY " --steps 0", "--steps" },
		{ "profile --model nope --device cpu", "unknown model 'nope'" },
		{ "train " TINY " --profile-epochs 0 3 --epochs 3", "--profile-epochs 3" },
		{ "train " TINY " --profile-steps 2", "--profile-epochs" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char cmd[1024], out[4096];
		snprintf(cmd, sizeof(cmd), "%s %s", test_bin(), cases[i].args);
		int rc = test_run(cmd, out, sizeof(out));
		CHECK_MSG(rc != 0, "'%s' succeeded", cases[i].args);
		CHECK_MSG(strstr(out, "error:") && strstr(out, cases[i].needle),
			  "'%s' said: %s", cases[i].args, out);
		int lines = 0;
		for (const char *p = out; *p; p++)
			lines += *p == '\n';
		CHECK_MSG(lines == 1, "'%s' printed %d lines: %s", cases[i].args, lines, out);
	}
}

/* Recording two steps fills exactly the counted events and grows nothing: the
 * arrays and the name table were sized by profiler_init. */
TEST(profiler_hooks_allocate_nothing)
{
	struct net *net = tiny_net();
	CHECK(net != NULL);
	if (!net)
		return;
	float *x = NULL;
	int32_t *labels = NULL;
	struct profiler p;
	CHECK_EQ_INT(train_synthetic_batch(4, 3, 32, 32, net->classes, 1, &x, &labels), 0);
	CHECK_EQ_INT(profiler_init(&p, net, 10, 2, 1), 0);
	if (test_failed())
		goto free_net;
	size_t cap_ranges = p.trace.cap_ranges, cap_mem = p.trace.cap_mem;
	size_t names = p.trace.n_names, cap_steps = p.trace.cap_steps;
	struct sgd_args sgd = { .lr = 0.01, .momentum = 0.9 };
	CHECK_EQ_INT(profiler_start(&p), 0);
	for (int s = 10; s < 12; s++) {
		CHECK_EQ_INT(profiler_step_begin(&p, s), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_DATA, 1), 0);
		CHECK_EQ_INT(net_set_batch_data(net, x, labels), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_DATA, 0), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_FORWARD, 1), 0);
		CHECK_EQ_INT(net_forward(net, 1), 0);
		CHECK_EQ_INT(net_loss(net, NULL, NULL), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_FORWARD, 0), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_BACKWARD, 1), 0);
		CHECK_EQ_INT(net_backward(net), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_BACKWARD, 0), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_OPTIMIZER, 1), 0);
		CHECK_EQ_INT(net_sgd_step(net, &sgd), 0);
		CHECK_EQ_INT(profiler_stage(&p, TRAIN_STAGE_OPTIMIZER, 0), 0);
		CHECK_EQ_INT(profiler_step_end(&p, 0), 0);
	}
	CHECK_EQ_INT(profiler_stop(&p), 0);
	CHECK(net->hooks.node_begin == NULL && net->hooks.node_end == NULL);
	long calls = 0;
	for (int i = 1; i < net->n_nodes; i++)
		calls += 1 + (net->nodes[i].t_dy >= 0);
	/* step + 4 stages + layer calls + optimizer, per step */
	CHECK_EQ_INT(p.trace.n_ranges, 2 * (5 + calls + 1));
	CHECK_EQ_INT(p.trace.n_mem, MEM_NCAT + 2 * (calls + 1));
	CHECK_EQ_INT(p.trace.n_steps, 2);
	CHECK_EQ_INT(p.trace.cap_ranges, cap_ranges);
	CHECK_EQ_INT(p.trace.cap_mem, cap_mem);
	CHECK_EQ_INT(p.trace.n_names, names);
	CHECK_EQ_INT(p.trace.cap_steps, cap_steps);
	profiler_free(&p);
free_net:
	free(x);
	free(labels);
	net_free(net);
}

/* With an ImageFolder and loader threads, the data stage holds the loader's batches:
 * the run succeeds and its result names the data, the worker count and where the
 * pixels were made. */
TEST(profile_with_a_dataset)
{
	char cmd[2048], out[16384], dir[512], res[600];
	const char *tmp = test_tmpdir();
	snprintf(dir, sizeof(dir), "%s/ds", tmp);
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s --classes 3 --images 24 --size 48x40",
		 test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(cmd, sizeof(cmd), "%s profile --model simple_cnn --device cpu --batch 4 --steps 2 "
		 "--baseline-steps 2 --data %s --workers 2 --out %s/prof", test_bin(), dir, tmp);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	snprintf(res, sizeof(res), "%s/prof/result.json", tmp);
	json_error_t e;
	json_t *j = json_load_file(res, 0, &e);
	CHECK_MSG(j != NULL, "%s: %s", res, e.text);
	if (!j)
		return;
	json_t *settings = json_object_get(j, "settings");
	CHECK(json_is_string(json_object_get(settings, "data")) &&
	      !strcmp(json_string_value(json_object_get(settings, "data")), dir));
	CHECK_EQ_INT(json_integer_value(json_object_get(settings, "workers")), 2);
	const char *decode = json_string_value(json_object_get(settings, "decode"));
	CHECK_MSG(decode && !strcmp(decode, "cpu"), "settings.decode: %s", decode ? decode : "(none)");
	json_decref(j);
}

/* A file beside the result that cannot be written (here profile_report.md is a
 * folder, so the atomic rename fails) does not cost the measurements: result.json is
 * still written, and the run ends with one error line naming that file. */
TEST(profile_failed_side_file_keeps_the_result)
{
	char cmd[2048], out[16384], res[600];
	const char *tmp = test_tmpdir();
	snprintf(cmd, sizeof(cmd), "mkdir -p %s/prof/profile_report.md && %s profile --model "
		 "simple_cnn --device cpu --batch 4 --steps 2 --baseline-steps 1 --out %s/prof",
		 tmp, test_bin(), tmp);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
	const char *e = strstr(out, "gpuperf profile: error: cannot write '");
	const char *nl = e ? strchr(e, '\n') : NULL;
	const char *name = e ? strstr(e, "prof/profile_report.md'") : NULL;
	CHECK_MSG(e && name && (!nl || name < nl), "%s", out);
	CHECK_MSG(e && (!nl || !strstr(nl, "error:")), "more than one error line: %s", out);
	snprintf(res, sizeof(res), "%s/prof/result.json", tmp);
	json_error_t je;
	json_t *j = json_load_file(res, 0, &je);
	CHECK_MSG(j != NULL, "%s: %s", res, je.text);
	if (!j)
		return;
	CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "measurements"),
							"profiled_steps")), 2);
	json_decref(j);
}

/* The optimizer step's range takes torch.profiler's name for the optimizer the net
 * was set up with: "Optimizer.step#AdamW.step" for AdamW, not SGD's. */
TEST(profiler_names_the_optimizer_step)
{
	struct net *net = tiny_net();
	CHECK(net != NULL);
	if (!net)
		return;
	static const struct {
		enum optim_kind kind;
		const char *name;
	} cases[] = { { OPTIM_SGD, "Optimizer.step#SGD.step" },
		      { OPTIM_ADAMW, "Optimizer.step#AdamW.step" } };
	enum optim_kind saved = net->optim.kind;
	for (size_t c = 0; c < 2; c++) {
		struct profiler p;
		net->optim.kind = cases[c].kind;
		CHECK_EQ_INT(profiler_init(&p, net, 0, 1, 0), 0);
		if (test_failed())
			break;
		CHECK(p.opt_name && !strcmp(p.opt_name, cases[c].name));
		const struct trace_layer *l = &p.trace.layers[p.trace.n_layers - 1];
		CHECK(!strcmp(l->name, cases[c].name) && !strcmp(l->op, "optimizer"));
		profiler_free(&p);
	}
	net->optim.kind = saved;
	net_free(net);
}
