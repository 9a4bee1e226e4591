// Room data/ (dtrain::data): token sources, token files, the tokenizer, batches; includes core
// only (src/dtrain/layers.txt).
//
// Training data: a byte-level tokenizer over any text file, the default corpus that ships in
// data/, a train/validation split, and deterministic batches read from a TokenSource (int32
// tokens in memory, or a mapped token file: data/token_file.h). The sampler's whole state is a
// small struct, so a checkpoint can save and restore it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/data/token_source.h"

namespace dtrain::data {

inline constexpr int64_t kByteVocab = 256;  // token = byte value

std::vector<int32_t> tokenize_bytes(std::string_view text);
std::string detokenize_bytes(std::span<const int32_t> tokens);

// The default corpus: $DTRAIN_DATA_DIR/corpus.txt when that is set, else share/dtrain/corpus.txt
// of the installed tree holding this binary, else data/corpus.txt of the source tree it was
// built from (see data/README.md).
std::string default_corpus_path();

// The bytes of `path` as tokens. Throws Error naming --data when the file is missing,
// unreadable or empty.
std::vector<int32_t> load_byte_tokens(const std::string& path);

struct TokenSplit {
  TokenSource train;   // the first 1 - val_fraction of the tokens
  TokenSource val;     // the rest
  std::string source;  // file name, for messages
};
// Splits at floor(N * (1 - val_fraction)); val_fraction in (0, 1). The two halves share the
// tokens' storage.
TokenSplit split_train_val(TokenSource tokens, double val_fraction, std::string source);
TokenSplit split_train_val(std::vector<int32_t> tokens, double val_fraction, std::string source);
// Throws Error naming `flag` (--seq-length, or --context when T is the context) and the file when
// either split has fewer than T + 1 tokens (a window of T inputs and its T shifted targets).
void check_split_fits(const TokenSplit& split, int64_t T, std::string_view flag = "--seq-length");

// A (B, T) batch: targets are the inputs shifted by one token.
struct Batch {
  int64_t batch = 0;             // B
  int64_t seq = 0;               // T
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
  void resize(int64_t B, int64_t T);
};

struct SamplerState {
  uint64_t rng_state = 0;
  int64_t batches_drawn = 0;
};

// Training batches: each row is a window starting at a uniformly random offset, drawn from
// Rng(seed). Same seed, same batches. A data-parallel run draws the global batch here and
// gives each rank its rows, so it sees the serial run's data.
class BatchSampler {
 public:
  // `tokens` must outlive the sampler when it is a view (a span).
  BatchSampler(TokenSource tokens, int64_t B, int64_t T, uint64_t seed);
  BatchSampler(std::span<const int32_t> tokens, int64_t B, int64_t T, uint64_t seed)
      : BatchSampler(TokenSource(tokens), B, T, seed) {}
  void next(Batch& batch);
  SamplerState state() const { return state_; }
  void set_state(const SamplerState& state) { state_ = state; }

 private:
  TokenSource tokens_;
  int64_t B_, T_;
  SamplerState state_;
};

// Validation batch `index`: fixed windows, row b of batch k starting at ((k*B + b) * T)
// modulo the last valid start, so every evaluation sees the same tokens.
void eval_batch(const TokenSource& tokens, int64_t index, Batch& batch);
inline void eval_batch(std::span<const int32_t> tokens, int64_t index, Batch& batch) {
  eval_batch(TokenSource(tokens), index, batch);
}

}  // namespace dtrain::data
