// `dtrain bench all`: runs every benchmark that carries a speed target and prints each figure
// beside its target (or the same as JSON).
#include <iostream>
#include <memory>

#include "bench/all_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BenchAllFlags {
  bench::AllBenchOptions options;
  bool json = false;
};

void add_bench_all(CLI::App& bench_app) {
  auto f = std::make_shared<BenchAllFlags>();
  bench::AllBenchOptions& o = f->options;
  CLI::App* cmd = bench_app.add_subcommand(
      "all",
      "Run the benchmarks that carry a speed target (search time, CP / DP, EP / replicated, DP "
      "efficiency, training vs the PyTorch peer in fp32 and bf16, collectives vs memcpy and "
      "OpenMPI) and print each ratio beside its target, with the CPU and its instruction set; "
      "a few minutes");
  cmd->add_option("--only", o.only,
                  "Run only these, e.g. plan,cp (plan, cp, ep, dp, train, collectives)")
      ->delimiter(',');
  cmd->add_option("--torch-peer", o.torch_peer,
                  "The PyTorch peer (bench/peers/torch_gpt_step.py); empty for none")
      ->capture_default_str();
  cmd->add_option("--mpi-peer", o.mpi_peer,
                  "The OpenMPI peer's source (bench/peers/mpi_allreduce.c); empty for none")
      ->capture_default_str();
  cmd->add_option("--python", o.python, "Python with torch for --torch-peer")
      ->capture_default_str();
  cmd->add_option("--train-steps", o.train_steps, "Timed steps of each training benchmark")
      ->capture_default_str()
      ->check(whole_number(1, 100000));
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    const bench::AllBenchReport report = bench::run_all_bench(f->options);
    if (f->json) {
      std::cout << with_build(bench::all_bench_to_json(report)).dump(2) << "\n";
    } else {
      bench::print_all_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_all);

}  // namespace
}  // namespace dtrain::cli
