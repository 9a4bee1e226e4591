// DataParallelEngine: the StepEngine of a data-parallel run (ZeRO stage 0..3). The run is SPMD:
// every rank runs the whole training loop (its own Trainer over its own engine, on the same
// global batches), and rank 0 reports; this maps one to one onto MPI processes. Each engine
// takes its rank's rows of the global batch, splits them into micro-batches and drives a
// parallel::DataParallelModel, so the global batch and the results do not depend on N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/launch.h"
#include "dtrain/parallel/data_parallel_model.h"
#include "dtrain/train/data_parallel_report.h"
#include "dtrain/train/serial_engine.h"
#include "dtrain/train/step_engine.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

struct DataParallelEngineConfig {
  SerialEngineConfig base;  // model, global batch B, seq, AdamW, clipping, seed, threads
  DataParallelSetup dp;
  comm::Backend backend = comm::Backend::threads;
  int ranks_per_node = 0;     // 0: every rank on one node
  bool hierarchical = false;  // stage 0: two-level all-reduce of each bucket over the nodes
  std::string cluster_path;   // --cluster: price the buckets' all-reduces on its links
  double timeout_s = 120;     // --timeout: seconds one send/recv waits for its peer
};

// What one training step measured on this rank.
struct DataParallelStepRecord {
  comm::Traffic dp;       // the DP collectives (the communication thread's communicator)
  comm::Traffic control;  // loss and gradient-norm exchanges (the compute thread's)
  parallel::StepTimeline timeline;
};

class DataParallelEngine final : public StepEngine {
 public:
  // Every rank of `dp` constructs one; dp.size() must equal config.dp.dp.
  DataParallelEngine(const DataParallelEngineConfig& config, comm::Communicator& dp);

  std::string describe() const override;
  StepStats train_step(const Batch& batch, float lr) override;
  float eval_loss(const Batch& batch) override;
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model_.param_count(); }
  StateLayout state_layout() const override;
  RankState export_state() override;
  void import_state(const SerialState& state) override;
  comm::Communicator* job_communicator() override { return &dp_; }

  parallel::DataParallelModel& model() { return model_; }
  const std::vector<DataParallelStepRecord>& steps() const { return steps_; }
  // This rank's figures beside the plan/ formulas.
  DataParallelReport report() const;

 private:
  // This rank's micro-batch k of `batch`: (micro_batch, T) tokens and targets.
  std::span<const int32_t> rows(const std::vector<int32_t>& ids, const Batch& batch,
                                int64_t k) const;
  float average_over_ranks(float local);

  DataParallelEngineConfig config_;
  comm::Communicator& dp_;
  int64_t micro_batch_ = 0;
  MemoryTracker tracker_;  // declared before the model it accounts for
  parallel::DataParallelModel model_;
  std::vector<DataParallelStepRecord> steps_;
};

// Runs the training on config.dp.dp ranks of the threads backend (comm::run_on_backend), a
// Trainer on each; returns rank 0's summary with its DataParallelReport. `observer` sees rank
// 0's progress.
TrainSummary run_data_parallel(const DataParallelEngineConfig& config, const TrainerConfig& trainer,
                               const TokenSplit& data, TrainObserver* observer,
                               bool* is_reporter = nullptr);

// The checks `dtrain train` makes on the data-parallel flags, naming them: --dp >= 1 dividing
// the batch (with --grad-accum micro-batches per rank), --zero in 0..3, --bucket-size > 0.
void validate_data_parallel(const DataParallelSetup& dp, int64_t batch);

}  // namespace dtrain::train
