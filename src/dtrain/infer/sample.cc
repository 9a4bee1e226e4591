// Sampling: the token choice (greedy, temperature, top-k) and the generation loop with its
// sliding window.
#include "dtrain/infer/sample.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string_view>

#include "dtrain/core/check.h"
#include "dtrain/data/data.h"
#include "dtrain/data/token_file.h"
#include "dtrain/data/tokenizer.h"
#include "dtrain/model/gpt_decoder.h"

namespace dtrain::infer {

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

bool trained_on_token_ids(const std::string& run_data, int64_t vocab) {
  const std::filesystem::path path(run_data);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    int32_t magic = 0;
    in.read(reinterpret_cast<char*>(&magic), sizeof magic);
    if (in.gcount() == sizeof magic && magic == data::kLlmcMagic) return true;
  }
  return vocab > data::kByteVocab && path.extension() == ".bin";
}

namespace {

// Hands the text of generated tokens to options.on_text as they come. Bytes pass at once; a
// tokenizer's tokens are decoded in runs, and a run whose text ends in an incomplete UTF-8
// character (byte-fallback pieces of one character come one by one) waits for the next token.
class TextStream {
 public:
  explicit TextStream(const SampleOptions& o) : o_(o) {}

  void add(int32_t token) {
    if (!o_.on_text) return;
    pending_.push_back(token);
    const std::string text =
        o_.tokenizer ? o_.tokenizer->decode(pending_) : data::detokenize_bytes(pending_);
    if (ends_inside_character(text) && pending_.size() < kMaxPending) return;
    o_.on_text(text);
    pending_.clear();
  }

  void finish() {
    if (!o_.on_text || pending_.empty()) return;
    o_.on_text(o_.tokenizer ? o_.tokenizer->decode(pending_) : data::detokenize_bytes(pending_));
    pending_.clear();
  }

 private:
  // A UTF-8 character has at most 4 bytes, so at most 4 byte pieces.
  static constexpr size_t kMaxPending = 4;

  // True when the last bytes of `text` start a UTF-8 character they do not finish, or are the
  // U+FFFD that a decoder writes for such a byte.
  static bool ends_inside_character(std::string_view text) {
    if (text.ends_with("\xEF\xBF\xBD")) return true;
    size_t k = text.size(), continuation = 0;
    while (k > 0 && continuation < 4 && (static_cast<unsigned char>(text[k - 1]) & 0xC0) == 0x80) {
      --k;
      ++continuation;
    }
    if (k == 0) return false;
    const auto lead = static_cast<unsigned char>(text[k - 1]);
    const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return length > 1 && continuation + 1 < length;
  }

  const SampleOptions& o_;
  std::vector<int32_t> pending_;
};

}  // namespace

SampleResult sample(const model::GptConfig& config, std::span<const float> params,
                    const SampleOptions& o) {
  DTRAIN_CHECK(!o.prompt.empty(),
               "--prompt is empty: the model has no start token, so generation needs at least "
               "one character of text to continue; leave --prompt out to start from a newline");
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
      o.tokenizer ? o.tokenizer->encode(o.prompt) : data::tokenize_bytes(o.prompt);
  DTRAIN_CHECK(!prompt.empty(), "--prompt encodes to no tokens");
  DTRAIN_CHECK(static_cast<int64_t>(prompt.size()) < config.context, "--prompt of ", prompt.size(),
               o.tokenizer ? " tokens" : " bytes", " does not fit the model's context of ",
               config.context, " tokens (one is left for the first generated token)");
  // Bytes: only the logits of tokens 0..255 are candidates.
  const auto candidates =
      static_cast<size_t>(o.tokenizer ? config.vocab : std::min(config.vocab, data::kByteVocab));
  model::GptDecoder decoder(config, params);
  Rng rng(o.seed);
  SampleResult result;
  std::vector<int32_t> all = prompt;
  const auto start = std::chrono::steady_clock::now();
  std::span<const float> logits;
  for (int32_t t : prompt) logits = decoder.step(t);
  if (o.on_text) o.on_text(o.prompt);  // the checks passed: the text starts with the prompt
  TextStream stream(o);
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int32_t next = pick_token(logits.first(candidates), o.temperature, o.top_k, rng);
    result.tokens.push_back(next);
    stream.add(next);
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
  stream.finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.text =
      o.tokenizer ? o.tokenizer->decode(result.tokens) : data::detokenize_bytes(result.tokens);
  return result;
}

}  // namespace dtrain::infer
