// Blockwise attention per (batch row, head): scores by sgemm into a (Tq, Tk) scratch, the mask
// from the two blocks' global positions, the online-softmax merge row by row, and the backward
// from the recomputed probabilities (dS = P * (dP - rowsum(dO * O))).
#include "dtrain/model/ops/blockwise_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtrain::model {
namespace {

const float* at(const ConstTokenBlock& x, int64_t b, int64_t h, int64_t HS) {
  return x.data + b * x.batch_stride + h * HS;
}
float* at(const TokenBlock& x, int64_t b, int64_t h, int64_t HS) {
  return x.data + b * x.batch_stride + h * HS;
}

// Whether any key of k is at or before any query of q: else the block pair is all masked.
bool any_visible(const ConstTokenBlock& q, const ConstTokenBlock& k) {
  if (q.tokens == 0 || k.tokens == 0) return false;
  const int64_t q_max = *std::max_element(q.pos, q.pos + q.tokens);
  const int64_t k_min = *std::min_element(k.pos, k.pos + k.tokens);
  return k_min <= q_max;
}

}  // namespace

void attention_merge_init(float* m, float* l, TokenBlock out, const BlockShape& s, int64_t Tq) {
  const int64_t n = s.B * s.NH * Tq;
  std::fill(m, m + n, -std::numeric_limits<float>::infinity());
  std::fill(l, l + n, 0.0f);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < Tq; ++t) {
      float* row = out.data + b * out.batch_stride + t * out.row_stride;
      std::fill(row, row + s.NH * s.HS, 0.0f);
    }
  }
}

int64_t attention_merge_block(TokenBlock out, float* m, float* l, ConstTokenBlock q,
                              ConstTokenBlock k, ConstTokenBlock v, const BlockShape& s,
                              const Compute& cx) {
  if (!any_visible(q, k)) return 0;
  const int64_t Tq = q.tokens, Tk = k.tokens, HS = s.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::vector<float> p(static_cast<size_t>(Tq * Tk));
  const Compute single{nullptr, cx.gemm_stats, cx.precision};
  int64_t pairs = 0;
  for (int64_t i = 0; i < Tq; ++i) {
    for (int64_t j = 0; j < Tk; ++j) pairs += k.pos[j] <= q.pos[i] ? 1 : 0;
  }
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      float* mh = m + (b * s.NH + h) * Tq;
      float* lh = l + (b * s.NH + h) * Tq;
      float* o = at(out, b, h, HS);
      // scores (Tq, Tk) = scale * q @ k^T
      sgemm(Trans::no, Trans::yes, Tq, Tk, HS, scale, at(q, b, h, HS), q.row_stride,
            at(k, b, h / s.group, HS), k.row_stride, 0.0f, p.data(), Tk, single);
      for (int64_t i = 0; i < Tq; ++i) {
        float* row = p.data() + i * Tk;
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < Tk; ++j) {
          if (k.pos[j] <= q.pos[i]) block_max = std::max(block_max, row[j]);
        }
        if (block_max == -std::numeric_limits<float>::infinity()) {
          std::fill(row, row + Tk, 0.0f);  // every key of the block is after this query
          continue;
        }
        const float m_new = std::max(mh[i], block_max);
        const float alpha = std::exp(mh[i] - m_new);  // 0 for the first visible block
        float sum = 0.0f;
        for (int64_t j = 0; j < Tk; ++j) {
          row[j] = k.pos[j] <= q.pos[i] ? std::exp(row[j] - m_new) : 0.0f;
          sum += row[j];
        }
        lh[i] = lh[i] * alpha + sum;
        mh[i] = m_new;
        float* orow = o + i * out.row_stride;
        for (int64_t c = 0; c < HS; ++c) orow[c] *= alpha;
      }
      // out (Tq, HS) += p @ v
      sgemm(Trans::no, Trans::no, Tq, HS, Tk, 1.0f, p.data(), Tk, at(v, b, h / s.group, HS),
            v.row_stride, 1.0f, o, out.row_stride, single);
    }
  }
  return pairs;
}

void attention_merge_finish(TokenBlock out, float* lse, const float* m, const float* l,
                            const BlockShape& s, int64_t Tq) {
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      float* o = at(out, b, h, s.HS);
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t x = (b * s.NH + h) * Tq + i;
        const float li = l[x], mi = m[x];
        const float inv = li > 0.0f ? 1.0f / li : 0.0f;
        float* orow = o + i * out.row_stride;
        for (int64_t c = 0; c < s.HS; ++c) orow[c] *= inv;
        lse[x] = mi + std::log(li);
      }
    }
  }
}

void attention_row_dot(float* d, ConstTokenBlock dout, ConstTokenBlock out, const BlockShape& s) {
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      const float* g = at(dout, b, h, s.HS);
      const float* o = at(out, b, h, s.HS);
      for (int64_t i = 0; i < out.tokens; ++i) {
        float sum = 0.0f;
        for (int64_t c = 0; c < s.HS; ++c) {
          sum += g[i * dout.row_stride + c] * o[i * out.row_stride + c];
        }
        d[(b * s.NH + h) * out.tokens + i] = sum;
      }
    }
  }
}

void attention_block_backward(TokenBlock dq, TokenBlock dk, TokenBlock dv, ConstTokenBlock dout,
                              ConstTokenBlock q, ConstTokenBlock k, ConstTokenBlock v,
                              const float* lse, const float* d, const BlockShape& s,
                              const Compute& cx) {
  if (!any_visible(q, k)) return;
  const int64_t Tq = q.tokens, Tk = k.tokens, HS = s.HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  std::vector<float> p(static_cast<size_t>(Tq * Tk)), dp(static_cast<size_t>(Tq * Tk));
  const Compute single{nullptr, cx.gemm_stats, cx.precision};
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.NH; ++h) {
      const float* qh = at(q, b, h, HS);
      const float* kh = at(k, b, h / s.group, HS);  // the group's K/V head
      const float* vh = at(v, b, h / s.group, HS);
      const float* gh = at(dout, b, h, HS);
      const float* lse_h = lse + (b * s.NH + h) * Tq;
      const float* d_h = d + (b * s.NH + h) * Tq;
      // p (Tq, Tk) = exp(scale * q k^T - lse), 0 where masked
      sgemm(Trans::no, Trans::yes, Tq, Tk, HS, scale, qh, q.row_stride, kh, k.row_stride, 0.0f,
            p.data(), Tk, single);
      for (int64_t i = 0; i < Tq; ++i) {
        float* row = p.data() + i * Tk;
        for (int64_t j = 0; j < Tk; ++j) {
          row[j] = k.pos[j] <= q.pos[i] ? std::exp(row[j] - lse_h[i]) : 0.0f;
        }
      }
      // dv (Tk, HS) += p^T @ dout;  dp (Tq, Tk) = dout @ v^T
      sgemm(Trans::yes, Trans::no, Tk, HS, Tq, 1.0f, p.data(), Tk, gh, dout.row_stride, 1.0f,
            at(dv, b, h / s.group, HS), dv.row_stride, single);
      sgemm(Trans::no, Trans::yes, Tq, Tk, HS, 1.0f, gh, dout.row_stride, vh, v.row_stride, 0.0f,
            dp.data(), Tk, single);
      // ds = p * (dp - d), into dp
      for (int64_t i = 0; i < Tq; ++i) {
        for (int64_t j = 0; j < Tk; ++j) {
          const int64_t x = i * Tk + j;
          dp[static_cast<size_t>(x)] =
              p[static_cast<size_t>(x)] * (dp[static_cast<size_t>(x)] - d_h[i]);
        }
      }
      // dq (Tq, HS) += scale * ds @ k;  dk (Tk, HS) += scale * ds^T @ q
      sgemm(Trans::no, Trans::no, Tq, HS, Tk, scale, dp.data(), Tk, kh, k.row_stride, 1.0f,
            at(dq, b, h, HS), dq.row_stride, single);
      sgemm(Trans::yes, Trans::no, Tk, HS, Tq, scale, dp.data(), Tk, qh, q.row_stride, 1.0f,
            at(dk, b, h / s.group, HS), dk.row_stride, single);
    }
  }
}

}  // namespace dtrain::model
