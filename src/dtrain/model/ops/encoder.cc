// encoder_forward / encoder_backward: row gathers and scatter-adds.
#include "dtrain/model/ops/encoder.h"

namespace dtrain::model {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      float* o = out + (b * T + t) * C;
      const float* e = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      if (wpe == nullptr) {  // no learned positions (Llama's are rotary, in attention)
        for (int64_t i = 0; i < C; ++i) o[i] = e[i];
        continue;
      }
      const float* p = wpe + t * C;
      for (int64_t i = 0; i < C; ++i) o[i] = e[i] + p[i];
    }
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* d = dout + (b * T + t) * C;
      float* de = dwte + static_cast<int64_t>(tokens[b * T + t]) * C;
      if (dwpe == nullptr) {
        for (int64_t i = 0; i < C; ++i) de[i] += d[i];
        continue;
      }
      float* dp = dwpe + t * C;
      for (int64_t i = 0; i < C; ++i) {
        de[i] += d[i];
        dp[i] += d[i];
      }
    }
  }
}

}  // namespace dtrain::model
