// The all-to-all's formulas (cost/collective_cost.h, comm_model.h) on worked examples: steps and
// bytes per rank for equal blocks and per-peer counts, the shared window's segments, and the
// alpha-beta time the planner charges. tests/comm/all_to_all_test.cc holds the engine to them.
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"

namespace dtrain::plan {
namespace {

using comm::Algorithm;
using comm::CollectiveOp;

TEST(AllToAllCost, EqualBlocksSendEveryBlockButTheirOwn) {
  // S = 4096 bytes on 4 ranks: blocks of 1024, three of them leave.
  const CollectiveTraffic p = all_to_all_traffic(Algorithm::pairwise, 4096, 4);
  EXPECT_EQ(p.steps, 3);
  EXPECT_DOUBLE_EQ(p.bytes_sent, 3072);
  EXPECT_DOUBLE_EQ(p.bytes_received, 3072);
  // Direct reads the three blocks between two barriers and writes nothing into the peers.
  const CollectiveTraffic d = all_to_all_traffic(Algorithm::direct, 4096, 4);
  EXPECT_EQ(d.steps, 2);
  EXPECT_DOUBLE_EQ(d.bytes_sent, 0);
  EXPECT_DOUBLE_EQ(d.bytes_received, 3072);
  // Both move the three blocks (docs/algorithms.md, "Bytes moved"): pairwise sends them, direct
  // reads them in place.
  EXPECT_DOUBLE_EQ(p.bytes_moved(), 3072);
  EXPECT_DOUBLE_EQ(d.bytes_read, 3072);
  EXPECT_DOUBLE_EQ(d.bytes_moved(), 3072);
  EXPECT_EQ(all_to_all_traffic(Algorithm::direct, 4096, 4, 3).steps, 6);
  // collective_traffic gives the same under the op's name; one rank or no bytes move nothing.
  const CollectiveTraffic via =
      collective_traffic(CollectiveOp::all_to_all, Algorithm::pairwise, 4096, 4, 2);
  EXPECT_EQ(via.steps, 3);
  EXPECT_DOUBLE_EQ(via.bytes_sent, 3072);
  EXPECT_EQ(all_to_all_traffic(Algorithm::pairwise, 4096, 1).steps, 0);
  EXPECT_EQ(all_to_all_traffic(Algorithm::pairwise, 0, 4).steps, 0);
  EXPECT_THROW(all_to_all_traffic(Algorithm::ring, 4096, 4), Error);
  EXPECT_THROW(collective_traffic(CollectiveOp::all_reduce, Algorithm::pairwise, 4096, 4), Error);
}

TEST(AllToAllCost, PerPeerCountsSumWhatLeavesAndArrives) {
  // Rank 1 of 3 sends 10 to rank 0, 99 to itself (local), 0 to rank 2; receives 4 and 6.
  const std::vector<double> sent = {10, 99, 0}, received = {4, 99, 6};
  const CollectiveTraffic p = all_to_all_v_traffic(Algorithm::pairwise, sent, received, 1);
  EXPECT_EQ(p.steps, 2);  // empty parts still travel: N-1 steps whatever the counts
  EXPECT_DOUBLE_EQ(p.bytes_sent, 10);
  EXPECT_DOUBLE_EQ(p.bytes_received, 10);
  const CollectiveTraffic d = all_to_all_v_traffic(Algorithm::direct, sent, received, 1);
  EXPECT_EQ(d.steps, 2);
  EXPECT_DOUBLE_EQ(d.bytes_sent, 0);
  EXPECT_DOUBLE_EQ(d.bytes_received, 10);
  // A rank that sends and receives nothing still takes part in every step.
  const std::vector<double> none = {0, 0, 0};
  const CollectiveTraffic silent = all_to_all_v_traffic(Algorithm::pairwise, none, none, 0);
  EXPECT_EQ(silent.steps, 2);
  EXPECT_DOUBLE_EQ(silent.bytes_sent + silent.bytes_received, 0);
  EXPECT_EQ(all_to_all_v_traffic(Algorithm::direct, none, none, 0, 0).steps, 2);
  EXPECT_THROW(all_to_all_v_traffic(Algorithm::pairwise, sent, none, 3), Error);
  EXPECT_THROW(all_to_all_v_traffic(Algorithm::pairwise, sent, std::vector<double>{1}, 0), Error);
}

TEST(AllToAllCost, SharedWindowSegments) {
  // A 1 MiB slot on 4 ranks: a 64-byte header, then 4 pieces of (1 MiB - 64) / 4 / 4 = 65532
  // floats each.
  const int64_t slot = 1 << 20;
  EXPECT_EQ(comm::direct_all_to_all_piece(slot, 4, 4), 65532);
  EXPECT_EQ(direct_all_to_all_segments(65532, 4, slot, 4), 1);
  EXPECT_EQ(direct_all_to_all_segments(65533, 4, slot, 4), 2);
  EXPECT_EQ(direct_all_to_all_segments(0, 4, slot, 4), 1);     // every part empty: one segment
  EXPECT_EQ(direct_all_to_all_segments(1 << 30, 4, 0, 4), 1);  // a shared address space
  EXPECT_EQ(direct_all_to_all_segments(100, 1, slot, 4), 0);
  // 16 ranks need a 128-byte header.
  EXPECT_EQ(comm::direct_all_to_all_header_bytes(16), 128);
}

TEST(AllToAllCost, AlphaBetaTime) {
  const Link link{"test", 100e9, 5};
  const double s = 64e6;
  const int n = 8;
  const CommCost c = collective_cost(CollectiveOp::all_to_all, Algorithm::pairwise, s, n, link);
  EXPECT_EQ(c.steps, n - 1);
  EXPECT_DOUBLE_EQ(c.time_s, 5e-6 * (n - 1) + (n - 1.0) / n * s / 100e9);
  // Direct moves what it reads.
  const CommCost d = collective_cost(CollectiveOp::all_to_all, Algorithm::direct, s, n, link);
  EXPECT_DOUBLE_EQ(d.time_s, 5e-6 * 2 + (n - 1.0) / n * s / 100e9);
  EXPECT_DOUBLE_EQ(d.bytes_sent, c.bytes_sent);
  // all_to_all_v: the larger of the bytes sent and received.
  const std::vector<double> sent = {0, 1e6, 3e6}, received = {0, 2e6, 5e6};
  const CommCost v = all_to_all_v_cost(Algorithm::pairwise, sent, received, 0, link);
  EXPECT_EQ(v.steps, 2);
  EXPECT_DOUBLE_EQ(v.bytes_sent, 4e6);
  EXPECT_DOUBLE_EQ(v.time_s, 5e-6 * 2 + 7e6 / 100e9);
  // nccl-tests' bus factor for alltoall: (N-1)/N.
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::all_to_all, n), (n - 1.0) / n);
}

}  // namespace
}  // namespace dtrain::plan
