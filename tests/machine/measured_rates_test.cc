// Measured rates (machine/measured_rates.h): the product look-up against hand-worked values on a
// tiny grid (inside, at points, and outside it), the kernel and collective laws, the JSON round
// trip, and each refusal (missing field, wrong version, implausible value) naming its field.
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dtrain/core/check.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/machine/measured_rates.h"
#include "error_text.h"

namespace dtrain::plan {
namespace {

using dtrain::test_support::error_of;
using nlohmann::json;

// A 2x2x2 fp32 grid on 1 thread over m, n, k in {16, 64}: every corner 1 ms except (64, 64, 64)
// at 16 ms; and a 1x1x1 grid on 4 threads (every shape 2 ms at 16^3).
MeasuredRates tiny_rates() {
  MeasuredRates r;
  r.present = true;
  r.cpu = "Test CPU @ 1 GHz";
  r.cores = 4;
  r.comm_interference = 1.25;
  r.corun_slowdown = 1.3;
  r.oversubscribed_wait_s = 2.5e-3;
  for (double m : {16.0, 64.0}) {
    for (double n : {16.0, 64.0}) {
      for (double k : {16.0, 64.0}) {
        const double s = (m == 64 && n == 64 && k == 64) ? 16e-3 : 1e-3;
        r.gemm.push_back({Precision::fp32, 1, m, n, k, s});
      }
    }
  }
  r.gemm.push_back({Precision::fp32, 4, 16, 16, 16, 2e-3});
  // Warm (operands reused): a 2-point grid along m at n = k = 16, at 1/2 of (16, 16, 16)'s cold
  // time and 1/4 of (64, 16, 16)'s.
  r.gemm_warm.push_back({Precision::fp32, 1, 16, 16, 16, 0.5e-3});
  r.gemm_warm.push_back({Precision::fp32, 1, 64, 16, 16, 0.25e-3});
  r.cache = {48e3, 1e6, 32e6, 2};
  for (int op = 0; op < kKernelOpCount; ++op) {
    r.kernels.push_back({static_cast<KernelOp>(op), Precision::fp32, 1e10, 2e-6});
  }
  r.collectives.push_back({"all_reduce", "ring", "intra_node", 2, 10e-6, 1e9});
  r.collectives.push_back({"all_reduce", "ring", "intra_node", 4, 30e-6, 5e8});
  return r;
}

TEST(MeasuredRates, GemmAtGridPointsIsTheSample) {
  const MeasuredRates r = tiny_rates();
  EXPECT_DOUBLE_EQ(gemm_seconds(r, Precision::fp32, 1, 16, 16, 16), 1e-3);
  EXPECT_DOUBLE_EQ(gemm_seconds(r, Precision::fp32, 1, 64, 64, 64), 16e-3);
  EXPECT_DOUBLE_EQ(gemm_seconds(r, Precision::fp32, 1, 64, 16, 64), 1e-3);
}

TEST(MeasuredRates, GemmInterpolatesLogSecondsInLogShape) {
  const MeasuredRates r = tiny_rates();
  // (32, 32, 32) is the geometric middle of every axis: each corner weighs 1/8, so
  // log s = (7 log 1e-3 + log 16e-3) / 8, s = 1e-3 x 16^(1/8) = 1e-3 x sqrt(2).
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 1, 32, 32, 32), 1e-3 * std::sqrt(2.0), 1e-15);
  // On the m = n = 64 edge, halfway along k: log s = (log 1e-3 + log 16e-3) / 2, s = 4 ms.
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 1, 64, 64, 32), 4e-3, 1e-15);
  // A quarter of the way along k in log space (k = 16 x 4^(1/4) = 16 sqrt 2): s = 16^(1/4) ms.
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 1, 64, 64, 16 * std::sqrt(2.0)), 2e-3, 1e-15);
}

TEST(MeasuredRates, GemmOutsideTheGridScalesByFlopsFromTheEdge) {
  const MeasuredRates r = tiny_rates();
  // m = 256 clamps to the edge m = 64 (16 ms there) and scales by 256 / 64.
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 1, 256, 64, 64), 64e-3, 1e-15);
  // m = 4 below the edge 16 (1 ms at (16, 16, 16)): a quarter of it.
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 1, 4, 16, 16), 0.25e-3, 1e-15);
  // Both: (128, 8, 32) -> edge (64, 16, 32), log-middle of k between 1 ms and 1 ms = 1 ms, then
  // x (128 / 64) x (8 / 16) = 1 ms.
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 1, 128, 8, 32), 1e-3, 1e-15);
}

TEST(MeasuredRates, GemmTakesTheNearestThreadCountAndRefusesAMissingPrecision) {
  const MeasuredRates r = tiny_rates();
  // 4 threads measured only 16^3 (2 ms): a one-point grid, so every shape scales from it.
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 3, 32, 16, 16), 4e-3, 1e-15);
  EXPECT_NEAR(gemm_seconds(r, Precision::fp32, 8, 16, 16, 16), 2e-3, 1e-15);
  EXPECT_DOUBLE_EQ(gemm_seconds(r, Precision::fp32, 2, 16, 16, 16), 1e-3);  // tie: fewer
  EXPECT_NE(error_of([&] {
              gemm_seconds(r, Precision::bf16, 1, 16, 16, 16);
            }).find("no bf16 matrix product was measured"),
            std::string::npos);
}

TEST(MeasuredRates, KernelSecondsIsCallsTimesCostPlusBytesOverRate) {
  const MeasuredRates r = tiny_rates();
  // AdamW moves 28 bytes per element: 1e6 elements = 2.8e7 bytes at 1e10 B/s = 2.8 ms, + 2 us.
  EXPECT_NEAR(kernel_seconds(r, KernelOp::adamw, Precision::fp32, 1e6), 2.8e-3 + 2e-6, 1e-15);
  // Softmax forward, 8 bytes per element, 1000 calls: 1000 x 2 us + 8e6 / 1e10 s.
  EXPECT_NEAR(kernel_seconds(r, KernelOp::softmax_forward, Precision::fp32, 1e6, 1000),
              2e-3 + 0.8e-3, 1e-15);
  // bf16 not measured: the op's fp32 rate serves (the kernels run in fp32 under either).
  EXPECT_NEAR(kernel_seconds(r, KernelOp::gelu_forward, Precision::bf16, 1e6), 2e-6 + 0.8e-3,
              1e-15);
  MeasuredRates none = r;
  none.kernels.clear();
  EXPECT_NE(error_of([&] {
              kernel_seconds(none, KernelOp::adamw, Precision::fp32, 1);
            }).find("kernel 'adamw' was not measured"),
            std::string::npos);
}

TEST(MeasuredRates, KernelNamesAndBytesPerElement) {
  EXPECT_EQ(name(KernelOp::layernorm_forward), "layernorm_forward");
  EXPECT_EQ(name(KernelOp::bf16_convert), "bf16_convert");
  EXPECT_EQ(kernel_bytes_per_element(KernelOp::residual_forward), 12);  // inp + delta + out
  EXPECT_EQ(kernel_bytes_per_element(KernelOp::bf16_convert), 6);       // 4 read + 2 written
  for (int op = 0; op < kKernelOpCount; ++op) {
    EXPECT_GT(kernel_bytes_per_element(static_cast<KernelOp>(op)), 0) << op;
  }
}

TEST(MeasuredRates, CollectiveSecondsTakesTheNearestGroupSize) {
  const MeasuredRates r = tiny_rates();
  // 2 ranks: 10 us + 1e6 B / 1e9 B/s = 1.01 ms.
  EXPECT_NEAR(collective_seconds(r, "all_reduce", "ring", "intra_node", 2, 1e6), 1.01e-3, 1e-15);
  // 8 ranks: the 4-rank entry, 30 us + 1e6 / 5e8 = 2.03 ms. 3 ranks: a tie, the smaller group.
  EXPECT_NEAR(collective_seconds(r, "all_reduce", "ring", "intra_node", 8, 1e6), 2.03e-3, 1e-15);
  EXPECT_NEAR(collective_seconds(r, "all_reduce", "ring", "intra_node", 3, 0), 10e-6, 1e-18);
  EXPECT_NE(error_of([&] {
              collective_seconds(r, "all_reduce", "tree", "intra_node", 2, 1);
            }).find("no all_reduce with the tree algorithm was measured on the intra_node link"),
            std::string::npos);
}

TEST(MeasuredRates, CollectiveSecondsTakesItsElementsPrecision) {
  MeasuredRates r = tiny_rates();
  // bf16 measured on 4 ranks only: 20 us + bytes / 2.5e8 B/s.
  CollectiveRate bf16_rate{"all_reduce", "ring", "intra_node", 4, 20e-6, 2.5e8};
  bf16_rate.precision = Precision::bf16;
  r.collectives.push_back(bf16_rate);
  // bf16 on 2 ranks: its own precision before the nearer group size, 20 us + 1e6 / 2.5e8 = 4.02 ms.
  EXPECT_NEAR(collective_seconds(r, "all_reduce", "ring", "intra_node", 2, 1e6, Precision::bf16),
              4.02e-3, 1e-15);
  // fp32 keeps its own: 2 ranks 1.01 ms, as without the bf16 entry.
  EXPECT_NEAR(collective_seconds(r, "all_reduce", "ring", "intra_node", 2, 1e6), 1.01e-3, 1e-15);
  // A precision not measured falls back to the other: bf16 with only fp32 entries (tiny_rates).
  EXPECT_NEAR(
      collective_seconds(tiny_rates(), "all_reduce", "ring", "intra_node", 2, 1e6, Precision::bf16),
      1.01e-3, 1e-15);
  // The file carries it: a round trip keeps bf16.
  const MeasuredRates back = measured_rates_from_json(json::parse(to_json(r).dump()), "x.json");
  EXPECT_EQ(back.collectives.back().precision, Precision::bf16);
  EXPECT_EQ(back.collectives.front().precision, Precision::fp32);
}

TEST(MeasuredRates, WarmRatioAndTheCachedProduct) {
  const MeasuredRates r = tiny_rates();
  // At the warm grid's points: warm / cold.
  EXPECT_DOUBLE_EQ(gemm_warm_ratio(r, Precision::fp32, 1, 16, 16, 16), 0.5);
  EXPECT_DOUBLE_EQ(gemm_warm_ratio(r, Precision::fp32, 1, 64, 16, 16), 0.25);
  // m = 32, halfway in log: ratio = sqrt(0.5 x 0.25); n and k beyond the warm grid's single
  // point take its edge.
  EXPECT_NEAR(gemm_warm_ratio(r, Precision::fp32, 1, 32, 64, 64), std::sqrt(0.125), 1e-12);
  // No warm sample of bf16, or on 4 threads the nearest (1 thread) is used.
  EXPECT_EQ(gemm_warm_ratio(r, Precision::bf16, 1, 16, 16, 16), 1);
  EXPECT_DOUBLE_EQ(gemm_warm_ratio(r, Precision::fp32, 4, 16, 16, 16), 0.5);
  // The cached product: cold 1 ms at (16, 16, 16), warm 0.5 ms; share 0 cold, 1 warm, 0.4:
  // 1 - 0.4 x 0.5 = 0.8 ms.
  EXPECT_DOUBLE_EQ(gemm_seconds_cached(r, Precision::fp32, 1, 16, 16, 16, 0), 1e-3);
  EXPECT_DOUBLE_EQ(gemm_seconds_cached(r, Precision::fp32, 1, 16, 16, 16, 1), 0.5e-3);
  EXPECT_NEAR(gemm_seconds_cached(r, Precision::fp32, 1, 16, 16, 16, 0.4), 0.8e-3, 1e-15);
  // A warm sample slower than its cold one (noise) is read as no gain.
  MeasuredRates slow = r;
  slow.gemm_warm[0].seconds = 2e-3;
  EXPECT_EQ(gemm_warm_ratio(slow, Precision::fp32, 1, 16, 16, 16), 1);
}

TEST(MeasuredRates, JsonRoundTripIsExact) {
  MeasuredRates r = tiny_rates();
  r.gemm[3].seconds = 1.0 / 3.0 * 1e-3;  // a value with no short decimal form
  r.kernels[5].bytes_per_s = 12345678901.234567;
  const json j = to_json(r);
  const MeasuredRates back = measured_rates_from_json(json::parse(j.dump()), "x.json");
  EXPECT_EQ(to_json(back), j);
  EXPECT_TRUE(back.present);
  EXPECT_EQ(back.cpu, r.cpu);
  EXPECT_EQ(back.cores, 4);
  EXPECT_EQ(back.comm_interference, 1.25);
  EXPECT_EQ(back.corun_slowdown, 1.3);
  EXPECT_EQ(back.oversubscribed_wait_s, 2.5e-3);
  ASSERT_EQ(back.gemm.size(), r.gemm.size());
  EXPECT_EQ(back.gemm[3].seconds, r.gemm[3].seconds);
  EXPECT_EQ(back.kernels[5].bytes_per_s, r.kernels[5].bytes_per_s);
  EXPECT_EQ(back.kernels[5].op, r.kernels[5].op);
  EXPECT_EQ(back.collectives[1].ranks, 4);
  ASSERT_EQ(back.gemm_warm.size(), 2u);
  EXPECT_EQ(back.gemm_warm[1].seconds, 0.25e-3);
  EXPECT_EQ(back.cache.l1d_bytes, 48e3);
  EXPECT_EQ(back.cache.l2_bytes, 1e6);
  EXPECT_EQ(back.cache.l3_bytes, 32e6);
  EXPECT_EQ(back.cache.l3_shared_by, 2);
}

// The refusal for `j` read as x.json (empty when it is accepted).
std::string refusal(const json& j) {
  return error_of([&] { measured_rates_from_json(j, "x.json"); });
}

TEST(MeasuredRates, RefusesAMissingField) {
  const json good = to_json(tiny_rates());
  for (const char* key :
       {"cpu", "cores", "comm_interference", "corun_slowdown", "oversubscribed_wait_s", "gemm",
        "gemm_warm", "cache", "kernels", "collectives"}) {
    json j = good;
    j.erase(key);
    EXPECT_NE(refusal(j).find(std::string("cluster file 'x.json': missing field 'gpu.measured.") +
                              key + "'"),
              std::string::npos)
        << key << ": " << refusal(j);
  }
  json j = good;
  j["gemm"][3].erase("seconds");
  EXPECT_NE(refusal(j).find("missing field 'gpu.measured.gemm[3].seconds'"), std::string::npos)
      << refusal(j);
  for (const char* key : {"l1d_bytes", "l2_bytes", "l3_bytes", "l3_shared_by"}) {
    j = good;
    j["cache"].erase(key);
    EXPECT_NE(refusal(j).find(std::string("missing field 'gpu.measured.cache.") + key + "'"),
              std::string::npos)
        << refusal(j);
  }
  j = good;
  j["gemm_warm"][1].erase("seconds");
  EXPECT_NE(refusal(j).find("missing field 'gpu.measured.gemm_warm[1].seconds'"), std::string::npos)
      << refusal(j);
  j = good;
  j["collectives"][1].erase("latency_s");
  EXPECT_NE(refusal(j).find("missing field 'gpu.measured.collectives[1].latency_s'"),
            std::string::npos);
  j = good;
  j["collectives"][0].erase("precision");
  EXPECT_NE(refusal(j).find("missing field 'gpu.measured.collectives[0].precision'"),
            std::string::npos)
      << refusal(j);
  j = good;
  j["kernels"].erase(12);  // adamw
  EXPECT_NE(refusal(j).find("field 'gpu.measured.kernels' has no entry for 'adamw'"),
            std::string::npos)
      << refusal(j);
}

TEST(MeasuredRates, RefusesAnotherVersion) {
  json j = to_json(tiny_rates());
  // Version 3 had no oversubscribed_wait_s, gemm_warm or cache (2: no corun_slowdown; 1: no
  // collectives' precision).
  j["version"] = 3;
  EXPECT_NE(refusal(j).find("field 'gpu.measured.version' is 3; this build reads version 4 (run "
                            "dtrain calibrate --compute again)"),
            std::string::npos)
      << refusal(j);
  j.erase("version");
  EXPECT_NE(refusal(j).find("missing field 'gpu.measured.version'"), std::string::npos);
}

TEST(MeasuredRates, RefusesNegativeZeroAndAbsurdValues) {
  const json good = to_json(tiny_rates());
  ASSERT_EQ(refusal(good), "");
  struct Case {
    const char* pointer;
    json value;
    const char* words;
  };
  const Case cases[] = {
      {"/gemm/3/seconds", -1, "field 'gpu.measured.gemm[3].seconds' is -1; it must be in (0, "},
      {"/gemm/3/seconds", 0, "field 'gpu.measured.gemm[3].seconds' is 0; it must be in (0, "},
      // 2 x 16 x 64 x 64 FLOPs in 1e-15 s: 1.3e20 FLOP/s, a time in the wrong unit.
      {"/gemm/3/seconds", 1e-15, "past any machine"},
      {"/gemm/0/m", 0, "field 'gpu.measured.gemm[0].m' is 0"},
      {"/gemm/0/threads", 0, "field 'gpu.measured.gemm[0].threads' is 0"},
      {"/gemm/0/precision", "fp8", "field 'gpu.measured.gemm[0].precision' is 'fp8'"},
      {"/kernels/2/bytes_per_s", 0, "field 'gpu.measured.kernels[2].bytes_per_s' is 0"},
      {"/kernels/2/bytes_per_s", 1e20, "field 'gpu.measured.kernels[2].bytes_per_s' is 1e+20"},
      {"/kernels/2/call_s", -1e-6, "field 'gpu.measured.kernels[2].call_s' is -1e-06"},
      {"/kernels/2/op", "conv2d", "field 'gpu.measured.kernels[2].op' is 'conv2d'"},
      {"/collectives/0/bytes_per_s", -5, "field 'gpu.measured.collectives[0].bytes_per_s' is -5"},
      {"/collectives/0/ranks", 1, "field 'gpu.measured.collectives[0].ranks' is 1"},
      {"/collectives/0/algorithm", "magic",
       "field 'gpu.measured.collectives[0].algorithm' is 'magic'"},
      {"/comm_interference", 0.5, "field 'gpu.measured.comm_interference' is 0.5"},
      {"/corun_slowdown", 0.9, "field 'gpu.measured.corun_slowdown' is 0.9"},
      {"/oversubscribed_wait_s", -1e-3,
       "field 'gpu.measured.oversubscribed_wait_s' is -0.001; it must be in [0, 1] seconds"},
      {"/oversubscribed_wait_s", 5, "field 'gpu.measured.oversubscribed_wait_s' is 5"},
      {"/cores", 0, "field 'gpu.measured.cores' is 0"},
      {"/cpu", 7, "field 'gpu.measured.cpu' must be a string"},
      {"/gemm", json::array(), "field 'gpu.measured.gemm' is empty"},
      {"/gemm_warm/1/seconds", -1, "field 'gpu.measured.gemm_warm[1].seconds' is -1"},
      {"/gemm_warm/0/m", 32,
       "field 'gpu.measured.gemm_warm[0]': the fp32 product 32x16x16 on 1 "
       "threads has no cold sample"},
      {"/gemm_warm", 3, "field 'gpu.measured.gemm_warm' must be an array"},
      {"/cache", 3, "field 'gpu.measured.cache' must be an object"},
      {"/cache/l2_bytes", -1, "field 'gpu.measured.cache.l2_bytes' is -1"},
      {"/cache/l3_bytes", 1e15, "field 'gpu.measured.cache.l3_bytes' is 1e+15"},
      {"/cache/l3_shared_by", 0, "field 'gpu.measured.cache.l3_shared_by' is 0"},
  };
  for (const Case& c : cases) {
    json j = good;
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string e = refusal(j);
    EXPECT_NE(e.find(c.words), std::string::npos) << c.pointer << ": " << e;
    EXPECT_NE(e.find("cluster file 'x.json'"), std::string::npos) << e;
  }
}

TEST(MeasuredRates, RefusesAGridWithAHole) {
  json j = to_json(tiny_rates());
  j["gemm"].erase(5);
  EXPECT_NE(refusal(j).find("the fp32 products on 1 threads are not a full 2x2x2 grid"),
            std::string::npos)
      << refusal(j);
}

// A calibrated CPU's cluster file loads with its CPU-sized peak (below the 1 TFLOP/s an
// accelerator file is held to), and the measured rates come back whole.
TEST(MeasuredRates, ClusterFileCarriesThemAndAdmitsACpuPeak) {
  Cluster c = parse_cluster("1x2xH100");
  c.gpu.name = "Test CPU";
  c.gpu.peak_flops = 5e10;
  c.gpu.measured = tiny_rates();
  const json j = to_json(c);
  ASSERT_TRUE(j["gpu"].contains("measured"));
  const Cluster back = cluster_from_json(j, "cpu.json");
  EXPECT_TRUE(back.gpu.measured.present);
  EXPECT_EQ(to_json(back.gpu.measured), to_json(c.gpu.measured));
  EXPECT_EQ(back.gpu.peak_flops, 5e10);
  // Without measured rates the same peak is a wrong unit, as before.
  json plain = j;
  plain["gpu"].erase("measured");
  EXPECT_NE(error_of([&] { cluster_from_json(plain, "cpu.json"); }).find("gpu.peak_flops"),
            std::string::npos);
  // With them, a peak under 1 GFLOP/s still is.
  json tiny = j;
  tiny["gpu"]["peak_flops"] = 5e6;
  EXPECT_NE(error_of([&] { cluster_from_json(tiny, "cpu.json"); }).find("gpu.peak_flops"),
            std::string::npos);
  // A bad measured field inside the cluster file names its full path.
  json bad = j;
  bad["gpu"]["measured"]["gemm"][3]["seconds"] = -1;
  EXPECT_NE(error_of([&] {
              cluster_from_json(bad, "cpu.json");
            }).find("cluster file 'cpu.json': field 'gpu.measured.gemm[3].seconds' is -1"),
            std::string::npos);
}

// 4 cores, every core busy 1.3x slower: one busy thread 1, two 1 + 0.3/3 = 1.1, three 1.2, four
// (and more: the extra threads wait for a core, which oversubscription prices) 1.3.
TEST(MeasuredRates, CorunFactorRisesWithTheBusyCores) {
  const MeasuredRates r = tiny_rates();
  EXPECT_DOUBLE_EQ(corun_factor(r, 1), 1.0);
  EXPECT_DOUBLE_EQ(corun_factor(r, 2), 1.1);
  EXPECT_DOUBLE_EQ(corun_factor(r, 3), 1.2);
  EXPECT_DOUBLE_EQ(corun_factor(r, 4), 1.3);
  EXPECT_DOUBLE_EQ(corun_factor(r, 8), 1.3);
  MeasuredRates one_core = r;
  one_core.cores = 1;
  EXPECT_DOUBLE_EQ(corun_factor(one_core, 4), 1.0);
}

}  // namespace
}  // namespace dtrain::plan
