# (--recompute full: each routed layer runs the forward's dispatch and combine twice, so 6
# all-to-alls per layer and micro-batch.)
# `dtrain plan` on mixture-of-experts models: the mixtral-8x7b and deepseek-v3 presets'
# parameter counts, --ep (experts per rank, expert-data-parallel degree, the EP all-to-all
# rows), a custom MoE shape, a measured routing, --search over ep, --json's moe fields, and the
# refusals that name the flag.
source "$(dirname "$0")/lib/expect.bash"

mix=(--model mixtral-8x7b --cluster 8x8xH100 --global-batch 512 --seq-length 4096 --tp 2 --zero 1
  --recompute full)
expect_output "--ep" plan --help
expect_output "--experts" plan --help
expect_output "46.70B parameters, 12.88B active per token" plan "${mix[@]}" --ep 8
expect_output "layout    dp=32 tp=2 pp=1 ep=8 zero=1" plan "${mix[@]}" --ep 8
expect_output "ep=8: 1 experts per rank .* expert-data-parallel degree 4 \(dp 32 / ep 8\)" \
  plan "${mix[@]}" --ep 8
# 4096 tokens x top 2 x 4096 x 2 B x 7/8 = 58.7 MB per dispatch.
expect_output "dispatch sends 0.059 GB, receives 0.059 GB" plan "${mix[@]}" --ep 8
expect_output "EP    all_to_all_v    dispatch fwd \+ combine's grad" plan "${mix[@]}" --ep 8
expect_output "EDP   reduce_scatter  expert gradients" plan "${mix[@]}" --ep 8
expect_output "FLOPs and MFU count active parameters" plan "${mix[@]}"
expect_output "671.03B parameters, 37.55B active per token" \
  plan --model deepseek-v3 --cluster 256x8xH100 --global-batch 16384 --ep 64 --zero 3 \
  --recompute full
# A measured routing: all tokens on experts 0-3 (EP rank 0 of 2): its experts compute 2 x the mean.
expect_output "routing: measured .* compute 2.000 x the mean" \
  plan "${mix[@]}" --ep 2 --tokens-per-expert 1,1,1,1,0,0,0,0
# A custom shape: 8 layers, the first 2 dense, then every 2nd routed: 3 routed layers.
expect_output "3 of 8 layers routed" plan --family llama --layers 8 --hidden 256 --heads 8 \
  --vocab 1024 --seq-length 256 --global-batch 8 --cluster 1x8xH100 --experts 4 --top-k 1 \
  --first-dense 2 --moe-every 2 --shared-experts 1 --expert-ffn 128 --ep 4

out=$("$DTRAIN" plan "${mix[@]}" --ep 8 --json)
if python3 -c 'import json,sys; j=json.load(sys.stdin); m=j["plan"]["moe"]; \
    assert m["ep"]==8 and m["expert_dp"]==4 and m["experts_per_rank"]==1, m; \
    assert m["dispatch_sent_bytes"]==4096*2*4096*2*7/8, m; \
    assert m["bytes_per_layer"]==6*m["dispatch_sent_bytes"], m; \
    assert j["model"]["active_params"]==12879925248, j["model"]' <<<"$out"; then
  echo "ok: --json carries moe with ep, expert_dp, experts per rank and the dispatch bytes"
else
  fail "--json moe: $(head -c 300 <<<"$out")"
fi

# The search holds --ep: the fixed axes and the winner's layout carry it.
expect_output "fixed: tp=2 zero=1 rc=full ep=4" plan "${mix[@]}" --search --ep 4
expect_output "  1   dp=32 tp=2 pp=1 ep=4 zero=1" plan "${mix[@]}" --search --ep 4

expect_error "--ep 3 does not divide --dp 32" plan "${mix[@]}" --ep 3
expect_error "--ep 16 does not divide --experts 8" plan "${mix[@]}" --ep 16
expect_error "--ep 2 needs an MoE model \(--experts E\)" plan --model llama2-7b --cluster 1x8xH100 --ep 2
expect_error "--tokens-per-expert has 3 entries; the model has 8 experts" \
  plan "${mix[@]}" --ep 2 --tokens-per-expert 1,2,3
expect_error "--top-k must be in 1..--experts 8, got 9" plan "${mix[@]}" --top-k 9
expect_error "shape experts: add --experts E" plan --model llama2-7b --cluster 1x8xH100 --top-k 2
finish
