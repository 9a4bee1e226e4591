// The layout report as people and programs read it: the table print_layout_report writes and the
// "layout" JSON object (schema version kLayoutReportVersion), one row per rank through
// row_to_json / row_from_json (also how the rows travel to rank 0).
#include <algorithm>
#include <string>

#include "dtrain/core/check.h"
#include "dtrain/core/units.h"
#include "dtrain/report/layout_report.h"
#include "dtrain/report/text_table.h"

namespace dtrain::train {
namespace {

using nlohmann::json;

// "measured" or "measured (plan X)" when they differ by more than the rounding of `slack`.
std::string beside(double measured, double formula, double slack = 0.5) {
  if (std::abs(measured - formula) <= slack) return whole_number(measured);
  return whole_number(measured) + " (plan " + whole_number(formula) + ")";
}

}  // namespace

const SiteBytes& RankRow::site(std::string_view name) const {
  for (const SiteBytes& s : traffic) {
    if (s.site == name) return s;
  }
  DTRAIN_CHECK(false, "no traffic site '", name, "' in rank ", rank, "'s row");
  return traffic.front();
}

json row_to_json(const RankRow& k) {
  json state = json::array();
  for (const StateRow& s : k.state) {
    state.push_back({{"tag", memory_tag_name(s.tag)},
                     {"current_bytes", s.current_bytes},
                     {"peak_bytes", s.peak_bytes},
                     {"plan_bytes", s.formula_bytes}});
  }
  // Each site's measured and planned bytes under its name in both objects, then the links.
  json measured = json::object(), planned = json::object();
  for (const SiteBytes& site : k.traffic) {
    measured[site.site] = site.measured;
    planned[site.site] = site.planned;
  }
  measured["loss_and_norm"] = k.other;
  measured["intra_node"] = k.intra_node_bytes;
  measured["inter_node"] = k.inter_node_bytes;
  measured["model_intra_node"] = k.model_intra_node_bytes;
  measured["model_inter_node"] = k.model_inter_node_bytes;
  planned["model_intra_node"] = k.predicted_intra_node_bytes;
  planned["model_inter_node"] = k.predicted_inter_node_bytes;
  return {{"rank", k.rank},
          {"coords", k.coords},
          {"node", k.node},
          {"blocks", k.layers},
          {"param_count", k.param_count},
          {"state", state},
          {"activations",
           {{"peak_bytes", k.activations_peak_bytes},
            {"microbatch_bytes", k.microbatch_activation_bytes},
            {"plan_microbatch_bytes", k.planned_microbatch_activation_bytes},
            {"plan_peak_bytes", k.planned_activations_peak_bytes},
            {"peak_inflight_bytes", k.peak_inflight_bytes},
            {"inflight_microbatches", k.measured_inflight},
            {"checker_inflight_microbatches", k.checker_inflight}}},
          {"zero3_gathered",
           {{"peak_bytes", k.gathered_peak_bytes},
            {"plan_bytes", k.gathered_formula_bytes},
            {"in_flight_grad_bytes", k.in_flight_grad_bytes},
            {"in_flight_grad_unit", k.in_flight_grad_unit}}},
          {"bytes_per_step", measured},
          {"plan_bytes_per_step", planned},
          {"predicted_comm_ms", k.predicted_comm_ms},
          {"dp_overlap",
           {{"comm_ms_per_step", k.dp_comm_ms},
            {"hidden_ms_per_step", k.dp_hidden_ms},
            {"share", k.dp_overlap_share}}},
          {"busy_ms_last_step", k.busy_ms},
          {"clock_phases", phases_to_json(k.phases)}};
}

RankRow row_from_json(const json& j) {
  RankRow k;
  k.rank = j.at("rank");
  k.coords = j.at("coords");
  k.node = j.at("node");
  k.layers = j.at("blocks");
  k.param_count = j.at("param_count");
  const MemoryTag tags[] = {MemoryTag::params, MemoryTag::grads, MemoryTag::optimizer};
  size_t i = 0;
  for (const json& s : j.at("state")) {
    k.state.push_back({tags[i++], s.at("current_bytes"), s.at("peak_bytes"), s.at("plan_bytes")});
  }
  const json& a = j.at("activations");
  k.activations_peak_bytes = a.at("peak_bytes");
  k.microbatch_activation_bytes = a.at("microbatch_bytes");
  k.planned_microbatch_activation_bytes = a.at("plan_microbatch_bytes");
  k.planned_activations_peak_bytes = a.at("plan_peak_bytes");
  k.peak_inflight_bytes = a.at("peak_inflight_bytes");
  k.measured_inflight = a.at("inflight_microbatches");
  k.checker_inflight = a.at("checker_inflight_microbatches");
  k.gathered_peak_bytes = j.at("zero3_gathered").at("peak_bytes");
  k.gathered_formula_bytes = j.at("zero3_gathered").at("plan_bytes");
  k.in_flight_grad_bytes = j.at("zero3_gathered").at("in_flight_grad_bytes");
  k.in_flight_grad_unit = j.at("zero3_gathered").at("in_flight_grad_unit");
  const json& m = j.at("bytes_per_step");
  const json& p = j.at("plan_bytes_per_step");
  for (const auto& site : plan::kRankTrafficSites) {
    const std::string name(site.first);
    k.traffic.push_back({name, m.at(name), p.at(name)});
  }
  k.other = m.at("loss_and_norm");
  k.intra_node_bytes = m.at("intra_node");
  k.inter_node_bytes = m.at("inter_node");
  k.model_intra_node_bytes = m.at("model_intra_node");
  k.model_inter_node_bytes = m.at("model_inter_node");
  k.predicted_intra_node_bytes = p.at("model_intra_node");
  k.predicted_inter_node_bytes = p.at("model_inter_node");
  k.predicted_comm_ms = j.at("predicted_comm_ms");
  k.dp_comm_ms = j.at("dp_overlap").at("comm_ms_per_step");
  k.dp_hidden_ms = j.at("dp_overlap").at("hidden_ms_per_step");
  k.dp_overlap_share = j.at("dp_overlap").at("share");
  k.phases = phases_from_json(j.at("clock_phases"));
  k.busy_ms = j.at("busy_ms_last_step");
  return k;
}

void print_layout_report(std::ostream& out, const LayoutReport& r) {
  const int ranks = r.dp * r.cp * r.tp * r.pp;
  out << "\n  layout: DP(" << r.dp << ")"
      << (r.cp > 1 ? str(" x CP(", r.cp, ", ", r.cp_algorithm, ")") : std::string()) << " x TP("
      << r.tp << ") x PP(" << r.pp << ") = " << ranks << " rank" << (ranks > 1 ? "s" : "")
      << " on the " << r.backend << " backend, rank order " << r.rank_order << ", ZeRO-"
      << r.zero_stage << (r.sequence_parallel ? ", sequence parallel" : "") << ", recompute "
      << name(r.recompute);
  if (r.pp > 1) out << ", " << r.schedule << (r.chunks > 1 ? str(" v = ", r.chunks) : "");
  out << ", " << r.microbatches << " micro-batch" << (r.microbatches > 1 ? "es" : "") << " of "
      << r.micro_batch << " per DP rank";
  if (r.dp > 1 || r.zero_stage > 0) {
    out << ", " << r.buckets << " DP bucket" << (r.buckets == 1 ? "" : "s") << " of "
        << format_bytes(static_cast<double>(r.bucket_bytes)) << " ("
        << (r.dp_all_reduce == "flat" ? r.dp_algorithm : r.dp_all_reduce) << ")";
  }
  out << "\n";
  out << "  rank  coords        node  blocks       params       grads   optimizer  activ. peak"
         "  in flight (checker)\n";
  for (const RankRow& k : r.ranks) {
    out << "  " << right_aligned(std::to_string(k.rank), 4) << "  " << left_aligned(k.coords, 13)
        << right_aligned(std::to_string(k.node), 4) << "  " << left_aligned(k.layers, 8);
    for (const StateRow& s : k.state) {
      out << right_aligned(format_bytes(static_cast<double>(s.current_bytes)), 12);
    }
    out << right_aligned(format_bytes(static_cast<double>(k.activations_peak_bytes)), 13)
        << right_aligned(fixed(k.measured_inflight, 2) + " (" + fixed(k.checker_inflight, 2) + ")",
                         21)
        << "\n";
  }
  bool state_matches = true, activations_match = true;
  for (const RankRow& k : r.ranks) {
    for (const StateRow& s : k.state)
      state_matches = state_matches && s.current_bytes == s.formula_bytes;
    activations_match = activations_match && static_cast<double>(k.microbatch_activation_bytes) ==
                                                 k.planned_microbatch_activation_bytes;
  }
  out << "  (model states after the last step: "
      << (state_matches ? "each equals plan::model_state_bytes"
                        : "differ from plan::model_state_bytes: see --json")
      << "; one micro-batch's activations "
      << (activations_match ? "equal the plan/ formulas" : "differ from the plan/ formulas")
      << "; in flight: the most micro-batches held at once in the last step)\n";
  if (r.zero_stage == 3) {
    // Each rank's peak beside its stage's plan; a difference is named: one unit's gradient
    // still held by the communication thread (its reduce-scatter overlapping the next unit's
    // backward), which the plan leaves out because it depends on timing.
    out << "  ZeRO-3 working set above the shards (peak, beside the rank's stage by "
           "plan::unit_weights_peak_bytes and plan::zero3_gathered_bytes' gradients):\n";
    for (const RankRow& k : r.ranks) {
      out << "    rank " << k.rank << ": "
          << format_bytes(static_cast<double>(k.gathered_peak_bytes));
      const int64_t other =
          k.gathered_peak_bytes - k.gathered_formula_bytes - k.in_flight_grad_bytes;
      if (k.in_flight_grad_bytes == 0 && other == 0) {
        out << " = plan\n";
        continue;
      }
      out << " (plan " << format_bytes(static_cast<double>(k.gathered_formula_bytes));
      if (k.in_flight_grad_bytes > 0) {
        out << "; +" << format_bytes(static_cast<double>(k.in_flight_grad_bytes)) << ": "
            << k.in_flight_grad_unit
            << "'s gradient, still being reduce-scattered by the communication thread when the "
               "next unit's backward began (overlap), not in the plan";
      }
      if (other != 0) {
        out << "; " << (other > 0 ? "+" : "-")
            << format_bytes(static_cast<double>(other > 0 ? other : -other)) << " unexplained";
      }
      out << ")\n";
    }
  }

  out << "\n  rank   TP bytes/step     PP bytes/step   DP bytes/step   emb bytes  DP hidden   "
         "(bytes "
         "moved: sent, or read in place)\n";
  for (const RankRow& k : r.ranks) {
    double tp = 0, tp_plan = 0;  // the TP sites summed
    for (const SiteBytes& site : k.traffic) {
      if (!site.site.starts_with("tp_")) continue;
      tp += site.measured;
      tp_plan += site.planned;
    }
    const auto column = [&](std::string_view name, int width) {
      return right_aligned(beside(k.site(name).measured, k.site(name).planned), width);
    };
    out << "  " << right_aligned(std::to_string(k.rank), 4)
        << right_aligned(beside(tp, tp_plan), 16) << column("pp", 18) << column("dp", 16)
        << column("embedding", 12)
        << right_aligned(k.dp_comm_ms > 0 ? percent(k.dp_overlap_share) : "-", 11) << "\n";
  }
  out << "  (bytes a rank moves across ranks per training step: what it sends, as messages or "
         "written into a peer's memory, plus what it reads in place from a peer's memory (the "
         "direct algorithm), each byte counted once, on the rank that moves it; measured by each "
         "group's communicator; \"(plan X)\" shows plan/'s figure where it differs: TP = f and g "
         "of every block and micro-batch (4 ring all-reduces of b*T*C, or SP's gathers and "
         "scatters, plus full recompute's reruns, SP's re-gathers and LayerNorm sums, and the sums "
         "of K/V heads' copies when TP exceeds them) and the "
         "vocabulary reductions; PP = the schedule's sends; DP = plan::stage_dp_bytes_moved, this "
         "rank's pieces exactly; DP hidden = the share of the DP communication thread's time that "
         "ran inside compute)\n";
  if (r.ep > 1) {
    out << "  expert parallelism: EP " << r.ep << ", expert-DP " << r.expert_dp << ", "
        << r.experts_per_rank << " experts per rank; all-to-all bytes sent per step:";
    for (const RankRow& k : r.ranks) {
      out << " rank " << k.rank << " " << beside(k.site("ep").measured, k.site("ep").planned);
    }
    out << " (dispatch and combine, forward and backward, and the row counts; \"(plan X)\" "
           "where plan::ep_dispatch_bytes / ep_combine_bytes / ep_counts_bytes of the measured "
           "routing differ)\n";
  }
  if (r.pp > 1) {
    out << "  pipeline bubble: " << percent(r.bubble.measured) << " of the last step's "
        << fixed(r.bubble.makespan_ms, 2) << " ms (mean over the steps after the first "
        << percent(r.bubble.mean_measured) << "); predicted " << percent(r.bubble.predicted)
        << " by the closed form and " << percent(r.bubble.simulated)
        << " by the checker's simulation, from the measured F " << fixed(r.bubble.forward_ms, 3)
        << " ms, B " << fixed(r.bubble.backward_ms, 3) << " ms"
        << (r.bubble.weight_ms > 0 ? str(", W ", fixed(r.bubble.weight_ms, 3), " ms") : "")
        << " per micro-batch\n";
  }
  if (r.dp > 1) {
    out << "  DP communication hidden behind compute: " << percent(r.dp_overlap_share)
        << " (every rank's communication-thread time inside its compute, over the whole)\n";
  }
  if (r.cp > 1) {
    const bool routed = std::any_of(r.cp_ranks.begin(), r.cp_ranks.end(), [](const CpRankRow& k) {
      return k.routing_bytes > 0 || k.routing_bytes_formula > 0;
    });
    out << "\n  context parallel: " << r.cp_algorithm << " over " << r.cp << " ranks, "
        << r.cp_split
        << " split\n  rank  cp   CP bytes/step (plan)               attention pairs/step (plan)"
           "      attention ms/step"
        << (routed ? "   MoE routing bytes/step (plan)" : "") << "\n";
    for (const CpRankRow& k : r.cp_ranks) {
      out << "  " << right_aligned(std::to_string(k.rank), 4) << "  "
          << right_aligned(std::to_string(k.cp_rank), 2) << "  "
          << left_aligned(str(fixed(k.bytes, 0), " (", fixed(k.bytes_formula, 0), ")"), 34)
          << left_aligned(str(fixed(k.pairs, 0), " (", fixed(k.pairs_formula, 0), ")"), 32)
          << (routed ? left_aligned(fixed(k.attention_ms, 3), 20) : fixed(k.attention_ms, 3))
          << (routed ? str(fixed(k.routing_bytes, 0), " (", fixed(k.routing_bytes_formula, 0), ")")
                     : "")
          << "\n";
    }
    out << "  (CP bytes: the CP group's communicator, forward + backward + recompute's reruns, "
           "beside "
           "plan::cp_traffic_per_layer x layers x micro-batches; pairs: the (query, key) scores "
           "computed in forward, beside plan::causal_attention_pairs"
        << (routed ? "; MoE routing: bytes moved (sent, or read in place) by the routed blocks' "
                     "all-gathers of router choices and "
                     "probability sums (the aux loss and capacity are the whole sequence's), "
                     "beside plan::cp_moe_routing_gather_bytes per routed block, micro-batch and "
                     "forward pass"
                   : "")
        << ")\n"
        << "  attention work, busiest rank over the mean: " << fixed(r.cp_imbalance, 3)
        << " counted, " << fixed(r.cp_time_imbalance, 3) << " timed (" << r.cp_split
        << " split); the " << (r.cp_split == "balanced" ? "contiguous" : "balanced") << " split's: "
        << (r.cp_other_imbalance >= 0
                ? str(fixed(r.cp_other_imbalance, 3), " (plan::causal_work_imbalance)")
                : str("none (it needs --seq-length divisible by 2 x --cp ", r.cp, " = ", 2 * r.cp,
                      ")"))
        << "\n";
  }
  if (r.ranks_per_node > 0) {
    out << "\n  topology: " << r.nodes << " node(s) of " << r.ranks_per_node << " ranks\n";
    out << "  rank  node   intra-node bytes/step          inter-node bytes/step          "
           "all (with loss/norm)\n";
    for (const RankRow& k : r.ranks) {
      out << "  " << right_aligned(std::to_string(k.rank), 4)
          << right_aligned(std::to_string(k.node), 6)
          << right_aligned(beside(k.model_intra_node_bytes, k.predicted_intra_node_bytes), 24)
          << right_aligned(beside(k.model_inter_node_bytes, k.predicted_inter_node_bytes), 31)
          << right_aligned(
                 whole_number(k.intra_node_bytes) + " / " + whole_number(k.inter_node_bytes), 26)
          << "\n";
    }
    out << "  inter-node bytes per step, every rank: " << whole_number(r.inter_node_bytes)
        << " measured, " << whole_number(r.predicted_inter_node_bytes)
        << " predicted (each group's plan/ bytes sent where its algorithm sends them)\n";
    if (r.crossings.empty()) {
      out << "  every TP, DP and PP group stays inside one node\n";
    } else {
      for (const GroupCrossing& x : r.crossings) {
        out << "  " << x.axis << " group {" << joined(x.ranks) << "} crosses nodes {"
            << joined(x.nodes) << "}\n";
      }
    }
  }
  if (!r.cluster.empty()) {
    out << "  predicted communication per step on " << r.cluster << ": "
        << fixed(r.predicted_comm_ms, 3)
        << " ms (the slowest rank; every collective and send priced by plan::collective_cost on "
           "the link its group uses, nothing overlapped)\n";
  }
  // r.warnings went to stderr before the first step (train::resolve); the JSON keeps them.
  if (!r.trace_path.empty()) out << "  trace of the last step: " << r.trace_path << "\n";
  if (!r.timeline_path.empty()) out << "  timeline of the last step: " << r.timeline_path << "\n";
}

json layout_report_to_json(const LayoutReport& r) {
  json j;
  j["version"] = r.version;
  // Every bytes figure below (bytes_per_step, plan_bytes_per_step, the link bytes).
  j["bytes_convention"] =
      "moved: per rank, the bytes sent (as messages, or written into a peer's memory) plus those "
      "read in place from a peer's memory; each byte counted once, on the rank that moves it";
  j["dp"] = r.dp;
  j["tp"] = r.tp;
  j["pp"] = r.pp;
  j["zero_stage"] = r.zero_stage;
  j["ep"] = r.ep;
  j["expert_dp"] = r.expert_dp;
  j["experts_per_rank"] = r.experts_per_rank;
  j["sequence_parallel"] = r.sequence_parallel;
  j["recompute"] = name(r.recompute);
  j["schedule"] = r.schedule;
  j["chunks"] = r.chunks;
  j["backend"] = r.backend;
  j["rank_order"] = r.rank_order;
  j["cp"] = r.cp;
  j["cp_algorithm"] = r.cp_algorithm;
  if (r.cp > 1) {
    json cp = json::array();
    for (const CpRankRow& k : r.cp_ranks) {
      cp.push_back({{"rank", k.rank},
                    {"cp_rank", k.cp_rank},
                    {"bytes_per_step", k.bytes},
                    {"bytes_per_step_formula", k.bytes_formula},
                    {"messages_per_step", k.messages},
                    {"messages_per_step_formula", k.messages_formula},
                    {"attention_pairs_per_step", k.pairs},
                    {"attention_pairs_per_step_formula", k.pairs_formula},
                    {"attention_ms_per_step", k.attention_ms},
                    {"moe_routing_bytes_per_step", k.routing_bytes},
                    {"moe_routing_bytes_per_step_formula", k.routing_bytes_formula}});
    }
    j["cp_split"] = r.cp_split;
    j["cp_ranks"] = cp;
    j["cp_work_imbalance"] = r.cp_imbalance;
    j["cp_time_imbalance"] = r.cp_time_imbalance;
    j["cp_other_split_imbalance"] =
        r.cp_other_imbalance >= 0 ? nlohmann::json(r.cp_other_imbalance) : nlohmann::json(nullptr);
  }
  j["dp_all_reduce"] = r.dp_all_reduce;
  j["dp_algo"] = r.dp_algorithm;
  j["microbatches"] = r.microbatches;
  j["micro_batch"] = r.micro_batch;
  j["bucket_bytes"] = r.bucket_bytes;
  j["buckets"] = r.buckets;
  j["ranks_per_node"] = r.ranks_per_node;
  j["nodes"] = r.nodes;
  json ranks = json::array();
  for (const RankRow& k : r.ranks) ranks.push_back(row_to_json(k));
  j["ranks"] = ranks;
  if (r.pp > 1) {
    j["bubble"] = {{"makespan_ms", r.bubble.makespan_ms},     {"measured", r.bubble.measured},
                   {"mean_measured", r.bubble.mean_measured}, {"predicted", r.bubble.predicted},
                   {"simulated", r.bubble.simulated},         {"forward_ms", r.bubble.forward_ms},
                   {"backward_ms", r.bubble.backward_ms},     {"weight_ms", r.bubble.weight_ms}};
  }
  j["dp_overlap_share"] = r.dp_overlap_share;
  json crossings = json::array();
  for (const GroupCrossing& x : r.crossings) {
    crossings.push_back({{"axis", x.axis}, {"ranks", x.ranks}, {"nodes", x.nodes}});
  }
  j["crossings"] = crossings;
  j["warnings"] = r.warnings;
  j["cluster"] = r.cluster;
  j["predicted_comm_ms"] = r.predicted_comm_ms;
  j["inter_node_bytes_per_step"] = r.inter_node_bytes;
  j["predicted_inter_node_bytes_per_step"] = r.predicted_inter_node_bytes;
  j["trace"] = r.trace_path;
  j["timeline"] = r.timeline_path;
  return j;
}
}  // namespace dtrain::train
