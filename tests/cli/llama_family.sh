# `dtrain train --family llama` (and the llama-tiny preset): the loss goes down on the bundled
# corpus, the checkpoint keeps the family and its settings (a resume continues it; a GPT run
# refuses it, naming what differs), and what the family does not run yet is refused up front,
# naming the flag: CP, EP, export and sample, and a --tp above --kv-heads; the Llama flags
# without the family are refused too.
source "$(dirname "$0")/lib/expect.bash"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Training: the loss falls from ln(256) ~ 5.5 by at least 1.5 in 60 steps.
out=$("$DTRAIN" train --model llama-tiny --steps 60 --eval-every 0 --json 2>/dev/null) ||
  fail "train --model llama-tiny exited $?"
python3 -c 'import json,sys
j = json.loads(sys.stdin.read())
first, last = j["loss"]["first_train"], j["loss"]["final_train_avg10"]
assert first - last > 1.5, (first, last)
print("ok: llama-tiny loss %.3f -> %.3f (the last 10 steps mean)" % (first, last))' <<<"$out" ||
  fail "llama-tiny did not learn: $(head -c 300 <<<"$out")"

# A custom Llama shape with multi-query attention and a tied head, over DP with ZeRO-3 and over
# a pipeline (the tied head's wte summed between the end stages, as GPT's).
expect_output "llama KV=1 F=96 tied" train --family llama --layers 2 --hidden 32 --heads 4 \
  --kv-heads 1 --ffn-hidden 96 --tie-embeddings --dp 2 --zero 3 --steps 2 --eval-every 0
expect_output "llama KV=1 F=96 tied" train --family llama --layers 2 --hidden 32 --heads 4 \
  --kv-heads 1 --ffn-hidden 96 --tie-embeddings --pp 2 --microbatches 2 --steps 2 --eval-every 0

# The checkpoint carries the family; a resume continues, a GPT run is refused.
"$DTRAIN" train --model llama-tiny --steps 2 --eval-every 0 --save "$tmp/ck" >/dev/null 2>&1 ||
  fail "train --save exited $?"
grep -q '"family": "llama"' "$tmp"/ck/step-*/manifest.json || fail "the manifest has no family"
out=$("$DTRAIN" train --model llama-tiny --steps 4 --eval-every 0 --resume "$tmp/ck" \
  --allow-resume-changes 2>&1) || fail "the resume exited $?: $(tail -1 <<<"$out")"
grep -q "^step 3/4" <<<"$out" && ! grep -q "^step 1/4" <<<"$out" ||
  fail "the resume did not continue at step 3: $(head -3 <<<"$out")"
expect_error "family llama \(this run: gpt\)" train --model tiny --context 64 --hidden 64 \
  --steps 4 --eval-every 0 --resume "$tmp/ck" --allow-resume-changes
expect_error "exporting a Llama-family checkpoint .* not supported yet" export \
  --checkpoint "$tmp/ck" --output "$tmp/ex"
expect_error "sampling a Llama-family model is not supported yet" sample --checkpoint "$tmp/ck"

# Not yet: each cut names its flag.
for cut in "--cp 2" "--dp 2 --ep 2 --experts 2"; do
  flag=${cut##*--}
  flag=--${flag%% *}
  # shellcheck disable=SC2086  # the cut is a list of flags
  expect_error "with --family llama is not supported yet|--family llama with --experts" train \
    --model llama-tiny $cut --steps 1
done
expect_error "--tp 4 does not divide --kv-heads 2" train --model llama-tiny --tp 4 --steps 1
expect_output "llama KV=2" train --model llama-tiny --tp 2 --steps 2 --eval-every 0
expect_error "add --family llama" train --model tiny --kv-heads 2 --steps 1
expect_error "--kv-heads 3 must divide --heads 4" train --model llama-tiny --kv-heads 3 --steps 1
expect_error "--family: unknown family 'mamba'" train --family mamba --steps 1
finish
