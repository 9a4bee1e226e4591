// Tokenizer throughput: `dtrain bench tokenize` trains a SentencePiece tokenizer on a corpus
// (by default the repository's data/corpus.txt), then encodes a text of about --mb MB made by
// repeating that corpus into an llm.c token file, beside a plain read of the same file.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/data/tokenizer.h"

namespace dtrain::bench {

struct TokenizeBenchOptions {
  std::string corpus;    // empty: the default corpus (data/data.h)
  int64_t vocab = 1024;  // data/corpus.txt makes at most 1960 BPE pieces
  data::TokenizerType type = data::TokenizerType::bpe;
  int64_t text_mb = 100;  // size of the encoded text, MB (1e6 bytes), the corpus repeated
};

struct TokenizeBenchReport {
  TokenizeBenchOptions options;
  std::string corpus;
  data::TokenizerTrainReport trained;
  data::EncodeReport encoded;           // one thread
  data::EncodeReport encoded_parallel;  // one per hardware thread; not run when that is one
  double read_mb_per_s = 0;  // reading the same text file in the same chunks, nothing else
  bool round_trip = false;   // decode(encode(corpus)) == corpus
};

// With `rows`, each part's lines of the report go there as soon as that part is measured (the
// default run takes a minute or more), in print_report's order. The temporary files are removed
// on return, on an error, and on SIGINT or SIGTERM (bench/scratch_dir.h).
TokenizeBenchReport run_tokenize_bench(const TokenizeBenchOptions& options,
                                       std::ostream* rows = nullptr);
// The report, part by part: training and the round trip, the plain read, encoding on one thread
// and on every hardware thread (omitted where that is one).
void print_trained(const TokenizeBenchReport& report, std::ostream& out);
void print_read(const TokenizeBenchReport& report, std::ostream& out);
void print_encoded(const TokenizeBenchReport& report, std::ostream& out);
void print_encoded_parallel(const TokenizeBenchReport& report, std::ostream& out);
void print_report(const TokenizeBenchReport& report, std::ostream& out);
nlohmann::json to_json(const TokenizeBenchReport& report);

}  // namespace dtrain::bench
