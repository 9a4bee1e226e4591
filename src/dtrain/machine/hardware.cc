// Node presets with their sources, the "NxGxTYPE" parser and the cluster JSON reader/writer.
#include "dtrain/machine/hardware.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/core/files.h"
#include "dtrain/machine/format.h"

namespace dtrain::plan {
namespace {

using nlohmann::json;

// NCCL's own cost model (NVIDIA/nccl src/graph/tuning.cc, hwLat, Ring / Simple protocol): 3.4 us
// per ring step over NVLink and 9.6 us per step over the network. These are the library's
// modelling constants, not measurements of a given cluster; NCCL's per-call base latency
// (8.4 us) is left out, as our model charges latency per step only.
constexpr double kNvlinkStepLatencyUs = 3.4;
constexpr double kNetworkStepLatencyUs = 9.6;
// Assumption, not a datasheet figure: the share of peak the transformer's matrix multiplies
// sustain. Narayanan et al. 2021 (Table 1) measured 52% of peak end to end for their 1T run on
// A100s, pipeline bubble and communication included; `dtrain bench plan` prints our prediction
// for that run beside it. A calibrated cluster file replaces this figure.
constexpr double kAssumedComputeEfficiency = 0.6;

// The clock's four efficiency parameters (rates.h), shared by every GPU preset. Fitted by
// `dtrain bench clock --fit` on the full-recompute column of Korthikanti et al. 2022 Table 5
// (22B, 175B, 530B, 1T on A100s: 1.42, 18.13, 49.05, 94.42 s per iteration, the layouts of
// their Table 3) and frozen here; never fitted on anything else. A fit is of the clock, so it
// was redone on that same column each time the clock's model changed (docs/clock.md): under the
// closed-form pipeline 0.87 / 42 us / 0.50 / 1.00; under the simulated pipeline 0.82 / 30 us /
// 0.50 / 1.00; since the products' roofline (a thin product held to its bytes) as below. The
// H100 and H200 presets reuse them; docs/clock-validation.md, "One H200, measured", checks them
// on one H200.
// What each stands for:
//   kGemmEfficiency    large matrix products' share of the tensor-core peak (cuBLAS on big tiles)
//   kKernelOverheadUs  fixed cost per kernel call: launch, tail wave, stream synchronisation;
//                      also the products' small-shape falloff
//   kMemoryEfficiency  memory-bound kernels' share of the HBM datasheet bandwidth, and the
//                      thin products' (their operands and result streamed)
//   kLinkEfficiency    collectives' share of a link's nominal bandwidth (NCCL busbw / datasheet)
constexpr double kGemmEfficiency = 0.81;
constexpr double kKernelOverheadUs = 32;
constexpr double kMemoryEfficiency = 0.60;
constexpr double kLinkEfficiency = 1.00;

// A preset's rates: its datasheet memory bandwidth and fp32 peak, the four parameters above.
Rates preset_rates(double memory_bytes_per_s, double fp32_peak_flops) {
  Rates r;
  r.present = true;
  r.memory_bytes_per_s = memory_bytes_per_s;
  r.fp32_peak_flops = fp32_peak_flops;
  r.gemm_efficiency = kGemmEfficiency;
  r.kernel_overhead_us = kKernelOverheadUs;
  r.memory_efficiency = kMemoryEfficiency;
  r.link_efficiency = kLinkEfficiency;
  return r;
}

std::vector<NodePreset> make_node_presets() {
  std::vector<NodePreset> p;
  {
    NodePreset n;
    n.name = "A100-80GB";
    n.aliases = {"a100", "a100-80gb", "dgx-a100"};
    // NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): 80 GB HBM2e; BF16 tensor core
    // 312 TFLOP/s dense (624 with sparsity). We budget 80e9 bytes per GPU; the device has
    // 80 GiB, the difference is left for the CUDA context and allocator fragmentation.
    n.gpu = {"A100-SXM4-80GB", 80e9, 312e12, kAssumedComputeEfficiency, {}};
    // Same datasheet: HBM2e at 2,039 GB/s; FP32 (non-tensor) 19.5 TFLOP/s.
    n.gpu.rates = preset_rates(2039e9, 19.5e12);
    // Same datasheet: third-generation NVLink, 600 GB/s per GPU counting both directions
    // (12 links x 50 GB/s), so 300 GB/s per direction.
    n.intra_node = {"NVLink", 300e9, kNvlinkStepLatencyUs};
    // NVIDIA DGX A100 datasheet: 8 single-port ConnectX-6 HDR InfiniBand 200 Gb/s for the
    // compute fabric, one per GPU: 25 GB/s per GPU per direction.
    n.inter_node = {"InfiniBand", 25e9, kNetworkStepLatencyUs};
    p.push_back(n);
  }
  {
    NodePreset n;
    n.name = "H100-80GB";
    n.aliases = {"h100", "h100-80gb", "dgx-h100"};
    // NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3; BF16 tensor core 989 TFLOP/s
    // dense (the datasheet's 1,979 is with sparsity).
    n.gpu = {"H100-SXM5-80GB", 80e9, 989e12, kAssumedComputeEfficiency, {}};
    // Same datasheet: HBM3 at 3.35 TB/s; FP32 (non-tensor) 67 TFLOP/s.
    n.gpu.rates = preset_rates(3350e9, 67e12);
    // Same datasheet: fourth-generation NVLink, 900 GB/s per GPU counting both directions.
    n.intra_node = {"NVLink", 450e9, kNvlinkStepLatencyUs};
    // NVIDIA DGX H100 datasheet: 8 single-port ConnectX-7 NDR InfiniBand 400 Gb/s for the
    // compute fabric, one per GPU: 50 GB/s per GPU per direction.
    n.inter_node = {"InfiniBand", 50e9, kNetworkStepLatencyUs};
    p.push_back(n);
  }
  {
    NodePreset n;
    n.name = "H200-141GB";
    n.aliases = {"h200", "h200-141gb", "dgx-h200"};
    // NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e; BF16 tensor core 989 TFLOP/s
    // dense, the H100's compute (the datasheet's 1,979 is with sparsity).
    n.gpu = {"H200-SXM-141GB", 141e9, 989e12, kAssumedComputeEfficiency, {}};
    // Same datasheet: HBM3e at 4.8 TB/s; FP32 (non-tensor) 67 TFLOP/s.
    n.gpu.rates = preset_rates(4800e9, 67e12);
    // Same datasheet: fourth-generation NVLink, 900 GB/s per GPU counting both directions.
    n.intra_node = {"NVLink", 450e9, kNvlinkStepLatencyUs};
    // NVIDIA DGX H200 datasheet: 8 single-port ConnectX-7 400 Gb/s for the compute fabric, one
    // per GPU: 50 GB/s per GPU per direction.
    n.inter_node = {"InfiniBand", 50e9, kNetworkStepLatencyUs};
    p.push_back(n);
  }
  return p;
}

const NodePreset* find_node(std::string_view type) {
  const std::string key = lowercase(type);
  for (const NodePreset& n : node_presets()) {
    if (lowercase(n.name) == key) return &n;
    for (const std::string& a : n.aliases) {
      if (a == key) return &n;
    }
  }
  return nullptr;
}

std::string known_nodes() {
  std::string out;
  for (const NodePreset& n : node_presets()) {
    out += (out.empty() ? "" : ", ") + n.name;
    for (const std::string& a : n.aliases) out += ", " + a;
  }
  return out;
}

bool parse_positive_int(std::string_view text, int* out) {
  if (text.empty() || text.size() > 7) return false;
  int v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return v > 0;
}

Cluster from_node(const NodePreset& n, int nodes, int gpus_per_node) {
  Cluster c;
  c.name = std::to_string(nodes) + "x" + std::to_string(gpus_per_node) + "x" + n.name;
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  c.gpu = n.gpu;
  c.intra_node = n.intra_node;
  c.inter_node = n.inter_node;
  return c;
}

// Reads field `key` of object `obj` (path `where` for errors) into `out`: a positive number,
// required unless `has_default`.
void read_number(const json& obj, const char* key, const std::string& where,
                 std::string_view source, bool has_default, double* out, bool allow_zero = false) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    DTRAIN_CHECK(has_default, "cluster file '", source, "': missing field '", where, key, "'");
    return;
  }
  DTRAIN_CHECK(it->is_number(), "cluster file '", source, "': field '", where, key,
               "' must be a number, got ", it->dump());
  const double v = it->get<double>();
  DTRAIN_CHECK(v > 0 || (allow_zero && v == 0), "cluster file '", source, "': field '", where, key,
               "' must be ", allow_zero ? "non-negative" : "positive", ", got ", it->dump());
  *out = v;
}

void read_string(const json& obj, const char* key, std::string_view source, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return;
  DTRAIN_CHECK(it->is_string(), "cluster file '", source, "': field '", key,
               "' must be a string, got ", it->dump());
  *out = it->get<std::string>();
}

const json& read_object(const json& obj, const char* key, std::string_view source,
                        bool has_default) {
  static const json kEmpty = json::object();
  auto it = obj.find(key);
  if (it == obj.end()) {
    DTRAIN_CHECK(has_default, "cluster file '", source, "': missing object '", key, "'");
    return kEmpty;
  }
  DTRAIN_CHECK(it->is_object(), "cluster file '", source, "': field '", key,
               "' must be an object, got ", it->dump());
  return *it;
}

void read_link(const json& obj, const char* key, std::string_view source, bool has_default,
               Link* link) {
  const json& j = read_object(obj, key, source, has_default);
  const std::string where = std::string(key) + ".";
  read_string(j, "name", source, &link->name);
  read_number(j, "bandwidth_bytes_per_s", where, source, has_default, &link->bandwidth_bytes_per_s);
  read_number(j, "latency_us", where, source, has_default, &link->latency_us, true);
}

json link_json(const Link& l) {
  return {{"name", l.name},
          {"bandwidth_bytes_per_s", l.bandwidth_bytes_per_s},
          {"latency_us", l.latency_us}};
}

}  // namespace

const std::vector<NodePreset>& node_presets() {
  static const std::vector<NodePreset> presets = make_node_presets();
  return presets;
}

Cluster parse_cluster(std::string_view spec) {
  DTRAIN_CHECK(!spec.empty(), "--cluster is empty (expected e.g. 8x8xH100 or FILE.json)");
  if (spec.size() > 5 && lowercase(spec.substr(spec.size() - 5)) == ".json") {
    return read_cluster_file(std::string(spec));
  }
  // NODESxGPUSxTYPE or NODESxTYPE.
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (int i = 0; i < 2; ++i) {
    const size_t x = spec.find_first_of("xX", start);
    if (x == std::string_view::npos) break;
    int dummy = 0;
    if (!parse_positive_int(spec.substr(start, x - start), &dummy)) break;
    parts.push_back(spec.substr(start, x - start));
    start = x + 1;
  }
  const std::string_view type = spec.substr(start);
  DTRAIN_CHECK(!parts.empty() && !type.empty(), "--cluster '", spec,
               "' is not NODESxGPUSxTYPE (e.g. 8x8xH100), NODESxTYPE or a .json file");
  const NodePreset* node = find_node(type);
  DTRAIN_CHECK(node != nullptr, "--cluster '", spec, "': unknown node type '", type,
               "' (known: ", known_nodes(), ")");
  int nodes = 0, gpus = node->gpus_per_node;
  parse_positive_int(parts[0], &nodes);
  if (parts.size() == 2) parse_positive_int(parts[1], &gpus);
  return from_node(*node, nodes, gpus);
}

Cluster read_cluster_file(const std::string& path) {
  // Every refusal says where a good file comes from.
  try {
    // Missing, a directory or unreadable: said as such (a directory would otherwise open and
    // fail in the JSON reader with the C library's words).
    check_input_file(path, "--cluster");
    std::ifstream in(path);
    DTRAIN_CHECK(in.good(), "--cluster: cannot open cluster file '", path, "'");
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(str("cluster file '", path, "' is not valid JSON: ", e.what()));
    }
    return cluster_from_json(j, path);
  } catch (const Error& e) {
    throw Error(str(e.what(), " (", kClusterFileHint, ")"));
  }
}

Cluster cluster_from_json(const json& j, std::string_view source) {
  DTRAIN_CHECK(j.is_object(), "cluster file '", source, "': expected a JSON object at the top");
  Cluster c;
  bool has_base = false;
  if (auto it = j.find("preset"); it != j.end()) {
    DTRAIN_CHECK(it->is_string(), "cluster file '", source, "': field 'preset' must be a string");
    const NodePreset* node = find_node(it->get<std::string>());
    DTRAIN_CHECK(node != nullptr, "cluster file '", source,
                 "': field 'preset': unknown node type '", it->get<std::string>(),
                 "' (known: ", known_nodes(), ")");
    c = from_node(*node, 1, node->gpus_per_node);
    has_base = true;
  }
  read_string(j, "name", source, &c.name);
  double nodes = c.nodes, gpus = c.gpus_per_node;
  read_number(j, "nodes", "", source, false, &nodes);
  read_number(j, "gpus_per_node", "", source, has_base, &gpus);
  // Range first: casting a double outside int's range (1e43) to int is undefined behaviour.
  const auto is_int = [](double x) {
    return x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max() &&
           x == static_cast<int>(x);
  };
  DTRAIN_CHECK(is_int(nodes) && is_int(gpus), "cluster file '", source,
               "': fields 'nodes' and 'gpus_per_node' must be integers");
  c.nodes = static_cast<int>(nodes);
  c.gpus_per_node = static_cast<int>(gpus);
  const json& gpu = read_object(j, "gpu", source, has_base);
  read_string(gpu, "name", source, &c.gpu.name);
  read_number(gpu, "memory_bytes", "gpu.", source, has_base, &c.gpu.memory_bytes);
  read_number(gpu, "peak_flops", "gpu.", source, has_base, &c.gpu.peak_flops);
  read_number(gpu, "compute_efficiency", "gpu.", source, true, &c.gpu.compute_efficiency);
  DTRAIN_CHECK(c.gpu.compute_efficiency <= 1, "cluster file '", source,
               "': field 'gpu.compute_efficiency' must be in (0, 1], got ",
               c.gpu.compute_efficiency);
  if (auto it = gpu.find("rates"); it != gpu.end()) c.gpu.rates = rates_from_json(*it, source);
  if (auto it = gpu.find("measured"); it != gpu.end()) {
    c.gpu.measured = measured_rates_from_json(*it, source);
  }
  read_link(j, "intra_node", source, has_base, &c.intra_node);
  read_link(j, "inter_node", source, has_base, &c.inter_node);
  if (c.name.empty()) c.name = std::string(source);
  // Each field in its unit, within what hardware can be (hardware.h).
  auto plausible = [&](const char* field, double value, double lo, double hi, const char* unit,
                       const char* example) {
    DTRAIN_CHECK(value >= lo && value <= hi, "cluster file '", source, "': field '", field, "' is ",
                 value, " ", unit, ", outside [", lo, ", ", hi, "] (", example, ")");
  };
  plausible("gpu.memory_bytes", c.gpu.memory_bytes, kMinGpuMemoryBytes, kMaxGpuMemoryBytes, "bytes",
            "in bytes: 80 GB is 8e10");
  if (c.gpu.measured.present) {
    plausible("gpu.peak_flops", c.gpu.peak_flops, kMinCpuPeakFlops, kMaxPeakFlops, "FLOP/s",
              "a calibrated CPU's fastest product, in FLOP/s: 100 GFLOP/s is 1e11");
  } else {
    plausible("gpu.peak_flops", c.gpu.peak_flops, kMinPeakFlops, kMaxPeakFlops, "FLOP/s",
              "in FLOP/s: 312 TFLOP/s is 3.12e14");
  }
  for (const auto& [name, link] :
       {std::pair{"intra_node", &c.intra_node}, std::pair{"inter_node", &c.inter_node}}) {
    plausible(name == std::string_view("intra_node") ? "intra_node.bandwidth_bytes_per_s"
                                                     : "inter_node.bandwidth_bytes_per_s",
              link->bandwidth_bytes_per_s, kMinLinkBytesPerS, kMaxLinkBytesPerS, "bytes/s",
              "in bytes/s per GPU and direction: 450 GB/s is 4.5e11");
    plausible(
        name == std::string_view("intra_node") ? "intra_node.latency_us" : "inter_node.latency_us",
        link->latency_us, 0, kMaxLinkLatencyUs, "us", "microseconds per step");
  }
  return c;
}

json to_json(const Cluster& c) {
  json j = {{"name", c.name},
            {"nodes", c.nodes},
            {"gpus_per_node", c.gpus_per_node},
            {"gpu",
             {{"name", c.gpu.name},
              {"memory_bytes", c.gpu.memory_bytes},
              {"peak_flops", c.gpu.peak_flops},
              {"compute_efficiency", c.gpu.compute_efficiency}}},
            {"intra_node", link_json(c.intra_node)},
            {"inter_node", link_json(c.inter_node)}};
  if (c.gpu.rates.present) j["gpu"]["rates"] = to_json(c.gpu.rates);
  if (c.gpu.measured.present) j["gpu"]["measured"] = to_json(c.gpu.measured);
  return j;
}

void validate(const Cluster& c) {
  DTRAIN_CHECK(c.nodes > 0, "--nodes must be positive, got ", c.nodes);
  DTRAIN_CHECK(c.gpus_per_node > 0, "--gpus-per-node must be positive, got ", c.gpus_per_node);
  const int64_t gpus = int64_t{c.nodes} * c.gpus_per_node;
  DTRAIN_CHECK(gpus <= kMaxGpus, "--nodes ", c.nodes, " x --gpus-per-node ", c.gpus_per_node, " = ",
               gpus, " GPUs; at most ", kMaxGpus, " are supported");
  // The overrides are scaled from TFLOP/s and GB/s: a huge one becomes inf, which no figure
  // survives.
  for (const auto& [flag, value] :
       {std::pair{"--gpu-memory", c.gpu.memory_bytes},
        std::pair{"--peak-tflops", c.gpu.peak_flops * 1e-12},
        std::pair{"--intra-bandwidth", c.intra_node.bandwidth_bytes_per_s * 1e-9},
        std::pair{"--inter-bandwidth", c.inter_node.bandwidth_bytes_per_s * 1e-9},
        std::pair{"--intra-latency-us", c.intra_node.latency_us},
        std::pair{"--inter-latency-us", c.inter_node.latency_us}}) {
    DTRAIN_CHECK(std::isfinite(value), flag, " must be a finite number, got ", value);
  }
  DTRAIN_CHECK(c.gpu.memory_bytes > 0, "--gpu-memory must be positive, got ", c.gpu.memory_bytes);
  DTRAIN_CHECK(c.gpu.peak_flops > 0, "--peak-tflops must be positive, got ",
               c.gpu.peak_flops * 1e-12);
  DTRAIN_CHECK(c.gpu.compute_efficiency > 0 && c.gpu.compute_efficiency <= 1,
               "--compute-efficiency must be in (0, 1], got ", c.gpu.compute_efficiency);
  DTRAIN_CHECK(c.intra_node.bandwidth_bytes_per_s > 0, "--intra-bandwidth must be positive, got ",
               c.intra_node.bandwidth_bytes_per_s * 1e-9);
  DTRAIN_CHECK(c.inter_node.bandwidth_bytes_per_s > 0, "--inter-bandwidth must be positive, got ",
               c.inter_node.bandwidth_bytes_per_s * 1e-9);
  DTRAIN_CHECK(c.intra_node.latency_us >= 0, "--intra-latency-us must not be negative, got ",
               c.intra_node.latency_us);
  DTRAIN_CHECK(c.inter_node.latency_us >= 0, "--inter-latency-us must not be negative, got ",
               c.inter_node.latency_us);
}

}  // namespace dtrain::plan
