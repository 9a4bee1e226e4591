#!/usr/bin/env bash
# --config FILE (TOML or INI, the long flag names as keys) and --dump-config on every command: a
# file's flags apply, the command line wins over it, --dump-config prints the effective flags in
# a form --config reads back to the same run, and a bad file or key is refused by name (a
# directory, a binary file, a syntax error, a repeated key, a number past int64: with the line).
# Usage: config_file.sh path/to/dtrain
set -uo pipefail
source "$(dirname "$0")/lib/expect.bash"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
py=/usr/bin/python3

cat > "$tmp/run.toml" <<'TOML'
# a tiny run
model = "tiny"
steps = 5
eval-every = 0
batch = 4
lr = 0.002
TOML
"$DTRAIN" train --config "$tmp/run.toml" --json > "$tmp/a.json" 2>/dev/null
"$DTRAIN" train --model tiny --steps 5 --eval-every 0 --global-batch 4 --lr 0.002 --json > "$tmp/b.json" 2>/dev/null
check "train --config FILE runs the file's flags (losses equal the same flags given)" \
  "$py" -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); assert a['train_losses']==b['train_losses'] and len(a['train_losses'])==5" "$tmp/a.json" "$tmp/b.json"
"$DTRAIN" train --config "$tmp/run.toml" --steps 3 --json > "$tmp/c.json" 2>/dev/null
check "the command line wins over the file (--steps 3)" \
  "$py" -c "import json,sys; assert len(json.load(open(sys.argv[1]))['train_losses'])==3" "$tmp/c.json"

# --dump-config: the effective flags; read back, the same run.
"$DTRAIN" train --config "$tmp/run.toml" --steps 4 --dump-config > "$tmp/dump.toml"
check "--dump-config prints the file's and the command line's values, and runs nothing" \
  grep -q '^steps = 4$' "$tmp/dump.toml"
grep -q '^lr = 0.002$' "$tmp/dump.toml" || { echo "FAIL: dump has lr"; failures=$((failures + 1)); }
"$DTRAIN" train --config "$tmp/dump.toml" --json > "$tmp/d.json" 2>/dev/null
"$DTRAIN" train --config "$tmp/run.toml" --steps 4 --json > "$tmp/e.json" 2>/dev/null
check "the dumped config replays the run bit for bit" \
  "$py" -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); assert a['train_losses']==b['train_losses']" "$tmp/d.json" "$tmp/e.json"

# Every command takes it: plan from a file equals plan with the flags.
printf 'model = "gpt3-175b"\ncluster = "128x8xA100"\ntp = 8\npp = 8\nzero = 1\n' > "$tmp/plan.toml"
"$DTRAIN" plan --config "$tmp/plan.toml" --json > "$tmp/p1.json"
"$DTRAIN" plan --model gpt3-175b --cluster 128x8xA100 --tp 8 --pp 8 --zero 1 --json > "$tmp/p2.json"
check "plan --config equals plan with the flags" cmp -s "$tmp/p1.json" "$tmp/p2.json"
expect_output "steps" train --help
expect_output "--dump-config" plan --help
expect_output "--config" bench train --help

# Bad input: a missing file, a key that is no flag, a bad value.
expect_error "$tmp/none.toml" train --config "$tmp/none.toml"
printf 'stepz = 3\n' > "$tmp/typo.toml"
expect_error "stepz" train --config "$tmp/typo.toml"
printf 'steps = 0\n' > "$tmp/zero.toml"
expect_error "--steps" train --config "$tmp/zero.toml"
# What CLI11's reader would misread is refused naming the file and the line: a directory, a
# syntax error, a key set twice, a binary file, a whole number past int64.
mkdir "$tmp/dir.toml"
expect_error "--config $tmp/dir.toml: is a directory" train --config "$tmp/dir.toml"
printf 'model = "tiny"\nsteps = 5 6\n' > "$tmp/syntax.toml"
expect_error "--config $tmp/syntax.toml line 2: 'steps = 5 6' is not .key = value." train --config "$tmp/syntax.toml"
printf 'steps == 5\n' > "$tmp/syntax2.toml"
expect_error "--config $tmp/syntax2.toml line 1: " train --config "$tmp/syntax2.toml"
printf 'steps = 5\nlr = 0.01\nsteps = 6\n' > "$tmp/twice.toml"
expect_error "--config $tmp/twice.toml line 3: steps is set again \(first on line 1\)" train --config "$tmp/twice.toml"
head -c 3000 /bin/sh > "$tmp/binary.toml"
expect_error "--config $tmp/binary.toml: a binary file, not TOML text" train --config "$tmp/binary.toml"
printf 'steps = 99999999999999999999999\n' > "$tmp/huge.toml"
expect_error "--config $tmp/huge.toml line 1: steps = 99999999999999999999999 is out of range" train --config "$tmp/huge.toml"
printf 'eval-every = 0\nsteps = [3, 4]\n' > "$tmp/list.toml"
expect_error "--config $tmp/list.toml line 2: steps takes one value" train --config "$tmp/list.toml"
finish
