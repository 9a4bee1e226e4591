// sum_of_squares over 8 double partial sums; clip_scale.
#include "dtrain/optim/grad_clip.h"

#include <cstdint>

namespace dtrain::optim {

namespace {

inline double widen(float v) {
  return static_cast<double>(v);
}
inline double widen(bf16 v) {
  return static_cast<double>(to_float(v));
}

template <typename T>
double lanes_sum_of_squares(std::span<const T> x) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  const auto n = static_cast<int64_t>(x.size());
  const T* p = x.data();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const double v = widen(p[i + k]);
      acc[k] += v * v;
    }
  }
  double s = 0;
  for (double a : acc) s += a;
  for (; i < n; ++i) s += widen(p[i]) * widen(p[i]);
  return s;
}

}  // namespace

double sum_of_squares(std::span<const float> x) {
  return lanes_sum_of_squares(x);
}

double sum_of_squares(std::span<const bf16> x) {
  return lanes_sum_of_squares(x);
}

float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double scale = static_cast<double>(max_norm) / (global_norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace dtrain::optim
