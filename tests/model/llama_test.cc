// The Llama-family model: its parameter table (names, shapes, the count gpt_param_count gives),
// a gradient check of every tensor against the double-precision reference (reference_llama.h)
// with grouped-query and multi-query attention, untied and tied heads, each recompute mode
// giving the same loss and gradients bit for bit, and causality.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/gpt.h"
#include "gradcheck.h"
#include "random_tokens.h"
#include "reference_llama.h"

namespace dtrain::model {
namespace {

using testing::random_tokens;

GptConfig small_llama(int64_t kv_heads, bool tied) {
  GptConfig g;
  g.family = ModelFamily::llama;
  g.vocab = 11;
  g.context = 8;
  g.layers = 2;
  g.heads = 4;
  g.channels = 16;
  g.kv_heads = kv_heads;
  g.ffn_hidden = 24;
  g.rope_theta = 100.0f;  // angles that turn within a few positions
  g.tie_embeddings = tied;
  return g;
}

TEST(LlamaParamTable, NamesShapesAndCountFollowTheDerivation) {
  const GptConfig g = small_llama(2, false);
  const ParamTable t = gpt_param_table(g);
  const int64_t C = 16, HS = 4, V = 11, F = 24;
  // wte; per block ln1.w C, qkv (4 + 2*2) * 4 = 32 rows of C, proj C x C, ln2.w C, [gate | up]
  // 2F x C, down C x F; lnf.w C; lm_head V x C.
  const int64_t block = C + (4 + 2 * 2) * HS * C + C * C + C + 2 * F * C + C * F;
  EXPECT_EQ(t.total_count(), V * C + 2 * block + C + V * C);
  EXPECT_EQ(t.total_count(), gpt_param_count(g));
  ASSERT_EQ(t.size(), static_cast<size_t>(1 + 2 * kLlamaLayerParamCount + 2));
  EXPECT_EQ(t[1].name, "h.0.ln1.w");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{32, C}));
  EXPECT_EQ(t[static_cast<size_t>(gpt_layer_param(g, 1, LayerParam::fc_w))].name, "h.1.mlp.fc.w");
  EXPECT_EQ(t[static_cast<size_t>(gpt_lnf_w_index(g))].name, "lnf.w");
  EXPECT_EQ(t[static_cast<size_t>(gpt_lm_head_index(g))].name, "lm_head.w");
  EXPECT_EQ(gpt_layer_param(g, 0, LayerParam::qkv_b), -1);
  EXPECT_EQ(gpt_wpe_index(g), -1);
  EXPECT_EQ(gpt_lnf_b_index(g), -1);
  // Tied: no lm_head, V*C fewer.
  EXPECT_EQ(gpt_param_count(small_llama(2, true)), gpt_param_count(g) - V * C);
  EXPECT_EQ(gpt_lm_head_index(small_llama(2, true)), -1);
  // The backward order starts at the head and ends at wte.
  EXPECT_EQ(t.backward_order().front(), gpt_lm_head_index(g));
  EXPECT_EQ(t.backward_order().back(), kWteIndex);
}

TEST(LlamaParamTable, ThePresetsCountFollowsTheDerivation) {
  for (const GptPreset& p : gpt_presets()) {
    const GptConfig& g = p.config;
    if (!g.llama()) continue;
    const int64_t C = g.channels, F = g.ffn(), kv = g.kv_heads_or_heads() * g.head_size();
    // wte V*C; per block two RMSNorms 2C, Q C*C, K and V 2*kv*C, proj C*C, gate and up 2F*C,
    // down C*F (a routed block: E experts of the three and an E x C router); lnf C; the untied
    // head V*C.
    const int64_t routed = moe_layers_before(g.moe, g.layers), E = g.moe.experts;
    const int64_t want = g.vocab * C + g.layers * (2 * C + C * C + 2 * kv * C + C * C + 3 * F * C) +
                         routed * ((E - 1) * 3 * F * C + E * C) + C +
                         (g.tied_head() ? 0 : g.vocab * C);
    EXPECT_EQ(gpt_param_table(g).total_count(), want) << p.name;
    std::printf("%s: %lld parameters\n", p.name.c_str(), static_cast<long long>(want));
  }
}

TEST(LlamaConfig, RefusesShapesItCannotRun) {
  GptConfig g = small_llama(3, false);  // 3 does not divide 4 heads
  EXPECT_THROW(validate(g), Error);
  g = small_llama(2, false);
  g.channels = 12;  // head size 3: odd, RoPE pairs dims
  EXPECT_THROW(validate(g), Error);
  g = small_llama(2, false);
  g.moe.experts = 4;  // Mixtral's SwiGLU experts: a shape it runs
  g.moe.top_k = 2;
  EXPECT_NO_THROW(validate(g));
  g.moe.top_k = 5;  // more than the experts
  EXPECT_THROW(validate(g), Error);
}

void gradient_check(const GptConfig& g, Recompute recompute) {
  SCOPED_TRACE(::testing::Message() << describe(g) << " recompute " << name(recompute));
  const int64_t B = 2, T = 6;
  MemoryTracker tracker;
  GptModel model(g, &tracker, nullptr, nullptr, recompute);
  model.init_params(3);
  // Norm weights away from 1 so their gradients are tested in general position.
  Rng rng(99);
  const ParamTable& table = model.param_table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].shape.size() == 1) {
      for (float& x : model.param(static_cast<int>(i))) x += static_cast<float>(0.1 * rng.normal());
    }
  }
  const auto tokens = random_tokens(B * T, g.vocab, 4);
  const auto targets = random_tokens(B * T, g.vocab, 5);
  model.zero_grads();
  const float loss = model.forward(tokens, targets, B, T);
  model.backward();
  std::vector<double> p(model.params().begin(), model.params().end());
  auto ref_loss = [&] { return ref::llama_loss(g, table, p, tokens, targets, B, T); };
  // fp32 forward against double: 2e-6 relative (sums over C, F and T).
  EXPECT_NEAR(loss, ref_loss(), 2e-6 * ref_loss());
  const double h = 1e-5;
  for (size_t i = 0; i < table.size(); ++i) {
    const ParamTensor& t = table[i];
    std::span<float> grad = model.grad(static_cast<int>(i));
    Rng pick(1000 + i);
    // |analytic - numeric| <= 1e-5 x the tensor's largest gradient (fp32 backward against a
    // double central difference, h = 1e-5), as GPT's check.
    const test::SpotCheck c =
        test::spot_check_gradient(grad, t.offset, ref_loss, p, h, pick, t.name);
    const double scale = c.scale, diff = c.max_diff;
    std::printf("%-18s %9lld %12.3e %12.3e\n", t.name.c_str(), static_cast<long long>(t.count),
                scale, diff);
  }
}

TEST(LlamaModel, GradientOfEveryTensorMatchesDoubleReference) {
  gradient_check(small_llama(2, false), Recompute::none);  // grouped-query, untied head
  gradient_check(small_llama(1, true), Recompute::none);   // multi-query, tied head
  gradient_check(small_llama(4, false), Recompute::full);  // multi-head, full recompute
}

TEST(LlamaModel, EveryRecomputeModeGivesTheSameLossAndGradientsBitForBit) {
  const GptConfig g = small_llama(2, false);
  const int64_t B = 2, T = 8;
  const auto tokens = random_tokens(B * T, g.vocab, 6);
  const auto targets = random_tokens(B * T, g.vocab, 7);
  std::vector<float> first;
  float first_loss = 0;
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    MemoryTracker tracker;
    GptModel model(g, &tracker, nullptr, nullptr, r);
    model.init_params(5);
    model.zero_grads();
    const float loss = model.forward(tokens, targets, B, T);
    model.backward();
    const std::vector<float> grads(model.grads().begin(), model.grads().end());
    if (first.empty()) {
      first = grads;
      first_loss = loss;
      continue;
    }
    EXPECT_EQ(loss, first_loss) << name(r);
    EXPECT_EQ(grads, first) << name(r);
  }
}

TEST(LlamaModel, LogitsAtOrBeforeTDoNotDependOnLaterTokens) {
  const GptConfig g = small_llama(2, false);
  const int64_t T = 8;
  MemoryTracker tracker;
  GptModel model(g, &tracker);
  model.init_params(8);
  auto tokens = random_tokens(T, g.vocab, 9);
  model.forward(tokens, {}, 1, T);
  const std::vector<float> before(model.activations().head().logits,
                                  model.activations().head().logits + T * g.vocab);
  tokens[T - 1] = (tokens[T - 1] + 1) % static_cast<int32_t>(g.vocab);
  model.forward(tokens, {}, 1, T);
  const float* after = model.activations().head().logits;
  for (int64_t i = 0; i < (T - 1) * g.vocab; ++i) EXPECT_EQ(after[i], before[i]) << i;
}

}  // namespace
}  // namespace dtrain::model
