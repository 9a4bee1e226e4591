// PipelineEngine: the StepEngine of a pipeline-parallel run. SPMD like the data-parallel
// engine: every rank runs the whole training loop (its own Trainer over its own engine, on the
// same global batches) and holds one stage - its blocks' parameters, gradients and AdamW
// state only. A step runs the schedule through a parallel::PipelineExecutor, sums the tied
// wte gradient between the first and last stage (Megatron's embedding group), takes the
// global gradient norm over the stages, clips and steps AdamW. The last stage's loss is
// broadcast, so every rank's Trainer sees the same numbers and rank 0 reports.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/parallel/pipeline_executor.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/plan/pipeline_model.h"
#include "dtrain/train/pipeline_report.h"
#include "dtrain/train/serial_engine.h"
#include "dtrain/train/step_engine.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

struct PipelineEngineConfig {
  SerialEngineConfig base;  // model, global batch B, seq, AdamW, clipping, seed, threads
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  int microbatches = 1;                // M; divides base.batch
  parallel::StagePartition partition;  // P stages of v chunks
};

// What one training step measured on this rank.
struct PipelineEngineStep {
  parallel::PipelineStepRecord pipeline;  // the schedule's actions
  std::vector<trace::Span> after;         // embedding sum, norm, optimizer (kind other, us)
  int64_t pipeline_bytes_sent = 0;        // activations and gradients this rank sent
};

// Every step, compactly (the measured bubble of step k needs these from every rank).
struct PipelineStepTiming {
  double first_start_us = 0;  // the rank's first action began
  double last_end_us = 0;     // its last action ended
  double busy_us = 0;         // its compute
};

class PipelineEngine final : public StepEngine {
 public:
  // Every rank of `pp` constructs one; pp.size() must equal config.partition.stages().
  PipelineEngine(const PipelineEngineConfig& config, comm::Communicator& pp);

  std::string describe() const override;
  StepStats train_step(const Batch& batch, float lr) override;
  float eval_loss(const Batch& batch) override;
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model::gpt_param_count(config_.base.model); }
  StateLayout state_layout() const override { return {1, 1, config_.partition.stages(), 0}; }
  RankState export_state() override;
  void import_state(const SerialState& state) override;
  comm::Communicator* job_communicator() override { return &pp_; }

  model::GptModel& model() { return model_; }
  parallel::PipelineExecutor& executor() { return *executor_; }
  // The latest train_step's record (every action), and every step's timing.
  const PipelineEngineStep& last_step() const;
  const std::vector<PipelineStepTiming>& timings() const { return timings_; }

 private:
  float broadcast_from_last(float value);

  PipelineEngineConfig config_;
  comm::Communicator& pp_;
  std::unique_ptr<comm::Communicator> embedding_group_;  // {0, P-1} when P > 1, on those two
  MemoryTracker tracker_;  // declared before the buffers it accounts for
  model::ThreadTeam team_;
  model::GptModel model_;
  optim::AdamW adamw_;
  std::unique_ptr<parallel::PipelineExecutor> executor_;
  PipelineEngineStep last_step_;
  std::vector<PipelineStepTiming> timings_;
};

// The schedule named by `text` (gpipe, 1f1b, interleaved, zb-h1); throws naming --schedule.
plan::ScheduleKind parse_schedule(const std::string& text);

// The checks `dtrain train` makes on the pipeline flags, naming them: --pp >= 1 and at most
// the blocks, --microbatches >= 1 dividing --batch, a known --schedule, --chunks only with
// interleaved and small enough for the blocks, --stage-layers summing to --layers. Returns the
// partition.
parallel::StagePartition validate_pipeline(const PipelineSetup& setup,
                                           const model::GptConfig& model, int64_t batch);

// Runs the training on setup.pp rank threads, a Trainer on each; returns rank 0's summary with
// the PipelineReport, and writes the last step's trace / timeline when asked. `observer` sees
// rank 0's progress; a send/recv waiting over `timeout_s` for its peer fails (--timeout).
TrainSummary run_pipeline(const SerialEngineConfig& base, const PipelineSetup& setup,
                          const TrainerConfig& trainer, const TokenSplit& data,
                          TrainObserver* observer, double timeout_s = 120);

}  // namespace dtrain::train
