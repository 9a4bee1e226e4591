// `dtrain bench plan`: times the planner's full search for the 1T model on 3072 GPUs and puts
// the paper's measured throughput beside the planner's prediction for its layout.
#include <iostream>
#include <memory>

#include "bench/plan_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "validators.h"

namespace dtrain::cli {
namespace {

struct BenchPlanFlags {
  bench::PlanBenchConfig config;
  bool json = false;
};

void add_bench_plan(CLI::App& bench_app) {
  auto f = std::make_shared<BenchPlanFlags>();
  CLI::App* cmd = bench_app.add_subcommand(
      "plan",
      "Time a full layout search (default: the 1T model of Narayanan et al. 2021 on 3072 A100s; "
      "target: under 0.1 s of CPU, every axis searched), the same search with TP held (8, or what "
      "the "
      "cluster admits), and "
      "compare the paper's layout with its published throughput");
  cmd->add_option("--model", f->config.model, "Model preset to search for")->capture_default_str();
  cmd->add_option("--cluster", f->config.cluster, "Cluster (NODESxGPUSxTYPE or .json)")
      ->capture_default_str();
  cmd->add_option("--repeats", f->config.repeats, "Searches to time (median reported)")
      ->capture_default_str()
      ->check(whole_number(1, kMaxTrials));
  cmd->add_flag("--json", f->json, "Print the same figures as JSON");
  cmd->callback([f] {
    const bench::PlanBenchReport report = bench::run_plan_bench(f->config);
    if (f->json) {
      std::cout << with_build(bench::to_json(report)).dump(2) << "\n";
    } else {
      bench::print_report(report, std::cout);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_plan);

}  // namespace
}  // namespace dtrain::cli
