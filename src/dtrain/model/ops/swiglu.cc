// SwiGLU forward and backward, the sigmoid by std::exp (exact to fp32 rounding: these are the
// values Hugging Face's F.silu gives, so exported weights run the same there).
#include "dtrain/model/ops/swiglu.h"

#include <cmath>

#include "dtrain/core/cpu_dispatch.h"
#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {
namespace {

float sigmoid(float g) {
  return 1.0f / (1.0f + std::exp(-g));
}

DTRAIN_MULTIVERSION void swiglu_forward_rows(float* out, const float* gate_up, int64_t F, Range r) {
  for (int64_t row = r.begin; row < r.end; ++row) {
    const float* g = gate_up + row * 2 * F;
    const float* u = g + F;
    float* o = out + row * F;
    for (int64_t i = 0; i < F; ++i) o[i] = g[i] * sigmoid(g[i]) * u[i];
  }
}

DTRAIN_MULTIVERSION void swiglu_backward_rows(float* dgate_up, const float* gate_up,
                                              const float* dout, int64_t F, Range r) {
  for (int64_t row = r.begin; row < r.end; ++row) {
    const float* g = gate_up + row * 2 * F;
    const float* u = g + F;
    float* dg = dgate_up + row * 2 * F;
    float* du = dg + F;
    const float* d = dout + row * F;
    for (int64_t i = 0; i < F; ++i) {
      const float s = sigmoid(g[i]);
      du[i] += d[i] * g[i] * s;
      dg[i] += d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F, const Compute& cx) {
  parallel_ranges(cx.team_for(N * F, 32768), N, 1,
                  [&](Range r) { swiglu_forward_rows(out, gate_up, F, r); });
}

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F,
                     const Compute& cx) {
  parallel_ranges(cx.team_for(N * F, 32768), N, 1,
                  [&](Range r) { swiglu_backward_rows(dgate_up, gate_up, dout, F, r); });
}

}  // namespace dtrain::model
