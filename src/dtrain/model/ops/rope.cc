// RoPE over a table of cos and sin per (position, pair); forward and backward are one loop with
// the sign of sin flipped.
#include "dtrain/model/ops/rope.h"

#include <cmath>

#include "dtrain/core/check.h"

namespace dtrain::model {
namespace {

void rotate(float* x, const RopeTable& table, int64_t B, int64_t T, int64_t heads,
            int64_t row_stride, float sign, const Compute& cx) {
  const int64_t HS = table.head_size, half = HS / 2;
  DTRAIN_CHECK(static_cast<int64_t>(table.cos.size()) == T * half, "rope: the table holds ",
               table.cos.size() / static_cast<size_t>(half), " positions for ", T, " tokens");
  parallel_ranges(cx.team_for(B * T * heads * HS, 32768), B * T, 1, [&](Range r) {
    for (int64_t row = r.begin; row < r.end; ++row) {
      const float* c = table.cos.data() + (row % T) * half;
      const float* s = table.sin.data() + (row % T) * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* x1 = x + row * row_stride + h * HS;
        float* x2 = x1 + half;
        for (int64_t i = 0; i < half; ++i) {
          const float a = x1[i], b = x2[i], sn = sign * s[i];
          x1[i] = a * c[i] - b * sn;
          x2[i] = b * c[i] + a * sn;
        }
      }
    }
  });
}

}  // namespace

RopeTable make_rope_table(std::span<const int64_t> positions, int64_t head_size, float theta) {
  DTRAIN_CHECK(head_size > 0 && head_size % 2 == 0, "rope: the head size ", head_size,
               " must be even (dims pair up across its halves)");
  DTRAIN_CHECK(theta > 0, "--rope-theta must be positive, got ", theta);
  const int64_t half = head_size / 2;
  RopeTable t;
  t.head_size = head_size;
  t.cos.resize(positions.size() * static_cast<size_t>(half));
  t.sin.resize(t.cos.size());
  for (size_t p = 0; p < positions.size(); ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq =
          std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_size);
      const double angle = static_cast<double>(positions[p]) * inv_freq;
      t.cos[p * static_cast<size_t>(half) + static_cast<size_t>(i)] =
          static_cast<float>(std::cos(angle));
      t.sin[p * static_cast<size_t>(half) + static_cast<size_t>(i)] =
          static_cast<float>(std::sin(angle));
    }
  }
  return t;
}

void rope_forward(float* x, const RopeTable& table, int64_t B, int64_t T, int64_t heads,
                  int64_t row_stride, const Compute& cx) {
  rotate(x, table, B, T, heads, row_stride, 1.0f, cx);
}

void rope_backward(float* dx, const RopeTable& table, int64_t B, int64_t T, int64_t heads,
                   int64_t row_stride, const Compute& cx) {
  rotate(dx, table, B, T, heads, row_stride, -1.0f, cx);
}

}  // namespace dtrain::model
