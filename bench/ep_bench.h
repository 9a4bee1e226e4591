// `dtrain bench ep`: one MoE training step with the experts replicated on N DP ranks beside the
// same step with --ep N (each rank holding E/N experts, the routed rows moved by all-to-all),
// on the same ranks, model and global batch: median step time (the slowest rank's, over the
// timed steps; each layout keeps its fastest round) and each rank's peak bytes, as ratios EP /
// replicated, with the EP all-to-all bytes each rank sent per step. Threads backend.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::bench {

struct EpBenchOptions {
  int ranks = 2;  // dp = ep = ranks
  int64_t layers = 2, channels = 128, heads = 4, seq = 64, experts = 8, top_k = 2;
  int64_t batch_per_rank = 4;
  int64_t warmup = 2;
  int64_t steps = 8;
  int rounds = 3;
};

struct EpBenchRow {
  int ep = 1;
  double step_ms = 0;            // median over the timed steps of the slowest rank, best round
  int64_t peak_bytes = 0;        // the largest rank's peak (MemoryTracker)
  int64_t param_count = 0;       // elements rank 0 holds
  double ep_bytes_per_step = 0;  // all-to-all bytes rank 0 sent per step
};

struct EpBenchReport {
  EpBenchOptions options;
  EpBenchRow replicated, expert_parallel;
  double time_ratio() const { return expert_parallel.step_ms / replicated.step_ms; }
  double memory_ratio() const {
    return static_cast<double>(expert_parallel.peak_bytes) /
           static_cast<double>(replicated.peak_bytes);
  }
};

EpBenchReport run_ep_bench(const EpBenchOptions& o);
void print_ep_bench(std::ostream& out, const EpBenchReport& r);
nlohmann::json ep_bench_to_json(const EpBenchReport& r);

}  // namespace dtrain::bench
