// Rates measured on the machine the ranks compute on (`dtrain calibrate --compute`), for the
// clock to price dtrain's own engine: matrix products by shape (per precision and thread count),
// the engine's memory-bound kernels as bytes/s plus a fixed cost per call, each collective
// algorithm as latency + bytes/bandwidth per link class, and how much compute slows while a
// communication thread runs beside it. A cluster file carries them in "gpu.measured" (schema
// kMeasuredRatesVersion, docs/clock.md); GPU presets have none (their clock is rates.h's).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dtrain/machine/rates.h"

namespace dtrain::plan {

inline constexpr int kMeasuredRatesVersion = 4;

// The engine's memory-bound kernels (src/dtrain/model/ops, optim/adamw), each priced on the
// element count its call is given:
//   layernorm_forward/backward     rows x C (one call per LayerNorm)
//   gelu_forward/backward          BT x 4C/tp
//   residual_forward/backward      BT x C (the bias add and the residual sum)
//   softmax_forward/backward       B x NH/tp x T x (T + 1) / 2 (the causal half of the scores,
//                                  one call per (batch row, head) pair: calls = B x NH/tp)
//   crossentropy_forward/backward  BT x V/tp
//   encoder_forward/backward       BT x C
//   adamw                          parameters updated (the rank's shard)
//   grad_norm                      gradient elements (the clipping norm's sum of squares)
//   bf16_convert                   elements converted fp32 <-> bf16
// A kernel's bytes are its elements x kernel_bytes_per_element(op) (what it reads and writes in
// fp32), so a rate in bytes/s converts to seconds per element the same way in calibrate and in
// the clock.
enum class KernelOp {
  layernorm_forward,
  layernorm_backward,
  gelu_forward,
  gelu_backward,
  residual_forward,
  residual_backward,
  softmax_forward,
  softmax_backward,
  crossentropy_forward,
  crossentropy_backward,
  encoder_forward,
  encoder_backward,
  adamw,
  grad_norm,
  bf16_convert,
};
inline constexpr int kKernelOpCount = 15;
std::string_view name(KernelOp op);
double kernel_bytes_per_element(KernelOp op);

// One measured matrix product: C(m x n) += A(m x k) B(k x n), one call, `threads` BLAS/compute
// threads, median seconds.
struct GemmSample {
  Precision precision = Precision::fp32;
  int threads = 1;
  double m = 0, n = 0, k = 0;
  double seconds = 0;
};

// A memory-bound kernel: seconds = calls x call_s + bytes / bytes_per_s.
struct KernelRate {
  KernelOp op = KernelOp::layernorm_forward;
  Precision precision = Precision::fp32;
  double bytes_per_s = 0;
  double call_s = 0;
};

// A collective algorithm on a link class at a group size: seconds = latency_s + bytes /
// bytes_per_s, `bytes` being the larger of what one rank sends and receives (the counters'
// bytes_sent and bytes_received, plan::collective_traffic's figures). They are equal for ring,
// tree and hierarchical; direct's ranks read their peers' memory, so its bytes_sent alone can
// be 0 (reduce_scatter, all_gather) and its bytes_received carries the call.
struct CollectiveRate {
  // "all_reduce", "reduce_scatter", "all_gather", "send_recv", "all_to_all" (pairwise; optional
  // in version 4: without it the engine clock prices an all-to-all from send_recv or the link)
  std::string collective;
  std::string algorithm;  // "direct", "ring", "tree", "hierarchical", "pairwise"
  std::string link;       // "intra_node", "inter_node"
  int ranks = 2;
  double latency_s = 0;
  double bytes_per_s = 0;
  // The elements' type: bf16 collectives add each hop in fp32 and round back (comm/collectives.h),
  // a cost per element that fp32's rate per byte does not carry (version 2).
  Precision precision = Precision::fp32;
};

// The machine's caches as the OS reports them (sysfs, else sysconf), for the clock to judge where a
// product's operands live (version 4). A size of 0 means unknown: the clock then prices every
// product at its cold (from memory) sample.
struct CacheSizes {
  double l1d_bytes = 0;  // per core
  double l2_bytes = 0;   // per core (private)
  double l3_bytes = 0;   // one last-level cache
  int l3_shared_by = 1;  // cores sharing that last-level cache
};

struct MeasuredRates {
  bool present = false;
  std::string cpu;  // the processor's model name, as the OS reports it
  int cores = 0;    // cores the ranks share
  // Products on operands from memory (each call on the next set of a pool larger than the
  // last-level cache): every product of a step whose operands were evicted since last touched.
  std::vector<GemmSample> gemm;
  // The same products on one set of operands reused call after call (version 4): after the
  // first call they sit in cache as far as their size allows. A sparser grid, each point also on
  // `gemm`'s grid; the clock reads only their ratio to the cold sample (gemm_warm_ratio).
  std::vector<GemmSample> gemm_warm;
  CacheSizes cache;
  std::vector<KernelRate> kernels;
  std::vector<CollectiveRate> collectives;
  // Compute seconds are multiplied by this while a communication thread runs beside (measured:
  // the same products with and without a concurrent collective, >= 1).
  double comm_interference = 1;
  // Compute seconds are multiplied by this when every core runs a rank's products at once
  // (measured: the same products alone and beside one copy per other core; >= 1). The cores
  // share the last-level cache and the memory bus, so ranks that each own a core still run
  // slower together than one alone, which the grid (timed on an otherwise idle machine) misses.
  double corun_slowdown = 1;
  // Seconds a collective waits for its partner beyond its idle-machine time when the ranks'
  // threads outnumber the cores (version 4; measured: twice as many thread ranks as cores, each
  // multiplying and then all-reducing 4 KiB, their period less the products' core-time shared
  // over the cores and the idle all-reduce). A rank whose partner is off its core waits for the
  // scheduler to give it one: a time slice, not a bandwidth.
  double oversubscribed_wait_s = 0;
};

// The compute slowdown of `busy` compute threads running at once on `cores` cores: 1 for one,
// corun_slowdown with every core busy, linear between (1 when cores is 1 or unknown).
double corun_factor(const MeasuredRates& r, int busy);

// Seconds of one (m, n, k) product at `precision` on `threads` threads, from the samples
// (interpolated in log space over the measured grid; a shape outside it scales by FLOPs from the
// nearest edge). Throws Error when no sample has that precision.
double gemm_seconds(const MeasuredRates& r, Precision precision, int threads, double m, double n,
                    double k);
// warm / cold seconds of an (m, n, k) product at `precision` on `threads` threads: log(ratio)
// multilinear over the warm grid (each warm sample over the cold sample of its shape), the edge's
// ratio outside it, clamped to (0, 1] (a warm call is not slower than a cold one; a ratio above
// 1 is noise). 1 when no warm product of that precision was measured.
double gemm_warm_ratio(const MeasuredRates& r, Precision precision, int threads, double m, double n,
                       double k);
// A product whose operands are `warm_share` in cache (0: all from memory, 1: all in cache,
// cache_model.h's warm_share): the cold seconds moved that share of the way to the warm ones,
// cold x (1 - share x (1 - gemm_warm_ratio)).
double gemm_seconds_cached(const MeasuredRates& r, Precision precision, int threads, double m,
                           double n, double k, double warm_share);
// Seconds of `calls` calls of `op` over `elements` elements in all.
double kernel_seconds(const MeasuredRates& r, KernelOp op, Precision precision, double elements,
                      double calls = 1);
// Whether any group size or precision of (collective, algorithm, link) was measured: what
// collective_seconds needs not to throw.
bool has_collective_rate(const MeasuredRates& r, std::string_view collective,
                         std::string_view algorithm, std::string_view link);
// Seconds of one collective moving `bytes` per rank (CollectiveRate's bytes); the nearest measured
// group size of that (collective, algorithm, link) in `precision`, the other precision's when
// that one was not measured. Throws Error when none was measured.
double collective_seconds(const MeasuredRates& r, std::string_view collective,
                          std::string_view algorithm, std::string_view link, int ranks,
                          double bytes, Precision precision = Precision::fp32);

// "measured" object of a cluster file. Every field required; throws Error naming the file and
// the field when one is missing or implausible.
MeasuredRates measured_rates_from_json(const nlohmann::json& j, std::string_view source);
nlohmann::json to_json(const MeasuredRates& r);

}  // namespace dtrain::plan
