// DataParallelModel: one data-parallel rank's share of the model at ZeRO stage 0..3: the
// GptModel, the optimizer state, and the communication thread that averages the gradients
// while backward runs. The engine above calls begin_step, forward_backward per micro-batch and
// finish_step; every rank of the group makes the same calls in the same order.
//
//   stage 0  full params, grads and AdamW moments; each bucket all-reduced (avg) as soon as
//            its last unit's backward returns (on the last micro-batch only)
//   stage 1  moments for this rank's range only; each bucket reduce-scattered into its owners'
//            ranges (in place, in the full gradient buffer); update the range; all-gather params
//   stage 2  no full gradient buffer either: backward writes into per-bucket buffers that are
//            reduce-scattered into this rank's gradient shard (after every micro-batch) and freed
//   stage 3  no full parameter buffer either: a unit's weights are all-gathered into a
//            temporary buffer just before its forward and again before its backward, freed
//            after use (the next block's gather is issued before the current block runs), and
//            its gradient is reduce-scattered into the shard as soon as it is final
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/hierarchical.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/buffer.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/parallel/comm_thread.h"
#include "dtrain/parallel/data_parallel.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/zero.h"

namespace dtrain::parallel {

struct DataParallelConfig {
  model::GptConfig model;
  int64_t micro_batch = 0;  // sequences per micro-batch on this rank
  int64_t seq = 0;          // T
  optim::AdamWConfig adamw;
  float grad_clip = 1.0f;  // max global norm; <= 0 disables clipping
  uint64_t init_seed = 0;  // every rank initialises the same parameters from it
  int zero_stage = 0;      // 0 (plain DP) .. 3
  int64_t bucket_bytes = int64_t{1} << 20;
  int threads = 1;                        // compute threads of this rank (a model::ThreadTeam)
  Recompute recompute = Recompute::none;  // what each block keeps for backward (model/gpt.h)
  // Where the DP ranks sit (global ranks): for the per-link byte split, and at stage 0 with
  // `hierarchical` each bucket's all-reduce runs two-level (comm/hierarchical.h) instead of one
  // flat ring, so only S/G per rank crosses the inter-node link.
  comm::NodeTopology topology;
  bool hierarchical = false;
};

// When things ran during one step, for the overlap figure.
struct StepTimeline {
  std::vector<TimeInterval> forward, backward;  // compute thread, one window per micro-batch
  std::vector<TimeInterval> waits;      // compute thread waiting for the communication thread
  std::vector<CommThread::Event> comm;  // every task the communication thread ran
  std::vector<TimeInterval> comm_intervals() const;
  // Communication time inside the forward and backward windows, minus the compute thread's
  // waits inside them (stage 3 waits for gathers there).
  double hidden_us() const;
  double comm_us() const;
};

class DataParallelModel {
 public:
  // Every rank of `dp` constructs one (it forms the "dp-async" subgroup). `tracker` is charged
  // for everything; construction holds the full model once to initialise it, so call
  // tracker.reset_peaks() afterwards.
  DataParallelModel(const DataParallelConfig& config, comm::Communicator& dp,
                    MemoryTracker& tracker);
  ~DataParallelModel();
  DataParallelModel(const DataParallelModel&) = delete;
  DataParallelModel& operator=(const DataParallelModel&) = delete;

  int zero_stage() const { return config_.zero_stage; }
  int64_t param_count() const { return layout_.count; }
  const ShardLayout& layout() const { return layout_; }
  const std::vector<GradUnit>& units() const { return units_; }
  // The gradient sync's pieces: buckets of units (stage 3: one unit each).
  const std::vector<Bucket>& buckets() const { return buckets_; }

  void begin_step();
  // Forward and backward of one micro-batch (micro_batch x seq tokens) with the loss scaled by
  // `dloss`; returns this rank's mean loss. The gradient sync of stages 0 and 1 runs during the
  // last micro-batch's backward; stages 2 and 3 reduce after every micro-batch.
  float forward_backward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                         float dloss, bool last_microbatch);
  // Waits for the gradients, takes the global norm (returned, before clipping), clips, updates
  // this rank's range (all of it at stage 0) and all-gathers the parameters (stages 1 and 2).
  double finish_step(float lr);
  // This rank's mean loss on one micro-batch; nothing is updated.
  float forward_loss(std::span<const int32_t> tokens, std::span<const int32_t> targets);

  // Every parameter (stage 3: gathered from the shards, a collective every rank must call).
  std::vector<float> gather_params();
  // The current step's timeline (cleared).
  StepTimeline take_timeline();
  // Cumulative traffic of the communication thread's communicator: every DP collective.
  // (With the hierarchical all-reduce, its two subgroups' traffic too.)
  comm::Traffic dp_traffic() const;
  // The same bytes (cumulative) split by link class under config.topology.
  comm::LinkBytes dp_link_bytes() const;

  // Checkpoint access (train/ maps these to the serial tensors): the model, whose params() are
  // empty at stage 3; the optimizer, whose moments cover this rank's range at stages 1-3
  // (layout().owned(rank), then padding) and everything at stage 0; and stage 3's parameter
  // shard (the owned range, then padding). Call between steps only.
  model::GptModel& local_model() { return model_; }
  optim::AdamW& optimizer() { return adamw_; }
  std::span<float> param_shard() { return param_shard_.span(); }

 private:
  int block_unit(int64_t l) const;  // index of block l in units_ (backward order)
  float run_forward(std::span<const int32_t> tokens, std::span<const int32_t> targets);
  void run_backward(float dloss, bool last_microbatch);
  void unit_done(int unit, bool last_microbatch);
  void submit_sync(int bucket, std::shared_ptr<Buffer<float>> owned);
  void ensure_bucket_grads(int unit);
  void use_unit(int unit);  // stage 3: wait for its gathered weights and bind them
  void wait_for(int64_t ticket);
  GradNorm global_grad_norm();  // a collective over the DP group
  std::span<float> owned_params();
  std::span<float> owned_grads();

  DataParallelConfig config_;
  comm::Communicator& dp_;
  MemoryTracker& tracker_;
  std::unique_ptr<model::ThreadTeam> team_;
  model::GptModel model_;
  ShardLayout layout_;
  std::vector<GradUnit> units_;
  std::vector<Bucket> buckets_;
  optim::AdamW adamw_;
  Buffer<float> param_shard_;  // stage 3: (shard) this rank's range of the parameters
  Buffer<float> grad_shard_;   // stages 2, 3: (shard) this rank's range of the gradients
  Buffer<float> scratch_;      // receive buffer for accumulating reduce-scatters
  std::vector<std::shared_ptr<Buffer<float>>> bucket_grads_;  // stages 2, 3: per bucket
  int64_t microbatch_ = 0;                                    // micro-batches run in this step
  StepTimeline timeline_;
  std::unique_ptr<GatheredUnits> gathered_;        // stage 3 (uses comm_)
  std::unique_ptr<comm::NodeGroups> node_groups_;  // hierarchical: subgroups of comm_'s group
  // Last: destroyed first, so the thread stops before the buffers its tasks write go away.
  std::unique_ptr<CommThread> comm_;
};

}  // namespace dtrain::parallel
