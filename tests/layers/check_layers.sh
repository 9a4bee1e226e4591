#!/usr/bin/env bash
# The layer check (scripts/check-layers against src/dtrain/layers.txt): passes on this tree, and
# fails, naming the file, line and layers, on a copy of the layer file with an upward include
# and an undeclared folder planted in a scratch tree.
# Usage: check_layers.sh <repository root>
set -uo pipefail
root=${1:?usage: $0 <repository root>}
check=$root/scripts/check-layers
failures=0

out=$("$check" "$root" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: the tree breaks the layer order (exit $rc):"
  echo "$out"
  failures=$((failures + 1))
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/dtrain" "$tmp/cli"
cp "$root/src/dtrain/layers.txt" "$tmp/src/dtrain/"
for f in core data run; do mkdir -p "$tmp/src/dtrain/$f"; done
printf '#include "dtrain/core/check.h"\n' >"$tmp/src/dtrain/data/fine.h"
printf '#pragma once\n\n#include "dtrain/engine/engine.h"\n' >"$tmp/src/dtrain/data/planted.h"
printf '#include "dtrain/data/data.h"\n#include "dtrain/infer/sample.h"\n' >"$tmp/cli/main.cc"
# bench/ is checked too: it may include the planner and the engine, and nothing below may
# include it.
mkdir -p "$tmp/bench"
printf '#include "dtrain/engine/engine.h"\n' >"$tmp/bench/fine_bench.cc"
printf '#pragma once\n#include "bench/fine_bench.h"\n' >"$tmp/src/dtrain/run/planted_bench.h"
out=$("$check" "$tmp" 2>&1)
rc=$?
expect_line() {
  if ! grep -qF -- "$1" <<<"$out"; then
    echo "FAIL: the planted tree's report lacks: $1"
    failures=$((failures + 1))
  fi
}
if [ $rc -ne 1 ]; then
  echo "FAIL: the planted upward include passed the check (exit $rc)"
  failures=$((failures + 1))
fi
expect_line 'src/dtrain/data/planted.h:3: data includes "dtrain/engine/...": engine is above data (data may include: data core)'
expect_line 'src/dtrain/run/planted_bench.h:2: run includes "bench/...": bench is above run'
expect_line "check-layers: 2 include(s) against the layer order"
if grep -q "fine.h\|cli/main.cc\|fine_bench.cc" <<<"$out"; then
  echo "FAIL: an include down the layers was reported:"
  echo "$out"
  failures=$((failures + 1))
fi
mkdir -p "$tmp/src/dtrain/newroom"
out=$("$check" "$tmp" 2>&1)
expect_line "src/dtrain/newroom: not declared in src/dtrain/layers.txt"

[ $failures -eq 0 ] && echo "check_layers: all expectations hold"
exit $((failures > 0))
