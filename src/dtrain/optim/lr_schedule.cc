// learning_rate: warmup + cosine.
#include "dtrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "dtrain/core/check.h"

namespace dtrain::optim {

float learning_rate(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.lr * static_cast<float>(step + 1) / static_cast<float>(s.warmup_steps);
  }
  const int64_t decay_steps = s.total_steps - 1 - s.warmup_steps;
  const double r = decay_steps > 0 ? std::min(1.0, static_cast<double>(step - s.warmup_steps) /
                                                       static_cast<double>(decay_steps))
                                   : 1.0;
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  return static_cast<float>(s.min_lr + coeff * (s.lr - s.min_lr));
}

void validate(const LrSchedule& s) {
  DTRAIN_CHECK(s.total_steps > 0, "--steps must be positive (got ", s.total_steps, ")");
  DTRAIN_CHECK(s.lr > 0 && std::isfinite(s.lr), "--lr must be positive (got ", s.lr, ")");
  DTRAIN_CHECK(s.min_lr >= 0 && s.min_lr <= s.lr, "--min-lr must be in [0, --lr ", s.lr, "] (got ",
               s.min_lr, ")");
  DTRAIN_CHECK(s.warmup_steps >= 0, "--warmup must not be negative (got ", s.warmup_steps, ")");
}

}  // namespace dtrain::optim
