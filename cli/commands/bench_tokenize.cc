// `dtrain bench tokenize`: SentencePiece training and encoding MB/s; parses the flags into
// bench::TokenizeBenchOptions and prints the report (or JSON).
#include <iostream>
#include <memory>
#include <string>

#include "bench/tokenize_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BenchTokenizeFlags {
  bench::TokenizeBenchOptions options;
  std::string type = "bpe";
  bool json = false;
};

void add_bench_tokenize(CLI::App& bench_app) {
  auto f = std::make_shared<BenchTokenizeFlags>();
  bench::TokenizeBenchOptions& o = f->options;
  CLI::App* cmd = bench_app.add_subcommand(
      "tokenize",
      "SentencePiece tokenizer MB/s: train on a corpus (default: the repository's), then encode "
      "about --mb MB of it repeated into an llm.c token file, beside a plain read of the text");
  cmd->add_option("--corpus", o.corpus, "Text to train on and to repeat (default: data/corpus.txt)")
      ->check(kNotEmpty);
  cmd->add_option("--vocab", o.vocab, "Pieces of the tokenizer (at most 65536)")
      ->capture_default_str()
      ->check(whole_number(1, 65536));
  cmd->add_option("--type", f->type, "Tokenizer model: bpe or unigram")
      ->transform(CLI::CheckedTransformer(std::map<std::string, data::TokenizerType>{
          {"bpe", data::TokenizerType::bpe}, {"unigram", data::TokenizerType::unigram}}))
      ->default_str("bpe");
  cmd->add_option("--mb", o.text_mb, "MB of text to encode (the corpus repeated)")
      ->capture_default_str()
      ->check(whole_number(1, 100000));
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    bench::TokenizeBenchOptions run = f->options;
    run.type = f->type == "bpe" ? data::TokenizerType::bpe : data::TokenizerType::unigram;
    // The table's lines print as each part is measured; with --json they go to stderr as
    // progress, and the JSON document to stdout at the end.
    const bench::TokenizeBenchReport report =
        bench::run_tokenize_bench(run, f->json ? &std::cerr : &std::cout);
    if (f->json) std::cout << with_build(bench::to_json(report)).dump(2) << "\n";
  });
}

const CommandRegistration kRegistration("bench", add_bench_tokenize);

}  // namespace
}  // namespace dtrain::cli
