// sum_of_squares over 8 double partial sums; clip_scale.
#include "dtrain/optim/grad_clip.h"

#include <cstdint>

namespace dtrain::optim {

double sum_of_squares(std::span<const float> x) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  const auto n = static_cast<int64_t>(x.size());
  const float* p = x.data();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const auto v = static_cast<double>(p[i + k]);
      acc[k] += v * v;
    }
  }
  double s = 0;
  for (double a : acc) s += a;
  for (; i < n; ++i) s += static_cast<double>(p[i]) * static_cast<double>(p[i]);
  return s;
}

float clip_scale(double global_norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double scale = static_cast<double>(max_norm) / (global_norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace dtrain::optim
