// `dtrain bench train`: the training step of the `bench` preset (the shape and the step of
// bench/peers/torch_gpt_step.py: one fixed random batch, AdamW lr 3e-4, betas (0.9, 0.95),
// weight decay 0.1, no clipping) at 1 and 2 threads. "Threads" are dtrain's compute threads
// (a ThreadTeam, OpenBLAS single-threaded inside each); one more row shows OpenBLAS's own
// threading for comparison. Reports ms/step and tokens/s, the share of the step spent in
// sgemm, and the GFLOP/s of those calls against OpenBLAS's own sgemm peak (M = N = K = 512,
// OpenBLAS threaded at the same count) measured in the same run. With several --recompute modes
// every thread count runs once per mode, so a row's time and peak activation bytes sit beside
// the other modes' from the same run; likewise every --precision (fp32 and bf16 by default), and
// the table ends with each bf16 row's tokens/s over its fp32 twin's.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/core/recompute.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/model/precision.h"

namespace dtrain::bench {

struct TrainBenchOptions {
  std::string model = "bench";          // preset
  std::vector<int> threads = {1, 2};    // compute threads (ThreadTeam), OpenBLAS at 1
  std::vector<int> blas_threads = {2};  // extra rows: OpenBLAS threads, no team
  int64_t warmup = 5;                   // untimed steps first
  int64_t steps = 20;  // timed steps (median), then as many again with GEMM timing on
  int64_t batch = 0;   // 0: the preset's
  int64_t sgemm_size = 512;
  double sgemm_seconds = 0.6;  // time of the two peak measurements, per thread count
  std::vector<Recompute> recompute = {Recompute::none};  // activation recompute modes to run
  // Precisions to run, each at every thread count and recompute mode (bf16 beside fp32).
  std::vector<model::Precision> precision = {model::Precision::fp32, model::Precision::bf16};
  std::string peer;  // bench/peers/torch_gpt_step.py; empty: no peer rows
  std::string python = "/usr/bin/python3";
};

// The PyTorch peer's step at one precision and thread count (its logfmt line).
struct TrainPeerRow {
  model::Precision precision = model::Precision::fp32;
  int threads = 0;
  double ms_per_step = 0, tokens_per_s = 0;
  std::string line;
};

struct TrainBenchRow {
  int threads = 0;        // compute threads of the row
  bool openblas = false;  // true: OpenBLAS's own threads, no team
  Recompute recompute = Recompute::none;
  model::Precision precision = model::Precision::fp32;
  int64_t activation_peak_bytes = 0;  // the engine's activations tag, peak over the row's steps
  double ms_per_step = 0;             // median
  double best_ms_per_step = 0;
  double tokens_per_s = 0;                                   // tokens per step / median
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;  // medians
  double gemm_ms_per_step = 0;  // mean time inside sgemm per step (timed pass)
  double gemm_fraction = 0;     // gemm time / step time in the timed pass
  double gemm_gflop_per_step = 0;
  double gemm_gflops = 0;        // flops / time inside sgemm
  double step_gflops = 0;        // gemm flops / whole step time
  double sgemm_peak_gflops = 0;  // cblas_sgemm N^3, median call; best of before and after
  double gemm_vs_peak = 0;       // gemm_gflops / sgemm_peak_gflops
  float loss_first = 0, loss_last = 0;
};

struct TrainBenchReport {
  std::string model_name;
  model::GptConfig model;
  int64_t params = 0, batch = 0, seq = 0;
  int64_t sgemm_size = 0;
  std::string blas_corename;
  std::string bf16_gemm;  // bf16_gemm_description()
  std::string cpu;        // the CPU's model name and its bf16 instructions: the figures' machine
  std::vector<TrainBenchRow> rows;
  std::vector<TrainPeerRow> peer;  // with --peer: each precision at each --threads count
  std::string peer_error;          // what went wrong when the peer gave no line
};

// Bytes the largest row holds at once: the model's weights, gradients and AdamW moments
// (16 B per parameter), the batch's activations by the plan/ formulas at the most threads
// without recompute (the largest mode), and the sgemm peak's three N x N matrices.
double train_bench_memory_bytes(const TrainBenchOptions& options);

TrainBenchReport run_train_bench(const TrainBenchOptions& options);
void print_train_bench(std::ostream& out, const TrainBenchReport& report);
nlohmann::json train_bench_to_json(const TrainBenchReport& report);

// Median GFLOP/s of cblas_sgemm (row-major, no transposes, beta 0) with M = N = K = n at the
// current BLAS thread count, over calls lasting at least min_seconds in all (and >= 10 calls).
double measure_sgemm_gflops(int64_t n, double min_seconds);

}  // namespace dtrain::bench
