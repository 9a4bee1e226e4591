// AdamW against steps computed by hand (in double, from the update rule written out below),
// shard-invariance (ZeRO runs it on pieces of the buffer), the grad_scale path, and the
// memory it charges.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/optim/adamw.h"

namespace dtrain::optim {
namespace {

// The rule, element by element (torch.optim.AdamW):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p - lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
struct Hand {
  double p, m = 0, v = 0;
  void step(double g, double lr, const AdamWConfig& c, int t) {
    m = c.beta1 * m + (1 - c.beta1) * g;
    v = c.beta2 * v + (1 - c.beta2) * g * g;
    const double m_hat = m / (1 - std::pow(c.beta1, t));
    const double v_hat = v / (1 - std::pow(c.beta2, t));
    p -= lr * (m_hat / (std::sqrt(v_hat) + c.eps) + c.weight_decay * p);
  }
};

TEST(AdamW, ThreeStepsMatchTheHandComputedRule) {
  // Tolerance 1e-6 relative: the fp32 update against the same rule in double.
  const AdamWConfig c{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  // 19 elements: more than one block of 16 plus a tail; mixed signs and sizes; a zero gradient.
  std::vector<float> p(19), g(19);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = 0.5f - 0.07f * static_cast<float>(i);
    g[i] = (i % 3 == 0 ? -1.0f : 1.0f) * 0.01f * static_cast<float>(i);
  }
  std::vector<Hand> hand;
  for (float x : p) hand.push_back({x});
  AdamW opt(static_cast<int64_t>(p.size()), c, nullptr);
  const float lrs[] = {1e-3f, 3e-3f, 2e-3f};
  for (int t = 1; t <= 3; ++t) {
    // gradients change between steps so both moments matter
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] * 0.5f + 0.003f * static_cast<float>(t);
    opt.step(p, g, lrs[t - 1]);
    for (size_t i = 0; i < p.size(); ++i) {
      hand[i].step(g[i], lrs[t - 1], c, t);
      EXPECT_NEAR(p[i], hand[i].p, 1e-6 * std::fabs(hand[i].p) + 1e-9)
          << "step " << t << " i " << i;
      EXPECT_NEAR(opt.m()[i], hand[i].m, 1e-6 * std::fabs(hand[i].m) + 1e-12);
      EXPECT_NEAR(opt.v()[i], hand[i].v, 1e-6 * std::fabs(hand[i].v) + 1e-15);
    }
  }
  EXPECT_EQ(opt.step_count(), 3);
}

TEST(AdamW, FirstStepMovesEachParameterByAboutLrTimesSignOfGrad) {
  // At t = 1, m_hat = g and v_hat = g^2, so the step is lr * (sign(g) + wd * p) up to eps.
  const AdamWConfig c{.weight_decay = 0.0f};
  std::vector<float> p = {1.0f, -2.0f, 0.25f}, g = {3.0f, -0.001f, 1e-3f}, m(3), v(3);
  adamw_update(p, g, m, v, c, 0.01f, 1);
  EXPECT_NEAR(p[0], 1.0f - 0.01f, 1e-7);
  EXPECT_NEAR(p[1], -2.0f + 0.01f, 1e-6);
  EXPECT_NEAR(p[2], 0.25f - 0.01f, 1e-6);
}

TEST(AdamW, ShardsGiveTheSameBitsAsTheWholeBuffer) {
  // ZeRO runs the update on pieces; splitting anywhere must not change a bit.
  const AdamWConfig c;
  const int64_t n = 101;
  std::vector<float> p(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(static_cast<float>(i));
    g[i] = std::cos(0.3f * static_cast<float>(i));
  }
  std::vector<float> whole = p, mw(n), vw(n);
  std::vector<float> split = p, ms(n), vs(n);
  for (int t = 1; t <= 2; ++t) {
    adamw_update(whole, g, mw, vw, c, 1e-2f, t);
    const int64_t cuts[] = {0, 37, 53, n};  // pieces of 37, 16 and 48 elements
    for (int k = 0; k + 1 < 4; ++k) {
      const auto off = static_cast<size_t>(cuts[k]);
      const auto len = static_cast<size_t>(cuts[k + 1] - cuts[k]);
      adamw_update(std::span(split).subspan(off, len), std::span<const float>(g).subspan(off, len),
                   std::span(ms).subspan(off, len), std::span(vs).subspan(off, len), c, 1e-2f, t);
    }
  }
  EXPECT_EQ(whole, split);
  EXPECT_EQ(mw, ms);
  EXPECT_EQ(vw, vs);
}

TEST(AdamW, GradScaleEqualsScaledGradients) {
  const AdamWConfig c;
  std::vector<float> g = {0.5f, -1.5f, 2.0f, 0.0f}, scaled(4);
  const float s = 0.25f;  // a power of two: g * s is exact either way
  for (size_t i = 0; i < g.size(); ++i) scaled[i] = g[i] * s;
  std::vector<float> a = {1, 2, 3, 4}, b = a, ma(4), va(4), mb(4), vb(4);
  adamw_update(a, g, ma, va, c, 1e-2f, 1, s);
  adamw_update(b, scaled, mb, vb, c, 1e-2f, 1);
  EXPECT_EQ(a, b);
}

TEST(AdamW, ChargesTwoMomentsToTheOptimizerTag) {
  MemoryTracker tracker;
  {
    AdamW opt(1000, AdamWConfig{}, &tracker);
    EXPECT_EQ(tracker.current_bytes(MemoryTag::optimizer), 2 * 1000 * 4);
  }
  EXPECT_EQ(tracker.current_bytes(MemoryTag::optimizer), 0);
}

TEST(AdamW, RejectsMismatchedSpansAndStepZero) {
  std::vector<float> p(4), g(3), m(4), v(4);
  EXPECT_THROW(adamw_update(p, g, m, v, AdamWConfig{}, 1e-3f, 1), Error);
  std::vector<float> g4(4);
  EXPECT_THROW(adamw_update(p, g4, m, v, AdamWConfig{}, 1e-3f, 0), Error);
}

}  // namespace
}  // namespace dtrain::optim
