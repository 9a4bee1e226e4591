// The split backward of a zero-bubble pipeline: block_backward_input then block_backward_weight
// gives the same gradient bits as the fused block_backward, and the weight-gradient stash is
// the plan/ formula's size.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/cost/activation_memory.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "random_tokens.h"

namespace dtrain::model {
namespace {

using testing::random_tokens;

// Every gradient after one step on (x, y), fused or split; the split runs every block's B
// first (top down, as a pipeline does), then the W's bottom up, to show W needs only the stash.
std::vector<float> step_grads(bool split, ThreadTeam* team) {
  const GptConfig g = gpt_preset("tiny").config;
  const int64_t B = 2, T = 8;
  MemoryTracker tracker;
  GptModel m(g, &tracker, nullptr, team);
  m.init_params(5);
  m.zero_grads();
  const auto x = random_tokens(B * T, g.vocab, 6), y = random_tokens(B * T, g.vocab, 7);
  m.forward(x, y, B, T);
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
  return {m.grads().begin(), m.grads().end()};
}

TEST(SplitBackward, InputThenWeightIsTheFusedBackwardBitForBit) {
  // The same sgemm calls on the same operands (matmul_backward is exactly its _input and
  // _weight halves), so equality is bitwise, with and without a thread team.
  ThreadTeam team(3);
  for (ThreadTeam* t : {static_cast<ThreadTeam*>(nullptr), &team}) {
    const std::vector<float> fused = step_grads(false, t), split = step_grads(true, t);
    ASSERT_EQ(fused.size(), split.size());
    EXPECT_EQ(std::memcmp(fused.data(), split.data(), fused.size() * sizeof(float)), 0);
    size_t nonzero = 0;
    for (float v : split) nonzero += v != 0.0f ? 1 : 0;
    EXPECT_GT(nonzero, split.size() / 2);  // not trivially equal
  }
}

TEST(SplitBackward, BlockBackwardInputLeavesTheLinearsWeightGradientsToW) {
  // After B alone the four linears' weight and bias gradients are untouched (still zero); the
  // LayerNorms' are already there.
  const GptConfig g = gpt_preset("tiny").config;
  const int64_t B = 1, T = 4;
  MemoryTracker tracker;
  GptModel m(g, &tracker);
  m.init_params(5);
  m.zero_grads();
  m.forward(random_tokens(B * T, g.vocab, 1), random_tokens(B * T, g.vocab, 2), B, T);
  WeightGradStash stash(g, B, T, &tracker, LayerRange{0, g.layers});
  m.head_backward(m.activations(), m.workspace(), 1.0f);
  for (int64_t l = g.layers - 1; l >= 0; --l) {
    m.block_backward_input(m.activations(), m.workspace(), l, stash);
  }
  auto all_zero = [&](int index) {
    for (float v : m.grad(index)) {
      if (v != 0.0f) return false;
    }
    return true;
  };
  for (int64_t l = 0; l < g.layers; ++l) {
    for (LayerParam k :
         {LayerParam::qkv_w, LayerParam::qkv_b, LayerParam::attn_proj_w, LayerParam::attn_proj_b,
          LayerParam::fc_w, LayerParam::fc_b, LayerParam::fc_proj_w, LayerParam::fc_proj_b}) {
      EXPECT_TRUE(all_zero(gpt_layer_param(l, k))) << "layer " << l;
    }
    EXPECT_FALSE(all_zero(gpt_layer_param(l, LayerParam::ln1_w))) << "layer " << l;
    EXPECT_FALSE(all_zero(gpt_layer_param(l, LayerParam::ln2_w))) << "layer " << l;
  }
  EXPECT_THROW(m.block_backward_weight(m.activations(), m.workspace(), stash, g.layers), Error);
}

TEST(SplitBackward, StashIsThePlanFormula) {
  const GptConfig g = gpt_preset("tiny").config;
  for (int tp : {1, 2}) {
    for (const LayerRange r : {LayerRange{0, 1}, LayerRange{0, 2}, LayerRange{1, 1}}) {
      const int64_t B = 3, T = 5;
      MemoryTracker tracker;
      WeightGradStash stash(g, B, T, &tracker, r, tp);
      plan::ActivationShape s;
      s.seq = T;
      s.micro_batch = B;
      s.hidden = g.channels;
      s.heads = g.heads;
      s.tp = tp;
      s.bytes_per_element = 4;
      const double want = static_cast<double>(r.count) * plan::weight_grad_stash_bytes_per_layer(s);
      EXPECT_EQ(tracker.current_bytes(MemoryTag::activations), static_cast<int64_t>(want))
          << "tp " << tp << " layers " << r.count;
    }
  }
}

}  // namespace
}  // namespace dtrain::model
