// The collectives calculator (cost/collective_cost.h, `dtrain busbw`): nccl-tests' algbw and
// busbw (its doc/PERFORMANCE.md: algbw = S / t; busbw = algbw x 2(n-1)/n for all_reduce,
// (n-1)/n for reduce_scatter, all_gather and alltoall, 1 for broadcast and reduce), and the
// ideal ring time, whose busbw is the link's bandwidth.
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/collective_cost.h"

namespace dtrain::plan {
namespace {

TEST(CollectiveBandwidth, FactorsAreNcclTestsDefinitions) {
  // n = 8: 2 x 7/8 = 1.75 for all_reduce, 7/8 = 0.875 for the gathers, scatters and alltoall.
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::reduce_scatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_gather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::alltoall, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::reduce, 8), 1.0);
  // The engine's ops share the same factors.
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(comm::CollectiveOp::all_reduce, 8),
                   bus_bandwidth_factor(NcclTestOp::all_reduce, 8));
  // 1 GiB all-reduced on 8 ranks in 6 ms: algbw = 2^30 / 0.006 = 178.96 GB/s, busbw x 1.75.
  const CollectiveBandwidth b = measured_bandwidth(NcclTestOp::all_reduce, 1 << 30, 8, 0.006);
  EXPECT_NEAR(b.algbw, 178.956970e9, 1e3);
  EXPECT_DOUBLE_EQ(b.busbw, b.algbw * 1.75);
}

TEST(CollectiveBandwidth, IdealRingRunsAtTheLinkBandwidth) {
  for (NcclTestOp op : {NcclTestOp::all_reduce, NcclTestOp::reduce_scatter, NcclTestOp::all_gather,
                        NcclTestOp::broadcast, NcclTestOp::reduce, NcclTestOp::alltoall}) {
    SCOPED_TRACE(std::string(name(op)));
    EXPECT_EQ(parse_nccl_test_op(name(op)), op);
    // No latency: busbw of the ideal time is the link's 450 GB/s, for any rank count.
    for (int n : {2, 8, 64}) {
      const double t = ideal_ring_seconds(op, 1e9, n, 450e9, 0);
      EXPECT_NEAR(measured_bandwidth(op, 1e9, n, t).busbw, 450e9, 1e-3);
    }
    // Latency adds one term per ring step: 2(n-1) for all_reduce, n-1 for the others.
    const double steps = op == NcclTestOp::all_reduce ? 14 : 7;
    EXPECT_NEAR(
        ideal_ring_seconds(op, 1e9, 8, 450e9, 1e-6) - ideal_ring_seconds(op, 1e9, 8, 450e9, 0),
        steps * 1e-6, 1e-12);
  }
  EXPECT_FALSE(parse_nccl_test_op("allreduce").has_value());
  EXPECT_THROW(measured_bandwidth(NcclTestOp::all_reduce, 1e9, 8, 0), Error);
}

// nccl-tests' pull request #239 (in-network reduction): under NCCL_ALGO=NVLS or NVLSTREE the
// all-reduce's bus factor is (n-1)/(n+1) instead of 2(n-1)/n. By hand: 8 ranks give 7/9 =
// 0.7778 (against 14/8 = 1.75); 2 ranks 1/3; 1 rank 0. The same 1 GiB in 6 ms: algbw 178.957
// GB/s, busbw 178.957 x 7/9 = 139.189 GB/s. Only all_reduce changes, and only under NVLS.
// An all-to-all is priced by its own traffic, not as a ring: on 2 nodes of 8, S = 1.6e9 bytes per
// rank is 16 blocks of 1e8; a rank sends 7 to its node (NVLink) and 8 across (InfiniBand), both
// at once. 8e8 B / 50 GB/s = 16 ms across against 7e8 B / 450 GB/s = 1.56 ms inside: 16 ms plus 8
// latencies of 5 us. A ring over InfiniBand would take 15/16 x 1.6e9 / 50e9 = 30 ms.
TEST(CollectiveBandwidth, IdealAllToAllSendsOnlyTheOtherNodesBlocksAcross) {
  const double s = 1.6e9;
  const AllToAllLinkTraffic t = all_to_all_link_traffic(s, 16, 8, 3);
  EXPECT_EQ(t.intra_node_peers, 7);
  EXPECT_EQ(t.inter_node_peers, 8);
  EXPECT_DOUBLE_EQ(t.intra_node_bytes, 7e8);
  EXPECT_DOUBLE_EQ(t.inter_node_bytes, 8e8);
  const IdealAllToAll a = ideal_all_to_all(s, 16, 8, 450e9, 1e-6, 50e9, 5e-6);
  EXPECT_TRUE(a.inter_node_bound);
  EXPECT_DOUBLE_EQ(a.seconds, 8 * 5e-6 + 8e8 / 50e9);
  EXPECT_LT(a.seconds, ideal_ring_seconds(NcclTestOp::alltoall, s, 16, 50e9, 5e-6) * 0.6);
  // Inside one node it is the ring's time on NVLink: (N-1)/N x S / bandwidth + (N-1) latencies.
  EXPECT_NEAR(ideal_all_to_all(s, 8, 8, 450e9, 1e-6, 50e9, 5e-6).seconds,
              ideal_ring_seconds(NcclTestOp::alltoall, s, 8, 450e9, 1e-6), 1e-15);
  // A partial last node (12 ranks on nodes of 8: 8 + 4): its ranks send 8 of 12 blocks across,
  // more than the full node's 4, and set the time.
  const IdealAllToAll partial = ideal_all_to_all(1.2e9, 12, 8, 450e9, 0, 50e9, 0);
  EXPECT_EQ(partial.slowest.inter_node_peers, 8);
  EXPECT_DOUBLE_EQ(partial.seconds, 8e8 / 50e9);
  EXPECT_EQ(all_to_all_link_traffic(1.2e9, 12, 8, 0).inter_node_peers, 4);
  EXPECT_EQ(ideal_all_to_all(s, 1, 8, 450e9, 1e-6, 50e9, 5e-6).seconds, 0);
}

TEST(CollectiveBandwidth, NvlsAllReduceFactorOfNcclTestsPullRequest239) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 8, NcclAlgo::nvls), 7.0 / 9);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 8, NcclAlgo::nvls_tree), 7.0 / 9);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 2, NcclAlgo::nvls), 1.0 / 3);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 1, NcclAlgo::nvls), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 8, NcclAlgo::ring), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_reduce, 8, NcclAlgo::tree), 1.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::all_gather, 8, NcclAlgo::nvls), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(NcclTestOp::reduce_scatter, 8, NcclAlgo::nvls_tree),
                   7.0 / 8);
  const CollectiveBandwidth b =
      measured_bandwidth(NcclTestOp::all_reduce, 1 << 30, 8, 0.006, NcclAlgo::nvls);
  EXPECT_NEAR(b.algbw, 178.956970e9, 1e3);
  EXPECT_NEAR(b.busbw, 139.188754e9, 1e3);
  // NCCL_ALGO's spellings, any case, with or without separators.
  EXPECT_EQ(parse_nccl_algo("NVLS"), NcclAlgo::nvls);
  EXPECT_EQ(parse_nccl_algo("NVLSTree"), NcclAlgo::nvls_tree);
  EXPECT_EQ(parse_nccl_algo("nvls_tree"), NcclAlgo::nvls_tree);
  EXPECT_EQ(parse_nccl_algo("CollNetDirect"), NcclAlgo::collnet_direct);
  EXPECT_FALSE(parse_nccl_algo("nvlink").has_value());
  for (NcclAlgo a : {NcclAlgo::ring, NcclAlgo::tree, NcclAlgo::collnet_direct,
                     NcclAlgo::collnet_chain, NcclAlgo::nvls, NcclAlgo::nvls_tree, NcclAlgo::pat}) {
    EXPECT_EQ(parse_nccl_algo(name(a)), a);
  }
}

}  // namespace
}  // namespace dtrain::plan
