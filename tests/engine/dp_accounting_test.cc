// The engine's data-parallel counters against the plan/ formulas, on every rank, for N in {2, 4}
// and ZeRO stages 0-3, on a model whose 36,597 parameters neither N divides:
//   memory  params, grads and optimizer bytes held after a step == plan::model_state_bytes
//           (fp32 Adam: 4 + 4 + 8 bytes per parameter); stage 3 additionally peaks at exactly
//           the gathered units it holds at once (the embeddings and two blocks);
//   traffic bytes sent per step by the DP collectives == plan::dp_traffic_per_step (ring), up
//           to chunk rounding: less than one element per communication step, the bound
//           cost/collective_cost.h states for chunks that differ by one element.
#include <gtest/gtest.h>

#include <mutex>

#include "dp_harness.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/memory_model.h"

namespace dtrain::train {
namespace {

using testing::dp_layout;
using testing::run_dp;
using testing::small_config;

TEST(DataParallelAccounting, ModelStateMemoryEqualsThePlanOnEveryRank) {
  const StepConfig c = small_config();
  const int64_t psi = model::gpt_param_count(c.model);
  ASSERT_NE(psi % 2, 0);
  ASSERT_NE(psi % 4, 0);
  for (int dp : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "dp " << dp << " zero " << stage);
      const plan::ModelStateBytes want = plan::model_state_bytes(psi, dp, stage, plan::kFp32Adam);
      std::mutex mu;
      run_dp(c, dp_layout(dp, stage, 16384), 2, [&](int rank, Engine& engine) {
        std::lock_guard<std::mutex> lock(mu);
        const MemoryTracker& m = engine.memory();
        EXPECT_EQ(m.current_bytes(MemoryTag::params), want.params) << "rank " << rank;
        EXPECT_EQ(m.current_bytes(MemoryTag::grads), want.grads) << "rank " << rank;
        EXPECT_EQ(m.current_bytes(MemoryTag::optimizer), want.optimizer) << "rank " << rank;
        if (stage != 3) return;
        // Gathered weights at once: the embeddings (through the forward) and two blocks
        // (the running one and the next, prefetched): plan::zero3_gathered_bytes' weights
        // for a block with one prefetched, plus the embeddings.
        const std::vector<parallel::GradUnit>& units = engine.executor().units().units();
        const int64_t block = units[1].count, embeddings = units.back().count;
        const int64_t block_weights =
            plan::zero3_gathered_bytes(block, {.param = 4, .grad = 0, .optimizer = 0}, 1);
        EXPECT_EQ(m.peak_bytes(MemoryTag::params) - want.params, block_weights + 4 * embeddings)
            << "rank " << rank;
        // Gradients: at least the embeddings' (kept through the backward) and one block's;
        // the rest depends on how far the communication thread is behind.
        EXPECT_GE(m.peak_bytes(MemoryTag::grads) - want.grads, 4 * (embeddings + block));
        EXPECT_LE(m.peak_bytes(MemoryTag::grads) - want.grads, 4 * psi);
      });
    }
  }
}

void expect_traffic_matches(const LayoutOptions& layout, int steps) {
  LayoutOptions s = layout;
  s.dp_algorithm = comm::Algorithm::ring;  // plan::dp_traffic_per_step is the ring's
  const StepConfig c = small_config();
  const int64_t psi = model::gpt_param_count(c.model);
  const double want = plan::dp_traffic_per_step(psi, s.dp, s.zero_stage, plan::kFp32Adam,
                                                static_cast<int>(s.grad_accum))
                          .bytes_sent;
  std::mutex mu;
  run_dp(c, s, steps, [&](int rank, Engine& engine) {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(engine.steps(), steps);
    // Every DP collective of the run (the communication thread's communicator).
    const comm::Traffic t = engine.data_parallel().traffic();
    const double measured = static_cast<double>(t.bytes_sent);
    const double rounding = 4.0 * static_cast<double>(t.steps);  // one element per step
    EXPECT_NEAR(measured, want * steps, rounding) << "rank " << rank;
    EXPECT_GT(t.steps, 0);
    EXPECT_EQ(engine.traffic().dp, measured);
    if (rank == 0) {
      std::printf("  dp %d zero %d accum %lld: %.0f bytes sent per step, plan %.1f\n", s.dp,
                  s.zero_stage, static_cast<long long>(s.grad_accum), measured / steps, want);
    }
  });
}

TEST(DataParallelAccounting, BytesSentPerStepEqualThePlan) {
  for (int dp : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(::testing::Message() << "dp " << dp << " zero " << stage);
      expect_traffic_matches(dp_layout(dp, stage, 16384), 2);
    }
  }
  // With gradient accumulation ZeRO 2 reduce-scatters, and ZeRO 3 also gathers, per micro-batch.
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE(::testing::Message() << "accum 2, zero " << stage);
    expect_traffic_matches(dp_layout(2, stage, 1 << 20, 2), 1);
  }
}

}  // namespace
}  // namespace dtrain::train
