# `dtrain train --family llama` (and the llama-tiny preset): the loss goes down on the bundled
# corpus, the checkpoint keeps the family and its settings (a resume continues it; a GPT run
# refuses it, naming what differs), the Mixtral-like preset learns under EP, and what the family
# does not run is refused up front, naming the flag (a --tp and --kv-heads neither dividing the
# other); the Llama flags without the family are refused too.
source "$(dirname "$0")/lib/expect.bash"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect_learns TRAIN_ARGS...: the loss falls from ln(256) ~ 5.5 by at least 1.5 (the first
# step's against the last 10 steps' mean) on the bundled corpus.
expect_learns() {
  local out
  out=$("$DTRAIN" train "$@" --eval-every 0 --json 2>/dev/null) || fail "train $* exited $?"
  python3 -c 'import json,sys
j = json.loads(sys.stdin.read())
first, last = j["loss"]["first_train"], j["loss"]["final_train_avg10"]
assert first - last > 1.5, (first, last)
print("ok: %s: loss %.3f -> %.3f (the last 10 steps mean)" % (sys.argv[1], first, last))' "$*" \
    <<<"$out" || fail "train $* did not learn: $(head -c 300 <<<"$out")"
}
expect_learns --model llama-tiny --steps 60

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

# Hugging Face interop: checkpoints saved by TP x PP (untied head), by TP 4 over 2 K/V heads (each
# head's copies write it once), by DP + ZeRO-3 (multi-query, tied head) and by EP x TP
# (Mixtral-like) export as LlamaForCausalLM and MixtralForCausalLM
# folders that an independent PyTorch reader (tests/reference/llama_torch_loss.py: its own
# safetensors parser and transformers' Llama and Mixtral forward in float64) scores to dtrain's
# loss within 1e-5; --init-from reads them into another layout.
py=/usr/bin/python3
reference=$(dirname "$0")/../reference/llama_torch_loss.py
interop() {  # interop NAME ARCHITECTURE SHAPE_AND_LAYOUT...
  local name=$1 architecture=$2
  shift 2
  "$DTRAIN" train --steps 6 --eval-every 0 "$@" --save "$tmp/$name.ck" --json \
    >"$tmp/$name.saved.json" 2>/dev/null || fail "train $*"
  "$DTRAIN" export --checkpoint "$tmp/$name.ck" --output "$tmp/$name.hf" >/dev/null ||
    fail "export of $name"
  grep -q "\"$architecture\"" "$tmp/$name.hf/config.json" || fail "$name: not a $architecture"
  # --init-from on the saving layout starts at the saved run's last validation loss, bit for bit.
  "$DTRAIN" train --init-from "$tmp/$name.hf" "$@" --steps 1 --eval-every 0 --json \
    >"$tmp/$name.init.json" 2>/dev/null || fail "--init-from $tmp/$name.hf $*"
  if "$py" -c 'import json,sys
saved = json.load(open(sys.argv[1]))["val_losses"][-1]["val_loss"]
start = json.load(open(sys.argv[2]))["val_losses"][0]["val_loss"]
assert saved == start, (saved, start)
print("ok: --init-from resumes %s at the saved validation loss %r bit for bit" % (sys.argv[3], start))' \
    "$tmp/$name.saved.json" "$tmp/$name.init.json" "$name"; then :; else
    fail "$name: --init-from does not start at the saved run's validation loss"
  fi
  local loss
  loss=$("$DTRAIN" train --init-from "$tmp/$name.hf" --steps 1 --eval-every 0 --eval-batches 1 \
    --dp 2 --write-eval-batch "$tmp/$name.batch" --json 2>/dev/null |
    "$py" -c "import json,sys; print(json.load(sys.stdin)['val_losses'][0]['val_loss'])") ||
    fail "--init-from $tmp/$name.hf"
  local seq
  seq=$("$py" -c "import json; print(json.load(open('$tmp/$name.hf/config.json'))['max_position_embeddings'])")
  if "$py" "$reference" "$tmp/$name.hf" "$tmp/$name.batch" 8 "$seq" "$loss"; then
    echo "ok: PyTorch reads the $name export"
  else
    fail "PyTorch's $architecture loss differs from dtrain's for $name"
  fi
}
interop tp_pp LlamaForCausalLM --model llama-tiny --tp 2 --pp 2 --microbatches 2
interop tp4_copies LlamaForCausalLM --model llama-tiny --tp 4
interop mixtral MixtralForCausalLM --model llama-tiny --experts 4 --top-k 2 --dp 2 --ep 2 --tp 2
grep -q '"model.layers.1.block_sparse_moe.experts.3.w3.weight"' "$tmp/mixtral.hf/model.safetensors" ||
  fail "the Mixtral folder has no experts.3.w3"
interop mqa_tied LlamaForCausalLM --family llama --layers 2 --hidden 32 --heads 4 --kv-heads 1 --ffn-hidden 96 \
  --tie-embeddings --dp 2 --zero 3
grep -q '"lm_head.weight"' "$tmp/mqa_tied.hf/model.safetensors" &&
  fail "a tied head's folder holds lm_head.weight"
expect_error "--kv-heads 4 differs from --init-from .* \(num_key_value_heads 2\)" train \
  --init-from "$tmp/tp_pp.hf" --kv-heads 4 --family llama --steps 1
expect_error "--rope-theta 5 differs from --init-from .* \(rope_theta 10000\)" train \
  --init-from "$tmp/tp_pp.hf" --rope-theta 5 --steps 1
# A Llama folder makes the run a Llama: its flags need no --family beside it.
expect_output "llama KV=2" train --init-from "$tmp/tp_pp.hf" --kv-heads 2 --steps 1 --eval-every 0
expect_output "." sample --checkpoint "$tmp/ck" --prompt "The " --tokens 8 --seed 1

# Mixtral folders: --init-from brings the experts (a differing --experts is refused, naming
# config.json's field); a model routing every second block has no Hugging Face form.
expect_output "E=4 k=2 every=1 llama" train --init-from "$tmp/mixtral.hf" --dp 2 --ep 2 --steps 1 \
  --eval-every 0
expect_error "--experts 8 --top-k 2 --moe-every 1 differ from --init-from .* \(num_local_experts 4" \
  train --init-from "$tmp/mixtral.hf" --experts 8 --top-k 2 --steps 1
"$DTRAIN" train --model llama-tiny --experts 2 --moe-every 2 --steps 1 --eval-every 0 \
  --save "$tmp/every2.ck" >/dev/null 2>&1 || fail "train --moe-every 2"
expect_error "--moe-every 2\); MixtralForCausalLM routes every block" export --checkpoint \
  "$tmp/every2.ck" --output "$tmp/every2.hf"
[ ! -e "$tmp/every2.hf" ] || fail "a refused export made its folder"
expect_output "." sample --checkpoint "$tmp/mixtral.ck" --prompt "The " --tokens 8 --seed 1

# The Mixtral-like preset learns under EP.
expect_learns --model mixtral-small --dp 2 --ep 2 --steps 40
# Context parallelism: the K/V heads must split over Ulysses' ranks.
expect_error "--cp-algo ulysses needs --heads 4 and --kv-heads 2 divisible by --cp 4" train \
  --model llama-tiny --cp 4 --cp-algo ulysses --steps 1
expect_output "llama KV=2" train --model llama-tiny --cp 2 --cp-algo ring --steps 2 --eval-every 0
expect_output "llama KV=2" train --model llama-tiny --tp 2 --steps 2 --eval-every 0
# More TP ranks than K/V heads: each holds a copy of one (tp a multiple of --kv-heads).
expect_output "llama KV=2" train --model llama-tiny --tp 4 --steps 2 --eval-every 0
expect_error "--tp 2 and --kv-heads 3: one must divide the other" train --family llama \
  --heads 12 --hidden 96 --kv-heads 3 --tp 2 --steps 1
expect_error "add --family llama" train --model tiny --kv-heads 2 --steps 1
expect_error "--kv-heads 3 must divide --heads 4" train --model llama-tiny --kv-heads 3 --steps 1
expect_error "--family: unknown family 'mamba'" train --family mamba --steps 1
finish
