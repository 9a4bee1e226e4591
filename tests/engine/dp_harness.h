// Shared by the data-parallel tests: a small model whose parameter count no DP size divides,
// synthetic token data, and runners that train K steps with the single-rank reference or on the
// engine's N data-parallel threads-backend ranks on the same global batches, returning the
// parameters (and letting a test look at each rank's engine).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/model/param_table.h"
#include "reference/serial_engine.h"

namespace dtrain::train::testing {

// The tiny preset's shape with V = 257 and C = 33 (3 heads): 36,597 parameters, odd, so every
// shard layout over 2 or 4 ranks pads its last range.
inline StepConfig small_config(int64_t batch = 8) {
  StepConfig c;
  c.model = {.vocab = 257, .context = 32, .layers = 2, .heads = 3, .channels = 33};
  c.batch = batch;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 11;
  return c;
}

inline const std::vector<int32_t>& synthetic_tokens() {
  static const std::vector<int32_t> tokens = [] {
    Rng rng(3);
    std::vector<int32_t> t(4096);
    // A learnable pattern with noise: token i+1 follows token i mostly.
    int32_t x = 0;
    for (int32_t& v : t) {
      x = rng.uniform() < 0.8 ? (x * 7 + 3) % 256 : static_cast<int32_t>(rng.uniform_int(256));
      v = x;
    }
    return t;
  }();
  return tokens;
}

constexpr float kLr = 1e-3f;

struct RunResult {
  std::vector<float> params;
  std::vector<float> losses;
};

inline RunResult run_serial(const StepConfig& c, int steps) {
  SerialEngine engine(c);
  data::BatchSampler sampler(synthetic_tokens(), c.batch, c.seq, 99);
  data::Batch batch;
  RunResult r;
  for (int k = 0; k < steps; ++k) {
    sampler.next(batch);
    r.losses.push_back(engine.train_step(batch, kLr).loss);
  }
  r.params.assign(engine.model().params().begin(), engine.model().params().end());
  return r;
}

// The data-parallel layout: N ranks at ZeRO `zero`, buckets of `bucket_bytes`, `accum`
// micro-batches per rank.
inline LayoutOptions dp_layout(int dp, int zero = 0, int64_t bucket_bytes = int64_t{1} << 20,
                               int64_t accum = 1) {
  LayoutOptions l;
  l.dp = dp;
  l.zero_stage = zero;
  l.bucket_bytes = bucket_bytes;
  l.grad_accum = accum;
  return l;
}

// Trains `steps` steps on layout.dp ranks; `inspect(rank, engine)` runs on every rank after the
// steps. Returns rank 0's parameters (gathered at ZeRO-3) and losses.
inline RunResult run_dp(const StepConfig& c, const LayoutOptions& layout, int steps,
                        const std::function<void(int, Engine&)>& inspect = {}) {
  RunResult result;
  const EngineConfig config = make_engine_config(c, layout);
  comm::threads::run_ranks(layout.dp, [&](comm::Communicator& world) {
    Engine engine(config, world);
    data::BatchSampler sampler(synthetic_tokens(), c.batch, c.seq, 99);
    data::Batch batch;
    std::vector<float> losses;
    for (int k = 0; k < steps; ++k) {
      sampler.next(batch);
      losses.push_back(engine.train_step(batch, kLr).loss);
    }
    std::vector<float> params = engine.gather_params();
    if (inspect) inspect(world.rank(), engine);
    if (world.rank() == 0) result = {std::move(params), std::move(losses)};
  });
  return result;
}

// Prints max |a - b| per tensor and returns the largest |a - b| / (1 + |b|) over all elements.
inline double compare_params(const model::ParamTable& table, const std::vector<float>& a,
                             const std::vector<float>& b, const std::string& label) {
  double worst = 0;
  std::printf("  %s: max |diff| per tensor:", label.c_str());
  for (const model::ParamTensor& t : table.tensors()) {
    double tensor_max = 0;
    for (int64_t i = t.offset; i < t.offset + t.count; ++i) {
      const double d = std::fabs(static_cast<double>(a[static_cast<size_t>(i)]) -
                                 static_cast<double>(b[static_cast<size_t>(i)]));
      tensor_max = std::max(tensor_max, d);
      worst =
          std::max(worst, d / (1.0 + std::fabs(static_cast<double>(b[static_cast<size_t>(i)]))));
    }
    std::printf(" %s %.1e", t.name.c_str(), tensor_max);
  }
  std::printf("\n");
  return worst;
}

}  // namespace dtrain::train::testing
