#!/usr/bin/env bash
# `dtrain export --format safetensors` and `dtrain train --init-from`: checkpoints saved by
# TP x PP and by DP + ZeRO-3 export to Hugging Face GPT-2 folders that an independent numpy
# reader (tests/reference/gpt2_numpy_loss.py: its own safetensors parser and GPT-2 forward) scores
# to dtrain's loss within 1e-5; a run started from the folder begins at the saved run's last
# validation loss (bitwise on the same layout); a GPT-2-vocabulary model (V = 50257, padded
# under --tp 2) exports, loads and trains; bad input is refused naming the flag or file.
# Usage: safetensors_export.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
py=/usr/bin/python3
reference=$(dirname "$0")/../reference/gpt2_numpy_loss.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -c "import numpy" || { echo "FAIL: $py has no numpy (scripts/setup installs python3-numpy)"; exit 1; }

json_get() { "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print(repr(eval(sys.argv[2], {}, {'d': d})))" "$@"; }
check() {  # check DESCRIPTION COMMAND...: counts a failure when the command fails
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

# train_export NAME LAYOUT...: 4 steps saved under LAYOUT, exported (f32) to $tmp/NAME.model.
common=(--steps 4 --eval-every 0 --eval-batches 1)
train_export() {
  local name=$1
  shift
  "$DTRAIN" train "${common[@]}" "$@" --save "$tmp/$name.ck" --json > "$tmp/$name.json" 2>/dev/null ||
    { echo "FAIL: train $*"; failures=$((failures + 1)); }
  "$DTRAIN" export --checkpoint "$tmp/$name.ck" --format safetensors --output "$tmp/$name.model" \
    > /dev/null || { echo "FAIL: export of $name"; failures=$((failures + 1)); }
}
# start_loss NAME MODEL ARGS...: the first validation loss of a run --init-from MODEL, with its
# batch written to $tmp/NAME.batch.
start_loss() {
  local name=$1 model=$2
  shift 2
  "$DTRAIN" train --steps 1 --eval-every 0 --eval-batches 1 --init-from "$model" \
    --write-eval-batch "$tmp/$name.batch" --json "$@" > "$tmp/$name.init.json" 2>"$tmp/$name.err" ||
    { echo "FAIL: --init-from $model $*"; cat "$tmp/$name.err"; failures=$((failures + 1)); }
  json_get "$tmp/$name.init.json" "d['val_losses'][0]['val_loss']"
}
close() { "$py" -c "import sys; a, b = map(float, sys.argv[1:3]); sys.exit(abs(a - b) > 1e-5 * abs(b))" "$1" "$2"; }

# 1. TP x PP checkpoint of the tiny model.
train_export tp "--model" tiny --tp 2 --pp 2
saved=$(json_get "$tmp/tp.json" "d['val_losses'][-1]['val_loss']")
same=$(start_loss tp_same "$tmp/tp.model" --model tiny --tp 2 --pp 2)
check "init-from on the saving layout starts at its last loss ($same == $saved)" [ "$same" == "$saved" ]
serial=$(start_loss tp_serial "$tmp/tp.model")
check "init-from on one rank starts within 1e-5 of it ($serial vs $saved)" close "$serial" "$saved"
check "numpy reads the TP x PP export" "$py" "$reference" "$tmp/tp.model" "$tmp/tp_serial.batch" 8 32 "$serial"

# 2. DP + ZeRO-3 checkpoint, exported as bf16: numpy and dtrain read the same rounded weights.
train_export z3 --model tiny --dp 2 --zero 3
"$DTRAIN" export --checkpoint "$tmp/z3.ck" --output "$tmp/z3.bf16" --dtype bf16 > /dev/null
bf16=$(start_loss z3_bf16 "$tmp/z3.bf16" --dp 2)
check "numpy reads the bf16 export of a ZeRO-3 checkpoint" "$py" "$reference" "$tmp/z3.bf16" "$tmp/z3_bf16.batch" 8 32 "$bf16"
f32_bytes=$(stat -c %s "$tmp/z3.model/model.safetensors")
bf16_bytes=$(stat -c %s "$tmp/z3.bf16/model.safetensors")
check "bf16 weights take about half the bytes ($bf16_bytes of $f32_bytes)" \
  [ $((2 * bf16_bytes)) -lt $((f32_bytes + 4096)) ]

# 3. GPT-2's vocabulary (50257 tokens, odd: --tp 2 pads it) at a small width.
"$py" - "$tmp/gpt2.bin" <<'PY'
import struct, sys
tokens = [(i * 7919 + (i // 13) * 104729) % 50257 for i in range(6000)]
tokens[17] = 50256
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
PY
train_export g2 --data "$tmp/gpt2.bin" --layers 2 --heads 2 --hidden 16 --context 16 --global-batch 4 --tp 2
check "config.json says vocab_size 50257" grep -q '"vocab_size": 50257' "$tmp/g2.model/config.json"
g2=$(start_loss g2_serial "$tmp/g2.model" --data "$tmp/gpt2.bin" --global-batch 4)
check "numpy reads the GPT-2-vocabulary export (wte 50257 rows)" "$py" "$reference" "$tmp/g2.model" "$tmp/g2_serial.batch" 4 16 "$g2"
expect_output '"vocab": 50257' train --data "$tmp/gpt2.bin" --init-from "$tmp/g2.model" --global-batch 4 --dp 2 --tp 2 --steps 3 --eval-every 0 --json

# 4. Errors.
expect_error "--checkpoint" export --output "$tmp/x"
expect_error "--checkpoint $tmp/none|no such directory" export --checkpoint "$tmp/none" --output "$tmp/x"
expect_error "--format" export --checkpoint "$tmp/tp.ck" --format onnx --output "$tmp/x"
expect_error "--init-from $tmp/none|not a directory" train --init-from "$tmp/none" --steps 1
expect_error "--vocab 300 differs from --init-from|vocab_size 256" train --init-from "$tmp/tp.model" --vocab 300 --steps 1
expect_error "--init-from and --resume" train --init-from "$tmp/tp.model" --resume "$tmp/tp.ck" --steps 9
expect_error "--init-from $tmp/tp.model|vocabulary is 256|50257" train --init-from "$tmp/tp.model" --data "$tmp/gpt2.bin" --steps 1
cp -r "$tmp/tp.model" "$tmp/cut.model"
head -c 5000 "$tmp/tp.model/model.safetensors" > "$tmp/cut.model/model.safetensors"
expect_error "--init-from|$tmp/cut.model/model.safetensors|runs past the data" train --init-from "$tmp/cut.model" --steps 1
cp -r "$tmp/tp.model" "$tmp/wide.model"
sed -i 's/"n_embd": 32/"n_embd": 64/' "$tmp/wide.model/config.json"
expect_error "--init-from|model.safetensors|tensor 'wte.weight' has shape \[256,32\]" train --init-from "$tmp/wide.model" --steps 1
# A NaN in the weights is refused naming the tensor; an explicit --model must be the export's
# shape (tp.model is the tiny preset's), and an absent one takes it.
cp -r "$tmp/tp.model" "$tmp/nan.model"
"$py" - "$tmp/nan.model/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + n])["h.0.attn.c_attn.weight"]
assert entry["dtype"] == "F32", entry
at = 8 + n + entry["data_offsets"][0] + 4 * 7
data[at:at + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(data)
PY
expect_error "--init-from .*nan.model/model.safetensors: tensor h.0.attn.c_attn.weight holds nan at element 7" \
  train --init-from "$tmp/nan.model" --steps 1 --eval-every 0
expect_error "--model bench \(T=64 L=4 NH=4 C=128\) differs from the shape of --init-from .*\(T=32 L=2 NH=4 C=32\)" \
  train --init-from "$tmp/tp.model" --model bench --steps 1
expect_output '"train_losses"' train --init-from "$tmp/tp.model" --model tiny --steps 1 --eval-every 0 --eval-batches 1 --json
expect_output '"train_losses"' train --init-from "$tmp/tp.model" --steps 1 --eval-every 0 --eval-batches 1 --json
# Both refused before the first step: nothing was trained.
check "a bad --init-from folder is refused before training starts" \
  bash -c '! "$1" train --init-from "$2" --steps 1 2>&1 | grep -q "^training"' _ "$DTRAIN" "$tmp/cut.model"
expect_output 'safetensors' export --help
expect_output 'init-from' train --help
finish
