// `dtrain bench all`: every benchmark that carries a speed target, run in one process at its
// default shape (fewer steps and rounds where the default takes minutes), each figure printed
// beside its target and whether this run meets it, with the CPU and its instruction set named.
// Figures without a target set are reported as such, never given an invented one.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::bench {

struct AllBenchOptions {
  // Which benchmarks to run, of kAllBenches; empty: all.
  std::vector<std::string> only;
  std::string torch_peer = "bench/peers/torch_gpt_step.py";  // "" or missing: no PyTorch rows
  std::string mpi_peer = "bench/peers/mpi_allreduce.c";      // "" or missing: no OpenMPI row
  std::string python = "/usr/bin/python3";
  int64_t train_steps = 10;  // timed steps of each training step benchmark
};

// The benchmarks `only` may name, in the order they run.
inline const std::vector<std::string> kAllBenches = {"plan", "cp",    "ep",
                                                     "dp",   "train", "collectives"};

enum class Want { at_least, at_most, none };

struct TargetFigure {
  std::string bench;   // "train", "cp", ...
  std::string figure;  // what the ratio is, in words
  double value = 0;
  std::string unit;  // "x", "s"
  Want want = Want::none;
  double target = 0;
  std::string source;  // where the target comes from (an issue's acceptance line, a README budget)
  bool met() const {
    return want == Want::none || (want == Want::at_least ? value >= target : value <= target);
  }
};

struct AllBenchReport {
  std::string cpu;                        // model name
  std::vector<std::string> instructions;  // the ISA extensions the figures depend on, as present
  int hardware_threads = 0;
  std::vector<TargetFigure> figures;
  std::vector<std::string> skipped;  // what did not run, and why
  int missed() const;
};

AllBenchReport run_all_bench(const AllBenchOptions& options);
void print_all_bench(std::ostream& out, const AllBenchReport& report);
nlohmann::json all_bench_to_json(const AllBenchReport& report);

}  // namespace dtrain::bench
