// `dtrain bench ep`: parses the flags into bench::EpBenchOptions, runs the benchmark and prints
// its table (or JSON).
#include <iostream>
#include <memory>

#include "bench/ep_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "renamed_flags.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BenchEpFlags {
  bench::EpBenchOptions options;
  bool json = false;
};

void add_bench_ep(CLI::App& bench) {
  auto f = std::make_shared<BenchEpFlags>();
  bench::EpBenchOptions& o = f->options;
  CLI::App* cmd = bench.add_subcommand(
      "ep",
      "An MoE training step with --ep N vs the experts replicated on the same N DP ranks: step "
      "time and peak memory per rank as ratios, and the all-to-all bytes");
  cmd->add_option("--ranks", o.ranks, "DP ranks (= EP ranks of the EP run)")
      ->capture_default_str()
      ->check(whole_number(2, kMaxRanks));
  cmd->add_option("--experts", o.experts, "Experts per routed block")
      ->capture_default_str()
      ->check(whole_number(2, 1024));
  cmd->add_option("--hidden", o.channels, "Model width C")
      ->capture_default_str()
      ->check(whole_number(8, 4096));
  accept_old_spelling(*cmd, cmd->get_option("--hidden"), "--channels");
  cmd->add_option("--batch-per-rank", o.batch_per_rank, "Sequences per rank and step")
      ->capture_default_str()
      ->check(whole_number(1, kMaxBatch));
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
    const bench::EpBenchReport report = bench::run_ep_bench(f->options);
    if (f->json) {
      std::cout << with_build(bench::ep_bench_to_json(report)).dump(2) << "\n";
    } else {
      bench::print_ep_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_ep);

}  // namespace
}  // namespace dtrain::cli
