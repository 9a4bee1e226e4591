// `dtrain tokenize`: trains a SentencePiece tokenizer on a text file (--train), or encodes a text
// file into an llm.c token file with one (--model IN OUT). Parsing and printing only.
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/data/tokenizer.h"
#include "file_roles.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct TokenizeFlags {
  std::string train, model, input, output;
  int64_t vocab = 4096;
  int threads = 0;
  std::string type = "bpe";
  bool json = false;
};

void run_train(const TokenizeFlags& f) {
  const data::TokenizerTrainReport r = data::train_tokenizer(
      {.corpus = f.train,
       .model = f.model,
       .vocab = f.vocab,
       .type = f.type == "bpe" ? data::TokenizerType::bpe : data::TokenizerType::unigram});
  const double mb_per_s = static_cast<double>(r.corpus_bytes) / 1e6 / r.seconds;
  const std::string& type = f.type;
  if (f.json) {
    std::cout << with_build({{"corpus", f.train},
                             {"model", f.model},
                             {"type", type},
                             {"vocab", r.vocab},
                             {"corpus_bytes", r.corpus_bytes},
                             {"seconds", r.seconds},
                             {"mb_per_s", mb_per_s}})
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "tokenize: trained a " << type << " tokenizer of " << r.vocab << " pieces on "
            << f.train << " (" << r.corpus_bytes << " bytes) in " << r.seconds << " s (" << mb_per_s
            << " MB/s); wrote " << f.model << "\n";
}

void run_encode(const TokenizeFlags& f) {
  const data::Tokenizer tokenizer(f.model, "--model");
  const data::EncodeReport r = data::encode_file(tokenizer, f.input, f.output, f.threads);
  const double mb_per_s = static_cast<double>(r.input_bytes) / 1e6 / r.seconds;
  if (f.json) {
    std::cout << with_build({{"model", f.model},
                             {"vocab", tokenizer.vocab()},
                             {"input", f.input},
                             {"output", f.output},
                             {"input_bytes", r.input_bytes},
                             {"tokens", r.tokens},
                             {"threads", r.threads},
                             {"bytes_per_token",
                              static_cast<double>(r.input_bytes) / static_cast<double>(r.tokens)},
                             {"seconds", r.seconds},
                             {"mb_per_s", mb_per_s}})
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "tokenize: " << f.input << " (" << r.input_bytes << " bytes) -> " << f.output << ": "
            << r.tokens << " tokens ("
            << static_cast<double>(r.input_bytes) / static_cast<double>(r.tokens)
            << " bytes/token) in " << r.seconds << " s (" << mb_per_s << " MB/s, " << r.threads
            << " threads)\n"
            << "train on it with: dtrain train --data " << f.output << " --vocab "
            << tokenizer.vocab() << "\n";
}

void add_tokenize(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Train a SentencePiece tokenizer (--train CORPUS --vocab N --model OUT.model), or encode a "
      "text file into an llm.c token file (--model M.model IN.txt OUT.bin) for "
      "`dtrain train --data OUT.bin --vocab N` (docs/data.md)");
  auto* train_opt =
      cmd->add_option("--train", f->train, "Text file to train a tokenizer on")->check(kNotEmpty);
  cmd->add_option("--model", f->model,
                  "The tokenizer's .model file: written with --train, read when encoding")
      ->required()
      ->check(kNotEmpty);
  auto* vocab = cmd->add_option("--vocab", f->vocab,
                                "Pieces of the tokenizer to train (at most 65536: uint16 tokens)")
                    ->capture_default_str()
                    ->check(whole_number(1, std::numeric_limits<int32_t>::max()));
  auto* type = cmd->add_option("--type", f->type, "Tokenizer model: bpe or unigram")
                   ->check(CLI::IsMember({"bpe", "unigram"}))
                   ->capture_default_str();
  auto* input = cmd->add_option("input", f->input, "Text file to encode")->check(kNotEmpty);
  auto* output =
      cmd->add_option("output", f->output, "llm.c token file to write")->check(kNotEmpty);
  auto* threads = cmd->add_option("--threads", f->threads,
                                  "Threads that encode (0: one per hardware thread); the output "
                                  "is the same for any count")
                      ->capture_default_str()
                      ->check(whole_number(0, 1024));
  cmd->add_flag("--json", f->json, "Print the figures as JSON");
  cmd->callback([f, train_opt, vocab, type, threads, input, output, cmd] {
    if (train_opt->count() > 0) {
      refuse_outputs_that_are_inputs(*cmd, {{"--train", f->train}}, {{"--model", f->model}});
      DTRAIN_CHECK(threads->count() == 0,
                   "--threads is for encoding; training runs on one thread (reproducible models)");
      DTRAIN_CHECK(input->count() == 0, "tokenize --train takes no input/output files (got ",
                   f->input, "): train first, then encode with --model ", f->model, " IN OUT");
      run_train(*f);
      return;
    }
    DTRAIN_CHECK(vocab->count() == 0 && type->count() == 0,
                 "--vocab and --type are for training: give --train CORPUS too, or drop them "
                 "(encoding takes the vocabulary from --model)");
    DTRAIN_CHECK(input->count() > 0 && output->count() > 0, "tokenize --model ", f->model,
                 " needs an input text file and an output token file (dtrain tokenize --model "
                 "M.model IN.txt OUT.bin), or --train CORPUS to train the tokenizer");
    refuse_outputs_that_are_inputs(*cmd, {{"--model", f->model}, {"input", f->input}},
                                   {{"output", f->output}});
    run_encode(*f);
  });
}

const CommandRegistration kRegistration("", add_tokenize);

}  // namespace
}  // namespace dtrain::cli
