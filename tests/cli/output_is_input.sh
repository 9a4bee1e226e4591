#!/usr/bin/env bash
# An output path that names one of the command's inputs is refused before any work, naming both
# flags, and the input is left byte for byte as it was: train's --metrics, --trace, --timeline
# and --write-eval-batch against --data (also the default corpus), --cluster and --config;
# tokenize IN IN, --train X --model X and an output that is the --model; plot F --output F;
# export into its checkpoint; calibrate --output over its --config; two outputs of one file.
# The same file reached by `./x`, `dir/../x`, a hard link or a symbolic link counts too, while
# /dev/null as two outputs and distinct files still run.
# Usage: output_is_input.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus="$(dirname "$0")/../../data/corpus.txt"

# refused PATTERN FILE ARGS...: dtrain ARGS exits non-zero with stderr matching PATTERN, and
# FILE (an input) holds the same bytes as before.
refused() {
  local pattern=$1 file=$2
  shift 2
  cp "$file" "$tmp/before"
  expect_error "$pattern" "$@"
  if cmp -s "$file" "$tmp/before"; then
    echo "ok: $file unchanged"
  else
    echo "FAIL: dtrain $* changed $file"
    failures=$((failures + 1))
  fi
}

head -c 40000 "$corpus" > "$tmp/my.txt"
cp "$tmp/my.txt" "$tmp/original"
# The cases run in $tmp, with relative paths as a user types them.
DTRAIN=$(realpath "$(command -v "$DTRAIN")")
cd "$tmp" || exit 1
train=(train --model tiny --steps 2 --eval-every 0 --eval-batches 1)

# train: each output flag against --data.
for flag in --metrics --trace --timeline --write-eval-batch; do
  refused "$flag my.txt is the same file as --data my.txt: refusing to overwrite an input" \
    my.txt "${train[@]}" --data my.txt $flag my.txt
done
# The same file by other names: ./x, dir/../x, an absolute path, a hard link, a symbolic link.
mkdir sub
ln my.txt hard.txt
ln -s my.txt soft.txt
ln -s "$tmp" dirlink
for other in ./my.txt sub/../my.txt "$tmp/my.txt" hard.txt soft.txt dirlink/my.txt; do
  refused "--metrics $other is the same file as --data my.txt" my.txt \
    "${train[@]}" --data my.txt --metrics "$other"
done
refused "--trace my.txt is the same file as --data soft.txt" my.txt \
  "${train[@]}" --data soft.txt --trace my.txt
# Without --data the run reads the default corpus (DTRAIN_DATA_DIR here): it is an input too.
mkdir data
cp my.txt data/corpus.txt
DTRAIN_DATA_DIR="$tmp/data" refused \
  "--metrics data/corpus.txt is the same file as --data \(the default corpus\)" data/corpus.txt \
  "${train[@]}" --metrics data/corpus.txt
# --config is an input of every command.
printf 'steps = 2\nmodel = "tiny"\n' > run.toml
refused "--metrics run.toml is the same file as --config run.toml" run.toml \
  train --config run.toml --data my.txt --metrics run.toml
# Two outputs in one file: one would overwrite the other.
expect_error "--trace ./out.json is the same file as --metrics out.json: each output needs a file" \
  "${train[@]}" --data my.txt --metrics out.json --trace ./out.json
# Distinct files, and /dev/null as two outputs, still run.
expect_output "loss" "${train[@]}" --data my.txt --metrics m.jsonl --trace /dev/null \
  --timeline /dev/null
cmp -s my.txt "$tmp/original" && [ -s m.jsonl ] && echo "ok: a run with distinct outputs wrote them" ||
  { echo "FAIL: a run with distinct outputs"; failures=$((failures + 1)); }

# tokenize: the text as its own output, the corpus as the model, the model as the output.
"$DTRAIN" tokenize --train my.txt --vocab 512 --model tok.model > /dev/null ||
  { echo "FAIL: tokenize --train"; exit 1; }
refused "output my.txt is the same file as input my.txt: refusing to overwrite an input" my.txt \
  tokenize --model tok.model my.txt my.txt
refused "output hard.txt is the same file as input ./my.txt" my.txt \
  tokenize --model tok.model ./my.txt hard.txt
refused "--model my.txt is the same file as --train my.txt" my.txt \
  tokenize --train my.txt --vocab 512 --model my.txt
refused "--model soft.txt is the same file as --train my.txt" my.txt \
  tokenize --train my.txt --vocab 512 --model soft.txt
refused "output tok.model is the same file as --model tok.model" tok.model \
  tokenize --model tok.model my.txt tok.model

# plot: the metrics file as the chart.
refused "--output m.jsonl is the same file as metrics file m.jsonl" m.jsonl plot m.jsonl \
  --output m.jsonl
refused "--output ./m.jsonl is the same file as metrics file m.jsonl" m.jsonl plot my.txt \
  m.jsonl --output ./m.jsonl

# export: the output folder is the checkpoint it reads.
"$DTRAIN" "${train[@]}" --data my.txt --save ckpt > /dev/null 2>&1 ||
  { echo "FAIL: train --save"; exit 1; }
before=$(cd ckpt && find . -type f | sort | xargs md5sum)
expect_error "--output ckpt/ is the same file as --checkpoint ckpt" \
  export --checkpoint ckpt --output ckpt/
after=$(cd ckpt && find . -type f | sort | xargs md5sum)
[ "$before" = "$after" ] && echo "ok: ckpt unchanged" ||
  { echo "FAIL: export changed ckpt"; failures=$((failures + 1)); }

# calibrate: the cluster file over its own --config; pipeline: two outputs in one file.
printf 'ranks = 2\n' > cal.toml
refused "--output cal.toml is the same file as --config cal.toml" cal.toml \
  calibrate --config cal.toml --output cal.toml
expect_error "--trace p.svg is the same file as --svg p.svg" \
  pipeline --stages 2 --microbatches 4 --svg p.svg --trace p.svg

finish
