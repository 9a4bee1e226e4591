// GELU, tanh approximation (as GPT-2 and torch's approximate="tanh"):
// gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))). Elementwise: split across cx's
// team in chunks of 16.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

void gelu_forward(float* out,        // (N)
                  const float* inp,  // (N)
                  int64_t N, const Compute& cx = {});

// Accumulates dinp += gelu'(inp) * dout (the input is cached, the tanh recomputed).
void gelu_backward(float* dinp,        // (N)
                   const float* inp,   // (N)
                   const float* dout,  // (N)
                   int64_t N, const Compute& cx = {});

}  // namespace dtrain::model
