#!/usr/bin/env bash
# The up-front memory check reads the limits that apply to this process, not only MemAvailable:
# under ulimit -v (RLIMIT_AS) or ulimit -d (RLIMIT_DATA) a run too large for the limit is refused
# at once with a sizing message naming the limit (it used to hang in OpenBLAS or die in a bare
# std::bad_alloc), and a run that fits still trains. A std::bad_alloc in one rank thread
# (--inject-fault kind=bad_alloc) ends the run promptly with the "out of memory" sizing message;
# tests/cli/mpi_out_of_memory.sh does the same under mpirun.
# Usage: memory_limits.sh path/to/dtrain
source "$(dirname "$0")/lib/expect.bash"
quick=(train --model tiny --steps 2 --eval-every 0 --eval-batches 1)

# limited LIMIT-FLAG KB PATTERN ARGS...: under the limit, the run exits non-zero within 20 s
# (a hang is killed) and stderr matches PATTERN.
limited() {
  local flag=$1 kb=$2 pattern=$3
  shift 3
  local err rc start took
  start=$(date +%s)
  err=$( (ulimit "$flag" "$kb" && exec timeout -s KILL 20 "$DTRAIN" "$@") 2>&1 >/dev/null)
  rc=$?
  took=$(($(date +%s) - start))
  if [[ $rc -ne 0 && $rc -ne 137 ]] && grep -qE -- "$pattern" <<<"$err"; then
    echo "ok: (ulimit $flag $kb; dtrain $*) -> exit $rc after ${took} s: $(head -c 220 <<<"$err")"
  else
    fail "(ulimit $flag $kb; dtrain $*): exit $rc after ${took} s: $(head -c 300 <<<"$err")"
  fi
}

# AddressSanitizer and ThreadSanitizer reserve terabytes of address space for their shadow memory
# when the process starts, so under any ulimit -v or -d a sanitized binary dies before main():
# the limits are tested on the ordinary build (the sanitizers still check the bad_alloc path).
if ldd "$DTRAIN" 2>/dev/null | grep -qE 'lib(a|t)san'; then
  echo "skipped: the ulimit cases (this dtrain is built with a sanitizer that reserves its shadow memory up front)"
else
  # 150 MB of address space cannot hold 4 rank threads (stacks and OpenBLAS buffers alone).
  limited -v 150000 "needs at least .* is available \(room under the address-space limit \(ulimit -v" \
    "${quick[@]}" --dp 4
  # A model of 8 GiB of states under a 1 GiB data limit.
  limited -d 1000000 "needs at least .* is available \(room under the data limit \(ulimit -d" \
    "${quick[@]}" --layers 2000 --hidden 256 --heads 4

  # A limit the run fits under changes nothing: 2 GB of address space for one rank.
  out=$( (ulimit -v 2000000 && exec timeout -s KILL 60 "$DTRAIN" "${quick[@]}") 2>&1)
  rc=$?
  if [[ $rc -eq 0 ]]; then echo "ok: (ulimit -v 2000000; dtrain ${quick[*]}) -> exit 0"; else
    fail "a run that fits under ulimit -v 2000000 failed (exit $rc): $(tail -2 <<<"$out")"
  fi

  # Every limit between "cannot start" and "fits" either runs or is refused at once: the rank
  # threads' stacks, OpenBLAS's buffer and the allocator's arenas are counted, so no run waits
  # forever in OpenBLAS's buffer mapping (limits from 350 MB to 650 MB used to, at --dp 1 to 4)
  # or dies in a thread's creation. Each layout must be refused at the low end and run at the
  # high end, so the sweep crosses the boundary.
  for dp in 1 2 4; do
    ran=0 refused=0
    for kb in $(seq 150000 100000 1150000); do
      err=$( (ulimit -v "$kb" && exec timeout -s KILL 60 "$DTRAIN" "${quick[@]}" --dp "$dp") 2>&1 >/dev/null)
      rc=$?
      if [[ $rc -eq 0 ]]; then
        ran=$((ran + 1))
      elif [[ $rc -eq 1 ]] && grep -q "room under the address-space limit (ulimit -v" <<<"$err"; then
        refused=$((refused + 1))
      else
        fail "(ulimit -v $kb; dtrain ${quick[*]} --dp $dp): exit $rc: $(head -c 300 <<<"$err")"
      fi
    done
    if [[ $ran -gt 0 && $refused -gt 0 ]]; then
      echo "ok: --dp $dp under ulimit -v 150 MB to 1.15 GB: $refused limits refused up front, $ran ran"
    else
      fail "--dp $dp: the sweep did not cross the boundary ($refused refused, $ran ran)"
    fi
  done
fi

# A rank thread that runs out of memory mid-run (rank 1 of --dp 2 throws std::bad_alloc before
# step 3): the other rank is released, and the process exits 1 within seconds with the sizing
# message instead of a bare std::bad_alloc or a hang.
start=$(date +%s)
err=$(timeout -s KILL 30 "$DTRAIN" train --model tiny --steps 5 --eval-every 0 --dp 2 \
  --inject-fault rank=1,step=3,kind=bad_alloc 2>&1 >/dev/null)
rc=$?
took=$(($(date +%s) - start))
if [[ $rc -eq 1 && $took -lt 20 ]] &&
  grep -q "^error: out of memory: an allocation failed (std::bad_alloc).*use a smaller --global-batch" \
    <<<"$err"; then
  echo "ok: --dp 2 --inject-fault rank=1,step=3,kind=bad_alloc -> exit 1 after ${took} s: $(grep -m1 "out of memory" <<<"$err" | head -c 160)"
else
  fail "--dp 2, std::bad_alloc in rank 1: exit $rc after ${took} s: $(head -c 300 <<<"$err")"
fi
finish
