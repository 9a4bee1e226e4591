// Model-state memory per ZeRO stage: the ZeRO paper's worked example (Rajbhandari et al. 2020,
// Figure 1: 7.5B parameters, 64-way data parallelism, mixed-precision Adam with K = 12) derived
// here from first principles, then the padding rule and the other precisions.
#include <string>

#include <gtest/gtest.h>

#include "dtrain/core/check.h"
#include "dtrain/cost/memory_model.h"

namespace dtrain::plan {
namespace {

TEST(MemoryModel, ZeroPaperWorkedExample) {
  // Psi = 7.5B, N = 64, K = 12: fp16 weights (2 Psi) and gradients (2 Psi), K Psi of optimizer
  // state. The paper's GB are 10^9 bytes (7.5B x 16 B = 120 GB exactly only in that unit).
  const int64_t psi = 7'500'000'000;
  const int n = 64;
  const double p = 2, g = 2, k = 12;
  const double psi_d = static_cast<double>(psi);
  const double baseline = (p + g + k) * psi_d;          // 120 GB
  const double os = (p + g) * psi_d + k * psi_d / n;    // 31.40625 GB
  const double os_g = p * psi_d + (g + k) * psi_d / n;  // 16.640625 GB
  const double os_g_p = (p + g + k) * psi_d / n;        // 1.875 GB
  const double expected[4] = {baseline, os, os_g, os_g_p};
  // The figures as the paper prints them, each rounded to 0.1 GB.
  const double printed_gb[4] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    const ModelStateBytes m = model_state_bytes(psi, n, stage, kMixedPrecisionAdam);
    // 7.5e9 / 64 is a whole number, so no padding: exact.
    EXPECT_EQ(static_cast<double>(m.total()), expected[stage]) << "stage " << stage;
    EXPECT_NEAR(static_cast<double>(m.total()) / 1e9, printed_gb[stage], 0.05 + 1e-9)
        << "stage " << stage;
  }
}

TEST(MemoryModel, EachStageShardsItsStates) {
  const int64_t psi = 1000;
  const StateBytes b{2, 4, 12};
  const ModelStateBytes s0 = model_state_bytes(psi, 8, 0, b);
  EXPECT_EQ(s0.params, 2000);
  EXPECT_EQ(s0.grads, 4000);
  EXPECT_EQ(s0.optimizer, 12000);
  const ModelStateBytes s1 = model_state_bytes(psi, 8, 1, b);
  EXPECT_EQ(s1.params, 2000);
  EXPECT_EQ(s1.grads, 4000);
  EXPECT_EQ(s1.optimizer, 12 * 125);
  const ModelStateBytes s2 = model_state_bytes(psi, 8, 2, b);
  EXPECT_EQ(s2.params, 2000);
  EXPECT_EQ(s2.grads, 4 * 125);
  EXPECT_EQ(s2.optimizer, 12 * 125);
  const ModelStateBytes s3 = model_state_bytes(psi, 8, 3, b);
  EXPECT_EQ(s3.params, 2 * 125);
  EXPECT_EQ(s3.grads, 4 * 125);
  EXPECT_EQ(s3.optimizer, 12 * 125);
  EXPECT_EQ(s3.total(), 18 * 125);
}

TEST(MemoryModel, ShardsArePaddedNotRefused) {
  // 10 parameters over 3 ranks: each rank holds ceil(10/3) = 4 elements of a sharded state.
  EXPECT_EQ(shard_count(10, 3), 4);
  EXPECT_EQ(shard_count(9, 3), 3);
  EXPECT_EQ(shard_count(0, 3), 0);
  const ModelStateBytes m = model_state_bytes(10, 3, 3, kFp32Adam);
  EXPECT_EQ(m.params, 4 * 4);
  EXPECT_EQ(m.grads, 4 * 4);
  EXPECT_EQ(m.optimizer, 8 * 4);
}

TEST(MemoryModel, PrecisionsAndTheirTotals) {
  EXPECT_EQ(kMixedPrecisionAdam.total(), 16);
  EXPECT_EQ(kMegatronMixedPrecisionAdam.total(), 18);
  EXPECT_EQ(kFp32Adam.total(), 16);
  EXPECT_EQ(parse_precision("mixed"), kMixedPrecisionAdam);
  EXPECT_EQ(parse_precision("megatron"), kMegatronMixedPrecisionAdam);
  EXPECT_EQ(parse_precision("fp32"), kFp32Adam);
  EXPECT_FALSE(parse_precision("fp8").has_value());
  // Plain DP with one rank holds everything, whatever the stage.
  for (int stage = 0; stage <= 3; ++stage) {
    EXPECT_EQ(model_state_bytes(100, 1, stage, kMegatronMixedPrecisionAdam).total(), 1800);
  }
}

TEST(MemoryModel, Zero3GatheredBytes) {
  // One layer being computed plus one prefetched (2 bytes each), and one layer's gradient.
  EXPECT_EQ(zero3_gathered_bytes(1000, kMixedPrecisionAdam), 2 * 1000 * 2 + 1000 * 2);
  EXPECT_EQ(zero3_gathered_bytes(1000, kFp32Adam, 0), 1000 * 4 + 1000 * 4);
}

TEST(MemoryModel, UnitWeightsPeakBytes) {
  // The first stage of pp 2 with one block: embeddings E = 100, block b = 300.
  const ChunkUnitCounts first{.embedding = true, .embeddings = 100, .blocks = {300}};
  // fp32 ZeRO-3 computes on the gathered copies: E and the block at once.
  EXPECT_EQ(unit_weights_peak_bytes(first, {.gathered = 4, .working = 0}), 4 * 100 + 4 * 300);
  // Mixed precision at ZeRO-3: the block's bf16 copy and its fp32 working copy beside E's.
  EXPECT_EQ(unit_weights_peak_bytes(first, {.gathered = 2, .working = 4}), 4 * 100 + 6 * 300);
  // Below ZeRO-3 the working copies are made from the weights at rest.
  EXPECT_EQ(unit_weights_peak_bytes(first, {.gathered = 0, .working = 4}), 4 * 100 + 4 * 300);
  EXPECT_EQ(unit_weights_peak_bytes(first, {}), 0);
  // Embeddings larger than two blocks: their own conversion, the first block gathered ahead.
  const ChunkUnitCounts wide{.embedding = true, .embeddings = 1000, .blocks = {300}};
  EXPECT_EQ(unit_weights_peak_bytes(wide, {.gathered = 2, .working = 4}), 6 * 1000 + 2 * 300);
  // One stage, two blocks and the head (final LayerNorm 10): fp32 holds E with a block and the
  // next one gathered ahead; mixed precision a converting block beside E.
  const ChunkUnitCounts all{
      .embedding = true, .head = true, .embeddings = 100, .blocks = {300, 300}, .final_norm = 10};
  EXPECT_EQ(unit_weights_peak_bytes(all, {.gathered = 4, .working = 0}), 4 * (100 + 300 + 300));
  EXPECT_EQ(unit_weights_peak_bytes(all, {.gathered = 2, .working = 4}), 4 * 100 + 6 * 300);
  // A middle stage holds no embeddings: two neighbouring blocks (fp32) or one converting.
  const ChunkUnitCounts middle{.blocks = {300, 200}};
  EXPECT_EQ(unit_weights_peak_bytes(middle, {.gathered = 4, .working = 0}), 4 * 500);
  EXPECT_EQ(unit_weights_peak_bytes(middle, {.gathered = 2, .working = 4}), 6 * 300);
}

TEST(MemoryModel, BadStageOrRanksNameTheFlag) {
  try {
    model_state_bytes(100, 4, 4, kMixedPrecisionAdam);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--zero"), std::string::npos) << e.what();
  }
  try {
    model_state_bytes(100, 0, 1, kMixedPrecisionAdam);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dp"), std::string::npos) << e.what();
  }
}

// The ZeRO paper's Table 2 (Rajbhandari et al. 2020): the largest model whose states fit a 32 GB
// V100 (GB = 10^9 bytes), K = 12, 64-way data parallelism at every MP degree:
//   MP 1 (64 GPUs):     2B baseline,  7.6B P_os,  14.4B P_os+g,   128B P_os+g+p
//   MP 16 (1024 GPUs):  32B,         121.6B,     230.4B,          2T
// The paper rounds each MP-1 figure before multiplying (121.6 = 16 x 7.6): held to 1%.
TEST(MemoryModel, LargestModelIsTheZeroPapersTable2) {
  const double v100 = 32e9;
  const double paper[2][4] = {{2e9, 7.6e9, 14.4e9, 128e9}, {32e9, 121.6e9, 230.4e9, 2048e9}};
  const int mps[] = {1, 16};
  for (int row = 0; row < 2; ++row) {
    for (int zero = 0; zero <= 3; ++zero) {
      const double got =
          static_cast<double>(largest_model_params(v100, 64, mps[row], zero, kMixedPrecisionAdam));
      EXPECT_NEAR(got / paper[row][zero], 1.0, 0.01) << "MP " << mps[row] << " ZeRO-" << zero;
    }
  }
  // Exact at the boundary: the count returned fits, one more (per MP rank) does not.
  for (int zero = 0; zero <= 3; ++zero) {
    const int64_t psi = largest_model_params(v100, 64, 1, zero, kMixedPrecisionAdam);
    EXPECT_LE(static_cast<double>(model_state_bytes(psi, 64, zero, kMixedPrecisionAdam).total()),
              v100);
    EXPECT_GT(
        static_cast<double>(model_state_bytes(psi + 1, 64, zero, kMixedPrecisionAdam).total()),
        v100);
  }
  EXPECT_EQ(largest_model_params(10, 1, 1, 0, kMixedPrecisionAdam), 0);  // under 16 bytes
}

}  // namespace
}  // namespace dtrain::plan
