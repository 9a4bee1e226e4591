// Summaries of repeated measurements shared by the benchmarks and the calibration: one median,
// so every report that says "median" means the same thing.
#pragma once

#include <algorithm>
#include <vector>

namespace dtrain {

// The median of `v` (the mean of the middle two for an even count; 0 when empty).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace dtrain
