#!/usr/bin/env bash
# `dtrain tokenize` and `sample --tokenizer`: a tokenizer trained on the default corpus encodes a
# text into an llm.c file whose header counts the tokens `tokenize` reported; `train --data` on it
# with the tokenizer's vocabulary lowers the loss below its first value in 20 steps; `sample
# --tokenizer` prints text from that checkpoint, the same for the same --seed; missing files, a
# vocabulary past uint16, a missing --model and a checkpoint of another vocabulary are refused
# naming the flag or file, as are input that is not UTF-8 text (with the byte offset), binary or
# not a regular file, a vocabulary the corpus cannot fill or hold (in dtrain's words, not
# SentencePiece's), and a token-id checkpoint sampled without --tokenizer; `bench tokenize`
# reports MB/s and an exact round trip.
# Usage: tokenize.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus="$(dirname "$0")/../../data/corpus.txt"
vocab=512

check() {  # check DESCRIPTION CONDITION...: the condition (a command) holds
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

# Train: the model holds the vocabulary asked for; a second run writes the same bytes.
"$DTRAIN" tokenize --train "$corpus" --vocab $vocab --model "$tmp/tok.model" --json > "$tmp/train.json" ||
  { echo "FAIL: tokenize --train"; exit 1; }
got_vocab=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab'])" "$tmp/train.json")
check "tokenize --train --vocab $vocab wrote $got_vocab pieces" [ "$got_vocab" = "$vocab" ]
"$DTRAIN" tokenize --train "$corpus" --vocab $vocab --model "$tmp/again.model" > /dev/null
check "training twice writes the same model" cmp -s "$tmp/tok.model" "$tmp/again.model"
expect_output "trained a unigram tokenizer of $vocab pieces" \
  tokenize --train "$corpus" --vocab $vocab --type unigram --model "$tmp/uni.model"

# Encode: the header's count is the reported token count, the file is header + 2 bytes a token,
# every token is below the vocabulary.
"$DTRAIN" tokenize --model "$tmp/tok.model" "$corpus" "$tmp/out.bin" --json > "$tmp/enc.json" ||
  { echo "FAIL: tokenize --model IN OUT"; exit 1; }
verdict=$("$py" - "$tmp/enc.json" "$tmp/out.bin" $vocab "$corpus" <<'PY'
import json, os, sys
import numpy as np
report = json.load(open(sys.argv[1]))
data = open(sys.argv[2], "rb").read()
header = np.frombuffer(data[:1024], dtype="<i4")
tokens = np.frombuffer(data[1024:], dtype="<u2")
problems = []
if list(header[:3]) != [20240520, 1, report["tokens"]]: problems.append("header %s" % header[:3])
if header[3:].any(): problems.append("header words after the third are not 0")
if len(tokens) != report["tokens"]: problems.append("%d tokens stored" % len(tokens))
if tokens.max() >= int(sys.argv[3]): problems.append("token %d" % tokens.max())
if report["input_bytes"] != os.path.getsize(sys.argv[4]): problems.append("input_bytes")
if not len(tokens) < report["input_bytes"]: problems.append("no fewer tokens than bytes")
print("; ".join(problems) or "ok")
PY
)
check "the llm.c file's header, length and tokens agree with the report ($verdict)" [ "$verdict" = ok ]
expect_output "MB/s" tokenize --model "$tmp/tok.model" "$corpus" "$tmp/out2.bin"
"$DTRAIN" tokenize --model "$tmp/tok.model" "$corpus" "$tmp/out3.bin" --threads 3 > /dev/null
check "--threads 3 writes the same file as the default" cmp -s "$tmp/out2.bin" "$tmp/out3.bin"
expect_output "dtrain train --data $tmp/out2.bin --vocab $vocab" \
  tokenize --model "$tmp/tok.model" "$corpus" "$tmp/out2.bin"

# Train on it: the loss falls below its first value.
"$DTRAIN" train --model tiny --data "$tmp/out.bin" --vocab $vocab --steps 20 --eval-every 0 \
  --save "$tmp/ck" --json > "$tmp/run.json" 2>"$tmp/err" || { echo "FAIL: train"; cat "$tmp/err"; exit 1; }
falls=$("$py" -c "
import json, sys
r = json.load(open(sys.argv[1])); l = [s['loss'] for s in r['train_losses']]
print('yes %s -> %s' % (l[0], l[-1]) if min(l[1:]) < l[0] and l[-1] < l[0] else 'no %s' % l)" "$tmp/run.json")
check "train --data out.bin --vocab $vocab: the loss falls ($falls)" [ "${falls%% *}" = yes ]

# Sample with the tokenizer: text, the same for the same seed, other text for another seed.
s() { "$DTRAIN" sample --checkpoint "$tmp/ck" --tokenizer "$tmp/tok.model" --tokens 40 "$@" 2>/dev/null; }
a=$(s --prompt "The " --seed 5)
b=$(s --prompt "The " --seed 5)
c=$(s --prompt "The " --seed 6)
check "sample --tokenizer prints text after the prompt: '$a'" [ "${#a}" -gt 10 -a "${a:0:4}" = "The " ]
check "sample --tokenizer --seed 5 twice gives the same text" [ -n "$a" -a "$a" = "$b" ]
check "sample --tokenizer --seed 6 gives other text" [ "$a" != "$c" ]
expect_output '"tokenizer": ".*tok.model"' sample --checkpoint "$tmp/ck" --tokenizer "$tmp/tok.model" --tokens 5 --json

# Errors: each names the flag or file and the reason, exit non-zero.
expect_output 'SentencePiece' tokenize --help
expect_output 'tokenizer' sample --help
expect_error "--train $tmp/none.txt: no such file" tokenize --train "$tmp/none.txt" --vocab 512 --model "$tmp/x.model"
expect_error "input $tmp/none.txt: no such file" tokenize --model "$tmp/tok.model" "$tmp/none.txt" "$tmp/x.bin"
expect_error "--model $tmp/none.model: no such file" tokenize --model "$tmp/none.model" "$corpus" "$tmp/x.bin"
expect_error "--vocab 70000 is larger than 65536: token files hold uint16 tokens" \
  tokenize --train "$corpus" --vocab 70000 --model "$tmp/x.model"
expect_error "--model is required" tokenize --train "$corpus" --vocab 512
expect_error "--model is required" tokenize "$corpus" "$tmp/x.bin"
expect_error "needs an input text file and an output token file" tokenize --model "$tmp/tok.model"
expect_error "--vocab and --type are for training" tokenize --model "$tmp/tok.model" --vocab 512 "$corpus" "$tmp/x.bin"
expect_error "--threads is for encoding" tokenize --train "$corpus" --model "$tmp/x.model" --threads 2
expect_error "--type: word not in \{bpe,unigram\}" tokenize --train "$corpus" --type word --model "$tmp/x.model"
expect_error "--tokenizer $corpus: not a SentencePiece model" \
  sample --checkpoint "$tmp/ck" --tokenizer "$corpus"
# A byte-level checkpoint (vocabulary 256) with the 512-piece tokenizer, and the reverse.
"$DTRAIN" train --model tiny --steps 2 --eval-every 0 --save "$tmp/bytes" > /dev/null 2>&1
expect_error "--tokenizer has $vocab pieces but the checkpoint's model has a vocabulary of 256" \
  sample --checkpoint "$tmp/bytes" --tokenizer "$tmp/tok.model"
"$DTRAIN" tokenize --train "$corpus" --vocab 400 --model "$tmp/small.model" > /dev/null
expect_error "--tokenizer has 400 pieces but the checkpoint's model has a vocabulary of $vocab" \
  sample --checkpoint "$tmp/ck" --tokenizer "$tmp/small.model"

# A checkpoint of token ids sampled without --tokenizer would print binary bytes: refused.
expect_error "--checkpoint .*: the model was trained on the token ids of --data $tmp/out.bin .*give --tokenizer" \
  sample --checkpoint "$tmp/ck" --tokens 5

# Input that is not UTF-8 text, or not a file: refused with the byte offset and what to do,
# in dtrain's words (SentencePiece's own would name its flags or print nothing).
{ head -c 2000 "$corpus"; printf 'caf\xe9 au lait\n'; } > "$tmp/latin1.txt"
latin_at=$(( $(head -c 2000 "$corpus" | wc -c) + 3 ))
expect_error "--train $tmp/latin1.txt: not UTF-8 text at byte offset $latin_at \(byte 0xE9\).*iconv" \
  tokenize --train "$tmp/latin1.txt" --vocab $vocab --model "$tmp/x.model"
expect_error "input $tmp/latin1.txt: not UTF-8 text at byte offset $latin_at \(byte 0xE9\)" \
  tokenize --model "$tmp/tok.model" "$tmp/latin1.txt" "$tmp/x.bin"
check "a refused encode leaves no output file" [ ! -e "$tmp/x.bin" ]
head -c 4096 /dev/zero > "$tmp/zeros.txt"
expect_error "--train $tmp/zeros.txt: a NUL byte at byte offset 0: a binary file, not text" \
  tokenize --train "$tmp/zeros.txt" --vocab $vocab --model "$tmp/x.model"
head -c 4096 /bin/sh > "$tmp/binary.txt"
expect_error "--train $tmp/binary.txt: (a NUL byte|not UTF-8 text) at byte offset" \
  tokenize --train "$tmp/binary.txt" --vocab $vocab --model "$tmp/x.model"
expect_error "--train /dev/zero: not a regular file" tokenize --train /dev/zero --vocab $vocab --model "$tmp/x.model"
expect_error "input /dev/zero: not a regular file" tokenize --model "$tmp/tok.model" /dev/zero "$tmp/x.bin"
expect_error "--vocab 10: the vocabulary is too small for this corpus: it needs at least [0-9]+ pieces" \
  tokenize --train "$corpus" --vocab 10 --model "$tmp/x.model"
printf 'tiny corpus\n' > "$tmp/tiny.txt"
expect_error "--vocab 60000: the corpus is too small to fill this vocabulary" \
  tokenize --train "$tmp/tiny.txt" --vocab 60000 --model "$tmp/x.model"
if "$DTRAIN" sample --checkpoint "$tmp/ck" --tokenizer "$corpus" 2>&1 | grep -q "Internal"; then
  echo "FAIL: sample --tokenizer CORPUS passes SentencePiece's 'Internal: ...' on"
  failures=$((failures + 1))
fi
for f in latin1 zeros binary tiny; do
  if "$DTRAIN" tokenize --train "$tmp/$f.txt" --vocab 300 --model "$tmp/x.model" 2>&1 | grep -q "Internal\|character_coverage\|vocab_size"; then
    echo "FAIL: tokenize --train $f.txt passes SentencePiece's own words on"
    failures=$((failures + 1))
  fi
done

# bench tokenize: trains, encodes about --mb MB, checks the round trip, reports MB/s.
expect_output "encode: 1\.[0-9] MB .* MB/s" bench tokenize --vocab $vocab --mb 1
expect_output "round trip .*: yes" bench tokenize --vocab $vocab --mb 1
expect_output '"round_trip": true' bench tokenize --vocab $vocab --type unigram --mb 1 --json
expect_error "--mb: must be at least 1" bench tokenize --mb 0
expect_error "--corpus $tmp/none.txt: no such file" bench tokenize --corpus "$tmp/none.txt"
finish
