// The step after the schedule (Engine::finalize_and_update): the last DP syncs, the tied
// embedding's sum, the global gradient norm and one AdamW update over the rank's pieces, each
// phase timed and charged to one of the clock's phases (FinalizePhase, clock_phase).
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/step_update.h"

namespace dtrain::train {
std::string_view name(FinalizePhase phase) {
  switch (phase) {
    case FinalizePhase::dp_bucket_wait:
      return "wait for DP buckets";
    case FinalizePhase::tied_wte_sum:
      return "sum tied wte";
    case FinalizePhase::embedding_dp_sync:
      return "DP sync of the embeddings";
    case FinalizePhase::grad_norm_and_loss:
      return "gradient norm and loss";
    case FinalizePhase::adamw:
      return "AdamW";
    case FinalizePhase::param_all_gather:
      return "all_gather parameters";
  }
  return "?";
}

ClockPhase clock_phase(FinalizePhase phase) {
  switch (phase) {
    case FinalizePhase::grad_norm_and_loss:
    case FinalizePhase::adamw:
      return ClockPhase::optimizer;
    case FinalizePhase::tied_wte_sum:
      return ClockPhase::pipeline_wait;
    case FinalizePhase::dp_bucket_wait:
    case FinalizePhase::embedding_dp_sync:
    case FinalizePhase::param_all_gather:
      return ClockPhase::exposed_dp;
  }
  return ClockPhase::exposed_dp;
}

void Engine::finalize_and_update(StepStats& stats, float lr) {
  Stopwatch watch;
  double at = now_us();
  finalize_phases_ = {};
  auto phase = [&](FinalizePhase what) {
    const double end = now_us();
    last_.finalize.push_back({std::string(name(what)), trace::SpanKind::other, at, end});
    switch (clock_phase(what)) {
      case ClockPhase::optimizer:
        finalize_phases_.optimizer_us += end - at;
        break;
      case ClockPhase::pipeline_wait:
        finalize_phases_.pipeline_wait_us += end - at;
        break;
      case ClockPhase::exposed_dp:
        finalize_phases_.exposed_dp_us += end - at;
        break;
    }
    at = end;
  };
  dp_->wait_for_syncs();
  phase(FinalizePhase::dp_bucket_wait);
  // The tied wte: the first stage's embedding half and the last stage's head half summed, then
  // averaged over DP like every other unit.
  if (groups_.embedding != nullptr) {
    const model::ParamTable& table = model_.param_table();
    const model::ParamTensor& wte = table[static_cast<size_t>(table.index_of("wte"))];
    const parallel::GradUnit& unit = units_[units_.embeddings()];
    std::span<float> grads = dp_->deferred_grads();
    const std::span<float> dwte = grads.subspan(static_cast<size_t>(wte.offset - unit.offset),
                                                static_cast<size_t>(wte.count));
    parallel::sum_tied_embedding_grads(dwte, groups_.embedding.get());
    phase(FinalizePhase::tied_wte_sum);
  }
  dp_->sync_deferred();
  if (config_.pp > 1) phase(FinalizePhase::embedding_dp_sync);
  const parallel::GradNorm norm = gradient_norm();
  stats.grad_norm = norm.norm;
  stats.loss = mean_loss(stats.loss);
  phase(FinalizePhase::grad_norm_and_loss);
  check_not_diverged(stats);
  // One update for every layout: the pieces are the owned range, or under EP with ZeRO the runs
  // of the dense and the expert shards.
  if (dp_->mixed_precision()) {
    adamw_update_on_team(&team_, adamw_, dp_->mixed_pieces(), lr, norm.clip_scale);
  } else {
    adamw_update_on_team(&team_, adamw_, dp_->update_pieces(), lr, norm.clip_scale);
  }
  phase(FinalizePhase::adamw);
  dp_->gather_updated_params();
  if (config_.zero_stage == 1 || config_.zero_stage == 2) phase(FinalizePhase::param_all_gather);
  stats.optimizer_ms = watch.elapsed_us() * 1e-3;
}

parallel::GradNorm Engine::gradient_norm() {
  const bool mixed = dp_->mixed_precision();
  if (dp_->split_shards()) {
    return mixed ? split_shards_norm(dp_->mixed_pieces()) : split_shards_norm(dp_->update_pieces());
  }
  const parallel::HeldGrads held = dp_->held_grads();
  const model::ParamTable& table = model_.param_table();
  const bool sp = hooks_->sequence_parallel();
  traffic_.tp_norms +=
      static_cast<double>((mixed ? parallel::all_reduce_sequence_parallel_norm_grads(
                                       table, held.grads16, held.first, groups_.tp.get(), sp)
                                 : parallel::all_reduce_sequence_parallel_norm_grads(
                                       table, held.grads, held.first, groups_.tp.get(), sp))
                              .bytes_moved());
  const parallel::KvCopyRows kv = parallel::kv_copy_rows(config_.step.model, config_.tp);
  traffic_.tp_kv_copies +=
      static_cast<double>((mixed ? parallel::all_reduce_kv_copy_grads(
                                       table, held.grads16, held.first, groups_.kv_copies.get(), kv)
                                 : parallel::all_reduce_kv_copy_grads(table, held.grads, held.first,
                                                                      groups_.kv_copies.get(), kv))
                              .bytes_moved());
  const double squares =
      mixed ? parallel::owned_sum_of_squares(table, grad_ownership(),
                                             std::span<const bf16>(held.grads16), held.first)
            : parallel::owned_sum_of_squares(table, grad_ownership(),
                                             std::span<const float>(held.grads), held.first);
  return parallel::global_grad_norm(squares, &world_, config_.step.grad_clip);
}

template <typename Piece>
parallel::GradNorm Engine::split_shards_norm(const std::vector<Piece>& pieces) {
  using Element = typename decltype(Piece::grads)::element_type;
  const model::ParamTable& table = model_.param_table();
  const bool sp = hooks_->sequence_parallel();
  double squares = 0;
  for (const Piece& p : pieces) {
    traffic_.tp_norms += static_cast<double>(parallel::all_reduce_sequence_parallel_norm_grads(
                                                 table, p.grads, p.flat, groups_.tp.get(), sp)
                                                 .bytes_moved());
    traffic_.tp_kv_copies += static_cast<double>(
        parallel::all_reduce_kv_copy_grads(table, p.grads, p.flat, groups_.kv_copies.get(),
                                           parallel::kv_copy_rows(config_.step.model, config_.tp))
            .bytes_moved());
    parallel::GradOwnership owner = grad_ownership();
    owner.zero_shard = {p.flat, static_cast<int64_t>(p.grads.size())};
    squares +=
        parallel::owned_sum_of_squares(table, owner, std::span<const Element>(p.grads), p.flat);
  }
  return parallel::global_grad_norm(squares, &world_, config_.step.grad_clip);
}

}  // namespace dtrain::train
