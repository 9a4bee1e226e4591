// Pipeline parallelism end to end: for P in {2, 4}, M in {1, 2, 4, 8} and every schedule
// (interleaved with v = 2, which L = 8 allows for both P), K = 3 training steps of
// PipelineEngine on P rank threads equal SerialEngine's: the loss of every step, and every
// parameter tensor of every stage (both copies of the tied wte included) against the serial
// model's tensor of the same name, and the evaluation loss after the last step (a forward-only
// pass through the stages). The max |difference| per run is printed. ZB-H1 runs its split
// backward (B: input gradients; W, later: the linears' weight gradients, from the kept output
// gradients), whose GEMMs are the fused backward's, so the same tolerance holds.
//
// Tolerance, and why it is not zero: each stage runs the serial model's ops on its blocks,
// but on micro-batches of b = B/M rows, so a weight gradient is the sum over M micro-batch
// GEMMs instead of one GEMM over B rows (another summation order), the tied wte's two halves
// are added by the embedding group's all-reduce instead of in one buffer, and the norm is
// summed per stage. These are float rounding differences (~1e-7 relative) in the gradients.
// AdamW's first steps move a weight by about lr * g / (|g| + eps), so such a difference moves a
// parameter by a small fraction of lr = 1e-3: we allow 1e-6 on the parameters (observed
// ~1.5e-7), and 4e-6 on the loss (8 float ulps at ln 64 = 4.2; observed ~5e-7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/train/pipeline_engine.h"
#include "dtrain/train/serial_engine.h"
#include "e2e/equality_support.h"

namespace dtrain::train {
namespace {

constexpr int kSteps = 3;
constexpr float kLr = 1e-3f;
constexpr double kParamTol = 1e-6;
constexpr double kLossTol = 4e-6;

SerialEngineConfig base_config() {
  SerialEngineConfig c;
  c.model = {.vocab = 64, .context = 8, .layers = 8, .heads = 2, .channels = 16};
  c.batch = 8;  // B: divisible by every M
  c.seq = 8;    // T
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 42;
  return c;
}

struct SerialRun {
  std::vector<float> losses;
  float eval_loss = 0;  // of the first batch, after the last step
  std::map<std::string, std::vector<float>> tensors;
};

SerialRun run_serial(const SerialEngineConfig& c, const std::vector<Batch>& data) {
  SerialEngine engine(c);
  SerialRun run;
  for (const Batch& b : data) run.losses.push_back(engine.train_step(b, kLr).loss);
  run.eval_loss = engine.eval_loss(data[0]);
  const model::ParamTable& table = engine.model().param_table();
  for (size_t i = 0; i < table.size(); ++i) {
    std::span<float> p = engine.model().param(static_cast<int>(i));
    run.tensors[table[i].name] = {p.begin(), p.end()};
  }
  return run;
}

struct Case {
  plan::ScheduleKind kind;
  int stages;
  int microbatches;
  int chunks;
};

TEST(PipelineEquality, EveryScheduleMatchesTheSerialRun) {
  const SerialEngineConfig base = base_config();
  const std::vector<Batch> data = e2e::random_batches(base, kSteps);
  const SerialRun serial = run_serial(base, data);
  std::vector<Case> cases;
  for (int p : {2, 4}) {
    for (int m : {1, 2, 4, 8}) {
      cases.push_back({plan::ScheduleKind::gpipe, p, m, 1});
      cases.push_back({plan::ScheduleKind::one_f_one_b, p, m, 1});
      cases.push_back({plan::ScheduleKind::interleaved, p, m, 2});
      cases.push_back({plan::ScheduleKind::zero_bubble_h1, p, m, 1});
    }
  }
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message() << plan::name(k.kind) << " P " << k.stages << " M "
                                    << k.microbatches << " v " << k.chunks);
    PipelineEngineConfig config;
    config.base = base;
    config.schedule = k.kind;
    config.microbatches = k.microbatches;
    config.partition =
        parallel::balanced_partition(static_cast<int>(base.model.layers), k.stages, k.chunks);
    std::vector<std::vector<float>> losses(static_cast<size_t>(k.stages));
    std::vector<double> max_param_diff(static_cast<size_t>(k.stages), 0);
    std::vector<int> tensors_compared(static_cast<size_t>(k.stages), 0);
    std::vector<std::string> missing(static_cast<size_t>(k.stages));
    comm::threads::run_ranks(k.stages, [&](comm::Communicator& world) {
      const auto r = static_cast<size_t>(world.rank());
      PipelineEngine engine(config, world);
      for (const Batch& b : data) losses[r].push_back(engine.train_step(b, kLr).loss);
      losses[r].push_back(engine.eval_loss(data[0]));  // forward only, through the stages
      const model::ParamTable& table = engine.model().param_table();
      for (size_t i = 0; i < table.size(); ++i) {
        const auto it = serial.tensors.find(table[i].name);
        if (it == serial.tensors.end()) {
          missing[r] = table[i].name;
          continue;
        }
        std::span<float> p = engine.model().param(static_cast<int>(i));
        if (p.size() != it->second.size()) {
          missing[r] = table[i].name + " (size)";
          continue;
        }
        for (size_t j = 0; j < p.size(); ++j) {
          max_param_diff[r] =
              std::max(max_param_diff[r], static_cast<double>(std::abs(p[j] - it->second[j])));
        }
        ++tensors_compared[r];
      }
    });
    double loss_diff = 0;
    int compared = 0;
    for (int r = 0; r < k.stages; ++r) {
      const auto i = static_cast<size_t>(r);
      EXPECT_EQ(missing[i], "") << "rank " << r << " holds a tensor the serial model lacks";
      std::vector<float> want = serial.losses;
      want.push_back(serial.eval_loss);
      ASSERT_EQ(losses[i].size(), want.size());
      for (size_t s = 0; s < want.size(); ++s) {
        loss_diff = std::max(loss_diff, static_cast<double>(std::abs(losses[i][s] - want[s])));
      }
      compared += tensors_compared[i];
    }
    const double param_diff = *std::max_element(max_param_diff.begin(), max_param_diff.end());
    // Every serial tensor once, plus the second copy of wte on the last stage.
    EXPECT_EQ(compared, static_cast<int>(serial.tensors.size()) + 1);
    EXPECT_LE(loss_diff, kLossTol);
    EXPECT_LE(param_diff, kParamTol);
    std::printf("%-11s P %d M %d v %d: %d tensors, max |dparam| %.3g, max |dloss| %.3g\n",
                std::string(plan::name(k.kind)).c_str(), k.stages, k.microbatches, k.chunks,
                compared, param_diff, loss_diff);
  }
}

}  // namespace
}  // namespace dtrain::train
