// Room infer/ (dtrain::infer): sampling with the KV cache, beside train/; includes data, model
// and core.
//
// Text generation from a trained model: the serial KV-cache decoder (model/gpt_decoder.h) on the
// weights of a checkpoint of any layout, the byte vocabulary (tokens 0..255 are bytes) or a
// SentencePiece tokenizer (data/tokenizer.h), and temperature / top-k sampling from Rng(seed):
// the same seed gives the same text.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/rng.h"
#include "dtrain/model/gpt_config.h"

namespace dtrain::data {
class Tokenizer;
}  // namespace dtrain::data

namespace dtrain::infer {

struct SampleOptions {
  std::string prompt = "\n";  // bytes; at least one
  int64_t tokens = 200;       // to generate
  float temperature = 1.0f;   // 0: greedy (the most likely token, the lowest on a tie)
  int64_t top_k = 0;          // sample among the k most likely (0: all)
  uint64_t seed = 1;
  // Encodes the prompt and decodes the tokens when set (its vocabulary must be the model's);
  // else tokens are bytes. Not owned.
  const data::Tokenizer* tokenizer = nullptr;
  // Called with the prompt, then with the text of the tokens as they are generated (those
  // pieces concatenate to SampleResult::text), so a caller can print while the model runs. A token
  // that ends inside a multi-byte character is held until the character is complete. Optional.
  std::function<void(std::string_view)> on_text;
};

struct SampleResult {
  std::vector<int32_t> tokens;  // generated, after the prompt
  std::string text;             // the generated tokens, decoded
  int64_t window_restarts = 0;  // times the context filled and the cache was rebuilt
  double seconds = 0;           // generation time, the prompt's prefill included
};

// One token from `logits` (every entry a candidate): greedy at temperature 0, else drawn from
// softmax(logits / temperature) over the top_k largest (all when 0), with one rng.uniform().
int32_t pick_token(std::span<const float> logits, float temperature, int64_t top_k, Rng& rng);

// Whether `run_data`, the --data file a checkpoint's run trained on (its run record's name;
// "(default corpus)" for the default), held token ids rather than text: an llm.c token file by
// its magic, or a .bin file with a vocabulary past the bytes when the file is no longer there.
// A model trained on token ids makes no text without the tokenizer that made its file.
bool trained_on_token_ids(const std::string& run_data, int64_t vocab);

// Generates options.tokens tokens after options.prompt (at least one byte: the model has no
// start token); with bytes only the first min(V, 256) logits are candidates, with a tokenizer
// all V. When the context is full the cache is rebuilt
// from the last context / 2 tokens (a sliding window). Throws Error naming --prompt, --tokens,
// --temperature or --top-k for values out of range, and --tokenizer when its vocabulary is not
// the model's.
SampleResult sample(const model::GptConfig& config, std::span<const float> params,
                    const SampleOptions& options);

}  // namespace dtrain::infer
