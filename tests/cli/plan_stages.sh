# `dtrain plan` on layers that do not split evenly over the pipeline: Llama 3 405B's 126 layers
# on --pp 16 plan the published layout (the first and the last stage one layer fewer), the
# --stage-layers flag is the train command's (checked with the same messages), and the report
# prints the clock's timed bubble and the closed form (P-1)/M each under its own name.
source "$(dirname "$0")/lib/expect.bash"

l3=(--model llama3-405b-128k --cluster 2048x8xH100 --tp 8 --cp 16 --pp 16 --zero 1 --recompute full)
# The balanced split, derived: floor(126 / 16) per stage, the rest one each on interior stages.
L=126 P=16
base=$((L / P)) extra=$((L - P * base))
expect_output "layers per stage: $base, $((base + 1)) \(x$extra\), $base" plan "${l3[@]}"
expect_output "layout    dp=8 tp=8 pp=16 cp=16\(ring\)" plan "${l3[@]}"
expect_output "total .* of 80.00 GB: fits" plan "${l3[@]}"
expect_output "timed bubble .* of the step, .* of the ideal time" plan "${l3[@]}"
expect_output "\(P-1\)/M bubble .* of the ideal time" plan "${l3[@]}"
# The same split given explicitly plans the same step.
list=$base; for ((k = 1; k < P - 1; k++)); do list+=",$((base + 1))"; done; list+=",$base"
out=$("$DTRAIN" plan "${l3[@]}" --json)
given=$("$DTRAIN" plan "${l3[@]}" --stage-layers "$list" --json)
text=$("$DTRAIN" plan "${l3[@]}")
if python3 - "$out" "$given" "$text" "$L" <<'PY'
import json, re, sys
j, g, text, L = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
p, q = j["plan"], g["plan"]
assert j["model"]["layers"] == L, j["model"]["layers"]
assert sum(p["stage_layers"]) == L and len(p["stage_layers"]) == 16, p["stage_layers"]
assert p["stage_layers"][0] == p["stage_layers"][-1] == min(p["stage_layers"]), p["stage_layers"]
assert q["stage_layers"] == p["stage_layers"] and q["time"]["step_s"] == p["time"]["step_s"]
b, M, P = p["bubble"], p["microbatches"], 16
# The closed form is (P-1)/M; the timed figure is the replay's, named apart.
assert abs(b["formula_fraction_of_ideal"] - (P - 1) / M) < 1e-12, b
assert b["formula"] == "(P-1)/M", b
pct = lambda x: "%.1f%%" % (100 * x)
assert ("(P-1)/M bubble   " + pct((P - 1) / M) + " of the ideal time") in text, text
assert ("timed bubble     " + pct(b["fraction_of_total"]) + " of the step, " +
        pct(b["fraction_of_ideal"]) + " of the ideal time") in text, text
PY
then
  echo "ok: the balanced split and --stage-layers agree; both bubbles printed under their names"
else
  fail "the 405B plan's JSON or bubble lines"
fi

# --stage-layers is checked with the train command's messages.
expect_error "--stage-layers 8,8 has 2 entries, but --pp is 16" plan "${l3[@]}" --stage-layers 8,8
bad=${list/#$base/$((base + 1))}  # one layer too many on the first stage
expect_error "--stage-layers $bad sums to $((L + 1)), not --layers $L" plan "${l3[@]}" --stage-layers "$bad"
expect_error "--stage-layers \"8,x\" must be a comma-separated list of positive layer counts" \
  plan "${l3[@]}" --stage-layers 8,x
expect_error "--stage-layers needs --pp 2 or more" \
  plan --model llama2-7b --cluster 1x8xH100 --stage-layers 32
expect_error "--stage-layers with --vp 2" \
  plan --model llama2-7b --cluster 1x8xH100 --pp 2 --vp 2 --stage-layers 16,16
expect_error "--stage-layers fixes one layout's split" \
  plan --model llama2-7b --cluster 1x8xH100 --search --stage-layers 16,16
# --search takes a pp that does not divide the layers (6 layers on 4 stages: 1, 2, 2, 1).
expect_output "layers per stage: 1, 2 \(x2\), 1" \
  plan --layers 6 --hidden 256 --heads 8 --vocab 1024 --seq-length 512 --global-batch 8 \
  --cluster 1x4xH100 --search --pp 4 --top 1
finish
