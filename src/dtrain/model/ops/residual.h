// Residual connection with the bias of the linear that feeds it: out = inp + delta + bias.
// The bias is added here, after the tensor-parallel all-reduce of delta, so that it is added
// once and not once per TP rank.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

void residual_forward(float* out,          // (BT, C)
                      const float* inp,    // (BT, C)
                      const float* delta,  // (BT, C)
                      const float* bias,   // (C), or null
                      int64_t BT, int64_t C, const Compute& cx = {});

// Accumulates: dinp += dout, ddelta += dout, dbias += column sums of dout (null to skip any).
void residual_backward(float* dinp,        // (BT, C)
                       float* ddelta,      // (BT, C)
                       float* dbias,       // (C)
                       const float* dout,  // (BT, C)
                       int64_t BT, int64_t C);

}  // namespace dtrain::model
