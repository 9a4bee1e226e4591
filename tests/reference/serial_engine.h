// SerialEngine: the tests' single-rank reference that every layout of the engine must reproduce
// (DESIGN.md: the oracle stays independent of what it checks). One GptModel (params, grads,
// activations) and one AdamW over the whole flat parameter buffer, the norm of the whole
// gradient and its clip scale, nothing sharded, no executor; with threads > 1 the ops and the
// optimizer split their work across a ThreadTeam (same bits as one thread). Under --precision
// bf16 it is mixed-precision Adam written plainly: the model's weights are the fp32 master
// rounded to bf16 before each step, the whole step's gradient is rounded to bf16 once, and AdamW
// updates the master from it. With `microbatches` M > 1 a step cuts its batch into M runs of B/M
// consecutive rows, each's forward and backward scaled by 1/M (gradient accumulation): the
// reference for what is a statistic of each micro-batch (the MoE aux loss under a pipeline, or
// of each DP rank's rows: the batch as DP ranks x micro-batches, in rank order).
#pragma once

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"

#include "dtrain/checkpoint/train_state.h"
#include "dtrain/core/timer.h"
#include "dtrain/engine/step_config.h"
#include "dtrain/engine/step_engine.h"
#include "dtrain/engine/step_update.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/optim/grad_clip.h"

namespace dtrain::train {

class SerialEngine final : public StepEngine {
 public:
  explicit SerialEngine(const StepConfig& config, int64_t microbatches = 1)
      : config_(config),
        microbatches_(microbatches),
        team_(config.threads),
        model_(config.model, &tracker_, nullptr, &team_, config.recompute),
        adamw_(model_.param_count(), config.adamw, &tracker_) {
    model_.init_params(config.init_seed);
    model_.set_precision(config.precision);
    DTRAIN_CHECK(microbatches >= 1 && config.batch % microbatches == 0,
                 "SerialEngine: ", microbatches, " micro-batches of a batch of ", config.batch);
    model_.set_batch_shape(config.batch / microbatches, config.seq);
    if (mixed()) {
      master_.assign(model_.params().begin(), model_.params().end());
      round_params_from_master();
    }
  }

  std::string describe() const override { return "serial"; }
  StepStats train_step(const data::Batch& batch, float lr) override {
    StepStats stats;
    Stopwatch watch;
    model_.zero_grads();
    if (microbatches_ == 1) {
      stats.loss = model_.forward(batch.inputs, batch.targets, batch.batch, batch.seq);
      stats.forward_ms = watch.elapsed_us() * 1e-3;
      watch.restart();
      model_.backward();
      stats.backward_ms = watch.elapsed_us() * 1e-3;
    } else {
      stats.loss = microbatch_mean_loss(batch, true);
      stats.forward_ms = watch.elapsed_us() * 1e-3;
    }
    watch.restart();
    if (mixed()) {
      for (float& g : model_.grads()) g = round_to_bf16(g);
    }
    stats.grad_norm = std::sqrt(optim::sum_of_squares(model_.grads()));
    check_not_diverged(stats);
    const float scale = optim::clip_scale(stats.grad_norm, config_.grad_clip);
    if (mixed()) {
      adamw_update_on_team(&team_, adamw_, master_, model_.grads(), lr, scale);
      round_params_from_master();
    } else {
      adamw_update_on_team(&team_, adamw_, model_.params(), model_.grads(), lr, scale);
    }
    stats.optimizer_ms = watch.elapsed_us() * 1e-3;
    return stats;
  }
  float eval_loss(const data::Batch& batch) override {
    if (microbatches_ == 1)
      return model_.forward(batch.inputs, batch.targets, batch.batch, batch.seq);
    return microbatch_mean_loss(batch, false);  // the same micro-batches (an MoE capacity's)
  }
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model_.param_count(); }
  checkpoint::RankState export_state() override {
    checkpoint::RankState s;
    const model::ParamTable& table = model_.param_table();
    checkpoint::append_whole_tensors(table, checkpoint::StateKind::param,
                                     mixed() ? std::span<float>(master_) : model_.params(),
                                     s.pieces);
    checkpoint::append_whole_tensors(table, checkpoint::StateKind::adam_m, adamw_.m(), s.pieces);
    checkpoint::append_whole_tensors(table, checkpoint::StateKind::adam_v, adamw_.v(), s.pieces);
    s.adam_step = adamw_.step_count();
    return s;
  }
  void import_state(const checkpoint::SerialState& state) override {
    checkpoint::copy_whole_state(state, model_.param_table(), model_.params(), adamw_.m(),
                                 adamw_.v());
    adamw_.set_step_count(state.adam_step);
    if (mixed()) {
      master_.assign(model_.params().begin(), model_.params().end());
      round_params_from_master();
    }
  }

  model::GptModel& model() { return model_; }
  optim::AdamW& optimizer() { return adamw_; }

 private:
  bool mixed() const { return config_.precision == model::Precision::bf16; }
  // The mean loss over the batch's M runs of B/M consecutive rows; with `backward` each run's
  // backward (scaled by 1/M: the gradients accumulate to the mean's) follows its forward.
  float microbatch_mean_loss(const data::Batch& batch, bool backward) {
    const int64_t b = batch.batch / microbatches_;
    const auto rows = static_cast<size_t>(b * batch.seq);
    const std::span<const int32_t> inputs(batch.inputs), targets(batch.targets);
    double loss = 0;
    for (int64_t m = 0; m < microbatches_; ++m) {
      const size_t first = static_cast<size_t>(m) * rows;
      loss +=
          model_.forward(inputs.subspan(first, rows), targets.subspan(first, rows), b, batch.seq);
      if (backward) model_.backward(1.0f / static_cast<float>(microbatches_));
    }
    return static_cast<float>(loss / static_cast<double>(microbatches_));
  }
  void round_params_from_master() {
    std::span<float> p = model_.params();
    for (size_t i = 0; i < p.size(); ++i) p[i] = round_to_bf16(master_[i]);
  }

  StepConfig config_;
  int64_t microbatches_ = 1;
  std::vector<float> master_;  // mixed precision's fp32 weights (untracked: a reference)
  MemoryTracker tracker_;      // declared before the buffers it accounts for
  model::ThreadTeam team_;
  model::GptModel model_;
  optim::AdamW adamw_;
};

}  // namespace dtrain::train
