#!/usr/bin/env bash
# `dtrain train --precision bf16`: the run header names the bf16 GEMM (oneDNN's kernels, or the
# emulation when oneDNN sees no bf16 instructions: ONEDNN_MAX_CPU_ISA lowers what it sees), bf16
# trains every layout to about fp32's losses, a run resumes across precisions, and a bad value
# is refused naming the flag. Usage: precision.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=(train --model tiny --layers 4 --steps 3 --eval-every 0 --eval-batches 1)

expect_output 'bf16 \((oneDNN [0-9.]+ matmul, avx512_core_(bf16|amx)|emulated .*)\)' \
  "${run[@]}" --precision bf16
ONEDNN_MAX_CPU_ISA=AVX2 expect_output 'bf16 \(emulated \(bf16 operands widened to fp32' \
  "${run[@]}" --precision bf16
expect_output 'DP\(2\)-TP\(2\)-PP\(2\)-rank\(0\) ZeRO-3 SP bf16' "${run[@]}" --precision bf16 \
  --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 3 --sequence-parallel
expect_error "--precision: must be fp32 or bf16 \(got fp16\)" "${run[@]}" --precision fp16
expect_error "--precision: must be fp32 or bf16" bench train --precision fp64

# --grad-reduce bf16: the DP syncs in bf16, every byte counter still its plan/ formula (at 2-byte
# gradient elements), and the two-level all-reduce refused.
expect_output 'DP\(4\)-TP\(1\)-PP\(1\)-rank\(0\) ZeRO-1 bf16 grad reduce' "${run[@]}" --dp 4 --zero 1 \
  --grad-reduce bf16
out=$("$DTRAIN" "${run[@]}" --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 2 --grad-reduce bf16 2>/dev/null)
if grep -qE '\(plan [0-9]' <<<"$out"; then
  echo "FAIL: a measured figure differs from its plan/ formula under --grad-reduce bf16"
  failures=$((failures + 1))
else
  echo "ok: every figure of the 8-rank bf16-grad-reduce layout equals its plan/ formula"
fi
expect_error '--grad-reduce bf16 needs --dp-all-reduce flat' "${run[@]}" --dp 4 --ranks-per-node 2 \
  --dp-all-reduce hierarchical --grad-reduce bf16

# bf16 beside fp32 over 150 steps of the tiny model, and the 8-rank layout beside the one-rank
# bf16 run: the final validation losses within 2% (the bench preset's 300 steps came within 0.2%).
long=(train --model tiny --steps 150 --eval-every 150 --eval-batches 4 --json)
"$DTRAIN" "${long[@]}" >"$tmp/fp32.json" 2>/dev/null
"$DTRAIN" "${long[@]}" --precision bf16 >"$tmp/bf16.json" 2>/dev/null
"$DTRAIN" "${long[@]}" --precision bf16 --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 3 \
  >"$tmp/bf16-8.json" 2>/dev/null
if ! command -v python3 >/dev/null; then
  echo "skip: no python3 to compare the losses"
elif ! python3 - "$tmp/fp32.json" "$tmp/bf16.json" "$tmp/bf16-8.json" <<'PY'
import json, sys
fp32, bf16, bf16_8 = (json.load(open(f))["loss"]["final_val"] for f in sys.argv[1:4])
print(f"final validation loss: fp32 {fp32:.4f}, bf16 {bf16:.4f}, bf16 on 8 ranks {bf16_8:.4f}")
assert abs(bf16 - fp32) <= 0.02 * fp32, (fp32, bf16)
assert abs(bf16_8 - bf16) <= 0.02 * bf16, (bf16, bf16_8)
assert bf16 != fp32, "bf16 gave fp32's bits: the bf16 products did not run"
PY
then
  echo "FAIL: bf16's losses are not within 2% of fp32's"
  failures=$((failures + 1))
else
  echo "ok: bf16 trains to fp32's loss, on one rank and on DP2 x TP2 x PP2"
fi

# Checkpoints hold fp32 weights and moments in both precisions (a bf16 run writes its fp32
# master), so a checkpoint resumes in the other precision and layout, both ways.
save=(train --model tiny --steps 4 --eval-every 0 --eval-batches 1 --save "$tmp/ck" --save-every 2)
"$DTRAIN" "${save[@]}" >/dev/null 2>&1
expect_output 'resumed at step 2 from' train --model tiny --steps 4 --eval-every 0 --eval-batches 1 \
  --resume "$tmp/ck/step-00000002" --precision bf16 --dp 2 --tp 2
"$DTRAIN" train --model tiny --steps 4 --eval-every 0 --eval-batches 1 --save "$tmp/ck16" \
  --save-every 2 --precision bf16 --dp 2 --zero 3 >/dev/null 2>&1
expect_output 'resumed at step 2 from' train --model tiny --steps 4 --eval-every 0 --eval-batches 1 \
  --resume "$tmp/ck16/step-00000002" --pp 2 --microbatches 2
finish
