// Data parallelism end to end through `dtrain train`'s entry point (run_training: options,
// SPMD Trainers on rank threads, rank 0 reporting): on the default corpus, dp 2 and dp 4 with
// every ZeRO stage give the serial run's training losses and validation losses, and the summary
// carries the data-parallel report with every model-state tag equal to its plan/ formula.
//
// Tolerance: as tests/train/dp_equality_test.cc, the ranks sum the gradients in another order
// (~1e-7 relative per step); over 8 steps of the default lr 3e-3 the losses stay within 1e-4
// (observed ~1e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dtrain/train/run.h"

namespace dtrain::train {
namespace {

TrainOptions options() {
  TrainOptions o;
  o.model = "tiny";
  o.steps = 8;
  o.eval_every = 4;
  o.eval_batches = 2;
  o.seed = 3;
  return o;
}

TEST(DataParallelTraining, EveryLayoutFollowsTheSerialRun) {
  const TrainSummary serial = run_training(options(), nullptr);
  EXPECT_FALSE(serial.data_parallel.has_value());
  for (int dp : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      TrainOptions o = options();
      o.data_parallel = {.dp = dp, .zero_stage = stage, .bucket_bytes = 32 << 10};
      const TrainSummary s = run_training(o, nullptr);
      ASSERT_EQ(s.train_losses.size(), serial.train_losses.size());
      double worst = 0;
      for (size_t k = 0; k < s.train_losses.size(); ++k) {
        worst = std::max(
            worst, std::fabs(static_cast<double>(s.train_losses[k]) - serial.train_losses[k]));
      }
      for (size_t k = 0; k < s.evals.size(); ++k) {
        worst = std::max(
            worst, std::fabs(static_cast<double>(s.evals[k].val_loss) - serial.evals[k].val_loss));
      }
      std::printf("  dp %d zero %d: max |loss diff| %.1e\n", dp, stage, worst);
      EXPECT_LE(worst, 1e-4) << "dp " << dp << " zero " << stage;
      ASSERT_TRUE(s.data_parallel.has_value());
      for (const DataParallelReport::StateRow& row : s.data_parallel->state) {
        EXPECT_EQ(row.current_bytes, row.formula_bytes) << memory_tag_name(row.tag);
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::train
