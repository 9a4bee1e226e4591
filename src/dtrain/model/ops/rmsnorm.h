// RMSNorm over the channel dimension (Zhang & Sennrich 2019; Llama's, as Hugging Face's
// LlamaRMSNorm): out = x / sqrt(mean(x^2) + eps) * weight, no mean subtracted, no bias. The
// forward caches each row's 1/rms for the backward and splits rows across cx's team.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

void rmsnorm_forward(float* out,           // (N, C)
                     float* rstd,          // (N): 1 / sqrt(mean(x^2) + eps)
                     const float* inp,     // (N, C)
                     const float* weight,  // (C)
                     int64_t N, int64_t C, float eps, const Compute& cx = {});

// Accumulates into dinp and dweight, on the calling thread (dweight sums over all rows):
// dx = r * (w * dy) - r^3 / C * x * sum(w * dy * x), dw += dy * x * r.
void rmsnorm_backward(float* dinp,          // (N, C)
                      float* dweight,       // (C)
                      const float* dout,    // (N, C)
                      const float* inp,     // (N, C)
                      const float* weight,  // (C)
                      const float* rstd,    // (N)
                      int64_t N, int64_t C);

}  // namespace dtrain::model
