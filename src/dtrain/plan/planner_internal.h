// The planner's pieces shared by its files (planner.cc, stage_params.cc, step_time.cc): the stage
// split and per-stage parameter counts, and the step's time priced group by group. Not part of
// the public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "dtrain/clock/time_model.h"
#include "dtrain/plan/planner.h"

namespace dtrain::plan::detail {

// stage_params.cc: the stage split and the parameters each stage holds.
int64_t stage_layer_count(const ModelShape& m, const Layout& l, int stage);
bool even_split(const ModelShape& m, const Layout& l);
int64_t most_stage_layers(const ModelShape& m, const Layout& l);
std::vector<int> heaviest_stage_candidates(const ModelShape& m, const Layout& l);
int64_t moe_layer_dense_params(const ModelShape& m, int tp);
int64_t stage_moe_layers(const ModelShape& m, const Layout& l, int stage);
int64_t stage_expert_params(const ModelShape& m, const Layout& l, int stage);
int64_t engine_embedding_params(const ModelShape& m, const Layout& l, int stage);
// The last stage's head unit as the engine holds it: the final norm, and Llama's untied head.
int64_t engine_head_param_count(const ModelShape& m, const Layout& l);
int64_t engine_dp_pieces(const PlanInput& in, const Layout& l, int stage);
bool engine_split(const PlanInput& in);
int64_t stage_params_of(const PlanInput& in, const Layout& l, int stage);
int largest_stage(const PlanInput& in, const Layout& l);

// step_time.cc: the step's compute and collectives.
CpShape cp_shape(const PlanInput& in, const Layout& l);
double moe_load_factor(const PlanInput& in, const Layout& l);

// Seconds of compute per micro-batch on the slowest stage (time_model.h, operation by
// operation: the last stage adds the head, the first the embedding), the optimizer step of the
// rank holding the most parameters, and the step's FLOPs in the chosen convention. The 6ND
// convention rescales the times by its totals, as it rescales the FLOPs.
struct StageCompute {
  double forward_s = 0;
  double backward_s = 0;  // B + W, recompute included
  double recompute_s = 0;
  PassTimes stage;  // F, B (recompute in), W per micro-batch
  // The slowest stage's F, B, W with its own TP, CP and EP collectives (no sends).
  StageTimes stage_times;
  // The parts the pipeline simulation places on its virtual stages: the busiest stage's blocks
  // (with v > 1 every chunk is given 1/v of them), the embedding (first stage) and the head
  // (last), per micro-batch.
  PassTimes blocks, embedding, head;
  // What the simulation runs on, one entry per virtual stage: with v = 1 each stage's own blocks
  // and collectives (unequal stages each priced on their layers), the embedding and the head.
  std::vector<StageTimes> virtual_stage_times;
  double optimizer_s = 0;
  TrainingFlops total;  // whole step, whole cluster, the real model
};

// The collectives of one micro-batch through the stage with the most layers (TP, CP: forward
// and backward seconds) and the one with the most routed layers (EP); a stage with fewer pays
// its share, in proportion to its layers.
struct StageComm {
  double tp_forward_s = 0, tp_backward_s = 0;
  double cp_forward_s = 0, cp_backward_s = 0;
  int64_t layers = 0;
  double ep_forward_s = 0, ep_backward_s = 0;
  int64_t routed = 0;
};

// The ring's overlap, per layer and micro-batch: a hop (one K/V block forward, K/V with dK/dV
// backward) runs while the rank computes attention against the block it already holds, so a
// hop shows only where it is longer than one block's compute (the attention products, softmax
// and dropout of the layer, over cp blocks); the last backward hop, the dK/dV going home, has
// no block left to hide behind.
struct RingTiming {
  double hop_forward_s = 0, block_forward_s = 0;
  double hop_backward_s = 0, block_backward_s = 0;
  double last_hop_s = 0;
  bool hidden() const {
    return hop_forward_s <= block_forward_s && hop_backward_s <= block_backward_s;
  }
  // Exposed seconds per layer and micro-batch (full recompute reruns the forward's hops).
  double forward_exposed(int cp) const {
    return (cp - 1) * std::max(0.0, hop_forward_s - block_forward_s);
  }
  double backward_exposed(int cp, Recompute r) const {
    return (cp - 1) * std::max(0.0, hop_backward_s - block_backward_s) + last_hop_s +
           (r == Recompute::full ? forward_exposed(cp) : 0);
  }
};

StageCompute stage_compute(const PlanInput& in, const ModelShape& real_model, const Layout& l,
                           const StageComm& comm);
std::pair<double, double> tp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, std::vector<GroupTraffic>* rows);
double pp_send_time(const PlanInput& in, const Layout& l, int64_t microbatches,
                    const GroupPlacement& group, std::vector<GroupTraffic>* rows,
                    std::vector<double>* stage_bytes);
RingTiming ring_timing(const PlanInput& in, const Layout& l, const GroupPlacement& group);
std::pair<double, double> cp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, Plan* plan);
std::pair<double, double> ep_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& dp_group, Plan* plan);
void dp_times(const PlanInput& in, const Layout& l, int64_t microbatches, const StageCompute& sc,
              const GroupPlacement& group, std::vector<GroupTraffic>* rows, TimeBreakdown* t);
void engine_clock_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                        TimeBreakdown* t);

}  // namespace dtrain::plan::detail
