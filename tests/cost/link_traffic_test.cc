// cost/link_traffic.h against closed forms, and against the time model's hierarchical_cost
// (comm_model.h), whose bytes per phase must be the same ones.
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/link_traffic.h"

namespace dtrain::plan {
namespace {

TEST(LinkTraffic, FlatRingCrossesNodesOnlyFromTheLastLocalRank) {
  const int64_t count = 1 << 20, s = count * 4;  // 8 ranks as 2 nodes x 4
  for (int r = 0; r < 8; ++r) {
    const LinkTraffic t = flat_ring_all_reduce_link_traffic(count, 4, 4, 2, r);
    EXPECT_EQ(t.steps, 14);
    EXPECT_EQ(t.total_bytes(), 2 * 7 * s / 8);
    EXPECT_EQ(t.inter_node_bytes, r % 4 == 3 ? 2 * 7 * s / 8 : 0) << r;
  }
  // One node: nothing crosses; one rank per node: everything does.
  EXPECT_EQ(flat_ring_all_reduce_link_traffic(count, 4, 8, 1, 7).inter_node_bytes, 0);
  EXPECT_EQ(flat_ring_all_reduce_link_traffic(count, 4, 1, 8, 0).intra_node_bytes, 0);
}

TEST(LinkTraffic, HierarchicalMatchesTheTimeModelsPhases) {
  const Link intra{"intra", 100e9, 1}, inter{"inter", 10e9, 5};
  for (int g : {1, 2, 4, 8}) {
    const int m = 8 / g;
    const int64_t count = 1 << 20;
    const double s = static_cast<double>(count) * 4;
    const HierarchicalCost cost = hierarchical_all_reduce_cost(s, g, m, intra, inter);
    for (int r = 0; r < 8; ++r) {
      const LinkTraffic t = hierarchical_all_reduce_link_traffic(count, 4, g, m, r);
      EXPECT_EQ(t.intra_node_bytes, cost.intra_first.bytes_sent + cost.intra_last.bytes_sent) << g;
      EXPECT_EQ(t.inter_node_bytes, cost.inter.bytes_sent) << g;
      EXPECT_EQ(t.steps, cost.intra_first.steps + cost.inter.steps + cost.intra_last.steps) << g;
    }
  }
}

TEST(LinkTraffic, UnevenChunksAreCountedPerElement) {
  // 7 elements over 2 nodes x 2: node shards of 4 and 3 elements; rank 0's shard (4) splits
  // 2 + 2 across nodes, rank 1's (3) splits 2 + 1.
  EXPECT_EQ(hierarchical_all_reduce_link_traffic(7, 4, 2, 2, 0).inter_node_bytes, (8 - 2 - 2) * 4);
  EXPECT_EQ(hierarchical_all_reduce_link_traffic(7, 4, 2, 2, 1).inter_node_bytes, (6 - 2 - 1) * 4);
  EXPECT_EQ(hierarchical_all_reduce_link_traffic(7, 4, 2, 2, 0).intra_node_bytes, (14 - 4 - 3) * 4);
  EXPECT_THROW(hierarchical_all_reduce_link_traffic(7, 4, 2, 2, 4), Error);
}

}  // namespace
}  // namespace dtrain::plan
