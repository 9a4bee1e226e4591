# `dtrain plan`, `dtrain scenario` and `dtrain bench plan`: help on every flag, the table and the
# same figures as JSON, the search with its reasons, and the cluster file round trip.
source "$(dirname "$0")/lib/expect.bash"

for flag in --model --layers --hidden --heads --kv-heads --ffn-hidden --vocab --seq-length \
  --params --global-batch --tokens --achieved-tflops --step-time --precision --flops --cluster --nodes --gpu-memory \
  --peak-tflops --intra-bandwidth --inter-bandwidth --dp --tp --pp --vp --zero --micro-batch \
  --microbatches --recompute --sequence-parallel --schedule --rank-order --search --top --json --largest-model --offload --offload-convention --largest-layer --print-cluster \
  --selective-flops; do
  expect_output "$flag" plan --help
done
expect_output "list" scenario --help
expect_output "--repeats" bench plan --help

c=(--cluster 8x8xH100)
l=(--tp 8 --pp 2 --zero 1 --recompute selective --sequence-parallel)
expect_output "Memory per GPU" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "fits, .* GB free" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "TP +reduce_scatter .*NVLink \(1 node\)" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "PP +send/recv .*InfiniBand \(2 nodes\)" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "timed bubble +0.4% of the step, 0.4% of the ideal time" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "MFU .*narayanan convention" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "2.00T tokens in [0-9.]+ days" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output '"fraction_of_ideal"' plan --model llama2-70b "${c[@]}" "${l[@]}" --json
expect_output '"params": 68976648192' plan --model llama2-70b "${c[@]}" "${l[@]}" --json
expect_output "6nd convention" plan --model llama2-70b "${c[@]}" "${l[@]}" --flops 6nd
expect_output "dp=4 tp=8 pp=2 zero=0 b=4 " plan --model llama2-70b "${c[@]}" --tp 8 --pp 2 --microbatches 64
expect_output "custom: " plan "${c[@]}" --layers 4 --hidden 256 --heads 4 --vocab 1000 --seq-length 128 --global-batch 64

# The search: ranked layouts, the reason each wins, and the main rejections.
expect_output "Best layouts by predicted throughput" plan --model llama2-70b "${c[@]}" --search
expect_output "why: step" plan --model llama2-70b "${c[@]}" --search
expect_output "tp=16 crosses the node boundary .* would run over InfiniBand" plan --model llama2-70b "${c[@]}" --search
expect_output "layouts do not fit in 80.00 GB per GPU" plan --model llama2-70b "${c[@]}" --search
expect_output '"explanations"' plan --model llama2-70b "${c[@]}" --search --json --top 2
# --search with layout flags holds them: every ranked layout has tp=8 and zero=1.
out=$("$DTRAIN" plan --model llama2-70b "${c[@]}" --search --tp 8 --zero 1 --top 4 2>&1)
if grep -q "fixed: tp=8 zero=1" <<<"$out" && [ "$(grep -cE '^  [0-9]+ +dp=[0-9]+ tp=8 .*zero=1' <<<"$out")" = 4 ] &&
  ! grep -qE '^  [0-9]+ +dp=[0-9]+ tp=(1|2|4|16|32|64) ' <<<"$out"; then
  echo "ok: --search --tp 8 --zero 1 ranks only tp=8 zero=1 layouts"
else
  echo "FAIL: --search --tp 8 --zero 1:"; echo "$out" | head -12
  failures=$((failures + 1))
fi
# Training compute and a measured rate: GPT-3's 3.14e23 FLOPs = 3.64e3 PF-days (Brown et al.
# 2020, Table D.1, 6ND), and at an achieved 140 TFLOP/s per GPU on 1024 A100s about 34 days
# (Narayanan et al. 2021, §5.1).
gpt3=(plan --model gpt3-175b --cluster 128x8xA100 --tp 8 --pp 16 --recompute full --tokens 300e9)
expect_output "compute 6ND = 3.14e\+23 FLOPs = 3,638 PF-days" "${gpt3[@]}"
expect_output "300.00B tokens in 3[45]\.[0-9] days" "${gpt3[@]}" --achieved-tflops 140
expect_output "from --achieved-tflops \(the model predicts" "${gpt3[@]}" --achieved-tflops 140
expect_output "HFU [0-9.]+% \(recompute's FLOPs added: full\)" "${gpt3[@]}"
expect_output '"step_source": "--step-time"' "${gpt3[@]}" --step-time 30 --json
# The largest model per ZeRO stage: the ZeRO paper's Table 2 row for a 32 GB V100 and 64-way
# DP (2B, 7.6B, 14.4B, 128B), and its MP-16 row's 2T on 1024 GPUs.
expect_output "1 \(P_os\) +4.188 +7.64B" plan --cluster 8x8xA100 --gpu-memory 32GB --largest-model
expect_output "3 \(P_os\+g\+p\) +0.250 +2.05T" plan --cluster 128x8xA100 --gpu-memory 32GB --tp 16 --largest-model
expect_output '"largest_model"' plan --cluster 8x8xA100 --largest-model --json
# Selective recompute's HFU counts Korthikanti et al.'s Eq. 8 unless told otherwise.
expect_output "HFU .*counted as Korthikanti et al. Eq. 8: 12Bs\^2h per layer" plan --model llama2-70b "${c[@]}" "${l[@]}"
expect_output "HFU .*counted as rerun: 4Bs\^2h per layer" plan --model llama2-70b "${c[@]}" "${l[@]}" --selective-flops rerun
expect_output '"selective_flops": "rerun"' plan --model llama2-70b "${c[@]}" "${l[@]}" --selective-flops rerun --json
# Each pipeline stage's sends: GPT-3 at dp 16, tp 8 (SP), pp 8, b 1 has M = 1536 / 16 = 96
# micro-batches of 1 x 2048 x 12288 bf16 values / 8 = 6.29 MB; interior stages send 2 per
# micro-batch (1.21 GB), the first and the last 1 (0.604 GB).
g3=(plan --model gpt3-175b --cluster 128x8xA100 --tp 8 --pp 8 --dp 16 --sequence-parallel)
expect_output "PP bytes sent per stage .*: 0: 0.604 GB, 1: 1.21 GB, .*, 7: 0.604 GB" "${g3[@]}"
expect_output '"pp_bytes_per_stage"' "${g3[@]}" --json
# The widest GPT-3-shaped model that fits with activations, per ZeRO stage (the search is
# checked against the planner in tests/plan/largest_model_test.cc).
expect_output "widest gpt3-175b-shaped model that fits 80.00 GB per GPU with activations" \
  "${g3[@]}" --recompute selective --largest-model
expect_output '"next_width_total_bytes"' "${g3[@]}" --largest-model --zero 1 --json
# ZeRO-Offload's own split: 2 bytes per parameter per GPU (174.62B x 2 = 349.23 GB) and 14 on CPU
# over 128 GPUs, 8 per node: 174.62B x 14 x 8 / 128 = 152.79 GB.
expect_output "2 +152.79 GB +349.23 GB +ZeRO-Offload" plan --model gpt3-175b --cluster 16x8xA100 \
  --offload --offload-convention zero-offload
# CPU offload in DeepSpeed's convention: its published t5-small output (60M parameters, 16M
# largest layer, 1 GPU): 1.52 GB per CPU and 0.06 GB per GPU with both offloaded, 0.34 / 1.08
# without offload and zero_init=0 (DeepSpeed's GB are GiB).
off=(plan --cluster 1x1xA100 --params 60506624 --largest-layer 16449536 --offload)
expect_output "3 +1.52 GiB +0.06 GiB +offload_param=cpu, offload_optimizer=cpu, zero_init=1" "${off[@]}"
expect_output "3 +0.34 GiB +1.08 GiB +offload_param=none, offload_optimizer=none, zero_init=0" "${off[@]}"
expect_output '"convention": "deepspeed"' "${off[@]}" --json
# --params sets the state memory: the ZeRO paper's Figure 1, Psi = 7.5B on 64 GPUs with ZeRO-3:
# 16 Psi / 64 = 1.875 GB (its "1.9GB"), from the llama2-7b preset's shape.
expect_output "--params 7.50B sets the parameter counts" plan --model llama2-7b --cluster 8x8xA100 \
  --params 7.5e9 --dp 64 --zero 3
expect_output "params +0.234 GB .*ZeRO-3" plan --model llama2-7b --cluster 8x8xA100 --params 7.5e9 --dp 64 --zero 3

# A cluster file written by --print-cluster reads back as the same cluster.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$DTRAIN" plan --cluster 2x8xA100 --print-cluster >"$tmp/cluster.json"
expect_output '"bandwidth_bytes_per_s": 25000000000' plan --cluster "$tmp/cluster.json" --print-cluster
expect_output "2x8xA100-80GB: 16 GPUs" plan --model llama2-13b --cluster "$tmp/cluster.json" --zero 3

# Scenarios: the list, each one as text and as JSON.
expect_output "size-70b" scenario list
for s in size-70b stalled-scaleout 3d-placement gpipe-vs-1f1b ddp-vs-fsdp; do
  expect_output "Findings" scenario "$s"
  expect_output '"findings"' scenario "$s" --json
done
expect_output "1.10 TB of model states" scenario size-70b
expect_output "7/15 = 46.7% at M=8 and 7/71 = 9.9% at M=64" scenario gpipe-vs-1f1b
expect_output "FSDP pays 1.5x the bytes" scenario ddp-vs-fsdp

# The search benchmark runs (its speed is reported, not asserted).
expect_output "layouts evaluated" bench plan --repeats 1
finish
