// The layout report's gathering: every rank's row (measured in layout_measure.cc) to rank 0 as
// JSON, the pipeline's bubble, the node topology's crossings and the layout's warnings, and the
// trace and timeline of every rank's last step. The table and the JSON object are written by
// layout_report_output.cc.
#include "dtrain/report/layout_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "dtrain/comm/collectives.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/check.h"
#include "dtrain/core/units.h"
#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/collective_cost.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/cost/head_activation_memory.h"
#include "dtrain/cost/link_traffic.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/moe.h"
#include "dtrain/model/tp_shard.h"
#include "dtrain/parallel/pipeline_checker.h"
#include "dtrain/report/text_table.h"
#include "dtrain/trace/chrome_trace.h"
#include "dtrain/trace/timeline_svg.h"

namespace dtrain::train {
namespace {

using nlohmann::json;
using parallel::Axis;

constexpr int kTagReport = 701;

// --- one row and one last step through JSON, for the gather

json spans_to_json(const std::vector<MeasuredSpan>& spans) {
  json out = json::array();
  for (const MeasuredSpan& s : spans) {
    out.push_back({s.what, static_cast<int>(s.kind), s.start_us, s.end_us, s.bytes});
  }
  return out;
}

std::vector<MeasuredSpan> spans_from_json(const json& j) {
  std::vector<MeasuredSpan> out;
  for (const json& s : j) {
    out.push_back(
        {s.at(0), static_cast<trace::SpanKind>(s.at(1).get<int>()), s.at(2), s.at(3), s.at(4)});
  }
  return out;
}

// What rank 0 needs of every rank: its row, its last step and its per-step pipeline extents.
struct RankPiece {
  RankRow row;
  CpRankRow cp;
  std::vector<parallel::MeasuredAction> actions;
  std::vector<MeasuredSpan> collectives, data_parallel, finalize;
  std::vector<StepTiming> timings;
};

// This rank's CP row, per step (an empty object without CP).
json cp_piece(const Engine& e) {
  const parallel::ContextParallelGroup* cp = e.context_parallel();
  if (cp == nullptr || e.steps() == 0) return json::object();
  const EngineConfig& c = e.config();
  const double steps = static_cast<double>(e.steps());
  const parallel::ContextParallelCounters& k = e.cp_counters();
  plan::CpShape s;
  s.seq = c.step.seq;
  s.micro_batch = c.micro_batch();
  s.hidden = c.step.model.channels;
  s.heads = c.step.model.heads;
  s.kv_heads = c.step.model.kv_heads_or_heads();  // grouped-query attention: K/V heads only
  s.tp = c.tp;
  s.cp = c.cp;
  s = plan::with_engine_wire(s, c.step.precision == model::Precision::bf16 ? plan::Precision::bf16
                                                                           : plan::Precision::fp32);
  const double layers = static_cast<double>(e.model().stage().layer_count()) * c.microbatches;
  const plan::CpSplit split = cp->split() == model::CpTokenSplit::balanced
                                  ? plan::CpSplit::balanced
                                  : plan::CpSplit::contiguous;
  const double heads = static_cast<double>(c.step.model.heads / c.tp);
  // Ulysses attends over the whole sequence on heads/cp heads: the pairs of the whole causal
  // square, over the CP ranks.
  const double pairs_per_head =
      c.cp_algorithm == plan::CpAlgorithm::ulysses
          ? static_cast<double>(c.step.seq) * static_cast<double>(c.step.seq + 1) / 2.0 / c.cp
          : static_cast<double>(plan::causal_attention_pairs(c.step.seq, c.cp, cp->rank(), split));
  const plan::CpLayerTraffic formula =
      plan::cp_traffic_per_layer(s, c.cp_algorithm, c.step.recompute);
  // MoE under CP: one all-gather of the routing per routed block of this stage and forward pass
  // (plan::cp_moe_routing_gather_bytes), priced at the algorithm the group picks for its size, as
  // bytes moved (sent, or read in place: the threads backend's direct all-gather sends nothing).
  double routing_formula = 0;
  const model::MoeConfig& moe = c.step.model.moe;
  if (moe.enabled()) {
    int64_t routed = 0;
    for (int64_t l = 0; l < c.step.model.layers; ++l) {
      if (e.model().stage().has_layer(l) && model::is_moe_layer(moe, l)) ++routed;
    }
    const double S = plan::cp_moe_routing_gather_bytes(
        c.micro_batch(), split == plan::CpSplit::balanced ? 2 : 1, moe.experts, c.cp);
    const comm::Algorithm algo = cp->routing_algorithm(static_cast<long long>(S));
    routing_formula =
        plan::collective_traffic(comm::CollectiveOp::all_gather, algo, S, c.cp, cp->rank())
            .bytes_moved() *
        static_cast<double>(routed * c.microbatches * plan::ep_forward_exchanges(c.step.recompute));
  }
  return {
      {"cp_rank", cp->rank()},
      {"messages",
       static_cast<double>(k.forward.calls + k.backward.calls + k.recompute.calls) / steps},
      {"messages_formula",
       static_cast<double>(formula.forward.messages + formula.backward.messages) * layers},
      {"bytes", static_cast<double>(k.forward.traffic.bytes_sent + k.backward.traffic.bytes_sent +
                                    k.recompute.traffic.bytes_sent) /
                    steps},
      {"bytes_formula", formula.bytes_sent() * layers},
      {"pairs", static_cast<double>(k.attention_pairs) / steps},
      {"pairs_formula", pairs_per_head * heads * static_cast<double>(c.micro_batch()) * layers},
      {"attention_ms", k.attention_us * 1e-3 / steps},
      {"routing_bytes", static_cast<double>(k.routing.traffic.bytes_moved()) / steps},
      {"routing_bytes_formula", routing_formula}};
}

json piece_to_json(const Engine& e, const RankRow& row) {
  json actions = json::array();
  for (const parallel::MeasuredAction& m : e.last_step().actions) {
    const plan::Action& a = m.action;
    actions.push_back(
        {static_cast<int>(a.kind), a.microbatch, a.chunk, a.peer, m.start_us, m.end_us});
  }
  json timings = json::array();
  for (const StepTiming& t : e.timings()) {
    timings.push_back({t.first_start_us, t.last_end_us, t.busy_us});
  }
  return {{"row", row_to_json(row)},
          {"actions", actions},
          {"collectives", spans_to_json(e.last_step().collectives)},
          {"data_parallel", spans_to_json(e.last_step().data_parallel)},
          {"finalize", spans_to_json(e.last_step().finalize)},
          {"timings", timings},
          {"cp", cp_piece(e)}};
}

RankPiece piece_from_json(const json& j) {
  RankPiece p;
  p.row = row_from_json(j.at("row"));
  for (const json& a : j.at("actions")) {
    parallel::MeasuredAction m;
    m.action = {static_cast<plan::ActionKind>(a.at(0).get<int>()), a.at(1), a.at(2), a.at(3)};
    m.start_us = a.at(4);
    m.end_us = a.at(5);
    p.actions.push_back(m);
  }
  p.collectives = spans_from_json(j.at("collectives"));
  p.data_parallel = spans_from_json(j.at("data_parallel"));
  p.finalize = spans_from_json(j.at("finalize"));
  for (const json& t : j.at("timings")) p.timings.push_back({t.at(0), t.at(1), t.at(2)});
  const json& cp = j.at("cp");
  if (!cp.empty()) {
    p.cp = {p.row.rank,
            cp.at("cp_rank"),
            cp.at("bytes"),
            cp.at("bytes_formula"),
            cp.at("messages"),
            cp.at("messages_formula"),
            cp.at("pairs"),
            cp.at("pairs_formula"),
            cp.at("attention_ms"),
            cp.at("routing_bytes"),
            cp.at("routing_bytes_formula")};
  }
  return p;
}

// Every rank's bytes at rank 0 of `world` (others get nothing): lengths all-gathered, then one
// message from each rank.
std::vector<std::vector<uint8_t>> gather_at_root(comm::Communicator& world,
                                                 const std::vector<uint8_t>& mine) {
  const int n = world.size();
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  const auto length = static_cast<int64_t>(mine.size());
  comm::all_gather<int64_t>(world, &length, lengths.data(), n);
  std::vector<std::vector<uint8_t>> out;
  if (world.rank() != 0) {
    world.send(mine.data(), length, 0, kTagReport);
    return out;
  }
  out.resize(static_cast<size_t>(n));
  out[0] = mine;
  for (int r = 1; r < n; ++r) {
    out[static_cast<size_t>(r)].resize(static_cast<size_t>(lengths[static_cast<size_t>(r)]));
    world.recv(out[static_cast<size_t>(r)].data(), lengths[static_cast<size_t>(r)], r, kTagReport);
  }
  return out;
}

// The bubble of the pipeline that holds rank 0 (dp 0, tp 0, every stage).
BubbleReport bubble_of(const EngineConfig& c, const parallel::DeviceMesh& mesh,
                       const std::vector<RankPiece>& pieces) {
  BubbleReport b;
  const plan::PipelineSchedule schedule =
      plan::make_schedule(c.schedule, c.pp, c.microbatches, c.partition.chunks());
  const std::vector<int> column = mesh.group_of(Axis::pp, 0);
  std::vector<std::vector<parallel::MeasuredAction>> last;
  for (int r : column) last.push_back(pieces[static_cast<size_t>(r)].actions);
  const parallel::MeasuredBubble m = parallel::measured_bubble(schedule, last);
  b.makespan_ms = m.makespan_us * 1e-3;
  b.measured = m.fraction_of_total;
  b.forward_ms = m.forward_us * 1e-3;
  b.backward_ms = m.backward_input_us * 1e-3;
  b.weight_ms = m.backward_weight_us * 1e-3;
  const plan::StageTimes times{m.forward_us, m.backward_input_us, m.backward_weight_us};
  b.predicted = plan::pipeline_bubble(c.schedule, c.pp, c.microbatches, c.partition.chunks(), times)
                    .fraction_of_total;
  parallel::SimulationOptions sim;
  sim.times = times;
  b.simulated = parallel::simulate_schedule(schedule, sim).bubble_fraction_of_total;
  // Step k's bubble as measured_bubble defines it: 1 - sum(busy) / (P * makespan); the mean
  // over every step but the first (which warms the caches and allocates).
  const size_t K = pieces[static_cast<size_t>(column[0])].timings.size();
  double sum = 0;
  for (size_t k = K > 1 ? 1 : 0; k < K; ++k) {
    double first = 0, end = 0, busy = 0;
    bool any = false;
    for (int r : column) {
      const StepTiming& t = pieces[static_cast<size_t>(r)].timings[k];
      first = any ? std::min(first, t.first_start_us) : t.first_start_us;
      end = any ? std::max(end, t.last_end_us) : t.last_end_us;
      busy += t.busy_us;
      any = true;
    }
    sum += end > first ? 1 - busy / (static_cast<double>(c.pp) * (end - first)) : 0;
  }
  b.mean_measured = K > 0 ? sum / static_cast<double>(K > 1 ? K - 1 : 1) : 0;
  return b;
}

// Every rank's last step on one clock from the earliest start: compute, sends and receives as
// the schedule labels them, TP collectives, the communication thread's DP syncs and gathers,
// and the step's phases after the schedule.
trace::Timeline timeline_of(const LayoutReport& report, const EngineConfig& c,
                            const std::vector<RankPiece>& pieces) {
  const plan::PipelineSchedule schedule =
      plan::make_schedule(c.schedule, c.pp, c.microbatches, c.partition.chunks());
  double origin = 0;
  bool any = false;
  for (const RankPiece& p : pieces) {
    for (const parallel::MeasuredAction& m : p.actions) {
      origin = any ? std::min(origin, m.start_us) : m.start_us;
      any = true;
    }
  }
  std::vector<std::vector<parallel::MeasuredAction>> actions;
  for (const RankPiece& p : pieces) actions.push_back(p.actions);
  trace::Timeline timeline = parallel::to_measured_timeline(schedule, actions, origin);
  for (size_t r = 0; r < pieces.size(); ++r) {
    const RankPiece& p = pieces[r];
    timeline.rows[r].name = str("rank ", r, " (", report.ranks[r].coords, ")");
    for (const std::vector<MeasuredSpan>* spans : {&p.collectives, &p.data_parallel, &p.finalize}) {
      for (const MeasuredSpan& s : *spans) {
        timeline.rows[r].spans.push_back(
            {s.what, s.kind, -1, -1, s.start_us - origin, s.end_us - origin, s.bytes});
      }
    }
  }
  timeline.title = str("DP(", c.dp, ")-TP(", c.tp, ")-PP(", c.pp, ")",
                       c.zero_stage > 0 ? str(" ZeRO-", c.zero_stage) : "",
                       c.pp > 1 ? str(" ", plan::name(c.schedule), ", M = ", c.microbatches) : "",
                       ": the last step measured",
                       c.pp > 1 ? str(", bubble ", percent(report.bubble.measured), " (predicted ",
                                      percent(report.bubble.predicted), ")")
                                : "");
  return timeline;
}

}  // namespace

std::vector<GroupCrossing> node_crossings(const EngineConfig& c) {
  std::vector<GroupCrossing> out;
  if (c.topology.single_node()) return out;
  const parallel::DeviceMesh mesh(c.dp, c.cp, c.tp, c.pp, c.rank_order);
  for (Axis axis : {Axis::tp, Axis::dp, Axis::pp}) {
    if (mesh.size(axis) == 1) continue;
    for (const std::vector<int>& g : mesh.groups(axis)) {
      const std::vector<int> nodes = c.topology.nodes_of(g);
      if (nodes.size() > 1) out.push_back({std::string(parallel::name(axis)), g, nodes});
    }
  }
  return out;
}

std::vector<std::string> layout_warnings(const EngineConfig& c) {
  std::vector<std::string> out;
  for (const GroupCrossing& x : node_crossings(c)) {
    if (x.axis != "tp") continue;
    out.push_back(
        str("TP group {", joined(x.ranks), "} spans nodes {", joined(x.nodes),
            "}: its 4 all-reduces per block and micro-batch (the activations, on the critical "
            "path of every layer) cross the inter-node link; keep TP inside a node (--rank-order "
            "tp-dp-pp with --tp dividing --ranks-per-node)"));
    break;
  }
  return out;
}

LayoutReport gather_layout_report(const Engine& engine, comm::Communicator& world,
                                  const LayoutOptions& options) {
  const RankRow mine = measure_rank(engine);
  const std::vector<uint8_t> bytes = json::to_msgpack(piece_to_json(engine, mine));
  const std::vector<std::vector<uint8_t>> all = gather_at_root(world, bytes);
  LayoutReport r;
  if (world.rank() != 0) return r;
  const EngineConfig& c = engine.config();
  std::vector<RankPiece> pieces;
  for (const std::vector<uint8_t>& b : all)
    pieces.push_back(piece_from_json(json::from_msgpack(b)));
  r.dp = c.dp;
  r.cp = c.cp;
  r.cp_algorithm = std::string(plan::name(c.cp_algorithm));
  if (c.cp > 1) {
    const model::CpTokenSplit split = engine.context_parallel()->split();
    r.cp_split = split == model::CpTokenSplit::balanced ? "balanced" : "contiguous";
    double busiest = 0, sum = 0, slowest = 0, total_ms = 0;
    for (const RankPiece& p : pieces) {
      r.cp_ranks.push_back(p.cp);
      busiest = std::max(busiest, p.cp.pairs);
      sum += p.cp.pairs;
      slowest = std::max(slowest, p.cp.attention_ms);
      total_ms += p.cp.attention_ms;
    }
    const double n = static_cast<double>(pieces.size());
    r.cp_imbalance = sum > 0 ? busiest / (sum / n) : 0;
    r.cp_time_imbalance = total_ms > 0 ? slowest / (total_ms / n) : 0;
    // The other split for comparison, where the sequence allows it: the balanced split cuts
    // it into 2 x cp chunks, which a contiguous run's --seq-length need not divide into.
    if (split == model::CpTokenSplit::balanced || c.step.seq % (2 * c.cp) == 0) {
      r.cp_other_imbalance = plan::causal_work_imbalance(c.step.seq, c.cp,
                                                         split == model::CpTokenSplit::balanced
                                                             ? plan::CpSplit::contiguous
                                                             : plan::CpSplit::balanced);
    } else {
      r.cp_other_imbalance = -1;
    }
  }
  r.tp = c.tp;
  r.pp = c.pp;
  r.zero_stage = c.zero_stage;
  r.ep = c.ep;
  r.expert_dp = c.dp / c.ep;
  r.experts_per_rank = c.step.model.moe.experts / c.ep;
  r.sequence_parallel = c.sequence_parallel && c.tp > 1;
  r.recompute = c.step.recompute;
  r.schedule = std::string(plan::name(c.schedule));
  r.backend = std::string(comm::name(options.backend));
  r.rank_order = parallel::to_string(c.rank_order);
  r.dp_all_reduce = std::string(name(options.dp_all_reduce));
  r.dp_algorithm = std::string(comm::name(engine.data_parallel().algorithm()));
  r.microbatches = c.microbatches;
  r.chunks = c.partition.chunks();
  r.micro_batch = c.micro_batch();
  r.bucket_bytes = c.bucket_bytes;
  r.buckets = static_cast<int>(engine.data_parallel().buckets().size());
  r.ranks_per_node = options.ranks_per_node;
  r.nodes = c.topology.nodes();
  double comm_ms = 0, hidden_ms = 0;
  for (const RankPiece& p : pieces) {
    r.ranks.push_back(p.row);
    r.predicted_comm_ms = std::max(r.predicted_comm_ms, p.row.predicted_comm_ms);
    r.inter_node_bytes += p.row.model_inter_node_bytes;
    r.predicted_inter_node_bytes += p.row.predicted_inter_node_bytes;
    comm_ms += p.row.dp_comm_ms;
    hidden_ms += p.row.dp_hidden_ms;
  }
  r.dp_overlap_share = comm_ms > 0 ? hidden_ms / comm_ms : 0;
  if (c.pp > 1) r.bubble = bubble_of(c, engine.mesh(), pieces);
  if (c.cluster) r.cluster = options.cluster_path;
  std::vector<plan::EnginePhases> rank_phases(pieces.size());
  for (const RankPiece& p : pieces) rank_phases[static_cast<size_t>(p.row.rank)] = p.row.phases;
  r.clock = clock_report(c, options.cluster_path, r.buckets, engine.data_parallel().algorithm(),
                         rank_phases, engine.block_routings());
  if (options.ranks_per_node > 0) {
    r.crossings = node_crossings(c);
    r.warnings = layout_warnings(c);
  }
  if (!options.trace_path.empty() || !options.timeline_path.empty()) {
    const trace::Timeline timeline = timeline_of(r, c, pieces);
    // A trace that cannot be written (a full disk) is a warning: the run's checkpoints are
    // written already and its summary still follows.
    const auto write_or_warn = [](const char* flag, const std::string& path, auto&& write) {
      try {
        write();
        return path;
      } catch (const Error& e) {
        std::fprintf(stderr, "warning: %s %s: not written (%s); the run goes on without it\n", flag,
                     path.c_str(), e.what());
        return std::string();
      }
    };
    if (!options.trace_path.empty()) {
      r.trace_path = write_or_warn("--trace", options.trace_path, [&] {
        trace::write_chrome_trace(timeline, options.trace_path);
      });
    }
    if (!options.timeline_path.empty()) {
      r.timeline_path = write_or_warn("--timeline", options.timeline_path, [&] {
        trace::write_timeline_svg(timeline, options.timeline_path);
      });
    }
  }
  return r;
}

}  // namespace dtrain::train
