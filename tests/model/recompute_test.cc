// Activation recomputation in the model: selective and full give the loss and every gradient
// of none bit for bit (fused and split backward, with and without a thread team, and with TP
// hooks counting full's reruns apart), and the bytes each mode allocates are the plan/
// formulas': a block's kept tensors plan::activation_bytes_per_layer, the workspace's scratch
// plan::recompute_scratch_bytes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "random_tokens.h"

namespace dtrain::model {
namespace {

constexpr Recompute kModes[] = {Recompute::none, Recompute::selective, Recompute::full};

using testing::random_tokens;

struct Step {
  float loss = 0;
  std::vector<float> grads;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One forward and backward of the tiny model under `mode`; with `split` the backward runs as a
// zero-bubble pipeline does: every block's B top down, then the W's bottom up.
Step run_step(Recompute mode, ThreadTeam* team, bool split, TensorParallelHooks* hooks = nullptr) {
  const GptConfig g = gpt_preset("tiny").config;
  const int64_t B = 4, T = 16;
  MemoryTracker tracker;
  GptModel m(g, &tracker, hooks, team, mode);
  m.init_params(11);
  m.zero_grads();
  Step s;
  s.loss = m.forward(random_tokens(B * T, g.vocab, 12), random_tokens(B * T, g.vocab, 13), B, T);
  GptActivations& acts = m.activations();
  GptWorkspace& ws = m.workspace();
  if (!split) {
    m.backward(acts, ws, 0.5f);
  } else {
    WeightGradStash stash(g, B, T, &tracker, LayerRange{0, g.layers});
    m.head_backward(acts, ws, 0.5f);
    for (int64_t l = g.layers - 1; l >= 0; --l) m.block_backward_input(acts, ws, l, stash);
    m.embedding_backward(acts, ws);
    for (int64_t l = 0; l < g.layers; ++l) m.block_backward_weight(acts, ws, stash, l);
  }
  s.grads.assign(m.grads().begin(), m.grads().end());
  return s;
}

TEST(Recompute, SelectiveAndFullGiveNonesLossAndGradientsBitForBit) {
  // The recomputation runs the forward's ops on the same inputs with the same shapes and the
  // same team split, so every float is the one the forward computed.
  ThreadTeam team(3);
  for (ThreadTeam* t : {static_cast<ThreadTeam*>(nullptr), &team}) {
    for (bool split : {false, true}) {
      const Step none = run_step(Recompute::none, t, split);
      size_t nonzero = 0;
      for (float v : none.grads) nonzero += v != 0.0f ? 1 : 0;
      EXPECT_GT(nonzero, none.grads.size() / 2);  // not trivially equal
      for (Recompute mode : {Recompute::selective, Recompute::full}) {
        const Step other = run_step(mode, t, split);
        const char* who = t == nullptr ? "no team" : "team of 3";
        EXPECT_EQ(std::memcmp(&other.loss, &none.loss, sizeof(float)), 0)
            << name(mode) << ", " << who << (split ? ", split" : "");
        EXPECT_TRUE(same_bits(other.grads, none.grads))
            << name(mode) << ", " << who << (split ? ", split" : "");
      }
    }
  }
}

// Hooks of TP size 1 that count calls: f and g of the forward, the backward and the reruns.
class CountingHooks final : public TensorParallelHooks {
 public:
  void g_forward(float* /*data*/, int64_t /*count*/) override {
    ++(recomputing_ ? rerun_g : forward_g);
  }
  void f_backward(float* /*dinp*/, int64_t /*count*/) override { ++backward_f; }
  void set_recomputing(bool on) override { recomputing_ = on; }
  int forward_g = 0, backward_f = 0, rerun_g = 0;

 private:
  bool recomputing_ = false;
};

TEST(Recompute, FullRerunsEachBlocksTwoGsApartFromTheForwards) {
  // Korthikanti et al. 2022 §5: full recompute adds the forward's f/g communication once more;
  // the hooks see those calls flagged, so the forward's and backward's counts are none's. A
  // split backward's W reruns the forward again (B's rerun is gone by then).
  const int64_t L = gpt_preset("tiny").config.layers;
  for (Recompute mode : kModes) {
    for (bool split : {false, true}) {
      CountingHooks hooks;
      const Step s = run_step(mode, nullptr, split, &hooks);
      EXPECT_EQ(hooks.forward_g, 2 * L) << name(mode);
      EXPECT_EQ(hooks.backward_f, 2 * L) << name(mode);
      const int reruns = mode != Recompute::full ? 0 : split ? 2 : 1;
      EXPECT_EQ(hooks.rerun_g, reruns * 2 * L) << name(mode) << (split ? ", split" : "");
      EXPECT_TRUE(same_bits(s.grads, run_step(Recompute::none, nullptr, split).grads));
    }
  }
}

plan::ActivationShape layer_shape(const GptConfig& g, int64_t B, int64_t T, Recompute mode) {
  return {.seq = T,
          .micro_batch = B,
          .hidden = g.channels,
          .heads = g.heads,
          .recompute = mode,
          .bytes_per_element = 4,
          .dropout = false,
          .count_layernorm_stats = true};
}

int64_t block_bytes(GptConfig g, int64_t B, int64_t T, Recompute mode, int64_t blocks) {
  g.layers = 2;
  MemoryTracker tracker;
  const GptActivations acts(g, B, T, &tracker, {0, blocks}, false, false, 1, false, mode);
  return tracker.current_bytes(MemoryTag::activations);
}

TEST(Recompute, EachModesBytesAreThePlanFormulas) {
  // Per block: a two-block range less a one-block range. Scratch: the workspace of a mode less
  // none's. Whole model: L blocks + head + workspace + scratch, as the trainer plans it.
  struct Shape {
    GptConfig g;
    int64_t B, T;
  };
  const Shape shapes[] = {
      {gpt_preset("tiny").config, 8, 32},
      {gpt_preset("bench").config, 8, 64},
      {{.vocab = 300, .context = 9, .layers = 3, .heads = 3, .channels = 24}, 3, 7},
  };
  for (const Shape& s : shapes) {
    const plan::HeadActivationShape head{
        .seq = s.T, .micro_batch = s.B, .hidden = s.g.channels, .vocab = s.g.vocab};
    for (Recompute mode : kModes) {
      const plan::ActivationShape shape = layer_shape(s.g, s.B, s.T, mode);
      const int64_t per_layer =
          block_bytes(s.g, s.B, s.T, mode, 2) - block_bytes(s.g, s.B, s.T, mode, 1);
      EXPECT_EQ(static_cast<double>(per_layer), plan::activation_bytes_per_layer(shape))
          << describe(s.g) << " " << name(mode);
      MemoryTracker ws_tracker;
      const GptWorkspace ws(s.g, s.B, s.T, &ws_tracker, 1, 1, false, mode);
      EXPECT_EQ(static_cast<double>(ws_tracker.current_bytes(MemoryTag::activations)),
                plan::workspace_activation_bytes(head) + plan::recompute_scratch_bytes(shape))
          << describe(s.g) << " " << name(mode);
      MemoryTracker tracker;
      GptModel m(s.g, &tracker, nullptr, nullptr, mode);
      m.set_batch_shape(s.B, s.T);
      const double total =
          static_cast<double>(s.g.layers) * plan::activation_bytes_per_layer(shape) +
          plan::head_activation_bytes(head) + plan::workspace_activation_bytes(head) +
          plan::recompute_scratch_bytes(shape);
      EXPECT_EQ(static_cast<double>(tracker.current_bytes(MemoryTag::activations)), total)
          << describe(s.g) << " " << name(mode);
      std::printf("%s B=%lld T=%lld %-9s: %8lld activation bytes per layer, %9.0f in all\n",
                  describe(s.g).c_str(), static_cast<long long>(s.B), static_cast<long long>(s.T),
                  std::string(name(mode)).c_str(), static_cast<long long>(per_layer), total);
    }
  }
}

TEST(Recompute, SelectiveSavesOverNoneAndFullOverSelective) {
  // The tiny preset at B = 8, T = 32 (L = 2, C = 32, NH = 4): per layer the softmax output
  // (NH*T*T = 4096 floats a row of B) is 44 % of none's block, and full keeps one (B, T, C)
  // tensor; over the whole model the one-layer scratch gives back part of it, and still
  // selective < none and full < selective (any L >= 2: scratch is one layer, the savings L).
  const GptConfig g = gpt_preset("tiny").config;
  const int64_t B = 8, T = 32;
  std::vector<int64_t> per_layer, total;
  for (Recompute mode : kModes) {
    per_layer.push_back(block_bytes(g, B, T, mode, 2) - block_bytes(g, B, T, mode, 1));
    MemoryTracker tracker;
    GptModel m(g, &tracker, nullptr, nullptr, mode);
    m.set_batch_shape(B, T);
    total.push_back(tracker.current_bytes(MemoryTag::activations));
  }
  EXPECT_LT(per_layer[1], per_layer[0]);
  EXPECT_LT(per_layer[2], per_layer[1]);
  EXPECT_EQ(per_layer[2], B * T * g.channels * 4);  // the block input alone
  EXPECT_LT(total[1], total[0]);
  EXPECT_LT(total[2], total[1]);
}

TEST(Recompute, ActivationsOfAnotherModeAreRefused) {
  const GptConfig g = gpt_preset("tiny").config;
  const int64_t B = 2, T = 4;
  MemoryTracker tracker;
  GptModel m(g, &tracker, nullptr, nullptr, Recompute::full);
  GptActivations acts(g, B, T, &tracker);  // none's
  GptWorkspace ws(g, B, T, &tracker, 1, 1, false, Recompute::full);
  m.embedding_forward(acts, ws, random_tokens(B * T, g.vocab, 1));
  try {
    m.block_forward(acts, ws, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recompute none"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model's recompute full"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::model
