// `dtrain calibrate --compute`: measures the rates of the machine the ranks compute on by timing
// the engine's own code (model/gemm.h's sgemm in fp32 and bf16, the model/ops kernels, AdamW, the
// clipping norm, bf16 conversion, the threads backend's collectives), fitted into the
// machine/measured_rates.h schema that the clock reads from a cluster file.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/machine/measured_rates.h"

namespace dtrain::calibrate {

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

// How fast each core computes now against the rates it was calibrated at: the engine's own
// products at two shapes the calibration times, timed as it times them (operands from memory,
// one thread, median of 5 calls) on a thread pinned to the core, as the rates' seconds over the
// measured ones: 1 is as calibrated, 0.8 a fifth slower. Products only: their samples are what
// the calibration measured at those very shapes, where a memory-bound kernel's rate is a line
// fitted over four sizes, whose residual at any one size would read as drift. The cores of a
// shared or virtual machine drift apart and back over seconds (docs/clock-validation.md), which
// no rate measured minutes before can know; `bench layouts` probes between its runs to say how
// far. No prediction reads it.
struct CoreSpeed {
  int cpu = 0;
  double fp32 = 0;  // the fp32 products
  double bf16 = 0;  // the bf16 products; 0 when the rates have no bf16 products
  double fp32_seconds = 0, bf16_seconds = 0;  // what the probe's products took on this core
};
// The speed `seconds` of the probe's products read against `rates`: the seconds the rates
// price them at over `seconds` (1: as calibrated).
double core_speed(const plan::MeasuredRates& rates, plan::Precision precision, double seconds);
class CoreSpeedProbe {
 public:
  // Allocates and fills the operand pool once (128 MiB, as calibrate's): each product reads
  // operands no earlier call left in cache, as the calibration's cold samples did.
  explicit CoreSpeedProbe(const plan::MeasuredRates& rates);
  // Every core this process may run on (its affinity mask), one after another; about 10 ms each.
  std::vector<CoreSpeed> measure();

 private:
  double product_seconds(plan::Precision precision);  // on the calling thread's core
  plan::MeasuredRates rates_;  // a copy: a probe may outlive the cluster it was given
  std::vector<float> pool_;
  size_t offset_ = 0;
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

}  // namespace dtrain::calibrate
