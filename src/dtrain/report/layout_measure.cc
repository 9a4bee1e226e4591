// The layout report's measuring half: this rank's figures per step (memory, bytes on each axis,
// time) beside the plan/ formulas for the same layout, as one RankRow. Gathering the rows and
// presenting them live apart (layout_report.cc, layout_report_output.cc).
#include <algorithm>
#include <map>
#include <tuple>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/check.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/link_traffic.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/model/moe_dispatch.h"
#include "dtrain/model/param_table.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/report/layout_report.h"
#include "dtrain/report/rank_description.h"

namespace dtrain::train {
namespace {

using parallel::Axis;

int64_t count_sends(const plan::PipelineSchedule& s, int rank) {
  int64_t sends = 0;
  for (const plan::Action& a : s.per_rank[static_cast<size_t>(rank)]) {
    sends += plan::is_send(a.kind) ? 1 : 0;
  }
  return sends;
}

bool split_backward(const plan::PipelineSchedule& s) {
  for (const std::vector<plan::Action>& list : s.per_rank) {
    for (const plan::Action& a : list) {
      if (a.kind == plan::ActionKind::backward_input) return true;
    }
  }
  return false;
}

// The part of a ZeRO-3 rank's measured working set above the plan that is one unit's gradient
// held by the communication thread, still reduce-scattering it when the next unit's backward
// bound a fresh buffer: 0 when none is, else that unit's bytes and name. Whether the overlap
// happens depends on timing, so the plan does not count it; the report names it instead.
// `grads_above_plan` is the grads tag's own excess, so a difference in the weights held is never
// mistaken for a gradient of the same size.
std::pair<int64_t, std::string> in_flight_gradient(const parallel::StageUnits& units,
                                                   int64_t above_plan, int64_t grads_above_plan) {
  if (above_plan <= 0 || grads_above_plan != above_plan) return {0, ""};
  for (int i = 0; i < units.size(); ++i) {
    if (i != units.embeddings() && 4 * units[i].count == above_plan) {
      return {above_plan, units[i].name};
    }
  }
  return {0, ""};
}

// The stage's DP collectives in the closed form's terms (plan::StageDataParallel): its pieces, the
// deferred tied wte under a pipeline, and what ZeRO-3 gathers again in backward and reruns.
plan::StageDataParallel stage_data_parallel(const Engine& e, bool split) {
  const EngineConfig& c = e.config();
  const model::GptModel& model = e.model();
  const parallel::StageUnits& units = e.executor().units();
  plan::StageDataParallel stage;
  stage.params = model.param_count();
  stage.zero_stage = c.zero_stage;
  stage.microbatches = c.microbatches;
  const int emb = units.embeddings();
  if (c.pp > 1 && emb >= 0) stage.deferred = units[emb].count;
  // ZeRO-3: the embedding's backward reads no weights; the head's does (the tied wte).
  if (emb >= 0 && model.stage().embedding && !model.stage().head) {
    stage.backward_gathered = stage.params - units[emb].count;
  }
  if (split && c.step.recompute == Recompute::full) {
    for (const parallel::GradUnit& u : units.units()) {
      if (u.name.starts_with("h.")) stage.rerun_gathered += u.count;
    }
  }
  return stage;
}

// What the rank ran that the traffic formulas take as given: the rows its experts computed, the
// LayerNorm pieces it holds, its DP buckets and gathers exactly as the engine cut them (rank by
// rank; under EP the dense and the expert pieces apart), the tied wte, and EP's exchanges by
// the formulas fed the measured routing.
plan::EngineRankPieces measured_pieces(const Engine& e, bool split) {
  const EngineConfig& c = e.config();
  const parallel::MeshCoord me = e.coord();
  const model::GptModel& model = e.model();
  const parallel::StageUnits& units = e.executor().units();
  const EngineTraffic& t = e.traffic();
  plan::EngineRankPieces x;
  x.steps = e.steps() > 0 ? static_cast<double>(e.steps()) : 1.0;
  x.tp_rank = me.tp;
  x.expert_rows = t.moe_expert_rows;
  if (c.sequence_parallel && c.tp > 1) {
    // Each LN tensor's elements this rank holds (all of them at ZeRO 0, its shard's at 1-3);
    // under EP with ZeRO each run of the rank's two shards is summed on its own.
    for (const comm::Chunk& held : e.data_parallel().owned_runs()) {
      for (const model::ParamTensor& p : model.param_table().tensors()) {
        const bool layernorm = p.name.find("ln1.") != std::string::npos ||
                               p.name.find("ln2.") != std::string::npos ||
                               p.name.starts_with("lnf.");
        const int64_t lo = std::max(held.offset, p.offset);
        const int64_t hi = std::min(held.offset + held.count, p.offset + p.count);
        if (layernorm && lo < hi) x.layernorm_pieces.push_back(hi - lo);
      }
    }
  }
  x.kv_copies = c.step.model.kv_head_copies(c.tp);
  x.kv_copy_rank = me.tp % x.kv_copies;
  const parallel::KvCopyRows kv = parallel::kv_copy_rows(c.step.model, c.tp);
  for (const comm::Chunk& held :
       kv.count > 0 ? e.data_parallel().owned_runs() : std::vector<comm::Chunk>{}) {
    for (const model::ParamTensor& p : model.param_table().tensors()) {
      const auto [offset, count] = parallel::kv_copy_part(p, kv);
      const int64_t lo = std::max(held.offset, p.offset + offset);
      const int64_t hi = std::min(held.offset + held.count, p.offset + offset + count);
      if (count > 0 && lo < hi) x.kv_copy_pieces.push_back(hi - lo);
    }
  }
  const plan::StageDataParallel stage = stage_data_parallel(e, split);
  const int64_t params = model.param_count();
  const int emb = units.embeddings();
  plan::StageDataParallelRank exact;
  exact.params = params;
  // Gradients are averaged (and ZeRO shards) over the DP x CP group.
  const std::vector<int> data_group = e.mesh().group_of(Axis::dp, Axis::cp, e.global_rank());
  exact.ranks = c.dp * c.cp;
  exact.rank = static_cast<int>(std::find(data_group.begin(), data_group.end(), e.global_rank()) -
                                data_group.begin());
  exact.zero_stage = c.zero_stage;
  exact.microbatches = c.microbatches;
  for (const parallel::Bucket& bk : e.data_parallel().buckets()) {
    exact.buckets.push_back({bk.offset, bk.count});
  }
  if (stage.deferred > 0 && !exact.buckets.empty()) {
    exact.deferred_bucket = static_cast<int>(exact.buckets.size()) - 1;
  }
  if (c.zero_stage == 3) {
    for (int u = 0; u < units.size(); ++u) {
      const comm::Chunk range{units[u].offset, units[u].count};
      exact.forward_gathers.push_back(range);
      const bool embedding_only = u == emb && model.stage().embedding && !model.stage().head;
      if (!embedding_only) exact.backward_gathers.push_back(range);
      if (split && c.step.recompute == Recompute::full && units[u].name.starts_with("h.")) {
        exact.rerun_gathers.push_back(range);
      }
    }
  }
  x.dp_algorithm = e.data_parallel().algorithm();
  x.direct_slot_bytes = e.data_parallel().direct_slot_bytes();
  x.dp_dense = exact;
  if (c.ep > 1) {
    // EP: each bucket's dense pieces all-reduced (ZeRO 0) or reduce-scattered (1-3) over DP,
    // its expert pieces over the expert-DP group (ring), each piece one collective; with ZeRO
    // each kind is sharded in its own packed index space, and the parameter gathers (after the
    // update at 1-2, per unit at 3) move each run of the flat buffer over its own group.
    std::vector<comm::Chunk> expert_ranges;
    int64_t expert_params = 0;
    for (const model::ParamTensor& tensor : model.param_table().tensors()) {
      if (model::is_expert_tensor(tensor.name)) {
        expert_ranges.push_back({tensor.offset, tensor.count});
        expert_params += tensor.count;
      }
    }
    plan::StageDataParallelRank dense = exact, experts = exact;
    using Rank = plan::StageDataParallelRank;
    for (Rank* k : {&dense, &experts}) {
      k->buckets.clear();
      k->deferred_bucket = -1;
      k->forward_gathers.clear();
      k->backward_gathers.clear();
      k->rerun_gathers.clear();
    }
    experts.ranks = c.dp / c.ep;
    experts.rank = me.dp / c.ep;
    const bool packed = c.zero_stage > 0;
    if (packed) {
      experts.params = expert_params;
      dense.params = params - expert_params;
    }
    // A piece in its kind's index space: flat at ZeRO 0 (no shards), packed with ZeRO.
    auto add = [&](auto member, const comm::Chunk& range) {
      for (const parallel::BucketPiece& p : parallel::split_at_experts(range, expert_ranges)) {
        ((p.expert ? experts : dense).*member).push_back({packed ? p.packed : p.offset, p.count});
      }
    };
    for (const comm::Chunk& bucket : exact.buckets) add(&Rank::buckets, bucket);
    for (const comm::Chunk& u : exact.forward_gathers) add(&Rank::forward_gathers, u);
    for (const comm::Chunk& u : exact.backward_gathers) add(&Rank::backward_gathers, u);
    for (const comm::Chunk& u : exact.rerun_gathers) add(&Rank::rerun_gathers, u);
    if (c.zero_stage == 1 || c.zero_stage == 2) {
      add(&Rank::update_gathers, comm::Chunk{0, params});
    }
    // The deferred tied wte (dense, one piece) is the last bucket of both lists.
    if (exact.deferred_bucket >= 0) {
      dense.deferred_bucket = static_cast<int>(dense.buckets.size()) - 1;
    }
    x.dp_dense = dense;
    x.dp_experts = experts;
    x.has_expert_dp = true;
  }
  if (e.has_embedding_group()) {
    const model::ParamTable& table = model.param_table();
    x.tied_embedding = table[static_cast<size_t>(table.index_of("wte"))].count;
    x.tied_embedding_algorithm = parallel::kTiedEmbeddingAlgorithm;
  }
  x.ep_counts = t.ep_plan_counts;
  x.ep_dispatch_forward = t.ep_plan_dispatch_forward;
  x.ep_combine = t.ep_plan_combine;
  x.ep_dispatch = t.ep_plan_dispatch;
  return x;
}

}  // namespace

// This rank's measured figures per step and the plan/ formulas beside them.
RankRow measure_rank(const Engine& e) {
  const EngineConfig& c = e.config();
  const parallel::MeshCoord me = e.coord();
  const model::GptModel& model = e.model();
  const parallel::PipelineExecutor& ex = e.executor();
  const MemoryTracker& mem = e.memory();
  RankRow r;
  r.rank = e.global_rank();
  r.coords = c.cp > 1 ? str("dp", me.dp, " cp", me.cp, " tp", me.tp, " pp", me.pp)
                      : str("dp", me.dp, " tp", me.tp, " pp", me.pp);
  r.node = c.topology.node_of(r.rank);
  r.layers = parallel::layer_ranges(c.partition, me.pp);
  r.param_count = model.param_count();
  r.phases = median_phases(e.phases());
  // Under EP the rank's experts are sharded over the expert-DP group, the rest over DP x CP.
  int64_t expert_params = 0;
  for (const model::ParamTensor& t : model.param_table().tensors()) {
    if (c.ep > 1 && model::is_expert_tensor(t.name)) expert_params += t.count;
  }
  const parallel::StageUnits& units = ex.units();
  const plan::PipelineSchedule& schedule = ex.schedule();
  const bool split = split_backward(schedule);
  const parallel::ScheduleReport sim = parallel::simulate_schedule(schedule);
  const parallel::RankReport& rr = sim.ranks[static_cast<size_t>(me.pp)];
  // The rank as the formulas read it: its own table's counts and the executor's schedule.
  plan::EngineRank described =
      describe_rank(c, me.pp, stage_param_counts(units, r.param_count, expert_params));
  described.split_backward = split;
  described.inflight = split ? rr.peak_weight_stash : rr.peak_inflight;
  const plan::RankPrediction plan = plan::predict_rank(described, measured_pieces(e, split));

  const plan::ModelStateBytes& formula = plan.states;
  for (const auto& [tag, bytes] :
       {std::pair{MemoryTag::params, formula.params}, std::pair{MemoryTag::grads, formula.grads},
        std::pair{MemoryTag::optimizer, formula.optimizer}}) {
    r.state.push_back({tag, mem.current_bytes(tag), mem.peak_bytes(tag), bytes});
  }

  // Activations.
  r.activations_peak_bytes = mem.peak_bytes(MemoryTag::activations);
  r.microbatch_activation_bytes = ex.microbatch_activation_bytes();
  r.planned_microbatch_activation_bytes = plan.microbatch_activation_bytes;
  r.peak_inflight_bytes = e.last_step().peak_inflight_bytes;
  r.measured_inflight = static_cast<double>(r.peak_inflight_bytes) /
                        static_cast<double>(std::max<int64_t>(1, r.microbatch_activation_bytes));
  r.checker_inflight = described.inflight;
  r.planned_activations_peak_bytes = plan.activations_peak_bytes;

  // ZeRO-3's working set: the gathered units above the shards.
  if (c.zero_stage == 3) {
    r.gathered_peak_bytes = mem.peak_bytes(MemoryTag::params) - formula.params +
                            mem.peak_bytes(MemoryTag::grads) - formula.grads;
    r.gathered_formula_bytes = plan.working_set_bytes;
    // The plan's gradient part: the embeddings' and the largest unit's, fp32 in both precisions.
    int64_t emb = 0, largest = 0;
    for (int i = 0; i < units.size(); ++i) {
      (i == units.embeddings() ? emb : largest) =
          std::max(i == units.embeddings() ? emb : largest, units[i].count);
    }
    const int64_t grads_above = mem.peak_bytes(MemoryTag::grads) - formula.grads;
    std::tie(r.in_flight_grad_bytes, r.in_flight_grad_unit) = in_flight_gradient(
        units, r.gathered_peak_bytes - r.gathered_formula_bytes, grads_above - 4 * (emb + largest));
  }

  // Traffic per step, measured beside the plan, site by site.
  const double n = e.steps() > 0 ? static_cast<double>(e.steps()) : 1.0;
  const EngineTraffic& t = e.traffic();
  const plan::RankTraffic measured{.tp_block = t.tp_block / n,
                                   .tp_vocab = t.tp_vocab / n,
                                   .tp_regather = t.tp_regather / n,
                                   .tp_recompute = t.tp_recompute / n,
                                   .tp_norms = t.tp_norms / n,
                                   .tp_kv_copies = t.tp_kv_copies / n,
                                   .pp = t.pp / n,
                                   .dp = t.dp / n,
                                   .embedding = t.embedding / n,
                                   .ep = static_cast<double>(t.ep.total().bytes_moved()) / n};
  for (const auto& [site, field] : plan::kRankTrafficSites) {
    r.traffic.push_back({std::string(site), measured.*field, plan.traffic.*field});
  }
  r.other = t.other / n;
  r.intra_node_bytes = static_cast<double>(t.links.intra_node) / n;
  r.inter_node_bytes = static_cast<double>(t.links.inter_node) / n;
  r.model_intra_node_bytes = static_cast<double>(t.model_links.intra_node) / n;
  r.model_inter_node_bytes = static_cast<double>(t.model_links.inter_node) / n;
  r.dp_comm_ms = e.dp_comm_us() * 1e-3 / n;
  r.dp_hidden_ms = e.dp_hidden_us() * 1e-3 / n;
  r.dp_overlap_share = e.dp_comm_us() > 0 ? e.dp_hidden_us() / e.dp_comm_us() : 0.0;
  for (const parallel::MeasuredAction& m : e.last_step().actions) {
    if (plan::is_compute(m.action.kind)) r.busy_ms += (m.end_us - m.start_us) * 1e-3;
  }
  const model::GptConfig& g = c.step.model;
  const int64_t b = c.micro_batch(), T = c.step.seq / c.cp;
  const auto M = static_cast<double>(c.microbatches);
  const bool sp = c.sequence_parallel && c.tp > 1;
  const auto blocks = static_cast<double>(model.stage().layer_count());
  const bool mixed = described.mixed_precision;
  const plan::StageDataParallel stage = stage_data_parallel(e, split);
  const comm::Algorithm dp_algo = e.data_parallel().algorithm();

  // Where the formula bytes go: a ring sends everything to the rank's successor in its group,
  // a pipeline its activations to the next stage and its gradients to the previous one.
  const parallel::DeviceMesh& mesh = e.mesh();
  const int global = r.rank;
  auto to = [&](int peer, double bytes) {
    if (bytes <= 0 || peer == global) return;
    (c.topology.link(global, peer) == comm::LinkClass::intra_node ? r.predicted_intra_node_bytes
                                                                  : r.predicted_inter_node_bytes) +=
        bytes;
  };
  auto successor = [&](Axis axis) {
    if (axis == Axis::dp && c.cp > 1) {  // the DP x CP group's ring
      const std::vector<int> group = mesh.group_of(Axis::dp, Axis::cp, global);
      const auto at = std::find(group.begin(), group.end(), global) - group.begin();
      return group[static_cast<size_t>((at + 1) % static_cast<int64_t>(group.size()))];
    }
    const std::vector<int> group = mesh.group_of(axis, global);
    return group[static_cast<size_t>((me[axis] + 1) % static_cast<int>(group.size()))];
  };
  to(successor(Axis::tp), plan.traffic.tp());
  const std::vector<int> dp_group = mesh.group_of(Axis::dp, global);
  const int dp_nodes = static_cast<int>(c.topology.nodes_of(dp_group).size());
  // The two-level all-reduce of each bucket exactly as cost/link_traffic.h counts it (the DP
  // group's members fill its nodes in dp order, the same number on each); a ring sends all of
  // its bytes to the rank's successor.
  if (c.hierarchical && static_cast<int>(dp_group.size()) % dp_nodes == 0) {
    const int per_node = static_cast<int>(dp_group.size()) / dp_nodes;
    for (const parallel::Bucket& bk : e.data_parallel().buckets()) {
      const plan::LinkTraffic lt = plan::hierarchical_all_reduce_link_traffic(
          bk.count, sizeof(float), per_node, dp_nodes, me.dp);
      r.predicted_intra_node_bytes += static_cast<double>(lt.intra_node_bytes);
      r.predicted_inter_node_bytes += static_cast<double>(lt.inter_node_bytes);
    }
  } else {
    to(successor(Axis::dp), plan.traffic.dp);
  }
  if (e.has_embedding_group()) {
    parallel::MeshCoord other = me;
    other.pp = me.pp == 0 ? c.pp - 1 : 0;
    to(mesh.rank_of(other), plan.traffic.embedding);
  }
  const double message = plan::pp_bytes_per_microbatch(b, T, g.channels, 4, c.tp, sp);
  for (const plan::Action& a : schedule.per_rank[static_cast<size_t>(me.pp)]) {
    if (!plan::is_send(a.kind)) continue;
    parallel::MeshCoord peer = me;
    peer.pp = a.kind == plan::ActionKind::send_activation ? (me.pp + 1) % c.pp
                                                          : (me.pp + c.pp - 1) % c.pp;
    to(mesh.rank_of(peer), message);
  }

  if (c.cluster) {
    // The link a group's collectives run on: the inter-node one when the group spans nodes, its
    // uplink shared by the flows that leave the node together (every group of the axis runs its
    // collective at once; a member whose ring successor sits on another node is one flow).
    const int my_node = c.topology.node_of(global);
    auto flows_out = [&](Axis axis) {
      int flows = 0;
      for (const std::vector<int>& group : mesh.groups(axis)) {
        for (size_t i = 0; i < group.size(); ++i) {
          const int next = group[(i + 1) % group.size()];
          flows += c.topology.node_of(group[i]) == my_node && c.topology.node_of(next) != my_node
                       ? 1
                       : 0;
        }
      }
      return flows;
    };
    plan::Link shared;
    auto link_of = [&](const std::vector<int>& group, Axis axis) -> const plan::Link& {
      if (c.topology.nodes_of(group).size() <= 1) return c.cluster->intra_node;
      shared = c.cluster->inter_node;
      shared.bandwidth_bytes_per_s = plan::shared_uplink_bandwidth(
          shared.bandwidth_bytes_per_s, c.topology.ranks_per_node(), flows_out(axis));
      return shared;
    };
    double seconds = 0;
    auto price = [&](const std::vector<plan::CollectiveCall>& calls, Axis axis, double times,
                     comm::Algorithm algo = comm::Algorithm::ring) {
      const std::vector<int> group = mesh.group_of(axis, global);
      for (const plan::CollectiveCall& call : calls) {
        seconds += times * plan::collective_cost(call, algo, static_cast<int>(group.size()),
                                                 link_of(group, axis))
                               .time_s;
      }
    };
    price(plan::tp_collectives_per_layer(
              b, T, g.channels, plan::engine_activation_wire_bytes(mixed), sp, c.step.recompute),
          Axis::tp, M * blocks);
    price(plan::tp_vocab_collectives(b, T, g.channels, 4, model.stage().embedding,
                                     model.stage().head),
          Axis::tp, M);
    const plan::StateBytes wire{.param = plan::engine_state_bytes(mixed).param,
                                .grad = c.bf16_grad_reduce ? 2 : 4,
                                .optimizer = 0};
    if (c.dp * c.cp > 1) price(plan::stage_dp_collectives(stage, wire), Axis::dp, 1, dp_algo);
    if (e.has_embedding_group()) {
      parallel::MeshCoord other = me;
      other.pp = me.pp == 0 ? c.pp - 1 : 0;
      std::vector<int> pair = {global, mesh.rank_of(other)};
      std::sort(pair.begin(), pair.end());
      seconds +=
          plan::collective_cost(comm::CollectiveOp::all_reduce, parallel::kTiedEmbeddingAlgorithm,
                                plan.traffic.embedding, 2, link_of(pair, Axis::pp))
              .time_s;
    }
    if (c.pp > 1) {
      const plan::Link& link = link_of(mesh.group_of(Axis::pp, global), Axis::pp);
      seconds += static_cast<double>(count_sends(schedule, me.pp)) *
                 (link.latency_us * 1e-6 + message / link.bandwidth_bytes_per_s);
    }
    r.predicted_comm_ms = seconds * 1e3;
  }
  return r;
}

}  // namespace dtrain::train
