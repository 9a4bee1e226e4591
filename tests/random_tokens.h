// Uniform random token ids for the model tests: `n` ids in [0, V) from Rng(seed).
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/core/rng.h"

namespace dtrain::testing {

inline std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(V)));
  return t;
}

}  // namespace dtrain::testing
