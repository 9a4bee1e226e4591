// `dtrain bench dp`: data-parallel weak scaling on the `bench` preset, the setting of
// bench/peers/torch_gpt_step.py --mode ddp: 8 sequences per rank, one fixed random batch,
// AdamW lr 3e-4, betas (0.9, 0.95), weight decay 0.1, no clipping, one compute thread and
// single-threaded OpenBLAS per rank. Step time (median over steps of the slowest rank) and
// tokens/s for 1 rank and N = 2 DP ranks of the one engine (engine/engine.h), DP efficiency =
// tokens/s with N ranks / (N x the single rank's), and ZeRO stages 1-3 relative to plain DP. With
// `peer` set, the PyTorch script runs afterwards in the same invocation and its DDP figures are
// printed beside.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/model/gpt_config.h"

namespace dtrain::bench {

struct DpBenchOptions {
  std::string model = "bench";  // preset
  int64_t batch_per_rank = 8;
  int ranks = 2;
  int64_t warmup = 3;
  int64_t steps = 15;
  int rounds = 3;  // every layout runs once per round; each keeps its fastest round (the machine
                   // is shared: a round that lost a core to another process does not count)
  int64_t bucket_bytes = int64_t{1} << 20;
  std::vector<int> zero_stages = {1, 2, 3};
  // The DP syncs' algorithms (train --dp-algo: auto, ring, direct): with several, every round
  // runs the DP and ZeRO rows once per algorithm, so they compare within one run.
  std::vector<std::string> dp_algos = {"auto"};
  std::string peer;  // path of torch_gpt_step.py; empty: no peer run
  std::string python = "/usr/bin/python3";
};

struct DpBenchRow {
  int ranks = 1;
  int zero_stage = -1;     // -1: the single rank (every axis of size 1)
  double ms_per_step = 0;  // median over steps of the slowest rank's step
  double best_ms_per_step = 0;
  double tokens_per_s = 0;          // global tokens per step / median
  double comm_ms_per_step = 0;      // communication thread busy time (rank 0, mean)
  double overlap_share = 0;         // of that, hidden behind compute
  double bytes_moved_per_step = 0;  // DP bytes moved (comm::Traffic::bytes_moved), rank 0
  std::string dp_algo;              // the DP syncs' algorithm as asked ("" for the single rank)
  float loss_first = 0, loss_last = 0;
};

struct PeerResult {
  bool ran = false;
  std::string status;  // "ok", or what failed
  double single_tokens_per_s = 0, ddp_tokens_per_s = 0, ddp_ms_per_step = 0;
  double ddp_efficiency = 0;
  std::vector<std::string> lines;  // its bench=torch_gpt lines, as printed
};

struct DpBenchReport {
  std::string model_name;
  model::GptConfig model;
  int64_t params = 0, batch_per_rank = 0, seq = 0;
  int ranks = 0;
  int rounds = 0;
  std::vector<std::string> dp_algos;  // as asked
  // Plain DP's tokens/s / (ranks x single), per algorithm (in dp_algos' order).
  std::vector<double> dp_efficiency_by_algo;
  std::vector<DpBenchRow> rows;  // single rank, plain DP, then each ZeRO stage
  double dp_efficiency = 0;      // plain DP tokens/s / (ranks x single)
  PeerResult peer;
};

// Bytes the N-rank rows hold at once: every rank's weights, gradients and AdamW moments
// (16 B per parameter, plain DP: nothing sharded) and its batch's activations by the plan/
// formulas.
double dp_bench_memory_bytes(const DpBenchOptions& options);

DpBenchReport run_dp_bench(const DpBenchOptions& options);
void print_dp_bench(std::ostream& out, const DpBenchReport& report);
nlohmann::json dp_bench_to_json(const DpBenchReport& report);

}  // namespace dtrain::bench
