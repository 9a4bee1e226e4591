#!/usr/bin/env bash
# The malloc behind `dtrain`: --version and every --json report name it, each --metrics step line
# counts the process's page faults during the step, and with jemalloc (what scripts/setup builds
# with) the steps after the first two fault in next to no fresh pages on the layouts that
# allocate per micro-batch or per bucket: bf16 ZeRO-1's reduce pieces on the communication
# thread, ZB-H1's weight-gradient stashes and the pipeline's messages, and a model whose buffers
# reach jemalloc's 8 MiB "oversize" class. Under glibc's malloc those freed buffers went back to
# the kernel, and every step faulted hundreds to thousands of pages in again.
# Usage: allocator.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_output '^  allocator: (jemalloc [0-9]|glibc [0-9.]+ malloc|system malloc)' --version
expect_output '"allocator": "(jemalloc [0-9]|glibc [0-9.]+ malloc|system malloc)' train \
  --model tiny --steps 1 --eval-batches 1 --json

allocator=$("$DTRAIN" --version | sed -n 's/^  allocator: //p')
# faults LABEL FLAGS...: a 6-step bench run's page faults per step, steps 4 to 6 bounded with
# jemalloc (32 pages: 128 KiB), counted and non-negative whatever the allocator.
faults() {
  local label=$1
  shift
  if ! "$DTRAIN" train --model bench --steps 6 --eval-every 0 --eval-batches 1 \
    --metrics "$tmp/m.jsonl" "$@" > /dev/null 2>&1; then
    echo "FAIL: $label: the run failed"
    failures=$((failures + 1))
    return
  fi
  if "$py" - "$tmp/m.jsonl" "$allocator" "$label" <<'PY'; then
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in steps if l["type"] == "step"]
faults = [l["page_faults"] for l in steps]
assert len(faults) == 6 and all(isinstance(f, int) and f >= 0 for f in faults), faults
if sys.argv[2].startswith("jemalloc"):
    assert max(faults[3:]) <= 32, f"{sys.argv[3]}: page faults per step {faults}"
    print(f"ok: {sys.argv[3]}: page faults per step {faults} (steps 4-6 at most 32)")
else:
    print(f"ok: {sys.argv[3]}: page faults per step {faults} (not bounded: {sys.argv[2]})")
PY
    :
  else
    echo "FAIL: $label"
    failures=$((failures + 1))
  fi
}
faults "bf16 dp2 ZeRO-1" --dp 2 --zero 1 --precision bf16
faults "pp2 ZB-H1, 4 micro-batches" --pp 2 --microbatches 4 --schedule zb-h1
# 8 blocks of 160 channels: buffers of 8 MiB and more, which jemalloc's default would serve from
# an arena that unmaps them when freed (cli/main.cc's malloc_conf keeps them).
faults "pp2 GPipe, 8 layers of 160 channels" --pp 2 --microbatches 4 --schedule gpipe \
  --layers 8 --hidden 160 --heads 8
finish
