# `dtrain bench clock`: the published rows with their errors, a vTrain directory read from a
# CSV this test writes (byte-order mark included), its refusals, and the cluster file's rates
# refused by field name.
source "$(dirname "$0")/lib/expect.bash"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

expect_output "Korthikanti 2022 T5 full recompute \(fit\) +22B +tp8 pp1 dp1 b4" bench clock
expect_output "Korthikanti 2022 T5 SP \+ selective \(held out\) +1T" bench clock
expect_output "Narayanan 2021 T1 \(held out\) +1T +tp8 pp64 dp6 b1" bench clock
expect_output '"datasheet_only_error"' bench clock --json

v="$dir/vtrain"
mkdir -p "$v"
printf '\xef\xbb\xbfParameters (billion),# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n' >"$v/ground_truth_multi.csv"
printf '3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5\n3.6,64,512,8,3072,32,30,2048,2,32,1,3975.2\n' >>"$v/ground_truth_multi.csv"
printf '\xef\xbb\xbf# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n' >"$v/ground_truth_single.csv"
printf '2,16,8,1024,16,24,1024,1,1,2,372.160408\n' >>"$v/ground_truth_single.csv"
expect_output "multi-node: 2 rows, mean \|error\|" bench clock --vtrain "$v"
expect_output "3\.6B on 64 GPUs, B 512 +2 rows" bench clock --vtrain "$v"
expect_output "single-node: 1 rows" bench clock --vtrain "$v"
expect_output '"rank_correlation"' bench clock --vtrain "$v" --json

printf '3.6,64,512\n' >>"$v/ground_truth_multi.csv"
expect_error "line 4 has 3 columns, expected 12" bench clock --vtrain "$v"
expect_error "--vtrain" bench clock --vtrain "$dir/missing"

cat >"$dir/c.json" <<'JSON'
{"name": "c", "preset": "A100", "nodes": 1,
 "gpu": {"rates": {"version": 1, "memory_bytes_per_s": 2.039e12, "fp32_peak_flops": 1.95e13,
                   "gemm_efficiency": 0.87, "kernel_overhead_us": 42, "link_efficiency": 1}}}
JSON
expect_error "missing field 'gpu.rates.memory_efficiency'" plan --model megatron-1.7b --cluster "$dir/c.json" --global-batch 8
sed -i 's/"link_efficiency": 1}/"link_efficiency": 1, "memory_efficiency": 50}/' "$dir/c.json"
expect_error "field 'gpu.rates.memory_efficiency' is 50" plan --model megatron-1.7b --cluster "$dir/c.json" --global-batch 8

exit $failures
