// Data parallelism reproduces the single-rank run: after K steps on the same global batches,
// every parameter with dp 2 and 4 (and with gradient accumulation) equals the single-rank
// reference's,
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
using testing::dp_layout;
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
    const testing::RunResult par = run_dp(small_config(), dp_layout(dp), kSteps);
    EXPECT_LE(compare_params(table(), par.params, serial.params, "dp " + std::to_string(dp)),
              kTolerance);
    expect_losses_near(par.losses, serial.losses);
  }
}

TEST(DataParallel, GradientAccumulationMatchesTheSerialRun) {
  const testing::RunResult serial = run_serial(small_config(), kSteps);
  const LayoutOptions setups[] = {dp_layout(2, 0, 1 << 20, 2), dp_layout(1, 0, 1 << 20, 4),
                                  dp_layout(2, 2, 1 << 20, 2), dp_layout(2, 3, 1 << 20, 4)};
  for (const LayoutOptions& s : setups) {
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
    const testing::RunResult plain = run_dp(small_config(), dp_layout(dp, 0, 8192), kSteps);
    for (int stage = 1; stage <= 3; ++stage) {
      const testing::RunResult z = run_dp(small_config(), dp_layout(dp, stage, 8192), kSteps);
      const std::string label = "dp " + std::to_string(dp) + " zero " + std::to_string(stage);
      EXPECT_LE(compare_params(table(), z.params, plain.params, label), kTolerance) << label;
      expect_losses_near(z.losses, plain.losses);
    }
  }
}

TEST(DataParallel, TheSameSeedGivesABitwiseIdenticalRun) {
  for (const LayoutOptions& s : {dp_layout(4, 0, 4096), dp_layout(4, 3, 1 << 20, 2)}) {
    const testing::RunResult a = run_dp(small_config(), s, 3);
    const testing::RunResult b = run_dp(small_config(), s, 3);
    EXPECT_EQ(a.params, b.params);  // float ==: bit for bit
    EXPECT_EQ(a.losses, b.losses);
  }
  StepConfig other = small_config();
  other.init_seed = 12;
  EXPECT_NE(run_dp(other, dp_layout(2), 1).params, run_dp(small_config(), dp_layout(2), 1).params);
}

TEST(DataParallel, TheFirstBucketsAllReduceStartsBeforeBackwardFinishes) {
  // One bucket per unit: the first (the final LayerNorm) is final right after the head's
  // backward, with six blocks and the embeddings still to go (a few milliseconds). The first
  // step may find the communication thread cold; every later one must overlap.
  StepConfig c = small_config(16);
  c.model.layers = 6;
  c.seq = 32;
  constexpr int kRuns = 4;
  int overlapped = 0, steps = 0;
  const EngineConfig config = make_engine_config(c, dp_layout(2, 0, 1));
  comm::threads::run_ranks(2, [&](comm::Communicator& world) {
    Engine engine(config, world);
    data::BatchSampler sampler(testing::synthetic_tokens(), c.batch, c.seq, 99);
    data::Batch batch;
    for (int k = 0; k < kRuns; ++k) {
      sampler.next(batch);
      engine.train_step(batch, testing::kLr);
      if (world.rank() != 0) continue;
      const StepTrace& s = engine.last_step();
      ASSERT_FALSE(s.data_parallel.empty());
      const MeasuredSpan& first = s.data_parallel.front();
      EXPECT_EQ(first.what, "all_reduce lnf");
      const parallel::MeasuredAction* backward = nullptr;
      for (const parallel::MeasuredAction& a : s.actions) {
        if (a.action.kind == plan::ActionKind::backward) backward = &a;
      }
      ASSERT_NE(backward, nullptr);
      std::printf("  step %d: all_reduce lnf started %.0f us into a %.0f us backward\n", steps,
                  first.start_us - backward->start_us, backward->end_us - backward->start_us);
      ++steps;
      if (first.start_us < backward->end_us) ++overlapped;
    }
  });
  EXPECT_EQ(steps, kRuns);
  EXPECT_GE(overlapped, kRuns - 1);
}

TEST(DataParallel, ARankThatFailsEndsTheRunFastWithItsError) {
  // A token outside the vocabulary in rank 1's rows only: rank 1 throws in its forward while
  // rank 0 goes on and waits for the gradient all-reduce on its communication thread. Rank 1's
  // failure must reach rank 0 through the backend (not its 30 s timeout) and come out of the run.
  const StepConfig c = small_config();
  const EngineConfig config = make_engine_config(c, dp_layout(2));
  data::Batch batch;
  data::BatchSampler(testing::synthetic_tokens(), c.batch, c.seq, 99).next(batch);
  batch.inputs[static_cast<size_t>(c.batch / 2 * c.seq)] = 999;  // first row of rank 1
  Stopwatch watch;
  try {
    comm::threads::run_ranks(2,
                             [&](comm::Communicator& world) {
                               Engine engine(config, world);
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
