// `dtrain bench data`: batch assembly from a token file (mapped) beside the same tokens in
// memory; parses the flags into bench::DataBenchOptions and prints the table (or JSON).
#include <iostream>
#include <limits>
#include <memory>

#include "bench/data_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/files.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BenchDataFlags {
  bench::DataBenchOptions options;
  int64_t vocab = 0;
  bool json = false;
};

void add_bench_data(CLI::App& bench_app) {
  auto f = std::make_shared<BenchDataFlags>();
  bench::DataBenchOptions& o = f->options;
  CLI::App* cmd = bench_app.add_subcommand(
      "data",
      "Batch assembly MB/s from a memory-mapped token file (default: a temporary llm.c file of "
      "random GPT-2 tokens), beside the same tokens as int32 in memory");
  cmd->add_option("--data", o.data, "Token file (llm.c's, or a raw .bin with --vocab)")
      ->check(kNotEmpty);
  auto* vocab = cmd->add_option("--vocab", f->vocab, "Vocabulary of a raw uint16 .bin")
                    ->check(whole_number(1, std::numeric_limits<int32_t>::max()));
  cmd->add_option("--tokens", o.tokens, "Tokens of the temporary file (without --data)")
      ->capture_default_str()
      ->check(whole_number(2, std::numeric_limits<int32_t>::max()));
  cmd->add_option("--global-batch", o.batch, "Sequences per batch B")
      ->capture_default_str()
      ->check(whole_number(1, kMaxBatch));
  accept_old_spelling(*cmd, cmd->get_option("--global-batch"), "--batch");
  cmd->add_option("--seq-length", o.seq, "Tokens per sequence T")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  accept_old_spelling(*cmd, cmd->get_option("--seq-length"), "--seq");
  cmd->add_option("--batches", o.batches, "Batches per timed round")
      ->capture_default_str()
      ->check(whole_number(1, 1 << 20));
  cmd->add_option("--rounds", o.rounds, "Timed rounds (median reported)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f, vocab] {
    bench::DataBenchOptions run = f->options;
    if (vocab->count() > 0) run.vocab = f->vocab;
    if (!run.data.empty()) check_input_file(run.data, "--data");
    const bench::DataBenchReport report = bench::run_data_bench(run);
    if (f->json) {
      std::cout << with_build(bench::to_json(report)).dump(2) << "\n";
    } else {
      bench::print_report(report, std::cout);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_data);

}  // namespace
}  // namespace dtrain::cli
