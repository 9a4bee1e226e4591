// The learning-rate schedule's end points and shape, and global-norm clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/optim/grad_clip.h"
#include "dtrain/optim/lr_schedule.h"

namespace dtrain::optim {
namespace {

TEST(LrSchedule, WarmupRampsLinearlyToThePeak) {
  const LrSchedule s{.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 100};
  EXPECT_FLOAT_EQ(learning_rate(s, 0), 1e-3f / 10);
  EXPECT_FLOAT_EQ(learning_rate(s, 4), 1e-3f * 5 / 10);
  EXPECT_FLOAT_EQ(learning_rate(s, 9), 1e-3f);   // the last warmup step reaches the peak
  EXPECT_FLOAT_EQ(learning_rate(s, 10), 1e-3f);  // cosine starts at the peak (r = 0)
}

TEST(LrSchedule, CosineEndsAtMinLrAndPassesTheMidpoint) {
  const LrSchedule s{.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 111};
  // r = (step - 10) / 100: the midpoint (r = 1/2, cos = 0) is step 60, the end step 110.
  EXPECT_FLOAT_EQ(learning_rate(s, 60), (1e-3f + 1e-4f) / 2);
  EXPECT_FLOAT_EQ(learning_rate(s, 110), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate(s, 500), 1e-4f);  // held after the end
  // r = 1/4: min + (lr - min) * (1 + cos(pi/4)) / 2
  EXPECT_FLOAT_EQ(learning_rate(s, 35),
                  static_cast<float>(1e-4 + 9e-4 * (1 + std::cos(std::acos(-1.0) / 4)) / 2));
  float prev = learning_rate(s, 10);
  for (int64_t k = 11; k < 111; ++k) {
    const float now = learning_rate(s, k);
    EXPECT_LE(now, prev) << "not decreasing at step " << k;
    prev = now;
  }
}

TEST(LrSchedule, NoWarmupAndSingleStepRuns) {
  const LrSchedule none{.lr = 2.0f, .min_lr = 1.0f, .warmup_steps = 0, .total_steps = 3};
  EXPECT_FLOAT_EQ(learning_rate(none, 0), 2.0f);
  EXPECT_FLOAT_EQ(learning_rate(none, 1), 1.5f);
  EXPECT_FLOAT_EQ(learning_rate(none, 2), 1.0f);
  const LrSchedule one{.lr = 2.0f, .min_lr = 1.0f, .warmup_steps = 0, .total_steps = 1};
  EXPECT_FLOAT_EQ(learning_rate(one, 0), 1.0f);  // no room to decay: the end value
}

TEST(LrSchedule, ValidationNamesTheFlag) {
  auto message = [](const LrSchedule& s) {
    try {
      validate(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.lr = 0, .min_lr = 0, .warmup_steps = 0, .total_steps = 5}).find("--lr"),
            std::string::npos);
  EXPECT_NE(message({.lr = 1, .min_lr = 2, .warmup_steps = 0, .total_steps = 5}).find("--min-lr"),
            std::string::npos);
  EXPECT_NE(message({.lr = 1, .min_lr = 0, .warmup_steps = -1, .total_steps = 5}).find("--warmup"),
            std::string::npos);
  EXPECT_NE(message({.lr = 1, .min_lr = 0, .warmup_steps = 0, .total_steps = 0}).find("--steps"),
            std::string::npos);
  EXPECT_EQ(message({.lr = 1, .min_lr = 0, .warmup_steps = 3, .total_steps = 5}), "");
}

TEST(GradClip, SumOfSquaresIsExactOnSmallIntegers) {
  // 1^2 + ... + n^2 = n (n + 1) (2n + 1) / 6, for lengths around the 8-lane split.
  for (int64_t n = 1; n <= 40; ++n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i + 1);
    EXPECT_EQ(sum_of_squares(x), static_cast<double>(n * (n + 1) * (2 * n + 1) / 6)) << n;
  }
}

TEST(GradClip, ScaleClipsOnlyAboveTheMaximum) {
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.0f), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_scale(1e9, 0.0f), 1.0f);  // disabled
  // The clipped gradient has the maximum norm: ||g * scale|| = max_norm (to 1e-6).
  std::vector<float> g = {3.0f, 4.0f};  // norm 5
  const float s = clip_scale(std::sqrt(sum_of_squares(g)), 2.0f);
  EXPECT_NEAR(std::hypot(g[0] * s, g[1] * s), 2.0, 1e-6);
}

TEST(GradClip, ShardsAddUpToTheGlobalNorm) {
  // The sum over shards of sum_of_squares is the whole buffer's (what ZeRO all-reduces).
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  const double whole = sum_of_squares(x);
  const double parts = sum_of_squares(std::span<const float>(x).subspan(0, 333)) +
                       sum_of_squares(std::span<const float>(x).subspan(333));
  EXPECT_NEAR(parts, whole, 1e-12 * whole);
}

}  // namespace
}  // namespace dtrain::optim
