// Attention with sgemm per (batch row, head): scores into `att`, masked softmax in place,
// then att @ V. Backward: dV += att^T dout, datt = dout V^T, softmax backward in place
// (dscore = att * (datt - rowsum(att * datt))), dQ += dscore K / sqrt(HS), dK += dscore^T Q /
// sqrt(HS).
#include "dtrain/model/ops/attention.h"
#include "dtrain/core/cpu_dispatch.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/model/ops/head_tasks.h"
#include "dtrain/model/ops/vector_math.h"

namespace dtrain::model {

// Causal softmax of each row i of a (T, T) score block over columns 0..i, in place; exact zeros
// above the diagonal.
DTRAIN_MULTIVERSION void causal_softmax(float* a, int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    float* row = a + i * T;
    const float m = max_of(row, i + 1);
    for (int64_t j = 0; j <= i; ++j) row[j] = exp_approx(row[j] - m);
    const float inv = 1.0f / sum(row, i + 1);
    for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
  }
}

// Softmax backward in place: ds = a * (ds - rowsum(a * ds)); a is 0 above the diagonal, so
// those entries become 0.
DTRAIN_MULTIVERSION void causal_softmax_backward(float* ds, const float* a, int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    const float* arow = a + i * T;
    float* row = ds + i * T;
    const float s = dot(arow, row, i + 1);
    for (int64_t j = 0; j <= i; ++j) row[j] = arow[j] * (row[j] - s);
    for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
  }
}

void gqa_attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t NH, int64_t NKV, int64_t HS, const Compute& cx) {
  const int64_t C = NH * HS;              // out's row width
  const int64_t W = (NH + 2 * NKV) * HS;  // qkv's row width: [q | k | v]
  const int64_t group = NH / NKV;         // query heads per K/V head
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for_each_head(cx, B, NH, T * T * HS,
                [&](int64_t b, int64_t h, int /*member*/, const Compute& mx) {
                  const float* q = qkv + b * T * W + h * HS;  // (T, HS), row stride W
                  const float* k = qkv + b * T * W + C + (h / group) * HS;
                  const float* v = k + NKV * HS;
                  float* a = att + (b * NH + h) * T * T;  // (T, T)
                  // scores (T, T) = scale * q @ k^T
                  sgemm(Trans::no, Trans::yes, T, T, HS, scale, q, W, k, W, 0.0f, a, T, mx);
                  causal_softmax(a, T);
                  // out (T, HS), row stride C = att @ v
                  sgemm(Trans::no, Trans::no, T, HS, T, 1.0f, a, T, v, W, 0.0f,
                        out + b * T * C + h * HS, C, mx);
                });
}

void gqa_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                            const float* att, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                            int64_t HS, const Compute& cx) {
  const int64_t C = NH * HS;
  const int64_t W = (NH + 2 * NKV) * HS;
  const int64_t group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // One task per (batch row, K/V head): the group's query heads add into the same dK and dV, in
  // head order, so no two members write one row.
  for_each_head(cx, B, NKV, group * T * T * HS,
                [&](int64_t b, int64_t g, int member, const Compute& mx) {
                  const float* k = qkv + b * T * W + C + g * HS;
                  const float* v = k + NKV * HS;
                  float* dk = dqkv + b * T * W + C + g * HS;
                  float* dv = dk + NKV * HS;
                  float* ds = scratch + member * T * T;  // (T, T), this member's
                  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                    const float* q = qkv + b * T * W + h * HS;
                    float* dq = dqkv + b * T * W + h * HS;
                    const float* a = att + (b * NH + h) * T * T;
                    const float* d = dout + b * T * C + h * HS;  // (T, HS), row stride C
                    // dv (T, HS) += att^T @ dout
                    sgemm(Trans::yes, Trans::no, T, HS, T, 1.0f, a, T, d, C, 1.0f, dv, W, mx);
                    // datt (T, T) = dout @ v^T
                    sgemm(Trans::no, Trans::yes, T, T, HS, 1.0f, d, C, v, W, 0.0f, ds, T, mx);
                    causal_softmax_backward(ds, a, T);
                    // dq (T, HS) += scale * dscores @ k;  dk (T, HS) += scale * dscores^T @ q
                    sgemm(Trans::no, Trans::no, T, HS, T, scale, ds, T, k, W, 1.0f, dq, W, mx);
                    sgemm(Trans::yes, Trans::no, T, HS, T, scale, ds, T, q, W, 1.0f, dk, W, mx);
                  }
                });
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, const Compute& cx) {
  gqa_attention_forward(out, att, qkv, B, T, NH, NH, C / NH, cx);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH,
                        const Compute& cx) {
  gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NH, C / NH, cx);
}

}  // namespace dtrain::model
