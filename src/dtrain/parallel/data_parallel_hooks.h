// DataParallel: data parallelism and ZeRO 0-3 as UnitHooks on one rank's stage model, for every
// layout. It never runs the model: the pipeline executor runs it (any schedule, P = 1 included)
// and calls the hooks, and a communication thread averages the gradients as their units finish
// (Rajbhandari et al. 2020; Megatron's DDP; picotron's DataParallelBucket).
//
//   stage 0  full params, grads and AdamW moments; each bucket all-reduced (avg), flat or
//            two-level over the nodes, once its units' last backward of the step is done
//   stage 1  moments for this rank's range only; each bucket reduce-scattered into its owners'
//            ranges in place (in the full gradient buffer) at the same moment; after the update
//            the parameters are all-gathered
//   stage 2  no full gradient buffer either: a bucket's gradients live in a buffer of its own
//            from the first backward that adds to them until the micro-batch's contribution is
//            complete, then are reduce-scattered into this rank's gradient shard (accumulating
//            over micro-batches) and freed
//   stage 3  no full parameter buffer either: a unit's weights are all-gathered from the shards
//            into a temporary buffer when the executor acquires them (the next unit's gather is
//            issued while this one computes) and freed when it releases them; gradients as at
//            stage 2, one unit a bucket
//
// Mixed precision (`mixed_precision`, --precision bf16) changes what each stage keeps, not when it
// syncs: the parameters and gradients at rest are bf16 (2 + 2 bytes), the optimizer owns fp32
// master weights of the range it updates beside the moments (4 + 8), so a rank holds 16 Psi at
// stage 0, 4 Psi + 12 Psi/N at 1, 2 Psi + 14 Psi/N at 2 and 16 Psi/N at 3 (plan::
// model_state_bytes with kMixedPrecisionAdam). The model's fp32 kernels run on working copies:
// acquire widens a unit's bf16 weights (gathered in bf16 at stage 3) into an fp32 buffer, freed
// at release; at stages 0-1 a unit's backward adds into an fp32 buffer that end_backward rounds
// into the bf16 gradient (stages 2-3 round each reduce-scatter's result into the bf16 shard).
// The gradient syncs keep --grad-reduce's wire (fp32 by default: a bf16 bucket is widened, each
// hop adds fp32, the average is rounded once); the parameter gathers move bf16.
//
// Every rank of the DP group runs the same schedule on the same stage, so the hooks make the
// same calls in the same order and the collectives inside match. One unit may be deferred: the
// tied wte of a pipeline's end stages, whose gradient is summed with the other end stage's
// (parallel/finalize_grads.h) before it is averaged; it syncs in sync_deferred().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/hierarchical.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/buffer.h"
#include "dtrain/model/gpt.h"
#include "dtrain/parallel/comm_thread.h"
#include "dtrain/parallel/data_parallel.h"
#include "dtrain/parallel/unit_hooks.h"
#include "dtrain/parallel/zero.h"

namespace dtrain::parallel {

struct DataParallelConfig {
  int zero_stage = 0;                       // 0 .. 3
  int64_t bucket_bytes = int64_t{1} << 20;  // stages 0-2 (stage 3 syncs unit by unit)
  // The unit whose sync waits for sync_deferred() (-1: none): its own bucket.
  int deferred_unit = -1;
  // Stage 0: each bucket's all-reduce runs two-level (comm/hierarchical.h) over the nodes of
  // `topology` (global ranks), so only S/G per rank crosses the inter-node link.
  bool hierarchical = false;
  comm::NodeTopology topology;  // also for the per-link byte split
  // Gradient all-reduces and reduce-scatters on bf16 copies (half the bytes, every ring hop
  // rounding to bf16), widened back into the fp32 gradients; parameter gathers stay fp32.
  bool bf16_grad_reduce = false;
  // bf16 parameters and gradients at rest, fp32 master weights owned by the optimizer (above).
  bool mixed_precision = false;
  // The flat gradient syncs' and parameter gathers' algorithm: ring, direct (the DP group shares
  // memory: comm/algorithms/direct.cc) or automatic (direct where it can, else ring). Not the
  // hierarchical path's.
  comm::Algorithm algorithm = comm::Algorithm::ring;
  // Expert parallelism (parallel/expert_parallel.h): the flat ranges of the stage's table that
  // hold this rank's experts (ascending) and the DP ranks of its expert-data-parallel group. Their
  // gradients are summed over that group and divided by the DP size (the owner's gradient already
  // sums its EP group's tokens), the rest averaged over the whole DP group. With ZeRO
  // (SplitShards in zero.h) the dense elements are sharded over DP and the expert elements over
  // the expert-DP group, each kind in its own packed index space, as Megatron's and DeepSpeed's
  // distributed optimizers keep two sharding groups.
  int ep = 1;
  std::vector<comm::Chunk> expert_ranges;
};

// The gradient a rank holds after the syncs: `grads` is flat element `first` onwards.
// Under mixed precision the gradient is `grads16` and `grads` is empty.
struct HeldGrads {
  std::span<float> grads;
  int64_t first = 0;
  std::span<bf16> grads16;
};

// One run of flat elements whose moments, gradient and parameters this rank keeps: `flat` is
// the first flat element, `moment` its index in the optimizer's moments (and in the parameter
// and gradient shards where the stage has them). Without EP and ZeRO there is one piece, owned().
struct UpdatePiece {
  int64_t flat = 0, moment = 0;
  std::span<float> params, grads;
};

// A run of flat elements [flat, flat + count) this rank holds the shard state of, at index
// `moment` of its shard buffers (moments, master weights, and the gradient and parameter shards
// where the stage keeps them). One run but under EP with ZeRO.
struct ShardRun {
  int64_t flat = 0, moment = 0, count = 0;
};

// What the optimizer updates under mixed precision: the fp32 master weights of the owned range
// (its index 0 is the moments' index 0) and the bf16 parameters it rounds them into.
struct MixedUpdate {
  std::span<float> master;
  std::span<bf16> grads;  // mutable: sequence parallelism all-reduces its norms' gradients
  std::span<bf16> params;
  int64_t flat = 0, moment = 0;  // the first flat element, its index in the moments
};

class DataParallel final : public UnitHooks {
 public:
  // Every rank of `dp` (the ranks holding the same stage and TP shard) constructs one around its
  // stage model, whose parameters must already be initialised (ZeRO-3 keeps its shard of them
  // and frees the rest). `dp_async` is its communication thread's copy of `dp`, `expert_dp`
  // the expert-DP group under EP (else null), both formed with the rest (process_groups.h).
  // `units` and `tracker` must outlive it. With one rank and stage 0 it does nothing at all.
  DataParallel(const DataParallelConfig& config, model::GptModel& model, const StageUnits& units,
               comm::Communicator& dp, std::unique_ptr<comm::Communicator> dp_async,
               std::unique_ptr<comm::Communicator> expert_dp, MemoryTracker& tracker);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int zero_stage() const { return config_.zero_stage; }
  bool mixed_precision() const { return config_.mixed_precision; }
  const ShardLayout& layout() const { return layout_; }
  // The real elements of the flat buffer whose moments (stages 1-3), gradient and parameters
  // this rank keeps: layout().owned(dp rank); everything at stage 0.
  comm::Chunk owned() const;
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // EP with ZeRO: dense and expert elements sharded over their own groups, so a rank's shard is
  // several runs of the flat buffer (update_pieces) and owned() / held_grads() do not apply.
  bool split_shards() const { return split_ != nullptr; }
  // The elements the optimizer keeps moments for: the whole stage at ZeRO 0, else the shard
  // (the dense shard plus the expert shard under split_shards()).
  int64_t moment_count() const;
  // fp32, after the syncs: what the optimizer updates, piece by piece (every layout).
  std::vector<UpdatePiece> update_pieces();
  // The flat runs those pieces cover: {owned()} but under split_shards().
  std::vector<comm::Chunk> owned_runs() const;
  // The same runs with their index in the shard buffers.
  std::vector<ShardRun> shard_runs() const;

  // --- one step: begin_step, the schedule (the hooks), wait_for_syncs, the deferred unit, then
  // the update on update_params() / update_grads() and gather_updated_params().
  void begin_step();
  void prefetch(int unit) override;
  void acquire(int unit) override;
  void release(int unit) override;
  void begin_backward(int unit) override;
  void end_backward(int unit, bool last) override;
  // Waits for every queued sync (not the deferred unit's, which is not queued yet).
  void wait_for_syncs();
  // The deferred unit's local gradient (the model's buffer at stages 0-1, its bucket's at 2-3),
  // complete after the schedule: the tied sum adds the other end stage's half here.
  std::span<float> deferred_grads();
  // Averages the deferred unit as the other buckets were, and waits for it.
  void sync_deferred();
  // After the syncs: the gradient this rank counts and updates (stage 0: all; 1-3: its range).
  HeldGrads held_grads();
  // The parameters and gradients the optimizer updates: owned() of each (moments index 0 is
  // owned().offset at stages 1-3, 0 at stage 0).
  std::span<float> update_params();
  std::span<float> update_grads();
  // Mixed precision's update_params / update_grads.
  MixedUpdate mixed_update();
  // Mixed precision's update_pieces: one per shard run (every layout).
  std::vector<MixedUpdate> mixed_pieces();
  // Stages 1-2: every rank updated its range; all-gather the whole parameter buffer in place.
  void gather_updated_params();

  // --- checkpoints (between steps): stage 3's parameter shard (owned(), then padding).
  std::span<float> param_shard() { return param_shard_.span(); }
  // Mixed precision: the master weights of owned() (then padding; EP with ZeRO: of the shard
  // runs, indexed as the moments), and the bf16 parameters (all of them at stages 0-2, stage 3's
  // shard).
  std::span<float> master() { return master_.span(); }
  std::span<bf16> params16() { return param16_.span(); }

  // --- measurement: every DP collective's traffic so far (the communication thread's
  // communicator, and the two-level all-reduce's subgroups), by link class too; the tasks run
  // and the compute thread's waits for them since the last take.
  comm::Traffic traffic() const;
  comm::LinkBytes link_bytes() const;
  // The slot size the direct algorithm's segments take on this group: 0 where the ranks share
  // an address space, or the syncs are not direct.
  int64_t direct_slot_bytes() const { return direct_slot_bytes_; }
  // The syncs' algorithm, automatic resolved: ring or direct.
  comm::Algorithm algorithm() const { return config_.algorithm; }
  std::vector<CommThread::Event> take_events();
  std::vector<TimeInterval> take_waits();

 private:
  bool active() const { return comm_ != nullptr; }
  void submit_sync(int bucket);
  // Expert parallelism, stage 0: bucket b's dense parts averaged over DP, its expert parts
  // summed over the expert-DP group and divided by the DP size.
  void submit_expert_split_sync(int bucket);
  // EP with ZeRO 1-3: each piece of bucket b reduce-scattered over its own group.
  void submit_split_shard_sync(int bucket, bool accumulate);
  void submit_mixed_sync(int bucket, bool accumulate, const std::string& span);
  // Mixed precision under EP with ZeRO 1-3: each piece into its own group's bf16 shard.
  void submit_mixed_split_shard_sync(int bucket, bool accumulate, const std::string& span);
  // Mixed precision, stages 0-1: adds a unit's fp32 working gradient into the bf16 gradient and
  // frees it.
  void fold_unit_grads(int unit);
  void wait_for(int64_t ticket);
  std::string bucket_name(int bucket) const;

  struct UnitState {
    int holds = 0;  // acquires not yet released
  };

  DataParallelConfig config_;
  model::GptModel& model_;
  const StageUnits& units_;
  int rank_ = 0;
  MemoryTracker& tracker_;
  ShardLayout layout_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_unit_;
  int deferred_bucket_ = -1;
  Buffer<float> param_shard_;  // stage 3: this rank's range of the parameters, then padding
  Buffer<float> grad_shard_;   // stages 2, 3: this rank's range of the gradients, then padding
  Buffer<float> scratch_;      // receive buffer of accumulating reduce-scatters
  // Mixed precision: the bf16 parameters (stage 3: the shard) and gradients (stages 2-3: the
  // shard), the fp32 master weights of owned() (tag optimizer), and the units' fp32 working
  // copies while they are held (weights) or their backward runs (stages 0-1: gradients).
  Buffer<bf16> param16_, grad16_;
  Buffer<float> master_;
  std::vector<Buffer<float>> work_params_, work_grads_;
  // Stages 2, 3: the buffer each bucket's gradients live in until their reduce-scatter.
  std::vector<std::shared_ptr<Buffer<float>>> bucket_grads_;
  std::vector<int> syncs_;  // this step's syncs queued per bucket
  std::vector<UnitState> unit_state_;
  std::vector<TimeInterval> waits_;
  std::unique_ptr<GatheredUnits> gathered_;  // stage 3 (runs on comm_)
  int64_t direct_slot_bytes_ = 0;
  std::unique_ptr<comm::NodeGroups> node_groups_;  // hierarchical: subgroups of comm_'s group
  std::unique_ptr<comm::Communicator> expert_dp_;  // EP: used by the communication thread only
  std::unique_ptr<SplitShards> split_;             // EP with ZeRO
  // Last: destroyed first, so the thread stops before the buffers its tasks write go away.
  std::unique_ptr<CommThread> comm_;
};

}  // namespace dtrain::parallel
