#!/bin/sh
# Rerun the hostile battery (tests/test_hostile.c, its cases in tests/hostile_cases.c) and
# put how each case ends into docs/robustness.md, below its "<!-- table -->" line.
#   tools/hostile_summary.sh [BUILD]     BUILD: the build folder (build)
set -e
build=${1:-build}
doc=docs/robustness.md
table=$(mktemp)
trap 'rm -f "$table" "$table.doc"' EXIT
# the battery's own verdict is in the table; a failing case must not stop the update
HOSTILE_REPORT=$table GPUPERF_BIN=$build/gpuperf "$build/gpuperf_tests" hostile_battery >&2 || true
[ -s "$table" ] || { echo "hostile_summary: the battery wrote no table" >&2; exit 1; }
sed -n '1,/^<!-- table -->$/p' "$doc" > "$table.doc"
cat "$table" >> "$table.doc"
mv "$table.doc" "$doc"
echo "wrote $doc"
