// The end of every engine's step, written once: refuse a diverged step (naming --lr), and one
// AdamW update over the rank's pieces, split across its compute threads (the same bits as one
// call).
#pragma once

#include <span>

#include "dtrain/engine/step_engine.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/parallel/data_parallel_hooks.h"

namespace dtrain::train {

// Throws Error unless the step's loss and gradient norm are finite.
void check_not_diverged(const StepStats& stats);

// One AdamW step over the pieces a rank updates (its owned range; under EP with ZeRO the runs
// of its dense and expert shards): adamw.advance(), then every piece in element ranges run by
// `team` (may be null). Each element reads only its own moments, so the bits equal one serial
// pass. The mixed form updates the fp32 master from bf16 gradients and rounds it into the bf16
// parameters (AdamW::update_mixed).
void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw,
                          std::span<const parallel::UpdatePiece> pieces, float lr,
                          float grad_scale);
void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw,
                          std::span<const parallel::MixedUpdate> pieces, float lr,
                          float grad_scale);
// A whole buffer as one piece (the serial reference's update).
void adamw_update_on_team(model::ThreadTeam* team, optim::AdamW& adamw, std::span<float> params,
                          std::span<float> grads, float lr, float grad_scale);

}  // namespace dtrain::train
