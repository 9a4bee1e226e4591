# `dtrain bench clock`: the published rows with their errors (Narayanan et al. 2021 Table 1's
# ten rows recomputed from the JSON by Eq. 3), a vTrain directory read from a CSV this test
# writes (byte-order mark included), its refusals, and the cluster file's rates refused by field
# name.
source "$(dirname "$0")/lib/expect.bash"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

expect_output "Korthikanti 2022 T5 full recompute \(fit\) +22B +tp8 pp1 dp1 b4" bench clock
expect_output "Korthikanti 2022 T5 SP \+ selective \(held out\) +1T" bench clock
expect_output "Narayanan 2021 T1 \(held out\) +1T +tp8 pp64 dp6 b1 v2 " bench clock
expect_output "Narayanan 2021 T1 \(held out\) +1\.7B +tp1 pp1 dp32 b[0-9]+ " bench clock
expect_output "Narayanan 2021 T1 \(held out\) +529\.6B +tp8 pp35 dp9 b[0-9]+ v3 " bench clock
expect_output "Narayanan Table 1 \(held out\): 10 rows, mean \|error\|" bench clock
expect_output '"datasheet_only_error"' bench clock --json

# Each Narayanan row: its seconds per iteration are Eq. 3's FLOPs over the table's throughput
# (per GPU rounded to 1 TFLOP/s, the aggregate the bench reads to 0.1 PFLOP/s), its layout fills the table's GPUs and divides its batch, its
# errors and TFLOP/s follow from its times, and the summary is the mean of the rows.
"$DTRAIN" bench clock --json >"$dir/clock.json" || fail "bench clock --json exited non-zero"
python3 - "$dir/clock.json" <<'PY' || fail "the Narayanan rows do not follow from Table 1"
import json, math, re, sys
j = json.load(open(sys.argv[1]))
# Table 1: hidden, layers, TP, PP, GPUs, batch, TFLOP/s per GPU; s = 2048, V = 51200.
table = {"1.7B": (2304, 24, 1, 1, 32, 512, 137), "3.6B": (3072, 30, 2, 1, 64, 512, 138),
         "7.5B": (4096, 36, 4, 1, 128, 512, 142), "18.4B": (6144, 40, 8, 1, 256, 1024, 135),
         "39.1B": (8192, 48, 8, 2, 512, 1536, 138), "76.1B": (10240, 60, 8, 4, 1024, 1792, 140),
         "145.6B": (12288, 80, 8, 8, 1536, 2304, 148),
         "310.1B": (16384, 96, 8, 16, 1920, 2160, 155),
         "529.6B": (20480, 105, 8, 35, 2520, 2520, 163),
         "1T": (25600, 128, 8, 64, 3072, 3072, 163)}
rows = [p for p in j["published"] if p["source"].startswith("Narayanan")]
assert sorted(p["model"] for p in rows) == sorted(table), [p["model"] for p in rows]
s, V = 2048, 51200
errors = []
for p in rows:
    h, l, tp, pp, gpus, B, X = table[p["model"]]
    F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    achieved = F / (p["published"] * gpus) * 1e-12
    assert abs(achieved - X) <= 0.5 + 50 / gpus, (p["model"], achieved, X)
    assert p["published_tflops_per_gpu"] == X and p["gpus"] == gpus and p["unit"] == "s/iter", p
    m = re.fullmatch(r"tp(\d+) pp(\d+) dp(\d+) b(\d+)( v(\d+))?", p["layout"])
    assert m, p["layout"]
    t, q, d, b = (int(m.group(i)) for i in range(1, 5))
    assert (t, q, d * t * q) == (tp, pp, gpus) and (B // d) % b == 0, (p["model"], p["layout"])
    assert (m.group(6) is not None) == (pp > 1), p["layout"]  # interleaved where pipelined
    assert math.isclose(p["error"], p["predicted"] / p["published"] - 1, rel_tol=1e-9)
    assert math.isclose(p["predicted_tflops_per_gpu"], F / (p["predicted"] * gpus) * 1e-12,
                        rel_tol=1e-6)
    errors.append(p["error"])
n = j["narayanan"]
assert n["rows"] == 10
assert math.isclose(n["mean_abs_error"], sum(map(abs, errors)) / 10, rel_tol=1e-9)
assert math.isclose(n["max_abs_error"], max(map(abs, errors)), rel_tol=1e-9)
PY

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
