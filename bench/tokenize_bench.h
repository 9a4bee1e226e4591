// Tokenizer throughput: `dtrain bench tokenize` trains a SentencePiece tokenizer on a corpus
// (by default the repository's data/corpus.txt), then encodes a text of about --mb MB made by
// repeating that corpus into an llm.c token file, beside a plain read of the same file.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/train/tokenizer.h"

namespace dtrain::bench {

struct TokenizeBenchOptions {
  std::string corpus;    // empty: the default corpus (train/data.h)
  int64_t vocab = 1024;  // data/corpus.txt makes at most 1960 BPE pieces
  train::TokenizerType type = train::TokenizerType::bpe;
  int64_t text_mb = 100;  // size of the encoded text, MB (1e6 bytes), the corpus repeated
};

struct TokenizeBenchReport {
  TokenizeBenchOptions options;
  std::string corpus;
  train::TokenizerTrainReport trained;
  train::EncodeReport encoded;           // one thread
  train::EncodeReport encoded_parallel;  // one per hardware thread; not run when that is one
  double read_mb_per_s = 0;  // reading the same text file in the same chunks, nothing else
  bool round_trip = false;   // decode(encode(corpus)) == corpus
};

TokenizeBenchReport run_tokenize_bench(const TokenizeBenchOptions& options);
void print_report(const TokenizeBenchReport& report, std::ostream& out);
nlohmann::json to_json(const TokenizeBenchReport& report);

}  // namespace dtrain::bench
