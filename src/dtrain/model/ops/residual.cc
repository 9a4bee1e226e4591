// residual_forward / residual_backward: elementwise loops.
#include "dtrain/model/ops/residual.h"
#include "dtrain/core/cpu_dispatch.h"

namespace dtrain::model {
namespace {

DTRAIN_MULTIVERSION void residual_forward_rows(float* out, const float* inp, const float* delta,
                                               const float* bias, int64_t C, Range rows) {
  {
    for (int64_t r = rows.begin; r < rows.end; ++r) {
      const float* x = inp + r * C;
      const float* y = delta + r * C;
      float* o = out + r * C;
      if (bias != nullptr) {
        for (int64_t i = 0; i < C; ++i) o[i] = x[i] + y[i] + bias[i];
      } else {
        for (int64_t i = 0; i < C; ++i) o[i] = x[i] + y[i];
      }
    }
  }
}

}  // namespace

void residual_forward(float* out, const float* inp, const float* delta, const float* bias,
                      int64_t BT, int64_t C, const Compute& cx) {
  parallel_ranges(cx.team_for(BT * C, 32768), BT, 1,
                  [&](Range rows) { residual_forward_rows(out, inp, delta, bias, C, rows); });
}

DTRAIN_MULTIVERSION void residual_backward(float* dinp, float* ddelta, float* dbias,
                                           const float* dout, int64_t BT, int64_t C) {
  for (int64_t r = 0; r < BT; ++r) {
    const float* d = dout + r * C;
    if (dinp != nullptr) {
      for (int64_t i = 0; i < C; ++i) dinp[r * C + i] += d[i];
    }
    if (ddelta != nullptr) {
      for (int64_t i = 0; i < C; ++i) ddelta[r * C + i] += d[i];
    }
    if (dbias != nullptr) {
      for (int64_t i = 0; i < C; ++i) dbias[i] += d[i];
    }
  }
}

}  // namespace dtrain::model
