// Data parallelism reproduces the single-rank run: after K steps on the same global batches,
// every parameter with dp 2 and 4 (and with gradient accumulation) equals the SerialEngine's,
// ZeRO stages 1-3 equal plain DP, and the same seed gives a bitwise identical run. The first
// gradient bucket's all-reduce starts while backward is still running. Max |diff| per tensor is
// printed for every comparison. A rank that fails ends the whole run fast, with its error.
//
// Tolerance: the ranks sum each gradient in a different order than the serial run (a ring over
// the ranks' partial sums instead of one pass over the batch), so gradients differ by a few fp32
// rounding steps (~1e-7 relative); AdamW divides by sqrt(v) and so passes them on to the update
// unscaled. After K = 4 steps of lr 1e-3 the parameters differ by at most
// kTolerance * (1 + |p|) with kTolerance = 1e-5: 100x the rounding, 1% of one step.
#include <gtest/gtest.h>

#include "dp_harness.h"
#include "dtrain/core/timer.h"

namespace dtrain::train {
namespace {

using testing::compare_params;
using testing::run_dp;
using testing::run_serial;
using testing::small_config;

constexpr double kTolerance = 1e-5;
constexpr int kSteps = 4;

const model::ParamTable& table() {
  static const model::ParamTable t = model::gpt_param_table(small_config().model);
  return t;
}

void expect_losses_near(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5 * (1 + std::fabs(b[k])));
}

TEST(DataParallel, MatchesTheSerialRunOnTheSameGlobalBatch) {
  const testing::RunResult serial = run_serial(small_config(), kSteps);
  for (int dp : {2, 4}) {
    const testing::RunResult par = run_dp(small_config(), {.dp = dp}, kSteps);
    EXPECT_LE(compare_params(table(), par.params, serial.params, "dp " + std::to_string(dp)),
              kTolerance);
    expect_losses_near(par.losses, serial.losses);
  }
}

TEST(DataParallel, GradientAccumulationMatchesTheSerialRun) {
  const testing::RunResult serial = run_serial(small_config(), kSteps);
  const DataParallelSetup setups[] = {{.dp = 2, .grad_accum = 2},
                                      {.dp = 1, .grad_accum = 4},
                                      {.dp = 2, .zero_stage = 2, .grad_accum = 2},
                                      {.dp = 2, .zero_stage = 3, .grad_accum = 4}};
  for (const DataParallelSetup& s : setups) {
    const testing::RunResult par = run_dp(small_config(), s, kSteps);
    const std::string label = "dp " + std::to_string(s.dp) + " zero " +
                              std::to_string(s.zero_stage) + " accum " +
                              std::to_string(s.grad_accum);
    EXPECT_LE(compare_params(table(), par.params, serial.params, label), kTolerance) << label;
    expect_losses_near(par.losses, serial.losses);
  }
}

TEST(Zero, StagesOneToThreeReproducePlainDp) {
  for (int dp : {2, 4}) {
    // Small buckets, so that buckets straddle owner ranges.
    const testing::RunResult plain =
        run_dp(small_config(), {.dp = dp, .bucket_bytes = 8192}, kSteps);
    for (int stage = 1; stage <= 3; ++stage) {
      const testing::RunResult z =
          run_dp(small_config(), {.dp = dp, .zero_stage = stage, .bucket_bytes = 8192}, kSteps);
      const std::string label = "dp " + std::to_string(dp) + " zero " + std::to_string(stage);
      EXPECT_LE(compare_params(table(), z.params, plain.params, label), kTolerance) << label;
      expect_losses_near(z.losses, plain.losses);
    }
  }
}

TEST(DataParallel, TheSameSeedGivesABitwiseIdenticalRun) {
  for (const DataParallelSetup& s :
       {DataParallelSetup{.dp = 4, .bucket_bytes = 4096},
        DataParallelSetup{.dp = 4, .zero_stage = 3, .grad_accum = 2}}) {
    const testing::RunResult a = run_dp(small_config(), s, 3);
    const testing::RunResult b = run_dp(small_config(), s, 3);
    EXPECT_EQ(a.params, b.params);  // float ==: bit for bit
    EXPECT_EQ(a.losses, b.losses);
  }
  SerialEngineConfig other = small_config();
  other.init_seed = 12;
  EXPECT_NE(run_dp(other, {.dp = 2}, 1).params, run_dp(small_config(), {.dp = 2}, 1).params);
}

TEST(DataParallel, TheFirstBucketsAllReduceStartsBeforeBackwardFinishes) {
  // One bucket per unit: the first (the final LayerNorm) is final right after the head's
  // backward, with six blocks and the embeddings still to go (a few milliseconds). The first
  // step may find the communication thread cold; every later one must overlap.
  SerialEngineConfig c = small_config(16);
  c.model.layers = 6;
  c.seq = 32;
  constexpr int kRuns = 4;
  int overlapped = 0, steps = 0;
  run_dp(c, {.dp = 2, .bucket_bytes = 1}, kRuns, [&](int rank, DataParallelEngine& engine) {
    if (rank != 0) return;
    for (const DataParallelStepRecord& s : engine.steps()) {
      ASSERT_FALSE(s.timeline.comm.empty());
      ASSERT_EQ(s.timeline.backward.size(), 1u);
      const parallel::CommThread::Event& first = s.timeline.comm.front();
      EXPECT_EQ(first.what, "all_reduce lnf");
      const parallel::TimeInterval backward = s.timeline.backward.back();
      std::printf("  step %d: all_reduce lnf started %.0f us into a %.0f us backward\n", steps,
                  first.time.begin_us - backward.begin_us, backward.length_us());
      ++steps;
      if (first.time.begin_us < backward.end_us) ++overlapped;
    }
  });
  EXPECT_EQ(steps, kRuns);
  EXPECT_GE(overlapped, kRuns - 1);
}

TEST(DataParallel, ARankThatFailsEndsTheRunFastWithItsError) {
  // A token outside the vocabulary in rank 1's rows only: rank 1 throws in its forward while
  // rank 0 goes on and waits for the gradient all-reduce on its communication thread. Rank 1's
  // failure must reach rank 0 through the backend (not its 30 s timeout) and come out of the run.
  const SerialEngineConfig c = small_config();
  Batch batch;
  BatchSampler(testing::synthetic_tokens(), c.batch, c.seq, 99).next(batch);
  batch.inputs[static_cast<size_t>(c.batch / 2 * c.seq)] = 999;  // first row of rank 1
  Stopwatch watch;
  try {
    comm::threads::run_ranks(2,
                             [&](comm::Communicator& world) {
                               DataParallelEngine engine({c, {.dp = 2}}, world);
                               engine.train_step(batch, testing::kLr);
                             },
                             {.timeout_s = 30});
    ADD_FAILURE() << "the run did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 999"), std::string::npos) << e.what();
  }
  EXPECT_LT(watch.elapsed_s(), 10.0);
}

}  // namespace
}  // namespace dtrain::train
