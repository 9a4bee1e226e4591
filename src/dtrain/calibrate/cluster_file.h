// The cluster file `dtrain calibrate` writes: the measured links in place of the preset's, with
// --compute the CPU measured here in place of the GPU (its rates under "gpu.measured"), read
// back by plan's own reader before it is written; and the table that prints the CPU measured.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/calibrate/link_calibration.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/machine/measured_rates.h"

namespace dtrain::calibrate {

// A calibrated CPU in place of the preset's GPU: its name, the fastest fp32 product it measured
// on `threads` threads as peak_flops (compute_efficiency 1: the clock's own rates are in
// `measured`), and the memory this process may take shared by the node's ranks.
void use_measured_cpu(plan::Cluster& c, plan::MeasuredRates measured, int threads,
                      int ranks_per_node);

// How the figures were taken: extra fields the reader ignores ("calibration").
struct Provenance {
  std::string backend;
  CalibrationOptions options;
  std::string gpu_from_preset;  // "" with --compute
  double compute_seconds = 0;
  int compute_passes = 0;
  std::string source;  // the output's name in errors, "(calibrated)" without one
};

// `base` (its name, GPU and, with --compute, the measured CPU) with the measured links, as the
// file's JSON. Throws Error when plan's reader would refuse a figure (a link measured while
// other work held the cores, or on messages too small to show the bandwidth), naming the field
// and its value, so a bad file is never written.
nlohmann::json cluster_file(plan::Cluster base, const Calibration& links, const Provenance& how);

// Writes `file` to `path`; a failure (a full disk shows when the bytes leave the buffer) throws
// Error naming `flag`, the path and the reason.
void write_cluster_file(const std::string& path, const nlohmann::json& file,
                        const std::string& flag);

// The compute section of calibrate's table: products' GFLOP/s at the grid's corners, each
// kernel's rate, each collective's fit, and the interference.
void print_compute_rates(std::ostream& out, const plan::GpuSpec& gpu, int threads, double seconds);

}  // namespace dtrain::calibrate
