// The measured rates' three look-ups (a matrix product by shape, a memory-bound kernel, a
// collective) and the cluster file's "gpu.measured" object, read field by field with the field's
// full path named in every refusal.
#include "dtrain/machine/measured_rates.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"

namespace dtrain::plan {

using nlohmann::json;

namespace {

constexpr std::array<std::string_view, kKernelOpCount> kKernelOpNames = {"layernorm_forward",
                                                                         "layernorm_backward",
                                                                         "gelu_forward",
                                                                         "gelu_backward",
                                                                         "residual_forward",
                                                                         "residual_backward",
                                                                         "softmax_forward",
                                                                         "softmax_backward",
                                                                         "crossentropy_forward",
                                                                         "crossentropy_backward",
                                                                         "encoder_forward",
                                                                         "encoder_backward",
                                                                         "adamw",
                                                                         "grad_norm",
                                                                         "bf16_convert"};

constexpr std::array<std::string_view, 5> kCollectives = {"all_reduce", "reduce_scatter",
                                                          "all_gather", "send_recv", "all_to_all"};
constexpr std::array<std::string_view, 5> kAlgorithms = {"direct", "ring", "tree", "hierarchical",
                                                         "pairwise"};
constexpr std::array<std::string_view, 2> kLinks = {"intra_node", "inter_node"};

template <size_t N>
bool one_of(const std::array<std::string_view, N>& names, std::string_view s) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

template <size_t N>
std::string listed(const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// The thread count among `samples` of `precision` nearest to `threads` (a tie goes to the
// smaller count: fewer threads is the conservative guess). 0 when none has that precision.
int nearest_threads(const std::vector<GemmSample>& samples, Precision precision, int threads) {
  int best = 0;
  for (const GemmSample& s : samples) {
    if (s.precision != precision) continue;
    const int d = std::abs(s.threads - threads), best_d = std::abs(best - threads);
    if (best == 0 || d < best_d || (d == best_d && s.threads < best)) best = s.threads;
  }
  return best;
}

// Where `x` falls on one axis of the grid: the two grid points around it (equal at an edge or
// on a one-point axis) and the weight of the upper one in log space. `clamped` is x moved onto
// the grid (the nearest edge when it lies outside).
struct AxisBracket {
  double lo = 0, hi = 0, weight_hi = 0, clamped = 0;
};

AxisBracket bracket(const std::set<double>& axis, double x) {
  AxisBracket b;
  if (x <= *axis.begin() || axis.size() == 1) {
    b.lo = b.hi = b.clamped = x <= *axis.begin() ? *axis.begin() : *axis.rbegin();
    return b;
  }
  if (x >= *axis.rbegin()) {
    b.lo = b.hi = b.clamped = *axis.rbegin();
    return b;
  }
  auto upper = axis.upper_bound(x);  // first point above x; x >= the first point, so not begin
  b.hi = *upper;
  b.lo = *std::prev(upper);
  b.clamped = x;
  b.weight_hi = std::log(x / b.lo) / std::log(b.hi / b.lo);
  return b;
}

std::string where(std::string_view source, const std::string& field) {
  return str("cluster file '", source, "': field 'gpu.measured.", field, "'");
}

const json& member(const json& j, const char* key, std::string_view source,
                   const std::string& path) {
  DTRAIN_CHECK(j.is_object(), where(source, path), " must be an object, got ", j.dump());
  auto it = j.find(key);
  const std::string field = path.empty() ? std::string(key) : path + "." + key;
  DTRAIN_CHECK(it != j.end(), "cluster file '", source, "': missing field 'gpu.measured.", field,
               "'");
  return *it;
}

// A number in [lo, hi] (or (lo, hi] when lo is exclusive), `unit` saying what it is in.
double number(const json& j, const char* key, std::string_view source, const std::string& path,
              double lo, bool lo_inclusive, double hi, const char* unit) {
  const json& v = member(j, key, source, path);
  const std::string field = path.empty() ? std::string(key) : path + "." + key;
  DTRAIN_CHECK(v.is_number(), where(source, field), " must be a number, got ", v.dump());
  const double x = v.get<double>();
  DTRAIN_CHECK((lo_inclusive ? x >= lo : x > lo) && x <= hi, where(source, field), " is ", x,
               "; it must be in ", lo_inclusive ? "[" : "(", lo, ", ", hi, "] ", unit);
  return x;
}

int whole(const json& j, const char* key, std::string_view source, const std::string& path, int lo,
          int hi) {
  const json& v = member(j, key, source, path);
  const std::string field = path.empty() ? std::string(key) : path + "." + key;
  DTRAIN_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
               where(source, field), " is ", v.dump(), "; it must be a whole number in [", lo, ", ",
               hi, "]");
  return static_cast<int>(v.get<int64_t>());
}

std::string text(const json& j, const char* key, std::string_view source, const std::string& path) {
  const json& v = member(j, key, source, path);
  DTRAIN_CHECK(v.is_string(), where(source, path.empty() ? std::string(key) : path + "." + key),
               " must be a string, got ", v.dump());
  return v.get<std::string>();
}

Precision precision_field(const json& j, std::string_view source, const std::string& path) {
  const std::string p = text(j, "precision", source, path);
  DTRAIN_CHECK(p == "fp32" || p == "bf16", where(source, path + ".precision"), " is '", p,
               "'; it must be fp32 or bf16");
  return p == "fp32" ? Precision::fp32 : Precision::bf16;
}

const json& array_field(const json& j, const char* key, std::string_view source) {
  const json& v = member(j, key, source, "");
  DTRAIN_CHECK(v.is_array(), where(source, key), " must be an array, got ", v.dump());
  return v;
}

// Bounds that catch a value in the wrong unit or a broken measurement, far past any machine:
// a product's shape up to 1e9 per side and its time in (0, 1e4] s, at most 1e17 FLOP/s (the
// cluster file's largest peak, hardware.h); memory-bound kernels at 1 MB/s to 1 PB/s with at
// most 1 s per call; collectives at 1 KB/s to 1 PB/s with at most 10 s latency; compute slowed
// at most 100x beside a communication thread.
constexpr double kMaxShape = 1e9;
constexpr double kMaxGemmSeconds = 1e4;
constexpr double kMaxGemmFlops = 1e17;
constexpr double kMinKernelBytesPerS = 1e6, kMaxKernelBytesPerS = 1e15, kMaxCallS = 1;
constexpr double kMinCollectiveBytesPerS = 1e3, kMaxCollectiveBytesPerS = 1e15;
constexpr double kMaxLatencyS = 10;
constexpr double kMaxInterference = 100;
// A scheduler time slice is milliseconds; a second per collective is no measurement.
constexpr double kMaxOversubscribedWaitS = 1;
constexpr double kMaxCacheBytes = 1e12;  // a terabyte of cache: a unit error, not a machine
constexpr int kMaxThreads = 4096, kMaxCores = 1000000, kMaxGroupRanks = 1000000;

GemmSample gemm_from_json(const json& j, std::string_view source, const char* array, size_t i) {
  const std::string path = str(array, "[", i, "]");
  GemmSample s;
  s.precision = precision_field(j, source, path);
  s.threads = whole(j, "threads", source, path, 1, kMaxThreads);
  s.m = number(j, "m", source, path, 1, true, kMaxShape, "(rows of C)");
  s.n = number(j, "n", source, path, 1, true, kMaxShape, "(columns of C)");
  s.k = number(j, "k", source, path, 1, true, kMaxShape, "(the summed dimension)");
  s.seconds = number(j, "seconds", source, path, 0, false, kMaxGemmSeconds, "seconds per call");
  const double flops_per_s = 2 * s.m * s.n * s.k / s.seconds;
  DTRAIN_CHECK(flops_per_s <= kMaxGemmFlops, where(source, path + ".seconds"), " is ", s.seconds,
               ": ", flops_per_s, " FLOP/s for a ", s.m, "x", s.n, "x", s.k,
               " product, past any machine (", kMaxGemmFlops, "); seconds, not microseconds?");
  return s;
}

KernelRate kernel_from_json(const json& j, std::string_view source, size_t i) {
  const std::string path = str("kernels[", i, "]");
  KernelRate k;
  const std::string op = text(j, "op", source, path);
  auto it = std::find(kKernelOpNames.begin(), kKernelOpNames.end(), op);
  DTRAIN_CHECK(it != kKernelOpNames.end(), where(source, path + ".op"), " is '", op,
               "'; known: ", listed(kKernelOpNames));
  k.op = static_cast<KernelOp>(it - kKernelOpNames.begin());
  k.precision = precision_field(j, source, path);
  k.bytes_per_s = number(j, "bytes_per_s", source, path, kMinKernelBytesPerS, true,
                         kMaxKernelBytesPerS, "bytes/s (20 GB/s is 2e10)");
  k.call_s = number(j, "call_s", source, path, 0, true, kMaxCallS, "seconds per call");
  return k;
}

CollectiveRate collective_from_json(const json& j, std::string_view source, size_t i) {
  const std::string path = str("collectives[", i, "]");
  CollectiveRate c;
  c.collective = text(j, "collective", source, path);
  DTRAIN_CHECK(one_of(kCollectives, c.collective), where(source, path + ".collective"), " is '",
               c.collective, "'; known: ", listed(kCollectives));
  c.algorithm = text(j, "algorithm", source, path);
  DTRAIN_CHECK(one_of(kAlgorithms, c.algorithm), where(source, path + ".algorithm"), " is '",
               c.algorithm, "'; known: ", listed(kAlgorithms));
  c.link = text(j, "link", source, path);
  DTRAIN_CHECK(one_of(kLinks, c.link), where(source, path + ".link"), " is '", c.link,
               "'; known: ", listed(kLinks));
  c.ranks = whole(j, "ranks", source, path, 2, kMaxGroupRanks);
  c.latency_s = number(j, "latency_s", source, path, 0, true, kMaxLatencyS, "seconds");
  c.bytes_per_s = number(j, "bytes_per_s", source, path, kMinCollectiveBytesPerS, true,
                         kMaxCollectiveBytesPerS, "bytes/s (10 GB/s is 1e10)");
  c.precision = precision_field(j, source, path);
  return c;
}

// Each (precision, threads) set of products must be a full grid (every m x n x k of its axes
// measured once), so that the look-up's multilinear interpolation always has its 8 corners.
void check_gemm_grids(const std::vector<GemmSample>& gemm, std::string_view source,
                      const char* array) {
  std::map<std::pair<Precision, int>, std::vector<size_t>> sets;
  for (size_t i = 0; i < gemm.size(); ++i) sets[{gemm[i].precision, gemm[i].threads}].push_back(i);
  for (const auto& [key, indices] : sets) {
    std::set<double> ms, ns, ks;
    std::set<std::tuple<double, double, double>> shapes;
    for (size_t i : indices) {
      const GemmSample& s = gemm[i];
      ms.insert(s.m);
      ns.insert(s.n);
      ks.insert(s.k);
      DTRAIN_CHECK(shapes.insert({s.m, s.n, s.k}).second, where(source, str(array, "[", i, "]")),
                   ": the ", name(key.first), " product ", s.m, "x", s.n, "x", s.k, " on ",
                   key.second, " threads is measured twice");
    }
    DTRAIN_CHECK(shapes.size() == ms.size() * ns.size() * ks.size(), where(source, array), ": the ",
                 name(key.first), " products on ", key.second, " threads are not a full ",
                 ms.size(), "x", ns.size(), "x", ks.size(), " grid of m x n x k (", shapes.size(),
                 " of ", ms.size() * ns.size() * ks.size(), " shapes measured)");
  }
}

}  // namespace

std::string_view name(KernelOp op) {
  return kKernelOpNames[static_cast<size_t>(op)];
}

// Bytes each kernel reads plus writes per element of its count, fp32 (4 bytes) throughout, from
// the loops in model/ops and optim. A per-row or per-column vector (LayerNorm's mean and rstd, a
// bias) is left out: it is C or T times smaller than the tensors and stays in cache.
double kernel_bytes_per_element(KernelOp op) {
  switch (op) {
    case KernelOp::layernorm_forward:  // reads inp, writes out (the row's second pass hits cache)
      return 8;
    case KernelOp::layernorm_backward:  // reads dout, inp; reads and writes dinp (accumulates)
      return 16;
    case KernelOp::gelu_forward:  // reads inp, writes out
      return 8;
    case KernelOp::gelu_backward:  // reads inp, dout; reads and writes dinp (accumulates)
      return 16;
    case KernelOp::residual_forward:  // reads inp, delta; writes out
      return 12;
    case KernelOp::residual_backward:  // reads dout; reads and writes dinp and ddelta
      return 20;
    case KernelOp::softmax_forward:  // in place: reads and writes each score of the causal half
      return 8;
    case KernelOp::softmax_backward:  // reads att; reads and writes ds in place
      return 12;
    case KernelOp::crossentropy_forward:  // reads logits, writes probs
      return 8;
    case KernelOp::crossentropy_backward:  // in place: reads probs, writes dlogits over them
      return 8;
    case KernelOp::encoder_forward:  // reads a wte row and a wpe row, writes out
      return 12;
    case KernelOp::encoder_backward:  // reads dout; reads and writes dwte's and dwpe's rows
      return 20;
    case KernelOp::adamw:  // reads param, grad, m, v; writes param, m, v
      return 28;
    case KernelOp::grad_norm:  // reads each gradient once
      return 4;
    case KernelOp::bf16_convert:  // reads 4 bytes, writes 2 (or the reverse)
      return 6;
  }
  return 0;
}

namespace {

// One (precision, threads) grid of values by shape, and its axes.
struct ShapeGrid {
  std::set<double> ms, ns, ks;
  std::map<std::tuple<double, double, double>, double> values;
};

ShapeGrid grid_of(const std::vector<GemmSample>& samples, Precision precision, int threads) {
  ShapeGrid g;
  for (const GemmSample& s : samples) {
    if (s.precision != precision || s.threads != threads) continue;
    g.ms.insert(s.m);
    g.ns.insert(s.n);
    g.ks.insert(s.k);
    g.values[{s.m, s.n, s.k}] = s.seconds;
  }
  return g;
}

// log(value) multilinear in (log m, log n, log k) over the 8 corners around the shape, clamped
// onto the grid (brackets say where). On a grid point one corner weighs 1: its value is returned
// as stored (exp(log(v)) can differ from v in the last bit).
double interpolate(const ShapeGrid& g, double m, double n, double k, AxisBracket& bm,
                   AxisBracket& bn, AxisBracket& bk, std::string_view what) {
  bm = bracket(g.ms, m);
  bn = bracket(g.ns, n);
  bk = bracket(g.ks, k);
  double log_v = 0, only_corner_v = 0;
  int corners_used = 0;
  for (int corner = 0; corner < 8; ++corner) {
    const bool hi_m = corner & 1, hi_n = corner & 2, hi_k = corner & 4;
    const double w = (hi_m ? bm.weight_hi : 1 - bm.weight_hi) *
                     (hi_n ? bn.weight_hi : 1 - bn.weight_hi) *
                     (hi_k ? bk.weight_hi : 1 - bk.weight_hi);
    if (w == 0) continue;
    auto it = g.values.find({hi_m ? bm.hi : bm.lo, hi_n ? bn.hi : bn.lo, hi_k ? bk.hi : bk.lo});
    DTRAIN_CHECK(it != g.values.end(), "measured rates: the ", what, " are not a full grid");
    log_v += w * std::log(it->second);
    only_corner_v = it->second;
    ++corners_used;
  }
  return corners_used == 1 ? only_corner_v : std::exp(log_v);
}

}  // namespace

double gemm_seconds(const MeasuredRates& r, Precision precision, int threads, double m, double n,
                    double k) {
  const int t = nearest_threads(r.gemm, precision, threads);
  DTRAIN_CHECK(t > 0, "measured rates: no ", name(precision), " matrix product was measured");
  AxisBracket bm, bn, bk;
  const double edge_s = interpolate(grid_of(r.gemm, precision, t), m, n, k, bm, bn, bk,
                                    str(name(precision), " products on ", t, " threads"));
  // Outside the grid: the edge shape's time, scaled by the FLOPs the shape has beyond it.
  return edge_s * (m / bm.clamped) * (n / bn.clamped) * (k / bk.clamped);
}

double gemm_warm_ratio(const MeasuredRates& r, Precision precision, int threads, double m, double n,
                       double k) {
  const int t = nearest_threads(r.gemm_warm, precision, threads);
  if (t == 0) return 1;
  // Each warm point over the cold sample of its shape (the cold grid holds every warm shape:
  // measured_rates_from_json checks it), then interpolated like the times themselves.
  ShapeGrid ratios = grid_of(r.gemm_warm, precision, t);
  for (auto& [shape, seconds] : ratios.values) {
    seconds /=
        gemm_seconds(r, precision, t, std::get<0>(shape), std::get<1>(shape), std::get<2>(shape));
  }
  AxisBracket bm, bn, bk;
  const double ratio = interpolate(ratios, m, n, k, bm, bn, bk,
                                   str("warm ", name(precision), " products on ", t, " threads"));
  return std::min(1.0, ratio);
}

double gemm_seconds_cached(const MeasuredRates& r, Precision precision, int threads, double m,
                           double n, double k, double warm_share) {
  const double cold = gemm_seconds(r, precision, threads, m, n, k);
  if (warm_share <= 0) return cold;
  const double share = std::min(1.0, warm_share);
  return cold * (1 - share * (1 - gemm_warm_ratio(r, precision, threads, m, n, k)));
}

double kernel_seconds(const MeasuredRates& r, KernelOp op, Precision precision, double elements,
                      double calls) {
  // The engine's memory-bound kernels run in fp32 under either precision, so a precision not
  // measured falls back to the op's other entry.
  const KernelRate* rate = nullptr;
  for (const KernelRate& k : r.kernels) {
    if (k.op != op) continue;
    if (k.precision == precision) {
      rate = &k;
      break;
    }
    if (rate == nullptr) rate = &k;
  }
  DTRAIN_CHECK(rate != nullptr, "measured rates: kernel '", name(op), "' was not measured");
  return calls * rate->call_s + elements * kernel_bytes_per_element(op) / rate->bytes_per_s;
}

bool has_collective_rate(const MeasuredRates& r, std::string_view collective,
                         std::string_view algorithm, std::string_view link) {
  return std::any_of(r.collectives.begin(), r.collectives.end(), [&](const CollectiveRate& c) {
    return c.collective == collective && c.algorithm == algorithm && c.link == link;
  });
}

double collective_seconds(const MeasuredRates& r, std::string_view collective,
                          std::string_view algorithm, std::string_view link, int ranks,
                          double bytes, Precision precision) {
  const CollectiveRate* best = nullptr;
  for (const CollectiveRate& c : r.collectives) {
    if (c.collective != collective || c.algorithm != algorithm || c.link != link) continue;
    // The asked precision first, then the nearest group size, then the smaller group.
    if (best != nullptr) {
      const bool precision_better = c.precision == precision && best->precision != precision;
      const bool precision_worse = c.precision != precision && best->precision == precision;
      if (precision_worse) continue;
      const int d = std::abs(c.ranks - ranks), best_d = std::abs(best->ranks - ranks);
      if (!precision_better && (d > best_d || (d == best_d && c.ranks >= best->ranks))) continue;
    }
    best = &c;
  }
  DTRAIN_CHECK(best != nullptr, "measured rates: no ", collective, " with the ", algorithm,
               " algorithm was measured on the ", link, " link");
  return best->latency_s + bytes / best->bytes_per_s;
}

MeasuredRates measured_rates_from_json(const json& j, std::string_view source) {
  DTRAIN_CHECK(j.is_object(), "cluster file '", source,
               "': field 'gpu.measured' must be an object, got ", j.dump());
  auto version = j.find("version");
  DTRAIN_CHECK(version != j.end(), "cluster file '", source,
               "': missing field 'gpu.measured.version' (this build reads version ",
               kMeasuredRatesVersion, ")");
  DTRAIN_CHECK(version->is_number_integer() && version->get<int64_t>() == kMeasuredRatesVersion,
               "cluster file '", source, "': field 'gpu.measured.version' is ", version->dump(),
               "; this build reads version ", kMeasuredRatesVersion,
               " (run dtrain calibrate --compute again)");
  MeasuredRates r;
  r.present = true;
  r.cpu = text(j, "cpu", source, "");
  r.cores = whole(j, "cores", source, "", 1, kMaxCores);
  r.comm_interference = number(j, "comm_interference", source, "", 1, true, kMaxInterference,
                               "(compute slowdown beside a communication thread, >= 1)");
  r.corun_slowdown = number(j, "corun_slowdown", source, "", 1, true, kMaxInterference,
                            "(compute slowdown with every core busy, >= 1)");
  r.oversubscribed_wait_s =
      number(j, "oversubscribed_wait_s", source, "", 0, true, kMaxOversubscribedWaitS,
             "seconds (a collective's wait for its partner with more threads than cores)");
  const json& gemm = array_field(j, "gemm", source);
  DTRAIN_CHECK(!gemm.empty(), where(source, "gemm"), " is empty; at least one product is needed");
  for (size_t i = 0; i < gemm.size(); ++i) {
    r.gemm.push_back(gemm_from_json(gemm[i], source, "gemm", i));
  }
  DTRAIN_CHECK(nearest_threads(r.gemm, Precision::fp32, 1) > 0, where(source, "gemm"),
               " has no fp32 product; fp32 is every run's precision");
  check_gemm_grids(r.gemm, source, "gemm");
  const json& gemm_warm = array_field(j, "gemm_warm", source);
  for (size_t i = 0; i < gemm_warm.size(); ++i) {
    const GemmSample s = gemm_from_json(gemm_warm[i], source, "gemm_warm", i);
    // The clock reads a warm sample as its ratio to the cold one of the same shape.
    const bool on_cold_grid = std::any_of(r.gemm.begin(), r.gemm.end(), [&](const GemmSample& c) {
      return c.precision == s.precision && c.threads == s.threads && c.m == s.m && c.n == s.n &&
             c.k == s.k;
    });
    DTRAIN_CHECK(on_cold_grid, where(source, str("gemm_warm[", i, "]")), ": the ",
                 name(s.precision), " product ", s.m, "x", s.n, "x", s.k, " on ", s.threads,
                 " threads has no cold sample in 'gpu.measured.gemm' to compare with");
    r.gemm_warm.push_back(s);
  }
  check_gemm_grids(r.gemm_warm, source, "gemm_warm");
  const json& cache = member(j, "cache", source, "");
  r.cache.l1d_bytes = number(cache, "l1d_bytes", source, "cache", 0, true, kMaxCacheBytes,
                             "bytes per core (0: unknown)");
  r.cache.l2_bytes = number(cache, "l2_bytes", source, "cache", 0, true, kMaxCacheBytes,
                            "bytes per core (0: unknown)");
  r.cache.l3_bytes =
      number(cache, "l3_bytes", source, "cache", 0, true, kMaxCacheBytes, "bytes (0: unknown)");
  r.cache.l3_shared_by = whole(cache, "l3_shared_by", source, "cache", 1, kMaxCores);
  const json& kernels = array_field(j, "kernels", source);
  for (size_t i = 0; i < kernels.size(); ++i) {
    r.kernels.push_back(kernel_from_json(kernels[i], source, i));
  }
  for (size_t op = 0; op < kKernelOpCount; ++op) {
    const bool measured = std::any_of(r.kernels.begin(), r.kernels.end(), [&](const KernelRate& k) {
      return static_cast<size_t>(k.op) == op;
    });
    DTRAIN_CHECK(measured, where(source, "kernels"), " has no entry for '", kKernelOpNames[op],
                 "'; every kernel the clock prices is needed");
  }
  const json& collectives = array_field(j, "collectives", source);
  for (size_t i = 0; i < collectives.size(); ++i) {
    r.collectives.push_back(collective_from_json(collectives[i], source, i));
  }
  return r;
}

json to_json(const MeasuredRates& r) {
  json kernels = json::array(), collectives = json::array();
  auto samples = [](const std::vector<GemmSample>& from) {
    json out = json::array();
    for (const GemmSample& s : from) {
      out.push_back({{"precision", name(s.precision)},
                     {"threads", s.threads},
                     {"m", s.m},
                     {"n", s.n},
                     {"k", s.k},
                     {"seconds", s.seconds}});
    }
    return out;
  };
  for (const KernelRate& k : r.kernels) {
    kernels.push_back({{"op", name(k.op)},
                       {"precision", name(k.precision)},
                       {"bytes_per_s", k.bytes_per_s},
                       {"call_s", k.call_s}});
  }
  for (const CollectiveRate& c : r.collectives) {
    collectives.push_back({{"collective", c.collective},
                           {"algorithm", c.algorithm},
                           {"link", c.link},
                           {"ranks", c.ranks},
                           {"latency_s", c.latency_s},
                           {"bytes_per_s", c.bytes_per_s},
                           {"precision", name(c.precision)}});
  }
  return {{"version", kMeasuredRatesVersion},
          {"cpu", r.cpu},
          {"cores", r.cores},
          {"comm_interference", r.comm_interference},
          {"corun_slowdown", r.corun_slowdown},
          {"oversubscribed_wait_s", r.oversubscribed_wait_s},
          {"gemm", samples(r.gemm)},
          {"gemm_warm", samples(r.gemm_warm)},
          {"cache",
           {{"l1d_bytes", r.cache.l1d_bytes},
            {"l2_bytes", r.cache.l2_bytes},
            {"l3_bytes", r.cache.l3_bytes},
            {"l3_shared_by", r.cache.l3_shared_by}}},
          {"kernels", kernels},
          {"collectives", collectives}};
}

double corun_factor(const MeasuredRates& r, int busy) {
  if (r.cores <= 1 || busy <= 1) return 1;
  const double share = static_cast<double>(std::min(busy, r.cores) - 1) / (r.cores - 1);
  return 1 + (std::max(1.0, r.corun_slowdown) - 1) * share;
}

}  // namespace dtrain::plan
