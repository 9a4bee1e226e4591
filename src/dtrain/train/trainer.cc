// Trainer::run: the loop, timing and the summary.
#include "dtrain/train/trainer.h"

#include <algorithm>
#include <cmath>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/plan/activation_memory.h"
#include "dtrain/plan/head_activation_memory.h"

namespace dtrain::train {

double planned_activation_bytes(const model::GptConfig& m, int64_t B, int64_t T, int threads) {
  plan::ActivationShape layer;
  layer.seq = T;
  layer.micro_batch = B;
  layer.hidden = m.channels;
  layer.heads = m.heads;
  layer.bytes_per_element = 4;
  layer.dropout = false;
  layer.count_layernorm_stats = true;
  plan::HeadActivationShape head;
  head.seq = T;
  head.micro_batch = B;
  head.hidden = m.channels;
  head.vocab = m.vocab;
  head.bytes_per_element = 4;
  head.threads = threads;
  return static_cast<double>(m.layers) * plan::activation_bytes_per_layer(layer) +
         plan::head_activation_bytes(head) + plan::workspace_activation_bytes(head);
}

Trainer::Trainer(const TrainerConfig& config, StepEngine& engine, const TokenSplit& data,
                 TrainObserver* observer)
    : config_(config), engine_(engine), data_(data), observer_(observer) {
  DTRAIN_CHECK(config.steps > 0, "--steps must be positive (got ", config.steps, ")");
  DTRAIN_CHECK(config.eval_every >= 0, "--eval-every must not be negative (got ", config.eval_every,
               ")");
  DTRAIN_CHECK(config.eval_batches > 0, "--eval-batches must be positive (got ",
               config.eval_batches, ")");
  optim::validate(config.schedule);
  check_split_fits(data, config.seq);
}

float Trainer::evaluate() {
  batch_.resize(config_.batch, config_.seq);
  double total = 0;
  for (int64_t k = 0; k < config_.eval_batches; ++k) {
    eval_batch(data_.val, k, batch_);
    total += engine_.eval_loss(batch_);
  }
  return static_cast<float>(total / static_cast<double>(config_.eval_batches));
}

TrainSummary Trainer::run() {
  TrainSummary s;
  s.config = config_;
  s.engine = engine_.describe();
  s.data_source = data_.source;
  s.train_tokens = static_cast<int64_t>(data_.train.size());
  s.val_tokens = static_cast<int64_t>(data_.val.size());
  s.param_count = engine_.param_count();
  s.tokens_per_step = config_.batch * config_.seq;
  s.ln_vocab = std::log(static_cast<double>(config_.model.vocab));
  if (observer_ != nullptr) observer_->on_start(config_, engine_);

  auto eval_now = [&](int64_t step) {
    const EvalRecord r{step, evaluate()};
    s.evals.push_back(r);
    if (observer_ != nullptr) observer_->on_eval(r);
  };
  eval_now(0);

  BatchSampler sampler(data_.train, config_.batch, config_.seq, config_.data_seed);
  std::vector<double> step_ms;
  for (int64_t step = 0; step < config_.steps; ++step) {
    sampler.next(batch_);
    StepRecord r;
    r.step = step + 1;
    r.lr = optim::learning_rate(config_.schedule, step);
    Stopwatch watch;
    r.stats = engine_.train_step(batch_, r.lr);
    r.step_ms = watch.elapsed_us() * 1e-3;
    s.train_losses.push_back(r.stats.loss);
    step_ms.push_back(r.step_ms);
    s.forward_ms += r.stats.forward_ms;
    s.backward_ms += r.stats.backward_ms;
    s.optimizer_ms += r.stats.optimizer_ms;
    if (observer_ != nullptr) observer_->on_step(r);
    const bool last = step + 1 == config_.steps;
    if (last || (config_.eval_every > 0 && (step + 1) % config_.eval_every == 0)) {
      eval_now(step + 1);
    }
  }

  const auto n = static_cast<double>(config_.steps);
  for (double ms : step_ms) s.train_seconds += ms * 1e-3;
  s.ms_per_step = s.train_seconds * 1e3 / n;
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  s.median_ms_per_step = sorted[sorted.size() / 2];
  s.tokens_per_s = static_cast<double>(s.tokens_per_step) * n / s.train_seconds;
  s.forward_ms /= n;
  s.backward_ms /= n;
  s.optimizer_ms /= n;
  s.first_train_loss = s.train_losses.front();
  s.final_train_loss = s.train_losses.back();
  const size_t tail = std::min<size_t>(10, s.train_losses.size());
  double tail_sum = 0;
  for (size_t i = s.train_losses.size() - tail; i < s.train_losses.size(); ++i) {
    tail_sum += s.train_losses[i];
  }
  s.final_train_loss_avg = static_cast<float>(tail_sum / static_cast<double>(tail));
  s.first_val_loss = s.evals.front().val_loss;
  s.final_val_loss = s.evals.back().val_loss;

  const MemoryTracker& mem = engine_.memory();
  for (int t = 0; t < kMemoryTagCount; ++t) {
    const auto tag = static_cast<MemoryTag>(t);
    s.memory.push_back({tag, mem.current_bytes(tag), mem.peak_bytes(tag)});
  }
  s.peak_total_bytes = mem.peak_total_bytes();
  s.planned_activation_bytes =
      planned_activation_bytes(config_.model, config_.batch, config_.seq, config_.threads);
  if (observer_ != nullptr) observer_->on_finish(s);
  return s;
}

}  // namespace dtrain::train
