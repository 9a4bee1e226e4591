// The KV-cache decoder against GptModel's full forward (a separate code path: sgemm over all
// positions, the batched attention kernel): the logits of every position agree to within fp32
// reordering, and greedy decoding is the argmax of the full forward at every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/memory.h"
#include "dtrain/core/rng.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/gpt_decoder.h"

namespace dtrain::model {
namespace {

// A model with weights well away from the initialisation's (attention far from uniform, LayerNorm
// gains and biases not 1 and 0), so every part of the block shows in the logits.
void perturb(GptModel& m, uint64_t seed) {
  m.init_params(seed);
  Rng rng(seed + 1);
  for (float& p : m.params()) p += static_cast<float>(0.2 * rng.normal());
}

std::vector<int32_t> tokens_of(int64_t n, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  return t;
}

// Largest |decoder - full| over every logit of every position, and the largest |logit|.
struct Diff {
  double max_abs = 0, max_logit = 0;
};
Diff compare(const GptConfig& c, uint64_t seed) {
  MemoryTracker tracker;
  GptModel model(c, &tracker);
  perturb(model, seed);
  const int64_t T = c.context;
  const std::vector<int32_t> tokens = tokens_of(T, c.vocab, seed + 2);
  model.forward(tokens, {}, 1, T);
  const float* full = model.activations().head().logits;  // (1, T, V)
  GptDecoder decoder(c, model.params());
  Diff d;
  for (int64_t t = 0; t < T; ++t) {
    const std::span<const float> logits = decoder.step(tokens[static_cast<size_t>(t)]);
    for (int64_t v = 0; v < c.vocab; ++v) {
      d.max_abs =
          std::max(d.max_abs, std::abs(static_cast<double>(logits[v]) - full[t * c.vocab + v]));
      d.max_logit = std::max(d.max_logit, std::abs(static_cast<double>(full[t * c.vocab + v])));
    }
  }
  return d;
}

TEST(GptDecoder, KvCacheLogitsEqualTheFullForwardAtEveryPosition) {
  // The two paths sum the same products in different orders (sgemm's blocking over all
  // positions vs one row; the attention kernel vs the cached loop), each fp32 sum of K terms
  // rounding by at most about K * 2^-24 of its magnitude, K <= 4C = 128 here: 8e-6 relative per
  // op, a few ops deep. 1e-5 of the largest logit covers that; a wrong cache row, head split or
  // position is of the order of the logits themselves.
  for (const GptConfig& c :
       {GptConfig{.vocab = 256, .context = 24, .layers = 2, .heads = 4, .channels = 32},
        GptConfig{.vocab = 301, .context = 16, .layers = 3, .heads = 2, .channels = 16}}) {
    const Diff d = compare(c, 11);
    std::cout << describe(c) << ": max |decoder - full| " << d.max_abs << ", logits up to "
              << d.max_logit << "\n";
    EXPECT_GT(d.max_logit, 1.0) << describe(c);  // the logits are not all near 0
    EXPECT_LE(d.max_abs, 1e-5 * d.max_logit)
        << describe(c) << ": max |diff| " << d.max_abs << " of logits up to " << d.max_logit;
  }
}

// The Llama family: RMSNorm, q and k rotated at each position, a cache of the K/V heads only
// (grouped-query and multi-query), SwiGLU and the untied or tied head, against the full forward
// with the same bound (K <= 2F = 192 terms a sum here: 1.1e-5 relative per op).
TEST(GptDecoder, LlamaKvCacheLogitsEqualTheFullForwardAtEveryPosition) {
  for (const int64_t kv : {1, 2}) {
    for (const bool tied : {false, true}) {
      GptConfig c{.vocab = 256, .context = 24, .layers = 2, .heads = 4, .channels = 32};
      c.family = ModelFamily::llama;
      c.kv_heads = kv;
      c.ffn_hidden = 96;
      c.rope_theta = 100.0f;
      c.tie_embeddings = tied;
      const Diff d = compare(c, 13);
      std::cout << describe(c) << ": max |decoder - full| " << d.max_abs << ", logits up to "
                << d.max_logit << "\n";
      EXPECT_GT(d.max_logit, 1.0) << describe(c);
      EXPECT_LE(d.max_abs, 2e-5 * d.max_logit) << describe(c);
    }
  }
}

// Routed blocks (GPT's GELU experts and Mixtral's SwiGLU ones, top-2 of 4, every block or every
// second): each position's token through the router and its experts alone equals the full
// forward's dropless routing of all positions, within the same bound.
TEST(GptDecoder, MoeLogitsEqualTheFullForwardAtEveryPosition) {
  for (const bool llama : {false, true}) {
    for (const int64_t every : {1, 2}) {
      GptConfig c{.vocab = 256, .context = 24, .layers = 2, .heads = 4, .channels = 32};
      c.moe = {.experts = 4, .top_k = 2, .every = every};
      if (llama) {
        c.family = ModelFamily::llama;
        c.kv_heads = 2;
        c.ffn_hidden = 48;
      }
      const Diff d = compare(c, 17);
      std::cout << describe(c) << ": max |decoder - full| " << d.max_abs << ", logits up to "
                << d.max_logit << "\n";
      EXPECT_GT(d.max_logit, 1.0) << describe(c);
      EXPECT_LE(d.max_abs, 2e-5 * d.max_logit) << describe(c);
    }
  }
}

TEST(GptDecoder, GreedyDecodingIsTheFullForwardsArgmaxAtEveryStep) {
  const GptConfig c{.vocab = 256, .context = 20, .layers = 2, .heads = 4, .channels = 32};
  MemoryTracker tracker;
  GptModel model(c, &tracker);
  perturb(model, 5);
  GptDecoder decoder(c, model.params());
  std::vector<int32_t> seq = {65};
  std::span<const float> logits = decoder.step(seq[0]);
  while (static_cast<int64_t>(seq.size()) < c.context) {
    const auto next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    seq.push_back(next);
    const auto T = static_cast<int64_t>(seq.size());
    model.forward(seq, {}, 1, T);
    const float* full = model.activations().head().logits + (T - 2) * c.vocab;  // row of T-2
    EXPECT_EQ(std::max_element(full, full + c.vocab) - full, next) << "step " << T - 1;
    if (T < c.context) logits = decoder.step(next);
  }
  decoder.step(seq.back());  // the last position: the cache is full now
  EXPECT_EQ(decoder.position(), c.context);
  EXPECT_THROW(decoder.step(1), Error);
  EXPECT_THROW(GptDecoder(c, model.params()).step(256), Error);
}

}  // namespace
}  // namespace dtrain::model
