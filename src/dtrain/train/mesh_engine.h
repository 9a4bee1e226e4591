// MeshEngine: the StepEngine of a composed run, DP x TP x PP on a parallel::DeviceMesh, with
// ZeRO stage 0, 1 or 2 over the DP axis. SPMD: every rank runs the whole training loop on the
// same global batches and holds one TP shard of one pipeline stage. A step:
//   1. this DP rank's B/dp rows run through the pipeline schedule (M micro-batches) on a stage
//      model cut for its TP group (parallel::PipelineExecutor over the PP group, the model's
//      TP hooks over the TP group; with pp = 1 the schedule is M forward/backward pairs);
//   2. the tied wte gradient is summed between the first and last stage (embedding group;
//      parallel/finalize_grads.h, as is step 4's ownership rule);
//   3. the DP group averages the gradient: an all-reduce at stage 0, a reduce-scatter into this
//      rank's ZeRO shard at stages 1 and 2 (stage 2 then frees the full gradient buffer, which
//      the next step's backward allocates again: under a pipeline the M micro-batches
//      accumulate into it, so its saving is between steps, not during backward);
//   4. the global gradient norm: every element of the serial model counted once (TP-replicated
//      tensors on TP rank 0, the last stage's wte copy left out, ZeRO shards by their owner,
//      DP replicas once), summed in rank order over the world, so every rank clips alike;
//   5. AdamW on this rank's part (all of it at stage 0, its shard otherwise), then the
//      parameters are all-gathered from the shards.
// The loss every rank reports is the mean of the last stages' losses over the DP ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/chunks.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/topology.h"
#include "dtrain/core/buffer.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/thread_team.h"
#include "dtrain/optim/adamw.h"
#include "dtrain/parallel/finalize_grads.h"
#include "dtrain/parallel/mesh.h"
#include "dtrain/parallel/pipeline_executor.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/parallel/tensor_parallel.h"
#include "dtrain/parallel/zero.h"
#include "dtrain/plan/hardware.h"
#include "dtrain/plan/pipeline_model.h"
#include "dtrain/train/data_parallel_report.h"
#include "dtrain/train/mesh_report.h"
#include "dtrain/train/pipeline_report.h"
#include "dtrain/train/serial_engine.h"
#include "dtrain/train/step_engine.h"
#include "dtrain/train/tensor_parallel_report.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

struct MeshEngineConfig {
  SerialEngineConfig base;  // model, global batch B, seq, AdamW, clipping, seed, threads
  int dp = 1, tp = 1, pp = 1;
  std::string rank_order = "tp-dp-pp";
  int zero_stage = 0;  // 0, 1 or 2
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  int microbatches = 1;  // M per DP rank; B / dp rows split into M micro-batches
  parallel::StagePartition partition;
  comm::NodeTopology topology;           // for the per-link byte split (one node by default)
  std::optional<plan::Cluster> cluster;  // --cluster: price each rank's communication
};

class MeshEngine final : public StepEngine {
 public:
  // Every rank of `world` (dp * tp * pp ranks) constructs one; it forms the TP, PP, DP and
  // embedding subgroups from the mesh.
  MeshEngine(const MeshEngineConfig& config, comm::Communicator& world);

  std::string describe() const override;
  StepStats train_step(const Batch& batch, float lr) override;
  float eval_loss(const Batch& batch) override;
  const MemoryTracker& memory() const override { return tracker_; }
  int64_t param_count() const override { return model::gpt_param_count(config_.base.model); }

  const parallel::DeviceMesh& mesh() const { return mesh_; }
  parallel::MeshCoord coord() const { return coord_; }
  model::GptModel& model() { return model_; }
  // This rank's parameters after the step (all of them: ZeRO gathers them every step).
  std::span<const float> params() const { return model_.params(); }
  // This rank's row of the report (figures per step, averaged over the steps run).
  MeshRankRow report_row() const;

  // Checkpoints: a tensor's parameters are written by DP rank 0 of its replicas (TP rank 0 for
  // the TP-replicated ones; the first stage for the tied wte), the AdamW moments by the same
  // rank at stage 0 and by each shard's owner at stages 1 and 2.
  StateLayout state_layout() const override;
  RankState export_state() override;
  void import_state(const SerialState& state) override;
  comm::Communicator* job_communicator() override { return &world_; }

 private:
  std::span<const int32_t> my_rows(const std::vector<int32_t>& ids) const;
  // This rank's share of the global norm (parallel::counted_grad_ranges).
  parallel::GradOwnership grad_ownership() const;
  // The DP ranks' mean of the last stages' losses, the same bits on every rank (a collective).
  float mean_loss(float last_stage_loss);
  // The local flat elements whose AdamW moments this rank holds: all at stage 0, its shard at
  // stages 1 and 2.
  comm::Chunk moment_range() const;
  void sync_gradients();

  MeshEngineConfig config_;
  comm::Communicator& world_;
  parallel::DeviceMesh mesh_;
  parallel::MeshCoord coord_;
  std::unique_ptr<comm::Communicator> tp_comm_, pp_comm_, dp_comm_, embedding_comm_;
  MemoryTracker tracker_;  // declared before the buffers it accounts for
  model::ThreadTeam team_;
  std::unique_ptr<parallel::TensorParallelGroup> hooks_;
  model::GptModel model_;
  parallel::ShardLayout layout_;  // ZeRO ranges of this rank's flat parameters over DP
  optim::AdamW adamw_;            // the shard's moments at stages 1 and 2
  Buffer<float> grad_shard_;      // stage 2: this rank's range of the averaged gradient
  Buffer<float> scratch_;
  std::unique_ptr<parallel::PipelineExecutor> executor_;
  int64_t steps_ = 0;
  // Bytes sent during train steps, summed: per group, and per link class.
  double tp_block_bytes_ = 0, tp_vocab_bytes_ = 0, pp_bytes_ = 0, dp_bytes_ = 0;
  double embedding_bytes_ = 0, other_bytes_ = 0;
  comm::LinkBytes link_bytes_;        // every communicator
  comm::LinkBytes model_link_bytes_;  // the TP, PP, DP and embedding groups'
};

// Every rank's report_row() gathered over `world` (a collective), with the groups that cross
// a node boundary and the warnings they earn.
MeshReport gather_mesh_report(MeshEngine& engine, comm::Communicator& world,
                              const MeshEngineConfig& config, const MeshSetup& setup);

// Runs the composed training on dp * tp * pp ranks of the chosen backend, a Trainer on each;
// returns the reporting rank's summary with the MeshReport (gathered over the communicator, so
// it works across MPI processes). `*is_reporter` tells the caller whether to print.
TrainSummary run_mesh(const SerialEngineConfig& base, const DataParallelSetup& dp,
                      const TensorParallelSetup& tp, const PipelineSetup& pp, const MeshSetup& mesh,
                      const TrainerConfig& trainer, const TokenSplit& data, TrainObserver* observer,
                      bool* is_reporter);

// The layout's config, checked, every error naming its flag: each axis valid on its own, ZeRO
// at most 2, no --sequence-parallel, --grad-accum only without --pp (it becomes the
// micro-batches), --dp * --microbatches dividing --batch, a known --rank-order, and a
// --ranks-per-node that divides the world.
MeshEngineConfig mesh_config(const SerialEngineConfig& base, const DataParallelSetup& dp,
                             const TensorParallelSetup& tp, const PipelineSetup& pp,
                             const MeshSetup& mesh);

}  // namespace dtrain::train
