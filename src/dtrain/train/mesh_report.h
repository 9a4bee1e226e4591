// What a composed (DP x TP x PP) run measured on every rank, beside the plan/ formulas: the
// layout, per-rank memory per tag, bytes sent per step on each axis, and - with a declared node
// topology - the groups that cross a node boundary and each rank's intra- and inter-node bytes.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::train {

// The composition flags of `dtrain train` (the axis sizes come from --dp, --tp and --pp).
struct MeshSetup {
  std::string backend = "threads";      // --backend threads | mpi
  std::string rank_order = "tp-dp-pp";  // --rank-order: fastest-varying axis first
  int ranks_per_node = 0;               // --ranks-per-node G; 0: every rank on one node
  std::string dp_all_reduce = "flat";   // --dp-all-reduce flat | hierarchical (--dp alone)
  std::string cluster_path;  // --cluster FILE: links to predict the communication time on
  double timeout_s = 120;    // --timeout: seconds one send/recv waits for its peer (any backend)
};

struct MeshRankRow {
  int rank = 0;
  std::string coords;  // "dp0 tp1 pp0"
  int node = 0;
  std::string layers;       // the stage's blocks, "0-1"
  int64_t param_count = 0;  // elements this rank holds (TP shards of its stage)
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;  // after the last step
  int64_t grads_peak_bytes = 0, activations_peak_bytes = 0;
  // Bytes sent per training step (mean over steps), measured by each group's communicator.
  // tp_bytes: the blocks' f and g; tp_vocab_bytes: the vocabulary-parallel embedding and
  // cross-entropy; other_bytes: the loss and gradient-norm exchange over every rank.
  double tp_bytes = 0, tp_vocab_bytes = 0, pp_bytes = 0, dp_bytes = 0, embedding_bytes = 0;
  double other_bytes = 0;
  // The same from plan/: tp_traffic_per_layer x blocks x micro-batches; the schedule's sends
  // x pp_bytes_per_microbatch; the DP collective on this rank's gradient (all-reduce, or
  // reduce-scatter + all-gather under ZeRO); the tied-embedding all-reduce.
  double tp_formula = 0, pp_formula = 0, dp_formula = 0, embedding_formula = 0;
  double tp_vocab_formula = 0;                        // plan::tp_vocab_collectives x M
  double intra_node_bytes = 0, inter_node_bytes = 0;  // per step, every group together
  // The model's traffic (TP, PP, DP, embedding groups; not the loss and norm exchange) by link
  // class: measured, and predicted by sending each group's formula bytes where the algorithm
  // sends them (a ring's to the rank's successor in the group, a pipeline's activations to the
  // next stage and gradients to the previous one) and asking the topology which link that is.
  double model_intra_node_bytes = 0, model_inter_node_bytes = 0;
  double predicted_intra_node_bytes = 0, predicted_inter_node_bytes = 0;
  // With --cluster: this rank's collectives and sends per step priced by plan::collective_cost
  // on the link each group uses (the inter-node link when the group spans nodes).
  double predicted_comm_ms = 0;
};

struct MeshGroupCrossing {
  std::string axis;        // "tp", "dp", "pp"
  std::vector<int> ranks;  // global ranks of the group
  std::vector<int> nodes;  // the nodes it spans (more than one)
};

struct MeshReport {
  int dp = 1, tp = 1, pp = 1;
  int zero_stage = 0;
  std::string backend, rank_order, schedule;
  int microbatches = 1;
  int64_t micro_batch = 0;  // rows per micro-batch on one DP rank
  int ranks_per_node = 0, nodes = 1;
  std::vector<MeshRankRow> ranks;
  std::vector<MeshGroupCrossing> crossings;  // groups spanning nodes (empty on one node)
  std::vector<std::string> warnings;         // e.g. a TP group across nodes
  std::string cluster;                       // the --cluster file's name, when given
  double predicted_comm_ms = 0;              // the slowest rank's predicted_comm_ms
  // Every rank's model traffic across nodes per step, summed: measured and predicted.
  double inter_node_bytes = 0, predicted_inter_node_bytes = 0;
};

void print_mesh_report(std::ostream& out, const MeshReport& report);
nlohmann::json mesh_report_to_json(const MeshReport& report);

}  // namespace dtrain::train
