#!/usr/bin/env bash
# An output of `train` (--metrics, --trace, --timeline, --write-eval-batch) that lies inside a
# folder the run reads (--resume, --init-from) or owns (--save), or that is one of its files under
# another name (a hard or symbolic link), is refused before anything is written, naming both
# flags, and the folder is left byte for byte as it was: a trace over a checkpoint's shard, a
# timeline over its manifest, the eval batch over a CP checkpoint's shard, a trace over an
# exported config.json, metrics over model.safetensors, and metrics appended to a manifest,
# `latest` or run.json. A --resume of one checkpoint protects the root's `latest` too. Outputs
# beside the folders still run, and the checkpoint still resumes afterwards.
# Usage: output_in_input_folder.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DTRAIN=$(realpath "$(command -v "$DTRAIN")")
cd "$tmp" || exit 1

# Checkpoints of 4-step runs stopped after step 2, so that each refused run below would otherwise
# be a valid resume (and would write its outputs).
run=(train --model tiny --eval-every 0 --eval-batches 1)
stop=(--steps 4 --save-every 2 --inject-fault rank=0,step=3,kind=throw)
"$DTRAIN" "${run[@]}" "${stop[@]}" --save ck > /dev/null 2>&1
"$DTRAIN" "${run[@]}" "${stop[@]}" --seq-length 16 --cp 2 --save cp > /dev/null 2>&1
"$DTRAIN" export --checkpoint ck --output ex > /dev/null 2>&1 || { echo "FAIL: export"; exit 1; }
step=ck/step-00000002
[ -f "$step/rank-00000.bin" ] && [ -f cp/step-00000002/rank-00001.bin ] ||
  { echo "FAIL: the checkpoints do not have the expected layout"; ls -R ck cp; exit 1; }

# Every file of a folder with its checksum, hidden ones too (.lock).
digest() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs md5sum); }

# refused PATTERN FOLDER ARGS...: dtrain ARGS exits non-zero with stderr matching PATTERN, and no
# file under FOLDER changed, appeared or went.
refused() {
  local pattern=$1 folder=$2 before
  shift 2
  before=$(digest "$folder")
  expect_error "$pattern" "$@"
  if [ "$before" = "$(digest "$folder")" ]; then
    echo "ok: $folder unchanged"
  else
    fail "dtrain $* changed $folder"
  fi
}

# The cases of the report: each would have overwritten or appended to a checkpoint's file.
refused "--trace $step/rank-00000.bin is inside --resume ck: refusing to write into a folder" ck \
  "${run[@]}" --steps 4 --resume ck --trace "$step/rank-00000.bin"
refused "--timeline $step/manifest.json is inside --resume ck" ck \
  "${run[@]}" --steps 4 --resume ck --timeline "$step/manifest.json"
refused "--write-eval-batch cp/step-00000002/rank-00001.bin is inside --resume cp" cp \
  "${run[@]}" --steps 4 --seq-length 16 --cp 2 --resume cp \
  --write-eval-batch cp/step-00000002/rank-00001.bin
refused "--trace ex/config.json is inside --init-from ex" ex \
  "${run[@]}" --steps 2 --init-from ex --trace ex/config.json
refused "--metrics ex/model.safetensors is inside --init-from ex" ex \
  "${run[@]}" --steps 2 --init-from ex --metrics ex/model.safetensors
for file in "$step/manifest.json" ck/latest ck/run.json; do
  refused "--metrics $file is inside --resume ck" ck \
    "${run[@]}" --steps 4 --resume ck --metrics "$file"
done
# run.json when the run also saves there (the run it would have locked out is its own).
refused "--metrics ck/run.json is inside --resume ck" ck \
  "${run[@]}" --steps 4 --resume ck --save ck --metrics ck/run.json
# A new file in the --save folder, of a fresh run (a folder not made yet counts by its name).
refused "--metrics ck/m.jsonl is inside --save ck: refusing to write into a folder" ck \
  "${run[@]}" --steps 2 --save ck --overwrite --metrics ck/m.jsonl
expect_error "--trace new/t.json is inside --save new" \
  "${run[@]}" --steps 2 --save new --trace new/t.json
[ ! -e new ] && echo "ok: new was not made" || fail "the refused run made new/"
# A --resume of one checkpoint: the root's latest (the next resume's pointer) is refused too.
refused "--metrics ck/latest is inside the checkpoint root of --resume $step" ck \
  "${run[@]}" --steps 4 --resume "$step" --metrics ck/latest

# Other names of the same files: ./ and .., a symbolic link to the file or to the folder, a
# hard link from outside.
refused "--metrics ./ck/../ck/latest is inside --resume ck" ck \
  "${run[@]}" --steps 4 --resume ck --metrics ./ck/../ck/latest
ln -s ck/latest latest-link
ln -s ck ck-link
refused "--metrics latest-link is inside --resume ck" ck \
  "${run[@]}" --steps 4 --resume ck --metrics latest-link
refused "--trace ck-link/run.json is inside --resume ck" ck \
  "${run[@]}" --steps 4 --resume ck --trace ck-link/run.json
ln "$step/rank-00000.bin" shard.bin
refused "--trace shard.bin is the same file as $step/rank-00000.bin in --resume ck: refusing to overwrite an input" \
  ck "${run[@]}" --steps 4 --resume ck --trace shard.bin
ln ex/model.safetensors weights.bin
refused "--write-eval-batch weights.bin is the same file as ex/model.safetensors in --init-from ex" \
  ex "${run[@]}" --steps 2 --init-from ex --write-eval-batch weights.bin

# A run refused by its resume after the up-front checks writes no output either: the checkpoint
# is at step 2, so --steps 2 leaves nothing to do.
expect_error "nothing is left to do for --steps 2" "${run[@]}" --steps 2 --resume ck \
  --allow-resume-changes --metrics late.jsonl --write-eval-batch late.bin
[ ! -e late.jsonl ] && [ ! -e late.bin ] && echo "ok: the refused resume wrote no output" ||
  fail "the refused resume wrote $(ls late.* 2>/dev/null)"

# Outputs beside the folders run, and every checkpoint still loads after the refusals.
expect_output "loss" "${run[@]}" --steps 4 --resume ck --save ck --metrics m.jsonl \
  --trace t.json --timeline t.svg --write-eval-batch eval.bin
[ -s m.jsonl ] && [ -s t.json ] && [ -s t.svg ] && [ -s eval.bin ] &&
  echo "ok: the outputs beside the folders were written" || fail "the outputs beside the folders"
expect_output "loss" "${run[@]}" --steps 4 --seq-length 16 --cp 2 --resume cp
expect_output "loss" "${run[@]}" --steps 2 --init-from ex --metrics m2.jsonl

finish
