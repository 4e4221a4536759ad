/* One table per concept: the names helper, the model, precision, device and layout
 * tables, and that help texts, messages and the menu list exactly what the tables
 * hold. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/names.h"
#include "nn/models.h"
#include "train/trainer.h"
#include "test.h"

static const char *abc_at(int i)
{
	static const char *const names[] = { "a", "bb", "c" };
	return i >= 0 && i < 3 ? names[i] : NULL;
}

static const char *none_at(int i)
{
	(void)i;
	return NULL;
}

TEST(names_join_and_find)
{
	char buf[64];
	CHECK(!strcmp(names_join(buf, sizeof(buf), abc_at, ", ", " or "), "a, bb or c"));
	CHECK(!strcmp(names_join(buf, sizeof(buf), abc_at, " | ", " | "), "a | bb | c"));
	CHECK(!strcmp(names_join(buf, sizeof(buf), none_at, ", ", " or "), ""));
	/* a short buffer keeps the names that fit whole */
	CHECK_MSG(!strcmp(names_join(buf, 6, abc_at, ", ", " or "), "a, bb"), "got '%s'", buf);
	CHECK_EQ_INT(names_find(abc_at, "bb"), 1);
	CHECK_EQ_INT(names_find(abc_at, "b"), -1);
	CHECK_EQ_INT(names_find(abc_at, NULL), -1);
}

/* Every row builds, its name is found, and its defaults are what model_defaults gives. */
TEST(tables_every_model_row_builds)
{
	int n = 0;
	for (int i = 0; model_info_at(i); i++, n++) {
		const struct model_info *m = model_info_at(i);
		CHECK(!strcmp(model_name_at(i), m->name));
		CHECK(model_find(m->name) == m);
		CHECK_EQ_INT(model_name_check(m->name), 0);
		struct model_opts o = model_defaults(m->name);
		CHECK_EQ_INT(o.size, m->size);
		CHECK_EQ_INT(o.classes, m->classes);
		o.size = 32;
		o.batch = 1;
		o.classes = 10;
		struct net *net = NULL;
		CHECK_MSG(model_build(m->name, &o, &net) == 0, "%s: %s", m->name, gp_errmsg());
		net_free(net);
	}
	CHECK_EQ_INT(n, 4);
	CHECK(model_name_at(n) == NULL && model_info_at(-1) == NULL && model_find("vgg16") == NULL);
	CHECK(model_name_check("vgg16") == GP_EINVAL);
	CHECK_MSG(strstr(gp_errmsg(), "(known: simple_cnn, resnet18, resnet50, mobilenet_v2)") != NULL,
		  "%s", gp_errmsg());
}

/* Names and enums agree both ways. */
TEST(tables_precision_device_layout_names_round_trip)
{
	for (int i = 0; train_precision_name_at(i); i++) {
		enum precision p;
		CHECK_EQ_INT(train_parse_precision(train_precision_name_at(i), &p), 0);
		CHECK_EQ_INT((int)p, i);
		CHECK(!strcmp(train_precision_name(p), train_precision_name_at(i)));
	}
	for (int i = 0; train_layout_choice_at(i); i++) {
		enum layout l;
		CHECK_EQ_INT(train_parse_layout(train_layout_choice_at(i), &l), 0);
		CHECK(!strcmp(train_layout_name(l), train_layout_choice_at(i)));
	}
	enum layout l = LAYOUT_NCHW;
	CHECK_EQ_INT(train_parse_layout(NULL, &l), 0);
	CHECK_EQ_INT((int)l, LAYOUT_AUTO);
	CHECK_EQ_INT(train_parse_layout("auto", &l), 0);
	CHECK_EQ_INT((int)l, LAYOUT_AUTO);
	CHECK(train_parse_layout("nwhc", &l) == GP_EINVAL);
	CHECK(!strcmp(train_device_name(BACKEND_CPU), "cpu"));
	CHECK(!strcmp(train_device_name(BACKEND_CUDA), "cuda"));
	enum backend_kind b = BACKEND_CUDA;
	CHECK_EQ_INT(train_pick_device("cpu", &b, 1), 0);
	CHECK_EQ_INT((int)b, BACKEND_CPU);
}

/* The help of each command that takes a model lists the table's models, and the
 * menu's first question does too. */
TEST(tables_help_and_menu_list_the_tables)
{
	static const char *const cmds[] = { "train", "info", "amp", "maxbatch", "workers",
					    "profile", "advise", "parity", "roofline" };
	char cmd[1024], out[16384], list[256], want[300];
	names_join(list, sizeof(list), model_name_at, " | ", " | ");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		snprintf(cmd, sizeof(cmd), "%s %s --help", test_bin(), cmds[i]);
		CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
		snprintf(want, sizeof(want), "--model S                %s", list);
		CHECK_MSG(strstr(out, want) != NULL, "%s --help lacks '%s':\n%s", cmds[i], want, out);
	}
	snprintf(cmd, sizeof(cmd), "%s train --help", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "--precision S            fp32 | tf32 | fp16 | bf16 (") != NULL);
	CHECK(strstr(out, "--device S               cpu | cuda | auto (") != NULL);
	CHECK(strstr(out, "--layout S               nchw | nhwc (") != NULL);
	/* the first question, then the end of input */
	snprintf(cmd, sizeof(cmd), "printf '1\\n' | %s menu", test_bin());
	test_run(cmd, out, sizeof(out));
	names_join(list, sizeof(list), model_name_at, ", ", ", ");
	snprintf(want, sizeof(want), "model (%s) [resnet50]", list);
	CHECK_MSG(strstr(out, want) != NULL, "menu lacks '%s':\n%s", want, out);
}
