#!/usr/bin/env bash
# What users read, kept true: bf16 on a CPU without bf16 instructions says at the start that it
# will be slower and why; a bf16 run records bf16 in its checkpoints and metrics; the progress
# line and the summary round the validation loss alike; layout warnings go to stderr before
# the first step; the planner's figures stay readable at any magnitude; busbw's NVLS factor and
# the DeepSpeed ZeRO-2 code convention; measured beside planned lines name their differences.
# Usage: report_consistency.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run=(train --model tiny --steps 2 --eval-every 0 --eval-batches 1)

# check NAME CONDITION...: one expectation on files or captured output.
check() {
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    failures=$((failures + 1))
  fi
}

# bf16 without bf16 kernels (ONEDNN_MAX_CPU_ISA=AVX2 makes oneDNN report none on any CPU): one
# warning on stderr, before the first step, with the reason; exit 0.
ONEDNN_MAX_CPU_ISA=AVX2 "$DTRAIN" "${run[@]}" --precision bf16 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "bf16 emulated: exit 0 (got $rc)" test $rc -eq 0
check "bf16 emulated: one warning that bf16 will be slower, on stderr" \
  test "$(grep -c 'warning: --precision bf16 will be slower than fp32 here' "$tmp/err")" = 1
check "bf16 emulated: the warning says why (no bf16 instructions or oneDNN reports less)" \
  grep -qE 'has no bf16 dot-product instructions|but oneDNN reports only avx2' "$tmp/err"
check "bf16 emulated: the warning comes before the first step" \
  test "$(grep -nE '^warning: --precision bf16|^step ' "$tmp/err" | head -1 | grep -c warning)" = 1
check "bf16 emulated: nothing of it on stdout" bash -c "! grep -q 'will be slower' '$tmp/out'"
# Left alone, the run header names the backend: with oneDNN's bf16 kernels (a CPU with
# AVX512_BF16 or AMX-BF16) no warning; emulated, the warning.
"$DTRAIN" "${run[@]}" --precision bf16 >/dev/null 2>"$tmp/err"
if grep -q 'bf16 (oneDNN .* matmul' "$tmp/err"; then
  check "bf16 on oneDNN's bf16 kernels: no slowdown warning" \
    bash -c "! grep -q 'will be slower' '$tmp/err'"
else
  check "bf16 emulated on this CPU: the slowdown warning" grep -q 'will be slower' "$tmp/err"
fi
"$DTRAIN" "${run[@]}" >/dev/null 2>"$tmp/err"
check "fp32: no bf16 warning" bash -c "! grep -q 'bf16' '$tmp/err'"

# A bf16 run records "bf16" in every checkpoint manifest and in the --metrics run record.
"$DTRAIN" train --model tiny --steps 4 --eval-every 0 --eval-batches 1 --precision bf16 \
  --save "$tmp/ck" --save-every 2 --metrics "$tmp/m.jsonl" >/dev/null 2>&1
rc=$?
check "bf16 run with --save and --metrics: exit 0 (got $rc)" test $rc -eq 0
manifests=("$tmp"/ck/step-*/manifest.json)
check "bf16 run: ${#manifests[@]} checkpoint manifests" test ${#manifests[@]} -ge 2
for m in "${manifests[@]}"; do
  check "$(basename "$(dirname "$m")") manifest records precision bf16" \
    grep -qE '"precision": *"bf16"' "$m"
done
check "--metrics run record: precision bf16" \
  bash -c "head -1 '$tmp/m.jsonl' | grep -qE '\"precision\": *\"bf16\"'"
"$DTRAIN" "${run[@]}" --metrics "$tmp/m32.jsonl" >/dev/null 2>&1
check "--metrics run record of an fp32 run: precision fp32" \
  bash -c "head -1 '$tmp/m32.jsonl' | grep -qE '\"precision\": *\"fp32\"'"

# The progress line's validation loss is the eval line's and the summary's, rounded the same way
# (4 decimals): the progress line after step 3's evaluation, and the final one in the summary.
"$DTRAIN" train --model tiny --steps 6 --eval-every 3 --eval-batches 1 --log-every 1 \
  >"$tmp/out" 2>"$tmp/err"
progress_val=$(grep -E '^step 4/6 .* val ' "$tmp/err" | sed -E 's/.* val ([0-9.]+) .*/\1/')
eval_3=$(grep -E '^step 3/6: validation loss ' "$tmp/err" | sed -E 's/.*validation loss //')
eval_6=$(grep -E '^step 6/6: validation loss ' "$tmp/err" | sed -E 's/.*validation loss //')
summary_val=$(grep -E '^  at end ' "$tmp/out" | awk '{print $4}')
check "validation loss after step 3: progress line '$progress_val' = eval line '$eval_3'" \
  test -n "$progress_val" -a "$progress_val" = "$eval_3"
check "final validation loss: eval line '$eval_6' = summary '$summary_val'" \
  test -n "$eval_6" -a "$eval_6" = "$summary_val"

# A TP group across nodes: the warning on stderr before the first step, not in the stdout report.
"$DTRAIN" "${run[@]}" --dp 2 --tp 2 --ranks-per-node 2 --rank-order dp-tp-pp >"$tmp/out" \
  2>"$tmp/err"
rc=$?
check "TP across nodes: exit 0 (got $rc)" test $rc -eq 0
check "TP across nodes: the warning is on stderr" \
  grep -q 'warning: TP group {0,2} spans nodes {0,1}' "$tmp/err"
check "TP across nodes: the warning comes before the first step" \
  test "$(grep -nE '^warning: TP group|^step ' "$tmp/err" | head -1 | grep -c warning)" = 1
check "TP across nodes: no warning in the stdout report" bash -c "! grep -q 'warning' '$tmp/out'"

# Huge planner figures keep a unit and a space before the next column (this shape printed
# "144001.62 TB12 B each" and "192908.21 TBof 80.00 GB").
huge=(plan --model gpt3-175b --cluster 1x8xH100 --layers 100000 --hidden 100000 --heads 100)
"$DTRAIN" "${huge[@]}" >"$tmp/out" 2>&1
rc=$?
check "plan of a 12-quadrillion-parameter shape: exit 0 (got $rc)" test $rc -eq 0
check "plan of that shape: every memory row reads 'number unit  note'" \
  test "$(grep -cE '^  (params|grads|optimizer state) +[0-9.]+ (GB|TB|PB|EB|ZB|YB) +[0-9]+ B each' \
    "$tmp/out")" = 3
check "plan of that shape: total in PB with a space before 'of'" \
  grep -qE '^  total +192.9 PB +of 80.00 GB: DOES NOT FIT, over by 192.9 PB' "$tmp/out"
check "plan of that shape: no digits or words run into a unit ('TB12', 'TBof')" \
  bash -c "! grep -qE '[0-9] [KMGTPEZY]?B[0-9a-z]' '$tmp/out'"

# busbw: the in-network-reduction factor for NVLS / NVLS-tree all-reduces, (n-1)/(n+1).
expect_output "busbw = algbw x 0.7778 = \(n-1\)/\(n\+1\)" busbw --size 1GiB --ranks 8 --time-us 6000 \
  --nccl-algo nvls
expect_output "algbw 179 GB/s, busbw 139 GB/s" busbw --size 1GiB --ranks 8 --time-us 6000 \
  --nccl-algo NVLSTree
expect_output "busbw = algbw x 1.7500" busbw --size 1GiB --ranks 8 --time-us 6000 --nccl-algo ring
expect_output "busbw = algbw x 0.8750" busbw --op all_gather --size 1GiB --ranks 8 --time-us 6000 \
  --nccl-algo nvls
expect_output '"nccl_algo": "nvls"' busbw --size 1GiB --ranks 8 --time-us 6000 --nccl-algo nvls --json
expect_error "--nccl-algo must be one of ring, tree, .*nvls, nvlstree, pat; got 'nvlink'" \
  busbw --size 1GiB --ranks 8 --time-us 6000 --nccl-algo nvlink
expect_error "--nccl-algo nvls with --cluster" busbw --size 1GiB --ranks 8 --cluster 1x8xH100 \
  --nccl-algo nvls

# DeepSpeed's ZeRO-2 estimator: its current code's no-offload row beside its docs' form (t5-3b's
# 2851M parameters on 8 GPUs: 11.28 GiB by the code, 15.93 by the docs, as memory.rst prints).
z2=(plan --params 2851e6 --largest-layer 32e6 --cluster 1x8xA100 --offload
  --offload-convention deepspeed-zero2-code)
expect_output "11.28 GiB +offload_optimizer=none, code: 2 Psi \+ int\(18 Psi / GPUs\)" "${z2[@]}"
expect_output "15.93 GiB +offload_optimizer=none, docs: 4 Psi \+ 16 Psi / GPUs" "${z2[@]}"
expect_output "gpu_mem = 2 \* total_params \+ int\(18 \* total_params / total_gpus\)" "${z2[@]}"
expect_error "--offload-convention must be deepspeed, deepspeed-zero2-code or zero-offload" \
  plan --params 2851e6 --largest-layer 32e6 --cluster 1x8xA100 --offload --offload-convention ds

finish
