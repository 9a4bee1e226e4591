// Room train/ (dtrain::train): the step engine, the run loop, the layout and its report,
// progress, metrics and faults; includes every room but infer and cli.
//
// Engine: the one StepEngine, for every layout. Each rank holds one TP shard of one pipeline
// stage of one DP replica on a parallel::DeviceMesh; serial, DP, TP and PP runs are meshes
// whose other axes have size 1, and a size-1 axis skips its work (as Megatron's
// finalize_model_grads and picotron's train.py do). SPMD: every rank runs the whole training
// loop on the same global batches. A step:
//   1. this DP rank's B/dp rows run through the pipeline schedule (M micro-batches; with pp = 1
//      the schedule is M forward/backward pairs) on a stage model cut for its TP group
//      (parallel::PipelineExecutor over the PP group; TP through the model's hooks, sequence
//      parallel or not; activations recomputed as --recompute says);
//   2. data parallelism listens to the executor (parallel::DataParallel as its UnitHooks): each
//      gradient bucket is averaged over the DP group on a communication thread as soon as its
//      units' backward is done - once per step at ZeRO 0-1, per micro-batch into the shard at
//      ZeRO 2-3 - and ZeRO-3 gathers each unit's weights before its forward and backward and
//      frees them after, inside pipeline stages and TP shards alike;
//   3. gradient finalization (parallel/finalize_grads.h): the tied wte's halves summed between
//      the end stages and then averaged over DP, the sequence-parallel LayerNorm gradients
//      summed over TP, the global norm with every serial element counted once and summed in
//      rank order over the world, the clip scale;
//   4. AdamW on the part this rank owns (all of it at ZeRO 0, its shard otherwise), then ZeRO
//      1-2 all-gather the parameters.
// The loss every rank reports is the mean over the DP ranks of the last stages' losses. The
// engine only measures (counters, the last step's records); the report (report/layout_report.h)
// sets them beside the plan/ formulas.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/buffer.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/engine/step_config.h"
#include "dtrain/engine/step_engine.h"
#include "dtrain/machine/hardware.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/parallel/context_parallel.h"
#include "dtrain/parallel/data_parallel_hooks.h"
#include "dtrain/parallel/expert_parallel.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/mesh.h"
#include "dtrain/parallel/pipeline_executor.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/parallel/process_groups.h"
#include "dtrain/parallel/tensor_parallel.h"
#include "dtrain/trace/timeline.h"

namespace dtrain::train {

// The layout of a run, checked (engine/layout.h builds it from the flags).
struct EngineConfig {
  StepConfig step;  // model, global batch B, seq, AdamW, clipping, seed, threads, recompute
  int dp = 1, tp = 1, pp = 1;
  // Context parallelism: each sequence's tokens over cp ranks (parallel/context_parallel.h);
  // gradients are reduced and ZeRO shards over the DP x CP group.
  int cp = 1;
  plan::CpAlgorithm cp_algorithm = plan::CpAlgorithm::ring;
  model::CpTokenSplit cp_split = model::CpTokenSplit::balanced;  // ulysses: always contiguous
  // K/V's element size on the CP wire: the precision's (bf16 under bf16), or fp32 always (for
  // the test that sets the two side by side; no flag sets it).
  parallel::CpWire cp_wire = parallel::CpWire::by_precision;
  // Expert parallelism: EP groups of ep consecutive DP ranks (parallel/expert_parallel.h).
  int ep = 1;
  parallel::RankOrder rank_order = parallel::kDefaultRankOrder;
  int zero_stage = 0;  // 0..3 over the DP axis
  bool sequence_parallel = false;
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  int microbatches = 1;  // M per DP rank: B / dp rows split into M micro-batches
  parallel::StagePartition partition;
  int64_t bucket_bytes = int64_t{1} << 20;  // DP gradient buckets
  bool hierarchical = false;                // DP all-reduce two-level over the nodes (ZeRO 0)
  bool bf16_grad_reduce = false;            // --grad-reduce bf16: DP gradient syncs in bf16
  // --dp-algo: the flat DP syncs' algorithm (automatic: direct where the DP group shares memory)
  comm::Algorithm dp_algorithm = comm::Algorithm::automatic;
  comm::NodeTopology topology;           // where the ranks sit (one node by default)
  std::optional<plan::Cluster> cluster;  // --cluster: links to price each rank's traffic on
  bool record_collectives = false;       // keep the last step's TP collectives (for traces)

  int world() const { return dp * cp * tp * pp; }
  int64_t micro_batch() const { return step.batch / (int64_t{dp} * microbatches); }
};

// Bytes this rank sent during the training steps, summed over them, per kind.
struct EngineTraffic {
  double tp_block = 0;      // f and g of the blocks (all-reduces, or SP's gathers/scatters)
  double tp_vocab = 0;      // the vocabulary-parallel embedding and cross-entropy
  double tp_regather = 0;   // SP: backward's re-gathers of the LN outputs
  double tp_recompute = 0;  // full recompute: the forward reruns' f and g
  double tp_norms = 0;      // SP: the LayerNorm gradients' sum over TP (finalization)
  double tp_kv_copies = 0;  // tp above the K/V heads: each head's copies' gradient sum
  double pp = 0;            // activations and gradients between stages
  double dp = 0;            // every DP collective (buckets, ZeRO gathers, parameter gathers)
  double embedding = 0;     // the tied wte's sum between the end stages
  double other = 0;         // the loss and norm exchange over the world
  parallel::EpCounters ep;  // EP: the routed layers' all-to-alls by site (counts included)
  // EP: bytes sent by the formulas for the same exchanges, fed with the routing the EP group
  // measured (plan::ep_dispatch_bytes: dispatch forward and the combine's gradient;
  // ep_combine_bytes: combine forward and the dispatch's gradient; ep_counts_bytes).
  double ep_plan_counts = 0, ep_plan_dispatch = 0, ep_plan_combine = 0;
  // The dispatch forward's own (its rows' wire bytes differ under bf16: plan::ep_row_wire_bytes);
  // ep_plan_dispatch is the combine's gradient, the same rows in fp32.
  double ep_plan_dispatch_forward = 0;
  // How many routed blocks' forwards (per micro-batch, over the steps) had this rank's experts
  // compute each number of rows: the expert-TP all-reduces' sizes, for
  // plan::moe_tp_collectives_per_layer (a histogram: its size is bounded by the rows a block can
  // take, not by the run's length).
  std::map<int64_t, int64_t> moe_expert_rows;
  comm::LinkBytes links;        // every communicator, by link class
  comm::LinkBytes model_links;  // the TP, PP, DP and embedding groups' only
};

// A span measured on this rank's clock (core/timer.h now_us()).
struct MeasuredSpan {
  std::string what;
  trace::SpanKind kind = trace::SpanKind::other;
  double start_us = 0, end_us = 0;
  int64_t bytes = -1;  // bytes this rank sent in it, where measured (CP exchanges); else -1
};

// The last training step as it ran on this rank, for the timeline and the bubble.
struct StepTrace {
  std::vector<parallel::MeasuredAction> actions;  // the schedule's compute and sends/receives
  std::vector<MeasuredSpan> collectives;    // TP, EP and CP exchanges (with record_collectives)
  std::vector<MeasuredSpan> data_parallel;  // DP syncs and ZeRO gathers (comm thread)
  std::vector<MeasuredSpan> finalize;       // the step after the schedule, phase by phase
  int64_t peak_inflight_bytes = 0;
};

// One step's pipeline extent on this rank, for the bubble of every step.
struct StepTiming {
  double first_start_us = 0, last_end_us = 0, busy_us = 0;
};

// One step on this rank split into the clock's phases (clock/engine_clock.h), in microseconds:
// forward and backward are the schedule's compute actions less the TP collectives and the
// DP/ZeRO waits inside them; tp_comm those TP collectives; pipeline_wait the schedule's extent
// less its compute actions (bubble, sends and receives waited for); exposed_dp the waits for
// the DP communication thread (inside compute: ZeRO-3's gathers; after the schedule: the last
// buckets, the tied embedding's sum and sync, ZeRO 1-2's gather of the updated weights);
// optimizer the gradient norm (with the loss exchange) and AdamW.
struct StepPhases {
  double forward_us = 0, backward_us = 0, tp_comm_us = 0, pipeline_wait_us = 0;
  double exposed_dp_us = 0, optimizer_us = 0;
};

// The step after the schedule, phase by phase (finalize_and_update): each phase's span goes to
// the trace under its name and its time to one of the clock's phases (clock_phase).
enum class FinalizePhase {
  dp_bucket_wait,     // the last DP buckets' syncs
  tied_wte_sum,       // the end stages' tied embedding halves summed (pipeline only)
  embedding_dp_sync,  // the embeddings unit's DP sync, deferred to the step's end (pipeline)
  grad_norm_and_loss,
  adamw,
  param_all_gather,  // ZeRO 1-2: the updated weights gathered
};
std::string_view name(FinalizePhase phase);  // "wait for DP buckets", "AdamW", ...
// Where a finalize phase's time goes in StepPhases: the optimizer's (norm and AdamW), the
// pipeline wait (the tied sum waits for the other end stage's last backward), or exposed DP.
enum class ClockPhase { optimizer, pipeline_wait, exposed_dp };
ClockPhase clock_phase(FinalizePhase phase);

class Engine final : public StepEngine {
 public:
  // Every rank of `world` (dp * tp * pp ranks) constructs one; it forms the TP, PP, DP and
  // embedding subgroups from the mesh.
  Engine(const EngineConfig& config, comm::Communicator& world);
  ~Engine() override;

  std::string describe() const override;
  StepStats train_step(const data::Batch& batch, float lr) override;
  float eval_loss(const data::Batch& batch) override;
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model::gpt_param_count(config_.step.model); }

  // Checkpoints: a tensor's parameters are written by DP rank 0 of its replicas (TP rank 0 for
  // the TP-replicated ones; the first stage for the tied wte) at ZeRO 0-2 and by each shard's
  // owner at ZeRO 3; the AdamW moments by DP rank 0 at stage 0 and by each shard's owner at
  // stages 1-3.
  checkpoint::StateLayout state_layout() const override;
  checkpoint::RankState export_state() override;
  void import_state(const checkpoint::SerialState& state) override;
  comm::Communicator* job_communicator() override { return &world_; }

  // --- what the report reads
  const EngineConfig& config() const { return config_; }
  const parallel::DeviceMesh& mesh() const { return mesh_; }
  parallel::MeshCoord coord() const { return coord_; }
  int global_rank() const { return world_.global_rank(); }
  model::GptModel& model() { return model_; }
  const model::GptModel& model() const { return model_; }
  const parallel::PipelineExecutor& executor() const { return *executor_; }
  const parallel::DataParallel& data_parallel() const { return *dp_; }
  const parallel::TensorParallelGroup& tensor_parallel() const { return *hooks_; }
  // The CP group's hooks (null without --cp).
  const parallel::ContextParallelGroup* context_parallel() const { return cp_hooks_.get(); }
  // The CP counters of the training steps only (evaluations run forwards too), summed.
  const parallel::ContextParallelCounters& cp_counters() const { return cp_counters_; }
  const parallel::ExpertParallelGroup& expert_parallel() const { return *ep_hooks_; }
  int ep_rank() const { return coord_.dp % config_.ep; }
  bool has_embedding_group() const { return groups_.embedding != nullptr; }
  int64_t steps() const { return steps_; }
  const EngineTraffic& traffic() const { return traffic_; }
  // DP communication-thread time in the steps, and the part of it inside compute windows
  // (minus the compute thread's waits for it there), summed over the steps.
  double dp_comm_us() const { return dp_comm_us_; }
  double dp_hidden_us() const { return dp_hidden_us_; }
  const StepTrace& last_step() const { return last_; }
  const std::vector<StepTiming>& timings() const { return timings_; }
  const std::vector<StepPhases>& phases() const { return phases_; }  // one per step
  // MoE with a measured-rate --cluster, one per step (the first and the latest 32): an entry per
  // routed block, micro-batch and EP group (every pipeline stage, CP rank and group of --ep DP
  // ranks; TP ranks route alike), the rows each of the E experts computed: the group's ranks'
  // kept assignments summed.
  const std::vector<std::vector<std::vector<double>>>& block_routings() const {
    return block_routings_;
  }
  // This rank's parameters after the step: the stage's TP shards (ZeRO-3: gathered, a
  // collective over the DP group every rank must call).
  std::vector<float> gather_params();

 private:
  // This DP rank's rows of a global batch; under CP only this CP rank's tokens of each row
  // (copied into `store`, in the model's local token order).
  std::span<const int32_t> my_rows(const std::vector<int32_t>& ids,
                                   std::vector<int32_t>& store) const;
  parallel::GradOwnership grad_ownership() const;
  float mean_loss(float last_stage_loss);  // a collective over the world
  // MoE: every rank's routing counts summed into the step's stats (a collective over the world).
  void gather_routing(StepStats& stats, const model::MoeCounts& mine);
  // EP: the step's exchange bytes by the plan/ formulas, from every EP rank's routing (each
  // rank's kept rows per expert summed over its routed layers and micro-batches: the bytes are
  // linear in them). A collective over the world.
  void add_ep_plan_bytes(const model::MoeCounts& mine);
  // MoE with a measured-rate --cluster: every EP group's rows per expert in each routed block and
  // micro-batch, appended to block_routings_ (a collective over the world, outside the step's
  // counted traffic).
  void gather_block_routings(const model::MoeCounts& mine);
  // A step's bookkeeping kept from its start to its record: the counters' snapshots (counters
  // are cumulative; the step's share is the difference) and the span lists the hooks fill.
  struct StepStart {
    EngineTraffic traffic;
    parallel::ContextParallelCounters cp;
    parallel::EpCounters ep;
    std::vector<parallel::SiteSpan> tp_spans, ep_spans, cp_spans;
  };
  // The step's four parts: begin (snapshots, span recording on), run the schedule, finalize the
  // gradients and update, record (spans, the counters' differences, the clock's measurement).
  void begin_step(StepStart& start);
  parallel::PipelineStepRecord run_schedule(const data::Batch& batch, StepStats& stats);
  void finalize_and_update(StepStats& stats, float lr);
  void record_step(const parallel::PipelineStepRecord& record, StepStart& start);
  EngineTraffic traffic_snapshot() const;
  // The global gradient norm of what this rank holds after the syncs (clip scale included).
  parallel::GradNorm gradient_norm();
  // The global gradient norm over split shards' pieces (UpdatePiece or MixedUpdate): SP's norm
  // gradients all-reduced first, each piece's owned squares summed.
  template <typename Piece>
  parallel::GradNorm split_shards_norm(const std::vector<Piece>& pieces);
  void measure_step(const parallel::PipelineStepRecord& record,
                    const std::vector<parallel::SiteSpan>& tp_spans);

  EngineConfig config_;
  comm::Communicator& world_;
  parallel::DeviceMesh mesh_;
  parallel::MeshCoord coord_;
  // Every group, formed once (the DataParallel hooks take the data group's async copy and the
  // expert-DP group).
  parallel::ProcessGroups groups_;
  MemoryTracker tracker_;  // declared before the buffers it accounts for
  model::ThreadTeam team_;
  std::unique_ptr<parallel::TensorParallelGroup> hooks_;
  std::unique_ptr<parallel::ContextParallelGroup> cp_hooks_;
  std::vector<int32_t> cp_inputs_, cp_targets_;  // my_rows' copies under CP
  std::unique_ptr<parallel::ExpertParallelGroup> ep_hooks_;
  model::GptModel model_;
  parallel::StageUnits units_;
  std::unique_ptr<parallel::DataParallel> dp_;
  optim::AdamW adamw_;  // the owned range's moments (ZeRO 1-3), or every element's
  std::unique_ptr<parallel::PipelineExecutor> executor_;
  int64_t steps_ = 0;
  EngineTraffic traffic_;
  parallel::ContextParallelCounters cp_counters_;
  double dp_comm_us_ = 0, dp_hidden_us_ = 0;
  StepTrace last_;
  std::vector<StepTiming> timings_;
  std::vector<StepPhases> phases_;
  StepPhases finalize_phases_;  // this step's finalize time by clock phase (finalize_and_update)
  std::vector<std::vector<std::vector<double>>> block_routings_;
};

}  // namespace dtrain::train
