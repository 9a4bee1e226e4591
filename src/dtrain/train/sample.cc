// Sampling: the token choice (greedy, temperature, top-k) and the generation loop with its
// sliding window.
#include "dtrain/train/sample.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "dtrain/core/check.h"
#include "dtrain/model/gpt_decoder.h"
#include "dtrain/train/data.h"
#include "dtrain/train/tokenizer.h"

namespace dtrain::train {

int32_t pick_token(std::span<const float> logits, float temperature, int64_t top_k, Rng& rng) {
  const auto n = static_cast<int64_t>(logits.size());
  DTRAIN_CHECK(n > 0, "pick_token: no logits");
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties by the lower token, so the order (and greedy) is deterministic.
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (temperature == 0) return order.front();
  const int64_t k = top_k > 0 ? std::min(top_k, n) : n;
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[order.front()];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    p[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / temperature);
    sum += p[i];
  }
  double u = rng.uniform() * sum;
  for (int64_t i = 0; i < k; ++i) {
    u -= p[i];
    if (u < 0) return order[i];
  }
  return order[k - 1];  // u within rounding of sum
}

SampleResult sample(const model::GptConfig& config, std::span<const float> params,
                    const SampleOptions& o) {
  DTRAIN_CHECK(!o.prompt.empty(), "--prompt must hold at least one byte");
  DTRAIN_CHECK(o.tokens > 0, "--tokens must be positive (got ", o.tokens, ")");
  DTRAIN_CHECK(std::isfinite(o.temperature) && o.temperature >= 0,
               "--temperature must be a non-negative number, 0 for greedy (got ", o.temperature,
               ")");
  DTRAIN_CHECK(o.top_k >= 0, "--top-k must not be negative, 0 for all tokens (got ", o.top_k, ")");
  DTRAIN_CHECK(o.tokenizer == nullptr || o.tokenizer->vocab() == config.vocab, "--tokenizer has ",
               o.tokenizer ? o.tokenizer->vocab() : 0,
               " pieces but the checkpoint's model has a vocabulary of ", config.vocab,
               ": sample with the tokenizer whose token file trained it");
  const std::vector<int32_t> prompt =
      o.tokenizer ? o.tokenizer->encode(o.prompt) : tokenize_bytes(o.prompt);
  DTRAIN_CHECK(!prompt.empty(), "--prompt encodes to no tokens");
  DTRAIN_CHECK(static_cast<int64_t>(prompt.size()) < config.context, "--prompt of ", prompt.size(),
               o.tokenizer ? " tokens" : " bytes", " does not fit the model's context of ",
               config.context, " tokens (one is left for the first generated token)");
  // Bytes: only the logits of tokens 0..255 are candidates.
  const auto candidates =
      static_cast<size_t>(o.tokenizer ? config.vocab : std::min(config.vocab, kByteVocab));
  model::GptDecoder decoder(config, params);
  Rng rng(o.seed);
  SampleResult result;
  std::vector<int32_t> all = prompt;
  const auto start = std::chrono::steady_clock::now();
  std::span<const float> logits;
  for (int32_t t : prompt) logits = decoder.step(t);
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int32_t next = pick_token(logits.first(candidates), o.temperature, o.top_k, rng);
    result.tokens.push_back(next);
    all.push_back(next);
    if (i + 1 == o.tokens) break;
    if (decoder.position() == config.context) {
      // The context is full: keep the last half of it and rebuild the cache from there.
      decoder.reset();
      ++result.window_restarts;
      const int64_t keep = std::max<int64_t>(1, config.context / 2);
      for (auto it = all.end() - keep; it != all.end(); ++it) logits = decoder.step(*it);
    } else {
      logits = decoder.step(next);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.text = o.tokenizer ? o.tokenizer->decode(result.tokens) : detokenize_bytes(result.tokens);
  return result;
}

}  // namespace dtrain::train
