// `dtrain bench clock`: the planner's clock against published A100 runs (Korthikanti et al.
// 2022 Table 5, Narayanan et al. 2021 Table 1) and, with --vtrain DIR, vTrain's measured runs.
#include <iostream>
#include <memory>
#include <string>

#include "bench/clock_bench.h"
#include "build_info.h"
#include "command_registry.h"

namespace dtrain::cli {
namespace {

struct BenchClockFlags {
  bench::ClockBenchConfig config;
  bool json = false;
};

void add_bench_clock(CLI::App& bench_app) {
  auto f = std::make_shared<BenchClockFlags>();
  CLI::App* cmd = bench_app.add_subcommand(
      "clock",
      "Predicted step times beside published A100 runs (fit column, held-out column, "
      "datasheet-only) and, with --vtrain DIR, beside vTrain's 109 + 1440 measured runs");
  cmd->add_option("--vtrain", f->config.vtrain_dir,
                  "Directory with vTrain's ground_truth_multi.csv and ground_truth_single.csv")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--fit", f->config.fit,
                "Refit the four GPU efficiency parameters on Korthikanti Table 5's full-recompute "
                "column (a grid search of 51 x 26 x 8 x 15 points) and print them; it takes "
                "minutes, with its progress on stderr");
  cmd->add_flag("--all-rows", f->config.all_rows, "Print every single-node vTrain row too");
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    if (f->config.fit) {
      f->config.progress = [](const std::string& line) {
        std::cerr << "bench clock --fit: " << line << std::endl;
      };
    }
    const bench::ClockBenchReport report = bench::run_clock_bench(f->config);
    if (f->json) {
      std::cout << with_build(bench::to_json(report)).dump(2) << "\n";
    } else {
      bench::print_report(report, std::cout);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_clock);

}  // namespace
}  // namespace dtrain::cli
