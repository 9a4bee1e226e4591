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

// Grouped-query attention (Ainslie et al. 2023; Llama 2 70B, Llama 3): NH query heads share
// NKV key/value heads, query head h reading K/V head h / (NH / NKV) (NKV divides NH; NKV = 1 is
// multi-query attention, NKV = NH the multi-head attention above, which calls these). qkv rows
// hold [q (NH*HS) | k (NKV*HS) | v (NKV*HS)]; out rows NH*HS. The backward runs a task per
// (batch row, K/V head) so the group's query heads add into its dK and dV in head order.
void gqa_attention_forward(float* out,        // (B, T, NH*HS)
                           float* att,        // (B, NH, T, T)
                           const float* qkv,  // (B, T, (NH + 2*NKV)*HS)
                           int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                           const Compute& cx = {});
void gqa_attention_backward(float* dqkv,        // (B, T, (NH + 2*NKV)*HS), accumulated
                            float* scratch,     // (cx.threads(), T, T)
                            const float* dout,  // (B, T, NH*HS)
                            const float* qkv, const float* att, int64_t B, int64_t T, int64_t NH,
                            int64_t NKV, int64_t HS, const Compute& cx = {});

// The causal softmax of one (T, T) score block in place (row i over columns 0..i, exact zeros
// above the diagonal), and its backward in place: ds = a * (ds - rowsum(a * ds)). The two
// run inside attention_forward/backward; declared here so that calibrate can time them alone.
void causal_softmax(float* a, int64_t T);
void causal_softmax_backward(float* ds, const float* a, int64_t T);

}  // namespace dtrain::model
