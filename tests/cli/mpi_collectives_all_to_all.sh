# `dtrain collectives --op all_to_all` under mpirun: pairwise (send/recv), direct (the ranks'
# shared window on one node) and MPI's own MPI_Alltoall, verified, with every rank's measured
# steps and bytes equal to the formula columns (native: MPI's bytes, not counted).
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

# 3 ranks, S = 3 MiB + 12 B: blocks of 1 MiB + 4 B, larger than a window slot's piece, so the
# direct algorithm runs in several segments.
for algo in pairwise direct native; do
  json=$("${MPIRUN[@]}" -np 3 "$DTRAIN" collectives --backend mpi --ranks 3 --size 3145740 \
    --op all_to_all --algo $algo --trials 1 --trial-seconds 0.01 --json 2>&1)
  if python3 - "$json" "$algo" <<'PY'; then
import json, sys
text = sys.argv[1]
d = json.loads(text[text.index("{"):])
algo = sys.argv[2]
assert d["verified"] and d["backend"] == "mpi" and d["algorithm"] == algo, d
block = 3145740 // 3
for r in d["per_rank"]:
    if algo == "native":
        continue
    assert r["bytes_received"] == 2 * block, r
    assert r["bytes_sent"] == (2 * block if algo == "pairwise" else 0), r
    assert r["steps"] > (2 if algo == "direct" else 1), r
    assert (r["steps"], r["bytes_sent"], r["bytes_received"]) == (
        r["formula_steps"], r["formula_bytes_sent"], r["formula_bytes_received"]), r
PY
    echo "ok: mpirun -np 3 collectives --op all_to_all --algo $algo: verified, counters = formula"
  else
    echo "FAIL: mpirun -np 3 collectives --op all_to_all --algo $algo:"; tail -20 <<<"$json"
    failures=$((failures + 1))
  fi
done
# all_to_all_v under mpirun: uneven parts, rank 3 of 4 sending nothing, both algorithms.
for algo in pairwise direct; do
  json=$("${MPIRUN[@]}" -np 4 "$DTRAIN" collectives --backend mpi --ranks 4 --size 1MiB \
    --op all_to_all_v --algo $algo --trials 1 --trial-seconds 0.01 --json 2>&1)
  if python3 - "$json" "$algo" <<'PY'; then
import json, sys
text = sys.argv[1]
d = json.loads(text[text.index("{"):])
assert d["verified"] and d["op"] == "all_to_all_v" and d["algorithm"] == sys.argv[2], d
for r in d["per_rank"]:
    assert (r["steps"], r["bytes_sent"], r["bytes_received"]) == (
        r["formula_steps"], r["formula_bytes_sent"], r["formula_bytes_received"]), r
assert d["per_rank"][3]["bytes_sent"] == 0, d["per_rank"][3]
PY
    echo "ok: mpirun -np 4 collectives --op all_to_all_v --algo $algo: verified, counters = formula"
  else
    echo "FAIL: mpirun -np 4 collectives --op all_to_all_v --algo $algo:"; tail -20 <<<"$json"
    failures=$((failures + 1))
  fi
done
finish
