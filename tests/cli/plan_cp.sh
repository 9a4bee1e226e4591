# `dtrain plan --cp`: context parallelism in the plan (the algorithm and why, CP bytes, the
# per-rank causal work), Llama 3 405B's long-context layout, the search over cp, and the
# refusals that name the flag: a sequence that does not divide, heads ulysses cannot split,
# --cp beyond the GPUs.
source "$(dirname "$0")/lib/expect.bash"

shape=(--layers 4 --hidden 256 --heads 8 --vocab 1024 --global-batch 8)
small=("${shape[@]}" --seq-length 8192 --cluster 1x8xH100)
expect_output "--cp" plan --help
expect_output "--cp-algo" plan --help
# A small layout with each algorithm: the report names it and prints its CP rows.
expect_output "layout    dp=4 tp=1 pp=1 cp=2\(ring\)" plan "${small[@]}" --cp 2 --cp-algo ring
expect_output "CP    send/recv       K, V blocks \(ring, forward\)" plan "${small[@]}" --cp 2 --cp-algo ring
expect_output "CP    all_gather      K, V \(forward\)" plan "${small[@]}" --cp 2 --cp-algo all-gather
expect_output "CP    reduce_scatter  dK, dV \(backward\)" plan "${small[@]}" --cp 2 --cp-algo all-gather
expect_output "CP    all_to_all      Q, O \(forward\)" plan "${small[@]}" --cp 4 --cp-algo ulysses
expect_output "1.000 with the balanced split .* 1.750 with contiguous chunks" plan "${small[@]}" --cp 4
expect_output "why         ulysses: the heads divide cp x tp" plan "${small[@]}" --cp 4
# The ring's bytes per layer, worked: K/V block = 2 x 4096 tokens x 256 x 2 B = 4.19 MB;
# forward 1 hop, backward 3 blocks in 2 messages.
expect_output "forward 0.004 GB in 1 message \(1 steps\), backward 0.013 GB in 2 messages" \
  plan "${small[@]}" --cp 2 --cp-algo ring
out=$("$DTRAIN" plan "${small[@]}" --cp 2 --cp-algo ring --json)
if python3 -c 'import json,sys; j=json.load(sys.stdin)["plan"]["context_parallel"]; \
    assert j["cp"]==2 and j["algorithm"]=="ring"; \
    assert j["per_layer"]["forward"]["bytes_sent"]==2*4096*256*2, j; \
    assert j["per_layer"]["backward"]["bytes_sent"]==3*2*4096*256*2, j' <<<"$out"; then
  echo "ok: --json carries context_parallel with the ring's bytes per layer"
else
  fail "--json context_parallel: $(head -c 300 <<<"$out")"
fi

# Llama 3 405B's 128K stage (Dubey et al. 2024 Table 4: TP 8, CP 16, PP 16, DP 8).
l3=(--model llama3-405b-128k --cluster 2048x8xH100 --tp 8 --cp 16 --pp 16 --zero 1 --recompute full)
expect_output "layout    dp=8 tp=8 pp=16 cp=16\(ring\)" plan "${l3[@]}"
expect_output "total .* of 80.00 GB: fits" plan "${l3[@]}"
expect_output "each rank holds 8192 of the 131072 tokens" plan "${l3[@]}"
expect_output "CP    send/recv .* InfiniBand \(16 nodes\)" plan "${l3[@]}"

# The search varies cp and keeps to its constraints: with --cp 2 held, every layout has cp=2.
out=$("$DTRAIN" plan "${small[@]}" --search --cp 2 --top 5 2>&1)
if grep -q "fixed: cp=2" <<<"$out" && [ "$(grep -cE '^  [0-9]+ +dp=[0-9]+ .*cp=2\(' <<<"$out")" = 5 ]; then
  echo "ok: --search --cp 2 ranks only cp=2 layouts"
else
  fail "--search --cp 2:"; echo "$out" | head -12
fi

# Refusals naming the flag.
expect_error "--cp 3 does not divide --seq-length 8192" plan "${shape[@]}" --seq-length 8192 --cp 3 --dp 1 --cluster 1x3xH100
expect_error "--cp-algo ring needs --seq-length 8194 divisible by 2 x --cp 2 = 4" \
  plan "${shape[@]}" --cluster 1x8xH100 --seq-length 8194 --cp 2 --cp-algo ring
expect_error "--cp-algo ulysses needs --heads 8 and --kv-heads 8 divisible by --cp 4 x --tp 4 = 16" \
  plan "${shape[@]}" --seq-length 8192 --cluster 2x8xH100 --cp 4 --tp 4 --cp-algo ulysses
expect_error "--cp-algo ulysses needs --heads 128 and --kv-heads 8 divisible by --cp 16 x --tp 8 = 128 .*: --kv-heads 8 is not" \
  plan --model llama3-405b-128k --cluster 2048x8xH100 --tp 8 --cp 16 --pp 16 --cp-algo ulysses
expect_error "--cp 16 is more than the cluster's 8 GPUs" plan "${small[@]}" --cp 16
expect_error "--tp 1 x --pp 1 x --cp 3 = 3 does not divide the cluster's 8 GPUs" plan "${small[@]}" --cp 3
expect_error "--cp-algo must be one of ring, all-gather, ulysses, auto, got 'tree'" \
  plan "${small[@]}" --cp 2 --cp-algo tree
expect_error "--cp-algo picks context parallelism's algorithm: add --cp N" \
  plan "${small[@]}" --cp-algo ulysses
finish
