// Byte tokenizer, corpus loading, split and batch sampling.
#include "dtrain/data/data.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "dtrain/core/check.h"
#include "dtrain/core/rng.h"
#include "dtrain/core/version.h"

namespace dtrain::data {

std::vector<int32_t> tokenize_bytes(std::string_view text) {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string detokenize_bytes(std::span<const int32_t> tokens) {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) text[i] = static_cast<char>(tokens[i] & 0xFF);
  return text;
}

std::string default_corpus_path() {
  namespace fs = std::filesystem;
  std::error_code ec;
  // 1. DTRAIN_DATA_DIR, where the user put the data files.
  if (const char* dir = std::getenv("DTRAIN_DATA_DIR"); dir != nullptr && *dir != '\0') {
    return (fs::path(dir) / "corpus.txt").string();
  }
  // 2. An installed tree: share/dtrain/corpus.txt above the binary holding this code (the
  // dtrain command in bin/, or the Python module a few folders under lib/), so an installed
  // copy is relocatable.
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&default_corpus_path), &info) != 0 &&
      info.dli_fname != nullptr) {
    fs::path dir = fs::weakly_canonical(fs::path(info.dli_fname), ec).parent_path();
    for (int up = 0; up < 5 && !dir.empty(); ++up, dir = dir.parent_path()) {
      const fs::path candidate = dir / "share" / "dtrain" / "corpus.txt";
      if (fs::exists(candidate, ec)) return candidate.string();
      if (dir == dir.parent_path()) break;
    }
  }
  // 3. The source tree this binary was configured from: <root>/data/corpus.txt.
  return (fs::path(std::string(source_dir())) / "data" / "corpus.txt").string();
}

std::vector<int32_t> load_byte_tokens(const std::string& path) {
  std::error_code ec;
  DTRAIN_CHECK(std::filesystem::exists(path, ec), "--data: file '", path, "' does not exist");
  DTRAIN_CHECK(!std::filesystem::is_directory(path, ec), "--data: '", path,
               "' is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  DTRAIN_CHECK(in.good(), "--data: cannot open '", path, "': ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DTRAIN_CHECK(!in.bad(), "--data: error reading '", path, "'");
  DTRAIN_CHECK(!text.empty(), "--data: file '", path, "' is empty");
  return tokenize_bytes(text);
}

TokenSplit split_train_val(TokenSource tokens, double val_fraction, std::string source) {
  DTRAIN_CHECK(val_fraction > 0 && val_fraction < 1, "validation fraction must be in (0, 1) (got ",
               val_fraction, ")");
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * (1.0 - val_fraction));
  TokenSplit split;
  split.train = tokens.slice(0, n_train);
  split.val = tokens.slice(n_train, n);
  split.source = std::move(source);
  return split;
}

TokenSplit split_train_val(std::vector<int32_t> tokens, double val_fraction, std::string source) {
  return split_train_val(TokenSource::owning(std::move(tokens)), val_fraction, std::move(source));
}

void check_split_fits(const TokenSplit& split, int64_t T, std::string_view flag) {
  const auto n_train = static_cast<int64_t>(split.train.size());
  const auto n_val = static_cast<int64_t>(split.val.size());
  DTRAIN_CHECK(n_train >= T + 1 && n_val >= T + 1, flag, " ", T, " is longer than the data: a ",
               "window needs ", T + 1, " tokens, but --data '", split.source, "' has ", n_train,
               " training and ", n_val, " validation tokens (", n_train + n_val,
               " tokens in all); use a longer file or a smaller --seq-length/--context");
}

void Batch::resize(int64_t B, int64_t T) {
  batch = B;
  seq = T;
  inputs.resize(static_cast<size_t>(B * T));
  targets.resize(static_cast<size_t>(B * T));
}

namespace {

void copy_window(const TokenSource& tokens, int64_t start, int64_t T, int32_t* inputs,
                 int32_t* targets) {
  tokens.copy(start, T, inputs);
  tokens.copy(start + 1, T, targets);
}

}  // namespace

BatchSampler::BatchSampler(TokenSource tokens, int64_t B, int64_t T, uint64_t seed)
    : tokens_(std::move(tokens)), B_(B), T_(T), state_{seed, 0} {
  DTRAIN_CHECK(B > 0 && T > 0, "BatchSampler: B and T must be positive (got ", B, ", ", T, ")");
  DTRAIN_CHECK(static_cast<int64_t>(tokens_.size()) >= T + 1, "BatchSampler: ", tokens_.size(),
               " tokens cannot hold a window of ", T + 1);
}

void BatchSampler::next(Batch& batch) {
  batch.resize(B_, T_);
  Rng rng(state_.rng_state);
  const auto starts = static_cast<uint64_t>(static_cast<int64_t>(tokens_.size()) - T_);
  for (int64_t b = 0; b < B_; ++b) {
    const auto start = static_cast<int64_t>(rng.uniform_int(starts));
    copy_window(tokens_, start, T_, batch.inputs.data() + b * T_, batch.targets.data() + b * T_);
  }
  state_.rng_state = rng.state();
  ++state_.batches_drawn;
}

void eval_batch(const TokenSource& tokens, int64_t index, Batch& batch) {
  const int64_t B = batch.batch, T = batch.seq;
  const int64_t starts = static_cast<int64_t>(tokens.size()) - T;  // valid starts: 0 .. starts-1
  DTRAIN_CHECK(B > 0 && T > 0 && starts > 0, "eval_batch: ", tokens.size(),
               " tokens cannot hold a window of ", T + 1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = ((index * B + b) * T) % starts;
    copy_window(tokens, start, T, batch.inputs.data() + b * T, batch.targets.data() + b * T);
  }
}

}  // namespace dtrain::data
