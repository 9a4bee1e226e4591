// The direct algorithm's block kernels (reduce_kernels.h): two-operand loops, each compiled
// for several vector widths, applied source after source so the order of the additions is the
// ranks' order whatever the width.
#include "dtrain/comm/algorithms/reduce_kernels.h"

#include <algorithm>
#include <cstring>

#include "dtrain/core/cpu_dispatch.h"

namespace dtrain::comm::detail {
namespace {

// `d` may alias `a` (the accumulator), never `b` (a peer's input).
DTRAIN_MULTIVERSION void add_f32(float* d, const float* a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
}
DTRAIN_MULTIVERSION void max_f32(float* d, const float* a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = std::max(a[i], b[i]);
}
DTRAIN_MULTIVERSION void add_i64(int64_t* d, const int64_t* a, const int64_t* __restrict b,
                                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
}
DTRAIN_MULTIVERSION void max_i64(int64_t* d, const int64_t* a, const int64_t* __restrict b,
                                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = std::max(a[i], b[i]);
}
// bf16 -> float is a 16-bit shift: written out so it vectorises like the float loops.
inline float widen(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
DTRAIN_MULTIVERSION void load_bf16(float* __restrict d, const uint16_t* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = widen(b[i]);
}
DTRAIN_MULTIVERSION void add_bf16(float* __restrict d, const uint16_t* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = d[i] + widen(b[i]);
}
DTRAIN_MULTIVERSION void max_bf16(float* __restrict d, const uint16_t* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = std::max(d[i], widen(b[i]));
}

template <typename T, typename Add, typename Max>
void reduce_same_type(T* acc, const T* const* src, int sources, int64_t n, ReduceOp op, Add add,
                      Max max) {
  if (sources == 1) {
    std::memcpy(acc, src[0], static_cast<size_t>(n) * sizeof(T));
    return;
  }
  const auto two = op == ReduceOp::max ? max : add;
  two(acc, src[0], src[1], n);
  for (int q = 2; q < sources; ++q) two(acc, acc, src[q], n);
}

}  // namespace

void reduce_block(float* acc, const float* const* src, int sources, int64_t n, ReduceOp op) {
  reduce_same_type(acc, src, sources, n, op, add_f32, max_f32);
}

void reduce_block(int64_t* acc, const int64_t* const* src, int sources, int64_t n, ReduceOp op) {
  reduce_same_type(acc, src, sources, n, op, add_i64, max_i64);
}

void reduce_block(float* acc, const bf16* const* src, int sources, int64_t n, ReduceOp op) {
  load_bf16(acc, reinterpret_cast<const uint16_t*>(src[0]), n);
  for (int q = 1; q < sources; ++q) {
    const auto* b = reinterpret_cast<const uint16_t*>(src[q]);
    if (op == ReduceOp::max) {
      max_bf16(acc, b, n);
    } else {
      add_bf16(acc, b, n);
    }
  }
}

DTRAIN_MULTIVERSION void scale_block(float* acc, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) acc[i] *= factor;
}

void store_block(bf16* dst, const float* acc, int64_t n) {
  to_bf16(acc, dst, n);
}

}  // namespace dtrain::comm::detail
