// SerialEngine::train_step: zero grads, forward, backward, the global norm and clip scale
// (parallel/finalize_grads.h, with no groups: the whole model is this rank's), AdamW.
#include "dtrain/train/serial_engine.h"

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/train/step_update.h"

namespace dtrain::train {

SerialEngine::SerialEngine(const SerialEngineConfig& config)
    : config_(config),
      team_(config.threads),
      model_(config.model, &tracker_, nullptr, &team_, config.recompute),
      adamw_(model_.param_count(), config.adamw, &tracker_) {
  model_.init_params(config.init_seed);
  model_.set_batch_shape(config.batch, config.seq);
}

StepStats SerialEngine::train_step(const Batch& batch, float lr) {
  StepStats stats;
  Stopwatch watch;
  model_.zero_grads();
  stats.loss = model_.forward(batch.inputs, batch.targets, batch.batch, batch.seq);
  stats.forward_ms = watch.elapsed_us() * 1e-3;
  watch.restart();
  model_.backward();
  stats.backward_ms = watch.elapsed_us() * 1e-3;
  watch.restart();
  const parallel::GradNorm norm = parallel::global_grad_norm(
      parallel::owned_sum_of_squares(model_.param_table(), {}, model_.grads()), nullptr,
      config_.grad_clip);
  stats.grad_norm = norm.norm;
  check_not_diverged(stats);
  adamw_update_on_team(&team_, adamw_, model_.params(), model_.grads(), lr, norm.clip_scale);
  stats.optimizer_ms = watch.elapsed_us() * 1e-3;
  return stats;
}

float SerialEngine::eval_loss(const Batch& batch) {
  return model_.forward(batch.inputs, batch.targets, batch.batch, batch.seq);
}

RankState SerialEngine::export_state() {
  RankState s;
  const model::ParamTable& table = model_.param_table();
  append_whole_tensors(table, StateKind::param, model_.params(), s.pieces);
  append_whole_tensors(table, StateKind::adam_m, adamw_.m(), s.pieces);
  append_whole_tensors(table, StateKind::adam_v, adamw_.v(), s.pieces);
  s.adam_step = adamw_.step_count();
  return s;
}

void SerialEngine::import_state(const SerialState& state) {
  copy_whole_state(state, model_.param_table(), model_.params(), adamw_.m(), adamw_.v());
  adamw_.set_step_count(state.adam_step);
}

}  // namespace dtrain::train
