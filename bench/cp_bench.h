// `dtrain bench cp`: one training step at a long sequence on N ranks, the sequences split over
// them by data parallelism (--dp N, cp 1: each rank whole sequences, their attention scores
// included) beside context parallelism (--cp N: each rank 1/N of every sequence's tokens,
// attention across the group), same model, global batch and ranks: median step time (the slowest
// rank's, over the timed steps; each layout keeps its fastest round) and each rank's activation
// and total peak bytes, as ratios CP / DP, with the CP bytes each rank sent per step. Threads
// backend, one core a rank.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/cost/context_parallel.h"

namespace dtrain::bench {

struct CpBenchOptions {
  int ranks = 2;  // dp = ranks in the baseline, cp = ranks in the CP run
  int64_t layers = 2, channels = 64, heads = 4, seq = 1024;
  int64_t batch = 2;  // global: batch / ranks sequences a DP rank, all of them a CP rank
  // > 0: a Llama block with this many K/V heads (grouped-query attention), and a third run, the
  // CP layout with every query head its own K/V head (multi-head), for the K/V bytes' ratio.
  int64_t kv_heads = 0;
  plan::CpAlgorithm algorithm = plan::CpAlgorithm::ring;
  int64_t warmup = 1;
  int64_t steps = 3;
  int rounds = 2;
};

struct CpBenchRow {
  int dp = 1, cp = 1;
  double step_ms = 0;                 // median over the timed steps of the slowest rank, best round
  int64_t activation_peak_bytes = 0;  // the largest rank's activations-tag peak (MemoryTracker)
  int64_t peak_bytes = 0;             // the largest rank's peak over every tag
  double cp_bytes_per_step = 0;       // CP group bytes rank 0 sent per step (0 without CP)
};

struct CpBenchReport {
  CpBenchOptions options;
  std::string cpu;  // the machine the figures were measured on
  CpBenchRow data_parallel, context_parallel;
  // With --kv-heads below --heads: the CP layout at NKV = NH, and the CP bytes of the grouped-query
  // run over its (measured, and plan::cp_traffic_per_layer's).
  CpBenchRow multi_head;
  double kv_bytes_ratio = 0, kv_bytes_ratio_planned = 0;
  bool has_multi_head() const { return multi_head.cp > 1; }
  double time_ratio() const { return context_parallel.step_ms / data_parallel.step_ms; }
  double activation_ratio() const {
    return static_cast<double>(context_parallel.activation_peak_bytes) /
           static_cast<double>(data_parallel.activation_peak_bytes);
  }
  double memory_ratio() const {
    return static_cast<double>(context_parallel.peak_bytes) /
           static_cast<double>(data_parallel.peak_bytes);
  }
};

CpBenchReport run_cp_bench(const CpBenchOptions& o);
void print_cp_bench(std::ostream& out, const CpBenchReport& r);
nlohmann::json cp_bench_to_json(const CpBenchReport& r);

}  // namespace dtrain::bench
