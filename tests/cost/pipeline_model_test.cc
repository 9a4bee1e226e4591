// The interleaved schedule's warm-up and in-flight closed forms on worked examples: P | M gives
// Megatron's (P - s - 1) * 2 + (v - 1) * P, other M the groups of ceil(M / floor(M / P)).
// (tests/parallel/pipeline_checker_test.cc compares them with simulated schedules on a grid.)
#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/pipeline_model.h"

namespace dtrain::plan {
namespace {

TEST(PipelineModel, InterleavedGroupSize) {
  EXPECT_EQ(interleaved_group_size(4, 8), 4);   // P | M: groups of P
  EXPECT_EQ(interleaved_group_size(4, 6), 6);   // one group of 6
  EXPECT_EQ(interleaved_group_size(4, 10), 5);  // two groups of 5
  EXPECT_EQ(interleaved_group_size(4, 11), 6);  // 6 + 5, the larger first
  EXPECT_EQ(interleaved_group_size(4, 3), 3);   // M < P: one group of M
  EXPECT_THROW(interleaved_group_size(4, 0), Error);
}

TEST(PipelineModel, InterleavedWarmupAndPeak) {
  // P = 4, M = 8, v = 2 (Megatron's case): stage 0 warms up 3*2 + 1*4 = 10 forwards.
  EXPECT_EQ(interleaved_warmup_forwards(4, 8, 2, 0), 10);
  EXPECT_DOUBLE_EQ(peak_inflight_microbatches(ScheduleKind::interleaved, 4, 8, 2, 0), 5.5);
  // P = 4, M = 6, v = 2: one group of 6, so the last stage warms up (v - 1) * 6 = 6 forwards and
  // holds 7 chunks' activations, 3.5 micro-batches (the P-based form said 2.5).
  EXPECT_EQ(interleaved_warmup_forwards(4, 6, 2, 3), 6);
  EXPECT_DOUBLE_EQ(peak_inflight_microbatches(ScheduleKind::interleaved, 4, 6, 2, 3), 3.5);
  // M < P: the warm-up still spaces chunks P apart, capped at v * M.
  EXPECT_EQ(interleaved_warmup_forwards(4, 3, 2, 3), 4);
  EXPECT_EQ(interleaved_warmup_forwards(4, 3, 2, 0), 6);
  EXPECT_THROW(interleaved_warmup_forwards(4, 8, 2, 4), Error);
}

}  // namespace
}  // namespace dtrain::plan
