# A node that dies silently (its link cut: no FIN, no RST) ends a running job within a bounded
# time with an error naming the node and its ranks, and leaves no process on any node; a short
# link flap does not.
source "$(dirname "$0")/lib.bash"
require_cluster dtcf
require_mpi
log=$(mktemp)
trap '"$CLUSTER" down >/dev/null 2>&1; rm -f "$log"' EXIT
"$CLUSTER" up --nodes 2 --ranks-per-node 2 >/dev/null || fail "cluster up"

# wait_for_ranks NODE: until NODE runs its two dtrain ranks (or 20 s).
wait_for_ranks() {
  for _ in $(seq 1 100); do
    [ "$(ip netns pids "${DTRAIN_CLUSTER_NAME}-$1" | xargs -r -n1 sh -c 'cat /proc/$0/comm' 2>/dev/null |
      grep -c '^dtrain$')" -ge 2 ] && return 0
    sleep 0.2
  done
  return 1
}

# 1. A 2 s flap inside the 6 s allowance: the job rides it out and finishes.
"$CLUSTER" run --bin "$DTRAIN" --lost-after 6 -- collectives --backend mpi --ranks 4 --size 1MiB \
  --trials 12 --trial-seconds 0.3 --timeout 30 >"$log" 2>&1 &
job=$!
wait_for_ranks node1 || fail "flap: node1's ranks never started"
sleep 0.5
"$CLUSTER" cut node1 >/dev/null
sleep 2
kill -0 $job 2>/dev/null && running=yes || running=no
"$CLUSTER" heal node1 >/dev/null
wait $job
rc=$?
[ $rc -eq 0 ] && [ $running = yes ] && grep -q "result verified" "$log" &&
  ok "a 2 s link flap in the middle of the job: it finished" ||
  { fail "flap: exit $rc, running during the cut: $running"; tail -20 "$log"; }

# 2. A dead node: cut for good in the middle of a long run.
"$CLUSTER" run --bin "$DTRAIN" --lost-after 6 -- collectives --backend mpi --ranks 4 --size 1MiB --trials 1000 \
  --trial-seconds 1 --timeout 60 >"$log" 2>&1 &
job=$!
wait_for_ranks node1 || fail "dead node: node1's ranks never started"
sleep 0.5
start=$(date +%s.%N)
"$CLUSTER" cut node1 >/dev/null
wait_bounded $job 60
rc=$job_rc
elapsed=$(seconds_since "$start")
if [ $rc -ne 0 ] && awk -v e="$elapsed" 'BEGIN{exit !(e < 30)}' &&
  grep -q "lost node1 (10.213.0.2, ranks 2..3)" "$log"; then
  ok "dead node1: the job ended in ${elapsed} s (exit $rc): $(grep 'lost node1' "$log")"
else
  fail "dead node1: exit $rc after ${elapsed} s"
  tail -20 "$log"
fi
left=""
for n in node0 node1; do left+=$(ip netns pids "${DTRAIN_CLUSTER_NAME}-$n" | tr '\n' ' '); done
[ -z "${left// /}" ] && ok "no process left on any node" || fail "processes left: $left"
"$CLUSTER" down >/dev/null
expect_nothing_left "after down"
finish
