// `dtrain bench dp`: parses the flags into bench::DpBenchOptions, runs the benchmark and prints
// its table (or JSON).
#include <iostream>
#include <memory>
#include <string>

#include "bench/dp_bench.h"
#include "command_registry.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/units.h"

namespace dtrain::cli {
namespace {

struct BenchDpFlags {
  bench::DpBenchOptions options;
  std::string bucket_size = "1MiB";
  bool json = false;
};

void add_bench_dp(CLI::App& bench) {
  auto f = std::make_shared<BenchDpFlags>();
  bench::DpBenchOptions& o = f->options;
  CLI::App* cmd = bench.add_subcommand(
      "dp",
      "Data-parallel weak scaling of the bench model: 1 rank vs N DP ranks (efficiency), ZeRO "
      "1-3 vs plain DP, and the PyTorch DDP peer beside (--peer)");
  cmd->add_option("--model", o.model, "Model preset: bench or tiny")->capture_default_str();
  cmd->add_option("--ranks", o.ranks, "Data-parallel ranks")->capture_default_str();
  cmd->add_option("--batch-per-rank", o.batch_per_rank, "Sequences per rank and step")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--steps", o.steps, "Timed steps (median)")->capture_default_str();
  cmd->add_option("--rounds", o.rounds, "Rounds over all layouts; each keeps its fastest")
      ->capture_default_str();
  cmd->add_option("--bucket-size", f->bucket_size, "Gradient bucket size")->capture_default_str();
  cmd->add_option("--zero", o.zero_stages, "ZeRO stages to run beside plain DP, e.g. 1,2,3")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--peer", o.peer,
                  "Path of torch_gpt_step.py (../shared/peers/): run its DDP mode after ours");
  cmd->add_option("--python", o.python, "Python with torch for --peer")->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON instead of a table");
  cmd->callback([f] {
    comm::check_single_process("dtrain bench dp");  // threads only: one copy per process
    f->options.bucket_bytes = parse_bytes(f->bucket_size, "--bucket-size");
    const bench::DpBenchReport report = bench::run_dp_bench(f->options);
    if (f->json) {
      std::cout << bench::dp_bench_to_json(report).dump(2) << "\n";
    } else {
      bench::print_dp_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_dp);

}  // namespace
}  // namespace dtrain::cli
