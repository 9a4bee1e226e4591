#!/usr/bin/env bash
# `dtrain train --cp`: layouts context parallelism cannot run exit non-zero with an error naming
# the flag and the values at fault; one small run per algorithm trains; the report's CP rows; and
# checkpoints reshard between CP and non-CP layouts (the final loss of a resumed run equals the
# uninterrupted one's, as printed). Usage: cp_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"

small=(train --model tiny --steps 1 --global-batch 2)
# The balanced ring cuts the sequence into 2 x cp chunks: 12 tokens do not make 8; 6 not even 4.
expect_error "--cp-algo ring needs --seq-length 12 divisible by 2 x --cp 4 = 8" "${small[@]}" --seq-length 12 --cp 4
expect_error "--cp-algo all-gather needs --seq-length 12 divisible by 2 x --cp 4 = 8" "${small[@]}" --seq-length 12 --cp 4 --cp-algo all-gather
expect_error '--cp 4 does not divide --seq-length 6' "${small[@]}" --seq-length 6 --cp 4 --cp-algo ulysses
# Ulysses gives every rank whole heads: 4 heads over cp 4 x tp 2 ranks do not split.
expect_error '--cp-algo ulysses needs --heads 4 and --kv-heads 4 divisible by --cp 4 x --tp 2 = 8' "${small[@]}" --seq-length 16 --cp 4 --tp 2 --cp-algo ulysses
# More CP ranks than tokens in a sequence.
expect_error '--cp 32 is beyond the 16 tokens of a sequence \(--seq-length\)' "${small[@]}" --seq-length 16 --cp 32
expect_error '--cp must be at least 1 \(got 0\)' "${small[@]}" --seq-length 16 --cp 0
expect_error '--cp-algo "star" is not one of ring, all-gather, ulysses' "${small[@]}" --seq-length 16 --cp 2 --cp-algo star
expect_error '--rank-order "tp-cp-cp-dp-pp" must name tp, dp and pp once each \(cp at most once\)' "${small[@]}" --seq-length 16 --cp 2 --rank-order tp-cp-cp-dp-pp

for algo in ring all-gather ulysses; do
  expect_output "DP\(1\)-CP\(2\)-TP\(1\)-PP\(1\)-rank\(0\) CP $algo" "${small[@]}" --seq-length 16 --cp 2 --cp-algo "$algo"
done
expect_output "DP\(1\)-CP\(2\)-TP\(1\)-PP\(1\)-rank\(0\) CP ring" "${small[@]}" --seq-length 16 --cp 2 --rank-order dp-cp-tp-pp
expect_error '--cp-split "zigzag" is not one of balanced, contiguous' "${small[@]}" --seq-length 16 --cp 2 --cp-split zigzag

# The report: per CP rank its bytes beside plan/ (equal) and the attention work, the balanced
# split's busiest rank at the mean, the contiguous split's at 2 - 1/cp (exactly, for the counts).
cp_run=(train --model tiny --context 64 --seq-length 64 --global-batch 2 --steps 1 --cp 4)
expect_output 'ring over 4 ranks, balanced split' "${cp_run[@]}"
expect_output '     3   3  163840 \(163840\) +8320 \(8320\)' "${cp_run[@]}"
expect_output 'busiest rank over the mean: 1.000 counted, .* the contiguous split.s: 1.738' "${cp_run[@]}"
expect_output 'busiest rank over the mean: 1.738 counted, .* the balanced split.s: 1.000' "${cp_run[@]}" --cp-split contiguous
expect_output '"cp_work_imbalance": 1.0' "${cp_run[@]}" --json

# A CP checkpoint resumes on other layouts, with and without CP, and a serial one under CP.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ck=(train --model tiny --context 32 --seq-length 32 --global-batch 4 --eval-every 0 --eval-batches 1 --steps 4)
final_loss() { grep -oE 'step 4/4 loss [0-9.]+' | awk '{print $4}'; }
want=$("$DTRAIN" "${ck[@]}" --save "$tmp/cp" --save-every 2 --cp 2 2>&1 | final_loss)
serial=$("$DTRAIN" "${ck[@]}" --save "$tmp/serial" --save-every 2 2>&1 | final_loss)
[[ -n "$want" && "$want" == "$serial" ]] || fail "cp 2 run ends at '$want', the serial run at '$serial'"
for layout in "" "--dp 2" "--cp 4 --cp-algo ulysses" "--cp 2 --tp 2 --sequence-parallel"; do
  # shellcheck disable=SC2086
  got=$("$DTRAIN" "${ck[@]}" --resume "$tmp/cp/step-00000002" $layout 2>&1 | final_loss)
  if [[ "$got" == "$want" ]]; then
    echo "ok: cp 2 checkpoint resumed with [$layout] ends at loss $got"
  else
    fail "cp 2 checkpoint resumed with [$layout] ends at '$got', want '$want'"
  fi
done
got=$("$DTRAIN" "${ck[@]}" --resume "$tmp/serial/step-00000002" --cp 4 --cp-algo all-gather 2>&1 | final_loss)
[[ "$got" == "$want" ]] && echo "ok: serial checkpoint resumed with --cp 4 ends at loss $got" ||
  fail "serial checkpoint resumed with --cp 4 ends at '$got', want '$want'"
# A CP checkpoint that does not fit the layout's model is refused, naming the manifest and the
# field that differs with both values (here a longer context for a longer --seq-length under --cp 4).
expect_error "--resume $tmp/cp/step-00000002/manifest.json: written for another model shape: context 32 \\(this run: 64\\)" \
  "${ck[@]/32/64}" --resume "$tmp/cp/step-00000002" --cp 4
finish
