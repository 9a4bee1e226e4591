// Trainer: the training loop over any StepEngine. Draws batches, follows the learning-rate
// schedule, evaluates the validation loss every N steps, reports progress to an observer and
// ends with a summary (losses, speed, memory per tag).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/checkpoint/run_record.h"
#include "dtrain/checkpoint/save_directory.h"
#include "dtrain/core/memory.h"
#include "dtrain/core/recompute.h"
#include "dtrain/data/data.h"
#include "dtrain/engine/step_engine.h"
#include "dtrain/model/gpt_config.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/report/layout_report.h"
#include "dtrain/report/moe_report.h"
#include "dtrain/run/fault.h"
#include "dtrain/run/stop_request.h"

namespace dtrain::train {

struct TrainerConfig {
  model::GptConfig model;  // for reports (ln V, the planned activation bytes)
  std::string model_name;  // preset name or "custom"
  int64_t steps = 0;
  int64_t batch = 0;  // B, global
  int64_t seq = 0;    // T
  optim::LrSchedule schedule;
  int64_t eval_every = 0;  // validation every this many steps (and at start and end); 0: only then
  int64_t eval_batches = 0;  // validation batches per evaluation
  uint64_t data_seed = 0;    // training batch order
  int threads = 1;           // compute threads per rank (the workspace has one score buffer each)
  Recompute recompute = Recompute::none;    // --recompute (the step's StepConfig's)
  int64_t max_rank_memory = 0;              // --max-rank-memory: a rank's peak bytes; 0: no cap
  checkpoint::CheckpointConfig checkpoint;  // --save, --save-every, --keep-checkpoints, --resume
  std::optional<FaultSpec> fault;           // --inject-fault
  std::string init_from;  // --init-from: a GPT-2 folder (formats/hf_gpt2.h); empty: random init
  std::string eval_batch_out;  // --write-eval-batch: validation batch 0's tokens; empty: none
  std::string metrics_path;    // --metrics: a JSON line per step and evaluation; empty: none
  // Whether this process is the whole job on its machine (the threads backend), so that every
  // other process's CPU time is other programs' work: TrainSummary::other_load_cores.
  bool single_process_job = false;
  std::vector<std::string> notes;  // adjustments resolve() made to the flags, shown at the start
  // What the user should know before the first step (a TP group across nodes, bf16 that will be
  // slower than fp32 here), printed once on stderr at the start.
  std::vector<std::string> warnings;
  checkpoint::RunRecord run;    // this run's identity and settings, written into every checkpoint
  StopRequest* stop = nullptr;  // a graceful stop (SIGINT/SIGTERM/SIGUSR1) to watch; may be null
};

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of updates done
  float lr = 0;
  double step_ms = 0;
  // Minor page faults of this process during the step (every rank thread of the threads
  // backend; this rank's process under MPI): pages touched for the first time, each a trip into
  // the kernel (10 us or more on some virtual machines). After the first steps a run whose
  // allocator keeps freed memory faults next to nothing.
  int64_t page_faults = 0;
  StepStats stats;
};

struct EvalRecord {
  int64_t step = 0;  // updates done before the evaluation
  float val_loss = 0;
};

struct MemoryRow {
  MemoryTag tag = MemoryTag::params;
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
};

struct TrainSummary {
  TrainerConfig config;
  std::string engine;
  std::string data_source;
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t param_count = 0;
  int64_t tokens_per_step = 0;
  int64_t first_step = 0;       // updates done before this run (a resumed checkpoint's step)
  std::string last_checkpoint;  // the directory saved last, if any
  int stop_signal = 0;    // SIGINT/SIGTERM/SIGUSR1 that ended the run early (0: ran to the end)
  int64_t last_step = 0;  // updates done when the run ended
  std::vector<float> train_losses;  // one per step of this run (steps first_step+1 ..)
  std::vector<EvalRecord> evals;    // the first before any update, the last after the last
  double ln_vocab = 0;              // the loss of a uniform guess
  float first_train_loss = 0, final_train_loss = 0;
  float final_train_loss_avg = 0;  // mean of the last min(10, steps) steps
  float first_val_loss = 0, final_val_loss = 0;
  double train_seconds = 0;  // step time only (evaluation excluded)
  // The cores other programs kept busy, on average, from the end of this run's first step to
  // the end of its last (core/cpu_usage.h); -1 when not measured (one step, an MPI job whose
  // other ranks are processes too, or no /proc/stat).
  double other_load_cores = -1;
  double other_load_window_s = 0;  // the wall time it was measured over
  double tokens_per_s = 0;
  double ms_per_step = 0, median_ms_per_step = 0;
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;  // means per step
  std::vector<MemoryRow> memory;                             // one per tag
  int64_t peak_total_bytes = 0;
  // Rank 0's activations by the plan/ formulas: its peak in-flight micro-batches (the
  // checker's count) x one micro-batch of its chunks, + the workspace and recompute's scratch.
  double planned_activation_bytes = 0;
  // Rank 0's whole peak by the plan/ formulas (what --max-rank-memory is checked against before
  // the run): model states, activations as above, ZeRO-3's working set.
  double planned_peak_total_bytes = 0;
  std::optional<LayoutReport> layout;  // every rank's figures beside plan/ (one schema)
  std::vector<MoeStepRow> moe_steps;   // an MoE model's routing, one row per step (else empty)
};

// Progress callbacks; the default implementations ignore everything.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_start(const TrainerConfig& /*config*/, const StepEngine& /*engine*/) {}
  virtual void on_step(const StepRecord& /*record*/) {}
  virtual void on_eval(const EvalRecord& /*record*/) {}
  virtual void on_finish(const TrainSummary& /*summary*/) {}
};

class MetricsWriter;  // run/metrics.h

class Trainer {
 public:
  // `data` must outlive the trainer; check_split_fits(data, seq) must hold.
  // `stop_group`: ranks in separate processes (MPI) agree on a stop through it, one all-reduce
  // of a single number per step; null when the ranks share config.stop (threads) or none.
  Trainer(const TrainerConfig& config, StepEngine& engine, const data::TokenSplit& data,
          TrainObserver* observer = nullptr, comm::Communicator* stop_group = nullptr);
  ~Trainer();
  TrainSummary run();
  // Mean validation loss over config.eval_batches fixed batches.
  float evaluate();

 private:
  TrainerConfig config_;
  StepEngine& engine_;
  const data::TokenSplit& data_;
  TrainObserver* observer_;
  comm::Communicator* stop_group_;
  data::Batch batch_;
  // At a step boundary: the signal every rank stops on (0: go on). Collective over stop_group_
  // when there is one.
  int agree_on_stop(int64_t steps_done);
  // --resume: loads the checkpoint into the engine and the sampler; returns its step.
  int64_t resume(data::BatchSampler& sampler);
  // --init-from: the folder's weights into the engine (AdamW moments 0).
  void init_from();
  // --write-eval-batch: validation batch 0 as int32 inputs (B, T) then targets (B, T).
  void write_eval_batch();
  std::string save(int64_t step, const data::BatchSampler& sampler);
  int job_rank();
  // Rank 0 with --save: the directory's lock, held for the whole run.
  std::unique_ptr<checkpoint::SaveDirectoryLock> save_lock_;
  std::unique_ptr<MetricsWriter> metrics_;  // rank 0 with --metrics
};

}  // namespace dtrain::train
