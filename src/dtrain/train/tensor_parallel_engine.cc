// TensorParallelEngine: one sharded GptModel and one AdamW over its shards per TP rank; the
// gradient finalization (parallel/finalize_grads.h: SP LayerNorms, the norm of the whole model
// from the shards); counters per step; the SPMD run.
#include "dtrain/train/tensor_parallel_engine.h"

#include <algorithm>
#include <mutex>

#include "dtrain/comm/threads/backend.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/mesh.h"
#include "dtrain/plan/activation_memory.h"
#include "dtrain/plan/comm_model.h"
#include "dtrain/train/step_update.h"

namespace dtrain::train {
namespace {

void add(parallel::TpCounter& sum, const parallel::TpCounter& after,
         const parallel::TpCounter& before) {
  sum.calls += after.calls - before.calls;
  sum.elements += after.elements - before.elements;
  sum.traffic += after.traffic - before.traffic;
}

// One block's activation bytes on a TP rank, read from a MemoryTracker: the activations of
// blocks {0, 1} less those of block {0} alone (the same buffers the engine's model carves).
int64_t measured_block_activation_bytes(model::GptConfig g, int64_t B, int64_t T, int tp,
                                        bool sequence_parallel, Recompute recompute) {
  g.layers = 2;
  auto bytes = [&](int64_t blocks) {
    MemoryTracker tracker;
    const model::GptActivations acts(g, B, T, &tracker, {0, blocks}, false, false, tp,
                                     sequence_parallel, recompute);
    return tracker.current_bytes(MemoryTag::activations);
  };
  return bytes(2) - bytes(1);
}

}  // namespace

void validate_tensor_parallel(const TensorParallelSetup& setup, const model::GptConfig& model) {
  model::check_tensor_parallel(model, setup.tp);
  DTRAIN_CHECK(!setup.sequence_parallel || setup.tp > 1,
               "--sequence-parallel needs --tp of at least 2 (got --tp ", setup.tp, ")");
}

TensorParallelEngine::TensorParallelEngine(const SerialEngineConfig& config, comm::Communicator& tp,
                                           bool sequence_parallel)
    : config_(config),
      tp_(tp),
      team_(config.threads),
      hooks_(tp, sequence_parallel),
      model_((model::check_tensor_parallel(config.model, tp.size()), config.model), &tracker_,
             &hooks_, &team_, config.recompute),
      adamw_(model_.param_count(), config.adamw, &tracker_) {
  sequence_parallel_ = hooks_.sequence_parallel();
  if (sequence_parallel_) model::check_sequence_parallel(config.batch, config.seq, tp.size());
  model_.init_params(config.init_seed);
  model_.set_batch_shape(config.batch, config.seq);
}

std::string TensorParallelEngine::describe() const {
  const parallel::DeviceMesh mesh(1, tp_.size(), 1);
  return mesh.describe(tp_.global_rank()) + " tensor parallel" +
         (sequence_parallel_ ? " + sequence parallel" : "");
}

StepStats TensorParallelEngine::train_step(const Batch& batch, float lr) {
  const parallel::TensorParallelCounters before = hooks_.counters();
  StepStats stats;
  Stopwatch watch;
  model_.zero_grads();
  stats.loss = model_.forward(batch.inputs, batch.targets, batch.batch, batch.seq);
  stats.forward_ms = watch.elapsed_us() * 1e-3;
  watch.restart();
  model_.backward();
  parallel::all_reduce_sequence_parallel_norm_grads(model_, &tp_);
  stats.backward_ms = watch.elapsed_us() * 1e-3;
  watch.restart();
  parallel::GradOwnership owner;
  owner.coord.tp = tp_.rank();
  const parallel::GradNorm norm = parallel::global_grad_norm(
      parallel::owned_sum_of_squares(model_.param_table(), owner, model_.grads()), &tp_,
      config_.grad_clip);
  stats.grad_norm = norm.norm;
  check_not_diverged(stats);
  adamw_update_on_team(&team_, adamw_, model_.params(), model_.grads(), lr, norm.clip_scale);
  stats.optimizer_ms = watch.elapsed_us() * 1e-3;
  const parallel::TensorParallelCounters& after = hooks_.counters();
  add(step_totals_.block_forward, after.block_forward, before.block_forward);
  add(step_totals_.block_backward, after.block_backward, before.block_backward);
  add(step_totals_.vocab, after.vocab, before.vocab);
  add(step_totals_.regather, after.regather, before.regather);
  ++steps_;
  return stats;
}

float TensorParallelEngine::eval_loss(const Batch& batch) {
  return model_.forward(batch.inputs, batch.targets, batch.batch, batch.seq);
}

// Each rank writes its slice of every split tensor (tp_slice_ranges says where it lies in the
// serial tensor); the replicated tensors are written by TP rank 0 alone.
RankState TensorParallelEngine::export_state() {
  RankState s;
  const model::ParamTable serial = model::gpt_param_table(config_.model);
  const std::pair<StateKind, std::span<const float>> kinds[] = {{StateKind::param, model_.params()},
                                                                {StateKind::adam_m, adamw_.m()},
                                                                {StateKind::adam_v, adamw_.v()}};
  for (const model::ParamTensor& local : model_.param_table().tensors()) {
    const bool replicated = model::tp_split_of(local.name) == model::TpSplit::replicated;
    if (replicated && tp_.rank() != 0) continue;
    const model::ParamTensor& whole = serial[static_cast<size_t>(serial.index_of(local.name))];
    const std::vector<model::FlatRange> ranges =
        model::tp_slice_ranges(whole, config_.model, tp_.size(), tp_.rank());
    int64_t count = 0;
    for (const model::FlatRange& r : ranges) count += r.count;
    for (const auto& [kind, values] : kinds) {
      StatePiece p{local.name, kind, ranges, {}};
      const auto first = values.begin() + local.offset;
      p.data.assign(first, first + count);
      s.pieces.push_back(std::move(p));
    }
  }
  s.adam_step = adamw_.step_count();
  return s;
}

void TensorParallelEngine::import_state(const SerialState& state) {
  const std::pair<StateKind, std::span<float>> kinds[] = {{StateKind::param, model_.params()},
                                                          {StateKind::adam_m, adamw_.m()},
                                                          {StateKind::adam_v, adamw_.v()}};
  for (const model::ParamTensor& local : model_.param_table().tensors()) {
    const model::ParamTensor& whole =
        state.table[static_cast<size_t>(state.table.index_of(local.name))];
    for (const auto& [kind, values] : kinds) {
      const std::vector<float> slice =
          model::tp_slice(whole, state.tensor(whole, kind), config_.model, tp_.size(), tp_.rank());
      DTRAIN_CHECK(static_cast<int64_t>(slice.size()) == local.count, "checkpoint: tensor ",
                   local.name, " slices to ", slice.size(), " elements, the rank holds ",
                   local.count);
      std::copy(slice.begin(), slice.end(), values.begin() + local.offset);
    }
  }
  adamw_.set_step_count(state.adam_step);
}

TensorParallelRankReport TensorParallelEngine::report() const {
  TensorParallelRankReport r;
  const model::GptConfig& m = config_.model;
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  r.tp_rank = tp_.rank();
  r.block_forward_calls_per_step = static_cast<double>(step_totals_.block_forward.calls) / n;
  r.block_backward_calls_per_step = static_cast<double>(step_totals_.block_backward.calls) / n;
  r.block_bytes_sent_per_step =
      static_cast<double>(step_totals_.block_forward.traffic.bytes_sent +
                          step_totals_.block_backward.traffic.bytes_sent) /
      n;
  // One micro-batch of the whole batch per step; fp32 activations.
  const int64_t micro_batches = 1;
  r.formula_bytes_sent_per_step =
      plan::tp_traffic_per_layer(config_.batch, config_.seq, m.channels, sizeof(float), tp_.size(),
                                 sequence_parallel_, plan::Recompute::none)
          .bytes_sent *
      static_cast<double>(m.layers * micro_batches);
  r.vocab_bytes_sent_per_step = static_cast<double>(step_totals_.vocab.traffic.bytes_sent) / n;
  r.regather_bytes_sent_per_step =
      static_cast<double>(step_totals_.regather.traffic.bytes_sent) / n;
  // Activations of one block on this rank (every block keeps the same tensors).
  r.block_activation_bytes = measured_block_activation_bytes(
      m, config_.batch, config_.seq, tp_.size(), sequence_parallel_, config_.recompute);
  r.formula_block_activation_bytes =
      plan::activation_bytes_per_layer({.seq = config_.seq,
                                        .micro_batch = config_.batch,
                                        .hidden = m.channels,
                                        .heads = m.heads,
                                        .tp = tp_.size(),
                                        .sequence_parallel = sequence_parallel_,
                                        .recompute = config_.recompute,
                                        .bytes_per_element = sizeof(float),
                                        .dropout = false,
                                        .count_layernorm_stats = true});
  r.param_bytes = tracker_.current_bytes(MemoryTag::params);
  r.serial_param_bytes = model::gpt_param_count(m) * static_cast<int64_t>(sizeof(float));
  const parallel::BlockParamCounts local = parallel::block_param_counts(model_.param_table());
  const parallel::BlockParamCounts serial = parallel::block_param_counts(model::gpt_param_table(m));
  r.block_sharded = local.sharded;
  r.block_replicated = local.replicated;
  r.serial_block_sharded = serial.sharded;
  return r;
}

TrainSummary run_tensor_parallel(const SerialEngineConfig& config, const TensorParallelSetup& setup,
                                 const TrainerConfig& trainer, const TokenSplit& data,
                                 TrainObserver* observer, double timeout_s) {
  validate_tensor_parallel(setup, config.model);
  if (setup.sequence_parallel) model::check_sequence_parallel(config.batch, config.seq, setup.tp);
  TrainSummary summary;
  TensorParallelReport report;
  report.setup = setup;
  report.ranks.resize(static_cast<size_t>(setup.tp));
  std::mutex mutex;
  comm::threads::run_ranks(
      setup.tp,
      [&](comm::Communicator& world) {
        TensorParallelEngine engine(config, world, setup.sequence_parallel);
        Trainer loop(trainer, engine, data, world.rank() == 0 ? observer : nullptr);
        TrainSummary s = loop.run();
        {
          // Threads backend: every rank's figures land in one report (MPI would gather them).
          std::lock_guard<std::mutex> lock(mutex);
          report.ranks[static_cast<size_t>(world.rank())] = engine.report();
        }
        if (world.rank() == 0) summary = std::move(s);
      },
      comm::threads::WorldOptions{timeout_s});
  summary.tensor_parallel = std::move(report);
  return summary;
}

}  // namespace dtrain::train
