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
#include "dtrain/plan/hardware.h"
#include "dtrain/plan/link_traffic.h"
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
  m.recompute = c.base.recompute;
  const int N = c.dp.dp;
  m.topology = comm::NodeTopology(N, c.ranks_per_node > 0 ? c.ranks_per_node : N);
  m.hierarchical = c.hierarchical;
  return m;
}

// The topology predictions of a ZeRO-0 run: per bucket, where a flat ring or the hierarchical
// all-reduce sends its bytes (plan/link_traffic.h), and with a cluster file their time.
void add_link_predictions(DataParallelReport& d, const parallel::DataParallelModel& model,
                          const DataParallelEngineConfig& c, double backward_ms) {
  if (c.dp.zero_stage != 0) return;
  const int N = c.dp.dp;
  const int G = c.ranks_per_node > 0 ? c.ranks_per_node : N;
  const int nodes = N / G;
  double inter = 0, total_s = 0, last_s = 0;
  plan::Cluster cluster;
  if (!c.cluster_path.empty()) cluster = plan::read_cluster_file(c.cluster_path);
  for (const parallel::Bucket& b : model.buckets()) {
    for (int r = 0; r < N; ++r) {
      const plan::LinkTraffic t =
          c.hierarchical
              ? plan::hierarchical_all_reduce_link_traffic(b.count, sizeof(float), G, nodes, r)
              : plan::flat_ring_all_reduce_link_traffic(b.count, sizeof(float), G, nodes, r);
      inter += static_cast<double>(t.inter_node_bytes);
    }
    if (c.cluster_path.empty()) continue;
    const double bytes = static_cast<double>(b.count) * sizeof(float);
    // The node's uplink is shared: the flat ring sends one flow out of each node, the
    // hierarchical all-reduce's G rings across nodes send G (plan::shared_uplink_bandwidth).
    plan::Link uplink = cluster.inter_node;
    uplink.bandwidth_bytes_per_s =
        plan::shared_uplink_bandwidth(uplink.bandwidth_bytes_per_s, G, c.hierarchical ? G : 1);
    const double s =
        c.hierarchical && nodes > 1
            ? plan::hierarchical_all_reduce_cost(bytes, G, nodes, cluster.intra_node, uplink).time_s
            : plan::collective_cost(comm::CollectiveOp::all_reduce, comm::Algorithm::ring, bytes, N,
                                    nodes > 1 ? uplink : cluster.intra_node)
                  .time_s;
    total_s += s;
    last_s = s;
  }
  d.predicted_total_inter_node_bytes_per_step = inter;
  if (c.cluster_path.empty()) return;
  d.cluster = c.cluster_path;
  d.predicted_comm_ms = total_s * 1e3;
  // Buckets but the last can run behind the backward pass that is still producing gradients.
  d.predicted_exposed_comm_ms = plan::exposed_time(total_s, last_s, backward_ms * 1e-3) * 1e3;
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

StateLayout DataParallelEngine::state_layout() const {
  return {config_.dp.dp, 1, 1, config_.dp.zero_stage};
}

// Stage 0 replicates everything: rank 0 writes it. Stages 1-2 replicate the parameters (rank
// 0 writes them) and shard the moments; stage 3 shards both. A shard's padding is not written.
RankState DataParallelEngine::export_state() {
  RankState s;
  const model::ParamTable& table = model_.local_model().param_table();
  const int stage = config_.dp.zero_stage;
  const comm::Chunk own = model_.layout().owned(dp_.rank());
  optim::AdamW& adamw = model_.optimizer();
  if (stage < 3 && dp_.rank() == 0) {
    append_whole_tensors(table, StateKind::param, model_.local_model().params(), s.pieces);
  }
  if (stage == 3) {
    append_flat_range(table, StateKind::param, own.offset, own.count, model_.param_shard(),
                      s.pieces);
  }
  if (stage == 0 && dp_.rank() == 0) {
    append_whole_tensors(table, StateKind::adam_m, adamw.m(), s.pieces);
    append_whole_tensors(table, StateKind::adam_v, adamw.v(), s.pieces);
  }
  if (stage >= 1) {
    append_flat_range(table, StateKind::adam_m, own.offset, own.count, adamw.m(), s.pieces);
    append_flat_range(table, StateKind::adam_v, own.offset, own.count, adamw.v(), s.pieces);
  }
  s.adam_step = adamw.step_count();
  return s;
}

void DataParallelEngine::import_state(const SerialState& state) {
  const model::ParamTable& table = model_.local_model().param_table();
  const int stage = config_.dp.zero_stage;
  const comm::Chunk own = model_.layout().owned(dp_.rank());
  const int64_t n = table.total_count();
  optim::AdamW& adamw = model_.optimizer();
  if (stage < 3) {
    copy_flat_range(state, table, StateKind::param, 0, n, model_.local_model().params());
  } else {
    copy_flat_range(state, table, StateKind::param, own.offset, own.count, model_.param_shard());
  }
  const int64_t first = stage == 0 ? 0 : own.offset;
  const int64_t count = stage == 0 ? n : own.count;
  copy_flat_range(state, table, StateKind::adam_m, first, count, adamw.m());
  copy_flat_range(state, table, StateKind::adam_v, first, count, adamw.v());
  adamw.set_step_count(state.adam_step);
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
  const comm::LinkBytes links = model_.dp_link_bytes();
  r.ranks_per_node = config_.ranks_per_node;
  r.hierarchical = config_.hierarchical;
  r.intra_node_bytes_per_step = static_cast<double>(links.intra_node) / n;
  r.inter_node_bytes_per_step = static_cast<double>(links.inter_node) / n;
  r.control_bytes_per_step = control / n;
  r.comm_ms_per_step = comm_us * 1e-3 / n;
  r.hidden_ms_per_step = hidden * 1e-3 / n;
  r.overlap_share = comm_us > 0 ? hidden / comm_us : 0.0;
  return r;
}

TrainSummary run_data_parallel(const DataParallelEngineConfig& config, const TrainerConfig& trainer,
                               const TokenSplit& data, TrainObserver* observer, bool* is_reporter) {
  validate_data_parallel(config.dp, config.base.batch);
  TrainSummary summary;
  bool reporter = false;
  comm::run_on_backend(
      config.backend, config.dp.dp,
      [&](comm::Communicator& world) {
        DataParallelEngine engine(config, world);
        Trainer loop(trainer, engine, data, world.rank() == 0 ? observer : nullptr);
        TrainSummary s = loop.run();
        if (world.rank() == 0) {
          // Each rank holds the activations of one micro-batch, not of the global batch.
          s.planned_activation_bytes =
              planned_activation_bytes(trainer.model, engine.report().micro_batch, trainer.seq,
                                       config.base.threads, config.base.recompute);
          s.data_parallel = engine.report();
        }
        // Every rank's inter-node bytes, for the job's total (a collective: all ranks call it).
        const auto bits = static_cast<int64_t>(engine.report().inter_node_bytes_per_step);
        std::vector<int64_t> all(static_cast<size_t>(world.size()));
        comm::all_gather<int64_t>(world, &bits, all.data(), world.size());
        if (world.rank() == 0) {
          DataParallelReport& d = *s.data_parallel;
          for (int64_t b : all) d.total_inter_node_bytes_per_step += static_cast<double>(b);
          add_link_predictions(d, engine.model(), config, s.backward_ms);
          summary = std::move(s);
        }
      },
      comm::LaunchOptions{config.timeout_s}, &reporter);
  if (is_reporter != nullptr) *is_reporter = reporter;
  return summary;
}

}  // namespace dtrain::train
