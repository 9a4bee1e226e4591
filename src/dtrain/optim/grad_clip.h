// Global-norm gradient clipping, split so that sharded optimizers can use it: each rank sums
// the squares of its shard, the sums are added across ranks, and every rank scales by the
// same factor (passed to AdamW as grad_scale rather than rewriting the gradients).
#pragma once

#include <span>

#include "dtrain/core/bf16.h"

namespace dtrain::optim {

// Sum of squares in double (deterministic order).
double sum_of_squares(std::span<const float> x);
// The same over bf16 gradients (mixed precision), each widened exactly.
double sum_of_squares(std::span<const bf16> x);

// min(1, max_norm / (global_norm + 1e-6)), as torch.nn.utils.clip_grad_norm_; a max_norm
// <= 0 disables clipping (returns 1).
float clip_scale(double global_norm, float max_norm);

}  // namespace dtrain::optim
