// `dtrain bench dp`: parses the flags into bench::DpBenchOptions, runs the benchmark and prints
// its table (or JSON).
#include <iostream>
#include <memory>
#include <string>

#include "bench/dp_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/files.h"
#include "dtrain/core/units.h"
#include "validators.h"

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
  cmd->add_option("--ranks", o.ranks, "Data-parallel ranks")
      ->capture_default_str()
      ->check(whole_number(2, kMaxRanks));
  cmd->add_option("--batch-per-rank", o.batch_per_rank, "Sequences per rank and step")
      ->capture_default_str()
      ->check(whole_number(1, kMaxBatch));
  cmd->add_option("--warmup", o.warmup, "Untimed steps first")
      ->capture_default_str()
      ->check(whole_number(0, kMaxSteps));
  cmd->add_option("--steps", o.steps, "Timed steps (median)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxSteps));
  cmd->add_option("--rounds", o.rounds, "Rounds over all layouts; each keeps its fastest")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_option("--bucket-size", f->bucket_size, "Gradient bucket size")->capture_default_str();
  cmd->add_option("--zero", o.zero_stages, "ZeRO stages to run beside plain DP, e.g. 1,2,3")
      ->delimiter(',')
      ->capture_default_str()
      ->check(whole_number(1, 3));
  cmd->add_option("--dp-algo", o.dp_algos,
                  "The DP syncs' algorithms: auto, ring or direct (the ranks read each other's "
                  "buffers in place; train --dp-algo); several, e.g. ring,direct, run side by "
                  "side in every round")
      ->delimiter(',')
      ->capture_default_str();
  CLI::Option* peer = cmd->add_option(
      "--peer", o.peer, "Path of bench/peers/torch_gpt_step.py: run its DDP mode after dtrain's");
  CLI::Option* python =
      cmd->add_option("--python", o.python, "Python with torch for --peer")->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON instead of a table");
  cmd->callback([f, peer, python] {
    comm::check_single_process("dtrain bench dp");  // threads only: one copy per process
    bench::DpBenchOptions& run = f->options;
    run.bucket_bytes = parse_bytes(f->bucket_size, "--bucket-size");
    DTRAIN_CHECK(run.bucket_bytes > 0, "--bucket-size must be at least 1 byte (got ",
                 f->bucket_size, ")");
    // The peer runs after minutes of our own rows: a wrong path must fail now, not then.
    if (peer->count() > 0) {
      check_input_file(run.peer, "--peer");
      DTRAIN_CHECK(!run.python.empty(), "--python is empty: give the Python to run --peer with");
      // A bare name ("python3") is looked up on PATH by the shell; a path must exist.
      if (run.python.find('/') != std::string::npos) check_input_file(run.python, "--python");
    } else {
      DTRAIN_CHECK(python->count() == 0, "--python ", run.python, " applies only with --peer");
    }
    check_fits_in_memory(bench::dp_bench_memory_bytes(run),
                         str("--model ", run.model, " on --ranks ", run.ranks,
                             " with --batch-per-rank ", run.batch_per_rank));
    const bench::DpBenchReport report = bench::run_dp_bench(run);
    if (f->json) {
      std::cout << with_build(bench::dp_bench_to_json(report)).dump(2) << "\n";
    } else {
      bench::print_dp_bench(std::cout, report);
    }
    DTRAIN_CHECK(!report.peer.ran || report.peer.status == "ok", "--peer ", run.peer,
                 ": the PyTorch peer gave no DDP result (its status is in the report above)");
  });
}

const CommandRegistration kRegistration("bench", add_bench_dp);

}  // namespace
}  // namespace dtrain::cli
