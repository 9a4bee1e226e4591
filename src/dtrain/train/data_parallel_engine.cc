// DataParallelEngine: batch rows per rank, micro-batches, the loss average, per-step records,
// the report beside the plan/ formulas, and the SPMD run over the threads backend.
#include "dtrain/train/data_parallel_engine.h"

#include <cmath>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/launch.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/parallel/mesh.h"
#include "dtrain/plan/comm_model.h"
#include "dtrain/plan/memory_model.h"

namespace dtrain::train {
namespace {

parallel::DataParallelConfig model_config(const DataParallelEngineConfig& c, int64_t micro_batch) {
  parallel::DataParallelConfig m;
  m.model = c.base.model;
  m.micro_batch = micro_batch;
  m.seq = c.base.seq;
  m.adamw = c.base.adamw;
  m.grad_clip = c.base.grad_clip;
  m.init_seed = c.base.init_seed;
  m.zero_stage = c.dp.zero_stage;
  m.bucket_bytes = c.dp.bucket_bytes;
  m.threads = c.base.threads;
  return m;
}

double sum_ms(const std::vector<parallel::TimeInterval>& windows) {
  double us = 0;
  for (const parallel::TimeInterval& w : windows) us += w.length_us();
  return us * 1e-3;
}

}  // namespace

void validate_data_parallel(const DataParallelSetup& dp, int64_t batch) {
  DTRAIN_CHECK(dp.dp >= 1, "--dp must be at least 1 (got ", dp.dp, ")");
  DTRAIN_CHECK(dp.zero_stage >= 0 && dp.zero_stage <= 3, "--zero must be 0, 1, 2 or 3 (got ",
               dp.zero_stage, ")");
  DTRAIN_CHECK(dp.bucket_bytes > 0, "--bucket-size must be positive (got ", dp.bucket_bytes,
               " bytes)");
  DTRAIN_CHECK(dp.grad_accum >= 1, "--grad-accum must be at least 1 (got ", dp.grad_accum, ")");
  DTRAIN_CHECK(batch % dp.dp == 0, "--dp ", dp.dp, " does not divide the global batch ", batch,
               " (--batch)");
  DTRAIN_CHECK((batch / dp.dp) % dp.grad_accum == 0, "--grad-accum ", dp.grad_accum,
               " does not divide the ", batch / dp.dp, " sequences per rank (--batch ", batch,
               " / --dp ", dp.dp, ")");
}

DataParallelEngine::DataParallelEngine(const DataParallelEngineConfig& config,
                                       comm::Communicator& dp)
    : config_(config),
      dp_(dp),
      micro_batch_((validate_data_parallel(config.dp, config.base.batch),
                    config.base.batch / config.dp.dp / config.dp.grad_accum)),
      model_(model_config(config, micro_batch_), dp, tracker_) {
  DTRAIN_CHECK(dp.size() == config.dp.dp, "DataParallelEngine: a group of ", dp.size(),
               " ranks for --dp ", config.dp.dp);
  tracker_.reset_peaks();  // construction held the full model once, to initialise it
}

std::string DataParallelEngine::describe() const {
  const parallel::DeviceMesh mesh(config_.dp.dp, 1, 1);
  std::string s = mesh.describe(dp_.global_rank());
  s += config_.dp.zero_stage > 0 ? " ZeRO-" + std::to_string(config_.dp.zero_stage) : " plain DP";
  if (config_.dp.grad_accum > 1)
    s += ", " + std::to_string(config_.dp.grad_accum) + " micro-batches";
  return s;
}

std::span<const int32_t> DataParallelEngine::rows(const std::vector<int32_t>& ids,
                                                  const Batch& batch, int64_t k) const {
  DTRAIN_CHECK(batch.batch == config_.base.batch && batch.seq == config_.base.seq,
               "DataParallelEngine: batch (", batch.batch, ", ", batch.seq, "), expected (",
               config_.base.batch, ", ", config_.base.seq, ")");
  const int64_t per_rank = batch.batch / config_.dp.dp;
  const int64_t first = dp_.rank() * per_rank + k * micro_batch_;
  return std::span<const int32_t>(ids).subspan(static_cast<size_t>(first * batch.seq),
                                               static_cast<size_t>(micro_batch_ * batch.seq));
}

float DataParallelEngine::average_over_ranks(float local) {
  comm::all_reduce<float>(dp_, &local, 1, comm::ReduceOp::avg);
  return local;
}

StepStats DataParallelEngine::train_step(const Batch& batch, float lr) {
  DataParallelStepRecord record;
  const comm::Traffic dp_before = model_.dp_traffic();
  const comm::Traffic control_before = dp_.traffic();
  model_.begin_step();
  const int64_t K = config_.dp.grad_accum;
  double local = 0;
  for (int64_t k = 0; k < K; ++k) {
    local += model_.forward_backward(rows(batch.inputs, batch, k), rows(batch.targets, batch, k),
                                     1.0f / static_cast<float>(K), k + 1 == K);
  }
  StepStats stats;
  stats.loss = average_over_ranks(static_cast<float>(local / static_cast<double>(K)));
  DTRAIN_CHECK(std::isfinite(stats.loss), "training diverged: loss ", stats.loss,
               " (try a smaller --lr)");
  Stopwatch watch;
  stats.grad_norm = model_.finish_step(lr);
  stats.optimizer_ms = watch.elapsed_us() * 1e-3;
  record.timeline = model_.take_timeline();
  record.dp = model_.dp_traffic() - dp_before;
  record.control = dp_.traffic() - control_before;
  stats.forward_ms = sum_ms(record.timeline.forward);
  stats.backward_ms = sum_ms(record.timeline.backward);
  steps_.push_back(std::move(record));
  return stats;
}

float DataParallelEngine::eval_loss(const Batch& batch) {
  const int64_t K = config_.dp.grad_accum;
  double local = 0;
  for (int64_t k = 0; k < K; ++k) {
    local += model_.forward_loss(rows(batch.inputs, batch, k), rows(batch.targets, batch, k));
  }
  return average_over_ranks(static_cast<float>(local / static_cast<double>(K)));
}

DataParallelReport DataParallelEngine::report() const {
  DataParallelReport r;
  r.setup = config_.dp;
  r.params = model_.param_count();
  r.shard = model_.layout().shard;
  r.micro_batch = micro_batch_;
  r.buckets = static_cast<int64_t>(model_.buckets().size());
  const int N = config_.dp.dp, stage = config_.dp.zero_stage;
  const plan::ModelStateBytes formula =
      plan::model_state_bytes(r.params, N, stage, plan::kFp32Adam);
  const std::pair<MemoryTag, int64_t> rows[] = {{MemoryTag::params, formula.params},
                                                {MemoryTag::grads, formula.grads},
                                                {MemoryTag::optimizer, formula.optimizer}};
  for (const auto& [tag, bytes] : rows) {
    r.state.push_back({tag, tracker_.current_bytes(tag), tracker_.peak_bytes(tag), bytes});
  }
  if (stage == 3) {
    r.gathered_peak_bytes = tracker_.peak_bytes(MemoryTag::params) - formula.params +
                            tracker_.peak_bytes(MemoryTag::grads) - formula.grads;
    const std::vector<parallel::GradUnit>& units = model_.units();
    const int64_t block = units.size() > 2 ? units[1].count : 0;
    r.gathered_formula_bytes = plan::zero3_gathered_bytes(block, plan::kFp32Adam, 1) +
                               plan::zero3_gathered_bytes(units.back().count, plan::kFp32Adam, 0);
  }
  r.formula_bytes_sent_per_step = plan::dp_traffic_per_step(r.params, N, stage, plan::kFp32Adam,
                                                            static_cast<int>(config_.dp.grad_accum))
                                      .bytes_sent;
  double sent = 0, control = 0, comm_us = 0, hidden = 0;
  for (const DataParallelStepRecord& s : steps_) {
    sent += static_cast<double>(s.dp.bytes_sent);
    control += static_cast<double>(s.control.bytes_sent);
    comm_us += s.timeline.comm_us();
    hidden += s.timeline.hidden_us();
  }
  const double n = steps_.empty() ? 1.0 : static_cast<double>(steps_.size());
  r.bytes_sent_per_step = sent / n;
  r.control_bytes_per_step = control / n;
  r.comm_ms_per_step = comm_us * 1e-3 / n;
  r.hidden_ms_per_step = hidden * 1e-3 / n;
  r.overlap_share = comm_us > 0 ? hidden / comm_us : 0.0;
  return r;
}

TrainSummary run_data_parallel(const DataParallelEngineConfig& config, const TrainerConfig& trainer,
                               const TokenSplit& data, TrainObserver* observer) {
  validate_data_parallel(config.dp, config.base.batch);
  TrainSummary summary;
  comm::run_on_backend(comm::Backend::threads, config.dp.dp, [&](comm::Communicator& world) {
    DataParallelEngine engine(config, world);
    Trainer loop(trainer, engine, data, world.rank() == 0 ? observer : nullptr);
    TrainSummary s = loop.run();
    if (world.rank() == 0) {
      // Each rank holds the activations of one micro-batch, not of the global batch.
      s.planned_activation_bytes = planned_activation_bytes(
          trainer.model, engine.report().micro_batch, trainer.seq, config.base.threads);
      s.data_parallel = engine.report();
      summary = std::move(s);
    }
  });
  return summary;
}

}  // namespace dtrain::train
