#!/usr/bin/env bash
# The Llama family under `--backend mpi`: the same per-step losses as the same layout on the
# threads backend, bit for bit (the same algorithms in the same order), on DP x TP x PP with
# ZeRO and SP, on CP with grouped-query K/V heads, on EP with Mixtral's SwiGLU experts (each cut
# over TP), and on TP above the K/V heads (multi-query: each TP rank a copy of the one head).
# Usage: mpi_llama_train.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
if ! command -v mpirun >/dev/null; then
  echo "mpirun is not installed (openmpi-bin): nothing to test"
  exit 0
fi
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
run=(train --model llama-tiny --layers 4 --steps 3 --eval-every 0 --eval-batches 1 --json)
losses() { tr -d ' \n' | grep -o '"train_losses":\[[^]]*\]'; }

for case in "8|--dp 2 --tp 2 --pp 2 --microbatches 2 --zero 3 --sequence-parallel" \
  "4|--dp 2 --cp 2 --cp-algo ring --zero 1" "4|--tp 2 --pp 2 --microbatches 2 --precision bf16" \
  "4|--dp 2 --ep 2 --tp 2 --experts 4 --top-k 2 --zero 1" "4|--dp 2 --tp 2 --kv-heads 1 --zero 1"; do
  np=${case%%|*}
  layout=${case#*|}
  # shellcheck disable=SC2086
  threads=$("$DTRAIN" "${run[@]}" $layout 2>/dev/null | losses)
  # shellcheck disable=SC2086
  mpi=$("${MPIRUN[@]}" -np "$np" "$DTRAIN" "${run[@]}" $layout --backend mpi 2>/dev/null | losses)
  if [ -n "$threads" ] && [ "$threads" = "$mpi" ]; then
    echo "ok: $layout: mpirun -np $np --backend mpi losses == threads: $mpi"
  else
    fail "$layout: threads $threads, mpi $mpi"
  fi
done
finish
