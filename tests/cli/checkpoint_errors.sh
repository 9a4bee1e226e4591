#!/usr/bin/env bash
# `dtrain train --save / --resume / --inject-fault` on bad input and under faults: each bad case
# exits non-zero naming the flag or the file and the problem (a manifest whose step disagrees
# with its shards or directory, a `latest` naming a missing directory; shards of the first format
# still load); a run killed by an injected fault
# fails fast naming the rank, and --resume then ends where an uninterrupted run ends.
# Usage: checkpoint_errors.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
quick=(train --model tiny --eval-every 0 --eval-batches 1)

# Flags.
expect_error '--save-every 2 needs --save' "${quick[@]}" --steps 2 --save-every 2
expect_error '--keep-checkpoints must not be negative' "${quick[@]}" --steps 2 --save "$tmp/x" \
  --keep-checkpoints -1
expect_error "--resume $tmp/nowhere: no such directory" "${quick[@]}" --steps 2 \
  --resume "$tmp/nowhere"
mkdir -p "$tmp/empty"
expect_error 'no manifest.json \(not a checkpoint\)' "${quick[@]}" --steps 2 --resume "$tmp/empty"
expect_error '--inject-fault "rank=1": needs rank=R,step=S,kind=throw\|exit' "${quick[@]}" \
  --steps 2 --inject-fault rank=1
expect_error 'kind "segv" is not throw, exit or bad_alloc' "${quick[@]}" --steps 2 \
  --inject-fault rank=0,step=1,kind=segv
expect_error '--inject-fault: rank 5 does not exist \(the run has 2 ranks: --dp 2 x --cp 1 x --tp 1 x --pp 1\)' "${quick[@]}" \
  --steps 2 --dp 2 --inject-fault rank=5,step=1,kind=exit

# A good checkpoint (2 ranks, ZeRO-1) at step 2 of a 4-step run, then broken copies of it.
"$DTRAIN" "${quick[@]}" --steps 4 --save-every 2 --dp 2 --zero 1 --save "$tmp/good" \
  >/dev/null 2>&1 ||
  { echo "FAIL: could not write the checkpoint"; exit 1; }
good="$tmp/good/step-00000002"
broken() {
  rm -rf "$tmp/$1"
  cp -r "$good" "$tmp/$1"
  echo "$tmp/$1"
}
d=$(broken truncated)
truncate -s 1000 "$d/rank-00001.bin"
expect_error 'rank-00001.bin: 1000 bytes, the manifest says' "${quick[@]}" --steps 4 --resume "$d"
d=$(broken flipped)
printf '\x55' | dd of="$d/rank-00000.bin" bs=1 seek=5000 conv=notrunc status=none
expect_error 'rank-00000.bin: checksum mismatch' "${quick[@]}" --steps 4 --resume "$d"
d=$(broken missing)
rm "$d/rank-00001.bin"
expect_error 'rank-00001.bin: shard file missing' "${quick[@]}" --steps 4 --resume "$d"
d=$(broken notjson)
echo '{ "format": "dtrain-checkpoint", ' > "$d/manifest.json"
expect_error 'manifest.json: not valid JSON' "${quick[@]}" --steps 4 --resume "$d"
expect_error 'manifest.json: written for another model shape' "${quick[@]}" --steps 4 \
  --layers 3 --resume "$good"
d=$(broken lies)
sed -i '0,/"bytes": [0-9]*/s//"bytes": 64/' "$d/manifest.json"
expect_error 'manifest.json: .*ends past the 64 bytes of rank-00000.bin' "${quick[@]}" --steps 4 \
  --resume "$d"
expect_error 'the checkpoint is at step 2, nothing is left to do for --steps 2' "${quick[@]}" \
  --steps 2 --resume "$good" --allow-resume-changes

# The manifest's step is checked against the shards' headers and the directory's name.
d=$(broken edited)
sed -i 's/"step": 2,/"step": 1,/' "$d/manifest.json"
grep -q '"step": 1,' "$d/manifest.json" || { echo "FAIL: could not edit the manifest's step"; failures=$((failures + 1)); }
expect_error "manifest.json: the manifest says step 1 but shard .*rank-00000.bin was saved at step 2" \
  "${quick[@]}" --steps 4 --resume "$d"
mkdir -p "$tmp/renamed"
cp -r "$good" "$tmp/renamed/step-00000003"
expect_error "the manifest says step 2 but its directory is step-00000003" "${quick[@]}" --steps 4 \
  --resume "$tmp/renamed/step-00000003"
# A `latest` that names a directory no longer there says so, naming both.
mkdir -p "$tmp/dangling"
echo step-00000009 > "$tmp/dangling/latest"
expect_error "--resume $tmp/dangling/latest names step-00000009, but $tmp/dangling/step-00000009 is missing" \
  "${quick[@]}" --steps 4 --resume "$tmp/dangling"
# Shard files of the first format (magic dtrshrd1, no step) still load: the same run resumes.
d=$(broken oldformat)
/usr/bin/python3 - "$d" <<'PY'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
for f in m["files"]:
    path = os.path.join(d, f["name"])
    data = open(path, "rb").read()
    assert data[:8] == b"dtrshrd2", data[:8]
    open(path, "wb").write(b"dtrshrd1" + data[16:])
    f["bytes"] -= 8
for t in m["tensors"]:
    for p in t["pieces"]:
        p["offset"] -= 8
json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
PY
new_loss=$("$DTRAIN" "${quick[@]}" --steps 4 --dp 2 --zero 1 --resume "$good" --json 2>/dev/null | grep -o '"final_train": [-0-9.e]*' | head -1)
old_loss=$("$DTRAIN" "${quick[@]}" --steps 4 --dp 2 --zero 1 --resume "$d" --json 2>/dev/null | grep -o '"final_train": [-0-9.e]*' | head -1)
if [[ -n "$new_loss" && "$new_loss" == "$old_loss" ]]; then
  echo "ok: a first-format checkpoint resumes as the new one ($old_loss)"
else
  echo "FAIL: first-format checkpoint resumed to '$old_loss', the new format to '$new_loss'"
  failures=$((failures + 1))
fi

# Faults: the other rank names the one that stopped and the operation with its number.
expect_error 'rank 1 finished its work while rank 0: .* #[0-9]+' "${quick[@]}" --steps 4 --dp 2 \
  --inject-fault rank=1,step=3,kind=exit
expect_error 'rank 1 finished its work while rank 0: .*group #[0-9]+' "${quick[@]}" --steps 4 \
  --pp 2 --inject-fault rank=1,step=3,kind=exit
expect_error 'injected fault .*rank 1 fails before step 3' "${quick[@]}" --steps 4 --tp 2 \
  --inject-fault rank=1,step=3,kind=throw

# Killed after the step-2 checkpoint, resumed: the same final loss as a run never killed.
final_loss() { grep -o '"final_train": [-0-9.e]*' | head -1; }
straight=$("$DTRAIN" "${quick[@]}" --steps 4 --dp 2 --zero 3 --json 2>/dev/null | final_loss)
expect_error 'rank 1 finished its work' "${quick[@]}" --steps 4 --dp 2 --zero 3 \
  --save "$tmp/run" --save-every 2 --inject-fault rank=1,step=3,kind=exit
resumed=$("$DTRAIN" "${quick[@]}" --steps 4 --dp 2 --zero 3 --resume "$tmp/run" --json \
  2>/dev/null | final_loss)
if [[ -n "$straight" && "$straight" == "$resumed" ]]; then
  echo "ok: resumed run ends at $resumed, as the uninterrupted one"
else
  echo "FAIL: uninterrupted run ends at '$straight', the resumed one at '$resumed'"
  failures=$((failures + 1))
fi
finish
