// LayerNorm: two-pass mean and variance per row; the backward is the closed form
// dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
#include "dtrain/model/ops/layernorm.h"
#include "dtrain/core/cpu_dispatch.h"

#include <cmath>

#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {
namespace {

DTRAIN_MULTIVERSION void layernorm_forward_rows(float* out, float* mean, float* rstd,
                                                const float* inp, const float* weight,
                                                const float* bias, int64_t C, Range r) {
  const float inv_c = 1.0f / static_cast<float>(C);
  {
    for (int64_t row = r.begin; row < r.end; ++row) {
      const float* x = inp + row * C;
      float* o = out + row * C;
      const float m = sum(x, C) * inv_c;
      for (int64_t i = 0; i < C; ++i) o[i] = x[i] - m;  // centred input, for the variance
      const float variance = dot(o, o, C) * inv_c;
      const float s = 1.0f / std::sqrt(variance + kLayerNormEps);
      for (int64_t i = 0; i < C; ++i) o[i] = o[i] * s * weight[i] + bias[i];
      mean[row] = m;
      rstd[row] = s;
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t B, int64_t T, int64_t C, const Compute& cx) {
  const int64_t rows = B * T;
  parallel_ranges(cx.team_for(rows * C, 32768), rows, 1, [&](Range r) {
    layernorm_forward_rows(out, mean, rstd, inp, weight, bias, C, r);
  });
}

DTRAIN_MULTIVERSION void layernorm_backward(float* dinp, float* dweight, float* dbias,
                                            const float* dout, const float* inp,
                                            const float* weight, const float* mean,
                                            const float* rstd, int64_t B, int64_t T, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t row = 0; row < B * T; ++row) {
    const float* d = dout + row * C;
    const float* x = inp + row * C;
    float* dx = dinp + row * C;
    const float m = mean[row];
    const float s = rstd[row];
    // Two reductions in one pass, each over kLanes partial sums.
    float acc_dnorm[kLanes] = {};
    float acc_dnorm_norm[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) {
        const float dnorm = d[i + k] * weight[i + k];
        acc_dnorm[k] += dnorm;
        acc_dnorm_norm[k] += dnorm * ((x[i + k] - m) * s);
      }
    }
    float dnorm_sum = fold_lanes(acc_dnorm);
    float dnorm_norm_sum = fold_lanes(acc_dnorm_norm);
    for (; i < C; ++i) {
      const float dnorm = d[i] * weight[i];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * ((x[i] - m) * s);
    }
    const float dnorm_mean = dnorm_sum * inv_c;
    const float dnorm_norm_mean = dnorm_norm_sum * inv_c;
    // Two loops, not one: with six arrays in one loop GCC gives up on the alias checks that
    // vectorizing it needs.
    for (int64_t j = 0; j < C; ++j) {
      const float norm = (x[j] - m) * s;
      dx[j] += (d[j] * weight[j] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    for (int64_t j = 0; j < C; ++j) {
      dweight[j] += d[j] * ((x[j] - m) * s);
      dbias[j] += d[j];
    }
  }
}

}  // namespace dtrain::model
