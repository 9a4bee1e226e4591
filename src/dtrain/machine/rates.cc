// Rates: the two cost laws (matrix product, memory-bound kernel) and the cluster file's
// "gpu.rates" object, read field by field with the field named in every refusal.
#include "dtrain/machine/rates.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"

namespace dtrain::plan {

using nlohmann::json;

std::string_view name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

Rates datasheet_only(Rates r) {
  r.gemm_efficiency = 1;
  r.kernel_overhead_us = 0;
  r.memory_efficiency = 1;
  r.link_efficiency = 1;
  return r;
}

double matmul_seconds(const Rates& r, double peak_flops, double m, double n, double k, double batch,
                      double element_bytes) {
  const double flops = 2.0 * m * n * k * batch;
  double seconds = flops / (r.gemm_efficiency * peak_flops);
  if (r.present && element_bytes > 0) {
    // A thin product (the attention's s x s x head width) moves more bytes than its FLOPs can
    // cover: it runs no faster than its operands and result stream at the memory-bound rate.
    const double bytes = (m * k + k * n + m * n) * batch * element_bytes;
    seconds = std::max(seconds, bytes / (r.memory_efficiency * r.memory_bytes_per_s));
  }
  return seconds + r.kernel_overhead_us * 1e-6;
}

double memory_bound_seconds(const Rates& r, double bytes, double calls) {
  if (!r.present) return 0;
  return bytes / (r.memory_efficiency * r.memory_bytes_per_s) + calls * r.kernel_overhead_us * 1e-6;
}

namespace {

double field(const json& j, const char* key, std::string_view source, double lo, double hi,
             const char* unit, bool zero_ok = false) {
  auto it = j.find(key);
  DTRAIN_CHECK(it != j.end(), "cluster file '", source, "': missing field 'gpu.rates.", key, "'");
  DTRAIN_CHECK(it->is_number(), "cluster file '", source, "': field 'gpu.rates.", key,
               "' must be a number, got ", it->dump());
  const double v = it->get<double>();
  DTRAIN_CHECK((zero_ok ? v >= lo : v > lo) && v <= hi, "cluster file '", source,
               "': field 'gpu.rates.", key, "' is ", v, ", outside ", zero_ok ? "[" : "(", lo, ", ",
               hi, "] ", unit);
  return v;
}

}  // namespace

Rates rates_from_json(const json& j, std::string_view source) {
  DTRAIN_CHECK(j.is_object(), "cluster file '", source, "': field 'gpu.rates' must be an object");
  auto version = j.find("version");
  DTRAIN_CHECK(version != j.end(), "cluster file '", source,
               "': missing field 'gpu.rates.version' (this build reads version ", kRatesVersion,
               ")");
  DTRAIN_CHECK(version->is_number_integer() && version->get<int>() == kRatesVersion,
               "cluster file '", source, "': field 'gpu.rates.version' is ", version->dump(),
               "; this build reads version ", kRatesVersion);
  Rates r;
  r.present = true;
  r.memory_bytes_per_s = field(j, "memory_bytes_per_s", source, kMinMemoryBytesPerS,
                               kMaxMemoryBytesPerS, "bytes/s (2 TB/s is 2e12)");
  r.fp32_peak_flops =
      field(j, "fp32_peak_flops", source, 1e9, 1e17, "FLOP/s (19.5 TFLOP/s is 1.95e13)");
  r.gemm_efficiency = field(j, "gemm_efficiency", source, 0, 1, "(a share of peak)");
  r.kernel_overhead_us =
      field(j, "kernel_overhead_us", source, 0, kMaxKernelOverheadUs, "us per kernel call", true);
  r.memory_efficiency = field(j, "memory_efficiency", source, 0, 1, "(a share of bandwidth)");
  r.link_efficiency = field(j, "link_efficiency", source, 0, 1, "(a share of bandwidth)");
  return r;
}

json to_json(const Rates& r) {
  return {{"version", kRatesVersion},
          {"memory_bytes_per_s", r.memory_bytes_per_s},
          {"fp32_peak_flops", r.fp32_peak_flops},
          {"gemm_efficiency", r.gemm_efficiency},
          {"kernel_overhead_us", r.kernel_overhead_us},
          {"memory_efficiency", r.memory_efficiency},
          {"link_efficiency", r.link_efficiency}};
}

}  // namespace dtrain::plan
