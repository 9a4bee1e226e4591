// `dtrain bench cp`: parses the flags into bench::CpBenchOptions, runs the benchmark and prints
// its table (or JSON).
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "bench/cp_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BenchCpFlags {
  bench::CpBenchOptions options;
  std::string algorithm = "ring";
  bool json = false;
};

void add_bench_cp(CLI::App& bench) {
  auto f = std::make_shared<BenchCpFlags>();
  bench::CpBenchOptions& o = f->options;
  CLI::App* cmd = bench.add_subcommand(
      "cp",
      "A training step at a long sequence with --cp N vs --dp N on the same N ranks and global "
      "batch: step time, activation and total peak memory per rank as ratios, and the CP bytes");
  cmd->add_option("--ranks", o.ranks, "Ranks (= DP ranks of the baseline, CP ranks of the CP run)")
      ->capture_default_str()
      ->check(whole_number(2, kMaxRanks));
  cmd->add_option("--seq-length", o.seq,
                  "Sequence length T (divisible by 2 x ranks for ring/all-gather)")
      ->capture_default_str()
      ->check(whole_number(2, 1 << 20));
  accept_old_spelling(*cmd, cmd->get_option("--seq-length"), "--seq");
  cmd->add_option("--layers", o.layers, "Transformer blocks L")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  cmd->add_option("--hidden", o.channels, "Model width C")
      ->capture_default_str()
      ->check(whole_number(8, 4096));
  accept_old_spelling(*cmd, cmd->get_option("--hidden"), "--channels");
  cmd->add_option("--heads", o.heads, "Attention heads (dividing --hidden)")
      ->capture_default_str()
      ->check(whole_number(1, 1024));
  cmd->add_option("--kv-heads", o.kv_heads,
                  "A Llama block with this many K/V heads (dividing --heads; 0: GPT's); below "
                  "--heads, the CP layout also runs with every head its own K/V head and prints "
                  "the grouped-query CP bytes over the multi-head ones")
      ->capture_default_str()
      ->check(whole_number(0, 1024));
  cmd->add_option("--global-batch", o.batch, "Global batch in sequences (divisible by --ranks)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxBatch));
  accept_old_spelling(*cmd, cmd->get_option("--global-batch"), "--batch");
  cmd->add_option("--cp-algo", f->algorithm, "The CP run's attention: ring, all-gather or ulysses")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed steps first")
      ->capture_default_str()
      ->check(whole_number(0, kMaxSteps));
  cmd->add_option("--steps", o.steps, "Timed steps (median)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxSteps));
  cmd->add_option("--rounds", o.rounds, "Rounds over both layouts; each keeps its fastest")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    const std::optional<plan::CpAlgorithm> algo = plan::parse_cp_algorithm(f->algorithm);
    DTRAIN_CHECK(algo.has_value() && *algo != plan::CpAlgorithm::automatic, "--cp-algo \"",
                 f->algorithm, "\" is not one of ring, all-gather, ulysses");
    f->options.algorithm = *algo;
    const bench::CpBenchReport report = bench::run_cp_bench(f->options);
    if (f->json) {
      std::cout << with_build(bench::cp_bench_to_json(report)).dump(2) << "\n";
    } else {
      bench::print_cp_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_cp);

}  // namespace
}  // namespace dtrain::cli
