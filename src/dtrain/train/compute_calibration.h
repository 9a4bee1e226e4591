// `dtrain calibrate --compute`: measures the rates of the machine the ranks compute on by timing
// the engine's own code (model/gemm.h's sgemm in fp32 and bf16, the model/ops kernels, AdamW, the
// clipping norm, bf16 conversion, the threads backend's collectives), fitted into the
// plan/measured_rates.h schema that the clock reads from a cluster file.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/plan/measured_rates.h"

namespace dtrain::train {

struct ComputeCalibrationOptions {
  // Products are measured on 1 thread and, when larger, on this many (a ThreadTeam, as a run's
  // --threads gives each rank).
  int threads = 1;
  // A small grid and fewer sizes (seconds, for tests); the default takes about 40 s on 2 cores
  // with 3 passes (17 s with 1).
  bool quick = false;
  // The products and the memory-bound kernels are measured this many times over, each pass
  // through the whole grid before the next, and each point keeps its median over the passes: a
  // slow spell of a shared machine then lands on one pass of many points, not on every call of
  // a few, and the figures average over a longer stretch of the machine's time. The slowdowns
  // (comm_interference, corun_slowdown, oversubscribed_wait_s) are each the median of as many
  // measurements.
  int passes = 3;
  // Each collective times out after this long waiting for a peer.
  double timeout_s = 60;
  // Called with a line as each part starts (null: quiet).
  std::function<void(std::string_view)> progress;
};

// The product grid measured per precision and thread count: m (rows of C: the tokens of a
// micro-batch) and n, k (the model's widths).
struct GemmGrid {
  std::vector<double> m, n, k;
};
GemmGrid gemm_grid(bool quick);
// The sparser grid of the warm products (operands reused call after call): every other point of
// gemm_grid's axes (powers of 4 from 16, and m's 4096), each a point of gemm_grid; quick: the same.
GemmGrid gemm_warm_grid(bool quick);

// The caches of the CPU this process runs on: sysfs (/sys/devices/system/cpu/cpu0/cache), else
// sysconf; a size the OS does not report stays 0 (unknown). `root` replaces the sysfs folder in
// tests.
plan::CacheSizes read_cache_sizes(const std::string& root = "/sys/devices/system/cpu/cpu0/cache");

// Each product's median seconds over the passes that measured it (every pass the same points
// in the same order; throws Error when they differ).
std::vector<plan::GemmSample> median_over_passes(
    const std::vector<std::vector<plan::GemmSample>>& passes);

// Measures every rate; takes the calling thread (and `threads` more for the team).
plan::MeasuredRates measure_compute_rates(const ComputeCalibrationOptions& options);

// Least squares of seconds = intercept + bytes / bytes_per_s over (bytes, seconds) points (2 or
// more, distinct bytes), on relative errors (weights 1 / seconds^2). A negative intercept (noise at
// small sizes) is refitted through the origin; a slope that is not positive (a flat curve) takes
// the largest point's average rate.
struct LinearFit {
  double intercept_s = 0;
  double bytes_per_s = 0;
};
LinearFit fit_latency_bandwidth(const std::vector<double>& bytes,
                                const std::vector<double>& seconds);

}  // namespace dtrain::train
