# `dtrain calibrate --compute`: the CPU's measured rates in the table, in --json and in the cluster
# file ("gpu.measured"), which `dtrain plan --cluster` loads (a CPU's peak admitted) and refuses,
# naming the field, once a value is broken, a field missing or the version another.
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 1 MiB exchanges: calibrate refuses to write a file whose links read below plan's floor, and
# small exchanges among busy-polling thread ranks do on a loaded machine.
links=(--ranks 4 --ranks-per-node 2 --seconds 0.01 --trials 1 --iterations 5 --size 1MiB)
model=(--layers 2 --hidden 64 --heads 4 --vocab 256 --seq-length 64 --dp 4 --global-batch 8)

expect_output "--compute .*matrix products" calibrate --help
expect_error "--quick applies to --compute only" calibrate "${links[@]}" --quick
expect_error "--threads: must be at most 64" calibrate "${links[@]}" --compute --threads 65
expect_error "--passes applies to --compute only" calibrate "${links[@]}" --passes 2
expect_error "--passes: must be at least 1" calibrate "${links[@]}" --compute --quick --passes 0
# --quick measures once unless --passes says otherwise; the file records how many.
expect_output '"compute_passes": 1' calibrate "${links[@]}" --compute --quick --json
expect_output '"compute_passes": 2' calibrate "${links[@]}" --compute --quick --passes 2 --json

# The table: products, every kernel, the collectives, the interference; and the file.
out=$("$DTRAIN" calibrate "${links[@]}" --compute --quick --threads 2 -o "$tmp/x.json" 2>/dev/null) ||
  fail "calibrate --compute --quick exited $?"
for pattern in "^compute: .*cores \(measured in" "^256 x 256 x 256 +fp32 +2 " \
  "^256 x 256 x 256 +bf16 +1 " "^adamw " "^bf16_convert " "^softmax_backward " \
  "^all_reduce +hierarchical +4 " "^reduce_scatter +direct +2 " "^all_to_all +pairwise +4 " \
  "compute beside a communication thread: x[0-9]" "wrote $tmp/x.json" \
  "^a collective's wait for its partner with more threads than cores: [0-9.]+ ms" \
  "^256 x 256 x 256 +fp32 +1 +[0-9.]+ +[0-9.]+$" "^caches: L1d ([0-9]+ KiB|unknown), L2 "; do
  grep -qE -- "$pattern" <<<"$out" || fail "calibrate --compute: no line matching '$pattern'"
done
grep -q '"measured"' "$tmp/x.json" || fail "x.json has no gpu.measured"
expect_output '"comm_interference"' calibrate "${links[@]}" --compute --quick --json
expect_output '"corun_slowdown"' calibrate "${links[@]}" --compute --quick --json
expect_output '"oversubscribed_wait_s"' calibrate "${links[@]}" --compute --quick --json
expect_output '"gemm_warm"' calibrate "${links[@]}" --compute --quick --json
expect_output '"l3_shared_by"' calibrate "${links[@]}" --compute --quick --json

# plan loads the calibrated CPU (its peak is below an accelerator file's 1 TFLOP/s floor).
expect_output "^cluster .*calibrated 2x2: 4 GPUs" plan --cluster "$tmp/x.json" "${model[@]}"
expect_output '"cores": ' plan --cluster "$tmp/x.json" --print-cluster
# On measured rates the plan sizes dtrain's own engine too: the peak train checks before it runs
# (plan::engine_rank_of into predict_rank; tests/e2e/engine_profile_test.cc proves them equal).
expect_output "^  dtrain engine .*what \`dtrain train\` checks" plan --cluster "$tmp/x.json" "${model[@]}"
expect_output '"engine_peak_bytes": [1-9]' plan --cluster "$tmp/x.json" "${model[@]}" --json
# The engine clock runs the engine's --threads per rank (its default 1) and says so.
expect_output "^Time per step \\(clock: engine \\(measured rates\\), 1 compute thread per rank \\(--threads\\)" \
  plan --cluster "$tmp/x.json" "${model[@]}"
expect_output "^Time per step \\(clock: engine \\(measured rates\\), 2 compute threads per rank" \
  plan --cluster "$tmp/x.json" "${model[@]}" --threads 2
expect_output '"threads": 2' plan --cluster "$tmp/x.json" "${model[@]}" --threads 2 --json
expect_error "--threads applies to the engine clock only" plan --cluster 1x8xH100 "${model[@]}" \
  --threads 2
expect_error "--threads: must be at least 1" plan --cluster "$tmp/x.json" "${model[@]}" --threads 0

# Broken files are refused with the field's path. Keys are written sorted, so the first
# "seconds" is gemm[0]'s and the only "version" is gpu.measured's (the file carries no rates).
sed '0,/"seconds": [^,]*/s//"seconds": -1/' "$tmp/x.json" >"$tmp/negative.json"
expect_error "cluster file '$tmp/negative.json': field 'gpu.measured.gemm\[0\].seconds' is -1" \
  plan --cluster "$tmp/negative.json" "${model[@]}"
sed '0,/"seconds": [^,]*/s//"seconds": 0/' "$tmp/x.json" >"$tmp/zero.json"
expect_error "field 'gpu.measured.gemm\[0\].seconds' is 0; it must be in \(0, " \
  plan --cluster "$tmp/zero.json" "${model[@]}"
sed '0,/"bytes_per_s": [^,]*/s//"bytes_per_s": 1e30/' "$tmp/x.json" >"$tmp/absurd.json"
expect_error "field 'gpu.measured.collectives\[0\].bytes_per_s' is 1e\+30" \
  plan --cluster "$tmp/absurd.json" "${model[@]}"
sed '/"l3_bytes": /d' "$tmp/x.json" >"$tmp/missing_cache.json"
expect_error "missing field 'gpu.measured.cache.l3_bytes'" \
  plan --cluster "$tmp/missing_cache.json" "${model[@]}"
sed '/"cores": /d' "$tmp/x.json" >"$tmp/missing.json"
expect_error "missing field 'gpu.measured.cores'" plan --cluster "$tmp/missing.json" "${model[@]}"
sed 's/"version": 4/"version": 3/' "$tmp/x.json" >"$tmp/version.json"
expect_error "field 'gpu.measured.version' is 3; this build reads version 4 \\(run dtrain calibrate --compute again\\)" \
  plan --cluster "$tmp/version.json" "${model[@]}"
finish
