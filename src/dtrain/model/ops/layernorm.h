// LayerNorm over the channel dimension (eps 1e-5, as torch.nn.LayerNorm), caching the mean
// and 1/std of every row for the backward pass. The forward splits rows across cx's team.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

inline constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(float* out,           // (B, T, C)
                       float* mean,          // (B, T)
                       float* rstd,          // (B, T)
                       const float* inp,     // (B, T, C)
                       const float* weight,  // (C)
                       const float* bias,    // (C)
                       int64_t B, int64_t T, int64_t C, const Compute& cx = {});

// Accumulates into dinp, dweight and dbias. Runs on the calling thread (dweight and dbias
// sum over all rows).
void layernorm_backward(float* dinp,          // (B, T, C)
                        float* dweight,       // (C)
                        float* dbias,         // (C)
                        const float* dout,    // (B, T, C)
                        const float* inp,     // (B, T, C)
                        const float* weight,  // (C)
                        const float* mean,    // (B, T)
                        const float* rstd,    // (B, T)
                        int64_t B, int64_t T, int64_t C);

}  // namespace dtrain::model
