// The rates the clock (time_model.h) turns work into seconds with: matrix products as a peak
// times an efficiency curve, memory-bound kernels as bytes per second plus a fixed cost per
// kernel call, and the links' share of their nominal bandwidth that collectives reach.
//
// A GPU preset takes its peaks and memory bandwidth from the datasheet and four efficiency
// parameters, no more (fitted on Korthikanti et al. 2022 Table 5's full-recompute column alone,
// refitted on it each time the clock's law changed; see hardware.cc and docs/clock.md):
//   gemm_efficiency    share of the precision's peak a large matrix product sustains (a thin
//                      one is held to its bytes at memory_efficiency: matmul_seconds)
//   kernel_overhead_us fixed cost of every kernel call (launch, tail wave, synchronisation).
//                      It is also the matrix product's small-shape falloff: a product of W
//                      FLOPs runs at gemm_efficiency x W / (W + gemm_efficiency x peak x t_k)
//                      of peak, so a product 10x smaller than peak x t_k runs at a tenth.
//   memory_efficiency  share of the memory bandwidth the memory-bound kernels reach
//   link_efficiency    share of a link's nominal bandwidth the collectives reach (NCCL's busbw
//                      against the datasheet figure)
// Every efficiency 1 and no kernel cost is the datasheet-only clock.
#pragma once

#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace dtrain::plan {

// The cluster file's rates schema; a file with another version is refused.
inline constexpr int kRatesVersion = 1;

// Bounds far past any real device, to catch a value in the wrong unit: memory bandwidth 1 GB/s
// to 1 PB/s, a kernel's fixed cost up to 10 ms, efficiencies in (0, 1].
inline constexpr double kMinMemoryBytesPerS = 1e9;
inline constexpr double kMaxMemoryBytesPerS = 1e15;
inline constexpr double kMaxKernelOverheadUs = 1e4;

enum class Precision { bf16, fp32 };  // fp16 runs at bf16's rate on every preset
std::string_view name(Precision p);

struct Rates {
  bool present = false;           // false: a cluster without rates (the legacy clock, see below)
  double memory_bytes_per_s = 0;  // datasheet memory bandwidth (HBM)
  double fp32_peak_flops = 0;     // dense fp32 matrix-product peak (bf16's is GpuSpec::peak_flops)
  double gemm_efficiency = 1;
  double kernel_overhead_us = 0;
  double memory_efficiency = 1;
  double link_efficiency = 1;
};

// The datasheet-only variant of `r`: every efficiency 1, no kernel cost.
Rates datasheet_only(Rates r);

// Seconds of one (M, N, K) matrix product, `batch` of them in one kernel call, at `peak_flops`
// (the precision's), a roofline: max(2 M N K batch / (gemm_efficiency x peak), (M K + K N + M N)
// batch element_bytes / (memory_efficiency x memory bandwidth)) + kernel_overhead. The second
// term binds on thin products (the attention's, K or N a head's width); element_bytes 0, or a
// cluster without rates, prices FLOPs alone.
double matmul_seconds(const Rates& r, double peak_flops, double m, double n, double k,
                      double batch = 1, double element_bytes = 0);
// Seconds of a memory-bound kernel moving `bytes` (read + written): bytes / (memory_efficiency x
// memory bandwidth) + kernel_overhead. A cluster without rates has no memory bandwidth: 0 s.
double memory_bound_seconds(const Rates& r, double bytes, double calls = 1);

// "rates" object of the cluster file: {"version": 1, "memory_bytes_per_s", "fp32_peak_flops",
// "gemm_efficiency", "kernel_overhead_us", "memory_efficiency", "link_efficiency"}. Every field
// required; throws Error naming the file and the field when one is missing or implausible.
// A file's rates are whole or absent (absent: a preset's, or none).
Rates rates_from_json(const nlohmann::json& j, std::string_view source);
nlohmann::json to_json(const Rates& r);

}  // namespace dtrain::plan
