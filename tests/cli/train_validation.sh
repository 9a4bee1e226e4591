#!/usr/bin/env bash
# `dtrain train` checks what it is given before the first step and its report never fails after
# the work: a contiguous CP split whose --seq-length the balanced split cannot cut still reports; flags
# that only mean something beside another are refused alone; every mesh axis is named in the
# rank products; a capacity factor too large for an integer drops nothing; --json's engine is
# an object, lr the number given, train_losses objects as val_losses. Also export of an MoE
# checkpoint, calibrate's node rules and the cluster file's refusals.
# Usage: train_validation.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(train --model tiny --eval-every 0 --eval-batches 1)
run=("${base[@]}" --steps 2)

# A CP split the user chose: --seq-length 6 divides into --cp 2 but not into 2 x cp chunks. The run
# trains, saves and reports (rc 0), the other split's imbalance marked as not possible.
for split in "--cp-split contiguous" "--cp-algo ulysses"; do
  # shellcheck disable=SC2086
  "$DTRAIN" "${run[@]}" --cp 2 --seq-length 6 $split --save "$tmp/ck-${split##* }" --json \
    >"$tmp/cp.json" 2>"$tmp/cp.err"
  rc=$?
  if [ $rc -eq 0 ] && python3 - "$tmp/cp.json" <<'PY'; then
import json, sys
j = json.load(open(sys.argv[1]))
assert j["layout"]["cp_split"] == "contiguous", j["layout"]
assert j["layout"]["cp_other_split_imbalance"] is None, j["layout"]
assert j["checkpoint"]["last_saved"], j["checkpoint"]
PY
    echo "ok: --cp 2 --seq-length 6 $split: trains, saves and reports"
  else
    fail "--cp 2 --seq-length 6 $split: exit $rc: $(tail -2 "$tmp/cp.err")"
  fi
done
expect_output "the balanced split.s: none \(it needs --seq-length divisible by 2 x --cp 2 = 4\)" \
  "${run[@]}" --cp 2 --seq-length 6 --cp-split contiguous

# Flags that need another, refused alone with another value than their default (as --schedule
# is without --pp; --dump-config's file, which holds every flag, still replays).
for flag in "--top-k 2" "--capacity-factor 1.5" "--moe-every 2" "--aux-loss-coef 0.1"; do
  # shellcheck disable=SC2086
  expect_error "error: ${flag% *} needs --experts E" "${run[@]}" $flag
done
expect_error "error: --cp-algo needs --cp 2 or more" "${run[@]}" --cp-algo ulysses
expect_error "error: --cp-split needs --cp 2 or more" "${run[@]}" --cp-split contiguous
expect_output "^dtrain train" "${run[@]}" --top-k 1 --cp-algo ring
expect_error "error: --schedule gpipe needs --pp 2 or more" "${run[@]}" --schedule gpipe

# Every axis of the mesh is named in the products.
expect_error "error: --dp 1 x --cp 1000000 x --tp 1 x --pp 1 = 1000000 rank threads" "${run[@]}" \
  --cp 1000000
expect_error "--inject-fault: rank 2 does not exist \(the run has 2 ranks: --dp 1 x --cp 2 x --tp 1 x --pp 1\)" \
  "${run[@]}" --cp 2 --inject-fault rank=2,step=1,kind=exit
err=$("$DTRAIN" "${run[@]}" --cp 2 --inject-fault rank=1,step=1,kind=throw 2>&1 >/dev/null)
if grep -q "does not exist" <<<"$err"; then
  fail "--cp 2 --inject-fault rank=1: $err"
else
  echo "ok: --cp 2 --inject-fault rank=1: rank 1 exists ($(head -1 <<<"$err"))"
fi

# A capacity factor past what an integer holds saturates: nothing is dropped.
"$DTRAIN" "${run[@]}" --experts 4 --top-k 2 --capacity-factor 1e17 --json >"$tmp/moe.json" \
  2>"$tmp/moe.err" || fail "--capacity-factor 1e17 exited $?: $(tail -2 "$tmp/moe.err")"
python3 - "$tmp/moe.json" <<'PY' && echo "ok: --capacity-factor 1e17 drops nothing" ||
import json, sys
steps = json.load(open(sys.argv[1]))["moe"]["steps"]
assert steps and all(s["dropped"] == 0 and s["assignments"] > 0 for s in steps), steps
PY
  fail "--capacity-factor 1e17 dropped tokens: $(cat "$tmp/moe.json" | head -c 300)"

# --json: the engine as fields, lr as given, a loss per step as {step, loss}.
"$DTRAIN" "${base[@]}" --steps 3 --dp 2 --lr 0.003 --min-lr 0.0007 --json >"$tmp/s.json" \
  2>/dev/null || fail "train --json exited $?"
python3 - "$tmp/s.json" <<'PY' && echo "ok: --json engine object, lr 0.003, train_losses objects" ||
import json, sys
j = json.load(open(sys.argv[1]))
e = j["engine"]
assert isinstance(e, dict) and e["dp"] == 2 and e["ranks"] == 2 and e["backend"] == "threads", e
assert isinstance(e["text"], str) and e["text"], e
assert j["run"]["lr"] == 0.003 and j["run"]["min_lr"] == 0.0007, j["run"]
t = j["train_losses"]
assert [s["step"] for s in t] == [1, 2, 3], t
assert all(set(s) == {"step", "loss"} for s in t), t
assert all(set(v) == {"step", "val_loss"} for v in j["val_losses"]), j["val_losses"]
assert t[0]["loss"] == j["loss"]["first_train"], (t, j["loss"])
PY
  fail "train --json: $(head -c 400 "$tmp/s.json")"

# Export of a GPT MoE checkpoint (GPT-2 has no experts) is refused before its folder is made.
"$DTRAIN" "${base[@]}" --steps 1 --experts 4 --top-k 2 --save "$tmp/moe-ck" >/dev/null 2>&1 ||
  fail "MoE --save exited $?"
expect_error "holds a mixture-of-experts GPT .*Hugging Face's GPT-2 has no experts" \
  export --checkpoint "$tmp/moe-ck" --output "$tmp/moe-out"
[ -e "$tmp/moe-out" ] && fail "export of an MoE checkpoint left $tmp/moe-out behind"

# calibrate on thread ranks: a node needs 2 ranks and the file 2 nodes, said before measuring
# and in the help.
expect_error "--compute on --backend threads emulates two nodes .* a node needs at least 2 ranks.*--ranks 2" \
  calibrate --backend threads --ranks 2 --compute
expect_error "no inter-node link to measure; pass --ranks-per-node G" calibrate --ranks 4
expect_error "--ranks 4 with --ranks-per-node 4 is one node" calibrate --ranks 4 --ranks-per-node 4
help=$("$DTRAIN" calibrate --help 2>&1 | tr -s ' \n' ' ')
if grep -q "2 nodes of at least 2 ranks each" <<<"$help"; then
  echo "ok: calibrate --help says a node needs 2 ranks"
else
  fail "calibrate --help never says a node needs 2 ranks"
fi

# A cluster file that is missing or not JSON: the refusal says where one comes from.
echo "{" >"$tmp/broken.json"
expect_error "--cluster $tmp/none.json: no such file .*--print-cluster" "${run[@]}" \
  --cluster "$tmp/none.json"
expect_error "is not valid JSON.*--print-cluster .*dtrain calibrate" plan --model llama2-70b \
  --cluster "$tmp/broken.json"

# bench clock --fit says in its help that it takes minutes.
help=$("$DTRAIN" bench clock --help 2>&1 | tr -s ' \n' ' ')
if grep -q "it takes minutes, with its progress on stderr" <<<"$help"; then
  echo "ok: bench clock --help: --fit takes minutes"
else
  fail "bench clock --help does not say --fit takes minutes"
fi
# ... and says on stderr how far its grid search is (the first line comes before any grid point;
# the search itself is cut short here).
timeout -s KILL 60 "$DTRAIN" bench clock --fit >/dev/null 2>"$tmp/fit.err"
if grep -q "^bench clock --fit: gemm_efficiency 0.50 (1 of 51" "$tmp/fit.err"; then
  echo "ok: bench clock --fit shows its progress on stderr"
else
  fail "bench clock --fit: no progress on stderr: $(head -2 "$tmp/fit.err")"
fi
finish
