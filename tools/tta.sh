#!/bin/bash
# Time to accuracy, gpuperf beside PyTorch (docs/training.md): the same recipe on the
# same files, TTA_SEEDS seeds each, interleaved (gpuperf seed 1, PyTorch seed 1, ...) so
# that a drift of the machine touches both; then tools/tta_summary.py and the chart.
#
#   bash tools/tta.sh GPUPERF_BIN DATA_DIR RUN_DIR
#
# DATA_DIR holds train/ and val/ (gpuperf dataset make --val-fraction F --difficulty 2).
# RUN_DIR gets gpuperf_s<seed>/train.json, pytorch_s<seed>/train.json, their logs,
# summary.md, summary.json and val_top1_vs_time.png. The recipe (environment overrides):
# resnet18, TTA_SIZE 128, TTA_BATCH 256, TTA_EPOCHS 16, SGD momentum 0.9 with TTA_LR 0.2
# and weight decay TTA_WD 5e-5, cosine per epoch after TTA_WARMUP 2 linear warmup epochs,
# label smoothing TTA_LS 0.1, bf16 (channels-last), TTA_WORKERS 16 loader workers,
# validation every epoch; gpuperf decodes with TTA_DECODE (auto: nvJPEG where it is).
# TTA_TORCH=0 runs gpuperf alone (no PyTorch, no summary: issue 21's accuracy of
# --decode gpu against cpu compares two such folders). Exit status: that of the
# summary (0 when it was written; with TTA_TORCH=0, 0 when every gpuperf run finished).
set -u
if [ $# -ne 3 ]; then
	echo "usage: bash tools/tta.sh GPUPERF_BIN DATA_DIR RUN_DIR" >&2
	exit 2
fi
BIN=$1 DATA=$2 RUN=$3
for d in "$DATA/train" "$DATA/val"; do
	[ -d "$d" ] || { echo "tta.sh: no $d (gpuperf dataset make --val-fraction F makes it)" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "tta.sh: $BIN is not an executable" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")/.." && pwd)
EPOCHS=${TTA_EPOCHS:-16} BATCH=${TTA_BATCH:-256} SIZE=${TTA_SIZE:-128} LR=${TTA_LR:-0.2}
WD=${TTA_WD:-5e-5} WARMUP=${TTA_WARMUP:-2} LS=${TTA_LS:-0.1} WORKERS=${TTA_WORKERS:-16}
DEVICE=${TTA_DEVICE:-cuda} PRECISION=${TTA_PRECISION:-bf16} MODEL=${TTA_MODEL:-resnet18}
mkdir -p "$RUN"
gp=() pt=()
for s in ${TTA_SEEDS:-1 2 3}; do
	echo "=== gpuperf seed $s ($(date +%T))"
	"$BIN" train --model "$MODEL" --device "$DEVICE" --precision "$PRECISION" \
		--data "$DATA" --epochs "$EPOCHS" --batch "$BATCH" --size "$SIZE" \
		--optimizer sgd --lr "$LR" --momentum 0.9 --weight-decay "$WD" \
		--lr-schedule cosine --warmup-epochs "$WARMUP" --label-smoothing "$LS" \
		--seed "$s" --workers "$WORKERS" --decode "${TTA_DECODE:-auto}" \
		--out "$RUN/gpuperf_s$s" --overwrite \
		> "$RUN/gpuperf_s$s.log" 2>&1
	echo "rc=$?"; tail -n 3 "$RUN/gpuperf_s$s.log"
	[ -f "$RUN/gpuperf_s$s/train.json" ] && gp+=("$RUN/gpuperf_s$s/train.json")
	[ "${TTA_TORCH:-1}" = 0 ] && continue
	echo "=== pytorch seed $s ($(date +%T))"
	python3 "$HERE/tests/torch/tta.py" --model "$MODEL" --device "$DEVICE" \
		--precision "$PRECISION" --data "$DATA" --epochs "$EPOCHS" --batch "$BATCH" \
		--size "$SIZE" --lr "$LR" --momentum 0.9 --weight-decay "$WD" \
		--warmup-epochs "$WARMUP" --label-smoothing "$LS" --seed "$s" \
		--workers "$WORKERS" --out "$RUN/pytorch_s$s" > "$RUN/pytorch_s$s.log" 2>&1
	echo "rc=$?"; tail -n 3 "$RUN/pytorch_s$s.log"
	[ -f "$RUN/pytorch_s$s/train.json" ] && pt+=("$RUN/pytorch_s$s/train.json")
done
if [ "${TTA_TORCH:-1}" = 0 ]; then
	n=$(echo ${TTA_SEEDS:-1 2 3} | wc -w)
	[ ${#gp[@]} -eq "$n" ] || { echo "tta.sh: ${#gp[@]} of $n gpuperf runs finished: see $RUN/*.log" >&2; exit 1; }
	exit 0
fi
if [ ${#gp[@]} -eq 0 ] || [ ${#pt[@]} -eq 0 ]; then
	echo "tta.sh: no finished run of gpuperf (${#gp[@]}) or of PyTorch (${#pt[@]}): see $RUN/*.log" >&2
	exit 1
fi
"$BIN" plot "${gp[@]}" "${pt[@]}" --out "$RUN"
python3 "$HERE/tools/tta_summary.py" --gpuperf "${gp[@]}" --pytorch "${pt[@]}" \
	--json "$RUN/summary.json" > "$RUN/summary.md"
rc=$?
cat "$RUN/summary.md"
exit $rc
