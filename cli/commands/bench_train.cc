// `dtrain bench train`: parses the flags into bench::TrainBenchOptions, runs the benchmark and
// prints its table (or JSON).
#include <iostream>
#include <memory>

#include "bench/train_bench.h"
#include "command_registry.h"

namespace dtrain::cli {
namespace {

struct BenchTrainFlags {
  bench::TrainBenchOptions options;
  bool json = false;
};

void add_bench_train(CLI::App& bench) {
  auto f = std::make_shared<BenchTrainFlags>();
  bench::TrainBenchOptions& o = f->options;
  CLI::App* cmd = bench.add_subcommand(
      "train",
      "Training step of the bench model at 1 and 2 BLAS threads: ms/step, tokens/s, "
      "GEMM share and GFLOP/s vs OpenBLAS's sgemm peak");
  cmd->add_option("--model", o.model, "Model preset: bench or tiny")->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "dtrain compute-thread counts to run (OpenBLAS single-threaded), e.g. 1,2")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--blas-threads", o.blas_threads,
                  "OpenBLAS thread counts to run as extra rows (no dtrain threads); 0 for none")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed steps before timing")->capture_default_str();
  cmd->add_option("--steps", o.steps, "Timed steps (median); as many again with GEMM timing")
      ->capture_default_str();
  cmd->add_option("--batch", o.batch, "Sequences per step (default: the preset's)");
  cmd->add_option("--sgemm-size", o.sgemm_size, "M = N = K of the sgemm peak measurement")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON instead of a table");
  cmd->callback([f] {
    const bench::TrainBenchReport report = bench::run_train_bench(f->options);
    if (f->json) {
      std::cout << bench::train_bench_to_json(report).dump(2) << "\n";
    } else {
      bench::print_train_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_train);

}  // namespace
}  // namespace dtrain::cli
