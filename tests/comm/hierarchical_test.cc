// The hierarchical all-reduce against closed-form results, and every rank's bytes per link class
// (split from the per-peer counters by NodeTopology) against cost/link_traffic.h, byte for byte,
// beside the flat ring on the same ranks: N = 8 as 8x1, 4x2, 2x4, 1x8 nodes x ranks per node.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/hierarchical.h"
#include "dtrain/comm/topology.h"
#include "dtrain/cost/link_traffic.h"
#include "harness.h"

namespace dtrain::comm {
namespace {

struct Shape {
  int world;
  int ranks_per_node;
};

// Rank r's element i; sums over N ranks are ((i % 7) + 1) * N(N+1)/2, exact in any order.
float value(int rank, int64_t i) {
  return static_cast<float>(((i % 7) + 1) * (rank + 1));
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& p) {
  return str("N", p.param.world, "_G", p.param.ranks_per_node);
}

class HierarchicalTest : public ::testing::TestWithParam<Shape> {};

TEST_P(HierarchicalTest, ResultsAndLinkBytesMatchTheFormula) {
  const Shape shape = GetParam();
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1009}, int64_t{1} << 16}) {
    testing::run_group(shape.world, [&](Communicator& comm) {
      const int n = comm.size(), r = comm.rank();
      const NodeTopology topology(comm.world_size(), shape.ranks_per_node);
      const int nodes = n / shape.ranks_per_node;
      NodeGroups groups = make_node_groups(comm, topology);

      std::vector<float> data(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) data[i] = value(r, i);
      const LinkBytes before = groups.link_bytes_sent(topology);
      const Traffic t = hierarchical_all_reduce(groups, data.data(), count, ReduceOp::sum);
      const LinkBytes hier = groups.link_bytes_sent(topology) - before;
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(data[i], static_cast<float>(((i % 7) + 1) * n * (n + 1) / 2))
            << "element " << i << " of " << count << " on rank " << r;
      }
      const plan::LinkTraffic want =
          plan::hierarchical_all_reduce_link_traffic(count, 4, shape.ranks_per_node, nodes, r);
      EXPECT_EQ(t.steps, want.steps) << "rank " << r << " count " << count;
      EXPECT_EQ(hier.intra_node, want.intra_node_bytes) << "rank " << r << " count " << count;
      EXPECT_EQ(hier.inter_node, want.inter_node_bytes) << "rank " << r << " count " << count;
      EXPECT_EQ(t.bytes_sent, want.total_bytes());

      // The flat ring on the same ranks, through the same counters.
      const LinkBytes flat_before = link_bytes_sent(comm, topology);
      const Traffic f = all_reduce(comm, data.data(), count, ReduceOp::sum, Algorithm::ring);
      const LinkBytes flat = link_bytes_sent(comm, topology) - flat_before;
      const plan::LinkTraffic flat_want =
          plan::flat_ring_all_reduce_link_traffic(count, 4, shape.ranks_per_node, nodes, r);
      EXPECT_EQ(f.steps, flat_want.steps);
      EXPECT_EQ(flat.intra_node, flat_want.intra_node_bytes) << "rank " << r << " count " << count;
      EXPECT_EQ(flat.inter_node, flat_want.inter_node_bytes) << "rank " << r << " count " << count;
    });
  }
}

TEST_P(HierarchicalTest, AverageAndMaxAreIdenticalOnEveryRank) {
  const Shape shape = GetParam();
  testing::run_group(shape.world, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const NodeTopology topology(comm.world_size(), shape.ranks_per_node);
    const int64_t count = 1001;
    std::vector<float> avg(count), max(count);
    for (int64_t i = 0; i < count; ++i) avg[i] = max[i] = value(r, i);
    hierarchical_all_reduce(comm, topology, avg.data(), count, ReduceOp::avg);
    hierarchical_all_reduce(comm, topology, max.data(), count, ReduceOp::max);
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_FLOAT_EQ(avg[i], static_cast<float>((i % 7) + 1) * static_cast<float>(n + 1) / 2);
      ASSERT_EQ(max[i], value(n - 1, i));
    }
    // Every rank holds the same bits: the all-gather spreads one scaled shard per rank.
    std::vector<float> first(count);
    if (r == 0) first = avg;
    broadcast(comm, first.data(), count, 0);
    ASSERT_EQ(first, avg) << "rank " << r;
  });
}

TEST(Hierarchical, RanksSpreadUnevenlyOverNodesAreRejected) {
  testing::run_group(3, [&](Communicator& comm) {
    if (comm.world_size() % 2 != 0) return;  // threads: a world of 3 has no 2-rank nodes
    const NodeTopology topology(comm.world_size(), 2);
    EXPECT_THROW(make_node_groups(comm, topology), Error);
  });
}

TEST(Hierarchical, IntegerAverageIsRejected) {
  testing::run_group(2, [&](Communicator& comm) {
    const NodeTopology topology(comm.world_size(), 1);
    NodeGroups groups = make_node_groups(comm, topology);
    int64_t x = 1;
    EXPECT_THROW(hierarchical_all_reduce(groups, &x, 1, ReduceOp::avg), Error);
  });
}

// The inter-node bytes the hierarchy saves: one node's ranks together send 2(M-1)/M S across
// nodes, where the flat ring's last local rank alone sends 2(N-1)/N S.
TEST(HierarchicalFormula, InterNodeBytesPerNode) {
  const int64_t count = 1 << 20;  // divisible by every N below
  for (int g : {2, 4}) {
    const int m = 8 / g;
    int64_t hier = 0, flat = 0;
    for (int local = 0; local < g; ++local) {
      hier += plan::hierarchical_all_reduce_link_traffic(count, 4, g, m, local).inter_node_bytes;
      flat += plan::flat_ring_all_reduce_link_traffic(count, 4, g, m, local).inter_node_bytes;
    }
    EXPECT_EQ(hier, 2 * (m - 1) * count * 4 / m) << g;
    EXPECT_EQ(flat, 2 * 7 * count * 4 / 8) << g;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, HierarchicalTest,
                         ::testing::Values(Shape{8, 1}, Shape{8, 2}, Shape{8, 4}, Shape{8, 8},
                                           Shape{4, 2}),
                         shape_name);

}  // namespace
}  // namespace dtrain::comm
