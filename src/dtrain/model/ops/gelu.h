// GELU, tanh approximation (as GPT-2 and torch's approximate="tanh"):
// gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
#pragma once

#include <cstdint>

namespace dtrain::model {

void gelu_forward(float* out,        // (N)
                  const float* inp,  // (N)
                  int64_t N);

// Accumulates dinp += gelu'(inp) * dout (the input is cached, the tanh recomputed).
void gelu_backward(float* dinp,        // (N)
                   const float* inp,   // (N)
                   const float* dout,  // (N)
                   int64_t N);

}  // namespace dtrain::model
