// RMSNorm: one reduction per row forward (the sum of squares), two backward (sum(w dy x) and the
// weight's gradient), in fp32 as Hugging Face's LlamaRMSNorm computes it.
#include "dtrain/model/ops/rmsnorm.h"

#include <cmath>

#include "dtrain/core/cpu_dispatch.h"
#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {
namespace {

DTRAIN_MULTIVERSION void rmsnorm_forward_rows(float* out, float* rstd, const float* inp,
                                              const float* weight, int64_t C, float eps, Range r) {
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t row = r.begin; row < r.end; ++row) {
    const float* x = inp + row * C;
    float* o = out + row * C;
    const float s = 1.0f / std::sqrt(dot(x, x, C) * inv_c + eps);
    for (int64_t i = 0; i < C; ++i) o[i] = x[i] * s * weight[i];
    rstd[row] = s;
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, const Compute& cx) {
  parallel_ranges(cx.team_for(N * C, 32768), N, 1,
                  [&](Range r) { rmsnorm_forward_rows(out, rstd, inp, weight, C, eps, r); });
}

DTRAIN_MULTIVERSION void rmsnorm_backward(float* dinp, float* dweight, const float* dout,
                                          const float* inp, const float* weight, const float* rstd,
                                          int64_t N, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t row = 0; row < N; ++row) {
    const float* d = dout + row * C;
    const float* x = inp + row * C;
    float* dx = dinp + row * C;
    const float s = rstd[row];
    float wdx = 0;  // sum over the row of w * dy * x
    for (int64_t i = 0; i < C; ++i) wdx += weight[i] * d[i] * x[i];
    const float k = s * s * s * inv_c * wdx;
    for (int64_t i = 0; i < C; ++i) {
      dx[i] += s * weight[i] * d[i] - k * x[i];
      dweight[i] += d[i] * x[i] * s;
    }
  }
}

}  // namespace dtrain::model
