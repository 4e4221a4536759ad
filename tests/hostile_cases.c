/* The hostile battery's cases (test_hostile.c runs them): a table by theme (the
 * command line, paths, full disk and closed outputs, weights, data, files for plot and
 * analyze, diff, bench, interruption, other commands at their edges), then every
 * numeric option of every command at three bad values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile.h"

/* The cases about a machine without a GPU skip where the NVIDIA driver is (the GPU
 * machine runs the battery too). */
#define NO_GPU "[ -e /dev/nvidiactl ] && exit 77; exit 0"

/* Tiny runs, as TR (hostile.h) for train. */
#define PR "profile --model simple_cnn --device cpu --size 32 --batch 2 --classes 10 --steps 1 " \
	   "--baseline-steps 1 --wait 0 --warmup 0 "
#define LD "loader --batch 2 --batches 2 --size 16 --workers 0 "
/* A folder no one may write: a read-only tmpfs for root (who ignores modes), else
 * mode 555. */
#define RO_DIR "mkdir ro && if [ \"$(id -u)\" = 0 ]; then mount -t tmpfs -o ro,size=4m none ro " \
	       "|| { echo 'cannot mount a tmpfs'; exit 77; }; else chmod 555 ro; fi"
/* A 64 KiB file system that is full. */
#define FULL_FS "[ \"$(id -u)\" = 0 ] || { echo 'mounting a tmpfs needs root'; exit 77; }; " \
		"mkdir full && mount -t tmpfs -o size=64k none full || exit 77; head -c 1M /dev/zero > full/fill 2>/dev/null; true"
/* train.json is whole and holds no progress line (without a JSON tool at hand). */
#define WHOLE_RESULT "head -c 1 o/train.json | grep -q '{' && [ \"$(tail -n 1 o/train.json)\" = '}' ] " \
		     "&& ! grep -q 'step ' o/train.json"
/* What a minute's wait does to the temporary files a killed run left. */
#define AGE_TMP "find . -name '.*.tmp.*' -exec touch -d '-2 minutes' {} +; "
/* Wait until the run in the background printed its first step (at most 15 s). */
#define WAIT_STEP(log) "i=0; while ! grep -q 'step ' " log " && kill -0 $p 2>/dev/null && " \
		       "[ $i -lt 1500 ]; do sleep 0.01; i=$((i+1)); done; "

/* A background job of a non-interactive shell starts with SIGINT ignored until
 * gpuperf's main installs its handler, which comes after the dynamic loader has mapped
 * cuDNN, cuBLAS and OpenBLAS: on a loaded machine that can take longer than the sleeps
 * below. Wait until the process catches SIGINT (bit 2 of SigCgt; at most 20 s). */
#define STARTED "for i in $(seq 400); do m=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$p/status " \
		"2>/dev/null); [ -n \"$m\" ] && [ $((0x$m & 2)) -ne 0 ] && break; sleep 0.05; done; "
static const struct hcase cases[] = {
	/* --- the command line -------------------------------------------------------- */
	{ "unknown command", "frobnicate", 2, "unknown command 'frobnicate'" },
	{ "command of one dash", "-x", 2, "unknown command '-x'" },
	{ "unknown option", TR "--bogus", 2, "unknown option '--bogus'" },
	{ "unknown option with a value", TR "--bogus=3", 2, "unknown option '--bogus'" },
	{ "bare --", TR "--", 2, "unknown option '--'" },
	{ "single-dash option", TR "-steps 3", 2, "unexpected argument '-steps'" },
	{ "stray argument", TR "extra", 2, "unexpected argument 'extra'" },
	{ "missing value at the end", TR "--out", 2, "--out needs a value" },
	{ "missing value before an option", "train --device cpu --batch --steps 1", 2,
	  "--batch needs a value" },
	{ "empty value after =", TR "--batch=", 2, "--batch: empty value" },
	{ "empty value", TR "--batch ''", 2, "--batch: empty value" },
	{ "flag given a value", TR "--json=yes", 2, "--json takes no value" },
	{ "integer with trailing text", TR "--batch 4x", 2, "'4x' is not an integer" },
	{ "integer in hex", TR "--batch 0x10", 2, "'0x10' is not an integer" },
	{ "integer with spaces", TR "--batch ' 4 '", 2, "is not an integer" },
	{ "fraction for an integer", TR "--steps 1.5", 2, "'1.5' is not an integer" },
	{ "very long integer", TR "--batch 0000000000000000000000000000000000000000000000000000000000000000001",
	  2, "is not an integer" },
	{ "real with text", TR "--lr 0.1abc", 2, "'0.1abc' is not a number" },
	{ "hex real overflowing", TR "--lr 0x1p99999", 2, "--lr must be a finite number" },
	{ "denormal learning rate", TR "--lr 1e-320", 2, "--lr must be a finite number" },
	{ "unknown model", "train --model vgg16 --device cpu", 2, "unknown model 'vgg16'" },
	{ "empty model", "train --model '' --device cpu", 2, "unknown model ''" },
	{ "unknown model for info", "info --model resnet51", 2, "unknown model 'resnet51'" },
	{ "unknown model, default device", "train --model vgg16 --steps 1", 2,
	  "unknown model 'vgg16'" },
	{ "unknown model in a list", "compare --device cpu --models simple_cnn,vgg16", 2,
	  "unknown model 'vgg16'" },
	{ "empty model list", "compare --device cpu --models ,", 2, "--models" },
	{ "unknown device", TR "--device tpu", 2, "--device must be cpu, cuda or auto" },
	{ "empty device", TR "--device ''", 2, "--device must be cpu, cuda or auto" },
	{ "unknown precision", TR "--precision fp8", 2, "--precision must be" },
	{ "unknown precision for info", "info --model resnet50 --precision fp8", 2,
	  "--precision must be fp32, tf32, fp16 or bf16 (got 'fp8')" },
	{ "fp16 on the CPU", TR "--precision fp16", 1, "needs the CUDA backend" },
	{ "unknown layout", TR "--layout nwhc", 2, "--layout" },
	{ "unknown precision in amp's list", "amp --device cpu --model simple_cnn --precisions fp32,fp7",
	  2, "fp7" },
	{ "device cuda without a GPU", TR "--device cuda", 1, "--device cuda", NO_GPU },
	{ "maxbatch on cuda without a GPU", "maxbatch --device cuda --model simple_cnn", 1,
	  "--device cuda", NO_GPU },
	{ "contradicting flags", "maxbatch --device cpu --model simple_cnn --recompute --no-recompute",
	  2, "contradict" },
	{ "non-UTF-8 model name", "!exec \"$G\" train --device cpu --model \"$(printf 'x\\377\\376')\"",
	  2, "unknown model" },
	{ "very long model name",
	  "!exec \"$G\" train --device cpu --model \"$(head -c 100000 /dev/zero | tr '\\0' a)\"", 2,
	  "unknown model" },
	{ "very long option name", "!exec \"$G\" train --\"$(head -c 100000 /dev/zero | tr '\\0' a)\"",
	  2, "unknown option" },
	{ "very long --out path",
	  "!exec \"$G\" " TR "--out \"$(head -c 5000 /dev/zero | tr '\\0' a)\"", 2, "" },
	{ "deep --out path",
	  "!exec \"$G\" " TR "--out \"$(for i in $(seq 700); do printf 'abcde/'; done)\"", 2, "path too long" },
	{ "list over the cap",
	  "amp --device cpu --batches 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,"
	  "25,26,27,28,29,30,31,32,33", 2, "--batches: more than 32 values" },
	{ "list over the cap in bare values",
	  "!exec \"$G\" train --device cpu --epochs 40 --profile-epochs $(seq 0 39)", 2,
	  "--profile-epochs: more than 32 values" },
	{ "list of commas only", LD "--data synthetic --workers ,,,", 2,
	  "--workers: give at least one worker count" },
	{ "list with a bad item", "workers --device cpu --data x --workers 0,two", 2,
	  "'two' is not an integer" },
	{ "non-UTF-8 list", "!exec \"$G\" amp --device cpu --batches \"$(printf '\\377')\"", 2,
	  "is not an integer" },
	{ "help of every command",
	  "!for c in info train plot analyze parity dataset loader compare amp maxbatch workers "
	  "profile advise menu monitor bench diff; do \"$G\" $c --help > /dev/null || exit 1; done", 0 },
	{ "help among other options", TR "--bogus --help", 2, "unknown option '--bogus'" },
	{ "plain gpuperf without a terminal", "", 0, "usage: gpuperf COMMAND" },
	{ "version", "--version", 0, "gpuperf " },
	{ "dataset without make", "dataset --out x", 2, "make" },
	{ "dataset with another verb", "dataset delete", 2, "unknown dataset command 'delete'" },
	{ "dataset size not WxH", "dataset make --out ds --size 40", 2, "--size" },
	{ "dataset size zero", "dataset make --out ds --size 0x40", 2, "--size" },
	{ "dataset size huge", "dataset make --out ds --size 99999999999x99999999999", 2, "--size" },
	{ "dataset size negative", "dataset make --out ds --size -5x-5", 2, "--size" },
	{ "dataset size with text", "dataset make --out ds --size 40x40px", 2, "--size" },

	/* --- paths --------------------------------------------------------------------- */
	{ "empty --out", TR "--out ''", 2, "--out: empty path" },
	{ "empty --save", TR "--save ''", 2, "--save: empty path" },
	{ "empty --load", TR "--load ''", 2, "--load: empty path" },
	{ "empty --data", TR "--data ''", 2, "--data: empty path" },
	{ "cifar10: without a folder", TR "--data cifar10:", 2, "names no folder" },
	{ "empty plot file", "plot ''", 2, "empty path" },
	{ "empty analyze folder", "analyze ''", 2, "empty path" },
	{ "dataset make --out empty", "dataset make --out ''", 2, "--out: empty path" },
	{ "profile --out empty", PR "--out ''", 2, "--out: empty path" },
	{ "parity --out empty", "parity --out ''", 2, "--out: empty path" },
	{ "--out is a file", TR "--out afile", 1, "cannot create directory", "touch afile" },
	{ "--out under a file", TR "--out afile/sub", 1, "cannot create directory", "touch afile" },
	{ "--out read-only", TR "--out ro/o", 1, "ro/o", RO_DIR },
	{ "--save read-only", TR "--save ro/w.safetensors --out o", 1, "cannot write in 'ro'", RO_DIR,
	  "[ ! -e o/train.json ]" },
	{ "--save is a folder", TR "--save . --out o", 2, "is a folder, not a file" },
	{ "--save into a missing folder", TR "--save no/such/w.safetensors --out o", 0,
	  "saved no/such/w.safetensors", NULL, "[ -s no/such/w.safetensors ]" },
	{ "results folder is a file", TR, 1, "res", "rm -rf res && touch res" , NULL, H_CHANGES },
	{ "results folder read-only", "!GPUPERF_RESULTS=ro/res exec \"$G\" " TR, 1, "ro/res", RO_DIR },
	{ "profile --out is a file", PR "--out afile", 1, "cannot create directory", "touch afile" },
	{ "dataset make into a file", "dataset make --out afile --classes 1 --images 1 --size 8x8", 1,
	  "afile", "touch afile" },
	{ "dataset make read-only", "dataset make --out ro/ds --classes 1 --images 1 --size 8x8", 1,
	  "ro/ds", RO_DIR },
	{ "plot into a read-only folder", "plot \"$F/sample_amp.json\" --out ro", 1, "ro", RO_DIR },
	{ "analyze a read-only folder", "analyze ro", 1, "ro",
	  RO_DIR " && { mount -o remount,rw ro 2>/dev/null || chmod 755 ro; } && "
	  "cp \"$F/trace/profiler_trace.json\" ro/ && "
	  "{ mount -o remount,ro ro 2>/dev/null || chmod 555 ro; }" },
	{ "--save a FIFO", TR "--save fifo --out o", 2, "'fifo' is not a regular file", "mkfifo fifo",
	  "[ -p fifo ] && [ ! -e o/train.json ]" },
	{ "--save a device node", TR "--save null --out o", 2, "'null' is not a regular file",
	  "[ \"$(id -u)\" = 0 ] || { echo 'mknod needs root'; exit 77; }; mknod null c 1 3", "[ -c null ]" },
	{ "--save a link to /dev/null", TR "--save wl --out o", 0, "saved wl", "ln -s /dev/null wl",
	  "[ -c /dev/null ] && [ -f wl ]", H_CHANGES },
	{ "result file a FIFO, --overwrite", TR "--out o --overwrite", 1, "it is a FIFO",
	  "mkdir o && mkfifo o/train.json", "[ -p o/train.json ]", H_LINES },
	{ "--out in /proc", TR "--out /proc/gpuperf_o", 1, "cannot create directory" },
	{ "--out holds a result", TR "--out o", 2, "holds an earlier result",
	  "mkdir o && cp \"$F/train.json\" o/" },
	{ "--out holds a result, --overwrite", TR "--out o --overwrite", 0, "wrote o/train.json",
	  "mkdir o && cp \"$F/train.json\" o/", NULL, H_CHANGES },
	{ "two runs, two folders", "!\"$G\" " TR "> /dev/null && exec \"$G\" " TR, 0, "wrote res/train_",
	  NULL, "[ $(ls -d res/train_* | wc -l) -eq 3 ]" },
	{ "non-UTF-8 --out", "!exec \"$G\" " TR "--out \"o$(printf '\\377')\"", 0, "wrote o",
	  NULL, "ls o* | grep -q train.json" },
	{ "non-UTF-8 --save", "!exec \"$G\" " TR "--out o --save \"w$(printf '\\377').safetensors\"",
	  0, "wrote o/train.json" },
	{ "--out with a newline", "!exec \"$G\" " TR "--out \"$(printf 'a\\nb')\"", 0, "" },

	/* --- full disk and closed outputs ---------------------------------------------- */
	{ "result on a full disk", TR "--out full/o", 1, "cannot write 'full/o/train.json'", FULL_FS,
	  "grep -q '\"measurements\"' ../out.log" },
	{ "save on a full disk", TR "--out o --save full/w.safetensors", 1, "full/w.safetensors",
	  FULL_FS, "[ -f o/train.json ] && [ ! -e full/w.safetensors ]", H_LINES },
	{ "dataset make on a full disk", "dataset make --out full/ds --classes 2 --images 50 --size 64x64",
	  1, "full/ds", FULL_FS, NULL, H_LINES },
	{ "earlier result kept on a full disk", TR "--out full/o --overwrite", 1, "full/o",
	  FULL_FS " && rm full/fill && mkdir full/o && cp \"$F/train.json\" full/o/ && "
	  "head -c 1M /dev/zero > full/fill 2>/dev/null; true",
	  "cmp full/o/train.json \"$F/train.json\"", H_LINES },
	{ "stdout is /dev/full", "!exec \"$G\" " TR "--out o > /dev/full", 1,
	  "cannot write to standard output", NULL, WHOLE_RESULT },
	{ "json to /dev/full", "!exec \"$G\" " TR "--out o --json > /dev/full", 1,
	  "cannot write to standard output" },
	{ "info --json to /dev/full", "!exec \"$G\" info --model resnet18 --json > /dev/full", 1,
	  "cannot write to standard output" },
	{ "stdout closed", "!exec \"$G\" " TR "--out o >&-", 1, "cannot write to standard output",
	  NULL, WHOLE_RESULT },
	{ "stdout a closed pipe", "!\"$G\" info --model resnet50 | head -c 1 > /dev/null; exit 0",
	  0 },

	/* --- weights ----------------------------------------------------------------------- */
	{ "load a missing file", TR "--load nowhere.safetensors", 1, "cannot open 'nowhere.safetensors'" },
	{ "load a 0-byte file", TR "--load w.safetensors", 1, "w.safetensors", "touch w.safetensors" },
	{ "load text", TR "--load w.safetensors", 1, "not a safetensors file",
	  "echo 'not a safetensors file at all' > w.safetensors" },
	{ "load a folder", TR "--load .", 1, "is not a regular file (a directory)" },
	{ "load a FIFO", TR "--load w.safetensors", 1, "is not a regular file (a FIFO)",
	  "mkfifo w.safetensors" },
	{ "load /dev/zero", TR "--load /dev/zero", 1, "is not a regular file (a character device)" },
	{ "load truncated weights", TR "--load w.safetensors", 1, "w.safetensors",
	  "head -c 5000 \"$F/w.safetensors\" > w.safetensors" },
	{ "load weights cut in the header", TR "--load w.safetensors", 1, "w.safetensors",
	  "head -c 100 \"$F/w.safetensors\" > w.safetensors" },
	{ "load a huge header length", TR "--load w.safetensors", 1, "w.safetensors",
	  "printf '\\377\\377\\377\\377\\377\\377\\377\\177{}' > w.safetensors" },
	{ "load weights of another shape", TR "--classes 20 --load \"$F/w.safetensors\"", 1,
	  "fc2.weight" },
	{ "load weights of another model", "train --model resnet18 --device cpu --size 32 --batch 2 "
	  "--steps 1 --classes 10 --load \"$F/w.safetensors\"", 1, "" },
	{ "load weights with a NaN", TR "--load w.safetensors --out o", 0, "warning: the loss became NaN",
	  "cp \"$F/w.safetensors\" w.safetensors && sz=$(stat -c %s w.safetensors) && "
	  "printf '\\377\\377\\377\\177' | dd of=w.safetensors bs=1 seek=$((sz-4)) conv=notrunc "
	  "2>/dev/null" },
	{ "save over the weights loaded", TR "--load w.safetensors --save w.safetensors --out o", 0,
	  "saved w.safetensors", "cp \"$F/w.safetensors\" .", "[ -s w.safetensors ]", H_CHANGES },

	/* --- data ---------------------------------------------------------------------- */
	{ "data folder missing", TR "--data nowhere", 1, "dataset folder 'nowhere' does not exist" },
	{ "data a file", TR "--data afile", 2, "is not a folder", "touch afile" },
	{ "data folder empty", TR "--data ds", 1, "has no class sub-folders", "mkdir ds" },
	{ "data with an empty class", TR "--data ds", 1, "has no images",
	  "cp -r \"$F/ds\" ds && mkdir ds/class_zz" },
	{ "data with zero images", TR "--data ds", 1, "has no images",
	  "mkdir -p ds/a ds/b" },
	{ "data with only non-images", TR "--data ds", 1, "has no images",
	  "mkdir -p ds/a && echo hi > ds/a/readme.txt" },
	{ "data train/val layout", TR "--data ds --out o", 0, "training on 'ds/train'",
	  "mkdir ds && cp -r \"$F/ds\" ds/train && cp -r \"$F/ds\" ds/val" },
	{ "val-data missing", TR "--data \"$F/ds\" --val-data nowhere --out o", 1,
	  "--val-data: dataset folder 'nowhere' does not exist" },
	{ "val-data with other classes", TR "--data \"$F/ds\" --val-data v --out o", 2,
	  "classes, the training set", "mkdir v && cp -r \"$F/ds/class_000\" v/" },
	{ "val-data without validation", TR "--data \"$F/ds\" --val-data \"$F/ds\" --eval-every 0", 2,
	  "--val-data with --eval-every 0" },
	{ "tensorboard in a missing folder", TR "--tensorboard no/tb --out o", 1, "cannot create 'no/tb'" },
	{ "dataset val-fraction too large", "dataset make --out ds --classes 2 --images 4 --val-fraction 0.9", 2,
	  "leaves class 0 no training image" },
	{ "data with corrupt images", TR "--steps 3 --data \"$F/bad\" --out o", 0, "",
	  NULL, "grep -q corrupt o/train.json" },
	{ "data all images corrupt", TR "--steps 2 --data ds --out o", 1, "",
	  "mkdir -p ds/a ds/b && echo x > ds/a/1.jpg && echo y > ds/b/2.jpg", NULL, H_LINES },
	{ "data a 0-byte image", TR "--steps 2 --data ds --out o", 0, "",
	  "cp -r \"$F/ds\" ds && : > ds/class_000/empty.jpg" },
	{ "data a folder named .jpg", TR "--steps 2 --data ds --out o", 0, "",
	  "cp -r \"$F/ds\" ds && mkdir ds/class_000/dir.jpg" },
	{ "data a FIFO named .jpg", LD "--data ds --batches 6", 0, "is not a regular file (a FIFO)",
	  "cp -r \"$F/ds\" ds && mkfifo ds/class_000/fifo.jpg" },
	{ "data a JPEG claiming 20000x20000", LD "--data ds --batches 6", 0, "over the limit",
	  "cp -r \"$F/ds\" ds && f=ds/class_000/img_0000000.jpg && "
	  "off=$(LC_ALL=C grep -obUaP '\\xff\\xc0' $f | head -1 | cut -d: -f1) && "
	  "printf '\\116\\040\\116\\040' | dd of=$f bs=1 seek=$((off+5)) conv=notrunc 2>/dev/null" },
	{ "data a PNG header only", LD "--data ds --batches 6", 0, "warning: skipping",
	  "cp -r \"$F/ds\" ds && printf '\\211PNG\\r\\n\\032\\n' > ds/class_000/x.png" },
	{ "data a symlink loop", LD "--data ds --batches 2", 0, "",
	  "cp -r \"$F/ds\" ds && ln -s . ds/class_000/loop" },
	{ "data an unreadable image", LD "--data ds --batches 6", 0, "Permission denied",
	  "[ \"$(id -u)\" != 0 ] || { echo 'root reads any file'; exit 77; }; cp -r \"$F/ds\" ds && chmod 000 ds/class_000/img_0000000.jpg" },
	{ "data non-UTF-8 class name", TR "--data ds --out o", 0, "wrote o/train.json",
	  "mkdir ds && cp -r \"$F/ds/class_000\" \"ds/a$(printf '\\377')\" && cp -r \"$F/ds/class_001\" ds/b" },
	{ "data 1 image, batch 2", TR "--data ds --steps 2 --out o", 2, "1 images make no full batch of 2",
	  "mkdir -p ds/a && cp \"$F/ds/class_000/img_0000000.jpg\" ds/a/" },
	{ "cifar10 missing", TR "--data cifar10:nowhere", 1, "nowhere/data_batch_1.bin" },
	{ "cifar10 file of the wrong size", TR "--data cifar10:c", 1, "not a positive multiple of 3073",
	  "mkdir c && head -c 3000 /dev/zero > c/data_batch_1.bin" },
	{ "cifar10 0-byte file", TR "--data cifar10:c", 1, "is 0 bytes", "mkdir c && : > c/data_batch_1.bin" },
	{ "cifar10 bad label", TR "--data cifar10:c", 1, "has label 200",
	  "mkdir c && { printf '\\310'; head -c 3072 /dev/zero; } > c/data_batch_1.bin" },
	{ "cifar10 a folder as a batch", TR "--data cifar10:c", 1, "(a directory)",
	  "mkdir -p c/data_batch_1.bin" },
	{ "cifar10 a FIFO as a batch", TR "--data cifar10:c", 1, "(a FIFO)",
	  "mkdir c && mkfifo c/data_batch_1.bin" },
	{ "cifar10 a batch missing", TR "--data cifar10:c", 1, "data_batch_2.bin",
	  "mkdir c && head -c 3073 /dev/zero > c/data_batch_1.bin" },
	{ "cifar10 tiny but whole", TR "--data cifar10:c --out o", 0, "wrote o/train.json",
	  "mkdir c && for b in 1 2 3 4 5; do head -c 6146 /dev/zero > c/data_batch_$b.bin; done" },
	{ "loader with no data", "loader", 2, "--data" },
	{ "workers with no data", "workers --device cpu", 2, "--data" },
	{ "workers data missing", "workers --device cpu --model simple_cnn --data nowhere --out o", 1,
	  "nowhere" },

	/* --- files for plot and analyze --------------------------------------------------- */
	{ "plot a missing file", "plot nowhere.json", 1, "nowhere.json" },
	{ "plot a folder without a result", "plot .", 2, "holds no gpuperf result" },
	{ "plot a folder with two results", "plot .", 2, "holds 2 results",
	  "cp \"$F/train.json\" a.json && cp \"$F/train.json\" b.json" },
	{ "plot a bench folder --out elsewhere", "plot . --out p", 2, "in place",
	  "cp \"$F/train.json\" bench.json" },
	{ "plot a scale result without runs", "plot s.json", 1, "\"measurements.runs\" is missing or empty",
	  "echo '{\"schema\":\"gpuperf.result/1\",\"command\":\"scale\",\"measurements\":{\"runs\":[]}}' > s.json" },
	{ "plot a scale result with 0 GPUs", "plot s.json", 1, "scale run 0: \"gpus\" must be 1 or more",
	  "echo '{\"schema\":\"gpuperf.result/1\",\"command\":\"scale\",\"measurements\":{\"runs\":"
	  "[{\"gpus\":0,\"img_s\":1,\"efficiency\":1}]}}' > s.json" },
	{ "plot a scale result with a bad torch figure", "plot s.json --out p", 0, "scaling.png",
	  "echo '{\"schema\":\"gpuperf.result/1\",\"command\":\"scale\",\"measurements\":{\"runs\":"
	  "[{\"gpus\":1,\"img_s\":1,\"efficiency\":1,\"torch\":{\"status\":\"ok\",\"img_s\":\"x\"}}]}}' > s.json" },
	/* --- diff ---------------------------------------------------------------------- */
	{ "diff a missing run", "diff nowhere.json nowhere.json", 2, "nowhere.json" },
	{ "diff one run", "diff r.json", 2, "which two runs", "cp \"$F/train.json\" r.json" },
	{ "diff three runs", "diff r.json r.json r.json", 2, "unexpected argument",
	  "cp \"$F/train.json\" r.json" },
	{ "diff a 0-byte file", "diff r.json r.json", 2, "r.json", "touch r.json" },
	{ "diff text", "diff r.json r.json", 2, "r.json", "echo hello > r.json" },
	{ "diff a result of another schema", "diff r.json r.json", 2, "not a gpuperf result",
	  "echo '{\"schema\": \"something/else\", \"command\": \"amp\"}' > r.json" },
	{ "diff results of two commands", "diff r.json a.json", 2, "one command",
	  "cp \"$F/train.json\" r.json && cp \"$F/sample_amp.json\" a.json" },
	{ "diff results without a shared metric", "diff r.json r.json", 2, "share no metric",
	  "echo '{\"schema\": \"gpuperf.result/1\", \"command\": \"train\", "
	  "\"measurements\": {\"model\": \"x\"}}' > r.json" },
	{ "diff with a bad spread", "diff r.json r.json", 2, "spread",
	  "echo '{\"schema\": \"gpuperf.result/1\", \"command\": \"train\", "
	  "\"measurements\": {\"img_s\": 1, \"repeat\": {\"img_s\": {\"mean\": 1, \"std\": -1, "
	  "\"min\": 1, \"max\": 1, \"n\": 2}}}}' > r.json" },
	{ "diff a negative threshold", "diff r.json r.json --threshold -1", 2, "--threshold",
	  "cp \"$F/train.json\" r.json" },
	{ "diff --html into a folder", "diff r.json r.json --html .", 2, "is a folder",
	  "cp \"$F/train.json\" r.json" },
	/* --- bench --------------------------------------------------------------------- */
	{ "bench an unknown model", "bench --device cpu --models vgg16", 2, "unknown model 'vgg16'" },
	{ "bench a missing dataset", "bench --device cpu --data nowhere", 2, "nowhere" },
	{ "bench an earlier bench's folder", "bench --device cpu --out o", 2, "--overwrite",
	  "mkdir o && cp \"$F/train.json\" o/bench.json" },
	{ "plot a 0-byte file", "plot r.json", 1, "r.json", "touch r.json" },
	{ "plot text", "plot r.json", 1, "r.json", "echo hello > r.json" },
	{ "plot a JSON array", "plot r.json", 1, "", "echo '[1,2,3]' > r.json" },
	{ "plot a result of another schema", "plot r.json", 1, "",
	  "echo '{\"schema\": \"something/else\", \"command\": \"amp\"}' > r.json" },
	{ "plot a train result", "plot r.json --out p", 1, "", "cp \"$F/train.json\" r.json" },
	{ "plot amp with a batch of 1e308", "plot r.json --out p", 1, "",
	  "sed 's/\"batch\": *[0-9]*/\"batch\": 1e308/' \"$F/sample_amp.json\" > r.json" },
	{ "plot amp with negative times", "plot r.json --out p", 0, "",
	  "sed 's/\"ms_per_step\": *\\([0-9][0-9.]*\\)/\"ms_per_step\": -\\1/' \"$F/sample_amp.json\" > r.json" },
	{ "plot amp with strings for numbers", "plot r.json --out p", 1, "",
	  "sed 's/\"batch\": *\\([0-9]*\\)/\"batch\": \"\\1\"/' \"$F/sample_amp.json\" > r.json" },
	{ "plot deeply nested JSON", "plot r.json", 1, "",
	  "{ head -c 100000 /dev/zero | tr '\\0' '['; } > r.json" },
	{ "plot maxbatch result", "plot \"$F/sample_maxbatch.json\" --out p", 0, "" },
	{ "plot workers result", "plot \"$F/sample_workers.json\" --out p", 0, "" },
	{ "analyze a missing folder", "analyze nowhere", 1, "nowhere" },
	{ "analyze a file", "analyze afile", 1, "afile", "touch afile" },
	{ "analyze a corrupt .json.gz", "analyze t.json.gz", 1, "t.json.gz",
	  "printf 'not gzip' > t.json.gz" },
	{ "analyze --output-dir empty", "analyze t --output-dir ''", 2, "output-dir", "mkdir t" },
	{ "analyze an empty folder", "analyze t", 1, "t", "mkdir t" },
	{ "analyze a 0-byte trace", "analyze t", 1, "profiler_trace.json",
	  "mkdir t && : > t/profiler_trace.json" },
	{ "analyze a trace of text", "analyze t", 1, "profiler_trace.json",
	  "mkdir t && echo nope > t/profiler_trace.json" },
	{ "analyze a trace of no events", "analyze t", 1, "",
	  "mkdir t && echo '{\"traceEvents\": []}' > t/profiler_trace.json" },
	{ "analyze baseTimeNanoseconds 2^63-1", "analyze t", 1, "\"baseTimeNanoseconds\" must be an integer from 0",
	  "mkdir t && sed 's/\"traceEvents\"/\"baseTimeNanoseconds\": 9223372036854775807, \"traceEvents\"/' "
	  "\"$F/trace/profiler_trace.json\" > t/profiler_trace.json" },
	{ "analyze durations of -1e12", "analyze t", 1, "\"dur\" of -1e+12 us is outside",
	  "mkdir t && sed 's/\"dur\": *[0-9.]*/\"dur\": -1e12/g' \"$F/trace/profiler_trace.json\" > t/profiler_trace.json" },
	{ "analyze durations of 1e308", "analyze t", 1, "\"dur\" of 1e+308 us is outside",
	  "mkdir t && sed 's/\"dur\": *[0-9.]*/\"dur\": 1e308/g' \"$F/trace/profiler_trace.json\" > t/profiler_trace.json" },
	{ "analyze timestamps of -1e300", "analyze t", 1, "\"ts\" of -1e+300 us is outside",
	  "mkdir t && sed 's/\"ts\": *[0-9.]*/\"ts\": -1e300/g' \"$F/trace/profiler_trace.json\" > t/profiler_trace.json" },
	{ "analyze a truncated trace", "analyze t", 1, "profiler_trace.json",
	  "mkdir t && head -c 20000 \"$F/trace/profiler_trace.json\" > t/profiler_trace.json" },
	{ "analyze a good trace", "analyze t", 0, "", "mkdir t && cp \"$F/trace/profiler_trace.json\" t/" },

	/* --- interruption ------------------------------------------------------------------- */
	{ "SIGINT during training",
	  "!\"$G\" train --model simple_cnn --device cpu --batch 2 --classes 10 --steps 100000 --out o "
	  "--save o2/w.safetensors > log 2>&1 & p=$!; " WAIT_STEP("log") "kill -INT $p; wait $p",
	  130, NULL, NULL, "grep -q '\"interrupted\": true' o/train.json && [ ! -e o2/w.safetensors ]" },
	{ "SIGTERM during training",
	  "!\"$G\" train --model simple_cnn --device cpu --batch 2 --classes 10 --steps 100000 --out o "
	  "> log 2>&1 & p=$!; " WAIT_STEP("log") "kill -TERM $p; wait $p",
	  143, NULL, NULL, "grep -q '\"interrupted\": true' o/train.json" },
	{ "SIGTERM during a save",
	  "!\"$G\" train --model resnet50 --device cpu --size 32 --batch 1 --classes 10 --steps 1 "
	  "--out o --save w.safetensors > log 2>&1 & p=$!; "
	  "i=0; while ! ls -a | grep -q '^\\.w\\.safetensors\\.tmp' && kill -0 $p 2>/dev/null && "
	  "[ $i -lt 2000 ]; do sleep 0.005; i=$((i+1)); done; kill -TERM $p; wait $p",
	  143, NULL, NULL, "[ ! -e w.safetensors ] || \"$G\" train --model resnet50 --device cpu --size 32 "
	  "--batch 1 --classes 10 --steps 1 --load w.safetensors --out o1 > /dev/null" },
	{ "kill -9 during a save, then a new run",
	  "!\"$G\" train --model resnet50 --device cpu --size 32 --batch 1 --classes 10 --steps 1 "
	  "--out o --save w.safetensors > log 2>&1 & p=$!; "
	  "i=0; while ! ls -a | grep -q '^\\.w\\.safetensors\\.tmp' && kill -0 $p 2>/dev/null && "
	  "[ $i -lt 2000 ]; do sleep 0.005; i=$((i+1)); done; kill -KILL $p; wait $p; "
	  "[ ! -e w.safetensors ] || \"$G\" " TR "--load w.safetensors --out o1 > /dev/null || exit 3; "
	  AGE_TMP "exec \"$G\" " TR "--out o2 --save w.safetensors", 0, "saved w.safetensors", NULL,
	  "\"$G\" " TR "--load w.safetensors --out o3 > /dev/null" },
	{ "kill -9 during dataset make, then again",
	  "!\"$G\" dataset make --out ds --classes 2 --images 4000 --size 64x64 --threads 1 > log 2>&1 & "
	  "p=$!; sleep 0.3; kill -KILL $p; wait $p; " AGE_TMP
	  "exec \"$G\" dataset make --out ds --classes 2 --images 10 --size 64x64 --threads 1", 0,
	  "wrote 10 images" },
	/* five times: a signal taken by one thread while another creates its file */
	{ "SIGINT during dataset make, 4 threads",
	  "!for t in 0.1 0.2 0.3 0.15 0.25; do rm -rf ds; \"$G\" dataset make --out ds --classes 4 "
	  "--images 4000 --size 64x64 --threads 4 > log 2>&1 & p=$!; " STARTED "sleep $t; kill -INT $p; wait $p; "
	  "rc=$?; [ -z \"$(find ds -name '.*.tmp*')\" ] || exit 3; done; exit $rc", 130 },
	{ "SIGTERM during profile",
	  "!\"$G\" profile --model simple_cnn --device cpu --batch 2 --classes 10 --steps 100000 "
	  "--baseline-steps 1 --out o > log 2>&1 & p=$!; sleep 0.5; kill -TERM $p; wait $p", 143, NULL,
	  NULL, "[ ! -e o/result.json ]" },
	{ "SIGINT during a loader run",
	  "!\"$G\" loader --data \"$F/ds\" --batch 2 --batches 10000000 --size 16 --workers 2 > log 2>&1 & "
	  "p=$!; " STARTED "sleep 0.5; kill -INT $p; wait $p", 130 },
	{ "SIGTERM to monitor (no NVML here)", "!\"$G\" monitor --interval 0.05 --out o > log 2>&1 & p=$!; "
	  "sleep 0.5; kill -TERM $p; wait $p; rc=$?; cat log; exit $rc", 1, "NVML", NO_GPU },

	/* --- other commands at their edges ---------------------------------------------- */
	{ "monitor without a GPU", "monitor --count 1 --out o", 1, "NVML", NO_GPU },
	{ "monitor a GPU index past the end", "monitor --count 1 --gpu 63", 1, "", NO_GPU },
	{ "info with a huge plan", "info --model resnet50 --batch 65536 --size 4096", 0, "total" },
	{ "info json with a huge plan", "info --model resnet50 --batch 65536 --size 4096 --json", 0,
	  "\"activation_arena_peak\"" },
	{ "train a size too small for the model", "train --model resnet50 --device cpu --size 8 --batch 2 "
	  "--steps 1 --classes 10 --out o", 0, "" },
	{ "simple_cnn of a size not divisible by 8", TR "--size 12 --out o", 2, "divisible by 8" },
	/* 1.6 PiB: malloc says no (ASan would abort instead of saying it, unless told) */
	{ "train huge batch x size", "!ASAN_OPTIONS=allocator_may_return_null=1 exec \"$G\" train "
	  "--model resnet50 --device cpu --batch 65536 --size 4096 --steps 1 --out o", 1,
	  "cannot allocate 1774193749.1 MiB of host memory for batch 65536" },
	{ "train 1 class", TR "--classes 1 --out o", 0, "" },
	{ "warmup beyond steps", TR "--warmup 5 --out o", 0, "over the last 1 steps" },
	{ "profile epochs beyond epochs", "train --device cpu --epochs 2 --profile-epochs 5", 2,
	  "--profile-epochs 5 is beyond --epochs 2" },
	{ "dropout negative", TR "--dropout -0.5", 2, "--dropout must be at least 0" },
	{ "maxbatch at a 1 MiB cap", "maxbatch --device cpu --model simple_cnn --size 32 --classes 10 "
	  "--mem-limit-mib 1 --confirm-steps 1 --out o", 1, "" },
	{ "maxbatch margin 100", "maxbatch --device cpu --model simple_cnn --margin 100", 2, "--margin" },
	{ "maxbatch small cap", "maxbatch --device cpu --model simple_cnn --size 32 --classes 10 "
	  "--mem-limit-mib 8 --confirm-steps 1 --out o", 0, "" },
	{ "advise with 1 step", "advise --device cpu --model simple_cnn --steps 1", 2, "--steps" },
	{ "amp fp16 on the CPU", "amp --device cpu --model simple_cnn --size 32 --batches 2 --steps 1 "
	  "--out o", 1, "" },
	{ "compare duplicate models", "compare --device cpu --models simple_cnn,simple_cnn --size 32 "
	  "--batch 2 --steps 1 --classes 10 --out o", 0, "" },
	{ "parity with nothing", "parity", 2, "" },
	{ "parity input missing", "parity --model simple_cnn --load \"$F/w.safetensors\" --input nowhere "
	  "--out o --classes 10 --size 32 --batch 2", 1, "nowhere" },
	{ "parity input of the wrong size", "parity --model simple_cnn --load \"$F/w.safetensors\" "
	  "--input in --out o --classes 10 --size 32 --batch 2", 1, "x.f32",
	  "mkdir in && head -c 100 /dev/zero > in/x.f32 && head -c 8 /dev/zero > in/y.i32" },
	{ "parity labels out of range", "parity --model simple_cnn --load \"$F/w.safetensors\" "
	  "--input in --out o --classes 10 --size 32 --batch 2", 2, "label 2147483647 of sample 0",
	  "mkdir in && head -c 24576 /dev/zero > in/x.f32 && printf '\\377\\377\\377\\177\\0\\0\\0\\0' > in/y.i32" },
	{ "workers on the CPU", "workers --device cpu --model simple_cnn --data \"$F/ds\" --workers 0,1 "
	  "--steps 2 --batch 2 --size 32 --out o", 0, "wrote o/workers.json" },
	{ "advise on the CPU", "advise --device cpu --model simple_cnn --batch 2 --size 32 --steps 2 --out o",
	  0, "wrote o/advise.json" },
	{ "amp fp32 on the CPU", "amp --device cpu --model simple_cnn --size 32 --batches 2 --precisions fp32 "
	  "--steps 2 --out o", 0, "wrote o/amp.json" },
	{ "loader eval transforms", LD "--data \"$F/ds\" --eval", 0, "eval" },
	{ "profile corrupt images", PR "--data \"$F/bad\" --workers 1 --out o", 0, "o/result.json" },
	{ "train epochs, profile one", "train --model simple_cnn --device cpu --size 32 --batch 2 "
	  "--classes 10 --epochs 2 --epoch-steps 1 --profile-epochs 1 --out o", 0, "",
	  NULL, "ls -d o/profile_epoch_1_*" },
	{ "plot maxbatch with a negative batch", "plot r.json --out p", 0, "batch_size_memory_usage.png",
	  "sed 's/\"batch\": *\\([0-9]\\)/\"batch\": -\\1/' \"$F/sample_maxbatch.json\" > r.json" },
	{ "plot workers with huge numbers", "plot r.json --out p", 0, "",
	  "sed 's/: *\\([0-9][0-9]*\\.[0-9]*\\)/: 1e308/g' \"$F/sample_workers.json\" > r.json" },
	{ "menu with EOF", "!exec \"$G\" menu < /dev/null", 0, "" },
	{ "menu with an unknown choice then EOF", "!printf '42\\n' | exec \"$G\" menu", 0, "no choice '42'" },
	{ "menu EOF in the middle of questions", "!printf '1\\n' | exec \"$G\" menu", 0, "" },
	{ "menu bad answer", "!printf '1\\nvgg16\\n\\nq\\n' | exec \"$G\" menu", 0, "unknown model 'vgg16'",
	  .flags = H_LINES },
	{ "menu binary garbage", "!{ printf '\\377\\376\\001\\033[A\\n'; head -c 100000 /dev/zero | "
	  "tr '\\0' '\\200'; } | exec \"$G\" menu", 0, "no choice" },
	{ "menu a very long line", "!{ head -c 100000 /dev/zero | tr '\\0' 1; echo; } | exec \"$G\" menu",
	  0, "" },
	{ "menu --help", "menu --help", 0, "usage: gpuperf menu" },
	{ "menu with an option", "menu --bogus", 2, "menu takes no options but --help (got '--bogus')" },
	{ "menu monitor without a GPU", "!printf '8\\nq\\n' | exec \"$G\" menu", 0, "NVML", NO_GPU },
	{ "menu amp without a GPU", "!printf '9\\nq\\n' | exec \"$G\" menu", 0, "CUDA GPU", NO_GPU },
};

/* Every numeric option of every command, given values too large for it, negative or
 * not a number: one line naming the option, exit 2. */
struct numopt {
	const char *prefix, *opt;
	char kind; /* i: integer (or list), d: real, s: a seed (any 64-bit integer) */
};

static const struct numopt numopts[] = {
	{ "info --model resnet18", "batch", 'i' }, { "info --model resnet18", "size", 'i' },
	{ "info --model resnet18", "classes", 'i' },
	{ "train --device cpu", "batch", 'i' }, { "train --device cpu", "size", 'i' },
	{ "train --device cpu", "classes", 'i' }, { "train --device cpu", "steps", 'i' },
	{ "train --device cpu", "warmup", 'i' }, { "train --device cpu", "epochs", 'i' },
	{ "train --device cpu", "epoch-steps", 'i' }, { "train --device cpu", "profile-epochs", 'i' },
	{ "train --device cpu", "profile-steps", 'i' }, { "train --device cpu", "lr", 'd' },
	{ "train --device cpu", "momentum", 'd' }, { "train --device cpu", "weight-decay", 'd' },
	{ "train --device cpu", "dropout", 'd' }, { "train --device cpu", "seed", 's' },
	{ "train --device cpu", "workers", 'i' }, { "train --device cpu", "prefetch", 'i' },
	{ "train --device cpu", "log-every", 'i' },
	{ "train --device cpu", "warmup-epochs", 'i' }, { "train --device cpu", "warmup-factor", 'd' },
	{ "train --device cpu", "lr-step", 'i' }, { "train --device cpu", "lr-gamma", 'd' },
	{ "train --device cpu", "eps", 'd' }, { "train --device cpu", "label-smoothing", 'd' },
	{ "train --device cpu", "grad-accum", 'i' }, { "train --device cpu", "clip-grad-norm", 'd' },
	{ "train --device cpu", "eval-every", 'i' }, { "dataset make --out ds", "val-fraction", 'd' },
	{ "compare --device cpu", "batch", 'i' }, { "compare --device cpu", "steps", 'i' },
	{ "compare --device cpu", "size", 'i' }, { "compare --device cpu", "classes", 'i' },
	{ "amp --device cpu", "batches", 'i' }, { "amp --device cpu", "steps", 'i' },
	{ "amp --device cpu", "size", 'i' },
	{ "maxbatch --device cpu", "start", 'i' }, { "maxbatch --device cpu", "size", 'i' },
	{ "maxbatch --device cpu", "classes", 'i' }, { "maxbatch --device cpu", "mem-limit-mib", 'i' },
	{ "maxbatch --device cpu", "margin", 'd' }, { "maxbatch --device cpu", "confirm-steps", 'i' },
	{ "workers --device cpu --data x", "batch", 'i' }, { "workers --device cpu --data x", "workers", 'i' },
	{ "workers --device cpu --data x", "steps", 'i' }, { "workers --device cpu --data x", "interval", 'd' },
	{ "workers --device cpu --data x", "prefetch", 'i' }, { "workers --device cpu --data x", "size", 'i' },
	{ "workers --device cpu --data x", "classes", 'i' }, { "workers --device cpu --data x", "seed", 's' },
	{ "profile --device cpu", "batch", 'i' }, { "profile --device cpu", "size", 'i' },
	{ "profile --device cpu", "classes", 'i' }, { "profile --device cpu", "steps", 'i' },
	{ "profile --device cpu", "wait", 'i' }, { "profile --device cpu", "warmup", 'i' },
	{ "profile --device cpu", "baseline-steps", 'i' }, { "profile --device cpu", "seed", 's' },
	{ "profile --device cpu", "workers", 'i' },
	{ "roofline --device cpu", "batch", 'i' }, { "roofline --device cpu", "size", 'i' },
	{ "roofline --device cpu", "steps", 'i' },
	{ "advise --device cpu", "batch", 'i' }, { "advise --device cpu", "size", 'i' },
	{ "advise --device cpu", "workers", 'i' }, { "advise --device cpu", "steps", 'i' },
	{ "monitor", "interval", 'd' }, { "monitor", "count", 'i' }, { "monitor", "gpu", 'i' },
	{ "monitor", "duration", 'd' }, { "monitor", "pid", 'i' },
	{ "dataset make --out ds", "classes", 'i' }, { "dataset make --out ds", "images", 'i' },
	{ "dataset make --out ds", "seed", 's' }, { "dataset make --out ds", "quality", 'i' },
	{ "dataset make --out ds", "threads", 'i' },
	{ "loader --data x", "batch", 'i' }, { "loader --data x", "workers", 'i' },
	{ "loader --data x", "batches", 'i' }, { "loader --data x", "size", 'i' },
	{ "loader --data x", "prefetch", 'i' }, { "loader --data x", "seed", 's' },
	{ "parity", "batch", 'i' }, { "parity", "size", 'i' }, { "parity", "classes", 'i' },
	{ "parity", "steps", 'i' }, { "parity", "lr", 'd' }, { "parity", "momentum", 'd' },
	{ "parity", "weight-decay", 'd' },
};

static const char *const bad_values[3][3] = {
	{ "-1", "99999999999999999999", "nan" },                       /* i */
	{ "-1", "1e999", "nan" },                                      /* d */
	{ "99999999999999999999", "-99999999999999999999", "nan" },    /* s */
};

#define NUM_CASES (sizeof(numopts) / sizeof(numopts[0]) * 3)
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* The numeric cases' names and commands live in static buffers: one list at a time. */
struct hcase *hostile_cases(size_t *n_out)
{
	static char names[NUM_CASES][96], cmds[NUM_CASES][192];
	struct hcase *all = calloc(N_CASES + NUM_CASES, sizeof(*all));
	if (!all)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < N_CASES; i++)
		all[n++] = cases[i];
	for (size_t i = 0, k = 0; i < NUM_CASES / 3; i++) {
		const struct numopt *no = &numopts[i];
		int row = no->kind == 'i' ? 0 : no->kind == 'd' ? 1 : 2;
		for (int v = 0; v < 3; v++, k++) {
			const char *cmdname = no->prefix;
			snprintf(names[k], sizeof(names[k]), "%.*s --%s %s",
				 (int)strcspn(cmdname, " "), cmdname, no->opt, bad_values[row][v]);
			snprintf(cmds[k], sizeof(cmds[k]), "%s --%s %s", no->prefix, no->opt,
				 bad_values[row][v]);
			char needle[64];
			snprintf(needle, sizeof(needle), "--%s", no->opt);
			all[n++] = (struct hcase){ names[k], cmds[k], 2, strdup(needle) };
		}
	}
	*n_out = n;
	return all;
}

void hostile_cases_free(struct hcase *all, size_t n)
{
	for (size_t i = N_CASES; i < n; i++)
		free((char *)all[i].line);
	free(all);
}
