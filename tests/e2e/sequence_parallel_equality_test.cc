// Sequence parallelism end to end (Korthikanti et al. 2022, §4.2.2): K = 3 training steps of
// TensorParallelEngine with --sequence-parallel on tp in {2, 4} rank threads equal SerialEngine's
// (the loss of every step, every parameter tensor against model::tp_slice of the serial one),
// on the tiny shape (B*T/N rows = whole batch rows) and on a shape whose slices cut batch rows
// (B = 3, T = 12: 18 and 9 rows). The same runs check the counters against plan/: per block and
// step 4 collectives forward and 4 backward whose bytes equal plan::tp_traffic_per_layer with
// sequence_parallel, and one block's measured activation bytes equal
// plan::activation_bytes_per_layer with sequence_parallel and are below the same model's without.
//
// Tolerance, as tests/e2e/tensor_parallel_equality_test.cc (same reasons: N partial sums added
// by a collective instead of one sum, AdamW amplifying ~1e-7 relative rounding where the
// gradients nearly cancel), plus one more partial sum: each LayerNorm weight and bias gradient
// is the all-reduce of N slices' sums. We allow 1e-5 on parameters (1% of lr = 1e-3) and 4e-6 on
// the loss (8 float ulps at ln 256); the max differences are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/activations.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/plan/activation_memory.h"
#include "dtrain/plan/comm_model.h"
#include "dtrain/train/serial_engine.h"
#include "dtrain/train/tensor_parallel_engine.h"
#include "e2e/equality_support.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;
constexpr double kParamTol = 1e-5;
constexpr double kLossTol = 4e-6;

SerialEngineConfig config_of(int64_t B, int64_t T) {
  SerialEngineConfig c;
  c.model = {.vocab = 256, .context = 32, .layers = 2, .heads = 4, .channels = 32};
  c.batch = B;
  c.seq = T;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 42;
  return c;
}

// One block's activation bytes from a MemoryTracker: blocks {0, 1} less block {0}.
int64_t measured_block_bytes(model::GptConfig g, int64_t B, int64_t T, int tp, bool sp) {
  g.layers = 2;
  auto bytes = [&](int64_t blocks) {
    MemoryTracker tracker;
    const model::GptActivations acts(g, B, T, &tracker, {0, blocks}, false, false, tp, sp);
    return tracker.current_bytes(MemoryTag::activations);
  };
  return bytes(2) - bytes(1);
}

struct RankResult {
  std::vector<float> losses;
  double max_param_diff = 0;
  int tensors = 0;
  TensorParallelRankReport report;
};

void check_sp_matches_serial(int64_t B, int64_t T) {
  const SerialEngineConfig config = config_of(B, T);
  const std::vector<Batch> data = e2e::random_batches(config, kSteps);
  SerialEngine serial(config);
  std::vector<float> serial_losses;
  for (const Batch& b : data) serial_losses.push_back(serial.train_step(b, kLr).loss);
  const model::ParamTable& table = serial.model().param_table();
  const model::GptConfig& m = config.model;

  for (int N : {2, 4}) {
    SCOPED_TRACE(testing::Message() << "B " << B << " T " << T << " tp " << N);
    std::vector<RankResult> results(static_cast<size_t>(N));
    comm::threads::run_ranks(N, [&](comm::Communicator& world) {
      RankResult& r = results[static_cast<size_t>(world.rank())];
      TensorParallelEngine engine(config, world, /*sequence_parallel=*/true);
      for (const Batch& b : data) r.losses.push_back(engine.train_step(b, kLr).loss);
      const e2e::SliceDiff d =
          e2e::diff_to_serial_slices(serial.model(), engine.model(), m, N, world.rank());
      r.max_param_diff = d.max_abs;
      r.tensors = d.tensors;
      r.report = engine.report();
    });
    // f/g per layer: 4 reduce-scatters + 4 all-gathers of B*T*C fp32 (plan/), times L.
    const double formula =
        plan::tp_traffic_per_layer(B, T, m.channels, 4, N, true, plan::Recompute::none).bytes_sent *
        static_cast<double>(m.layers);
    // Backward's re-gathers: 2 ring all-gathers of B*T*C fp32 per layer, each sending
    // (N-1)/N of the buffer from every rank.
    const double regather = 2.0 * static_cast<double>(m.layers) *
                            static_cast<double>(B * T * m.channels * 4) * (N - 1) / N;
    plan::ActivationShape shape{.seq = T,
                                .micro_batch = B,
                                .hidden = m.channels,
                                .heads = m.heads,
                                .tp = N,
                                .sequence_parallel = true,
                                .bytes_per_element = 4,
                                .dropout = false,
                                .count_layernorm_stats = true};
    const double planned_sp = plan::activation_bytes_per_layer(shape);
    const int64_t measured_no_sp = measured_block_bytes(m, B, T, N, false);
    for (int rank = 0; rank < N; ++rank) {
      const RankResult& r = results[static_cast<size_t>(rank)];
      double loss_diff = 0;
      for (int k = 0; k < kSteps; ++k) {
        loss_diff = std::max(loss_diff,
                             static_cast<double>(std::fabs(r.losses[static_cast<size_t>(k)] -
                                                           serial_losses[static_cast<size_t>(k)])));
      }
      std::printf(
          "  B=%lld T=%lld tp=%d+SP rank %d: %d tensors, max |param diff| %.3g, max |loss diff| "
          "%.3g; f/g bytes/step %.0f (formula %.0f), re-gather %.0f; block activations %lld "
          "bytes (formula %.0f; without SP %lld)\n",
          static_cast<long long>(B), static_cast<long long>(T), N, rank, r.tensors,
          r.max_param_diff, loss_diff, r.report.block_bytes_sent_per_step, formula,
          r.report.regather_bytes_sent_per_step,
          static_cast<long long>(r.report.block_activation_bytes), planned_sp,
          static_cast<long long>(measured_no_sp));
      EXPECT_EQ(r.tensors, static_cast<int>(table.size()));
      EXPECT_LE(r.max_param_diff, kParamTol) << "rank " << rank;
      EXPECT_LE(loss_diff, kLossTol) << "rank " << rank;
      // Counters against plan/: exact.
      EXPECT_EQ(r.report.block_forward_calls_per_step, 4.0 * static_cast<double>(m.layers));
      EXPECT_EQ(r.report.block_backward_calls_per_step, 4.0 * static_cast<double>(m.layers));
      EXPECT_EQ(r.report.block_bytes_sent_per_step, formula);
      EXPECT_EQ(r.report.formula_bytes_sent_per_step, formula);
      EXPECT_EQ(r.report.regather_bytes_sent_per_step, regather);
      // Activation memory against plan/: exact, and below TP without SP.
      EXPECT_EQ(static_cast<double>(r.report.block_activation_bytes), planned_sp);
      EXPECT_EQ(r.report.formula_block_activation_bytes, planned_sp);
      EXPECT_LT(r.report.block_activation_bytes, measured_no_sp);
    }
  }
}

TEST(SequenceParallelEquality, TinyShapeMatchesTheSerialRun) {
  check_sp_matches_serial(4, 16);
}

TEST(SequenceParallelEquality, SlicesThatCutBatchRowsMatchTheSerialRun) {
  check_sp_matches_serial(3, 12);  // B*T = 36: 18 rows per rank for tp 2, 9 for tp 4
}

TEST(SequenceParallelEquality, RejectsATokenCountTpDoesNotDivide) {
  const SerialEngineConfig config = config_of(1, 7);
  try {
    comm::threads::run_ranks(
        2, [&](comm::Communicator& world) { TensorParallelEngine engine(config, world, true); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tp 2 does not divide --seq 7"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::train
