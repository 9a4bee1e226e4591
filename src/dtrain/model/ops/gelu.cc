// GELU forward and backward without tanh: with e = exp(2u), 1 + tanh(u) = 2e / (e + 1) and
// 1 - tanh(u)^2 = 4e / (e + 1)^2, which (unlike 1 + tanh) do not cancel for x << 0.
#include "dtrain/model/ops/gelu.h"
#include "dtrain/core/cpu_dispatch.h"

#include <cmath>
#include <numbers>

#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {
namespace {

constexpr float kCubic = 0.044715f;
constexpr int64_t kMinPerThread = 32768;  // elements; below this a split costs more than it saves

float gelu_scale() {
  return static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
}

DTRAIN_MULTIVERSION void gelu_forward_range(float* out, const float* inp, int64_t begin,
                                            int64_t end) {
  const float s = gelu_scale();
  for (int64_t i = begin; i < end; ++i) {
    const float x = inp[i];
    const float u = s * (x + kCubic * x * x * x);
    const float e = exp_approx(2.0f * u);
    out[i] = x * (e / (e + 1.0f));  // x/2 * (1 + tanh(u))
  }
}

DTRAIN_MULTIVERSION void gelu_backward_range(float* dinp, const float* inp, const float* dout,
                                             int64_t begin, int64_t end) {
  const float s = gelu_scale();
  for (int64_t i = begin; i < end; ++i) {
    const float x = inp[i];
    const float u = s * (x + kCubic * x * x * x);
    const float e = exp_approx(2.0f * u);
    const float half_one_plus_tanh = e / (e + 1.0f);
    const float du_dx = s * (1.0f + 3.0f * kCubic * x * x);
    // (1 + t)/2 + x/2 (1 - t^2) u' = h (1 + 2 x u' / (e + 1)), h = (1 + t)/2 = e / (e + 1)
    const float local = half_one_plus_tanh * (1.0f + 2.0f * x * du_dx / (e + 1.0f));
    dinp[i] += local * dout[i];
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t N, const Compute& cx) {
  parallel_ranges(cx.team_for(N, kMinPerThread), N, 16,
                  [&](Range r) { gelu_forward_range(out, inp, r.begin, r.end); });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N, const Compute& cx) {
  parallel_ranges(cx.team_for(N, kMinPerThread), N, 16,
                  [&](Range r) { gelu_backward_range(dinp, inp, dout, r.begin, r.end); });
}

}  // namespace dtrain::model
