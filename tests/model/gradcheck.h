// Helpers of the gradient tests: random tensors, central differences in double, and a
// comparison that reports the largest difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/rng.h"

namespace dtrain::model::test {

inline std::vector<float> random_floats(size_t n, uint64_t seed, double scale = 1.0,
                                        double offset = 0.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(offset + scale * rng.normal());
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

// d f / d x[j] by central differences; f reads x.
inline double central_difference(const std::function<double()>& f, std::vector<double>& x, size_t j,
                                 double h) {
  const double saved = x[j];
  x[j] = saved + h;
  const double up = f();
  x[j] = saved - h;
  const double down = f();
  x[j] = saved;
  return (up - down) / (2 * h);
}

// Numerical gradient of f with respect to every element of x.
inline std::vector<double> numeric_gradient(const std::function<double()>& f,
                                            std::vector<double>& x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t j = 0; j < x.size(); ++j) g[j] = central_difference(f, x, j, h);
  return g;
}

// sum_i a[i] * w[i]: the scalar whose gradient with respect to a is w.
inline double weighted_sum(const std::vector<double>& a, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * static_cast<double>(w[i]);
  return s;
}

// Expects |got[i] - want[i]| <= atol + rtol * |want[i]| for all i; returns the largest
// absolute difference.
inline double expect_close(const std::vector<float>& got, const std::vector<double>& want,
                           double rtol, double atol, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double max_diff = 0;
  size_t bad = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    max_diff = std::max(max_diff, diff);
    if (diff > atol + rtol * std::fabs(want[i])) {
      if (bad++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i]
                      << " (diff " << diff << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance";
  return max_diff;
}

// Subtracts the constant a gradient buffer was pre-filled with (to prove accumulation).
inline std::vector<float> minus(std::vector<float> v, float c) {
  for (float& x : v) x -= c;
  return v;
}

// One parameter tensor's gradient spot-checked: up to 12 elements (the first, the last, the rest
// drawn from `pick`) of the analytic `grad` against central differences (step h) of `loss` over
// params[offset + e]; each within 1e-5 of the largest numeric value. Returns that largest value
// (the tensor's gradient scale) and the largest difference.
struct SpotCheck {
  double scale = 0, max_diff = 0;
};
inline SpotCheck spot_check_gradient(std::span<const float> grad, int64_t offset,
                                     const std::function<double()>& loss,
                                     std::vector<double>& params, double h, Rng& pick,
                                     const std::string& what) {
  const auto count = static_cast<int64_t>(grad.size());
  std::vector<int64_t> picks = {0, count - 1};
  while (picks.size() < 12 && static_cast<int64_t>(picks.size()) < count) {
    picks.push_back(static_cast<int64_t>(pick.uniform_int(static_cast<uint64_t>(count))));
  }
  std::vector<double> numeric;
  std::vector<float> analytic;
  SpotCheck r;
  for (int64_t e : picks) {
    numeric.push_back(central_difference(loss, params, static_cast<size_t>(offset + e), h));
    analytic.push_back(grad[static_cast<size_t>(e)]);
    r.scale = std::max(r.scale, std::fabs(numeric.back()));
  }
  r.max_diff = expect_close(analytic, numeric, 0, 1e-5 * r.scale + 1e-10, what);
  return r;
}

}  // namespace dtrain::model::test
