// Where groups land on nodes (Megatron's rank order and its permutations) and which link and
// algorithm a collective on a placed group is charged for.
#include <gtest/gtest.h>

#include "dtrain/cost/placement.h"

namespace dtrain::plan {
namespace {

TEST(Placement, MegatronOrderExample) {
  // dp=2, tp=2, pp=2 on nodes of 4 GPUs, rank = tp + 2 * (dp + 2 * pp): TP {0,1} in node 0;
  // DP {0,2} in node 0; PP {0,4} across nodes 0 and 1.
  const AxisSizes s{2, 2, 2};
  const RankOrder order{};
  const GroupPlacement tp = place_group(Axis::tp, s, order, 4);
  EXPECT_EQ(tp.stride, 1);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.ranks_per_node, 2);
  const GroupPlacement dp = place_group(Axis::dp, s, order, 4);
  EXPECT_EQ(dp.stride, 2);
  EXPECT_FALSE(dp.crosses_nodes());
  const GroupPlacement pp = place_group(Axis::pp, s, order, 4);
  EXPECT_EQ(pp.stride, 4);
  EXPECT_EQ(pp.nodes, 2);
  EXPECT_EQ(pp.ranks_per_node, 1);
}

TEST(Placement, TpSixteenCrossesEightGpuNodes) {
  const GroupPlacement tp = place_group(Axis::tp, {4, 16, 1}, RankOrder{}, 8);
  EXPECT_EQ(tp.nodes, 2);
  EXPECT_EQ(tp.ranks_per_node, 8);
  // DP with tp=8 innermost: one DP rank per node.
  const GroupPlacement dp = place_group(Axis::dp, {8, 8, 1}, RankOrder{}, 8);
  EXPECT_EQ(dp.nodes, 8);
  EXPECT_EQ(dp.ranks_per_node, 1);
}

TEST(Placement, OrderStrings) {
  const auto o = parse_rank_order("pp-dp-tp");
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(to_string(*o), "pp-dp-tp");
  EXPECT_EQ(to_string(RankOrder{}), "tp-dp-pp");
  for (const char* bad : {"", "tp-dp", "tp-dp-dp", "tp-dp-pp-tp", "tp-xp-pp", "tp--pp"}) {
    EXPECT_FALSE(parse_rank_order(bad).has_value()) << bad;
  }
  // PP innermost puts the TP group across nodes, one rank per node.
  const GroupPlacement tp = place_group(Axis::tp, {1, 8, 8}, *o, 8);
  EXPECT_EQ(tp.stride, 8);
  EXPECT_EQ(tp.nodes, 8);
}

TEST(Placement, LinkAndAlgorithmOfAPlacedCollective) {
  const Cluster c = parse_cluster("8x8xA100");
  const CollectiveCall call{comm::CollectiveOp::all_reduce, 1e9, 1, "gradients"};
  // Inside a node: the NVLink ring.
  const GroupPlacement in_node = place_group(Axis::dp, {8, 1, 8}, RankOrder{}, 8);
  const PlacedCost a = placed_collective_cost(call, in_node, c);
  EXPECT_FALSE(a.inter_node);
  EXPECT_DOUBLE_EQ(a.time_s, collective_cost(call, comm::Algorithm::ring, 8, c.intra_node).time_s);
  // All 64 GPUs: 8 per node, so the hierarchical form beats a flat InfiniBand ring.
  const GroupPlacement all = place_group(Axis::dp, {64, 1, 1}, RankOrder{}, 8);
  const PlacedCost b = placed_collective_cost(call, all, c);
  EXPECT_TRUE(b.inter_node);
  EXPECT_TRUE(b.hierarchical);
  EXPECT_DOUBLE_EQ(b.time_s,
                   hierarchical_all_reduce_cost(1e9, 8, 8, c.intra_node, c.inter_node).time_s);
  EXPECT_LT(b.time_s, collective_cost(call, comm::Algorithm::ring, 64, c.inter_node).time_s);
  // One rank per node: only the flat ring over InfiniBand.
  const GroupPlacement rails = place_group(Axis::dp, {8, 8, 1}, RankOrder{}, 8);
  const PlacedCost d = placed_collective_cost(call, rails, c);
  EXPECT_FALSE(d.hierarchical);
  EXPECT_DOUBLE_EQ(d.time_s, collective_cost(call, comm::Algorithm::ring, 8, c.inter_node).time_s);
  // A single rank sends nothing.
  EXPECT_EQ(
      placed_collective_cost(call, place_group(Axis::dp, {1, 8, 8}, RankOrder{}, 8), c).time_s, 0);
}

TEST(Placement, PipelineSendUsesTheSlowestBoundary) {
  const Cluster c = parse_cluster("2x8xH100");
  const GroupPlacement pp = place_group(Axis::pp, {1, 8, 2}, RankOrder{}, 8);
  const PlacedCost send = placed_send_cost(1e6, pp, c);
  EXPECT_TRUE(send.inter_node);
  EXPECT_DOUBLE_EQ(send.time_s,
                   c.inter_node.latency_us * 1e-6 + 1e6 / c.inter_node.bandwidth_bytes_per_s);
}

}  // namespace
}  // namespace dtrain::plan
