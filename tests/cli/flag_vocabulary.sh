# One vocabulary for train and plan: every layout row `plan --search --json` prints for a small
# model runs through `train` unchanged; every key of `train --dump-config` is a flag of plan's
# config where it means the same thing, and plan reads the model and layout back as train set
# them; the old spellings still work, each with a note naming the new one.
source "$(dirname "$0")/lib/expect.bash"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=(--layers 4 --hidden 32 --heads 4 --vocab 256 --seq-length 32 --global-batch 8)
quick=(--steps 1 --eval-every 0 --eval-batches 1)

# 1. plan's layouts into train: every fitting layout on 4 GPUs, and the best 100 on 8.
for cluster_top in "1x4xA100-80GB 1000" "1x8xA100-80GB 100"; do
  read -r cluster top <<<"$cluster_top"
  "$DTRAIN" plan "${model[@]}" --cluster "$cluster" --search --top "$top" --json >"$tmp/search.json" ||
    fail "plan --search on $cluster exited $?"
  python3 -c 'import json,sys
for row in json.load(open(sys.argv[1]))["top"]: print(row["layout"]["flags"])' "$tmp/search.json" \
    >"$tmp/rows.txt" || fail "plan --search --json on $cluster: no layout flags"
  rows=0 bad=0
  while read -r row; do
    rows=$((rows + 1))
    # shellcheck disable=SC2086  # the row is a list of flags
    if ! out=$("$DTRAIN" train --model tiny "${model[@]}" $row "${quick[@]}" 2>&1); then
      bad=$((bad + 1))
      echo "FAIL: train $row: $(tail -1 <<<"$out")"
    fi
  done <"$tmp/rows.txt"
  [ "$rows" -ge 5 ] || fail "plan --search on $cluster printed only $rows layouts"
  [ "$bad" -eq 0 ] || fail "$bad of the $rows layouts plan printed for $cluster did not run in train"
  echo "ok: the $rows layouts plan --search prints for $cluster each run in train unchanged"
done

# 2. train's --dump-config read by plan. The keys plan has no flag for are train's alone (the
# run, the optimizer, the data, the backend); any other key must be a flag of plan.
train_only=" model steps lr min-lr warmup weight-decay beta1 beta2 grad-clip eval-every
  eval-batches seed data val-fraction blas-threads grad-accum cp-split grad-reduce backend timeout
  keep-checkpoints dp-all-reduce dp-algo capacity-factor aux-loss-coef context log-every "
"$DTRAIN" train --model tiny "${model[@]}" --dp 2 --pp 2 --microbatches 2 --zero 1 \
  --rank-order dp-tp-pp --bucket-size 256KiB --dump-config >"$tmp/train.toml" ||
  fail "train --dump-config exited $?"
"$DTRAIN" plan --help >"$tmp/plan_help.txt"
: >"$tmp/plan.toml"
while IFS= read -r line; do
  key=${line%% =*}
  if [[ $train_only == *" $key "* || $train_only == *" $key"$'\n'* ]]; then continue; fi
  grep -qE -- "^ +--$key\b" "$tmp/plan_help.txt" ||
    fail "train --dump-config key '$key' is no flag of plan (add it, or list it as train's alone)"
  echo "$line" >>"$tmp/plan.toml"
done <"$tmp/train.toml"
"$DTRAIN" plan --config "$tmp/plan.toml" --cluster 1x4xA100-80GB --json >"$tmp/plan.json" \
  2>"$tmp/plan.err" || fail "plan --config (train's keys) exited $?: $(cat "$tmp/plan.err")"
python3 -c 'import json,sys
j = json.load(open(sys.argv[1]))
m, t, l = j["model"], j["training"], j["plan"]["layout"]
got = (m["layers"], m["hidden"], m["heads"], m["vocab"], m["seq"], t["global_batch"], t["bucket_bytes"],
       l["dp"], l["tp"], l["pp"], l["zero_stage"], l["micro_batch"], l["order"])
want = (4, 32, 4, 256, 32, 8, 262144, 2, 1, 2, 1, 2, "dp-tp-pp")
assert got == want, (got, want)' "$tmp/plan.json" ||
  fail "plan read train's --dump-config differently: $(head -c 400 "$tmp/plan.json")"
echo "ok: plan reads train's --dump-config ($(wc -l <"$tmp/plan.toml") shared keys) as train set them"

# 3. The old spellings: accepted, with a note on stderr; both spellings at once are refused.
expect_note() {  # PATTERN ARGS...: exits 0 and stderr matches PATTERN
  local pattern=$1 err
  shift
  if ! err=$("$DTRAIN" "$@" 2>&1 >/dev/null); then
    fail "dtrain $* exited non-zero: $(tail -1 <<<"$err")"
  elif ! grep -qE -- "$pattern" <<<"$err"; then
    fail "dtrain $*: stderr does not match '$pattern': $(head -3 <<<"$err")"
  else
    echo "ok: dtrain $* notes '$pattern'"
  fi
}
expect_note "note: --channels is now --hidden" train --model tiny --channels 32 "${quick[@]}"
expect_note "note: --seq is now --seq-length" train --model tiny --seq 16 "${quick[@]}"
expect_note "note: --batch is now --global-batch" train --model tiny --batch 8 "${quick[@]}"
expect_note "note: --chunks is now --vp" train --model tiny --layers 4 --pp 2 --chunks 2 \
  --microbatches 2 "${quick[@]}"
expect_note "note: --order is now --rank-order" plan "${model[@]}" --cluster 1x4xA100-80GB \
  --dp 4 --order tp-dp-pp
expect_note "note: --bucket is now --bucket-size" plan "${model[@]}" --cluster 1x4xA100-80GB \
  --dp 4 --bucket 1MiB
expect_error "--channels: is the old spelling of --hidden: give --hidden once" \
  train --model tiny --hidden 32 --channels 32 "${quick[@]}"
printf 'channels = 32\nseq = 16\n' >"$tmp/old.toml"
expect_note "line 1: 'channels' is now 'hidden'" train --model tiny --config "$tmp/old.toml" \
  --dump-config
expect_output "seq-length = 16" train --model tiny --config "$tmp/old.toml" --dump-config
# --help shows the new names only (and lists them: the check can see a flag).
listed() {  # COMMAND... FLAG: the command's --help has a line for FLAG
  local flag=${*: -1}
  "$DTRAIN" "${@:1:$#-1}" --help 2>/dev/null | grep -qE -- "^ +$flag\b([^-]|$)"
}
for pair in "train:--channels:--hidden" "train:--seq:--seq-length" "train:--batch:--global-batch" \
  "train:--chunks:--vp" "plan:--order:--rank-order" "plan:--bucket:--bucket-size" \
  "pipeline:--chunks:--vp" "bench cp:--channels:--hidden" "bench data:--seq:--seq-length"; do
  IFS=: read -r cmd old new <<<"$pair"
  read -r -a words <<<"$cmd"
  listed "${words[@]}" "$new" || fail "dtrain $cmd --help does not list $new"
  ! listed "${words[@]}" "$old" || fail "dtrain $cmd --help still lists $old"
done
echo "ok: --help lists the new names, not the old"
finish
