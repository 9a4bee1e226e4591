// TensorParallelEngine: the StepEngine of a tensor-parallel run. SPMD as the data-parallel
// engine: every TP rank runs the whole training loop (its own Trainer on the same global
// batches) over a GptModel holding its shards, with a parallel::TensorParallelGroup as the
// model's TP hooks; the loss is the same on every rank, so rank 0 reports.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/comm/communicator.h"
#include "dtrain/model/gpt.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/parallel/tensor_parallel.h"
#include "dtrain/train/serial_engine.h"
#include "dtrain/train/step_engine.h"
#include "dtrain/train/tensor_parallel_report.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

class TensorParallelEngine final : public StepEngine {
 public:
  // Every rank of `tp` constructs one; config.model must pass model::check_tensor_parallel.
  // With `sequence_parallel` (tp dividing batch * seq) the residual regions run on a 1/N slice
  // of the token rows and the LayerNorm gradients are all-reduced before the optimizer step.
  TensorParallelEngine(const SerialEngineConfig& config, comm::Communicator& tp,
                       bool sequence_parallel = false);

  std::string describe() const override;
  StepStats train_step(const Batch& batch, float lr) override;
  float eval_loss(const Batch& batch) override;
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model_.param_count(); }  // this rank's
  StateLayout state_layout() const override { return {1, tp_.size(), 1, 0}; }
  RankState export_state() override;
  void import_state(const SerialState& state) override;
  comm::Communicator* job_communicator() override { return &tp_; }

  model::GptModel& model() { return model_; }
  const parallel::TensorParallelGroup& hooks() const { return hooks_; }
  // This rank's counters (train steps only) and memory beside the plan/ formula.
  TensorParallelRankReport report() const;

 private:
  SerialEngineConfig config_;
  comm::Communicator& tp_;
  MemoryTracker tracker_;  // declared before the buffers it accounts for
  model::ThreadTeam team_;
  parallel::TensorParallelGroup hooks_;
  model::GptModel model_;
  optim::AdamW adamw_;
  int64_t steps_ = 0;
  parallel::TensorParallelCounters step_totals_;  // summed over train steps
  bool sequence_parallel_ = false;
};

// Runs the training on setup.tp rank threads, a Trainer on each; returns rank 0's summary with
// every rank's TensorParallelReport. `observer` sees rank 0's progress; a send/recv waiting
// over `timeout_s` for its peer fails (--timeout).
TrainSummary run_tensor_parallel(const SerialEngineConfig& config, const TensorParallelSetup& setup,
                                 const TrainerConfig& trainer, const TokenSplit& data,
                                 TrainObserver* observer, double timeout_s = 120);

// The checks `dtrain train` makes on --tp / --sequence-parallel, naming both values.
void validate_tensor_parallel(const TensorParallelSetup& setup, const model::GptConfig& model);

}  // namespace dtrain::train
