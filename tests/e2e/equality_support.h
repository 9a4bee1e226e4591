// What the end-to-end tests share: the random batches every run is compared on.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/core/rng.h"
#include "dtrain/data/data.h"
#include "dtrain/train/step_config.h"

namespace dtrain::train::e2e {

// `steps` batches of uniform random tokens (seed 7), the same for every run compared.
inline std::vector<data::Batch> random_batches(const StepConfig& c, int steps) {
  Rng rng(7);
  std::vector<data::Batch> out(static_cast<size_t>(steps));
  for (data::Batch& b : out) {
    b.resize(c.batch, c.seq);
    for (int32_t& t : b.inputs) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
    for (int32_t& t : b.targets) t = static_cast<int32_t>(rng.uniform_int(c.model.vocab));
  }
  return out;
}

}  // namespace dtrain::train::e2e
