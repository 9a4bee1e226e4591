// StepEngine: what the Trainer needs from "a model laid out on ranks". The serial engine is
// one GptModel and one AdamW; the data-, tensor- and pipeline-parallel engines implement the
// same three calls, so the training loop, schedule, evaluation and reports stay unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/checkpoint/checkpointable.h"
#include "dtrain/core/memory.h"
#include "dtrain/data/data.h"

namespace dtrain::train {

struct StepStats {
  float loss = 0;        // mean cross-entropy over the global batch (before the update)
  double grad_norm = 0;  // global L2 norm of the gradient, before clipping
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  // MoE (empty expert_tokens for a dense model): the routing over the whole global batch.
  double aux_loss = 0;                 // mean over micro-batches and DP ranks, summed over blocks
  std::vector<int64_t> expert_tokens;  // (E) assignments kept per expert, over every MoE block
  int64_t moe_assignments = 0;         // router choices: tokens * k * MoE blocks
  int64_t moe_dropped = 0;             // of them past capacity: expert_tokens sum to the rest
};

// Its checkpoint half (state_layout, export_state, import_state, job_communicator, describe) is
// checkpoint::Checkpointable, what save_checkpoint writes from.
class StepEngine : public checkpoint::Checkpointable {
 public:
  // One optimizer step on the global batch (B, T): forward, backward, gradient clipping,
  // AdamW at learning rate `lr`.
  virtual StepStats train_step(const data::Batch& batch, float lr) = 0;
  // Mean loss of `batch` with the current parameters; nothing is updated.
  virtual float eval_loss(const data::Batch& batch) = 0;
  // The memory accounting of the reporting rank (rank 0).
  virtual const MemoryTracker& memory() const = 0;
  virtual int64_t param_count() const = 0;
};

}  // namespace dtrain::train
