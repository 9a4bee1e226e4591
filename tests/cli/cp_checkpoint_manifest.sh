#!/usr/bin/env bash
# A checkpoint's manifest records context parallelism beside dp, tp, pp and zero: layout.cp, and
# with cp > 1 the attention algorithm and token split the run used (ulysses: contiguous). A CP
# checkpoint still resumes on other layouts, ending where the uninterrupted run ends; a manifest
# from before CP (no layout.cp) reads as cp 1; cp > 1 without its algorithm is refused naming the
# field. Usage: cp_checkpoint_manifest.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ck=(train --model tiny --context 32 --seq-length 32 --global-batch 4 --eval-every 0 --eval-batches 1 --steps 4)
final_loss() { grep -oE 'step 4/4 loss [0-9.]+' | awk '{print $4}'; }
want=$("$DTRAIN" "${ck[@]}" --save "$tmp/ag" --save-every 2 --cp 2 --cp-algo all-gather 2>&1 | final_loss)
"$DTRAIN" "${ck[@]}" --save "$tmp/ul" --save-every 2 --cp 2 --cp-algo ulysses > /dev/null 2>&1 || fail "ulysses run"
"$DTRAIN" "${ck[@]}" --save "$tmp/dp" --save-every 2 --dp 2 > /dev/null 2>&1 || fail "dp run"

# layout_is DIR EXPECTED: the manifest's layout object, keys sorted, as JSON.
layout_is() {
  local got
  got=$(python3 -c 'import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["layout"], sort_keys=True))' "$1/manifest.json")
  if [[ "$got" == "$2" ]]; then
    echo "ok: $(basename "$(dirname "$1")") manifest layout $got"
  else
    fail "$1/manifest.json layout is $got, want $2"
  fi
}
layout_is "$tmp/ag/step-00000002" \
  '{"cp": 2, "cp_algo": "all-gather", "cp_split": "balanced", "dp": 1, "pp": 1, "tp": 1, "zero": 0}'
layout_is "$tmp/ul/step-00000002" \
  '{"cp": 2, "cp_algo": "ulysses", "cp_split": "contiguous", "dp": 1, "pp": 1, "tp": 1, "zero": 0}'
layout_is "$tmp/dp/step-00000002" '{"cp": 1, "dp": 2, "pp": 1, "tp": 1, "zero": 0}'

# Resharding as before: the cp 2 checkpoint resumes without CP and at cp 4, ending at the same loss.
for layout in "--dp 2" "--cp 4 --cp-algo ring"; do
  # shellcheck disable=SC2086
  got=$("$DTRAIN" "${ck[@]}" --resume "$tmp/ag/step-00000002" $layout 2>&1 | final_loss)
  [[ -n "$want" && "$got" == "$want" ]] && echo "ok: cp 2 checkpoint resumed with [$layout] ends at $got" ||
    fail "cp 2 checkpoint resumed with [$layout] ends at '$got', want '$want'"
done

# A manifest written before CP (no layout.cp) is cp 1; cp 2 without cp_algo is refused.
cp -r "$tmp/ag/step-00000002" "$tmp/old"
python3 - "$tmp/old/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for k in ("cp", "cp_algo", "cp_split"):
    del m["layout"][k]
json.dump(m, open(sys.argv[1], "w"))
PY
got=$("$DTRAIN" "${ck[@]}" --resume "$tmp/old" --cp 2 --cp-algo all-gather 2>&1 | final_loss)
[[ "$got" == "$want" ]] && echo "ok: a manifest without layout.cp resumes, ending at $got" ||
  fail "a manifest without layout.cp ends at '$got', want '$want'"
cp -r "$tmp/ag/step-00000002" "$tmp/bad"
python3 - "$tmp/bad/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["layout"]["cp_algo"]
json.dump(m, open(sys.argv[1], "w"))
PY
expect_error 'manifest.json: layout.cp_algo must be a string when layout.cp is 2' \
  "${ck[@]}" --resume "$tmp/bad"
finish
