// The compute calibration (calibrate/compute_calibration.h): the latency + bandwidth fit against
// hand-worked lines, and a --quick measurement that the cluster file's reader accepts whole.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtrain/calibrate/compute_calibration.h"
#include "dtrain/core/check.h"
#include "dtrain/machine/measured_rates.h"
#include "dtrain/model/gemm.h"

namespace dtrain::calibrate {
namespace {

TEST(ComputeCalibration, FitRecoversAnExactLine) {
  // seconds = 2 us + bytes / 1e9: at 4 KiB 6.096 us, 1 MiB 1.05058 ms, 16 MiB 16.779 ms.
  const std::vector<double> bytes = {4096, 1048576, 16777216};
  std::vector<double> seconds;
  for (double b : bytes) seconds.push_back(2e-6 + b / 1e9);
  const LinearFit fit = fit_latency_bandwidth(bytes, seconds);
  EXPECT_NEAR(fit.intercept_s, 2e-6, 1e-15);
  EXPECT_NEAR(fit.bytes_per_s, 1e9, 1e-3);
}

TEST(ComputeCalibration, FitWeighsRelativeErrors) {
  // Two points fit exactly whatever the weights: (1000 B, 3 us) and (3000 B, 5 us) give
  // 2 us + bytes / 1e9.
  const LinearFit two = fit_latency_bandwidth({1000, 3000}, {3e-6, 5e-6});
  EXPECT_NEAR(two.intercept_s, 2e-6, 1e-18);
  EXPECT_NEAR(two.bytes_per_s, 1e9, 1e-3);
  // A negative intercept (time grows faster than bytes) is refitted through the origin:
  // (1000, 1 us), (2000, 3 us): slope = sum w x y / sum w x^2 with w = 1 / y^2
  // = (1e-3 + 2000 x 3e-6 / 9e-12) / (1e6 / 1e-12 + 4e6 / 9e-12) = 1.4e-9 s per byte.
  const LinearFit origin = fit_latency_bandwidth({1000, 2000}, {1e-6, 3e-6});
  EXPECT_EQ(origin.intercept_s, 0);
  EXPECT_NEAR(1 / origin.bytes_per_s, (1e9 + 2000 * 3e-6 / 9e-12) / (1e18 + 4e6 / 9e-12), 1e-21);
  // Time falling with bytes: the largest point's average rate, 2000 B / 1 us.
  const LinearFit flat = fit_latency_bandwidth({1000, 2000}, {2e-6, 1e-6});
  EXPECT_EQ(flat.intercept_s, 0);
  EXPECT_NEAR(flat.bytes_per_s, 2e9, 1e-3);
  EXPECT_THROW(fit_latency_bandwidth({1000, 1000}, {1e-6, 2e-6}), Error);
}

TEST(ComputeCalibration, QuickMeasurementIsAWholeFileTheReaderAccepts) {
  ComputeCalibrationOptions options;
  options.quick = true;
  options.threads = 2;
  options.passes = 2;  // the figures are medians over passes: the same points, once each
  // The products are measured with OpenBLAS single-threaded, as the engine runs it, and the
  // caller's setting comes back afterwards.
  model::set_blas_threads(2);
  const plan::MeasuredRates r = measure_compute_rates(options);
  EXPECT_EQ(model::blas_threads(), 2);
  model::set_blas_threads(1);
  const GemmGrid grid = gemm_grid(true);
  // fp32 and bf16, each on 1 and 2 threads, every shape of the grid.
  EXPECT_EQ(r.gemm.size(), 4 * grid.m.size() * grid.n.size() * grid.k.size());
  // The warm products on their grid (quick: the same), each no slower than its cold sample but
  // for noise: the look-up's ratio is at most 1.
  const GemmGrid warm = gemm_warm_grid(true);
  EXPECT_EQ(r.gemm_warm.size(), 4 * warm.m.size() * warm.n.size() * warm.k.size());
  for (const plan::GemmSample& s : r.gemm_warm) {
    const double ratio = plan::gemm_warm_ratio(r, s.precision, s.threads, s.m, s.n, s.k);
    EXPECT_GT(ratio, 0);
    EXPECT_LE(ratio, 1);
  }
  EXPECT_EQ(r.kernels.size(), size_t(plan::kKernelOpCount));
  EXPECT_GE(r.comm_interference, 1);
  EXPECT_GE(r.corun_slowdown, 1);
  // 3 collectives x 3 algorithms x fp32 and bf16 at 2 and 4 ranks, the (fp32) pairwise
  // all-to-all at 2 and 4, and the (fp32) hierarchical all-reduce at 4: 2 x 18 + 2 + 1.
  EXPECT_EQ(r.collectives.size(), 39u);
  EXPECT_EQ(std::count_if(r.collectives.begin(), r.collectives.end(),
                          [](const plan::CollectiveRate& c) {
                            return c.collective == "all_to_all" && c.algorithm == "pairwise" &&
                                   c.precision == plan::Precision::fp32;
                          }),
            2);
  const auto bf16_rates = std::count_if(
      r.collectives.begin(), r.collectives.end(),
      [](const plan::CollectiveRate& c) { return c.precision == plan::Precision::bf16; });
  EXPECT_EQ(bf16_rates, 18);
  const plan::MeasuredRates back =
      plan::measured_rates_from_json(nlohmann::json::parse(plan::to_json(r).dump()), "quick");
  EXPECT_EQ(plan::to_json(back), plan::to_json(r));
  // The look-up at a grid point returns what was measured there.
  for (const plan::GemmSample& s : r.gemm) {
    EXPECT_DOUBLE_EQ(plan::gemm_seconds(r, s.precision, s.threads, s.m, s.n, s.k), s.seconds);
  }
}

// Synthetic fp32 rates: every product of the grid at `flops` per second, every kernel at
// `bytes_per_s` with no fixed cost.
plan::MeasuredRates synthetic_rates(double flops, double bytes_per_s) {
  plan::MeasuredRates r;
  r.present = true;
  const GemmGrid grid = gemm_grid(false);
  for (double m : grid.m)
    for (double n : grid.n)
      for (double k : grid.k) {
        r.gemm.push_back({plan::Precision::fp32, 1, m, n, k, 2 * m * n * k / flops});
      }
  for (int i = 0; i < plan::kKernelOpCount; ++i) {
    r.kernels.push_back({static_cast<plan::KernelOp>(i), plan::Precision::fp32, bytes_per_s, 0});
  }
  return r;
}

// The probe times every core this process may run on, once, and reads its speed against the
// rates: the seconds the rates price its products at over the seconds they took. Against rates
// that promise half the speed the same seconds read twice as fast. Without bf16 products there is
// no bf16 speed. Nothing here compares two timings (a core's speed drifts between them).
TEST(CoreSpeedProbe, EachAllowedCoreAgainstTheRates) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  const plan::MeasuredRates fast = synthetic_rates(2e10, 2e10), slow = synthetic_rates(1e10, 1e10);
  CoreSpeedProbe probe(fast);
  const std::vector<CoreSpeed> a = probe.measure();
  ASSERT_EQ(a.size(), static_cast<size_t>(CPU_COUNT(&allowed)));
  // The probe's two products (512 x 512 x 128 and 512 x 128 x 512) at 2e10 FLOP/s.
  const double priced = 2.0 * (2.0 * 512 * 512 * 128) / 2e10;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(CPU_ISSET(a[i].cpu, &allowed)) << a[i].cpu;
    if (i > 0) {
      EXPECT_GT(a[i].cpu, a[i - 1].cpu);
    }
    EXPECT_GT(a[i].fp32_seconds, 0);
    EXPECT_TRUE(std::isfinite(a[i].fp32_seconds));
    EXPECT_NEAR(a[i].fp32, priced / a[i].fp32_seconds, 1e-12 * a[i].fp32);
    EXPECT_DOUBLE_EQ(core_speed(fast, plan::Precision::fp32, a[i].fp32_seconds), a[i].fp32);
    EXPECT_NEAR(core_speed(slow, plan::Precision::fp32, a[i].fp32_seconds), 2 * a[i].fp32,
                1e-12 * a[i].fp32);
    EXPECT_EQ(a[i].bf16, 0);
    EXPECT_EQ(a[i].bf16_seconds, 0);
  }
  EXPECT_THROW(core_speed(fast, plan::Precision::fp32, 0), Error);
}

// Three passes over two products: each keeps its median (1, 3, 2 -> 2; 5, 2, 9 -> 5); passes
// that measured other points, or fewer, are refused.
TEST(ComputeCalibration, EachProductKeepsItsMedianOverThePasses) {
  auto pass = [](double a, double b) {
    return std::vector<plan::GemmSample>{{plan::Precision::fp32, 1, 16, 16, 16, a},
                                         {plan::Precision::bf16, 1, 64, 16, 256, b}};
  };
  const std::vector<plan::GemmSample> m = median_over_passes({pass(1, 5), pass(3, 2), pass(2, 9)});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].seconds, 2);
  EXPECT_EQ(m[1].seconds, 5);
  EXPECT_EQ(m[1].precision, plan::Precision::bf16);
  EXPECT_EQ(m[1].k, 256);
  std::vector<plan::GemmSample> other = pass(1, 1);
  other[1].n = 32;
  EXPECT_THROW(median_over_passes({pass(1, 5), other}), Error);
  EXPECT_THROW(median_over_passes({pass(1, 5), {pass(1, 5)[0]}}), Error);
}

TEST(ComputeCalibration, WarmGridIsPartOfTheColdGrid) {
  const GemmGrid cold = gemm_grid(false), warm = gemm_warm_grid(false);
  auto within = [](const std::vector<double>& part, const std::vector<double>& whole) {
    return std::all_of(part.begin(), part.end(), [&](double x) {
      return std::find(whole.begin(), whole.end(), x) != whole.end();
    });
  };
  EXPECT_TRUE(within(warm.m, cold.m));
  EXPECT_TRUE(within(warm.n, cold.n));
  EXPECT_TRUE(within(warm.k, cold.k));
  EXPECT_EQ(warm.m.size() * warm.n.size() * warm.k.size(), 80u);
}

// A sysfs cache folder as Linux writes it: L1d, L1i, L2, L3 shared by cpus 0-7 and 16-23.
TEST(ComputeCalibration, ReadsCacheSizesFromSysfs) {
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / str("dtrain-cache-", ::getpid());
  auto index = [&](int i, const char* level, const char* type, const char* size,
                   const char* shared) {
    const std::filesystem::path dir = root / str("index", i);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "level") << level << "\n";
    std::ofstream(dir / "type") << type << "\n";
    std::ofstream(dir / "size") << size << "\n";
    std::ofstream(dir / "shared_cpu_list") << shared << "\n";
  };
  index(0, "1", "Data", "48K", "0");
  index(1, "1", "Instruction", "32K", "0");
  index(2, "2", "Unified", "1024K", "0");
  index(3, "3", "Unified", "32M", "0-7,16-23");
  const plan::CacheSizes c = read_cache_sizes(root.string());
  std::filesystem::remove_all(root);
  EXPECT_EQ(c.l1d_bytes, 48 * 1024);
  EXPECT_EQ(c.l2_bytes, 1024 * 1024);
  EXPECT_EQ(c.l3_bytes, 32 * 1024 * 1024);
  EXPECT_EQ(c.l3_shared_by, 16);
  // No sysfs folder: sysconf's figures, never negative.
  const plan::CacheSizes fallback = read_cache_sizes("/nonexistent/cache");
  EXPECT_GE(fallback.l2_bytes, 0);
  EXPECT_GE(fallback.l3_shared_by, 1);
}

}  // namespace
}  // namespace dtrain::calibrate
