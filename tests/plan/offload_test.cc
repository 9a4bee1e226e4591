// DeepSpeed's offload estimators reproduced (plan/offload.h). The published output of
// estimate_zero3_model_states_mem_needs_all_live for t5-small on 1 node x 1 GPU ("Model with
// 60M total params, 16M largest layer params"; DeepSpeed prints GiB as "GB", 2 decimals):
//   per CPU | per GPU | options
//   1.52    | 0.06    | offload_param=cpu, offload_optimizer=cpu, zero_init=1 (and =0)
//   1.35    | 0.17    | offload_param=none, offload_optimizer=cpu, zero_init=1 (and =0)
//   0.09    | 1.08    | offload_param=none, offload_optimizer=none, zero_init=1
//   0.34    | 1.08    | offload_param=none, offload_optimizer=none, zero_init=0
// t5-small: 60,506,624 parameters; its largest module, the shared 32128 x 512 embedding,
// 16,449,536.
#include <cmath>

#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/plan/memory_model.h"
#include "dtrain/plan/offload.h"

namespace dtrain::plan {
namespace {

double gib(double bytes) {
  return std::round(bytes / (1024.0 * 1024 * 1024) * 100) / 100;  // DeepSpeed's "%.2fGB"
}

TEST(Offload, DeepSpeedsZero3EstimatesForT5Small) {
  const std::vector<OffloadEstimate> rows =
      deepspeed_offload_estimates(60'506'624, 16'449'536, 1, 1);
  ASSERT_EQ(rows.size(), 8u);
  const double published[6][2] = {{1.52, 0.06}, {1.52, 0.06}, {1.35, 0.17},
                                  {1.35, 0.17}, {0.09, 1.08}, {0.34, 1.08}};
  for (int i = 0; i < 6; ++i) {
    const OffloadEstimate& r = rows[static_cast<size_t>(2 + i)];
    SCOPED_TRACE(r.options);
    EXPECT_EQ(r.zero_stage, 3);
    EXPECT_DOUBLE_EQ(gib(r.cpu_bytes), published[i][0]);
    EXPECT_DOUBLE_EQ(gib(r.gpu_bytes), published[i][1]);
  }
  EXPECT_EQ(rows[2].options, "offload_param=cpu, offload_optimizer=cpu, zero_init=1");
}

// ZeRO-2's rows, derived from the estimator's terms: with the optimizer on CPU a GPU keeps the
// fp16 weights (2 Psi) and a node max(4 x GPUs, 16) Psi x 1.5; without offload 4 Psi + 16 Psi/N
// per GPU. 8 GPUs on 1 node, Psi = 1e9: 2 GB; 48 GB; 4 + 2 = 6 GB; 48 GB.
TEST(Offload, DeepSpeedsZero2EstimatesAreItsTerms) {
  const std::vector<OffloadEstimate> rows = deepspeed_offload_estimates(1'000'000'000, 1000, 8, 1);
  EXPECT_EQ(rows[0].options, "offload_optimizer=cpu");
  EXPECT_DOUBLE_EQ(rows[0].gpu_bytes, 2e9);
  EXPECT_DOUBLE_EQ(rows[0].cpu_bytes, 48e9);
  EXPECT_DOUBLE_EQ(rows[1].gpu_bytes, 6e9);
  EXPECT_DOUBLE_EQ(rows[1].cpu_bytes, 48e9);
  // Two nodes halve ZeRO-3's per-node CPU share (18 / nodes).
  const auto two = deepspeed_offload_estimates(1'000'000'000, 1000, 8, 2);
  EXPECT_DOUBLE_EQ(two[2].cpu_bytes, 1e9 * 9 * 1.5);
  EXPECT_THROW(deepspeed_offload_estimates(10, 20, 1, 1), Error);
}

// ZeRO-Offload's own convention (Ren et al. 2021): of mixed-precision Adam's 16 bytes per
// parameter the GPU keeps the fp16 weights (2) and the CPU the rest (14), split over the
// data-parallel ranks. Its abstract's "over 13 billion parameters on a single GPU" (a 32 GB
// V100) sits under the states-only bound 32 GB / 2 B = 16B, activations taking the rest.
TEST(Offload, ZeroOffloadPapersSplitOfTheSixteenBytes) {
  const int64_t psi = 13'000'000'000;
  const OffloadEstimate one = zero_offload_paper_estimate(psi, 1, 1);
  EXPECT_DOUBLE_EQ(one.gpu_bytes, 2.0 * static_cast<double>(psi));
  EXPECT_DOUBLE_EQ(one.cpu_bytes + one.gpu_bytes,
                   static_cast<double>(model_state_bytes(psi, 1, 0, kMixedPrecisionAdam).total()));
  EXPECT_LE(one.gpu_bytes, 32e9);
  EXPECT_GT(zero_offload_paper_estimate(16'000'000'001, 1, 1).gpu_bytes, 32e9);
  // 4 nodes x 8 GPUs: each rank's CPU share is 14 Psi / 32, a node holds 8 of them; the GPU
  // still holds every fp16 weight (ZeRO-2 does not partition them).
  const OffloadEstimate many = zero_offload_paper_estimate(psi, 8, 4);
  EXPECT_DOUBLE_EQ(many.gpu_bytes, one.gpu_bytes);
  EXPECT_DOUBLE_EQ(many.cpu_bytes, 14.0 * static_cast<double>(psi) / 32 * 8);
  EXPECT_THROW(zero_offload_paper_estimate(0, 1, 1), Error);
}

}  // namespace
}  // namespace dtrain::plan
