// The planner's speed and its figures beside a published run: `dtrain bench plan` times a full
// search for the 1T model of Narayanan et al. 2021 on 3072 A100s (its target: under 0.1 s),
// and evaluates the layout that paper ran, beside the throughput it measured.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/plan/planner.h"

namespace dtrain::bench {

struct PlanBenchConfig {
  std::string model = "megatron-1t";
  std::string cluster = "384x8xA100";  // 3072 GPUs, DGX A100 nodes as on Selene
  int repeats = 5;                     // the reported time is the median
};

// Narayanan et al. 2021 Table 1, 1T row: tp=8, pp=64 on 3072 GPUs with batch 3072 reached 163
// teraFLOP/s per GPU (52% of peak), counting recompute's FLOPs (their Eq. 3).
inline constexpr double kPublishedTflopsPerGpu = 163;

struct PublishedLayout {
  std::string label;
  plan::Plan plan;
};

struct PlanBenchReport {
  PlanBenchConfig config;
  int gpus = 0;
  std::vector<double> seconds;  // one per repeat, wall clock
  double median_seconds = 0;
  // The searching thread's CPU time, one per repeat, and its median: what the target is held to
  // (a search is one thread; the wall clock of a shared VM counts other programs' time too).
  std::vector<double> cpu_seconds;
  double median_cpu_seconds = 0;
  int64_t evaluated = 0;  // layouts per search
  int64_t fitting = 0;
  plan::Plan best;      // the search's winner
  std::string no_best;  // when no layout fits: why, in the search's words (best is then unset)
  // The same search with tp held (--search --tp N): the paper's tp=8 where the cluster has 8
  // GPUs per node and the model's heads split 8 ways, else the largest power of two that does;
  // `fixed_tp_why` says which, in words. Its median time and layouts.
  int fixed_tp = 8;
  std::string fixed_tp_why;
  double fixed_tp_median_seconds = 0;
  double fixed_tp_median_cpu_seconds = 0;
  int64_t fixed_tp_evaluated = 0;
  std::vector<PublishedLayout> published;  // the paper's layout, 1F1B and interleaved
};

PlanBenchReport run_plan_bench(const PlanBenchConfig& config);
void print_report(const PlanBenchReport& report, std::ostream& out);
nlohmann::json to_json(const PlanBenchReport& report);

}  // namespace dtrain::bench
