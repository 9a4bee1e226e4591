// Token + learned position embedding: out[b, t] = wte[tokens[b, t]] + wpe[t]; without wpe (null:
// a model with rotary positions) the token rows alone, and dwpe null is skipped.
#pragma once

#include <cstdint>

namespace dtrain::model {

void encoder_forward(float* out,             // (B, T, C)
                     const int32_t* tokens,  // (B, T), each in [0, V)
                     const float* wte,       // (V, C)
                     const float* wpe,       // (context, C), context >= T
                     int64_t B, int64_t T, int64_t C);

// Accumulates: dwte[tokens[b, t]] += dout[b, t], dwpe[t] += dout[b, t].
void encoder_backward(float* dwte,            // (V, C)
                      float* dwpe,            // (context, C)
                      const float* dout,      // (B, T, C)
                      const int32_t* tokens,  // (B, T)
                      int64_t B, int64_t T, int64_t C);

}  // namespace dtrain::model
