// One step's gradients under --precision bf16 against fp32's, tensor by tensor, on the bench
// preset (same parameters, same batch): the relative error ||g_bf16 - g_fp32|| / ||g_fp32|| of
// each tensor is printed and bounded.
//
// The bound. Rounding an operand to bf16 perturbs it by a relative 2^-8 at most (half an ulp
// with 8 significant bits), so a product of two rounded operands is off by at most
// 2 * 2^-8 = 2^-7 relative to first order, and the fp32 sum adds only ~K * 2^-24. A gradient is
// made by a chain of such products: the forward of every block (4 linear layers and
// attention's 2 products in each, 6 per block) and the head, then the same chain back, so
// through at most D = 2 * (6 * L + 1) rounded products. To first order their relative errors
// add: D * 2^-7 for a chain whose other operations do not amplify them (their relative
// condition number is ~1: LayerNorm, GELU, softmax and cross-entropy are smooth and well scaled
// at initialisation). With L = 4, D = 50 and the bound is 50 / 128 = 0.39. Independent
// roundings add like a random walk rather than in line, so the errors seen are far below (about
// 1e-3 to 1e-2); the test also checks the whole gradient's relative error against the
// random-walk figure sqrt(D) * 2^-7 = 0.055.
//
// Mixed precision (the engine's --precision bf16) also keeps the weights and the gradient in
// bf16: every other weight the forward reads (the LayerNorm scales and shifts, the biases, the
// embeddings) is rounded once, and the stored gradient is rounded once more. Each adds at most
// 2^-8 relative to what it perturbs; counting each like a rounded product (2^-7), the LayerNorm
// scales of the chain (2 per block and the final one, forward and back: 2 * (2L + 1)) and the
// stored gradient add 2 * (2L + 1) + 1 to D: D = 69 for L = 4, bounds 0.54 and 0.065.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/core/bf16.h"
#include "dtrain/core/memory.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "random_tokens.h"

namespace dtrain::model {
namespace {

std::vector<float> gradients(Precision precision, const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& targets, int64_t B, int64_t T,
                             const GptConfig& g, float* loss, bool stored_in_bf16 = false) {
  MemoryTracker tracker;
  GptModel m(g, &tracker);
  m.init_params(7);
  m.set_precision(precision);
  if (stored_in_bf16) {
    for (float& p : m.params()) p = round_to_bf16(p);
  }
  m.zero_grads();
  *loss = m.forward(tokens, targets, B, T);
  m.backward();
  if (stored_in_bf16) {
    for (float& d : m.grads()) d = round_to_bf16(d);
  }
  return {m.grads().begin(), m.grads().end()};
}

void expect_within_the_chain_bound(bool mixed) {
  const GptPreset& preset = gpt_preset("bench");
  const GptConfig& g = preset.config;
  const int64_t B = preset.batch, T = g.context;
  const auto seq = testing::random_tokens(B * (T + 1), g.vocab, 11);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      tokens[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * (T + 1) + t)];
      targets[static_cast<size_t>(b * T + t)] = seq[static_cast<size_t>(b * (T + 1) + t + 1)];
    }
  }
  float loss32 = 0, loss16 = 0;
  const auto g32 = gradients(Precision::fp32, tokens, targets, B, T, g, &loss32);
  const auto g16 = gradients(Precision::bf16, tokens, targets, B, T, g, &loss16, mixed);
  const auto L = static_cast<double>(g.layers);
  const double D = 2.0 * (6.0 * L + 1.0) + (mixed ? 2.0 * (2.0 * L + 1.0) + 1.0 : 0.0);
  const double chain_bound = D * std::ldexp(1.0, -7);
  const double walk_bound = std::sqrt(D) * std::ldexp(1.0, -7);
  // The loss is one forward chain: D / 2 products.
  EXPECT_LE(std::fabs(loss16 - loss32) / loss32, D / 2 * std::ldexp(1.0, -7));

  MemoryTracker tracker;
  const GptModel shape(g, &tracker);
  const ParamTable& table = shape.param_table();
  double all_diff = 0, all_ref = 0, worst = 0;
  std::printf("%s vs fp32 gradients (bench preset, one step; bound %.3f per tensor):\n",
              mixed ? "mixed precision (bf16 products, weights and gradient)" : "bf16 products",
              chain_bound);
  for (size_t i = 0; i < table.size(); ++i) {
    double diff = 0, ref = 0;
    for (int64_t k = 0; k < table[i].count; ++k) {
      const auto e = static_cast<size_t>(table[i].offset + k);
      const double d = static_cast<double>(g16[e]) - static_cast<double>(g32[e]);
      diff += d * d;
      ref += static_cast<double>(g32[e]) * g32[e];
    }
    all_diff += diff;
    all_ref += ref;
    const double rel = ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
    worst = std::max(worst, rel);
    std::printf("  %-22s %.2e\n", table[i].name.c_str(), rel);
    EXPECT_LE(rel, chain_bound) << table[i].name;
    EXPECT_GT(rel, 0.0) << table[i].name << ": bf16 changed nothing, so it did not run";
  }
  const double all = std::sqrt(all_diff / all_ref);
  std::printf(
      "  whole gradient %.2e (random-walk bound %.3f), worst tensor %.2e; loss %.6f vs %.6f\n", all,
      walk_bound, worst, loss16, loss32);
  EXPECT_LE(all, walk_bound);
}

TEST(Bf16Gradients, EachTensorWithinTheChainBound) {
  expect_within_the_chain_bound(false);
}

// What the engine's optimizer reads under --precision bf16.
TEST(Bf16Gradients, MixedPrecisionGradientsWithinTheChainBound) {
  expect_within_the_chain_bound(true);
}

// Mixed precision keeps a block's matrix-product inputs in bf16 (activations.h: PackedLayer). The
// products round those operands to bf16 anyway, so the stored copies change no bit: one step of
// the bench preset, every recompute mode and a team of 2, on packed and on fp32 activations,
// gives the same loss and gradients, and the packed blocks hold fewer bytes.
TEST(Bf16Gradients, ActivationsStoredInBf16ChangeNoBit) {
  const GptPreset& preset = gpt_preset("bench");
  const GptConfig& g = preset.config;
  const int64_t B = 2, T = g.context;
  const auto tokens = testing::random_tokens(B * T, g.vocab, 3);
  const auto targets = testing::random_tokens(B * T, g.vocab, 4);
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    SCOPED_TRACE(std::string(name(mode)));
    std::vector<float> grads[2];
    float losses[2] = {};
    int64_t block_bytes[2] = {};
    for (int packed = 0; packed < 2; ++packed) {
      MemoryTracker tracker, acts_tracker;
      ThreadTeam team(2);
      GptModel m(g, &tracker, nullptr, &team, mode);
      m.init_params(7);
      m.set_precision(Precision::bf16);
      GptActivations acts(g, B, T, &acts_tracker, {0, g.layers}, true, true, 1, false, mode,
                          packed == 1);
      GptWorkspace ws(g, B, T, &tracker, 2, 1, false, mode, true);
      m.zero_grads();
      losses[packed] = m.forward(acts, ws, tokens, targets);
      m.backward(acts, ws);
      grads[packed].assign(m.grads().begin(), m.grads().end());
      block_bytes[packed] = acts_tracker.current_bytes(MemoryTag::activations);
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_TRUE(grads[0] == grads[1]) << "packed activations changed the gradients";
    if (mode == Recompute::full) {
      EXPECT_EQ(block_bytes[1], block_bytes[0]) << "full recompute keeps only the fp32 input";
    } else {
      EXPECT_LT(block_bytes[1], block_bytes[0]);
    }
    std::printf("  recompute %-9s activations %lld bytes fp32, %lld packed\n",
                std::string(name(mode)).c_str(), static_cast<long long>(block_bytes[0]),
                static_cast<long long>(block_bytes[1]));
  }
}

}  // namespace
}  // namespace dtrain::model
