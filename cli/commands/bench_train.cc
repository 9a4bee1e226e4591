// `dtrain bench train`: parses the flags into bench::TrainBenchOptions, runs the benchmark and
// prints its table (or JSON).
#include <iostream>
#include <memory>

#include "bench/train_bench.h"
#include "build_info.h"
#include "command_registry.h"
#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/thread_team.h"
#include "renamed_flags.h"
#include "validators.h"

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
  cmd->add_option("--model", o.model,
                  "Model preset: tiny, bench, wide, or a Llama one (llama-tiny, llama-small, "
                  "mixtral-small: the peer runs the same Llama block)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "dtrain compute-thread counts to run (OpenBLAS single-threaded), e.g. 1,2")
      ->delimiter(',')
      ->capture_default_str()
      ->check(whole_number(1, model::kMaxTeamSize));
  cmd->add_option("--blas-threads", o.blas_threads,
                  "OpenBLAS thread counts to run as extra rows (no dtrain threads); 0 for none")
      ->delimiter(',')
      ->capture_default_str()
      ->check(whole_number(0, model::kMaxTeamSize));
  cmd->add_option("--warmup", o.warmup, "Untimed steps before timing")
      ->capture_default_str()
      ->check(whole_number(0, kMaxSteps));
  cmd->add_option("--steps", o.steps, "Timed steps (median); as many again with GEMM timing")
      ->capture_default_str()
      ->check(whole_number(1, kMaxSteps));
  cmd->add_option("--global-batch", o.batch, "Sequences per step (default: the preset's)")
      ->check(whole_number(1, kMaxBatch));
  accept_old_spelling(*cmd, cmd->get_option("--global-batch"), "--batch");
  // 8192^3 is 1.1 TFLOP per call, and the peak takes at least 10 calls per thread count.
  cmd->add_option("--sgemm-size", o.sgemm_size, "M = N = K of the sgemm peak measurement")
      ->capture_default_str()
      ->check(whole_number(1, 8192));
  cmd->add_option("--recompute", o.recompute,
                  "Activation recompute modes to run, each at every thread count, e.g. "
                  "none,selective,full")
      ->delimiter(',')
      ->transform(recompute_names())
      ->default_str("none");
  cmd->add_option("--precision", o.precision,
                  "Precisions to run, each at every thread count and recompute mode: fp32, bf16 "
                  "or fp32,bf16 (bf16 rows end with their speed over fp32's)")
      ->delimiter(',')
      ->transform(precision_names())
      ->default_str("fp32,bf16");
  CLI::Option* peer = cmd->add_option(
      "--peer", o.peer,
      "Path of bench/peers/torch_gpt_step.py: run PyTorch's step at each --precision and "
      "--threads after dtrain's, and print dtrain / PyTorch");
  cmd->add_option("--python", o.python, "Python with torch for --peer")->capture_default_str();
  cmd->add_flag("--json", f->json, "Print JSON instead of a table");
  cmd->callback([f, peer] {
    const bench::TrainBenchOptions& run = f->options;
    if (peer->count() > 0) {
      check_input_file(run.peer, "--peer");
      if (run.python.find('/') != std::string::npos) check_input_file(run.python, "--python");
    }
    const int64_t batch = run.batch > 0 ? run.batch : model::gpt_preset(run.model).batch;
    check_fits_in_memory(bench::train_bench_memory_bytes(run),
                         str("--model ", run.model, " with --global-batch ", batch,
                             " and --sgemm-size ", run.sgemm_size));
    const bench::TrainBenchReport report = bench::run_train_bench(f->options);
    if (f->json) {
      std::cout << with_build(bench::train_bench_to_json(report)).dump(2) << "\n";
    } else {
      bench::print_train_bench(std::cout, report);
    }
  });
}

const CommandRegistration kRegistration("bench", add_bench_train);

}  // namespace
}  // namespace dtrain::cli
