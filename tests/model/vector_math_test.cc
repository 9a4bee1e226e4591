// The vectorizable exp against libm in double, over the range softmax and GELU use,
// and the lane-split sum and dot against double sums.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/model/ops/vector_math.h"
#include "gradcheck.h"

namespace dtrain::model {
namespace {

TEST(VectorMath, ExpIsWithinTwoUlpsOnItsRange) {
  // Relative error <= 2.5e-7 (about 2 ulp of float) from -87 to 88 in small steps.
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.01171875) {
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    const double got = exp_approx(static_cast<float>(x));
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 2.5e-7);
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  // Clamped outside the range: finite and positive, so softmax never sees inf or 0/0.
  EXPECT_GT(exp_approx(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(exp_approx(1000.0f)));
}

TEST(VectorMath, SumAndDotMatchDoubleForAllTailLengths) {
  // Lengths around the 16-lane split; relative error <= 1e-6.
  for (int64_t n = 1; n <= 70; ++n) {
    const auto a = test::random_floats(static_cast<size_t>(n), 30 + n);
    const auto b = test::random_floats(static_cast<size_t>(n), 130 + n);
    double s = 0, d = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += a[i];
      d += static_cast<double>(a[i]) * b[i];
      scale += std::fabs(a[i]) * (1 + std::fabs(b[i]));
    }
    EXPECT_NEAR(sum(a.data(), n), s, 1e-6 * scale) << "n = " << n;
    EXPECT_NEAR(dot(a.data(), b.data(), n), d, 1e-6 * scale) << "n = " << n;
    EXPECT_EQ(max_of(a.data(), n), *std::max_element(a.begin(), a.end()));
  }
}

}  // namespace
}  // namespace dtrain::model
