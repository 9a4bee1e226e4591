# `dtrain calibrate --backend mpi --compute` under mpirun: the processes measure the links, then
# the reporting process times this machine's compute, with the collectives and the interference
# on thread ranks of its own inside the MPI job; the file carries gpu.measured and plan reads it.
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Links timed on 1 MiB messages with idle ranks yielding their core: 16 KiB exchanges among 4
# busy-polling processes on a loaded 2-core machine measured 4 MB/s, below what a cluster file
# may hold.
if ! mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np 4 "$DTRAIN" \
  calibrate --backend mpi --ranks-per-node 2 --seconds 0.02 --trials 1 --iterations 5 \
  --size 1MiB --compute --quick \
  -o "$dir/c.json" >"$dir/out.txt" 2>&1; then
  fail "calibrate --backend mpi --compute failed: $(tail -3 "$dir/out.txt")"
fi
grep -q "compute with every core busy" "$dir/out.txt" || fail "no compute section: $(tail -3 "$dir/out.txt")"
grep -q '"measured"' "$dir/c.json" || fail "c.json has no gpu.measured"
expect_output "calibrated 2x2" plan --cluster "$dir/c.json" --layers 2 --hidden 64 --heads 4 \
  --vocab 256 --seq-length 64 --dp 4 --global-batch 8
finish
