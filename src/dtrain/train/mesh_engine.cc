// MeshEngine: the composed DP x TP x PP step (pipeline, gradient finalization around the DP
// sync with ZeRO 0-2, AdamW on the owned part, parameter gather), the layout checks, and the
// SPMD run over either backend with a report gathered through the communicator.
#include "dtrain/train/mesh_engine.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <sstream>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/launch.h"
#include "dtrain/comm/rank_order.h"
#include "dtrain/core/check.h"
#include "dtrain/core/timer.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/plan/comm_model.h"
#include "dtrain/plan/link_traffic.h"
#include "dtrain/plan/memory_model.h"
#include "dtrain/train/pipeline_engine.h"
#include "dtrain/train/step_update.h"
#include "dtrain/train/tensor_parallel_engine.h"

namespace dtrain::train {
namespace {

using parallel::Axis;

std::unique_ptr<comm::Communicator> group_of(comm::Communicator& world,
                                             const parallel::DeviceMesh& mesh, Axis axis) {
  const std::vector<int> members = mesh.group_of(axis, world.rank());
  return world.subgroup(members, parallel::name(axis));
}

parallel::PipelineExecutorConfig executor_config(const MeshEngineConfig& c) {
  parallel::PipelineExecutorConfig e;
  e.schedule = parallel::make_schedule(c.schedule, c.pp, c.microbatches, c.partition.chunks());
  e.partition = c.partition;
  e.micro_batch = c.base.batch / (c.dp * c.microbatches);
  e.seq = c.base.seq;
  return e;
}

double sent(const comm::Communicator* c) {
  return c == nullptr ? 0.0 : static_cast<double>(c->traffic().bytes_sent);
}

comm::LinkBytes links(const comm::Communicator* c, const comm::NodeTopology& topology) {
  return c == nullptr ? comm::LinkBytes{} : comm::link_bytes_sent(*c, topology);
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

MeshEngineConfig mesh_config(const SerialEngineConfig& base, const DataParallelSetup& dp,
                             const TensorParallelSetup& tp, const PipelineSetup& pp,
                             const MeshSetup& mesh) {
  DTRAIN_CHECK(dp.dp >= 1, "--dp must be >= 1, got ", dp.dp);
  DTRAIN_CHECK(dp.zero_stage >= 0 && dp.zero_stage <= 2, "--zero ", dp.zero_stage,
               ": a composed run (--tp or --pp beside --dp, --backend mpi, --ranks-per-node or ",
               "--rank-order) runs ZeRO stages 0, 1 and 2; stage 3 runs with --dp alone on the ",
               "threads backend");
  DTRAIN_CHECK(!tp.sequence_parallel,
               "--sequence-parallel cannot be combined with --dp or --pp yet (run it with --tp "
               "alone)");
  validate_tensor_parallel(tp, base.model);
  DTRAIN_CHECK(dp.grad_accum >= 1, "--grad-accum must be >= 1, got ", dp.grad_accum);
  DTRAIN_CHECK(dp.grad_accum == 1 || pp.microbatches == 1, "--grad-accum ", dp.grad_accum,
               " and --microbatches ", pp.microbatches,
               " both split the batch: with --pp use --microbatches alone");
  MeshEngineConfig c;
  c.base = base;
  c.dp = dp.dp;
  c.tp = tp.tp;
  c.pp = pp.pp;
  c.zero_stage = dp.zero_stage;
  c.rank_order = mesh.rank_order;
  c.microbatches = static_cast<int>(std::max<int64_t>(pp.microbatches, dp.grad_accum));
  DTRAIN_CHECK(base.batch % (int64_t{c.dp} * c.microbatches) == 0, "--batch ", base.batch,
               " does not split into --dp ", c.dp, " x ", c.microbatches,
               " micro-batches of equal size");
  // The pipeline's checks see one DP rank's rows.
  c.partition = validate_pipeline(pp, base.model, base.batch / c.dp);
  c.schedule = parse_schedule(pp.schedule);
  // Throws naming --rank-order when malformed.
  try {
    const parallel::DeviceMesh probe(c.dp, c.tp, c.pp, c.rank_order);
    (void)probe;
  } catch (const Error& e) {
    throw Error(str("--rank-order \"", mesh.rank_order, "\": ", e.what()));
  }
  const int world = c.dp * c.tp * c.pp;
  DTRAIN_CHECK(mesh.ranks_per_node >= 0, "--ranks-per-node must be >= 1, got ",
               mesh.ranks_per_node);
  c.topology = comm::NodeTopology(world, mesh.ranks_per_node > 0 ? mesh.ranks_per_node : world);
  if (!mesh.cluster_path.empty()) c.cluster = plan::read_cluster_file(mesh.cluster_path);
  return c;
}

MeshEngine::MeshEngine(const MeshEngineConfig& config, comm::Communicator& world)
    : config_(config),
      world_(world),
      mesh_(config.dp, config.tp, config.pp, config.rank_order),
      coord_(mesh_.coord_of(world.rank())),
      tp_comm_(group_of(world, mesh_, Axis::tp)),
      pp_comm_(group_of(world, mesh_, Axis::pp)),
      dp_comm_(group_of(world, mesh_, Axis::dp)),
      team_(config.base.threads),
      hooks_(std::make_unique<parallel::TensorParallelGroup>(*tp_comm_)),
      model_(config.base.model, parallel::stage_of(config.partition, coord_.pp), &tracker_,
             hooks_.get(), &team_, config.base.recompute),
      layout_(parallel::shard_layout(model_.param_count(), config.dp)),
      adamw_(config.zero_stage == 0 ? model_.param_count() : layout_.shard, config.base.adamw,
             &tracker_) {
  DTRAIN_CHECK(world.size() == mesh_.world_size(), "the mesh DP(", config.dp, ")-TP(", config.tp,
               ")-PP(", config.pp, ") needs ", mesh_.world_size(), " ranks, the run has ",
               world.size());
  DTRAIN_CHECK(config.zero_stage >= 0 && config.zero_stage <= 2, "mesh engine: ZeRO stage ",
               config.zero_stage, " (0..2)");
  // Every rank draws its tensors from the whole model's seeds by name and keeps its TP slice:
  // the stages' two wte copies and every DP replica start equal, and equal to the serial run.
  model_.init_params(config.base.init_seed);
  if (config.pp > 1 && (coord_.pp == 0 || coord_.pp == config.pp - 1)) {
    parallel::MeshCoord first = coord_, last = coord_;
    first.pp = 0;
    last.pp = config.pp - 1;
    const int members[] = {mesh_.rank_of(first), mesh_.rank_of(last)};
    embedding_comm_ = world.subgroup(members, "embedding");
  }
  if (config.zero_stage == 2) {
    grad_shard_ = Buffer<float>(layout_.shard, MemoryTag::grads, &tracker_);
    model_.release_grads();
  }
  executor_ = std::make_unique<parallel::PipelineExecutor>(*pp_comm_, model_,
                                                           executor_config(config), &tracker_);
  tracker_.reset_peaks();
}

std::string MeshEngine::describe() const {
  std::string s = mesh_.describe(world_.rank());
  if (config_.zero_stage > 0) s += str(" ZeRO-", config_.zero_stage);
  if (config_.pp > 1) s += str(" ", plan::name(config_.schedule));
  s += str(", ", config_.microbatches, " micro-batches of ",
           config_.base.batch / (config_.dp * config_.microbatches));
  return s;
}

std::span<const int32_t> MeshEngine::my_rows(const std::vector<int32_t>& ids) const {
  const int64_t rows = config_.base.batch / config_.dp;
  const auto n = static_cast<size_t>(rows * config_.base.seq);
  return std::span<const int32_t>(ids).subspan(static_cast<size_t>(coord_.dp) * n, n);
}

parallel::GradOwnership MeshEngine::grad_ownership() const {
  parallel::GradOwnership owner;
  owner.coord = coord_;
  owner.zero_stage = config_.zero_stage;
  if (config_.zero_stage > 0) owner.zero_shard = layout_.owned(coord_.dp);
  owner.tied_copy = parallel::holds_tied_copy(model_.stage());
  return owner;
}

// The last stage's TP rank 0 of each DP rank brings its loss, the others 0, so the sum in rank
// order adds the DP ranks' losses in DP order (rank_of grows with dp for a fixed tp and pp).
float MeshEngine::mean_loss(float last_stage_loss) {
  const double mine = coord_.tp == 0 && coord_.pp == config_.pp - 1 ? last_stage_loss : 0.0;
  const double sum = comm::sum_in_rank_order(world_, std::span<const double>(&mine, 1))[0];
  return static_cast<float>(sum / config_.dp);
}

void MeshEngine::sync_gradients() {
  const int64_t n = model_.param_count();
  if (config_.dp == 1) {
    if (config_.zero_stage == 2) {
      std::copy_n(model_.grads().data(), n, grad_shard_.data());
      model_.release_grads();
    }
    return;
  }
  float* grads = model_.grads().data();
  if (config_.zero_stage == 0) {
    comm::all_reduce<float>(*dp_comm_, grads, n, comm::ReduceOp::avg, comm::Algorithm::ring);
    return;
  }
  const comm::Chunk owned = layout_.owned(coord_.dp);
  // Stage 1 reduces in place into its own piece of the full buffer; stage 2 into the shard,
  // then frees the full buffer until the next step.
  float* shard = config_.zero_stage == 1 ? grads + owned.offset : grad_shard_.data();
  parallel::reduce_scatter_to_shard(*dp_comm_, layout_, 0, n, grads, shard, false, scratch_);
  if (config_.zero_stage == 2) model_.release_grads();
}

StepStats MeshEngine::train_step(const Batch& batch, float lr) {
  DTRAIN_CHECK(batch.batch == config_.base.batch && batch.seq == config_.base.seq, "mesh: batch (",
               batch.batch, ", ", batch.seq, ") differs from the configured (", config_.base.batch,
               ", ", config_.base.seq, ")");
  const double tp_before = sent(tp_comm_.get()), pp_before = sent(pp_comm_.get()),
               dp_before = sent(dp_comm_.get()), emb_before = sent(embedding_comm_.get()),
               world_before = sent(&world_);
  const parallel::TensorParallelCounters counters_before = hooks_->counters();
  const comm::LinkBytes world_link_before = links(&world_, config_.topology);
  comm::LinkBytes model_link_before;
  for (const comm::Communicator* c :
       {tp_comm_.get(), pp_comm_.get(), dp_comm_.get(), embedding_comm_.get()}) {
    model_link_before += links(c, config_.topology);
  }

  StepStats stats;
  if (config_.zero_stage == 2) {
    model_.restore_grads();
  } else {
    model_.zero_grads();
  }
  const parallel::PipelineStepRecord record =
      executor_->run(my_rows(batch.inputs), my_rows(batch.targets));
  for (const parallel::MeasuredAction& m : record.actions) {
    const double ms = (m.end_us - m.start_us) * 1e-3;
    if (m.action.kind == parallel::ActionKind::forward) stats.forward_ms += ms;
    if (parallel::is_compute(m.action.kind) && m.action.kind != parallel::ActionKind::forward) {
      stats.backward_ms += ms;
    }
  }
  Stopwatch watch;
  // The finalization (parallel/finalize_grads.h) around the DP sync: the tied wte and the SP
  // LayerNorms (none yet: mesh_config refuses SP) while every rank holds its whole gradient,
  // then the norm of the owned parts over the world.
  parallel::sum_tied_embedding_grads(model_, embedding_comm_.get());
  parallel::all_reduce_sequence_parallel_norm_grads(model_, tp_comm_.get());
  sync_gradients();
  const bool in_shard = config_.zero_stage == 2;  // the gradient lives in the shard
  const parallel::GradOwnership owner = grad_ownership();
  const parallel::GradNorm norm = parallel::global_grad_norm(
      parallel::owned_sum_of_squares(model_.param_table(), owner,
                                     in_shard ? grad_shard_.span() : model_.grads(),
                                     in_shard ? owner.zero_shard.offset : 0),
      &world_, config_.base.grad_clip);
  stats.grad_norm = norm.norm;
  stats.loss = mean_loss(record.loss);
  check_not_diverged(stats);
  if (config_.zero_stage == 0) {
    adamw_update_on_team(&team_, adamw_, model_.params(), model_.grads(), lr, norm.clip_scale);
  } else {
    const comm::Chunk owned = layout_.owned(coord_.dp);
    std::span<float> params = model_.params().subspan(static_cast<size_t>(owned.offset),
                                                      static_cast<size_t>(owned.count));
    std::span<const float> grads =
        config_.zero_stage == 2
            ? std::span<const float>(grad_shard_.span()).first(static_cast<size_t>(owned.count))
            : std::span<const float>(model_.grads())
                  .subspan(static_cast<size_t>(owned.offset), static_cast<size_t>(owned.count));
    adamw_update_on_team(&team_, adamw_, params, grads, lr, norm.clip_scale);
    if (config_.dp > 1) {
      float* p = model_.params().data();
      parallel::gather_from_shards(*dp_comm_, layout_, 0, model_.param_count(), p + owned.offset,
                                   p);
    }
  }
  stats.optimizer_ms = watch.elapsed_us() * 1e-3;

  const parallel::TensorParallelCounters& after = hooks_->counters();
  tp_block_bytes_ += static_cast<double>(
      (after.block_forward.traffic.bytes_sent - counters_before.block_forward.traffic.bytes_sent) +
      (after.block_backward.traffic.bytes_sent -
       counters_before.block_backward.traffic.bytes_sent));
  tp_vocab_bytes_ += static_cast<double>(after.vocab.traffic.bytes_sent -
                                         counters_before.vocab.traffic.bytes_sent);
  const double tp_total = sent(tp_comm_.get()) - tp_before;
  (void)tp_total;
  pp_bytes_ += sent(pp_comm_.get()) - pp_before;
  dp_bytes_ += sent(dp_comm_.get()) - dp_before;
  embedding_bytes_ += sent(embedding_comm_.get()) - emb_before;
  other_bytes_ += sent(&world_) - world_before;
  comm::LinkBytes model_link_after;
  for (const comm::Communicator* c :
       {tp_comm_.get(), pp_comm_.get(), dp_comm_.get(), embedding_comm_.get()}) {
    model_link_after += links(c, config_.topology);
  }
  model_link_bytes_ += model_link_after - model_link_before;
  link_bytes_ += model_link_after - model_link_before;
  link_bytes_ += links(&world_, config_.topology) - world_link_before;
  ++steps_;
  return stats;
}

float MeshEngine::eval_loss(const Batch& batch) {
  return mean_loss(executor_->evaluate(my_rows(batch.inputs), my_rows(batch.targets)));
}

MeshRankRow MeshEngine::report_row() const {
  MeshRankRow r;
  r.rank = world_.rank();
  r.coords = str("dp", coord_.dp, " tp", coord_.tp, " pp", coord_.pp);
  r.node = config_.topology.node_of(world_.global_rank());
  r.layers = parallel::layer_ranges(config_.partition, coord_.pp);
  r.param_count = model_.param_count();
  r.params_bytes = tracker_.current_bytes(MemoryTag::params);
  r.grads_bytes = tracker_.current_bytes(MemoryTag::grads);
  r.optimizer_bytes = tracker_.current_bytes(MemoryTag::optimizer);
  r.grads_peak_bytes = tracker_.peak_bytes(MemoryTag::grads);
  r.activations_peak_bytes = tracker_.peak_bytes(MemoryTag::activations);
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  r.tp_bytes = tp_block_bytes_ / n;
  r.tp_vocab_bytes = tp_vocab_bytes_ / n;
  r.pp_bytes = pp_bytes_ / n;
  r.dp_bytes = dp_bytes_ / n;
  r.embedding_bytes = embedding_bytes_ / n;
  r.other_bytes = other_bytes_ / n;
  r.intra_node_bytes = static_cast<double>(link_bytes_.intra_node) / n;
  r.inter_node_bytes = static_cast<double>(link_bytes_.inter_node) / n;

  // The formulas (plan/), for the same quantities.
  const model::GptConfig& m = config_.base.model;
  const parallel::PipelineExecutorConfig& e = executor_->config();
  const int64_t stage_blocks = model_.stage().layer_count();
  r.tp_formula = plan::tp_traffic_per_layer(e.micro_batch, e.seq, m.channels, sizeof(float),
                                            config_.tp, false, plan::Recompute::none)
                     .bytes_sent *
                 static_cast<double>(stage_blocks * config_.microbatches);
  int64_t sends = 0;
  for (const parallel::Action& a : e.schedule.per_rank[static_cast<size_t>(coord_.pp)]) {
    sends += parallel::is_send(a.kind) ? 1 : 0;
  }
  r.pp_formula =
      static_cast<double>(sends) *
      plan::pp_bytes_per_microbatch(e.micro_batch, e.seq, m.channels, sizeof(float), 1, false);
  r.dp_formula = plan::dp_traffic_per_step(model_.param_count(), config_.dp, config_.zero_stage,
                                           plan::kFp32Adam)
                     .bytes_sent;
  if (embedding_comm_ != nullptr) {
    const model::ParamTable& table = model_.param_table();
    const double wte_bytes =
        static_cast<double>(table[static_cast<size_t>(table.index_of("wte"))].count) *
        sizeof(float);
    r.embedding_formula = plan::collective_traffic(comm::CollectiveOp::all_reduce,
                                                   parallel::kTiedEmbeddingAlgorithm, wte_bytes, 2)
                              .bytes_sent;
  }
  r.tp_vocab_formula =
      plan::traffic_of(plan::tp_vocab_collectives(e.micro_batch, e.seq, m.channels, sizeof(float),
                                                  model_.stage().embedding, model_.stage().head),
                       config_.tp)
          .bytes_sent *
      config_.microbatches;
  r.model_intra_node_bytes = static_cast<double>(model_link_bytes_.intra_node) / n;
  r.model_inter_node_bytes = static_cast<double>(model_link_bytes_.inter_node) / n;

  // Where the formula bytes go: a ring sends everything to the rank's successor in its group.
  const int me = world_.global_rank();
  auto to = [&](int peer, double bytes) {
    if (bytes <= 0) return;
    (config_.topology.link(me, peer) == comm::LinkClass::intra_node
         ? r.predicted_intra_node_bytes
         : r.predicted_inter_node_bytes) += bytes;
  };
  auto successor = [&](Axis axis) {
    const std::vector<int> g = mesh_.group_of(axis, me);
    const int at = coord_[axis];
    return g[static_cast<size_t>((at + 1) % static_cast<int>(g.size()))];
  };
  to(successor(Axis::tp), r.tp_formula + r.tp_vocab_formula);
  to(successor(Axis::dp), r.dp_formula);
  if (embedding_comm_ != nullptr) {
    parallel::MeshCoord other = coord_;
    other.pp = coord_.pp == 0 ? config_.pp - 1 : 0;
    to(mesh_.rank_of(other), r.embedding_formula);
  }
  const double message =
      plan::pp_bytes_per_microbatch(e.micro_batch, e.seq, m.channels, sizeof(float), 1, false);
  for (const parallel::Action& a : e.schedule.per_rank[static_cast<size_t>(coord_.pp)]) {
    if (!parallel::is_send(a.kind)) continue;
    parallel::MeshCoord peer = coord_;
    const int P = config_.pp;
    peer.pp = a.kind == parallel::ActionKind::send_activation ? (coord_.pp + 1) % P
                                                              : (coord_.pp + P - 1) % P;
    to(mesh_.rank_of(peer), message);
  }

  if (config_.cluster) {
    // The link a group's collectives run on: the inter-node one when the group spans nodes.
    // Flows leaving this rank's node at once for `axis`: every group of the axis runs its
    // collective together, and a member whose ring successor sits on another node is one flow.
    const int my_node = config_.topology.node_of(me);
    auto flows_out = [&](Axis axis) {
      int flows = 0;
      for (const std::vector<int>& g : mesh_.groups(axis)) {
        for (size_t i = 0; i < g.size(); ++i) {
          const int next = g[(i + 1) % g.size()];
          flows +=
              config_.topology.node_of(g[i]) == my_node && config_.topology.node_of(next) != my_node
                  ? 1
                  : 0;
        }
      }
      return flows;
    };
    // The link a group's collectives run on: the inter-node one when the group spans nodes,
    // its uplink shared by the flows that leave the node together.
    plan::Link shared;
    auto link_of = [&](const std::vector<int>& group, Axis axis) -> const plan::Link& {
      if (config_.topology.nodes_of(group).size() <= 1) return config_.cluster->intra_node;
      shared = config_.cluster->inter_node;
      shared.bandwidth_bytes_per_s = plan::shared_uplink_bandwidth(
          shared.bandwidth_bytes_per_s, config_.topology.ranks_per_node(), flows_out(axis));
      return shared;
    };
    double seconds = 0;
    auto price = [&](const std::vector<plan::CollectiveCall>& calls, Axis axis, double times) {
      const std::vector<int> g = mesh_.group_of(axis, me);
      for (const plan::CollectiveCall& c : calls) {
        seconds += times * plan::collective_cost(c, comm::Algorithm::ring,
                                                 static_cast<int>(g.size()), link_of(g, axis))
                               .time_s;
      }
    };
    const auto M = static_cast<double>(config_.microbatches);
    price(plan::tp_collectives_per_layer(e.micro_batch, e.seq, m.channels, sizeof(float), false,
                                         plan::Recompute::none),
          Axis::tp, M * static_cast<double>(stage_blocks));
    price(plan::tp_vocab_collectives(e.micro_batch, e.seq, m.channels, sizeof(float),
                                     model_.stage().embedding, model_.stage().head),
          Axis::tp, M);
    price(plan::dp_collectives(model_.param_count(), config_.zero_stage, plan::kFp32Adam), Axis::dp,
          1);
    if (embedding_comm_ != nullptr) {
      parallel::MeshCoord other = coord_;
      other.pp = coord_.pp == 0 ? config_.pp - 1 : 0;
      std::vector<int> pair = {me, mesh_.rank_of(other)};
      std::sort(pair.begin(), pair.end());
      seconds +=
          plan::collective_cost(comm::CollectiveOp::all_reduce, parallel::kTiedEmbeddingAlgorithm,
                                r.embedding_formula, 2, link_of(pair, Axis::pp))
              .time_s;
    }
    if (config_.pp > 1) {
      const plan::Link& link = link_of(mesh_.group_of(Axis::pp, me), Axis::pp);
      seconds += static_cast<double>(sends) *
                 (link.latency_us * 1e-6 + message / link.bandwidth_bytes_per_s);
    }
    r.predicted_comm_ms = seconds * 1e3;
  }
  return r;
}

StateLayout MeshEngine::state_layout() const {
  return {config_.dp, config_.tp, config_.pp, config_.zero_stage};
}

namespace {

// The part of a TP slice's serial ranges (`ranges`, covering the shard's elements in order)
// that holds the shard's elements [begin, end).
std::vector<model::FlatRange> sub_ranges(const std::vector<model::FlatRange>& ranges, int64_t begin,
                                         int64_t end) {
  std::vector<model::FlatRange> out;
  int64_t at = 0;  // shard element where the current range starts
  for (const model::FlatRange& r : ranges) {
    const int64_t lo = std::max(begin, at), hi = std::min(end, at + r.count);
    if (lo < hi) out.push_back({r.offset + (lo - at), hi - lo});
    at += r.count;
  }
  return out;
}

}  // namespace

comm::Chunk MeshEngine::moment_range() const {
  if (config_.zero_stage == 0) return {0, model_.param_count()};
  return layout_.owned(coord_.dp);
}

RankState MeshEngine::export_state() {
  RankState s;
  const model::GptConfig& g = config_.base.model;
  const model::ParamTable serial = model::gpt_param_table(g);
  const bool tied_copy = config_.pp > 1 && model_.stage().head && !model_.stage().embedding;
  const comm::Chunk held = moment_range();
  const int64_t m_begin = held.offset, m_end = held.offset + held.count;
  for (const model::ParamTensor& local : model_.param_table().tensors()) {
    if (coord_.tp != 0 && model::tp_split_of(local.name) == model::TpSplit::replicated) continue;
    if (tied_copy && local.name == "wte") continue;
    const model::ParamTensor& whole = serial[static_cast<size_t>(serial.index_of(local.name))];
    const std::vector<model::FlatRange> ranges =
        model::tp_slice_ranges(whole, g, config_.tp, coord_.tp);
    int64_t real = 0;  // the shard's elements that are serial elements (no vocabulary padding)
    for (const model::FlatRange& r : ranges) real += r.count;
    const std::span<const float> params = model_.params();
    if (coord_.dp == 0) {
      StatePiece p{local.name, StateKind::param, ranges, {}};
      p.data.assign(params.begin() + local.offset, params.begin() + local.offset + real);
      s.pieces.push_back(std::move(p));
    }
    if (config_.zero_stage == 0 && coord_.dp != 0) continue;
    // The tensor's local elements inside this rank's moment range, as shard positions.
    const int64_t lo = std::max<int64_t>(0, m_begin - local.offset);
    const int64_t hi = std::min<int64_t>(real, m_end - local.offset);
    if (lo >= hi) continue;
    const std::vector<model::FlatRange> part = sub_ranges(ranges, lo, hi);
    const int64_t at = local.offset + lo - m_begin;  // index into the moment buffers
    for (const auto& [kind, values] :
         {std::pair<StateKind, std::span<float>>{StateKind::adam_m, adamw_.m()},
          std::pair<StateKind, std::span<float>>{StateKind::adam_v, adamw_.v()}}) {
      StatePiece p{local.name, kind, part, {}};
      p.data.assign(values.begin() + at, values.begin() + at + (hi - lo));
      s.pieces.push_back(std::move(p));
    }
  }
  s.adam_step = adamw_.step_count();
  return s;
}

void MeshEngine::import_state(const SerialState& state) {
  const model::GptConfig& g = config_.base.model;
  const comm::Chunk held = moment_range();
  const int64_t m_begin = held.offset, m_end = held.offset + held.count;
  for (const model::ParamTensor& local : model_.param_table().tensors()) {
    const int index = state.table.index_of(local.name);
    const model::ParamTensor& whole = state.table[static_cast<size_t>(index)];
    for (StateKind kind : {StateKind::param, StateKind::adam_m, StateKind::adam_v}) {
      const std::vector<float> slice =
          model::tp_slice(whole, state.tensor(whole, kind), g, config_.tp, coord_.tp);
      DTRAIN_CHECK(static_cast<int64_t>(slice.size()) == local.count, "checkpoint: tensor ",
                   local.name, " slices to ", slice.size(), " elements, the rank holds ",
                   local.count);
      if (kind == StateKind::param) {
        std::copy(slice.begin(), slice.end(), model_.params().begin() + local.offset);
        continue;
      }
      std::span<float> moments = kind == StateKind::adam_m ? adamw_.m() : adamw_.v();
      const int64_t lo = std::max(local.offset, m_begin);
      const int64_t hi = std::min(local.offset + local.count, m_end);
      for (int64_t e = lo; e < hi; ++e) {
        moments[static_cast<size_t>(e - m_begin)] = slice[static_cast<size_t>(e - local.offset)];
      }
    }
  }
  adamw_.set_step_count(state.adam_step);
}

namespace {

// A rank's row as numbers (the strings are rebuilt from the rank), for an all-gather: its
// whole-number fields, then its figures, in this order.
constexpr int64_t MeshRankRow::*kRowCounts[] = {
    &MeshRankRow::param_count,      &MeshRankRow::params_bytes,
    &MeshRankRow::grads_bytes,      &MeshRankRow::optimizer_bytes,
    &MeshRankRow::grads_peak_bytes, &MeshRankRow::activations_peak_bytes};
constexpr double MeshRankRow::*kRowFigures[] = {&MeshRankRow::tp_bytes,
                                                &MeshRankRow::tp_vocab_bytes,
                                                &MeshRankRow::pp_bytes,
                                                &MeshRankRow::dp_bytes,
                                                &MeshRankRow::embedding_bytes,
                                                &MeshRankRow::other_bytes,
                                                &MeshRankRow::tp_formula,
                                                &MeshRankRow::pp_formula,
                                                &MeshRankRow::dp_formula,
                                                &MeshRankRow::embedding_formula,
                                                &MeshRankRow::tp_vocab_formula,
                                                &MeshRankRow::intra_node_bytes,
                                                &MeshRankRow::inter_node_bytes,
                                                &MeshRankRow::model_intra_node_bytes,
                                                &MeshRankRow::model_inter_node_bytes,
                                                &MeshRankRow::predicted_intra_node_bytes,
                                                &MeshRankRow::predicted_inter_node_bytes,
                                                &MeshRankRow::predicted_comm_ms};
constexpr int kRowFields = std::size(kRowCounts) + std::size(kRowFigures) + 1;  // + node

std::array<double, kRowFields> pack(const MeshRankRow& r) {
  std::array<double, kRowFields> f{};
  size_t i = 0;
  for (int64_t MeshRankRow::*m : kRowCounts) f[i++] = static_cast<double>(r.*m);
  for (double MeshRankRow::*m : kRowFigures) f[i++] = r.*m;
  f[i] = r.node;
  return f;
}

MeshRankRow unpack(const double* f, int rank, const parallel::DeviceMesh& mesh,
                   const parallel::StagePartition& partition) {
  MeshRankRow r;
  r.rank = rank;
  const parallel::MeshCoord c = mesh.coord_of(rank);
  r.coords = str("dp", c.dp, " tp", c.tp, " pp", c.pp);
  r.layers = parallel::layer_ranges(partition, c.pp);
  size_t i = 0;
  for (int64_t MeshRankRow::*m : kRowCounts) r.*m = static_cast<int64_t>(f[i++]);
  for (double MeshRankRow::*m : kRowFigures) r.*m = f[i++];
  r.node = static_cast<int>(f[i]);
  return r;
}

}  // namespace

MeshReport gather_mesh_report(MeshEngine& engine, comm::Communicator& world,
                              const MeshEngineConfig& config, const MeshSetup& setup) {
  const std::array<double, kRowFields> mine = pack(engine.report_row());
  const std::vector<double> all = comm::gather_in_rank_order(world, mine);
  MeshReport report;
  report.dp = config.dp;
  report.tp = config.tp;
  report.pp = config.pp;
  report.zero_stage = config.zero_stage;
  report.backend = setup.backend;
  report.rank_order = config.rank_order;
  report.schedule = std::string(plan::name(config.schedule));
  report.microbatches = config.microbatches;
  report.micro_batch = config.base.batch / (config.dp * config.microbatches);
  report.ranks_per_node = setup.ranks_per_node;
  report.nodes = config.topology.nodes();
  for (int r = 0; r < world.size(); ++r) {
    report.ranks.push_back(unpack(all.data() + static_cast<size_t>(r) * kRowFields, r,
                                  engine.mesh(), config.partition));
    const MeshRankRow& row = report.ranks.back();
    report.predicted_comm_ms = std::max(report.predicted_comm_ms, row.predicted_comm_ms);
    report.inter_node_bytes += row.model_inter_node_bytes;
    report.predicted_inter_node_bytes += row.predicted_inter_node_bytes;
  }
  if (config.cluster) report.cluster = setup.cluster_path;
  if (setup.ranks_per_node > 0 && !config.topology.single_node()) {
    for (Axis axis : {Axis::tp, Axis::dp, Axis::pp}) {
      if (engine.mesh().size(axis) == 1) continue;
      for (const std::vector<int>& g : engine.mesh().groups(axis)) {
        const std::vector<int> nodes = config.topology.nodes_of(g);
        if (nodes.size() > 1)
          report.crossings.push_back({std::string(parallel::name(axis)), g, nodes});
      }
    }
    for (const MeshGroupCrossing& c : report.crossings) {
      if (c.axis != "tp") continue;
      report.warnings.push_back(
          str("TP group {", join_ints(c.ranks), "} spans nodes {", join_ints(c.nodes),
              "}: its 4 all-reduces per block and micro-batch (the activations, on the critical "
              "path of every layer) cross the inter-node link; keep TP inside a node (--rank-order "
              "tp-dp-pp with --tp dividing --ranks-per-node)"));
      break;
    }
  }
  return report;
}

TrainSummary run_mesh(const SerialEngineConfig& base, const DataParallelSetup& dp,
                      const TensorParallelSetup& tp, const PipelineSetup& pp, const MeshSetup& mesh,
                      const TrainerConfig& trainer, const TokenSplit& data, TrainObserver* observer,
                      bool* is_reporter) {
  const MeshEngineConfig config = mesh_config(base, dp, tp, pp, mesh);
  const std::optional<comm::Backend> backend = comm::parse_backend(mesh.backend);
  DTRAIN_CHECK(backend.has_value(), "--backend \"", mesh.backend, "\" is not one of threads, mpi");
  TrainSummary summary;
  bool reporter = false;
  comm::run_on_backend(
      *backend, config.dp * config.tp * config.pp,
      [&](comm::Communicator& world) {
        MeshEngine engine(config, world);
        Trainer loop(trainer, engine, data, world.rank() == 0 ? observer : nullptr);
        TrainSummary s = loop.run();
        MeshReport report = gather_mesh_report(engine, world, config, mesh);
        if (world.rank() == 0) {
          s.mesh = std::move(report);
          summary = std::move(s);
        }
      },
      comm::LaunchOptions{mesh.timeout_s}, &reporter);
  if (is_reporter != nullptr) *is_reporter = reporter;
  return summary;
}

}  // namespace dtrain::train
