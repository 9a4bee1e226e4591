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

}  // namespace
}  // namespace dtrain::plan
