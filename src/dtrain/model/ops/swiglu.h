// SwiGLU (Shazeer 2020; Llama's MLP): out = silu(gate) * up, silu(g) = g * sigmoid(g), where gate
// and up are two column blocks of one product's output, each F wide: rows [gate | up] (so the
// gate and up projections are one matrix of 2F columns, split over TP rank by rank as a block
// of each). Elementwise: rows split across cx's team.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

void swiglu_forward(float* out,            // (N, F)
                    const float* gate_up,  // (N, 2F): [gate | up]
                    int64_t N, int64_t F, const Compute& cx = {});

// Accumulates d gate += dy * up * silu'(gate) and d up += dy * silu(gate), with
// silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g))).
void swiglu_backward(float* dgate_up,       // (N, 2F)
                     const float* gate_up,  // (N, 2F)
                     const float* dout,     // (N, F)
                     int64_t N, int64_t F, const Compute& cx = {});

}  // namespace dtrain::model
