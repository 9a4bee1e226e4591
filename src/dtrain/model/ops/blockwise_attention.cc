// Blockwise attention per (batch row, head) and tile of query rows: scores by sgemm into a
// per-thread scratch, only up to the last key the tile's rows can see, the mask from the two
// blocks' global positions, the online-softmax merge row by row (vectorised, the softmax's own
// exp), and the backward from the recomputed probabilities (dS = P * (dP - rowsum(dO * O))).
#include "dtrain/model/ops/blockwise_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "dtrain/core/cpu_dispatch.h"
#include "dtrain/model/ops/head_tasks.h"
#include "dtrain/model/ops/vector_math.h"

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

// Queries are taken kRowTile at a time: with the keys in ascending positions (the ring's and
// Ulysses' blocks) a tile's rows see a prefix of the keys, up to its last row's, so the scores,
// the exponentials and the products stop there and the masked rest of a diagonal pair is never
// computed. Keys in another order (the all-gather's) are masked key by key over the whole block.
constexpr int64_t kRowTile = 64;

// How many leading keys row i (query position qp) needs: with ascending keys those at or before
// qp, else all of them (each is masked on its own).
int64_t needed_keys(const ConstTokenBlock& k, bool ascending, int64_t qp) {
  if (!ascending) return k.tokens;
  return std::upper_bound(k.pos, k.pos + k.tokens, qp) - k.pos;
}

// The largest score among the keys visible to query position qp (-inf if none), over the
// first n keys.
DTRAIN_MULTIVERSION float visible_max(const float* row, const int64_t* kpos, int64_t qp,
                                      int64_t n) {
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float acc[kLanes];
  std::fill(acc, acc + kLanes, kNone);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int c = 0; c < kLanes; ++c) {
      acc[c] = std::max(acc[c], kpos[j + c] <= qp ? row[j + c] : kNone);
    }
  }
  float m = kNone;
  for (int c = 0; c < kLanes; ++c) m = std::max(m, acc[c]);
  for (; j < n; ++j) m = std::max(m, kpos[j] <= qp ? row[j] : kNone);
  return m;
}

// row[j] = exp(row[j] - shift) for the visible keys of the first n, 0 for the others; returns
// their sum (lanes folded in a fixed order). Masked keys and scores 200 below the shift become
// -200 first, whose exp is 0 in float, so the exp pass has no branch.
DTRAIN_MULTIVERSION float visible_exp(float* row, const int64_t* kpos, int64_t qp, float shift,
                                      int64_t n) {
  constexpr float kFloor = -200.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float x = std::max(row[j] - shift, kFloor);
    row[j] = kpos[j] <= qp ? x : kFloor;
  }
  for (int64_t j = 0; j < n; ++j) row[j] = exp_rounded_in_range(row[j]);
  return sum(row, n);
}

// ds = p * (dp - d) over one row's first n entries.
DTRAIN_MULTIVERSION void softmax_grad_row(float* dp, const float* p, float d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - d);
}

// A scratch of at least n floats, kept per thread across blocks and steps.
float* scratch(std::vector<float>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
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
  const bool ascending = std::is_sorted(k.pos, k.pos + Tk);
  int64_t pairs = 0;
  for (int64_t i = 0; i < Tq; ++i) {
    for (int64_t j = 0; j < Tk; ++j) pairs += k.pos[j] <= q.pos[i] ? 1 : 0;
  }
  // A task per (batch row, K/V head), its query heads in order; spread over cx's team as the
  // dense attention's, each (row, head) computed as on one thread.
  for_each_head(
      cx, s.B, s.NH / s.group, s.group * pairs * HS,
      [&](int64_t b, int64_t g, int, const Compute& single) {
        thread_local std::vector<float> buffer;
        float* p = scratch(buffer, kRowTile * Tk);
        for (int64_t h = g * s.group; h < (g + 1) * s.group; ++h) {
          float* mh = m + (b * s.NH + h) * Tq;
          float* lh = l + (b * s.NH + h) * Tq;
          float* o = at(out, b, h, HS);
          for (int64_t i0 = 0; i0 < Tq; i0 += kRowTile) {
            const int64_t rows = std::min(kRowTile, Tq - i0);
            int64_t cols = 0;  // the keys any row of the tile needs
            for (int64_t i = i0; i < i0 + rows; ++i) {
              cols = std::max(cols, needed_keys(k, ascending, q.pos[i]));
            }
            if (cols == 0) continue;
            // scores (rows, cols) = scale * q @ k^T
            sgemm(Trans::no, Trans::yes, rows, cols, HS, scale, at(q, b, h, HS) + i0 * q.row_stride,
                  q.row_stride, at(k, b, g, HS), k.row_stride, 0.0f, p, cols, single);
            for (int64_t i = i0; i < i0 + rows; ++i) {
              float* row = p + (i - i0) * cols;
              const int64_t n = std::min(cols, needed_keys(k, ascending, q.pos[i]));
              const float block_max = visible_max(row, k.pos, q.pos[i], n);
              std::fill(row + n, row + cols, 0.0f);
              if (block_max == -std::numeric_limits<float>::infinity()) {
                std::fill(row, row + n, 0.0f);  // every key of the block is after this query
                continue;
              }
              const float m_new = std::max(mh[i], block_max);
              const float alpha = std::exp(mh[i] - m_new);  // 0 for the first visible block
              lh[i] = lh[i] * alpha + visible_exp(row, k.pos, q.pos[i], m_new, n);
              mh[i] = m_new;
              float* orow = o + i * out.row_stride;
              for (int64_t c = 0; c < HS; ++c) orow[c] *= alpha;
            }
            // out (rows, HS) += p @ v
            sgemm(Trans::no, Trans::no, rows, HS, cols, 1.0f, p, cols, at(v, b, g, HS),
                  v.row_stride, 1.0f, o + i0 * out.row_stride, out.row_stride, single);
          }
        }
      });
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
  const bool ascending = std::is_sorted(k.pos, k.pos + Tk);
  // A task per (batch row, K/V head): the group's query heads add into its dK and dV in head
  // order, so no two members write one row and the sums are those of one thread.
  const int64_t work = s.group * Tq * Tk * HS;
  for_each_head(cx, s.B, s.NH / s.group, work,
                [&](int64_t b, int64_t g, int, const Compute& single) {
                  thread_local std::vector<float> buffer;
                  float* p = scratch(buffer, 2 * kRowTile * Tk);
                  float* dp = p + kRowTile * Tk;
                  const float* kh = at(k, b, g, HS);  // the group's K/V head
                  const float* vh = at(v, b, g, HS);
                  float* dkh = at(dk, b, g, HS);
                  float* dvh = at(dv, b, g, HS);
                  for (int64_t h = g * s.group; h < (g + 1) * s.group; ++h) {
                    const float* lse_h = lse + (b * s.NH + h) * Tq;
                    const float* d_h = d + (b * s.NH + h) * Tq;
                    for (int64_t i0 = 0; i0 < Tq; i0 += kRowTile) {
                      const int64_t rows = std::min(kRowTile, Tq - i0);
                      int64_t cols = 0;
                      for (int64_t i = i0; i < i0 + rows; ++i) {
                        cols = std::max(cols, needed_keys(k, ascending, q.pos[i]));
                      }
                      if (cols == 0) continue;
                      const float* qh = at(q, b, h, HS) + i0 * q.row_stride;
                      const float* gh = at(dout, b, h, HS) + i0 * dout.row_stride;
                      // p (rows, cols) = exp(scale * q k^T - lse), 0 where masked
                      sgemm(Trans::no, Trans::yes, rows, cols, HS, scale, qh, q.row_stride, kh,
                            k.row_stride, 0.0f, p, cols, single);
                      for (int64_t i = i0; i < i0 + rows; ++i) {
                        float* row = p + (i - i0) * cols;
                        const int64_t n = std::min(cols, needed_keys(k, ascending, q.pos[i]));
                        visible_exp(row, k.pos, q.pos[i], lse_h[i], n);
                        std::fill(row + n, row + cols, 0.0f);
                      }
                      // dv (cols, HS) += p^T @ dout;  dp (rows, cols) = dout @ v^T
                      sgemm(Trans::yes, Trans::no, cols, HS, rows, 1.0f, p, cols, gh,
                            dout.row_stride, 1.0f, dvh, dv.row_stride, single);
                      sgemm(Trans::no, Trans::yes, rows, cols, HS, 1.0f, gh, dout.row_stride, vh,
                            v.row_stride, 0.0f, dp, cols, single);
                      // ds = p * (dp - d), into dp
                      for (int64_t i = i0; i < i0 + rows; ++i) {
                        softmax_grad_row(dp + (i - i0) * cols, p + (i - i0) * cols, d_h[i], cols);
                      }
                      // dq (rows, HS) += scale * ds @ k;  dk (cols, HS) += scale * ds^T @ q
                      sgemm(Trans::no, Trans::no, rows, HS, cols, scale, dp, cols, kh, k.row_stride,
                            1.0f, at(dq, b, h, HS) + i0 * dq.row_stride, dq.row_stride, single);
                      sgemm(Trans::yes, Trans::no, cols, HS, rows, scale, dp, cols, qh,
                            q.row_stride, 1.0f, dkh, dk.row_stride, single);
                    }
                  }
                });
}

}  // namespace dtrain::model
