#!/bin/sh
# Run each libFuzzer target for a bounded time: tools/fuzz.sh BUILD SECONDS TARGET...
# Each target starts from its committed seeds (tests/fuzz/corpus/NAME, never written)
# plus what earlier runs found (BUILD/corpus/NAME), with its format's dictionary and
# input size limit. A crash, leak or timeout is written to BUILD/crashes/ and makes
# the run fail, after every target has had its turn.
set -u
build=$1
seconds=$2
shift 2
mkdir -p "$build/crashes"
failed=""
for target in "$@"; do
	name=${target#fuzz_}
	case $name in
	args) max_len=512 dict=args ;;
	image) max_len=16384 dict= ;;
	result) max_len=16384 dict=json ;;
	safetensors) max_len=4096 dict=safetensors ;;
	trace) max_len=16384 dict=json ;;
	*) max_len=4096 dict= ;;
	esac
	mkdir -p "$build/corpus/$name"
	echo "== $target: $seconds s, inputs up to $max_len bytes"
	# -timeout: one input in 10 s is a hang; -rss_limit_mb bounds the whole process
	# and so any single allocation (a parser that trusts a size field).
	"$build/$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -detect_leaks=1 \
		${dict:+-dict=tests/fuzz/dict/$dict.dict} \
		-artifact_prefix="$build/crashes/$name-" \
		"$build/corpus/$name" "tests/fuzz/corpus/$name" >"$build/$name.log" 2>&1
	rc=$?
	grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$build/$name.log"
	if [ $rc -ne 0 ]; then
		failed="$failed $name"
		grep -E -m 5 'ERROR|SUMMARY|Test unit written' "$build/$name.log"
		echo "   (the whole log: $build/$name.log)"
	fi
done
if [ -n "$failed" ]; then
	echo "fuzz: crashes in:$failed (inputs in $build/crashes/)"
	exit 1
fi
echo "fuzz: no crashes"
