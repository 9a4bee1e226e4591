// Loops the compiler can vectorize without -ffast-math: sums and dot products over 16
// independent partial sums (folded in a fixed order, so results are deterministic), and
// a branch-free exp that replaces the scalar libm calls of softmax and GELU.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace dtrain::model {

inline constexpr int kLanes = 16;

// Adds the lanes up in a fixed order.
inline float fold_lanes(const float* acc) {
  float s = 0.0f;
  for (int k = 0; k < kLanes; ++k) s += acc[k];
  return s;
}

inline float sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += x[i + k];
  }
  float s = fold_lanes(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = fold_lanes(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Largest element (n >= 1); the lanes make it vectorize, and max does not depend on order.
inline float max_of(const float* x, int64_t n) {
  float acc[kLanes];
  for (int k = 0; k < kLanes; ++k) acc[k] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] = std::max(acc[k], x[i + k]);
  }
  float m = x[0];
  for (int k = 0; k < kLanes; ++k) m = std::max(m, acc[k]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// exp(x) to about 1 ulp for x in [-87, 88] (clamped outside): x = n*ln2 + r with n an
// integer and |r| <= ln2/2, exp(r) by its Taylor series to degree 7 (remainder
// r^8/8! < 6e-9), 2^n built in the exponent bits. ln2 is split Cody-Waite style into
// 355/512 (exact times any n here) plus the small rest, ln2 - 355/512.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float kLog2e = 1.4426950408889634f;
  const float kRoundShift = 12582912.0f;  // 1.5 * 2^23: x + shift - shift rounds to an integer
  const float n = (x * kLog2e + kRoundShift) - kRoundShift;
  const float kLn2Hi = 355.0f / 512.0f;
  const float kLn2Lo = -2.1219444005469058e-4f;  // ln 2 - 355/512
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f + r * (1.0f / 40320.0f);
  p = 1.0f / 720.0f + r * p;
  p = 1.0f / 120.0f + r * p;
  p = 1.0f / 24.0f + r * p;
  p = 1.0f / 6.0f + r * p;
  p = 0.5f + r * p;
  p = 1.0f + r * p;
  p = 1.0f + r * p;
  const auto bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

// exp(x) for x in [-200, 88], rounded to float from a double evaluation (x = n*ln2 + r,
// |r| <= ln2/2, Taylor to degree 10: relative error below 1e-12 before the rounding), so libm's
// expf but for the rare value within 1e-12 of a rounding boundary; exp(x) for x below -104 is 0
// in float. No clamp and no branch, so a loop of it vectorizes (a compare on floats among the
// doubles stops GCC 12's vectorizer): the caller brings x into range. For kernels compared with
// libm's exp to a tolerance that exp_approx's 1 ulp would spend (the blockwise attention).
inline float exp_rounded_in_range(float x) {
  const auto d = static_cast<double>(x);
  const double kLog2e = 1.4426950408889634;
  const double kRoundShift = 6755399441055744.0;  // 1.5 * 2^52: its last bits hold n
  const double t = d * kLog2e + kRoundShift;
  const double n = t - kRoundShift;
  const double r = d - n * 0.6931471805599453;
  double p = 1.0 / 3628800.0;
  p = 1.0 / 362880.0 + r * p;
  p = 1.0 / 40320.0 + r * p;
  p = 1.0 / 5040.0 + r * p;
  p = 1.0 / 720.0 + r * p;
  p = 1.0 / 120.0 + r * p;
  p = 1.0 / 24.0 + r * p;
  p = 1.0 / 6.0 + r * p;
  p = 0.5 + r * p;
  p = 1.0 + r * p;
  p = 1.0 + r * p;
  // 2^n in the exponent bits; n read from t's bits, as an integer (no conversion instruction).
  const int64_t ni = std::bit_cast<int64_t>(t) - std::bit_cast<int64_t>(kRoundShift);
  return static_cast<float>(p * std::bit_cast<double>((ni + 1023) << 52));
}

}  // namespace dtrain::model
