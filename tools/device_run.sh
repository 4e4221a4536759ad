#!/bin/bash
# Run on the GPU machine from the repository root, with build/bundle carried:
#   bash tools/device_run.sh STAGE...   (logs under $OUT, or /tmp/gpuperf_out)
# Stages: info, tests, gputests, parity, paritycpu, speed, speed32, compare, maxbatch,
# maxbatchre (with --recompute), torchmaxbatch, loader, gpudecode (issue 21's goals but the
# training speed: the GPU decode tests; loader --decode gpu, and the CPU path at 16 workers
# against torchvision's; workers --decode gpu at task 3's settings, sweeping the CPU
# threads beside nvJPEG; a summary), gpudecodetrain (issue 21's 0.95x: train resnet50 and
# mobilenet_v2 bf16 batch 256 synthetic against JPEGs decoded on the GPU, DECODE_REPEAT (3)
# runs each; DECODE_MODELS), decodecost (what a decoded batch costs mobilenet_v2's
# step, by decoder variant, and the decoder's pixels against the CPU path), profile, workers, kprof (kernel
# time by kernel beside torch.profiler's), cudnn19 (training on PyTorch's cuDNN), parityamp
# (bf16 against torch.autocast, SEEDS runs), torch50 (PyTorch resnet50 bf16 eager and compiled), ampspeed (bf16/fp16 at batch 256 against amp_bf16_cl),
# ampfuse (recompute on), ampcmd (gpuperf amp, AMP_BATCHES), kprofmnv2
# (mobilenet_v2 bf16 kernel times beside PyTorch's), ampmem (resnet50 bf16 peak and speed
# with --recompute and --recompute-blocks), fuse32 (FP32 batch norm),
# kprof32 (resnet50 FP32 kernel trace), regress (this build against BASE_BIN, interleaved,
# and PyTorch, at batch 256 in REGRESS_PRECISIONS; tools/regress_table.py sums it up),
# dp (data parallel with one GPU through NCCL: tests, train --nproc 1, scale, dist-check),
# dist (the process group's tests and NCCL over a group of one: dist-check --device
# cuda; two CPU ranks; two ranks asking for a GPU each on a one-GPU host: one line).
# tta (time to accuracy: dataset make --difficulty on this machine, then tools/tta.sh:
# gpuperf and PyTorch resnet18, TTA_SEEDS seeds each; the run folder as $OUT/tta.tgz,
# its summary.md and chart beside; about 4 to 5 minutes on one H100, docs/training.md),
# decodeacc (issue 21 item 6: the tta recipe, gpuperf alone, --decode gpu against cpu,
# TTA_SEEDS seeds each; tools/dev/decode_acc.py sums it up),
# scale19 (several GPUs: the 2-GPU equivalence tests, scale --torch bf16/fp32 (PyTorch
# DDP after each count), scale --transport socket --torch; the run folders as $OUT/scale19.tgz),
# bench, benchquick (gpuperf bench [--quick] --torch $BENCH_ARGS: the run folder as
# $OUT/<stage>.tgz, its report and bench.json beside).
# ktotals (kernel time by kernel under ncu, this build against BASE_BIN: KT_KERNELS,
# KT_MODEL, KT_PREC, KT_STEPS; tools/ncu_totals.py),
# bn16 (the own 16-bit NHWC batch norms: their GPU tests with the per-shape probe behind
# auto's rule, then mobilenet_v2, resnet50 and resnet18 (BN16_MODELS) bf16 at batch 256
# under GPUPERF_BN16=cudnn, auto and own, twice, and PyTorch eager),
# rebuilt (the GPU tests of what the seventeenth session rebuilt without a GPU, and of
# the eighteenth's one-pass decode kernel), dwtiled (the tiled 16-bit depthwise
# kernels: their tests and timing, mobilenet_v2 bf16 and fp16 with GPUPERF_DWCONV_TILED
# 0 and 1, and PyTorch's eager), relu6fold (GPUPERF_RELU6_FOLD: its tests, then
# mobilenet_v2 at batch 256 in bf16 and fp16 under FOLD_MODES (always auto),
# interleaved, twice, beside PyTorch's eager), compile16 (gpuperf bf16 beside PyTorch
# eager and torch.compile, batch 256, COMPILE_MODELS), stem (GPUPERF_CONV_STEM: the stem
# kernels' tests, the plan's timings, build/stem_probe if carried, resnet18 and resnet50
# bf16/fp16 under cudnn and auto, bf16 parity both ways), conv1x1 (GPUPERF_CONV_1X1: the
# products' tests, the FP32 plan's picks, resnet50 and mobilenet_v2 fp32 under cudnn and
# auto, PyTorch eager FP32, parity with float64 with the products forced).
# tests takes TESTS_PART=K/N (gpuperf_tests --part K/N: the whole suite needs more than
# one call's 560 s; run 1/2 and 2/2 in two calls) and TESTS_TIMEOUT.
# Settled comparisons of kernel paths have no stage: the product keeps the winner only
# (docs/cuda.md, tuning switches). Only 8 files come back from $OUT:
# point OUT at a scratch folder and tar it into the real one.
# Each stage is time-limited so that one hang does not cost the others.
set -u
. build/bundle/env.sh
OUT=${OUT:-/tmp/gpuperf_out}
mkdir -p "$OUT"
BIN=build/bundle/gpuperf
TB=${TORCH_BASELINE:-.carry/torch_baseline.py}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
stage() { # name timeout command...
	local name=$1 t=$2
	shift 2
	echo "=== $name ($(date +%T))"
	timeout "$t" "$@" > "$OUT/$name.log" 2>&1
	local rc=$?
	tail -n "${TAIL:-25}" "$OUT/$name.log"
	echo "=== $name rc=$rc"
}
# mobilenet_v2 at batch 256 in bf16 and fp16 under each value of a tuning switch,
# interleaved, twice: mnv2_by_switch STAGE_PREFIX VARIABLE "VALUES"
mnv2_by_switch() {
	local prefix=$1 var=$2 r p v
	for r in 1 2; do
		for p in bf16 fp16; do
			for v in $3; do
				(export "$var=$v"; TAIL=3 stage "${prefix}_${p}_${v}_$r" 180 $BIN train --model mobilenet_v2 --device cuda --precision $p --batch 256 --steps 40)
			done
		done
	done
}
for s in "$@"; do
	case $s in
	info) stage info 60 sh -c "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv; $BIN info" ;;
	tests) TAIL=60 stage tests${TESTS_PART:+_${TESTS_PART%/*}} ${TESTS_TIMEOUT:-400} sh -c "build/bundle/gpuperf_tests ${TESTS_PART:+--part $TESTS_PART} | grep -v '^ok '" ;;
	gputests) TAIL=80 stage gputests 300 build/bundle/gpuperf_tests ${GPUTESTS:-cuda} ;;
	dist) stage dist 240 sh -c "build/bundle/gpuperf_tests nccl dist_; $BIN dist-check --device cuda --size 256 --out $OUT/dist --overwrite; $BIN dist-check --device cpu --nproc 2 --size 64; $BIN dist-check --device cuda --nproc 2 --size 8 --timeout 30; echo \"two ranks, one GPU: rc=\$? (2 expected)\"" ;;
	parity) stage parity 300 python3 tests/torch/parity.py --bin $BIN --device cuda --ref64 --json "$OUT/parity_cuda.json" ;;
	paritycpu) stage paritycpu 300 python3 tests/torch/parity.py --bin $BIN --device cpu --models simple_cnn,resnet18,mobilenet_v2 --json "$OUT/parity_cpu.json" ;;
	speed)
		for m in resnet50 resnet18 mobilenet_v2; do
			for p in fp32 tf32; do
				stage "speed_${m}_$p" 180 $BIN train --model $m --device cuda --precision $p --batch 256 --steps 40 --json
			done
		done
		stage torch_speed 400 python3 $TB train --models resnet50,resnet18,mobilenet_v2 --modes fp32,tf32 --batch 256 --iters 30 ;;
	speed32)
		for m in resnet18 mobilenet_v2; do
			stage "speed32_$m" 120 $BIN train --model $m --device cuda --batch 32 --steps 200
			stage "speed32_${m}_eager" 120 $BIN train --model $m --device cuda --batch 32 --steps 200 --no-graphs
		done
		stage torch_speed32 300 python3 $TB train --models resnet18,mobilenet_v2 --modes fp32 --batch 32 --iters 50 ;;
	bench|benchquick)
		# the one-command benchmark; the run folder comes back as a tarball without
		# the profile's trace, its report and bench.json also as files
		q=""; [ "$s" = benchquick ] && q=--quick
		stage "$s" $([ -n "$q" ] && echo 400 || echo 1800) $BIN bench $q --torch ${BENCH_ARGS:-} --out "$OUT/$s"
		tar czf "$OUT/$s.tgz" --exclude=profiler_trace.json --exclude=profiler_logs -C "$OUT" "$s"
		cp "$OUT/$s/report.html" "$OUT/$s.html"; cp "$OUT/$s/report.md" "$OUT/$s.md"
		cp "$OUT/$s/bench.json" "$OUT/$s.json" ;;
	compare) stage compare 300 $BIN compare --device cuda --overwrite --out "$OUT/results" ;;
	maxbatch) stage maxbatch 400 $BIN maxbatch --model mobilenet_v2 --device cuda --overwrite --out "$OUT/results" ;;
	maxbatchre) stage maxbatchre 400 $BIN maxbatch --model mobilenet_v2 --device cuda --recompute --overwrite --out "$OUT/results_re" ;;
	torchmaxbatch) stage torchmaxbatch 500 python3 $TB maxbatch --models mobilenet_v2 --modes fp32 ;;
	loader)
		stage dataset 120 $BIN dataset make --out /tmp/gp_ds --classes 10 --images 2000 --size 500x375 --seed 1
		stage loader 200 $BIN loader --data /tmp/gp_ds --batch 64 --workers 0,2,4,8,16 --batches 100
		stage torch_loader 300 python3 $TB loader --data /tmp/gp_ds --batch 64 --workers 0,2,4,8,16 --batches 100 ;;
	gpudecode)
		[ -d /tmp/gp_ds ] || $BIN dataset make --out /tmp/gp_ds --classes 10 --images 2000 --size 500x375 --seed 1 > /dev/null
		TAIL=40 stage gpudecode_tests 240 build/bundle/gpuperf_tests gpu_decode gpu_loader gpu_batch
		stage loader_gpu_bf16 90 $BIN loader --data /tmp/gp_ds --decode gpu --batch 256 --batches 100 --precision bf16
		stage loader_gpu_bf16_t${DECODE_THREADS:-8} 90 $BIN loader --data /tmp/gp_ds --decode gpu --batch 256 --batches 100 --precision bf16 --decode-threads ${DECODE_THREADS:-8}
		stage loader_cpu16 90 $BIN loader --data /tmp/gp_ds --decode cpu --batch 64 --batches 100 --workers 16
		stage torch_loader16 150 python3 $TB loader --data /tmp/gp_ds --batch 64 --workers 16 --batches 100
		stage workers_gpudecode 240 $BIN workers --data /tmp/gp_ds --model mobilenet_v2 --batch 64 --steps 100 --device cuda --decode gpu --overwrite --out /tmp/gp_work_gpu
		# issue 21, item 5: the lines each goal is read from (training: gpudecodetrain)
		echo "=== gpudecode summary"
		grep -h "GPU against CPU\|worst at\|decode + augment,\|logits:" "$OUT/gpudecode_tests.log"
		grep -hE "^ +(gpu|16) |^gpu decode" "$OUT/loader_gpu_bf16.log" "$OUT/loader_gpu_bf16_t${DECODE_THREADS:-8}.log" "$OUT/loader_cpu16.log"
		grep -h "img/s" "$OUT/torch_loader16.log" | tail -2
		grep -h "gpu +\|recommended" "$OUT/workers_gpudecode.log" ;;
	gpudecodetrain)
		# issue 21's 0.95x: resnet50 and mobilenet_v2 bf16 b256, synthetic against JPEGs
		# decoded on the GPU;
		# DECODE_REPEAT runs of each (train --repeat: mean and spread), as one 60-step run
		# moves 2-3 points from the next (s13-7/8)
		[ -d /tmp/gp_ds ] || $BIN dataset make --out /tmp/gp_ds --classes 10 --images 2000 --size 500x375 --seed 1 > /dev/null
		T="--device cuda --precision bf16 --batch 256 --steps 60 --repeat ${DECODE_REPEAT:-3}"
		for m in ${DECODE_MODELS:-resnet50 mobilenet_v2}; do
			stage "train_${m}_synthetic" 200 $BIN train --model $m $T
			stage "train_${m}_gpudecode" 200 $BIN train --model $m $T --data /tmp/gp_ds --decode gpu
		done
		echo "=== gpudecodetrain summary"
		for m in ${DECODE_MODELS:-resnet50 mobilenet_v2}; do
			for k in synthetic gpudecode; do
				printf '%s %s: ' $m $k; grep -h "^over .* repeats:" "$OUT/train_${m}_$k.log"
				grep -h "^decode:" "$OUT/train_${m}_$k.log" | tail -1
			done
		done ;;
	decodecost)
		TAIL=30 stage decodecost 300 sh -c "build/bundle/gpuperf_tests gpu_decode_costs gpu_decode_options gpu_decode_matches | grep -v '^warning'" ;;
	profile)
		stage profile 300 $BIN profile --model mobilenet_v2 --batch 64 --steps 20 --device cuda --overwrite --out /tmp/gp_prof
		cp /tmp/gp_prof/profile_report.md /tmp/gp_prof/stage_breakdown.png "$OUT/" 2>/dev/null
		ls -la /tmp/gp_prof /tmp/gp_prof/profiler_logs >> "$OUT/profile.log" ;;
	workers)
		[ -d /tmp/gp_ds ] || $BIN dataset make --out /tmp/gp_ds --classes 10 --images 2000 --size 500x375 --seed 1 > /dev/null
		stage workers 400 $BIN workers --data /tmp/gp_ds --model mobilenet_v2 --batch 64 --workers 0,2,4,8 --steps 100 --device cuda --overwrite --out /tmp/gp_work
		cp /tmp/gp_work/gpu_utilization_comparison.png /tmp/gp_work/workers.json "$OUT/" 2>/dev/null ;;
	ktotals)
		# kernel time by kernel under ncu (every launch of the kernels KT_KERNELS names,
		# a regex, in the first KT_STEPS steps of KT_MODEL in KT_PREC at batch 256), this
		# build and BASE_BIN where set, summed and paired by tools/ncu_totals.py
		for side in new base; do
			b=$BIN; [ $side = base ] && b=${BASE_BIN:-}
			[ -n "$b" ] || continue
			echo "=== ktotals_$side ($(date +%T))"
			timeout 300 ncu --csv --metrics gpu__time_duration.sum -k "regex:${KT_KERNELS:-bn16_|bn_apply}" \
				--launch-count ${KT_N:-2000} $b train --model ${KT_MODEL:-resnet50} --device cuda \
				--precision ${KT_PREC:-bf16} --batch 256 --steps ${KT_STEPS:-3} \
				> "$OUT/ktotals_$side.csv" 2> "$OUT/ktotals_$side.err"
			echo "rc=$?"
		done
		python3 tools/ncu_totals.py "$OUT/ktotals_new.csv" ${BASE_BIN:+"$OUT/ktotals_base.csv"} ;;
	kprof)
		# kernel time by kernel, ours (profile, eager) beside PyTorch's (torch.profiler)
		for mb in ${KPROF:-resnet50:256 mobilenet_v2:256 mobilenet_v2:32}; do
			m=${mb%:*} b=${mb#*:}
			TAIL=0 stage "kprof_${m}_$b" 200 $BIN profile --model $m --batch $b --steps 5 --baseline-steps 5 --device cuda --overwrite --out /tmp/gp_kprof_${m}_$b
			TAIL=0 stage "torch_kprof_${m}_$b" 200 python3 tools/torch_profile.py --model $m --batch $b --mode fp32
		done ;;
	cudnn19)
		# the same training with PyTorch's own cuDNN (its wheel's libraries) instead of the system's
		d=$(python3 -c "import nvidia.cudnn as c; print(list(c.__path__)[0] + '/lib')" 2>/dev/null)
		echo "torch cuDNN libraries: ${d:-not found}"; ls "$d" 2>/dev/null | head -3
		for m in resnet50 mobilenet_v2; do
			LD_LIBRARY_PATH=$d:$LD_LIBRARY_PATH stage "cudnn19_$m" 180 $BIN train --model $m --device cuda --precision fp32 --batch 256 --steps 40
		done ;;
	speed50)
		for p in fp32 tf32; do
			stage "speed_resnet50_$p" 180 $BIN train --model resnet50 --device cuda --precision $p --batch 256 --steps 40 --json
		done
		stage torch_speed50 300 python3 $TB train --models resnet50 --modes fp32,tf32 --batch 256 --iters 30 ;;
	speedws)
		# another cuDNN workspace budget (default 4096 MiB; PyTorch's benchmark mode may use all free memory)
		for p in ${WS_PRECISIONS:-fp32 tf32}; do
			GPUPERF_CONV_WORKSPACE_MIB=${WS_MIB:-1024} stage "speedws_resnet50_$p" 180 $BIN train --model resnet50 --device cuda --precision $p --batch 256 --steps 40 --json
		done ;;
	kprofamp)
		TAIL=0 stage kprof_resnet50_bf16 200 $BIN profile --model resnet50 --batch 256 --precision bf16 --steps 3 --baseline-steps 3 --device cuda --overwrite --out /tmp/gp_kprof_amp
		TAIL=0 stage torch_kprof_resnet50_bf16 200 python3 tools/torch_profile.py --model resnet50 --batch 256 --mode amp_bf16_cl
		stage amp_resnet50_bf16_nchw 180 $BIN train --model resnet50 --device cuda --precision bf16 --layout nchw --batch 256 --steps 20 ;;
	kprofmnv2)
		TAIL=0 stage kprof_mobilenet_v2_bf16 200 $BIN profile --model mobilenet_v2 --batch 256 --precision bf16 --steps 3 --baseline-steps 3 --device cuda --overwrite --out /tmp/gp_kprof_mnv2
		cp /tmp/gp_kprof_mnv2/profiler_trace.json "$OUT/kprof_mobilenet_v2_bf16_trace.json" 2>/dev/null
		TAIL=0 stage torch_kprof_mobilenet_v2_bf16 200 python3 tools/torch_profile.py --model mobilenet_v2 --batch 256 --mode amp_bf16_cl ;;
	ampgraphs)
		stage amp_resnet50_bf16_eager 120 $BIN train --model resnet50 --device cuda --precision bf16 --batch 256 --steps 12 --no-graphs
		stage amp_resnet50_bf16_graph 120 $BIN train --model resnet50 --device cuda --precision bf16 --batch 256 --steps 12 ;;
	parityamp) stage parityamp 500 python3 tests/torch/parity.py --bin $BIN --device cuda --amp bf16 --seeds ${SEEDS:-3} --models ${PARITY_MODELS:-simple_cnn,resnet18,resnet50,mobilenet_v2} --json "$OUT/parity_amp${PARITY_TAG:-}.json" ;;
	torch50)
		# PyTorch's resnet50 bf16, eager and torch.compile (TORCH50_MODES), for ratios in this call
		stage torch50 500 python3 $TB train --models resnet50 --modes ${TORCH50_MODES:-amp_bf16_cl,amp_bf16_cl_compile} --batch 256 --iters 30 ;;
	ampspeed)
		for m in resnet50 resnet18 mobilenet_v2; do
			stage "amp_${m}_bf16" 180 $BIN train --model $m --device cuda --precision bf16 --batch 256 --steps 40 --json
		done
		[ -n "${AMP_FP16:-}" ] && stage amp_resnet50_fp16 180 $BIN train --model resnet50 --device cuda --precision fp16 --batch 256 --steps 40 --json
		stage torch_ampspeed 400 python3 $TB train --models resnet50,resnet18,mobilenet_v2 --modes amp_bf16_cl --batch 256 --iters 30 ;;
	rebuilt)
		# the seventeenth session's rebuild, never run on a GPU when written: the decode
		# and loader tests (region decodes bit for bit against whole images, two
		# decoders, the truncated file, the cost of regions against whole images beside
		# mobilenet_v2's step) and the own 16-bit batch norms' tests, in one stage
		# and the eighteenth's one-pass and augment kernels against the CPU
		TAIL=60 stage rebuilt_tests 540 sh -c "build/bundle/gpuperf_tests gpu_augment gpu_planar gpu_decode gpu_loader gpu_batch cuda_bn16 cuda_amp_own_bn16 cuda_amp_fused_batch_norm amp_bn | grep -v '^warning'" ;;
	bn16)
		# the own 16-bit NHWC batch norms (GPUPERF_BN16): their tests, with the per-shape
		# probe of own against cuDNN that auto's rule comes from (its per-model totals in
		# the tail), then the models bf16 batch 256 under each mode, interleaved, beside
		# PyTorch's eager
		TAIL=100 stage bn16_tests 300 sh -c "build/bundle/gpuperf_tests cuda_bn16 cuda_amp_own_bn16 cuda_amp_fused_batch_norm amp_bn | grep -v '^warning'"
		for r in 1 2; do
			for mode in cudnn auto own; do
				for m in ${BN16_MODELS:-mobilenet_v2 resnet50 resnet18}; do
					GPUPERF_BN16=$mode stage "bn16_${m}_${mode}_$r" 180 $BIN train --model $m --device cuda --precision bf16 --batch 256 --steps 40
				done
			done
		done
		stage torch_bn16 400 python3 $TB train --models ${BN16_TORCH_MODELS:-mobilenet_v2,resnet50,resnet18} --modes amp_bf16_cl --batch 256 --iters 30
		echo "=== bn16 summary"
		grep -H "^done:" "$OUT"/bn16_*_[12].log ;;
	dwtiled)
		# the tiled 16-bit depthwise kernels (GPUPERF_DWCONV_TILED): their tests and the
		# per-layer timing against the row kernels, then mobilenet_v2 at batch 256 in bf16
		# and fp16 with each, interleaved, beside PyTorch's eager
		TAIL=8 stage dwtiled_tests 200 sh -c "build/bundle/gpuperf_tests cuda_dwconv dwconv_ | grep -v '^ok '"
		mnv2_by_switch dwtiled GPUPERF_DWCONV_TILED "0 1"
		stage torch_dwtiled 300 python3 $TB train --models mobilenet_v2 --modes amp_bf16_cl,amp_fp16_cl --batch 256 --iters 30 ;;
	relu6fold)
		# where MobileNetV2's ReLU6 runs (GPUPERF_RELU6_FOLD): folded into the depthwise
		# convolutions (always, as before the twentieth session) or in the own batch
		# norms where they run (auto)
		TAIL=12 stage relu6fold_tests 300 sh -c "build/bundle/gpuperf_tests cuda_amp_relu6 cuda_amp_fused cuda_amp_own_bn16 cuda_bn16 cuda_profile_depthwise | grep -v '^ok '"
		mnv2_by_switch relu6fold GPUPERF_RELU6_FOLD "${FOLD_MODES:-always auto}"
		stage torch_relu6fold 300 python3 $TB train --models mobilenet_v2 --modes amp_bf16_cl,amp_fp16_cl --batch 256 --iters 30 ;;
	compile16)
		# issue 24's torch.compile goal: gpuperf bf16 at batch 256 (img/s and peak) beside
		# PyTorch eager and torch.compile, channels last (COMPILE_MODELS)
		for m in ${COMPILE_MODELS:-mobilenet_v2 resnet18 resnet50}; do
			TAIL=3 stage "compile16_$m" 180 $BIN train --model $m --device cuda --precision bf16 --batch 256 --steps 40 --out "$OUT/compile16_$m"
			python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['measurements']; print('$m peak MiB', round(m['peak_bytes']/2**20))" "$OUT/compile16_$m/train.json"
		done
		models=${COMPILE_MODELS:-mobilenet_v2 resnet18 resnet50}
		stage torch_compile16 480 python3 $TB train --models ${models// /,} --modes amp_bf16_cl,amp_bf16_cl_compile --batch 256 --iters 30 ;;
	stem)
		# ResNet's stem on the own kernels (GPUPERF_CONV_STEM): their GPU tests, the plan's
		# timings against cuDNN in bf16 and fp16 (GPUPERF_CONV_LOG), build/stem_probe when
		# carried (make stem-probe), then resnet18 and resnet50 at batch 256 in bf16 and
		# fp16 under cudnn and auto, interleaved, and bf16 parity both ways (3 seeds)
		TAIL=5 stage stem_tests 120 build/bundle/gpuperf_tests cuda_stem amp_maxpool
		for p in bf16 fp16; do
			GPUPERF_CONV_LOG=1 TAIL=0 stage "stem_plan_$p" 120 $BIN train --model resnet18 --device cuda --precision $p --batch 256 --steps 3 --out "$OUT/stem_plan_$p"
			grep "own stem" "$OUT/stem_plan_$p.log"
		done
		[ -x build/stem_probe ] && stage stem_probe 120 build/stem_probe
		for m in resnet18 resnet50; do
			for p in bf16 fp16; do
				for v in cudnn auto; do
					(export GPUPERF_CONV_STEM=$v; TAIL=2 stage "stem_${m}_${p}_$v" 180 $BIN train --model $m --device cuda --precision $p --batch 256 --steps 40)
				done
			done
		done
		for v in own cudnn; do
			(export GPUPERF_CONV_STEM=$v; TAIL=12 stage "stem_parity_$v" 300 python3 tests/torch/parity.py --bin $BIN --device cuda --amp bf16 --models resnet18,resnet50 --seeds 3 --json "$OUT/stem_parity_$v.json")
		done ;;
	conv1x1)
		# 1x1 convolutions as cuBLAS products (GPUPERF_CONV_1X1): their GPU tests, the
		# plan's picks against cuDNN in FP32 (GPUPERF_CONV_LOG), resnet50 and mobilenet_v2
		# fp32 at batch 256 under cudnn and auto, interleaved, twice, PyTorch eager FP32,
		# and parity with float64 with the products forced
		TAIL=8 stage conv1x1_tests 200 build/bundle/gpuperf_tests cuda_conv1x1 amp_conv1x1 cuda_maxpool
		GPUPERF_CONV_LOG=1 TAIL=0 stage conv1x1_plan 200 $BIN train --model resnet50 --device cuda --precision fp32 --batch 256 --steps 3 --out "$OUT/conv1x1_plan"
		grep "cuBLAS" "$OUT/conv1x1_plan.log"
		for r in 1 2; do
			for m in resnet50 mobilenet_v2; do
				for v in cudnn auto; do
					(export GPUPERF_CONV_1X1=$v; TAIL=2 stage "conv1x1_${m}_${v}_$r" 180 $BIN train --model $m --device cuda --precision fp32 --batch 256 --steps 30)
				done
			done
		done
		stage torch_conv1x1 300 python3 $TB train --models resnet50,mobilenet_v2 --modes fp32 --batch 256 --iters 30
		(export GPUPERF_CONV_1X1=cublas; TAIL=12 stage conv1x1_parity 400 python3 tests/torch/parity.py --bin $BIN --device cuda --models resnet50,mobilenet_v2 --ref64 --json "$OUT/conv1x1_parity.json") ;;
	ampfuse)
		# recompute (memory)
		for m in resnet50 resnet18; do
			stage "amp_${m}_bf16_recompute" 180 $BIN train --model $m --device cuda --precision bf16 --batch 256 --steps 40 --recompute --json
		done ;;
	ampmem)
		# bf16 memory against speed: keep everything, recompute BN+ReLU, and residual blocks too
		for r in "" --recompute --recompute-blocks; do
			stage "ampmem_resnet50_bf16${r//-/_}" 180 $BIN train --model resnet50 --device cuda --precision bf16 --batch 256 --steps 40 $r --json
		done
		GPUTESTS=cuda_recompute TAIL=10 stage ampmem_tests 200 build/bundle/gpuperf_tests cuda_recompute ;;
	ampcmd)
		stage ampcmd 500 $BIN amp --model resnet50 --batches ${AMP_BATCHES:-64,128,256,512} --device cuda --overwrite --out "$OUT/amp" --csv ;;
	fuse32)
		# FP32 batch norm (fused with ReLU (+ add), the rest on the own kernels);
		# FUSE32_MODELS, FUSE32_PRECISIONS
		for m in ${FUSE32_MODELS:-resnet50}; do
			for p in ${FUSE32_PRECISIONS:-fp32}; do
				stage "fuse32_${m}_$p" 180 $BIN train --model $m --device cuda --precision $p --batch 256 --steps 40 --json
			done
		done ;;
	kprof32)
		# resnet50 FP32 kernel times (ours, eager), and the trace for tools/dwsum.py
		TAIL=0 stage kprof32_resnet50 200 $BIN profile --model resnet50 --batch 256 --steps 3 --baseline-steps 3 --device cuda --overwrite --out /tmp/gp_kprof32
		TAIL=40 stage kprof32_sum 60 python3 tools/dwsum.py /tmp/gp_kprof32/profiler_trace.json 3 ;;
	dp)
		# data parallel on one GPU: a world of one through NCCL (tests, train, scale,
		# dist-check), and the same with NCCL over sockets
		TAIL=20 stage dp_tests 300 build/bundle/gpuperf_tests cuda_dp dp_ dist_
		stage dp_train 180 $BIN train --model resnet50 --device cuda --precision bf16 --batch 256 --steps 40 --nproc 1 --json --out /tmp/gp_dp_train
		stage dp_train_plain 180 $BIN train --model resnet50 --device cuda --precision bf16 --batch 256 --steps 40 --json --out /tmp/gp_dp_plain
		stage dp_syncbn 180 $BIN train --model resnet18 --device cuda --precision bf16 --batch 256 --steps 40 --nproc 1 --sync-bn --out /tmp/gp_dp_syncbn
		stage dp_scale 300 $BIN scale --model resnet50 --precision bf16 --batch 256 --steps 40 --out /tmp/gp_dp_scale
		cp /tmp/gp_dp_scale/scale.json /tmp/gp_dp_scale/scaling.png "$OUT/" 2>/dev/null
		stage dp_check 120 $BIN dist-check --device cuda --nproc 1 --size 64
		stage dp_toomany 30 $BIN train --model resnet50 --device cuda --nproc 9
		n=$(nvidia-smi -L | wc -l)
		[ "$n" -ge 2 ] && stage dp_torch 300 torchrun --nproc-per-node "$n" tools/torch_ddp.py --model resnet50 --precision bf16 --batch 256 ;;
	decodeacc)
		# issue 21 item 6: the time-to-accuracy recipe (tools/tta.sh, gpuperf alone) with
		# --decode gpu and with --decode cpu on the same files; final val top-1 per seed,
		# medians and their difference (bar: 1 point); both histories in one chart
		rm -rf /tmp/gp_da /tmp/gp_da_gpu /tmp/gp_da_cpu
		stage da_data 120 $BIN dataset make --out /tmp/gp_da --classes 10 --images ${TTA_IMAGES:-18000} --val-fraction ${TTA_VAL_FRACTION:-0.1667} --size 160x160 --difficulty ${TTA_DIFFICULTY:-1} --seed 1
		for dec in gpu cpu; do
			TAIL=12 TTA_TORCH=0 TTA_DECODE=$dec stage da_$dec ${TTA_TIMEOUT:-240} bash tools/tta.sh $BIN /tmp/gp_da /tmp/gp_da_$dec
		done
		$BIN plot /tmp/gp_da_gpu/gpuperf_s*/train.json /tmp/gp_da_cpu/gpuperf_s*/train.json --out /tmp/gp_da_gpu > /dev/null 2>&1
		cp /tmp/gp_da_gpu/val_top1_vs_time.png "$OUT/decodeacc_val_top1_vs_time.png" 2>/dev/null
		python3 tools/dev/decode_acc.py /tmp/gp_da_gpu /tmp/gp_da_cpu | tee "$OUT/decodeacc_summary.txt"
		tar czf "$OUT/decodeacc.tgz" -C /tmp gp_da_gpu gp_da_cpu ;;
	scale19)
		# issue 19 on a host of several GPUs (all of them, 1,2,4,...): the two-GPU
		# equivalence tests, scale --torch in bf16 and fp32 (tools/torch_ddp.py under
		# torchrun right after each count, the same settings, batch 256 per GPU; the
		# ratio in the table and scale.json), and the same over NCCL's socket transport
		n=$(nvidia-smi -L | wc -l); g=1; c=1
		while [ $((c * 2)) -le "$n" ]; do c=$((c * 2)); g="$g,$c"; done
		if [ -n "${SCALE_TESTS-1}" ]; then
			stage topo 30 nvidia-smi topo -m
			TAIL=30 stage dp2_tests 300 build/bundle/gpuperf_tests ${SCALE_TESTS:-cuda_dp_ nccl}
		fi
		for p in ${SCALE_PRECISIONS:-bf16 fp32}; do
			TAIL=${SCALE_TAIL:-14} stage "scale_$p" ${SCALE_TIMEOUT:-540} $BIN scale --model resnet50 --device cuda --precision $p --gpus $g --batch 256 --steps ${SCALE_STEPS:-60} --torch --csv --out /tmp/s19/scale_$p --overwrite
		done
		[ -n "${SCALE_SOCKET-1}" ] && TAIL=${SCALE_TAIL:-14} stage scale_bf16_socket ${SCALE_TIMEOUT:-540} $BIN scale --model resnet50 --device cuda --precision bf16 --gpus $g --batch 256 --steps ${SCALE_STEPS:-60} --transport socket --torch --csv --out /tmp/s19/scale_bf16_socket --overwrite
		tar czf "$OUT/scale19.tgz" -C /tmp s19 ;;
	regress)
		# this build against an earlier one (BASE_BIN, e.g. .carry/gpuperf_base), interleaved,
		# then PyTorch in the same modes: speed and peak memory at batch 256
		base=${BASE_BIN:-.carry/gpuperf_base}
		for m in ${REGRESS_MODELS:-resnet50 resnet18 mobilenet_v2}; do
			for p in ${REGRESS_PRECISIONS:-fp32 tf32 bf16}; do
				TAIL=0 stage "regress_${m}_${p}_new" 180 $BIN train --model $m --device cuda --precision $p --batch 256 --steps 30 --json --out /tmp/gp_regress/${m}_$p
				TAIL=0 stage "regress_${m}_${p}_base" 180 $base train --model $m --device cuda --precision $p --batch 256 --steps 30 --json --out /tmp/gp_regress_base/${m}_$p
			done
		done
		modes=$(echo ${REGRESS_PRECISIONS:-fp32 tf32 bf16} | sed 's/bf16/amp_bf16_cl/; s/fp16/amp_fp16_cl/; s/ /,/g')
		TAIL=0 stage regress_torch 400 python3 $TB train --models $(echo ${REGRESS_MODELS:-resnet50 resnet18 mobilenet_v2} | tr ' ' ,) --modes $modes --batch 256 --iters 30
		python3 tools/regress_table.py "$OUT" ;;
	tta)
		# 10 classes of glyphs (--difficulty 1: s9's H100 runs, docs/training.md) at 160x160: TTA_IMAGES in all, 1/6 of them val
		rm -rf /tmp/gp_tta /tmp/gp_tta_run
		stage tta_data 120 $BIN dataset make --out /tmp/gp_tta --classes 10 --images ${TTA_IMAGES:-18000} --val-fraction ${TTA_VAL_FRACTION:-0.1667} --size 160x160 --difficulty ${TTA_DIFFICULTY:-1} --seed 1
		TAIL=40 stage tta ${TTA_TIMEOUT:-480} bash tools/tta.sh $BIN /tmp/gp_tta /tmp/gp_tta_run
		tar czf "$OUT/tta.tgz" -C /tmp gp_tta_run
		cp /tmp/gp_tta_run/summary.md "$OUT/tta_summary.md" 2>/dev/null
		cp /tmp/gp_tta_run/val_top1_vs_time.png "$OUT/tta_val_top1_vs_time.png" 2>/dev/null ;;
	*) echo "unknown stage $s" ;;
	esac
done
