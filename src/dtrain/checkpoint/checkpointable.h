// Checkpointable: what a checkpoint is written from and read into, one rank's share of a model's
// training state (parameters, AdamW moments) over the ranks of a job. train::StepEngine extends
// it; checkpoint/ knows nothing of engines, so it stays below train/.
#pragma once

#include <string>

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/core/check.h"

namespace dtrain::checkpoint {

class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  // Names the holder in errors: "serial", or the layout, e.g. "DP(2)-TP(2)-PP(1)".
  virtual std::string describe() const = 0;

  // None of these communicates. A holder that cannot save its state keeps the defaults, which
  // throw.
  // The layout, recorded in the manifest.
  virtual StateLayout state_layout() const { return {}; }
  // This rank's pieces of the serial state. Over all ranks of the job the pieces cover every
  // element of every tensor's params, adam_m and adam_v exactly once (a replica is exported
  // by one rank of its group only; ZeRO shards by their owners).
  virtual RankState export_state() {
    throw Error(str(describe(), ": this engine cannot export its state for a checkpoint"));
  }
  // Replaces this rank's parameters, AdamW moments and step count by its share of `state`.
  virtual void import_state(const SerialState& /*state*/) {
    throw Error(str(describe(), ": this engine cannot import a checkpoint's state"));
  }
  // The communicator spanning every rank of the job, or null for a single rank: shard files
  // are numbered by its rank() and the writers meet at its barrier().
  virtual comm::Communicator* job_communicator() { return nullptr; }
};

}  // namespace dtrain::checkpoint
