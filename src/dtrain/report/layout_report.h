// What a run measured on every rank beside the plan/ formulas, one report and one JSON schema
// for every layout and backend: the layout, per rank its stage, memory per tag (model states
// beside plan::model_state_bytes, activations beside the planned in-flight count, ZeRO-3's
// gathered working set), bytes sent per step on each axis beside the formulas, the share of DP
// communication hidden behind compute, the per-link split under a node topology; and for a
// pipeline the measured bubble beside the closed form and the checker's simulation.
// gather_layout_report builds it over the job's communicator (so it works across MPI
// processes); the engine only measures.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/core/memory.h"
#include "dtrain/engine/engine.h"
#include "dtrain/engine/layout.h"
#include "dtrain/parallel/data_parallel.h"
#include "dtrain/report/clock_report.h"
#include "dtrain/report/rank_description.h"

namespace dtrain::train {

// The "layout" object's schema in `dtrain train --json`. 1: this report; it replaced the
// per-engine "data_parallel", "tensor_parallel", "pipeline" and "mesh" objects of dtrain 0.4.
inline constexpr int kLayoutReportVersion = 1;

struct StateRow {
  MemoryTag tag = MemoryTag::params;
  int64_t current_bytes = 0;  // after the last step
  int64_t peak_bytes = 0;     // over the run
  int64_t formula_bytes = 0;  // plan::model_state_bytes of the stage's parameters (fp32 Adam)
};

// One site of a rank's traffic: bytes moved per step, measured and planned.
struct SiteBytes {
  std::string site;  // "tp_block", "dp", ... (plan::kRankTrafficSites)
  double measured = 0, planned = 0;
};

struct RankRow {
  int rank = 0;
  std::string coords;  // "dp0 tp1 pp0"
  int node = 0;
  std::string layers;           // the stage's blocks, "0-1" (per chunk "0-1,4-5")
  int64_t param_count = 0;      // elements of the stage this rank holds (its TP shards)
  std::vector<StateRow> state;  // params, grads, optimizer
  // Activations: the tracker's peak; one micro-batch of every chunk as allocated and as planned
  // (plan::cp_activation_bytes_per_layer per block, at cp 1 activation_bytes_per_layer; the
  // head's or the stage output's tensors; under CP the allocated figure adds what the CP group
  // keeps per block, ContextParallelHooks::kept_bytes_per_block);
  // the most held at once in the last step, in micro-batches, beside the checker's count.
  int64_t activations_peak_bytes = 0;
  int64_t microbatch_activation_bytes = 0;
  double planned_microbatch_activation_bytes = 0;
  int64_t peak_inflight_bytes = 0;
  double measured_inflight = 0, checker_inflight = 0;
  // The checker's in-flight count x the planned micro-batch, + the workspace and recompute's
  // one-layer scratch (plan::workspace_activation_bytes, plan::recompute_scratch_bytes).
  double planned_activations_peak_bytes = 0;
  // ZeRO-3: the peak of the gathered weights and bucket gradients above the shards, beside
  // plan::unit_weights_peak_bytes (the units' weights held at once, in the executor's order)
  // plus plan::zero3_gathered_bytes' gradients (the embeddings' and the largest unit's).
  int64_t gathered_peak_bytes = 0, gathered_formula_bytes = 0;
  // Of gathered_peak_bytes - gathered_formula_bytes: a unit's gradient the communication thread
  // still held (reduce-scattering it) when the next unit's backward began; 0 and "" when none.
  int64_t in_flight_grad_bytes = 0;
  std::string in_flight_grad_unit;
  // Bytes moved per training step (mean over the steps; comm::Traffic::bytes_moved: sent, or
  // read in place from a peer's memory), measured by each group's communicator, beside
  // plan::predict_rank's for the same, one row per site in plan::kRankTrafficSites' order: TP's
  // blocks (f and g), vocabulary reductions, SP's re-gathers and LayerNorm sums, full
  // recompute's reruns; PP; DP (plan::stage_dp_bytes_moved: this rank's pieces, exact); the tied
  // embedding; EP's all-to-alls (the ep_* formulas fed the routing the EP group measured).
  std::vector<SiteBytes> traffic;
  const SiteBytes& site(std::string_view name) const;  // CHECKs that the site exists
  double other = 0;                                    // the loss and norm exchange (measured only)
  // By link class, per step: every communicator; the model's groups only, measured and
  // predicted (each formula's bytes sent where its algorithm sends them).
  double intra_node_bytes = 0, inter_node_bytes = 0;
  double model_intra_node_bytes = 0, model_inter_node_bytes = 0;
  double predicted_intra_node_bytes = 0, predicted_inter_node_bytes = 0;
  // With --cluster: this rank's collectives and sends per step priced on their links.
  double predicted_comm_ms = 0;
  // DP communication-thread time per step, the part hidden inside compute, and their ratio.
  double dp_comm_ms = 0, dp_hidden_ms = 0, dp_overlap_share = 0;
  double busy_ms = 0;  // compute in the last step
  // The clock's phases measured on this rank: medians over the steps after the first (step_s 0).
  plan::EnginePhases phases;
};

struct GroupCrossing {
  std::string axis;        // "tp", "dp", "pp"
  std::vector<int> ranks;  // global ranks of the group
  std::vector<int> nodes;  // the nodes it spans (more than one)
};

// A pipeline's bubble: the last step measured (as the checker defines it), the mean over every
// step but the first, and predicted from the measured F, B, W by plan::pipeline_bubble's
// closed form and by the checker's simulation of this very schedule.
struct BubbleReport {
  double makespan_ms = 0;
  double measured = 0, mean_measured = 0, predicted = 0, simulated = 0;
  double forward_ms = 0, backward_ms = 0, weight_ms = 0;  // per micro-batch and stage
};

// One CP rank's attention per step: bytes its CP group's communicator sent (forward, backward and
// full recompute's reruns) beside plan::cp_traffic_per_layer x layers x micro-batches, and the
// forward attention work it did, counted and timed, beside the pairs plan::causal_attention_pairs
// gives its split; with MoE, its routing all-gathers apart from the attention's bytes.
struct CpRankRow {
  int rank = 0, cp_rank = 0;
  double bytes = 0, bytes_formula = 0;
  double messages = 0, messages_formula = 0;  // ring hops or collective calls (one trace span)
  double pairs = 0, pairs_formula = 0;
  double attention_ms = 0;
  // MoE: the routing all-gathers' bytes moved (sent, or read in place) per step beside
  // plan::cp_moe_routing_gather_bytes fed to plan::collective_traffic, per routed block,
  // micro-batch and forward pass (0 dense).
  double routing_bytes = 0, routing_bytes_formula = 0;
};

struct LayoutReport {
  int version = kLayoutReportVersion;
  int dp = 1, tp = 1, pp = 1, zero_stage = 0;
  int cp = 1;                // context parallelism's group size
  std::string cp_algorithm;  // ring, all-gather or ulysses (with cp > 1)
  std::string cp_split;      // balanced or contiguous
  std::vector<CpRankRow> cp_ranks;
  // Busiest over mean CP rank of the pairs: the split's measured (counted) and the other
  // split's by plan::causal_work_imbalance; and of the measured attention times.
  // cp_other_imbalance: the other split's (-1: the balanced split cannot cut --seq-length into 2 x
  // cp chunks).
  double cp_imbalance = 0, cp_other_imbalance = 0, cp_time_imbalance = 0;
  int ep = 1, expert_dp = 1;  // --ep, and the ranks holding the same experts (dp / ep)
  int64_t experts_per_rank = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  std::string schedule, backend, rank_order, dp_all_reduce;
  std::string dp_algorithm;  // the flat DP syncs': ring or direct (--dp-algo, auto resolved)
  int microbatches = 1, chunks = 1;
  int64_t micro_batch = 0;  // rows per micro-batch on one DP rank
  int64_t bucket_bytes = 0;
  int buckets = 0;  // DP syncs per step on rank 0 (stage 3: units)
  int ranks_per_node = 0, nodes = 1;
  std::vector<RankRow> ranks;
  BubbleReport bubble;                   // pp > 1
  double dp_overlap_share = 0;           // over every rank: hidden / DP communication time
  std::vector<GroupCrossing> crossings;  // groups spanning nodes (empty on one node)
  std::vector<std::string> warnings;     // e.g. a TP group across nodes
  std::string cluster;                   // the --cluster file's name, when given
  double predicted_comm_ms = 0;          // the slowest rank's
  // Every rank's model traffic across nodes per step, summed: measured and predicted.
  double inter_node_bytes = 0, predicted_inter_node_bytes = 0;
  std::string trace_path, timeline_path;  // written, when asked for
  // --cluster with measured rates: each phase predicted beside measured (clock_report.h).
  std::optional<ClockReport> clock;
};

// This rank's measured figures per step and the plan/ formulas beside them (layout_measure.cc).
// Reads the engine's counters only; gather_layout_report collects every rank's row.
RankRow measure_rank(const Engine& engine);

// The mesh groups of `config` whose ranks sit on more than one node of its topology (none on
// one node), and the warnings the layout deserves before it runs (a TP group across nodes):
// resolve() prints them at the start, the report carries them in its JSON.
std::vector<GroupCrossing> node_crossings(const EngineConfig& config);
std::vector<std::string> layout_warnings(const EngineConfig& config);

// Every rank's row and last step gathered to rank 0 of `world` (a collective: every rank calls
// it); rank 0 gets the whole report and writes --trace / --timeline, the others an empty one.
LayoutReport gather_layout_report(const Engine& engine, comm::Communicator& world,
                                  const LayoutOptions& options);

void print_layout_report(std::ostream& out, const LayoutReport& report);
nlohmann::json layout_report_to_json(const LayoutReport& report);
// One rank's row in the "layout" object's "ranks", and back.
nlohmann::json row_to_json(const RankRow& row);
RankRow row_from_json(const nlohmann::json& j);

}  // namespace dtrain::train
