// The planner: for a model, a training setup and a cluster, what one layout costs (evaluate:
// memory per GPU, communication per group, bubble, step time, MFU, days) and which layouts are
// best (search: every valid dp, tp, pp, v, ZeRO stage, micro-batch, recompute and sequence
// parallelism, ranked by predicted throughput, with the reasons and the main rejections).
// Every figure comes from the formula headers of plan/; this file only composes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/cost/activation_memory.h"
#include "dtrain/cost/compute_model.h"
#include "dtrain/cost/context_parallel.h"
#include "dtrain/cost/memory_model.h"
#include "dtrain/cost/model_presets.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/cost/placement.h"
#include "dtrain/cost/rank_prediction.h"
#include "dtrain/machine/hardware.h"

namespace dtrain::plan {

// Which tensors count as activations. paper: Korthikanti et al.'s components as the paper
// gives them (GPT layers with dropout masks, Llama layers without; no LayerNorm statistics).
// engine: what dtrain's engine keeps (activations.h): no dropout, the LayerNorms' mean and 1/std
// (ActivationShape::count_layernorm_stats), and at pipeline-stage boundaries the tensors of
// stage_boundary_activation_bytes (head_activation_memory.h).
// engine_mixed: the engine under --precision bf16: a block keeps the tensors only matrix
// products read in bf16 and those an elementwise backward reads (LayerNorm inputs, softmax
// output, GELU input) and the LayerNorm statistics in fp32; the head, the stage boundaries and
// the backward workspace stay fp32, and the workspace holds one block's fp32 working copies
// (every tensor but the input: recompute_scratch_bytes of full recompute).
enum class ActivationCount { paper, engine, engine_mixed };

// Bounds on the training flags, far past any real run: sequences per step, tokens to train,
// and bytes per activation element (8: fp64).
inline constexpr int64_t kMaxGlobalBatch = 1000000000;
inline constexpr double kMaxTokens = 1e18;
inline constexpr int64_t kMaxActivationBytes = 8;

struct Training {
  int64_t global_batch = 0;  // B: sequences per optimizer step (sequence length: model.seq)
  double tokens = 0;         // tokens to train, for the days estimate; 0 = none
  StateBytes state_bytes = kMixedPrecisionAdam;
  int64_t activation_bytes = 2;  // bytes per activation element (bf16)
  FlopsConvention flops = FlopsConvention::narayanan;
  // Gradient bucket for data parallelism: PyTorch DDP's default bucket_cap_mb = 25 (MiB).
  double bucket_bytes = 25.0 * 1024 * 1024;
  // Appended, so existing initialisers keep their meaning. dtrain's own engine is
  // {kFp32Adam, activation_bytes 4, ActivationCount::engine} on a ModelShape with
  // count_final_norm (tests/e2e/planner_vs_engine_test.cc); under --precision bf16
  // {kMixedPrecisionAdam, activation_bytes 2, ActivationCount::engine_mixed}.
  ActivationCount activation_count = ActivationCount::paper;
  // A rate the user measured, instead of the model's step time (at most one, 0 = none):
  // hardware FLOP/s per GPU achieved (recompute counted, as Narayanan et al.'s figures), or the
  // step time itself. Tokens/s, MFU, HFU and days then follow from it.
  double achieved_flops_per_gpu = 0;
  double step_time_s = 0;
  // How HFU (and the hardware FLOPs that --achieved-tflops converts) counts selective
  // recompute; step time always charges the work redone (SelectiveFlops::rerun).
  SelectiveFlops selective_flops = SelectiveFlops::korthikanti_eq8;
  // Appended: an MoE model's measured routing, tokens routed to each expert (E entries, any
  // scale; empty = uniform): it sets the all-to-all bytes and the busiest rank's expert work
  // (moe.h MoeDispatch).
  std::vector<double> tokens_per_expert;
  // The engine clock (a cluster file with measured rates): compute threads per rank, as the
  // engine's --threads (default 1, the engine's).
  int engine_threads = 1;
};

// Where a plan's step time comes from.
enum class StepTimeSource { predicted, achieved_flops, measured_step };
std::string_view name(StepTimeSource s);  // "predicted", "--achieved-tflops", "--step-time"

// 1 PF-day = 10^15 FLOP/s for a day (Brown et al. 2020's unit of training compute).
inline constexpr double kFlopsPerPfDay = 1e15 * 86400;

struct Layout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int vp = 1;  // model chunks per pipeline rank (v); > 1 runs the interleaved schedule
  int zero_stage = 0;
  int64_t micro_batch = 1;  // b
  Recompute recompute = Recompute::none;
  bool sequence_parallel = false;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;  // interleaved when vp > 1
  RankOrder order;                                    // Megatron's tp-dp-pp by default
  // Appended. Context parallelism (context_parallel.h): each sequence's tokens split over cp
  // ranks (world = dp x cp x tp x pp; CP sits right outside TP in the rank order); automatic
  // picks the algorithm by choose_cp_algorithm's rule when the layout is evaluated.
  int cp = 1;
  CpAlgorithm cp_algo = CpAlgorithm::automatic;
  // Appended. Expert parallelism (moe.h): ep ranks of each DP group share one copy of the
  // experts, E / ep each; expert state is data-parallel over dp / ep ranks.
  int ep = 1;
  // Appended. Transformer layers on each pipeline stage (--stage-layers: pp entries summing to
  // the model's layers; v = 1 only). Empty: the balanced split (pipeline_stages.h), the engine's
  // default: floor(L / P) per stage, the remainder on the interior stages first, then the first,
  // never the last. With v > 1 the chunks must split evenly (--pp x --vp dividing --layers).
  std::vector<int> stage_layers;
};
std::string describe(const Layout& layout);  // "dp=8 tp=8 pp=1 zero=1 b=1 rc=selective sp"
// The `dtrain plan` flags that select it: "--dp 8 --tp 8 --pp 1 --zero 1 --micro-batch 1 ...".
std::string layout_flags(const Layout& layout);

struct PlanInput {
  ModelShape model;
  Training training;
  Cluster cluster;
};
// Throws Error naming the flag at fault (model shape, cluster, training sizes).
void validate(const PlanInput& input);

// The engine profile, which a cluster file with measured CPU rates selects: dtrain's own engine
// (clock/engine_clock.h) with its fp32 Adam and fp32 activations unless the precision or the
// activation bytes were given, its activation count and tensor split, the final LayerNorm
// counted.
void use_engine_profile(PlanInput& input, bool precision_given, bool activation_bytes_given);

// Transformer layers on each pipeline stage (pp entries; with v > 1 all of a rank's chunks):
// layout.stage_layers when given, else the balanced split. For a valid layout
// (layout_error empty); Llama 3 405B's 126 layers on --pp 16: 7, 8 x 14, 7.
std::vector<int64_t> pipeline_stage_layers(const ModelShape& model, const Layout& layout);

// The planner's engine profile (a GPT with the engine's activation count, no --params): pipeline
// stage `stage` of `layout` on dtrain's own engine as predict_rank (cost/rank_prediction.h) reads
// it, the same description `dtrain train` builds for its memory check (report/rank_description.h).
// Empty for the paper's count, other families, or --params.
std::optional<EngineRank> engine_rank_of(const PlanInput& input, const Layout& layout,
                                         int64_t microbatches, int stage);
// "7, 8 (x14), 7": a run of equal stages as one entry with its count.
std::string format_stage_layers(const std::vector<int64_t>& stage_layers);

// Empty when `layout` is valid for `input`; otherwise why not, naming the flags
// ("--tp 3 does not divide --heads 64").
std::string layout_error(const PlanInput& input, const Layout& layout);

struct MemoryBreakdown {
  int stage = 0;             // the pipeline stage reported: the one that needs the most
  int64_t layers = 0;        // transformer layers on that stage
  int64_t stage_params = 0;  // its parameters on one TP rank, before ZeRO sharding
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  // In flight x (layers x per-layer bytes, + the head on the last stage, + the stage's boundary
  // tensors with ActivationCount::engine).
  double activations = 0;
  double head_activations = 0;      // of which the head's (final norm, logits, losses)
  double activation_per_layer = 0;  // activation_bytes_per_layer, one micro-batch
  // ZB-H1: weight_grad_stash_bytes_per_layer, kept with each micro-batch from its B to its W
  // (included in activations; 0 for the fused-backward schedules).
  double weight_grad_stash_per_layer = 0;
  double inflight_microbatches = 0;  // ZB-H1: F until W (peak_weight_stash_microbatches)
  // Communication buckets, ZeRO-3 gathered layers, a recomputed layer, the backward workspace.
  double temporary = 0;
  double workspace = 0;  // of which the backward workspace (workspace_activation_bytes)
  // of which one layer's recomputed tensors (recompute_scratch_bytes; under engine_mixed the
  // fp32 working copies of a layer's bf16 tensors)
  double layer_scratch = 0;
  double capacity = 0;
  // Appended, MoE: routed layers on the stage, of stage_params the routed experts this rank
  // holds (E / ep per routed layer, 1/tp of each), and a routed layer's activations for one
  // micro-batch (in activations, in place of activation_per_layer for those layers).
  int64_t moe_layers = 0;
  int64_t expert_params = 0;
  double moe_activation_per_layer = 0;
  // Appended, the engine profile only (engine_rank_of; 0 otherwise): predict_rank's peak for
  // dtrain's engine on this stage, the figure `dtrain train` checks before it runs the layout
  // (its exact buckets, workspace and in-flight count; the rows above are the planner's form).
  double engine_peak_bytes = 0;
  double total() const { return params + grads + optimizer + activations + temporary; }
  bool fits() const { return total() <= capacity; }
  double headroom() const { return capacity - total(); }  // negative: over by that much
};

// One kind of collective (or the pipeline's sends) of one parallel group, per step.
struct GroupTraffic {
  std::string_view group;  // "TP", "PP", "DP", "ZeRO" (ZeRO's weight gathers)
  std::string_view op;     // "all_reduce", ..., "send/recv"
  std::string_view what;
  int size = 1;   // ranks in the group
  int nodes = 1;  // nodes the group spans
  bool inter_node = false;
  bool hierarchical = false;
  int64_t calls = 0;  // per step
  int64_t steps = 0;  // per step
  double bytes_per_rank = 0;
  double time_s = 0;     // per step, with nothing overlapped
  double exposed_s = 0;  // per step, what overlap leaves on the critical path
};

struct TimeBreakdown {
  double compute_s = 0;    // FLOPs of one rank's (slowest) stage per step, recompute included
  double recompute_s = 0;  // of which recompute
  double tp_s = 0;         // TP collectives (on the critical path)
  double pp_s = 0;         // pipeline sends (on the critical path)
  double bubble_s = 0;
  double dp_s = 0;          // DP and ZeRO collectives
  double dp_exposed_s = 0;  // of which overlap cannot hide
  BubbleEstimate bubble;    // pipeline_bubble on the stage times
  StageTimes stage_times;   // the slowest stage's F, B, W per micro-batch, TP and PP sends in
  double step_no_overlap_s = 0;
  double step_s = 0;          // with DP/ZeRO communication overlapped where it can be
  double model_flops = 0;     // per step, whole cluster, without recompute
  double hardware_flops = 0;  // with recompute
  double tokens_per_s = 0;
  double mfu = 0;                     // model_flops / (step_s x GPUs x peak)
  double hardware_flops_per_gpu = 0;  // hardware_flops / (step_s x GPUs): Narayanan's figure
  double days = 0;                    // training.tokens at tokens_per_s; 0 without tokens
  // Appended. The step time's source and the model's own prediction (equal when predicted).
  StepTimeSource step_source = StepTimeSource::predicted;
  double predicted_step_s = 0;
  double hfu = 0;                  // hardware_flops / (step_s x GPUs x peak): recompute counted
  double cluster_flops_per_s = 0;  // hardware_flops / step_s, the whole cluster
  // Training compute for training.tokens (0 without): 6 N D (Kaplan et al. 2020), and the
  // per-iteration count of training.flops times the iterations D / (B s), without and with
  // recompute.
  double total_flops_6nd = 0;
  double total_model_flops = 0;
  double total_hardware_flops = 0;
  // Appended: the optimizer step (time_model.h optimizer_seconds), in step_s.
  double optimizer_s = 0;
  // Appended: which clock priced the step: "gpu rates" (time_model.h) or, on a cluster file
  // with "gpu.measured", "engine (measured rates)" (engine_clock.h: dtrain's own engine).
  std::string_view clock = "gpu rates";
  double stretch = 1;  // engine clock: compute slowed by ranks x threads over the cores
  int threads = 0;     // engine clock: compute threads per rank (0: the GPU clock)
  // Appended: context parallelism's K/V traffic per step, all of it (cp_total_s) and what the
  // ring's overlap with block compute leaves on the critical path (cp_s; all of it for the
  // all-gather and ulysses collectives, which the attention waits for).
  double cp_s = 0;
  double cp_total_s = 0;
  // Appended: expert parallelism's all-to-all (dispatch and combine, forward and backward) per
  // step on the critical path (nothing overlaps it: the experts wait for their tokens).
  double ep_s = 0;
  // Appended: what the GPU clock's pipeline simulation (pipeline_simulation.h) ran on: each
  // virtual stage's F, B, W per micro-batch (TP and CP collectives in) and one message's send.
  std::vector<StageTimes> virtual_stage_times;
  double pp_message_s = 0;
};

// What an MoE model does in one layout: its parameters, EP's groups and all-to-all traffic.
struct MoeReport {
  bool enabled = false;
  int64_t total_params = 0;   // shape_param_count (or --params)
  int64_t active_params = 0;  // active_param_count: what a token's forward touches
  int ep = 1;
  int expert_dp = 1;  // expert-data-parallel degree: dp x cp / ep
  int64_t experts_per_rank = 0;
  int64_t moe_layers = 0;   // routed layers on the busiest stage
  double load_factor = 1;   // expert_load_factor of the routing
  int busiest_rank = 0;     // busiest_ep_rank
  bool inter_node = false;  // the EP group spans nodes
  MoeA2aRank dispatch;      // one routed layer, one micro-batch, the busiest EP rank
  MoeA2aRank combine;
  // Bytes the busiest rank sends per routed layer and micro-batch: forward dispatch + combine
  // and their two backward all-to-alls (+ the forward's again under full recompute).
  double bytes_per_layer = 0;
  double bytes_per_step = 0;  // x routed layers x micro-batches
};

// What context parallelism does in one layout (cp > 1): the algorithm and why, and its traffic.
struct CpReport {
  CpAlgorithm algorithm = CpAlgorithm::ring;  // resolved (never automatic)
  std::string why;
  CpLayerTraffic per_layer;         // one rank, one layer, one micro-batch
  double bytes_per_step = 0;        // one rank: per_layer x the stage's layers x micro-batches
  double ring_hop_s = 0;            // ring: one forward hop's seconds, and one block's attention
  double ring_block_s = 0;          //   compute it hides behind (forward)
  double imbalance_balanced = 1;    // busiest / mean causal work, the split used
  double imbalance_contiguous = 1;  // the same with contiguous chunks (2 - 1/cp as T grows)
  int64_t layers = 0;  // appended: the stage's layers bytes_per_step counts (the most any has)
};

struct Plan {
  Layout layout;
  int64_t microbatches = 0;  // M = B / (dp x b)
  MemoryBreakdown memory;
  std::vector<GroupTraffic> traffic;
  TimeBreakdown time;
  // Bytes each pipeline stage's rank sends per step (pp_sends_per_microbatch x M x the message;
  // empty when pp = 1). The PP row of `traffic` is the busiest of them.
  std::vector<double> pp_bytes_per_stage;
  CpReport cp;    // appended; meaningful when layout.cp > 1
  MoeReport moe;  // appended; meaningful when moe.enabled
  // Appended: transformer layers on each pipeline stage (pipeline_stage_layers). Each stage is
  // priced on its own: memory is the stage that needs the most, the pipeline is simulated on
  // every stage's own times (the slowest sets the steady state), TP, CP and DP rows are the
  // busiest stage's.
  std::vector<int64_t> stage_layers;
};

// Memory of one pipeline stage (0 = first) on one GPU; evaluate reports the stage that needs
// the most. Throws Error(layout_error) when the layout is not valid.
MemoryBreakdown stage_memory(const PlanInput& input, const Layout& layout, int stage);

// The whole report for one layout. Throws Error(layout_error) when the layout is not valid; a
// layout that does not fit is valid (memory.fits() says so).
Plan evaluate(const PlanInput& input, const Layout& layout);

// What search ranks by before it replays a schedule: evaluate with the pipeline's makespan
// replaced by pipeline_makespan_lower_bound (pipeline_simulation.h). The memory is evaluate's
// to the bit; time.step_s is never above evaluate's (the step is the makespan plus terms that
// do not depend on it; on the engine clock it is 0 unless --step-time or --achieved-tflops set
// it); the other pipeline figures (bubble, pipeline sends) are not filled in.
Plan evaluate_lower_bound(const PlanInput& input, const Layout& layout);
// Its step alone (the memory not priced): what search ranks a layout it knows fits by.
double step_lower_bound(const PlanInput& input, const Layout& layout);
// The memory alone (evaluate's to the bit; no time, traffic or pipeline figures): what search
// needs of a layout before it knows the layout fits.
Plan evaluate_memory(const PlanInput& input, const Layout& layout);
// A lower bound on evaluate's memory total that needs neither activations nor the CP algorithm
// (the first stage's model states): what lets search set aside a layout that cannot fit, nor be
// the closest miss, without pricing it.
double memory_lower_bound(const PlanInput& input, const Layout& layout);

// What a search may vary: each axis set here is fixed to that value (the user's --tp 8 with
// --search), the others range over every valid value.
struct SearchConstraints {
  std::optional<int> dp, tp, pp, vp, zero_stage;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> microbatches;  // M per replica: global batch / (dp x b)
  std::optional<Recompute> recompute;
  std::optional<bool> sequence_parallel;
  std::optional<int> cp;               // appended: context parallelism (--cp)
  std::optional<CpAlgorithm> cp_algo;  // --cp-algo (auto: the rule, per layout)
  std::optional<int> ep;               // appended: expert parallelism (--ep)
  bool any() const {
    return dp || tp || pp || vp || zero_stage || micro_batch || microbatches || recompute ||
           sequence_parallel || cp || cp_algo || ep;
  }
  // The layout's fixed axes have the fixed values (M = global_batch / (dp x b)).
  bool admits(const Layout& l, int64_t global_batch) const;
};

// "dp=8 tp=2 zero=1": the fixed axes, for reports and errors ("" when none).
std::string describe(const SearchConstraints& c);

struct SearchOptions {
  int top = 5;  // plans to keep
  SearchConstraints fixed;
  // Replay every fitting layout's schedule instead of only those a lower bound cannot rule
  // out: the same result, slower (tests compare the two).
  bool exhaustive = false;
};
// What a search costs, estimated before it starts: a layout takes about 3.4 us to evaluate with
// its pipeline's lower bound (the few replayed add little), plus about 86 ns per rank of its
// DP, TP, PP and CP groups (the placement walks each group); fitted to six full searches (the
// 1T model on 3072 A100s, GPT-3 on 128 and 1024, Llama 2 70B on 64 and 512 H100s, 1.7B on 16
// A100s: within 25% of each) on one core of the build machine. A search estimated past
// kMaxSearchSeconds is refused rather than left running for minutes.
inline constexpr double kSecondsPerLayout = 3.4e-6;
inline constexpr double kSecondsPerGroupRank = 8.6e-8;
inline constexpr double kMaxSearchSeconds = 30;
struct SearchSize {
  int64_t layouts = 0;  // what search() would evaluate
  double seconds = 0;   // about how long that takes
};
// Counts the layouts without evaluating any (milliseconds where the search takes seconds).
SearchSize search_size(const PlanInput& input, const SearchConstraints& fixed = {});

struct RankedPlan {
  Plan plan;
  std::string why;
};

struct Rejection {
  std::string reason;
  int64_t count = 0;
  std::string example;
};

struct SearchResult {
  std::vector<RankedPlan> top;            // best first
  std::vector<std::string> explanations;  // why the main alternatives lost
  std::vector<Rejection> invalid_splits;  // (dp, tp, pp) splits that cannot run, by reason
  int64_t splits = 0;                     // (dp, cp, tp, pp) splits of the GPUs considered
  int64_t evaluated = 0;                  // layouts evaluated (memory, a bound on the step)
  int64_t fitting = 0;                    // of which fit in memory
  // Of the evaluated, how many had their memory priced (evaluate_memory); the rest were set
  // aside by a lower bound on it (the first stage's model states and its blocks'
  // activations): over the GPU's memory and no closer than the closest misses.
  int64_t priced = 0;
  // Of the fitting, how many had their step bounded in full (step_lower_bound: every collective,
  // the pipeline's bound); the rest were ruled out by their first stage's compute alone.
  int64_t bounded = 0;
  // Of those, how many had their schedule replayed (evaluate); the rest were ruled out by
  // step_lower_bound, their step's lower bound being slower than every ranked plan.
  int64_t simulated = 0;
  SearchConstraints fixed;  // the axes the search held fixed
};

// Every valid layout with the Megatron rank order and the 1F1B schedule (interleaved for v > 1).
SearchResult search(const PlanInput& input, const SearchOptions& options = {});
// The layouts search evaluates, in its order.
std::vector<Layout> search_layouts(const PlanInput& input, const SearchConstraints& fixed = {});

}  // namespace dtrain::plan
