// StepEngine: what the Trainer needs from "a model laid out on ranks". The serial engine is
// one GptModel and one AdamW; the data-, tensor- and pipeline-parallel engines implement the
// same three calls, so the training loop, schedule, evaluation and reports stay unchanged.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/check.h"
#include "dtrain/core/memory.h"
#include "dtrain/data/data.h"

namespace dtrain::train {

struct StepStats {
  float loss = 0;        // mean cross-entropy over the global batch (before the update)
  double grad_norm = 0;  // global L2 norm of the gradient, before clipping
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // "serial", or the layout, e.g. "DP(2)-TP(2)-PP(1)".
  virtual std::string describe() const = 0;
  // One optimizer step on the global batch (B, T): forward, backward, gradient clipping,
  // AdamW at learning rate `lr`.
  virtual StepStats train_step(const data::Batch& batch, float lr) = 0;
  // Mean loss of `batch` with the current parameters; nothing is updated.
  virtual float eval_loss(const data::Batch& batch) = 0;
  // The memory accounting of the reporting rank (rank 0).
  virtual const MemoryTracker& memory() const = 0;
  virtual int64_t param_count() const = 0;

  // --- Checkpoints (checkpoint/checkpoint.h). None of these communicates. An engine that cannot
  // save its state keeps the defaults, which throw.
  // The layout, recorded in the manifest.
  virtual checkpoint::StateLayout state_layout() const { return {}; }
  // This rank's pieces of the serial state. Over all ranks of the job the pieces cover every
  // element of every tensor's params, adam_m and adam_v exactly once (a replica is exported
  // by one rank of its group only; ZeRO shards by their owners).
  virtual checkpoint::RankState export_state() {
    throw Error(str(describe(), ": this engine cannot export its state for a checkpoint"));
  }
  // Replaces this rank's parameters, AdamW moments and step count by its share of `state`.
  virtual void import_state(const checkpoint::SerialState& /*state*/) {
    throw Error(str(describe(), ": this engine cannot import a checkpoint's state"));
  }
  // The communicator spanning every rank of the job, or null for a single rank: shard files
  // are numbered by its rank() and the writers meet at its barrier().
  virtual comm::Communicator* job_communicator() { return nullptr; }
};

}  // namespace dtrain::train
