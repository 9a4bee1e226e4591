#!/usr/bin/env bash
# `dtrain train --data` on token files: the bytes of a text written as raw uint16 (.bin with
# --vocab) and as an llm.c file train to the very losses of the text itself (same tokens, same
# batches); an llm.c file without --vocab gets GPT-2's vocabulary (also under --tp 2, which pads
# it); malformed files are refused naming the file and the byte offset; `bench data` reports
# MB/s. Usage: token_files.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 30000 "$(dirname "$0")/../../data/corpus.txt" > "$tmp/text.txt"

# token_file KIND OUT [options]: KIND raw|llmc; the tokens are text.txt's bytes unless --tokens
# "a,b,..." (then --repeat N repeats them); --version, --count override llm.c's header.
token_file() {
  "$py" - "$@" <<'PY'
import struct, sys
kind, out = sys.argv[1], sys.argv[2]
opts = dict(zip(sys.argv[3::2], sys.argv[4::2]))
if "--tokens" in opts:
    tokens = [int(t) for t in opts["--tokens"].split(",")] * int(opts.get("--repeat", "1"))
else:
    tokens = list(open(opts["--text"], "rb").read())
body = struct.pack("<%dH" % len(tokens), *tokens)
with open(out, "wb") as f:
    if kind == "llmc":
        header = [0] * 256
        header[0] = 20240520
        header[1] = int(opts.get("--version", "1"))
        header[2] = int(opts.get("--count", str(len(tokens))))
        f.write(struct.pack("<256i", *header))
    f.write(body)
PY
}
token_file raw "$tmp/text.bin" --text "$tmp/text.txt"
token_file llmc "$tmp/text_llmc.dat" --text "$tmp/text.txt"

# The loss lists of one run, as one line.
losses() {
  "$DTRAIN" train --model tiny --steps 4 --eval-every 2 --json "$@" 2>"$tmp/err" |
    tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]\|"final_val":[-0-9.e+]*' | tr '\n' ' '
}
text=$(losses --data "$tmp/text.txt")
raw=$(losses --data "$tmp/text.bin" --vocab 256)
llmc=$(losses --data "$tmp/text_llmc.dat" --vocab 256)
if [[ -z "$text" || "$text" != "$raw" || "$text" != "$llmc" ]]; then
  echo "FAIL: the same tokens trained to different losses:"
  echo "  text: $text"; echo "  raw:  $raw"; echo "  llmc: $llmc"; cat "$tmp/err"
  failures=$((failures + 1))
else
  echo "ok: text, raw .bin and llm.c files of the same bytes give the same losses: $text"
fi

# A resume from a token file's checkpoint at step 2 ends where the uninterrupted run ends.
final_val() { tr -d ' \n' | grep -o '"final_val":[-0-9.e+]*'; }
full=$("$DTRAIN" train --model tiny --data "$tmp/text_llmc.dat" --vocab 256 --steps 4 --eval-every 2 \
  --save "$tmp/ck" --save-every 2 --json 2>/dev/null | final_val)
resumed=$("$DTRAIN" train --model tiny --data "$tmp/text_llmc.dat" --vocab 256 --steps 4 \
  --eval-every 2 --resume "$tmp/ck/step-00000002" --json 2>/dev/null | final_val)
if [[ -z "$full" || "$full" != "$resumed" ]]; then
  echo "FAIL: resumed from step 2: '$resumed', uninterrupted: '$full'"
  failures=$((failures + 1))
else
  echo "ok: a resume on a token file continues the run: $resumed"
fi

# An llm.c file of GPT-2 tokens: the model's vocabulary is 50257, padded under --tp 2.
token_file llmc "$tmp/gpt2.bin" --tokens 50256,0,15496,11,995,13,198,464 --repeat 600
expect_output '"vocab": 50257' train --data "$tmp/gpt2.bin" --steps 2 --eval-every 0 --json
expect_output '"vocab": 50257' train --data "$tmp/gpt2.bin" --steps 2 --eval-every 0 --tp 2 --json
expect_output '"vocab": 50300' train --data "$tmp/gpt2.bin" --vocab 50300 --steps 1 --eval-every 0 --json
expect_error "--data $tmp/gpt2.bin|token 50256 at index 0 (byte offset 1024)|vocabulary size 1000" \
  train --data "$tmp/gpt2.bin" --vocab 1000 --steps 1

# Malformed files: each names the file and the byte offset.
token_file raw "$tmp/bad.bin" --tokens 1,2,3,4,5,6,7,8,9,10 --repeat 300
"$py" -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[2000:2002]=(256).to_bytes(2,'little'); open(sys.argv[1],'wb').write(d)" "$tmp/bad.bin"
expect_error "--data $tmp/bad.bin|token 256 at index 1000 (byte offset 2000)" train --data "$tmp/bad.bin" --vocab 256 --steps 1
expect_error "--data $tmp/text.bin|needs --vocab" train --data "$tmp/text.bin" --steps 1
head -c 3001 "$tmp/text.bin" > "$tmp/odd.bin"
expect_error "--data $tmp/odd.bin|even length|byte offset 3000" train --data "$tmp/odd.bin" --vocab 256 --steps 1
token_file llmc "$tmp/v2.bin" --tokens 1,2 --version 2
expect_error "--data $tmp/v2.bin|version 2 at byte offset 4" train --data "$tmp/v2.bin" --steps 1
token_file llmc "$tmp/count.bin" --tokens 1,2,3 --repeat 100 --count 301
expect_error "--data $tmp/count.bin|byte offset 8|counts 301 tokens" train --data "$tmp/count.bin" --steps 1
head -c 100 "$tmp/count.bin" > "$tmp/short.bin"
expect_error "--data $tmp/short.bin|short header|byte offset 100" train --data "$tmp/short.bin" --steps 1
token_file llmc "$tmp/few.bin" --tokens 1,2,3 --repeat 10
expect_error "--context 32|$tmp/few.bin|is longer than the data" train --data "$tmp/few.bin" --steps 1

expect_output 'token file' train --help
expect_output 'mapped_mb_per_s' bench data --tokens 100000 --seq-length 64 --batches 20 --rounds 2 --json
expect_output 'from the mapped file' bench data --data "$tmp/text.bin" --vocab 256 --seq-length 64 --batches 10 --rounds 1
expect_error "--data $tmp/text.bin|needs --vocab" bench data --data "$tmp/text.bin"
finish
