// Learning-rate schedule: linear warmup to `lr`, then cosine decay to `min_lr` at the last step.
#pragma once

#include <cstdint>

namespace dtrain::optim {

struct LrSchedule {
  float lr = 0;              // peak
  float min_lr = 0;          // reached at step total_steps - 1
  int64_t warmup_steps = 0;  // steps 0 .. warmup_steps-1 ramp lr * (step + 1) / warmup_steps
  int64_t total_steps = 1;
};

// The rate for 0-based `step`: lr * (step + 1) / warmup during warmup; afterwards
// min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2 with r = (step - warmup) / (total - 1 - warmup)
// (r = 1 from the last step on).
float learning_rate(const LrSchedule& schedule, int64_t step);

// Throws Error naming --lr, --min-lr, --warmup or --steps when the schedule makes no sense.
void validate(const LrSchedule& schedule);

}  // namespace dtrain::optim
