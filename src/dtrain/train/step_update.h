// The end of every engine's step, written once: refuse a diverged step (naming --lr), and one
// AdamW update split across the rank's compute threads (the same bits as one call).
#pragma once

#include <span>

#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/train/step_engine.h"

namespace dtrain::train {

// Throws Error unless the step's loss and gradient norm are finite.
void check_not_diverged(const StepStats& stats);

// adamw.advance(), then adamw.update of params from grads (the same length; element 0 is the
// optimizer's element 0) in pieces run by `team` (may be null).
void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw, std::span<float> params,
                          std::span<const float> grads, float lr, float grad_scale);
// The same for mixed precision: fp32 master weights from bf16 gradients, rounded into the bf16
// parameters (AdamW::update_mixed), in the same pieces.
void adamw_update_mixed_on_team(model::ThreadTeam* team, optim::AdamW& adamw,
                                std::span<float> master, std::span<const bf16> grads,
                                std::span<bf16> params, float lr, float grad_scale);

}  // namespace dtrain::train
