// Shared by the checkpoint and fault tests: a small model every layout can hold, the layouts of
// the resharding matrix, a runner that gives every rank of a layout its engine, and bitwise
// comparison of serial states.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/rng.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/run/trainer.h"
#include "reference/serial_engine.h"

namespace dtrain::train::testing {

struct Layout {
  std::string name;
  int dp = 1, zero = 0, tp = 1, pp = 1;
  bool sp = false;
  bool reference = false;  // the tests' single-rank reference instead of the engine
  model::Precision precision = model::Precision::fp32;
  int ranks() const { return dp * tp * pp; }
};

// The single-rank reference, every ZeRO stage, each axis alone and composed, at small sizes.
inline std::vector<Layout> matrix_layouts() {
  return {{"reference", 1, 0, 1, 1, false, true},
          {"one rank"},
          {"dp2-zero0", 2, 0},
          {"dp2-zero1", 2, 1},
          {"dp2-zero2", 2, 2},
          {"dp2-zero3", 2, 3},
          {"dp4-zero3", 4, 3},
          {"tp2", 1, 0, 2},
          {"tp2-sp", 1, 0, 2, 1, true},
          {"pp2", 1, 0, 1, 2},
          {"pp4", 1, 0, 1, 4},
          {"dp2-tp2-zero1", 2, 1, 2},
          {"dp2-pp2-zero2", 2, 2, 1, 2},
          {"dp2-tp2-pp2-zero3-sp", 2, 3, 2, 2, true}};
}

// V = 257 (TP pads wte to 258 rows), 4 blocks (four pipeline stages), 4 heads (TP 2). The
// parameter count is odd, so ZeRO's last shard is padded too.
inline StepConfig ckpt_config(model::Precision precision = model::Precision::fp32) {
  StepConfig c;
  c.precision = precision;
  c.model = {.vocab = 257, .context = 16, .layers = 4, .heads = 4, .channels = 16};
  c.batch = 8;
  c.seq = 16;
  c.adamw = {0.9f, 0.95f, 1e-8f, 0.1f};
  c.grad_clip = 1.0f;
  c.init_seed = 21;
  return c;
}

inline const data::TokenSplit& ckpt_data() {
  static const data::TokenSplit split = [] {
    Rng rng(5);
    std::vector<int32_t> t(6000);
    int32_t x = 0;
    for (int32_t& v : t) {
      x = rng.uniform() < 0.8 ? (x * 7 + 3) % 256 : static_cast<int32_t>(rng.uniform_int(256));
      v = x;
    }
    return data::split_train_val(std::move(t), 0.1, "synthetic");
  }();
  return split;
}

// A run of `steps` steps whose schedule is that of a `total`-step run (so a run cut short
// and resumed follows the same learning rates).
inline TrainerConfig ckpt_trainer(int64_t steps, int64_t total) {
  const StepConfig c = ckpt_config();
  TrainerConfig t;
  t.model = c.model;
  t.model_name = "custom";
  t.steps = steps;
  t.batch = c.batch;
  t.seq = c.seq;
  t.schedule = {2e-3f, 2e-4f, 1, total};
  t.eval_every = 0;
  t.eval_batches = 1;
  t.data_seed = 7;
  return t;
}

// The engine's config for `l` (micro-batches: 2 per DP rank beside a pipeline, 4 without DP).
inline EngineConfig layout_config(const Layout& l) {
  LayoutOptions o;
  o.dp = l.dp;
  o.tp = l.tp;
  o.pp = l.pp;
  o.zero_stage = l.zero;
  o.sequence_parallel = l.sp;
  if (l.pp > 1) o.microbatches = l.dp > 1 ? 2 : 4;
  return make_engine_config(ckpt_config(l.precision), o);
}

// Runs fn(engine, rank) on every rank of `layout` (rank threads; one plain call for the
// reference). fn runs concurrently on the ranks.
inline void on_layout(const Layout& l, const std::function<void(StepEngine&, int)>& fn) {
  if (l.reference) {
    SerialEngine engine(ckpt_config(l.precision));
    fn(engine, 0);
    return;
  }
  const EngineConfig config = layout_config(l);
  comm::threads::run_ranks(l.ranks(), [&](comm::Communicator& world) {
    Engine engine(config, world);
    fn(engine, world.rank());
  });
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Index of the first element whose bits differ, or -1.
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

inline void expect_same_state(const checkpoint::SerialState& a, const checkpoint::SerialState& b,
                              const std::string& what) {
  EXPECT_EQ(a.adam_step, b.adam_step) << what;
  for (checkpoint::StateKind k : {checkpoint::StateKind::param, checkpoint::StateKind::adam_m,
                                  checkpoint::StateKind::adam_v}) {
    EXPECT_TRUE(same_bits(a.of(k), b.of(k)))
        << what << ": " << name(k) << " differs first at element "
        << first_difference(a.of(k), b.of(k));
  }
}

// This process's scratch root under the system's temporary directory, removed at exit.
inline std::filesystem::path scratch_root() {
  return std::filesystem::temp_directory_path() /
         ("dtrain-ckpt-test-" + std::to_string(::getpid()));
}
struct ScratchRootCleanup {
  ~ScratchRootCleanup() {
    std::error_code ignored;
    std::filesystem::remove_all(scratch_root(), ignored);
  }
};
inline ScratchRootCleanup scratch_root_cleanup;

// A fresh empty directory under the scratch root.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = scratch_root() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace dtrain::train::testing
