// DeepSpeed's offload estimators reproduced (cost/offload.h). The published output of
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
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/offload.h"

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

// DeepSpeed's ZeRO-2 estimator as its current code computes the no-offload row (2 Psi +
// int(18 Psi / GPUs)) beside its docs' form (4 Psi + 16 Psi / GPUs), derived by hand.
// The docs' own example, t5-3b's 2851M parameters on 1 node x 8 GPUs, prints 15.93 GB (GiB)
// per GPU without offload: 4 x 2851e6 + 16 x 2851e6 / 8 = 11,404,000,000 + 5,702,000,000 =
// 17,106,000,000 B = 15.93 GiB. The code gives 2 x 2851e6 + int(18 x 2851e6 / 8) =
// 5,702,000,000 + 6,414,750,000 = 12,116,750,000 B = 11.28 GiB. Both print 127.45 GB per
// CPU (2851e6 x 4 x 8 x 1.5 B) and the offload row's 5.31 GB per GPU (2 x 2851e6 B).
TEST(Offload, DeepSpeedsZero2CodeBesideItsDocs) {
  const std::vector<OffloadEstimate> rows = deepspeed_zero2_code_estimates(2'851'000'000, 8, 1);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].offload_optimizer);
  EXPECT_DOUBLE_EQ(rows[0].gpu_bytes, 5'702'000'000);
  EXPECT_DOUBLE_EQ(gib(rows[0].gpu_bytes), 5.31);
  EXPECT_DOUBLE_EQ(rows[0].cpu_bytes, 2851e6 * 32 * 1.5);  // max(4 x 8 GPUs, 16) = 32, x 1.5
  EXPECT_FALSE(rows[1].offload_optimizer);
  EXPECT_EQ(rows[1].options, "offload_optimizer=none, code: 2 Psi + int(18 Psi / GPUs)");
  EXPECT_DOUBLE_EQ(rows[1].gpu_bytes, 12'116'750'000);
  EXPECT_DOUBLE_EQ(gib(rows[1].gpu_bytes), 11.28);
  EXPECT_EQ(rows[2].options, "offload_optimizer=none, docs: 4 Psi + 16 Psi / GPUs");
  EXPECT_DOUBLE_EQ(rows[2].gpu_bytes, 17'106'000'000);
  EXPECT_DOUBLE_EQ(gib(rows[2].gpu_bytes), 15.93);
  for (const OffloadEstimate& r : rows) EXPECT_DOUBLE_EQ(gib(r.cpu_bytes), 127.45);
  // The docs' form is the default convention's ZeRO-2 row.
  EXPECT_DOUBLE_EQ(rows[2].gpu_bytes,
                   deepspeed_offload_estimates(2'851'000'000, 1000, 8, 1)[1].gpu_bytes);
  // int() truncates: Psi = 1001 on 8 GPUs, 18 x 1001 / 8 = 2252.25 -> 2252; 2002 + 2252 = 4254
  // (the docs: 4004 + 2002 = 6006). On 2 nodes x 8 the CPU row stays per node (4 x 8 x Psi).
  const std::vector<OffloadEstimate> small = deepspeed_zero2_code_estimates(1001, 8, 1);
  EXPECT_DOUBLE_EQ(small[1].gpu_bytes, 4254);
  EXPECT_DOUBLE_EQ(small[2].gpu_bytes, 6006);
  const std::vector<OffloadEstimate> two = deepspeed_zero2_code_estimates(1'000'000, 8, 2);
  EXPECT_DOUBLE_EQ(two[1].gpu_bytes, 2'000'000 + 1'125'000);  // int(18e6 / 16)
  EXPECT_DOUBLE_EQ(two[1].cpu_bytes, 1e6 * 32 * 1.5);
  EXPECT_THROW(deepspeed_zero2_code_estimates(0, 8, 1), Error);
}

}  // namespace
}  // namespace dtrain::plan
