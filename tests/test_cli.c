/* The command line as a person meets it: the main job works, and bad input gives
 * one clear line on stderr and a non-zero exit. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "test.h"

static int run(const char *args, char *out, size_t cap)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%.500s %.1500s", test_bin(), args);
	return test_run(cmd, out, cap);
}

/* One line, non-zero exit, and the line names the problem. */
static void check_bad(const char *args, const char *needle)
{
	char out[4096];
	int rc = run(args, out, sizeof(out));
	CHECK_MSG(rc != 0, "'%s' exited 0", args);
	CHECK_MSG(test_count_lines(out) == 1, "'%s' printed %d lines: %s", args, test_count_lines(out), out);
	CHECK_MSG(strstr(out, needle) != NULL, "'%s' said '%s', expected '%s'", args, out, needle);
	CHECK_MSG(strstr(out, "error") != NULL, "'%s' said '%s'", args, out);
}

TEST(cli_bad_input_one_clear_line)
{
	check_bad("train --model vgg16 --device cpu", "unknown model 'vgg16'");
	check_bad("train --model simple_cnn --device cpu --batch 0", "--batch must be between 1 and 65536 (got 0)");
	check_bad("train --model simple_cnn --device cpu --bogus 3", "unknown option '--bogus'");
	check_bad("train --model simple_cnn --device cpu --batch abc", "'abc' is not an integer");
	check_bad("train --model simple_cnn --device cpu --steps", "--steps needs a value");
	check_bad("train --model simple_cnn --device cpu --load /nonexistent/w.safetensors",
		  "cannot open '/nonexistent/w.safetensors'");
	check_bad("info --model resnet51", "unknown model 'resnet51'");
	check_bad("info --model resnet50 --precision fp8", "--precision must be fp32, tf32, fp16 or bf16 (got 'fp8')");
	check_bad("frobnicate", "unknown command 'frobnicate'");
	check_bad("train --model simple_cnn --device tpu", "--device must be cpu, cuda or auto");
}

TEST(cli_corrupt_weights_file)
{
	char path[512], args[1024], out[4096];
	snprintf(path, sizeof(path), "%s/corrupt.safetensors", test_tmpdir());
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("this is not a safetensors file at all, just text", f);
	fclose(f);
	snprintf(args, sizeof(args), "train --model simple_cnn --device cpu --steps 1 --load %s", path);
	check_bad(args, "not a safetensors file");
	/* a valid file of another model: strict loading names the mismatch */
	snprintf(path, sizeof(path), "%s/r18.safetensors", test_tmpdir());
	snprintf(args, sizeof(args), "train --model simple_cnn --device cpu --steps 1 --classes 10 --save %s", path);
	CHECK_EQ_INT(run(args, out, sizeof(out)), 0);
	snprintf(args, sizeof(args), "train --model simple_cnn --device cpu --steps 1 --classes 20 --load %s", path);
	check_bad(args, "fc2.weight");
}

TEST(cli_no_gpu_device_cuda_is_one_line)
{
	char out[4096];
	run("info", out, sizeof(out));
	if (strstr(out, "GPU             none") == NULL)
		SKIP("a GPU is present");
	check_bad("train --model simple_cnn --device cuda --steps 1", "--device cuda");
	/* the default device falls back to the CPU with a one-line note */
	int rc = run("train --model simple_cnn --steps 2 --batch 4 --classes 10", out, sizeof(out));
	CHECK_EQ_INT(rc, 0);
	CHECK(strstr(out, "note: no GPU") != NULL);
}

TEST(cli_info_and_train_main_job)
{
	char out[65536];
	CHECK_EQ_INT(run("info --model resnet50", out, sizeof(out)), 0);
	CHECK(strstr(out, "parameters            25557032") != NULL);
	CHECK(strstr(out, "layer4.2.conv3") != NULL);
	CHECK_EQ_INT(run("info --model mobilenet_v2 --json --batch 8", out, sizeof(out)), 0);
	CHECK(strstr(out, "\"params\": 3504872") != NULL);
	/* mixed precision: 16-bit activations (half the arena), float masters beside 16-bit
	 * weight and gradient copies (1.5x the weights) */
	char out16[65536];
	CHECK_EQ_INT(run("info --model mobilenet_v2 --json --batch 8 --precision bf16", out16, sizeof(out16)), 0);
	json_error_t jerr;
	json_t *j32 = json_loads(out, 0, &jerr), *j16 = json_loads(out16, 0, &jerr);
	CHECK(j32 && j16);
	if (j32 && j16) {
		json_t *m32 = json_object_get(j32, "training_bytes"), *m16 = json_object_get(j16, "training_bytes");
		double a32 = json_number_value(json_object_get(m32, "activation_arena_peak"));
		double a16 = json_number_value(json_object_get(m16, "activation_arena_peak"));
		double w32 = json_number_value(json_object_get(m32, "weights"));
		double w16 = json_number_value(json_object_get(m16, "weights"));
		CHECK_MSG(a16 > 0.45 * a32 && a16 < 0.55 * a32, "arena %.0f in bf16 against %.0f", a16, a32);
		CHECK_MSG(w16 > 1.4 * w32 && w16 < 1.5 * w32, "weights %.0f in bf16 against %.0f", w16, w32);
		CHECK(!strcmp(json_string_value(json_object_get(j16, "precision")), "bf16"));
	}
	json_decref(j32);
	json_decref(j16);
	CHECK_EQ_INT(run("train --model simple_cnn --device cpu --steps 3 --batch 8 --classes 10 --json", out,
			 sizeof(out)), 0);
	CHECK(strstr(out, "step     3/3") != NULL);
	CHECK(strstr(out, "\"img_s\"") != NULL);
}

/* The menu: a choice runs its command with the settings typed (defaults where the
 * answer is empty), an unknown choice is named, q or the end of input leaves. */
TEST(cli_menu_runs_the_chosen_command)
{
	char cmd[1024], out[65536];
	snprintf(cmd, sizeof(cmd), "printf '1\\nresnet18\\n\\n42\\nq\\n' | %s menu", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "$ gpuperf info --model resnet18 --batch 32") != NULL);
	CHECK(strstr(out, "parameters            11689512") != NULL);
	CHECK(strstr(out, "no choice '42'") != NULL);
	/* bench's yes/no questions: another answer is asked again; y gives the flag,
	 * n leaves it out (a missing --data folder fails before any stage runs) */
	snprintf(cmd, sizeof(cmd), "printf '10\\nmaybe\\ny\\n/nonexistent/x\\nn\\n"
		 "bench\\nn\\n/nonexistent/y\\ny\\nq\\n' | %s menu 2>&1", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "y or n [y]: ") != NULL);
	CHECK_MSG(strstr(out, "$ gpuperf bench --quick --data /nonexistent/x\n") != NULL, "%s", out);
	CHECK(strstr(out, "$ gpuperf bench --data /nonexistent/y --torch\n") != NULL);
	CHECK(strstr(out, "--data '/nonexistent/y'") != NULL);
	/* plain gpuperf without a terminal prints the usage, not the menu */
	snprintf(cmd, sizeof(cmd), "%s < /dev/null", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK(strstr(out, "usage: gpuperf COMMAND") != NULL);
	CHECK(strstr(out, "choice>") == NULL);
}
