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
#include <string>

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

// A declared topology (--ranks-per-node 2, 8 ranks = 4 nodes): the flat ring and the
// hierarchical all-reduce of every bucket follow the serial run, every rank's inter-node bytes
// summed equal plan/link_traffic.h's per-bucket prediction exactly, and the hierarchical form
// sends fewer bytes across nodes (2(M-1)/M S per node instead of G times that).
TEST(DataParallelTraining, TopologySplitsBytesByLinkAsPredicted) {
  const TrainSummary serial = run_training(options(), nullptr);
  double flat_inter = 0, hier_inter = 0;
  for (const char* all_reduce : {"flat", "hierarchical"}) {
    TrainOptions o = options();
    o.data_parallel = {.dp = 8, .zero_stage = 0, .bucket_bytes = 32 << 10};
    o.mesh.ranks_per_node = 2;
    o.mesh.dp_all_reduce = all_reduce;
    const TrainSummary s = run_training(o, nullptr);
    ASSERT_TRUE(s.data_parallel.has_value());
    const DataParallelReport& d = *s.data_parallel;
    double worst = 0;
    for (size_t k = 0; k < s.train_losses.size(); ++k) {
      worst = std::max(worst,
                       std::fabs(static_cast<double>(s.train_losses[k]) - serial.train_losses[k]));
    }
    EXPECT_LE(worst, 1e-4) << all_reduce;
    EXPECT_GT(d.total_inter_node_bytes_per_step, 0) << all_reduce;
    EXPECT_EQ(d.total_inter_node_bytes_per_step, d.predicted_total_inter_node_bytes_per_step)
        << all_reduce;
    EXPECT_EQ(d.hierarchical, std::string(all_reduce) == "hierarchical");
    (d.hierarchical ? hier_inter : flat_inter) = d.total_inter_node_bytes_per_step;
    std::printf(
        "  dp 8 on 4 nodes x 2, %s: %.0f inter-node bytes per step (predicted %.0f), "
        "max |loss diff| %.1e\n",
        all_reduce, d.total_inter_node_bytes_per_step, d.predicted_total_inter_node_bytes_per_step,
        worst);
  }
  EXPECT_LT(hier_inter, flat_inter);
}

}  // namespace
}  // namespace dtrain::train
