/* What a first-time user meets: the menu on a machine without a GPU, advise's last
 * line, analyze on a profile folder, options that must be refused, and the
 * train/ + val/ dataset layout. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmds.h"
#include "data/dataset.h"
#include "test.h"

/* The last line never recommends what the table calls "no gain": a 1.01x change
 * leaves the baseline as the advice; of the kept ones, the fastest wins. */
TEST(advise_pick_only_what_the_table_keeps)
{
	double img_s[] = { 100.0, 101.0, 90.0 };
	int kept_none[] = { 0, 0, 0 };
	CHECK_EQ_INT(advise_pick(img_s, kept_none, 3), 0);
	double img_s2[] = { 100.0, 120.0, 130.0, 125.0, 140.0 };
	int kept2[] = { 0, 1, 0, 1, 0 }; /* 130 is "faster, not best"; 140 not kept */
	CHECK_EQ_INT(advise_pick(img_s2, kept2, 5), 3);
	/* kept fixes together measured slower than one alone: the one alone */
	double img_s3[] = { 100.0, 120.0, 110.0, 115.0 };
	int kept3[] = { 0, 1, 1, 1 };
	CHECK_EQ_INT(advise_pick(img_s3, kept3, 4), 1);
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = calloc(1, 1 << 20);
	if (buf)
		fread(buf, 1, (1 << 20) - 1, f);
	fclose(f);
	return buf;
}

/* analyze on a profile folder rewrites profile_report.md from the trace and keeps
 * the overhead section, byte for byte, from the folder's result.json. */
TEST(analyze_keeps_the_overhead_section)
{
	char cmd[2048], out[16384], dir[600], report[700];
	snprintf(dir, sizeof(dir), "%s/prof", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s profile --model simple_cnn --device cpu --batch 4 --steps 2 "
		 "--baseline-steps 2 --out %s", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	snprintf(report, sizeof(report), "%s/profile_report.md", dir);
	char *before = read_text(report);
	CHECK(before && strstr(before, "## Profiler overhead") &&
	      strstr(before, "- overhead ratio: ") && strstr(before, "over 2 steps; target"));
	snprintf(cmd, sizeof(cmd), "%s analyze %s", test_bin(), dir);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	char *after = read_text(report);
	CHECK(after != NULL);
	if (before && after) {
		CHECK(strstr(after, "## Profiler overhead") != NULL);
		/* the analysis of the same trace is the same, and so is the appended section */
		CHECK_MSG(!strcmp(before, after), "report changed:\n%s\n---\n%s", before, after);
	}
	free(before);
	free(after);
}

TEST(analyze_help_lists_its_argument)
{
	char out[8192];
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s analyze --help", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "usage: gpuperf analyze DIR") != NULL);
	CHECK(strstr(out, "--help") != NULL);
	CHECK(strstr(out, "DIR: a folder that gpuperf profile") != NULL);
	CHECK(strstr(out, "profile_report.md") != NULL);
}

/* A negative dropout was read as "the model's own"; one at or past 1 drops all. */
TEST(train_dropout_out_of_range_is_refused)
{
	test_check_bad("train --model simple_cnn --device cpu --dropout -0.5",
		       "--dropout must be at least 0 and less than 1 (got -0.5)");
	test_check_bad("train --model simple_cnn --device cpu --dropout 1",
		       "--dropout must be at least 0 and less than 1 (got 1)");
	char cmd[1024], out[8192];
	snprintf(cmd, sizeof(cmd), "%s train --model simple_cnn --device cpu --dropout 0.25 --steps 1 "
		 "--batch 2 --classes 10", test_bin());
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
}

/* A bad model name is the only line, also where the default device would add a
 * "no GPU" note: the name is checked before the device is picked. */
TEST(bad_model_is_one_line_before_the_device_note)
{
	char dir[600], args[1024];
	snprintf(dir, sizeof(dir), "%s", test_tmpdir());
	test_check_bad("train --model vgg16", "unknown model 'vgg16'");
	test_check_bad("maxbatch --model vgg16", "unknown model 'vgg16'");
	test_check_bad("advise --model vgg16", "unknown model 'vgg16'");
	snprintf(args, sizeof(args), "workers --data %s --model vgg16", dir);
	test_check_bad(args, "unknown model 'vgg16'");
}

/* A folder of train/ and val/ is one dataset in two splits: training reads train/
 * (its classes, not "train" and "val"), evaluation val/, and train says so once. */
TEST(imagefolder_train_val_layout_uses_the_split)
{
	char root[600], cmd[2048], out[16384];
	snprintf(root, sizeof(root), "%s/ds", test_tmpdir());
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s/train --classes 3 --images 12 "
		 "--size 40x32 && %s dataset make --out %s/val --classes 3 --images 6 --size 40x32",
		 test_bin(), root, test_bin(), root);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	struct dataset *ds = NULL;
	CHECK_EQ_INT(dataset_open(root, 1, 32, &ds), 0);
	if (ds) {
		CHECK_EQ_INT(dataset_classes(ds), 3);
		CHECK_EQ_INT(dataset_count(ds), 12);
		CHECK(!strcmp(dataset_class_name(ds, 0), "class_000"));
		char want[700];
		snprintf(want, sizeof(want), "%s/train/class_000/", root);
		CHECK_MSG(!strncmp(dataset_path(ds, 0), want, strlen(want)), "%s", dataset_path(ds, 0));
		dataset_close(ds);
	}
	ds = NULL;
	CHECK_EQ_INT(dataset_open(root, 0, 32, &ds), 0);
	if (ds) {
		CHECK_EQ_INT(dataset_classes(ds), 3);
		CHECK_EQ_INT(dataset_count(ds), 6);
		dataset_close(ds);
	}
	snprintf(cmd, sizeof(cmd), "%s train --model simple_cnn --device cpu --steps 1 --batch 4 "
		 "--data %s", test_bin(), root);
	CHECK_MSG(test_run(cmd, out, sizeof(out)) == 0, "%s", out);
	char note[1400];
	snprintf(note, sizeof(note), "note: '%s' holds train/ and val/: training on '%s/train'\n",
		 root, root);
	CHECK_MSG(strstr(out, note) != NULL, "%s", out);
	const char *at = strstr(out, note);
	CHECK(at && strstr(at + strlen(note), "holds train/") == NULL); /* once */
	CHECK(strstr(out, "12 images, 3 classes") != NULL);
}

/* Every menu item on a machine without a GPU, each answer left empty: it runs with
 * CPU-sized defaults and no error, or says in one line why it cannot before asking
 * anything (monitor, amp). */
TEST(menu_every_item_with_defaults_without_a_gpu)
{
	static char out[1 << 18];
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s info", test_bin());
	test_run(cmd, out, sizeof(out));
	if (strstr(out, "GPU             none") == NULL)
		SKIP("a GPU is present");
	/* the item, then one empty answer per question it asks without a GPU */
	static const struct {
		const char *key;
		int questions;
		const char *ran;
	} items[] = {
		{ "1", 2, "$ gpuperf info --model resnet50 --batch 32\n" },
		{ "2", 4, "$ gpuperf compare --models simple_cnn,mobilenet_v2 --batch 8 --steps 3 --device auto\n" },
		{ "3", 3, "$ gpuperf maxbatch --model simple_cnn --device auto --mem-limit-mib 64\n" },
		{ "4", 4, "/menu_images --model simple_cnn --workers 0,2 --steps 10\n" },
		{ "5", 3, "$ gpuperf profile --model simple_cnn --batch 64 --steps 10\n" },
		{ "6", 3, "$ gpuperf train --model simple_cnn --batch 64 --steps 10\n" },
		{ "7", 5, "$ gpuperf advise --model simple_cnn --batch 32 --steps 10\n" },
		{ "8", 0, "choice> monitor: the monitor reads a GPU through NVML, and this machine has none\n\ngpuperf " },
		{ "9", 0, "choice> amp: fp16 and bf16 training needs a CUDA GPU, and this machine has none\n\ngpuperf " },
	};
	char answers[256] = "";
	for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
		strcat(answers, items[i].key);
		strcat(answers, "\\n");
		for (int q = 0; q < items[i].questions; q++)
			strcat(answers, "\\n");
	}
	snprintf(cmd, sizeof(cmd), "printf '%sq\\n' | %s menu", answers, test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "no GPU here (") != NULL);
	for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++)
		CHECK_MSG(strstr(out, items[i].ran) != NULL, "item %s: no '%s' in:\n%s", items[i].key,
			  items[i].ran, out);
	CHECK_MSG(strstr(out, "error") == NULL, "%s", strstr(out, "error"));
	CHECK(strstr(out, "no choice") == NULL); /* every answer went to a question */
	CHECK(strstr(out, "precision (fp32") == NULL); /* not asked without a GPU */
	CHECK(strstr(out, "making a small ImageFolder in ") != NULL);
	CHECK(strstr(out, "recommended batch ") != NULL);         /* maxbatch finished */
	CHECK(strstr(out, "recommended: ") != NULL);               /* workers finished */
	CHECK(strstr(out, "advice: ") != NULL);                    /* advise finished */
	CHECK(strstr(out, "profile written to ") != NULL);
	CHECK(strstr(out, "parameters            25557032") != NULL);
}

TEST(menu_help_is_not_an_error)
{
	char cmd[1024], out[8192];
	snprintf(cmd, sizeof(cmd), "%s menu --help", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "usage: gpuperf menu") != NULL);
	CHECK(strstr(out, "--help") != NULL);
	test_check_bad("menu --bogus", "menu takes no options but --help (got '--bogus')");
}
