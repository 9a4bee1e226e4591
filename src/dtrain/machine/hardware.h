// The cluster the planner sizes a run for: nodes x GPUs per node, each GPU's memory and peak
// FLOP/s, and the two link classes (inside a node, across nodes) as bandwidth and latency.
// Presets for DGX A100 and DGX H100 nodes carry their sources in hardware.cc; a cluster can also
// be read from a JSON file (`--cluster FILE.json`, the format written by to_json below).
//
// Conventions: bytes are bytes (memory in 10^9-byte GB when printed); a link's bandwidth is per
// GPU and per direction (what one rank can send while it receives as much), so a ring step that
// sends B bytes takes latency + B / bandwidth; latency is per step (one send-receive round).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dtrain/machine/measured_rates.h"
#include "dtrain/machine/rates.h"

namespace dtrain::plan {

// GPUs in a cluster: a million is far past any built; it keeps nodes x GPUs per node, and each
// layout's dp x tp x pp, inside int.
inline constexpr int kMaxGpus = 1000000;

// What a real accelerator and its links can be, to tell a value in the wrong unit from a
// figure (a cluster file's `"peak_flops": 312` is 312 FLOP/s, not 312 TFLOP/s): memory 128 MiB
// to 1 PiB per GPU, 1 TFLOP/s to 100 PFLOP/s dense peak, links of 10 MB/s to 100 TB/s per
// GPU and direction with at most 1 s per step. Cluster files are held to them.
inline constexpr double kMinGpuMemoryBytes = 128.0 * 1024 * 1024;
inline constexpr double kMaxGpuMemoryBytes = 1024.0 * 1024 * 1024 * 1024 * 1024;
inline constexpr double kMinPeakFlops = 1e12;
inline constexpr double kMaxPeakFlops = 1e17;
inline constexpr double kMinLinkBytesPerS = 1e7;
inline constexpr double kMaxLinkBytesPerS = 1e14;
inline constexpr double kMaxLinkLatencyUs = 1e6;
// A calibrated CPU (a file whose gpu carries "measured") sustains 1e9 to 1e13 FLOP/s, below any
// accelerator: its peak_flops (the fastest measured fp32 product) is held to [kMinCpuPeakFlops,
// kMaxPeakFlops] instead, and the products it measured are themselves checked for units
// (measured_rates.cc).
inline constexpr double kMinCpuPeakFlops = 1e9;

struct Link {
  std::string name;                  // "NVLink", "InfiniBand"
  double bandwidth_bytes_per_s = 0;  // per GPU, per direction
  double latency_us = 0;             // per step
};

struct GpuSpec {
  std::string name;
  double memory_bytes = 0;  // usable memory per GPU
  double peak_flops = 0;    // dense bf16/fp16 tensor-core peak
  // Share of peak the model's matrix multiplies sustain; compute time = FLOPs /
  // (peak_flops * compute_efficiency). An assumption until a calibrated cluster file sets it.
  double compute_efficiency = 1;
  // The clock's rates (rates.h). Presets carry them; a cluster file may ("gpu.rates"). Without
  // them the clock prices products at compute_efficiency of peak and nothing else.
  Rates rates;
  // Rates measured on the CPU the ranks compute on (`dtrain calibrate --compute`, "gpu.measured"
  // in a cluster file); absent (present false) on presets and uncalibrated files. With them `plan`
  // and the train report price dtrain's engine (engine_clock.h).
  MeasuredRates measured;
};

struct Cluster {
  std::string name;
  int nodes = 0;
  int gpus_per_node = 0;
  GpuSpec gpu;
  Link intra_node;  // between GPUs of one node
  Link inter_node;  // between nodes, per GPU (each GPU has its own NIC on DGX nodes)
  int world() const { return nodes * gpus_per_node; }
};

// A node type: its GPU and its links (gpus_per_node is the node's usual count).
struct NodePreset {
  std::string name;  // "A100-80GB", "H100-80GB", "H200-141GB"
  std::vector<std::string> aliases;
  int gpus_per_node = 8;
  GpuSpec gpu;
  Link intra_node;
  Link inter_node;
};
const std::vector<NodePreset>& node_presets();

// "8x8xH100" (nodes x GPUs per node x node type) or "8xH100" (the node's GPU count); a path
// ending in .json reads the file. Throws Error naming --cluster (or the file and the field).
Cluster parse_cluster(std::string_view spec);
// A file that is missing, unreadable or invalid is refused with kClusterFileHint appended.
Cluster read_cluster_file(const std::string& path);
// Where a cluster file comes from, for every refusal of one.
inline constexpr const char* kClusterFileHint =
    "write a template with `dtrain plan --cluster 8x8xH100 --print-cluster > FILE.json` and edit "
    "it, or measure this machine with `dtrain calibrate -o FILE.json`";

// JSON form: {"name", "nodes", "gpus_per_node", "gpu": {"name", "memory_bytes", "peak_flops",
// "compute_efficiency", "rates": {rates.h}, "measured": {measured_rates.h}}, "intra_node": {"name",
// "bandwidth_bytes_per_s", "latency_us"}, "inter_node": {...}}. An optional "preset": "H100" fills
// every field the file leaves out. `source` names the file in errors.
Cluster cluster_from_json(const nlohmann::json& j, std::string_view source);
nlohmann::json to_json(const Cluster& c);

// Throws Error naming the field when a size or rate is not positive.
void validate(const Cluster& c);

}  // namespace dtrain::plan
