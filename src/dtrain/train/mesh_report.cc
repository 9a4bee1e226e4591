// print_mesh_report / mesh_report_to_json: the composed run's layout, per-rank memory and
// bytes per step on each axis beside plan/, and the node topology's crossings and warnings.
#include "dtrain/train/mesh_report.h"

#include <cstdio>
#include <string>

#include "dtrain/core/units.h"
#include "dtrain/train/text_table.h"

namespace dtrain::train {
namespace {

// "measured" or "measured (plan X)" when they differ.
std::string beside(double measured, double formula) {
  if (measured == formula) return whole_number(measured);
  return whole_number(measured) + " (plan " + whole_number(formula) + ")";
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

void print_mesh_report(std::ostream& out, const MeshReport& r) {
  out << "\n  3D layout: DP(" << r.dp << ") x TP(" << r.tp << ") x PP(" << r.pp
      << ") = " << r.dp * r.tp * r.pp << " ranks on the " << r.backend << " backend, rank order "
      << r.rank_order << ", ZeRO-" << r.zero_stage;
  if (r.pp > 1) out << ", " << r.schedule;
  out << ", " << r.microbatches << " micro-batches of " << r.micro_batch << " per DP rank\n";
  out << "  rank  coords        node  blocks   params     grads      optimizer  activ. peak"
      << "   TP bytes/step     PP bytes/step   DP bytes/step   emb bytes\n";
  for (const MeshRankRow& k : r.ranks) {
    out << "  " << right_aligned(std::to_string(k.rank), 4) << "  " << k.coords
        << std::string(k.coords.size() < 13 ? 13 - k.coords.size() : 1, ' ')
        << right_aligned(std::to_string(k.node), 4) << right_aligned(k.layers, 8)
        << right_aligned(format_bytes(static_cast<double>(k.params_bytes)), 10)
        << right_aligned(format_bytes(static_cast<double>(k.grads_bytes)), 10)
        << right_aligned(format_bytes(static_cast<double>(k.optimizer_bytes)), 11)
        << right_aligned(format_bytes(static_cast<double>(k.activations_peak_bytes)), 13)
        << right_aligned(beside(k.tp_bytes, k.tp_formula), 16)
        << right_aligned(beside(k.pp_bytes, k.pp_formula), 18)
        << right_aligned(beside(k.dp_bytes, k.dp_formula), 16)
        << right_aligned(beside(k.embedding_bytes, k.embedding_formula), 12) << "\n";
  }
  out << "  (bytes sent per training step, measured by each group's communicator; \"(plan X)\" "
         "shows plan/'s figure where it differs: TP = 4 ring all-reduces of b*T*C per block and "
         "micro-batch, PP = the schedule's sends x b*T*C, DP = all-reduce or ZeRO's "
         "reduce-scatter + all-gather of the rank's parameters, whose mean over the group it is)\n";
  if (r.ranks_per_node > 0) {
    out << "\n  topology: " << r.nodes << " node(s) of " << r.ranks_per_node << " ranks\n";
    out << "  rank  node   intra-node bytes/step          inter-node bytes/step          "
           "all (with loss/norm)\n";
    double inter = 0, predicted_inter = 0;
    for (const MeshRankRow& k : r.ranks) {
      out << "  " << right_aligned(std::to_string(k.rank), 4)
          << right_aligned(std::to_string(k.node), 6)
          << right_aligned(beside(k.model_intra_node_bytes, k.predicted_intra_node_bytes), 24)
          << right_aligned(beside(k.model_inter_node_bytes, k.predicted_inter_node_bytes), 31)
          << right_aligned(
                 whole_number(k.intra_node_bytes) + " / " + whole_number(k.inter_node_bytes), 26)
          << "\n";
      inter += k.model_inter_node_bytes;
      predicted_inter += k.predicted_inter_node_bytes;
    }
    out << "  inter-node bytes per step, every rank: " << whole_number(inter) << " measured, "
        << whole_number(predicted_inter)
        << " predicted (each group's plan/ bytes sent where its algorithm sends them)\n";
    if (r.crossings.empty()) {
      out << "  every TP, DP and PP group stays inside one node\n";
    } else {
      for (const MeshGroupCrossing& c : r.crossings) {
        out << "  " << c.axis << " group {" << join(c.ranks) << "} crosses nodes {" << join(c.nodes)
            << "}\n";
      }
    }
  }
  if (!r.cluster.empty()) {
    char ms[64];
    std::snprintf(ms, sizeof(ms), "%.3f", r.predicted_comm_ms);
    out << "  predicted communication per step on " << r.cluster << ": " << ms
        << " ms (the slowest rank; every collective and send priced by plan::collective_cost on "
           "the link its group uses, nothing overlapped)\n";
  }
  for (const std::string& w : r.warnings) out << "  warning: " << w << "\n";
}

nlohmann::json mesh_report_to_json(const MeshReport& r) {
  nlohmann::json j;
  j["dp"] = r.dp;
  j["tp"] = r.tp;
  j["pp"] = r.pp;
  j["zero_stage"] = r.zero_stage;
  j["backend"] = r.backend;
  j["rank_order"] = r.rank_order;
  j["schedule"] = r.schedule;
  j["microbatches"] = r.microbatches;
  j["micro_batch"] = r.micro_batch;
  j["ranks_per_node"] = r.ranks_per_node;
  j["nodes"] = r.nodes;
  nlohmann::json ranks = nlohmann::json::array();
  for (const MeshRankRow& k : r.ranks) {
    ranks.push_back({{"rank", k.rank},
                     {"coords", k.coords},
                     {"node", k.node},
                     {"blocks", k.layers},
                     {"param_count", k.param_count},
                     {"params_bytes", k.params_bytes},
                     {"grads_bytes", k.grads_bytes},
                     {"grads_peak_bytes", k.grads_peak_bytes},
                     {"optimizer_bytes", k.optimizer_bytes},
                     {"activations_peak_bytes", k.activations_peak_bytes},
                     {"bytes_per_step",
                      {{"tp", k.tp_bytes},
                       {"tp_vocab", k.tp_vocab_bytes},
                       {"pp", k.pp_bytes},
                       {"dp", k.dp_bytes},
                       {"embedding", k.embedding_bytes},
                       {"loss_and_norm", k.other_bytes},
                       {"intra_node", k.intra_node_bytes},
                       {"inter_node", k.inter_node_bytes},
                       {"model_intra_node", k.model_intra_node_bytes},
                       {"model_inter_node", k.model_inter_node_bytes}}},
                     {"plan_bytes_per_step",
                      {{"tp", k.tp_formula},
                       {"pp", k.pp_formula},
                       {"dp", k.dp_formula},
                       {"embedding", k.embedding_formula},
                       {"tp_vocab", k.tp_vocab_formula},
                       {"model_intra_node", k.predicted_intra_node_bytes},
                       {"model_inter_node", k.predicted_inter_node_bytes}}}});
  }
  j["ranks"] = ranks;
  nlohmann::json crossings = nlohmann::json::array();
  for (const MeshGroupCrossing& c : r.crossings) {
    crossings.push_back({{"axis", c.axis}, {"ranks", c.ranks}, {"nodes", c.nodes}});
  }
  j["crossings"] = crossings;
  j["warnings"] = r.warnings;
  j["cluster"] = r.cluster;
  j["predicted_comm_ms"] = r.predicted_comm_ms;
  j["inter_node_bytes_per_step"] = r.inter_node_bytes;
  j["predicted_inter_node_bytes_per_step"] = r.predicted_inter_node_bytes;
  return j;
}

}  // namespace dtrain::train
