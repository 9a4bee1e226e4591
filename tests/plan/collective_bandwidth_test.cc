// The collectives calculator (plan/collective_cost.h, `dtrain busbw`): nccl-tests' algbw and
// busbw (its doc/PERFORMANCE.md: algbw = S / t; busbw = algbw x 2(n-1)/n for all_reduce,
// (n-1)/n for reduce_scatter, all_gather and alltoall, 1 for broadcast and reduce), and the
// ideal ring time, whose busbw is the link's bandwidth.
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/plan/collective_cost.h"

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
