// Causal multi-head self-attention, softmax(Q K^T / sqrt(HS) + causal mask) V, per (b, head)
// with sgemm. Only the softmax output is cached: the scores are computed in its place.
// qkv rows hold [q | k | v], each C wide; head h owns columns h*HS .. h*HS + HS - 1 of each.
// With a team in cx the (batch row, head) pairs are split across its members.
#pragma once

#include <cstdint>

#include "dtrain/model/gemm.h"

namespace dtrain::model {

void attention_forward(float* out,        // (B, T, C): heads side by side
                       float* att,        // (B, NH, T, T): softmax output, 0 above the diagonal
                       const float* qkv,  // (B, T, 3*C)
                       int64_t B, int64_t T, int64_t C, int64_t NH, const Compute& cx = {});

// Accumulates into dqkv. `scratch` is workspace, one (T, T) per thread of cx (overwritten).
void attention_backward(float* dqkv,        // (B, T, 3*C)
                        float* scratch,     // (cx.threads(), T, T)
                        const float* dout,  // (B, T, C)
                        const float* qkv,   // (B, T, 3*C)
                        const float* att,   // (B, NH, T, T)
                        int64_t B, int64_t T, int64_t C, int64_t NH, const Compute& cx = {});

// The causal softmax of one (T, T) score block in place (row i over columns 0..i, exact zeros
// above the diagonal), and its backward in place: ds = a * (ds - rowsum(a * ds)). The two
// run inside attention_forward/backward; declared here so that calibrate can time them alone.
void causal_softmax(float* a, int64_t T);
void causal_softmax_backward(float* ds, const float* a, int64_t T);

}  // namespace dtrain::model
