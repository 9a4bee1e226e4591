# Shared by the emulated-cluster tests: arguments, the skip rule (exit 77 = CTest's skip code,
# with the reason printed) and a cluster of this test's own name that is always taken down.
set -u
DTRAIN=${1:?usage: $0 path/to/dtrain path/to/scripts/cluster}
CLUSTER=${2:?usage: $0 path/to/dtrain path/to/scripts/cluster}
failures=0

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
ok() { echo "ok: $* [$(date +%T)]"; }

# Needs root and network namespaces; every test uses its own cluster name, so a cluster someone
# brought up by hand is never touched.
require_cluster() {
  [ "$(id -u)" = 0 ] || skip "the cluster tests need root (network namespaces, tc, mounts)"
  command -v ip >/dev/null && command -v tc >/dev/null || skip "iproute2 (ip, tc) is not installed"
  command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
  local probe=dtprobe$$
  ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace here (no CAP_SYS_ADMIN?)"
  ip netns del "$probe"
  export DTRAIN_CLUSTER_NAME=$1
  trap '"$CLUSTER" down >/dev/null 2>&1' EXIT
  "$CLUSTER" down >/dev/null 2>&1 || true
}
require_mpi() {
  command -v mpirun >/dev/null || skip "mpirun is not installed (openmpi-bin)"
  "$DTRAIN" collectives --backend mpi --ranks 1 --size 4 2>&1 | grep -q "no MPI backend" &&
    skip "this dtrain was built without the MPI backend"
  return 0
}

# Nothing of cluster $DTRAIN_CLUSTER_NAME may be left: namespaces, processes, state.
expect_nothing_left() {
  local left
  left=$(ip netns list | cut -d' ' -f1 | grep -E "^${DTRAIN_CLUSTER_NAME}-" | tr '\n' ' ')
  if [ -n "$left" ] || [ -e "/tmp/dtrain-cluster-$DTRAIN_CLUSTER_NAME" ]; then
    fail "$1: left behind: namespaces '$left', state $(ls -d /tmp/dtrain-cluster-"$DTRAIN_CLUSTER_NAME" 2>/dev/null)"
  else
    ok "$1: no namespace or state left"
  fi
}

# wait_bounded PID SECONDS: waits for the background job PID, killing it after SECONDS; sets
# job_rc to its exit status. The watchdog must not hold the test's output open once the job is
# done (CTest would wait for it).
wait_bounded() {
  ( sleep "$2"; kill -9 "$1" 2>/dev/null ) >/dev/null 2>&1 &
  local watchdog=$!
  wait "$1"
  job_rc=$?
  pkill -P $watchdog sleep 2>/dev/null
  kill $watchdog 2>/dev/null
  return 0
}

# seconds_since START: the time since START (from date +%s.%N), one decimal.
seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}'; }

finish() {
  [ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
  echo "all passed"
  exit 0
}
