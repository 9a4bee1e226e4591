// SerialEngine: the single-rank reference every parallel layout must reproduce. One GptModel
// (params, grads, activations) and one AdamW over the whole flat parameter buffer; with
// threads > 1 the ops and the optimizer split their work across a ThreadTeam (same bits).
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/core/recompute.h"
#include "dtrain/model/gpt.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/train/step_engine.h"

namespace dtrain::train {

struct SerialEngineConfig {
  model::GptConfig model;
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
  optim::AdamWConfig adamw;
  float grad_clip = 1.0f;  // max global norm; <= 0 disables clipping
  uint64_t init_seed = 0;  // parameter initialisation
  int threads = 1;         // compute threads (a model::ThreadTeam); OpenBLAS stays as set
  Recompute recompute = Recompute::none;  // --recompute: every engine builds its model with it
};

class SerialEngine final : public StepEngine {
 public:
  explicit SerialEngine(const SerialEngineConfig& config);

  std::string describe() const override { return "serial"; }
  StepStats train_step(const Batch& batch, float lr) override;
  float eval_loss(const Batch& batch) override;
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model_.param_count(); }
  RankState export_state() override;
  void import_state(const SerialState& state) override;

  model::GptModel& model() { return model_; }
  optim::AdamW& optimizer() { return adamw_; }

 private:
  SerialEngineConfig config_;
  MemoryTracker tracker_;  // declared before the buffers it accounts for
  model::ThreadTeam team_;
  model::GptModel model_;
  optim::AdamW adamw_;
};

}  // namespace dtrain::train
