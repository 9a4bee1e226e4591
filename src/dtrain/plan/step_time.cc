// The planner's step time: the compute of each stage (time_model.h, operation by operation), the
// TP, PP, CP, EP and DP collectives placed on their groups with what overlap leaves exposed, and
// on a cluster with measured CPU rates the engine clock's step (engine_clock.h).
#include "dtrain/plan/planner_internal.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/clock/engine_clock.h"
#include "dtrain/clock/time_model.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/plan/planner.h"
#include "dtrain/schedule/pipeline_simulation.h"

namespace dtrain::plan::detail {

// One layer's attention as a CP rank of this layout sees it (context_parallel.h).
CpShape cp_shape(const PlanInput& in, const Layout& l) {
  CpShape s;
  s.seq = in.model.seq;
  s.micro_batch = l.micro_batch;
  s.hidden = in.model.hidden;
  s.heads = in.model.heads;
  s.kv_heads = in.model.kv_heads;
  s.tp = l.tp;
  s.cp = l.cp;
  s.bytes_per_element = in.training.activation_bytes;
  return s;
}

namespace {

// The dispatch of one routed layer, one micro-batch, on one rank of this layout.
MoeDispatch moe_dispatch(const PlanInput& in, const Layout& l) {
  MoeDispatch d;
  d.tokens = static_cast<double>(l.micro_batch * in.model.seq / l.cp);
  d.hidden = in.model.hidden;
  d.top_k = in.model.moe.top_k;
  d.experts = in.model.moe.experts;
  d.ep = l.ep;
  d.bytes_per_element = in.training.activation_bytes;
  d.tokens_per_expert = in.training.tokens_per_expert;
  return d;
}

}  // namespace

// Routed copies the busiest rank's experts compute, over tokens x k (1: uniform routing, or no
// EP: every rank holds every expert and computes its own tokens' k copies).
double moe_load_factor(const PlanInput& in, const Layout& l) {
  if (!in.model.moe.enabled() || l.ep == 1) return 1;
  return expert_load_factor(moe_dispatch(in, l));
}

namespace {

// What overlap can hide a phase behind: sums the phase's calls and keeps at least one piece
// (the last bucket, the first layer) exposed.
struct Phase {
  double time_s = 0;
  double min_exposed_s = 0;
  double window_s = 0;
  double exposed() const { return exposed_time(time_s, min_exposed_s, window_s); }
};

// One traffic row from a placed cost.
GroupTraffic traffic_row(std::string_view group, std::string_view op, std::string_view what,
                         const GroupPlacement& placement, const PlacedCost& cost) {
  GroupTraffic g;
  g.group = group;
  g.op = op;
  g.what = what;
  g.size = placement.size;
  g.nodes = placement.nodes;
  g.inter_node = cost.inter_node;
  g.hierarchical = cost.hierarchical;
  g.steps = cost.steps;
  g.bytes_per_rank = cost.bytes_sent;
  g.time_s = cost.time_s;
  g.exposed_s = cost.time_s;
  return g;
}

// `seconds` of `most` layers, for `layers` of them (exactly `seconds` when they are as many).
double layer_share(double seconds, int64_t layers, int64_t most) {
  if (layers == most) return seconds;
  return most > 0 ? seconds * static_cast<double>(layers) / static_cast<double>(most) : 0;
}

ClockShape clock_shape(const PlanInput& in, const Layout& l) {
  const ModelShape& m = in.model;
  ClockShape shape;
  shape.model = m;
  shape.micro_batch = l.micro_batch;
  shape.tp = l.tp;
  shape.sequence_parallel = l.sequence_parallel;
  shape.recompute = l.recompute;
  shape.activation_bytes = in.training.activation_bytes;
  shape.dropout =
      in.training.activation_count == ActivationCount::paper && m.family == ModelFamily::gpt;
  shape.cp = l.cp;
  return shape;
}

}  // namespace

LayerTimes layer_times(const PlanInput& in, const ModelShape& real_model, const Layout& l) {
  const ModelShape& m = in.model;
  const Training& tr = in.training;
  const double batch = static_cast<double>(tr.global_batch);
  LayerTimes lt;
  lt.total = training_flops(real_model, batch, l.recompute, tr.flops, tr.selective_flops);
  // Time charges the work redone, whatever convention HFU reports.
  const TrainingFlops timed =
      training_flops(real_model, batch, l.recompute, tr.flops, SelectiveFlops::rerun);
  const TrainingFlops reference = training_flops(real_model, batch, l.recompute,
                                                 FlopsConvention::narayanan, SelectiveFlops::rerun);
  lt.model_scale = reference.model > 0 ? timed.model / reference.model : 1;
  lt.recompute_scale = reference.recompute > 0 ? timed.recompute / reference.recompute : 1;
  const ClockShape shape = clock_shape(in, l);
  const GpuSpec& gpu = in.cluster.gpu;
  lt.dense_layer = total(layer_ops(shape, gpu));
  if (m.moe.enabled()) {
    ClockShape routed = shape;
    routed.moe_layer = true;
    routed.expert_load = moe_load_factor(in, l);
    lt.moe_layer = total(layer_ops(routed, gpu));
  }
  lt.embedding = total(embedding_ops(shape, gpu));
  lt.head = total(head_ops(shape, gpu));
  return lt;
}

StageCompute stage_compute(const PlanInput& in, const ModelShape& real_model, const Layout& l,
                           const StageComm& comm, const LayerTimes* given) {
  const ModelShape& m = in.model;
  const Training& tr = in.training;
  const GpuSpec& gpu = in.cluster.gpu;
  std::optional<LayerTimes> computed;  // built only when not given
  const LayerTimes& lt =
      given != nullptr ? *given : computed.emplace(layer_times(in, real_model, l));
  StageCompute sc;
  sc.total = lt.total;
  const double model_scale = lt.model_scale;
  const double recompute_scale = lt.recompute_scale;
  const PassTimes& dense_layer = lt.dense_layer;
  const PassTimes& moe_layer = lt.moe_layer;
  auto sum = [](const PassTimes& p) {
    return p.forward_s + p.backward_input_s + p.backward_weight_s;
  };
  auto rescaled = [&](PassTimes p) {
    p.backward_input_s =
        (p.backward_input_s - p.recompute_s) * model_scale + p.recompute_s * recompute_scale;
    p.forward_s *= model_scale;
    p.backward_weight_s *= model_scale;
    p.recompute_s *= recompute_scale;
    return p;
  };
  // Each stage on its own layers: the first adds the embedding, the last the head, a stage
  // holds floor(L / P) or one more (pipeline_stages.h), and with routed layers the stages
  // differ in how many they hold; each pays its share of the TP, CP and EP collectives. The
  // slowest (compute and collectives) is reported; with v = 1 the simulation runs every stage
  // on its own times, with v > 1 (equal chunks) every chunk gets 1/v of the busiest stage's
  // blocks (an upper bound for MoE models, whose stages hold unequal routed layers).
  PassTimes stage, blocks;
  StageTimes stage_times;
  double slowest = 0;
  const PassTimes& embedding = lt.embedding;
  const PassTimes& head = lt.head;
  const bool own_stages = l.vp == 1;
  const std::vector<int64_t> stage_layers = pipeline_stage_layers(m, l);
  if (own_stages) sc.virtual_stage_times.resize(static_cast<size_t>(l.pp));
  for (int k = 0; k < l.pp; ++k) {
    const int64_t layers = stage_layers[static_cast<size_t>(k)];
    const int64_t routed_layers = stage_moe_layers(m, l, k);
    const double routed = static_cast<double>(routed_layers);
    PassTimes b = dense_layer.scaled(static_cast<double>(layers) - routed);
    if (routed > 0) b += moe_layer.scaled(routed);
    PassTimes p = b;
    if (k == 0) p += embedding;
    if (k == l.pp - 1) p += head;
    const double tp_f = layer_share(comm.tp_forward_s, layers, comm.layers);
    const double tp_b = layer_share(comm.tp_backward_s, layers, comm.layers);
    const double cp_f = layer_share(comm.cp_forward_s, layers, comm.layers);
    const double cp_b = layer_share(comm.cp_backward_s, layers, comm.layers);
    const double ep_f = layer_share(comm.ep_forward_s, routed_layers, comm.routed);
    const double ep_b = layer_share(comm.ep_backward_s, routed_layers, comm.routed);
    const double busy = sum(p) + tp_f + tp_b + cp_f + cp_b + ep_f + ep_b;
    if (k == 0 || busy > slowest) {
      slowest = busy;
      stage = rescaled(p);
      stage_times = {stage.forward_s + tp_f + cp_f + ep_f,
                     stage.backward_input_s + tp_b + cp_b + ep_b, stage.backward_weight_s};
    }
    if (k == 0 || sum(b) > sum(blocks)) blocks = b;
    if (own_stages) {
      const PassTimes own = rescaled(b);
      sc.virtual_stage_times[static_cast<size_t>(k)] = {own.forward_s + tp_f + cp_f + ep_f,
                                                        own.backward_input_s + tp_b + cp_b + ep_b,
                                                        own.backward_weight_s};
    }
  }
  sc.stage = stage;
  sc.stage_times = stage_times;
  sc.blocks = rescaled(blocks);
  sc.embedding = rescaled(embedding);
  sc.head = rescaled(head);
  const StageTimes first{sc.embedding.forward_s, sc.embedding.backward_input_s,
                         sc.embedding.backward_weight_s};
  const StageTimes last{sc.head.forward_s, sc.head.backward_input_s, sc.head.backward_weight_s};
  if (own_stages) {
    auto add = [](StageTimes& to, const StageTimes& extra) {
      to.forward += extra.forward;
      to.backward_input += extra.backward_input;
      to.backward_weight += extra.backward_weight;
    };
    add(sc.virtual_stage_times.front(), first);
    add(sc.virtual_stage_times.back(), last);
  } else {
    sc.virtual_stage_times = virtual_stage_times(
        l.pp, l.vp,
        {sc.blocks.forward_s + comm.tp_forward_s + comm.cp_forward_s + comm.ep_forward_s,
         sc.blocks.backward_input_s + comm.tp_backward_s + comm.cp_backward_s + comm.ep_backward_s,
         sc.blocks.backward_weight_s},
        first, last);
  }
  sc.forward_s = stage.forward_s;
  sc.recompute_s = stage.recompute_s;
  sc.backward_s = stage.backward_input_s + stage.backward_weight_s;
  // The optimizer of the rank with the most parameters: its ZeRO shard (stage >= 1), routed
  // experts sharded over the expert-data-parallel group.
  double params = 0;
  // An interior stage's parameters depend on it only through its blocks and routed blocks (the
  // engine's split aside): one alike to an earlier interior stage holds as many, and is skipped.
  std::vector<std::pair<int64_t, int64_t>> interior_seen;
  const bool share_alike = !engine_split(in);
  for (int k : heaviest_stage_candidates(m, l)) {
    if (share_alike && k != 0 && k != l.pp - 1) {
      const std::pair<int64_t, int64_t> kind{stage_layers[static_cast<size_t>(k)],
                                             stage_moe_layers(m, l, k)};
      if (std::find(interior_seen.begin(), interior_seen.end(), kind) != interior_seen.end()) {
        continue;
      }
      interior_seen.push_back(kind);
    }
    double dense = static_cast<double>(stage_params_of(in, l, k));
    double experts = l.ep > 1 ? static_cast<double>(stage_expert_params(m, l, k)) : 0;
    dense -= experts;
    if (l.zero_stage >= 1) {
      dense /= l.dp * l.cp;
      experts /= l.dp * l.cp / l.ep;
    }
    params = std::max(params, dense + experts);
  }
  const double layers = static_cast<double>(most_stage_layers(m, l));
  sc.optimizer_s = optimizer_seconds(params, tr.state_bytes, gpu, std::max(1.0, layers));
  return sc;
}

std::pair<double, double> tp_layer_seconds(const PlanInput& in, const Layout& l,
                                           const GroupPlacement& group) {
  if (l.tp == 1) return {0, 0};
  const ModelShape& m = in.model;
  double forward_s = 0, backward_s = 0;
  for (const CollectiveCall& call :
       tp_collectives_per_layer(l.micro_batch, m.seq / l.cp, m.hidden, in.training.activation_bytes,
                                l.sequence_parallel, l.recompute)) {
    const double per_layer = placed_collective_cost(call, group, in.cluster).time_s;
    const double forward_share = 2.0 / static_cast<double>(call.count);
    forward_s += per_layer * forward_share;
    backward_s += per_layer * (1 - forward_share);
  }
  return {forward_s, backward_s};
}

// TP collectives of one micro-batch through the stage, split into forward and backward seconds
// (the forward's share is 2 of the 4, or 6, calls of each kind); appends the step's rows.
std::pair<double, double> tp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, std::vector<GroupTraffic>* rows) {
  if (l.tp == 1) return {0, 0};
  const ModelShape& m = in.model;
  const int64_t layers = most_stage_layers(m, l);
  const int64_t repeats = layers * microbatches;
  double forward_s = 0, backward_s = 0;
  for (const CollectiveCall& call :
       tp_collectives_per_layer(l.micro_batch, m.seq / l.cp, m.hidden, in.training.activation_bytes,
                                l.sequence_parallel, l.recompute)) {
    const PlacedCost per_layer = placed_collective_cost(call, group, in.cluster);
    const double per_mb = per_layer.time_s * static_cast<double>(layers);
    const double forward_share = 2.0 / static_cast<double>(call.count);
    forward_s += per_mb * forward_share;
    backward_s += per_mb * (1 - forward_share);
    const PlacedCost step{per_layer.steps * repeats,
                          per_layer.bytes_sent * static_cast<double>(repeats),
                          per_layer.time_s * static_cast<double>(repeats), per_layer.inter_node,
                          per_layer.hierarchical};
    GroupTraffic row = traffic_row("TP", comm::name(call.op), call.what, group, step);
    row.calls = call.count * repeats;
    rows->push_back(row);
  }
  return {forward_s, backward_s};
}

// Seconds of one micro-batch's pipeline sends in each direction (one per chunk); appends the
// step's row, the busiest stage's sends (an interior one's, or an edge's when pp = 2), and sets
// each stage's bytes sent per step.
double pp_send_time(const PlanInput& in, const Layout& l, int64_t microbatches,
                    const GroupPlacement& group, std::vector<GroupTraffic>* rows,
                    std::vector<double>* stage_bytes) {
  if (l.pp == 1) return 0;
  const ModelShape& m = in.model;
  const double bytes =
      pp_bytes_per_microbatch(l.micro_batch, m.seq / l.cp, m.hidden, in.training.activation_bytes,
                              l.tp, l.sequence_parallel);
  const PlacedCost send = placed_send_cost(bytes, group, in.cluster);
  int64_t busiest = 0;
  for (int stage = 0; stage < l.pp; ++stage) {
    const int64_t sends = pp_sends_per_microbatch(l.pp, l.vp, stage) * microbatches;
    stage_bytes->push_back(send.bytes_sent * static_cast<double>(sends));
    busiest = std::max(busiest, sends);
  }
  const double n = static_cast<double>(busiest);
  GroupTraffic row =
      traffic_row("PP", "send/recv", "activations and their gradients", group,
                  {busiest, send.bytes_sent * n, send.time_s * n, send.inter_node, false});
  row.calls = busiest;
  rows->push_back(row);
  return send.time_s * l.vp;
}

RingTiming ring_timing(const PlanInput& in, const Layout& l, const GroupPlacement& group) {
  RingTiming r;
  double attention_forward_s = 0, attention_backward_s = 0;
  for (const OpTime& op : layer_ops(clock_shape(in, l), in.cluster.gpu)) {
    if (op.op == "scores q k^t" || op.op == "softmax" || op.op == "attention dropout" ||
        op.op == "scores x v") {
      attention_forward_s += op.forward_s;
      attention_backward_s += op.backward_input_s;
    }
  }
  const double block = cp_kv_block_bytes(cp_shape(in, l));
  r.hop_forward_s = placed_send_cost(block, group, in.cluster).time_s;
  r.hop_backward_s = placed_send_cost(2 * block, group, in.cluster).time_s;
  r.last_hop_s = placed_send_cost(block, group, in.cluster).time_s;
  r.block_forward_s = attention_forward_s / l.cp;
  r.block_backward_s = attention_backward_s / l.cp;
  return r;
}

namespace {

// A CP collective on the CP group: the all-to-all runs pairwise (the comm layer's algorithm over
// send/recv), the others as placed_collective_cost prices them.
PlacedCost placed_cp_cost(const CollectiveCall& call, const GroupPlacement& group,
                          const Cluster& c) {
  if (call.op != comm::CollectiveOp::all_to_all) return placed_collective_cost(call, group, c);
  const Link& link = group.crosses_nodes() ? c.inter_node : c.intra_node;
  const CommCost cost = collective_cost(call, comm::Algorithm::pairwise, group.size, link);
  return {cost.steps, cost.bytes_sent, cost.time_s, group.crosses_nodes(), false};
}

}  // namespace

// Context parallelism's K/V traffic of one micro-batch through the stage, as exposed forward
// and backward seconds; appends the step's rows and fills plan->cp. Ring hops overlap block
// compute (RingTiming); the all-gather's and ulysses' collectives are waited for.
std::pair<double, double> cp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, Plan* plan) {
  if (l.cp == 1) return {0, 0};
  const CpShape shape = cp_shape(in, l);
  const int64_t layers = most_stage_layers(in.model, l);
  const int64_t repeats = layers * microbatches;
  const double n = static_cast<double>(repeats);
  CpReport& report = plan->cp;
  report.layers = layers;
  report.algorithm = l.cp_algo;
  report.per_layer = cp_traffic_per_layer(shape, l.cp_algo, l.recompute);
  report.bytes_per_step = report.per_layer.bytes_sent() * n;
  report.imbalance_contiguous = causal_work_imbalance(in.model.seq, l.cp, CpSplit::contiguous);
  report.imbalance_balanced = in.model.seq % (2 * l.cp) == 0
                                  ? causal_work_imbalance(in.model.seq, l.cp, CpSplit::balanced)
                                  : report.imbalance_contiguous;
  double forward_s = 0, backward_s = 0, total_s = 0;
  if (l.cp_algo == CpAlgorithm::ring) {
    const RingTiming r = ring_timing(in, l, group);
    report.ring_hop_s = r.hop_forward_s;
    report.ring_block_s = r.block_forward_s;
    forward_s = r.forward_exposed(l.cp) * static_cast<double>(layers);
    backward_s = r.backward_exposed(l.cp, l.recompute) * static_cast<double>(layers);
    const CpPassTraffic& f = report.per_layer.forward;
    const CpPassTraffic& b = report.per_layer.backward;
    const double f_time = static_cast<double>(l.cp - 1) * r.hop_forward_s;
    const double b_time = static_cast<double>(l.cp - 1) * r.hop_backward_s + r.last_hop_s +
                          (l.recompute == Recompute::full ? f_time : 0);
    GroupTraffic fw = traffic_row(
        "CP", "send/recv", "K, V blocks (ring, forward)", group,
        {f.steps * repeats, f.bytes_sent * n, f_time * n, group.crosses_nodes(), false});
    fw.calls = f.messages * repeats;
    fw.exposed_s = forward_s * static_cast<double>(microbatches);
    GroupTraffic bw = traffic_row(
        "CP", "send/recv", "K, V + dK, dV (ring, backward)", group,
        {b.steps * repeats, b.bytes_sent * n, b_time * n, group.crosses_nodes(), false});
    bw.calls = b.messages * repeats;
    bw.exposed_s = backward_s * static_cast<double>(microbatches);
    total_s = fw.time_s + bw.time_s;
    plan->traffic.push_back(fw);
    plan->traffic.push_back(bw);
  } else {
    for (const CollectiveCall& call : cp_collectives_per_layer(shape, l.cp_algo, l.recompute)) {
      const PlacedCost per_layer = placed_cp_cost(call, group, in.cluster);
      (call.overlaps_forward ? forward_s : backward_s) +=
          per_layer.time_s * static_cast<double>(layers);
      GroupTraffic row =
          traffic_row("CP", comm::name(call.op), call.what, group,
                      {per_layer.steps * repeats, per_layer.bytes_sent * n, per_layer.time_s * n,
                       per_layer.inter_node, per_layer.hierarchical});
      row.calls = call.count * repeats;
      total_s += row.time_s;
      plan->traffic.push_back(row);
    }
  }
  plan->time.cp_s = (forward_s + backward_s) * static_cast<double>(microbatches);
  plan->time.cp_total_s = total_s;
  return {forward_s, backward_s};
}

namespace {

// The ranks `size` members of `parent` apart by `step` members each (parent member k x step for
// k < size), as rank 0's group sees them: the EP group (step 1, size ep) and the expert-data-
// parallel group (step ep, size dp / ep) inside a DP group.
GroupPlacement subgroup(const GroupPlacement& parent, int size, int step, int gpus_per_node) {
  GroupPlacement g;
  g.size = size;
  g.stride = parent.stride * step;
  int nodes = 0, on_node = 0, most = 0;
  int64_t last_node = -1;
  for (int k = 0; k < size; ++k) {
    const int64_t node = static_cast<int64_t>(k) * g.stride / gpus_per_node;
    if (node != last_node) {
      ++nodes;
      on_node = 0;
      last_node = node;
    }
    most = std::max(most, ++on_node);
  }
  g.nodes = std::max(1, nodes);
  g.ranks_per_node = std::max(1, most);
  return g;
}

}  // namespace

// Expert parallelism's all-to-alls of one micro-batch through the busiest stage (the one with the
// most routed layers), as forward and backward seconds: per routed layer a dispatch and a combine
// forward, their gradients' combine- and dispatch-shaped all-to-alls backward (and the forward's
// again under full recompute), each priced pairwise (comm_model.h all_to_all_v_cost) on the
// busiest EP rank's bytes, on the intra-node link when the EP group fits a node. Nothing hides
// them: the experts wait for their tokens. Appends the step's rows and fills plan->moe.
std::pair<double, double> ep_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& dp_group, Plan* plan) {
  const ModelShape& m = in.model;
  MoeReport& r = plan->moe;
  r.enabled = m.moe.enabled();
  if (!r.enabled) return {0, 0};
  r.total_params = param_count(m);
  r.active_params = model_flops_param_count(m);
  r.ep = l.ep;
  r.expert_dp = l.dp * l.cp / l.ep;
  r.experts_per_rank = m.moe.experts / l.ep;
  for (int k = 0; k < l.pp; ++k) r.moe_layers = std::max(r.moe_layers, stage_moe_layers(m, l, k));
  if (l.ep == 1) return {0, 0};
  const MoeDispatch d = moe_dispatch(in, l);
  r.load_factor = expert_load_factor(d);
  r.busiest_rank = busiest_ep_rank(d);
  r.dispatch = dispatch_bytes(d, r.busiest_rank);
  r.combine = combine_bytes(d, r.busiest_rank);
  const GroupPlacement group = subgroup(dp_group, l.ep, 1, in.cluster.gpus_per_node);
  r.inter_node = group.crosses_nodes();
  const Link& link = r.inter_node ? in.cluster.inter_node : in.cluster.intra_node;
  const CommCost dispatch = all_to_all_v_cost(comm::Algorithm::pairwise, r.dispatch.sent,
                                              r.dispatch.received, r.busiest_rank, link);
  const CommCost combine = all_to_all_v_cost(comm::Algorithm::pairwise, r.combine.sent,
                                             r.combine.received, r.busiest_rank, link);
  // The forward's exchanges, run again in the backward under full recompute.
  const double forward_calls = ep_forward_exchanges(l.recompute);
  const double layers = static_cast<double>(r.moe_layers), mb = static_cast<double>(microbatches);
  r.bytes_per_layer = (1 + forward_calls) * (r.dispatch.sent_total() + r.combine.sent_total());
  r.bytes_per_step = r.bytes_per_layer * layers * mb;
  const double pair_s = dispatch.time_s + combine.time_s;
  const double forward_s = layers * pair_s, backward_s = layers * forward_calls * pair_s;
  const double calls = (1 + forward_calls) * layers * mb;  // of each shape
  const std::pair<const char*, const CommCost*> shapes[] = {
      {"dispatch fwd + combine's grad", &dispatch}, {"combine fwd + dispatch's grad", &combine}};
  for (const auto& [what, cost] : shapes) {
    const MoeA2aRank& bytes = cost == &dispatch ? r.dispatch : r.combine;
    GroupTraffic row =
        traffic_row("EP", "all_to_all_v", what, group,
                    {static_cast<int64_t>(cost->steps * calls), bytes.sent_total() * calls,
                     cost->time_s * calls, r.inter_node, false});
    row.calls = static_cast<int64_t>(calls);
    plan->traffic.push_back(row);
  }
  plan->time.ep_s = (forward_s + backward_s) * mb;
  return {forward_s, backward_s};
}

// DP and ZeRO collectives of the step over the largest stage's parameters, and what overlap
// leaves of them: gradient reductions hide behind backward compute (the last micro-batch's for
// ZeRO 0-1, every one for ZeRO 2-3), weight gathers behind forward compute (the next step's
// first micro-batch for ZeRO 1-2, every one for ZeRO 3). Sets t.dp_s and t.dp_exposed_s.
void dp_times(const PlanInput& in, const Layout& l, int64_t microbatches, const StageCompute& sc,
              const GroupPlacement& group, std::vector<GroupTraffic>* rows, TimeBreakdown* t) {
  if (l.dp * l.cp == 1) return;  // gradients are reduced over DP x CP
  const ModelShape& m = in.model;
  const StateBytes sb = in.training.state_bytes;
  const int largest = largest_stage(in, l);
  // With EP the routed experts reduce over the expert-data-parallel group (none when ep = dp).
  const int64_t expert_params = l.ep > 1 ? stage_expert_params(m, l, largest) : 0;
  const int64_t params = stage_params_of(in, l, largest) - expert_params;
  const double grad_bytes = static_cast<double>(params * sb.grad);
  const int64_t pieces =
      engine_split(in) ? engine_dp_pieces(in, l, largest)
      : l.zero_stage == 3
          ? stage_layer_count(m, l, largest)
          : std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(grad_bytes / in.training.bucket_bytes)));
  const double mb = static_cast<double>(microbatches);
  const double backward_one = sc.backward_s;
  Phase forward, backward;
  forward.window_s = l.zero_stage == 3 ? mb * sc.forward_s : sc.forward_s;
  backward.window_s = l.zero_stage >= 2 ? mb * backward_one : backward_one;
  const size_t first = rows->size();
  std::vector<bool> in_forward;
  struct Reduced {
    std::vector<CollectiveCall> calls;
    GroupPlacement group;
    std::string_view dp_name, zero_name;
  };
  std::vector<Reduced> sets;
  sets.push_back({dp_collectives(params, l.zero_stage, sb, static_cast<int>(microbatches), pieces,
                                 engine_split(in) ? 1 : 0),
                  group, "DP", "ZeRO"});
  if (expert_params > 0 && l.dp / l.ep > 1) {
    const int64_t expert_pieces =
        l.zero_stage == 3
            ? stage_moe_layers(m, l, largest)
            : std::max<int64_t>(
                  1, static_cast<int64_t>(std::ceil(static_cast<double>(expert_params * sb.grad) /
                                                    in.training.bucket_bytes)));
    sets.push_back({dp_collectives(expert_params, l.zero_stage, sb, static_cast<int>(microbatches),
                                   std::max<int64_t>(1, expert_pieces)),
                    subgroup(group, l.dp / l.ep, l.ep, in.cluster.gpus_per_node), "EDP", "EDP"});
  }
  for (const Reduced& set : sets)
    for (CollectiveCall call : set.calls) {
      if (set.dp_name == "EDP")
        call.what =
            call.op == comm::CollectiveOp::all_gather ? "expert weights" : "expert gradients";
      const PlacedCost cost = placed_collective_cost(call, set.group, in.cluster);
      Phase& phase = call.overlaps_forward ? forward : backward;
      phase.time_s += cost.time_s;
      phase.min_exposed_s =
          std::max(phase.min_exposed_s, cost.time_s / static_cast<double>(call.count));
      in_forward.push_back(call.overlaps_forward);
      GroupTraffic row =
          traffic_row(call.op == comm::CollectiveOp::all_gather ? set.zero_name : set.dp_name,
                      comm::name(call.op), call.what, set.group, cost);
      row.calls = call.count;
      rows->push_back(row);
      t->dp_s += cost.time_s;
    }
  // Each phase's exposed time is shared among its calls in proportion to their time.
  for (size_t i = first; i < rows->size(); ++i) {
    GroupTraffic& row = (*rows)[i];
    const Phase& phase = in_forward[i - first] ? forward : backward;
    row.exposed_s = phase.time_s > 0 ? phase.exposed() * row.time_s / phase.time_s : 0;
  }
  t->dp_exposed_s = forward.exposed() + backward.exposed();
}

// On a cluster file with measured CPU rates: dtrain's own engine priced by engine_clock.h, on
// the layout's busiest stage and its DP pieces as the engine cuts them (engine_dp_pieces). Each
// rank runs --threads compute threads (the engine's own default, 1). Replaces the GPU clock's
// step figures.
void engine_clock_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                        TimeBreakdown* t) {
  const Cluster& c = in.cluster;
  EngineClockInput e;
  e.model = in.model;
  e.dp = l.dp;
  e.tp = l.tp;
  e.pp = l.pp;
  e.chunks = l.vp;
  e.zero_stage = l.zero_stage;
  e.sequence_parallel = l.sequence_parallel;
  e.recompute = l.recompute;
  e.schedule = l.schedule;
  e.micro_batch = l.micro_batch;
  e.microbatches = static_cast<int>(microbatches);
  e.precision = in.training.activation_bytes >= 4 ? Precision::fp32 : Precision::bf16;
  e.threads = std::max(1, in.training.engine_threads);
  e.cp = l.cp;
  e.cp_algorithm = l.cp_algo;  // resolved (resolve_cp) before the layout is evaluated
  e.ep = l.ep;
  e.tokens_per_expert = in.training.tokens_per_expert;
  const int largest = largest_stage(in, l);
  e.stage_params = stage_params_of(in, l, largest);
  if (l.ep > 1) {
    const int64_t layers = in.model.layers / l.pp;
    e.stage_expert_params =
        scaled_to_override(in.model, moe_layers_in(in.model, largest * layers, layers) *
                                         engine_moe_expert_param_count(in.model, l.ep));
  }
  e.dp_pieces = engine_dp_pieces(in, l, largest);
  const AxisSizes sizes{l.dp, l.tp, l.pp, l.cp};
  // The gradients are reduced over the DP x CP group (the parameters' replicas).
  const auto dp_group = l.cp > 1 ? place_data_group(sizes, l.order, c.gpus_per_node)
                                 : place_group(Axis::dp, sizes, l.order, c.gpus_per_node);
  e.inter_node_dp = dp_group.nodes > 1;
  e.dp_ranks_per_node = dp_group.ranks_per_node;
  e.inter_node_tp = place_group(Axis::tp, sizes, l.order, c.gpus_per_node).nodes > 1;
  e.inter_node_pp = place_group(Axis::pp, sizes, l.order, c.gpus_per_node).nodes > 1;
  e.inter_node_cp = place_group(Axis::cp, sizes, l.order, c.gpus_per_node).nodes > 1;
  // The engine's automatic choice: direct where the DP group shares memory (one node).
  e.dp_algorithm = e.inter_node_dp ? comm::Algorithm::ring : comm::Algorithm::direct;
  const EngineClock clock = engine_clock(e, c);
  const double mb = static_cast<double>(microbatches);
  StageTimes times;
  times.forward = clock.stage.forward_s + clock.tp_forward_s + clock.send_s;
  times.backward_input = clock.stage.backward_input_s + clock.tp_backward_s + clock.send_s;
  times.backward_weight = clock.stage.backward_weight_s;
  t->stage_times = times;
  t->bubble = clock.bubble;  // the simulated schedule (engine_clock.h)
  // CP's and EP's exchanges run inside the engine's forward and backward: their own rows.
  t->cp_s = clock.cp_s;
  t->cp_total_s = clock.cp_total_s;
  t->ep_s = clock.ep_s;
  t->compute_s = clock.phases.forward_s + clock.phases.backward_s - clock.cp_s - clock.ep_s;
  t->recompute_s = mb * clock.stage.recompute_s;
  t->tp_s = clock.phases.tp_comm_s;
  t->pp_s = clock.pipeline_sends_s;
  t->bubble_s = clock.bubble.bubble_time;
  t->dp_s = clock.dp_comm_s;
  t->dp_exposed_s = clock.phases.exposed_dp_s;
  t->optimizer_s = clock.phases.optimizer_s;
  t->step_s = clock.phases.step_s;
  t->step_no_overlap_s = t->step_s - t->dp_exposed_s + t->dp_s;
  t->clock = "engine (measured rates)";
  t->stretch = clock.stretch;
  t->threads = e.threads;
}

}  // namespace dtrain::plan::detail
