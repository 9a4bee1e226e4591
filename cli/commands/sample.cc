// `dtrain sample`: generates text from a checkpoint (saved by any layout; its shards are
// reassembled into the serial weights) with the KV-cache decoder, in bytes or, with
// --tokenizer, in a SentencePiece model's tokens. Parsing and printing only.
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "command_registry.h"
#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/core/check.h"
#include "dtrain/data/tokenizer.h"
#include "dtrain/infer/sample.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct SampleFlags {
  std::string checkpoint;
  std::string tokenizer;
  infer::SampleOptions options;
  int64_t seed = 1;
  bool json = false;
};

void add_sample(CLI::App& app) {
  auto f = std::make_shared<SampleFlags>();
  infer::SampleOptions& o = f->options;
  CLI::App* cmd = app.add_subcommand(
      "sample",
      "Generate text from a checkpoint (any layout) with a KV cache: byte vocabulary or a "
      "SentencePiece --tokenizer, temperature and top-k sampling, the same --seed gives the same "
      "text (docs/sampling.md)");
  cmd->add_option("--checkpoint", f->checkpoint,
                  "Checkpoint directory, or a --save root (its latest checkpoint)")
      ->required();
  cmd->add_option("--tokenizer", f->tokenizer,
                  "SentencePiece .model (dtrain tokenize) that made the checkpoint's token file: "
                  "encodes --prompt and decodes the output (default: bytes)")
      ->check(kNotEmpty);
  cmd->add_option("--prompt", o.prompt,
                  "Text the generation continues, at least one character: the model has no "
                  "start token (default: a newline)");
  cmd->add_option("--tokens", o.tokens, "Tokens to generate (bytes without --tokenizer)")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 24));
  cmd->add_option("--temperature", o.temperature,
                  "Softmax temperature; 0 picks the most likely token (greedy)")
      ->capture_default_str()
      ->check(real_number(0, 100));
  cmd->add_option("--top-k", o.top_k, "Sample among the K most likely tokens (0: all)")
      ->capture_default_str()
      ->check(whole_number(0, 1 << 20));
  cmd->add_option("--seed", f->seed, "Seed of the sampling")
      ->capture_default_str()
      ->check(whole_number(0, std::numeric_limits<int64_t>::max()));
  cmd->add_flag("--json", f->json, "Print the text and its figures as JSON");
  cmd->callback([f] {
    DTRAIN_CHECK(std::filesystem::is_directory(f->checkpoint), "--checkpoint ", f->checkpoint,
                 ": no such directory");
    std::optional<data::Tokenizer> tokenizer;
    if (!f->tokenizer.empty()) tokenizer.emplace(f->tokenizer, "--tokenizer");
    const checkpoint::LoadedCheckpoint c =
        checkpoint::load_checkpoint(f->checkpoint, "--checkpoint");
    // A model of token ids prints binary bytes when its tokens are read as bytes.
    if (!tokenizer && c.manifest.run &&
        infer::trained_on_token_ids(c.manifest.run->settings.data_name, c.state.model.vocab)) {
      throw Error(str("--checkpoint ", c.dir, ": the model was trained on the token ids of --data ",
                      c.manifest.run->settings.data_name, " (vocabulary ", c.state.model.vocab,
                      "), which are not bytes: give --tokenizer M.model, the SentencePiece "
                      "model that wrote that file (dtrain tokenize), to print text"));
    }
    infer::SampleOptions run = f->options;
    run.seed = static_cast<uint64_t>(f->seed);
    if (tokenizer) run.tokenizer = &*tokenizer;
    // The text streams as it is generated: the prompt first, then each token's text.
    if (!f->json) {
      run.on_text = [](std::string_view text) { std::cout << text << std::flush; };
    }
    const infer::SampleResult r = infer::sample(c.state.model, c.state.params, run);
    const double tokens_per_s = static_cast<double>(r.tokens.size()) / r.seconds;
    if (f->json) {
      const nlohmann::json out = {{"checkpoint", c.dir},
                                  {"step", c.manifest.position.step},
                                  {"model", model::describe(c.state.model)},
                                  {"prompt", run.prompt},
                                  {"tokenizer", f->tokenizer.empty() ? "bytes" : f->tokenizer},
                                  {"tokens", r.tokens},
                                  {"text", r.text},
                                  {"temperature", run.temperature},
                                  {"top_k", run.top_k},
                                  {"seed", f->seed},
                                  {"window_restarts", r.window_restarts},
                                  {"tokens_per_s", tokens_per_s}};
      // Invalid UTF-8 (a byte model may emit any byte) becomes U+FFFD here; "tokens" is exact.
      std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << "\n";
      std::cerr << "sample: " << r.tokens.size() << (tokenizer ? " tokens" : " bytes") << " from "
                << c.dir << " (step " << c.manifest.position.step << ", "
                << model::describe(c.state.model) << ") at " << static_cast<int64_t>(tokens_per_s)
                << " tokens/s\n";
    }
  });
}

const CommandRegistration kRegistration("", add_sample);

}  // namespace
}  // namespace dtrain::cli
