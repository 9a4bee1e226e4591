// The planner's pieces shared by its files (planner.cc, stage_params.cc, step_time.cc): the stage
// split and per-stage parameter counts, and the step's time priced group by group. Not part of
// the public API.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dtrain/clock/time_model.h"
#include "dtrain/cost/head_activation_memory.h"
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

// The blocks and parameters of pipeline stage `stage` on one rank: what its model states are
// priced from. Depends on tp, pp, v, ep and the stage (and --stage-layers, which search never
// sets).
struct StageBlocks {
  int64_t layers = 0;         // stage_layer_count
  int64_t routed = 0;         // stage_moe_layers
  int64_t params = 0;         // stage_params_of
  int64_t expert_params = 0;  // stage_expert_params
};
StageBlocks stage_blocks(const PlanInput& in, const Layout& l, int stage);

// planner.cc: one layer's activation figures of a layout, the same on every pipeline stage (so
// computed once per layout, and by search once per set of layouts alike in the axes they depend
// on: tp, cp and its algorithm, b, recompute, sp, ep and the schedule).
struct LayerActivations {
  double per_layer = 0;                    // one micro-batch's tensors kept for the backward
  double recompute_temp = 0;               // one layer's dropped tensors, re-created
  double weight_grad_stash_per_layer = 0;  // split backward (ZB-H1) only
  double moe_delta = 0;                    // a routed layer's tensors over the dense MLP's
  HeadActivationShape head;                // the rank's head and boundary tensors' shape
  double head_per_microbatch = 0;          // the last stage's head, one micro-batch
  double workspace = 0;                    // the backward's gradient workspace
  double ring_blocks = 0;                  // the ring's block pair scores (ring CP only)
};
LayerActivations layer_activations(const PlanInput& in, const Layout& l);

// stage_memory.cc: a stage's memory (evaluate's figures), each piece from the memo when given.
class PricingMemo;
double stage_inflight_microbatches(const Layout& l, int64_t microbatches, int stage);
MemoryBreakdown stage_state_memory(const PlanInput& in, const Layout& l, int stage,
                                   PricingMemo* memo = nullptr);
MemoryBreakdown memory_of_stage(const PlanInput& in, const Layout& l, int64_t microbatches,
                                int stage, const LayerActivations& a, PricingMemo* memo = nullptr);
// The stage that needs the most (the first of equals).
MemoryBreakdown heaviest_stage_memory(const PlanInput& given, const Layout& l, int64_t microbatches,
                                      PricingMemo* memo);

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

// One layer's, the embedding's and the head's times per micro-batch (time_model.h, operation by
// operation), the step's FLOPs and the convention's rescaling: what stage_compute builds the
// stages from. Depends on tp, cp, b, recompute, sp and ep (search shares it: PricingMemo).
struct LayerTimes {
  TrainingFlops total;  // whole step, whole cluster, the real model
  double model_scale = 1, recompute_scale = 1;
  PassTimes dense_layer, moe_layer, embedding, head;
};
LayerTimes layer_times(const PlanInput& in, const ModelShape& real_model, const Layout& l);
// `layer_times`, when given, is layer_times(in, real_model, l).
StageCompute stage_compute(const PlanInput& in, const ModelShape& real_model, const Layout& l,
                           const StageComm& comm, const LayerTimes* layer_times = nullptr);
std::pair<double, double> tp_times(const PlanInput& in, const Layout& l, int64_t microbatches,
                                   const GroupPlacement& group, std::vector<GroupTraffic>* rows);
// tp_times' calls of one layer and one micro-batch (forward, backward seconds), no rows: what
// search's step bound adds to each block.
std::pair<double, double> tp_layer_seconds(const PlanInput& in, const Layout& l,
                                           const GroupPlacement& group);
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

// The input with its links at the share collectives reach (effective_links): what a layout's
// time is priced on.
PlanInput linked_input(const PlanInput& given);
// The schedule a layout runs (interleaved when v > 1).
ScheduleKind schedule_of(const Layout& l);
// The input priced per rank: with more TP ranks than K/V heads, tp K/V heads (each rank keeps a
// copy of one).
PlanInput per_rank_input(const PlanInput& in, const Layout& l);

}  // namespace dtrain::plan::detail
