# scripts/cluster up/down/status and its bad input: too many nodes, a rate tc cannot parse,
# `up` twice, no root, a failure half-way (rolled back); `down` leaves nothing behind.
source "$(dirname "$0")/lib.bash"
require_cluster dtcl

# expect_fail PATTERN ARGS...: scripts/cluster ARGS exits non-zero with PATTERN on stderr.
expect_fail() {
  local pattern=$1 err rc
  shift
  err=$("$CLUSTER" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 0 ] && grep -qE -- "$pattern" <<<"$err"; then
    ok "cluster $* -> exit $rc: $(head -1 <<<"$err")"
  else
    fail "cluster $* (exit $rc), stderr does not match '$pattern': $err"
  fi
}

expect_fail "outside 1\.\.250" up --nodes 251 --ranks-per-node 2
expect_fail "--nodes N is required" up --ranks-per-node 2
expect_fail "not a rate tc understands" up --nodes 2 --ranks-per-node 2 --inter-node 1gbits
expect_fail "ranks-per-node must be" up --nodes 2 --ranks-per-node 0
expect_fail "no cluster is up" run -- --help
expect_nothing_left "after rejected input"
if command -v setpriv >/dev/null; then
  # A copy the unprivileged user can read: the checkout itself may sit in a root-only directory.
  nobody_dir=$(mktemp -d)
  chmod 755 "$nobody_dir"
  install -m 755 "$CLUSTER" "$nobody_dir/cluster"
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$nobody_dir/cluster" up --nodes 2 \
    --ranks-per-node 2 2>&1)
  rc=$?
  rm -rf "$nobody_dir"
  if [ $rc -ne 0 ] && grep -q "needs root" <<<"$err"; then ok "without root: $err"; else
    fail "without root: exit $rc: $err"; fi
fi

# A rate that looks right but tc refuses (zero) fails inside tc, half-way
# through `up`: everything built so far must be rolled back.
expect_fail "rolling back" up --nodes 3 --ranks-per-node 1 --inter-node 0bit
expect_nothing_left "after a failed up"

out=$("$CLUSTER" up --nodes 3 --ranks-per-node 2 --inter-node 1gbit 2>&1) && ok "up: $out" ||
  fail "up: $out"
expect_fail "already up" up --nodes 2 --ranks-per-node 2
status=$("$CLUSTER" status 2>&1)
grep -q "node2 *10.213.0.3 *ranks 4..5" <<<"$status" && ok "status lists node2" ||
  fail "status: $status"
[ "$(ip -n "${DTRAIN_CLUSTER_NAME}-node0" -o addr show dev cl0 | grep -c '10.213.0.1/24')" = 1 ] &&
  ok "node0 has 10.213.0.1/24" || fail "node0 address"
tc -n "${DTRAIN_CLUSTER_NAME}-node1" qdisc show dev cl0 | grep -q "tbf.*rate 1Gbit" &&
  ok "node1 uplink shaped to 1Gbit" || fail "node1 uplink not shaped"
ip -o addr show | grep -q "10\.213\.0\." && fail "the root namespace got a cluster address" ||
  ok "root namespace untouched"
"$CLUSTER" cut node1 >/dev/null && "$CLUSTER" status | grep -q "node1.*CUT" && ok "cut node1" ||
  fail "cut node1"
expect_fail "not a node of this cluster" cut node7
"$CLUSTER" heal node1 >/dev/null && ok "heal node1" || fail "heal node1"
# A process left inside a node (a crashed job's orphan) must not survive `down`.
ip netns exec "${DTRAIN_CLUSTER_NAME}-node1" sleep 300 &
disown
sleep 0.2
out=$("$CLUSTER" down 2>&1) && ok "down: $(tail -1 <<<"$out")" || fail "down: $out"
expect_nothing_left "after down"
out=$("$CLUSTER" down 2>&1) && grep -q "nothing to take down" <<<"$out" && ok "down twice: $out" ||
  fail "second down: $out"
finish
