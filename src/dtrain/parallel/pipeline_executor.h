// The pipeline executor: runs this rank's list of a PipelineSchedule on real ranks over a PP
// communicator, on a stage model that holds only this rank's blocks. Activations (b, T, C) go
// forward and their gradients backward, in the schedule's order; gradients accumulate over
// the M micro-batches; every action's start and end are measured.
//
// How it follows the schedule's contract (pipeline_schedule.h):
//  - a run of consecutive communication actions is one group: every send and receive in it is
//    posted at once (isend / irecv), then the receives are waited for; sends are eager (their
//    requests are kept and waited for before their buffers are reused or freed);
//  - activations travel on one tag and gradients on another, so each link matches in order;
//  - a forward allocates the activations of its (micro-batch, chunk) (what the model's
//    recompute mode keeps) and the backward that consumes them frees them, so the activation
//    bytes held at any time are the in-flight micro-batches (the checker's count, program
//    order) times one micro-batch's activations.
//    Received tensors wait in communication buffers until their compute action copies them in.
//  - ZB-H1's split backward: B (backward_input) computes the input gradients only
//    (GptModel::block_backward_input; the head, the embedding and the LayerNorms' parameter
//    gradients too) and keeps each block's four linears' output gradients in a
//    model::WeightGradStash; W (backward_weight) adds those linears' weight and bias gradients
//    (block_backward_weight) and then frees the micro-batch. Under a split schedule a forward
//    allocates the stash with the activations, so one micro-batch's bytes (activations plus
//    stash) are held from F until W: the peak is the checker's weight stash count
//    (peak_weight_stash) times that figure.
//  - around every unit it runs (parallel::StageUnits: the embeddings, each block, the final
//    LayerNorm) it calls the UnitHooks: acquire / release the unit's parameters (the next
//    unit's prefetched first), begin_backward before a backward adds to its gradient and
//    end_backward when the micro-batch's contribution is complete, with `last` on the step's
//    last one for the unit on this rank (a block's after its W under a split backward). Data
//    parallelism and ZeRO are those hooks (parallel/data_parallel_hooks.h).
//  - under sequence parallelism the activations and gradients sent between stages are this TP
//    rank's B*T/N rows (Megatron sends the sequence-parallel slice).
//  - with `bf16_activations` (mixed precision) the activations and gradients travel as bf16,
//    half the bytes: rounded into a communication buffer at the send, widened at the use.
//  - with one chunk per rank, the activations of a micro-batch whose backward is done are kept
//    for a later forward (spares, as many as come back): a set is made only when none is spare,
//    so the sets held never outnumber the most micro-batches in flight so far, and after the
//    first step no step allocates any.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/core/bf16.h"
#include "dtrain/core/buffer.h"
#include "dtrain/model/gpt.h"
#include "dtrain/model/gpt_stage.h"
#include "dtrain/parallel/data_parallel.h"
#include "dtrain/parallel/pipeline_stages.h"
#include "dtrain/parallel/unit_hooks.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/trace/timeline.h"

namespace dtrain::parallel {

// The model::GptStage `rank` runs under `partition`: its chunks' blocks in chunk order, the
// embedding on rank 0, the final LayerNorm + head + loss on rank P-1.
model::GptStage stage_of(const StagePartition& partition, int rank);

// Message tags of the executor (one per payload, as the schedule's matching assumes).
inline constexpr int kTagPipelineActivation = 601;
inline constexpr int kTagPipelineGradient = 602;
inline constexpr int kTagPipelineEvalActivation = 603;

// One action as it ran, in steady-clock microseconds (core/timer.h now_us()).
struct MeasuredAction {
  plan::Action action;
  double start_us = 0;  // compute: began; communication: its group was posted
  double end_us = 0;    // compute: ended; receive: its data had arrived; send: was posted
};

struct PipelineStepRecord {
  float loss = 0;  // mean over the micro-batches of their mean loss (last stage; 0 elsewhere)
  std::vector<MeasuredAction> actions;  // this rank's list, in order
  int64_t peak_inflight_bytes = 0;      // most activation bytes held at once during the step
  model::MoeCounts moe;  // the routing of this rank's MoE blocks over the step's micro-batches
};

struct PipelineExecutorConfig {
  plan::PipelineSchedule schedule;  // every rank's list; this rank runs per_rank[comm.rank()]
  StagePartition partition;         // the blocks of every virtual stage
  int64_t micro_batch = 0;          // b: rows per micro-batch (the global batch is M * b)
  int64_t seq = 0;                  // T
  bool bf16_activations = false;    // messages in bf16 (above)
};

class PipelineExecutor {
 public:
  // `comm` is the PP group (rank = pipeline stage); `model` is this rank's stage model,
  // stage_of(partition, comm.rank()). The workspace, activations and message buffers are
  // charged to `tracker` (activations / communication). `hooks` (null: none) hear of every
  // unit the executor runs. All must outlive the executor.
  PipelineExecutor(comm::Communicator& comm, model::GptModel& model, PipelineExecutorConfig config,
                   MemoryTracker* tracker, UnitHooks* hooks = nullptr);

  // One training step's pipeline on a global batch of M * b rows: tokens (M*b, T) are read on
  // the first stage, targets (M*b, T) on the last (others may pass empty spans); micro-batch mb
  // is rows [mb*b, (mb+1)*b). Adds the gradient of the mean loss (each micro-batch's backward
  // scaled by 1/M) to the model's gradients; neither zeroes them nor steps the optimizer.
  PipelineStepRecord run(std::span<const int32_t> tokens, std::span<const int32_t> targets);

  // Forward only, for evaluation: every micro-batch through the virtual stages in order,
  // nothing kept for backward. Returns the mean loss on the last stage, 0 elsewhere.
  float evaluate(std::span<const int32_t> tokens, std::span<const int32_t> targets);

  int rank() const { return rank_; }
  const StageUnits& units() const { return units_; }
  // Elements of one message between stages: b * T * C, or this TP rank's b*T/N rows of C under
  // sequence parallelism.
  int64_t message_elements() const { return element_count_; }
  const PipelineExecutorConfig& config() const { return config_; }
  const plan::PipelineSchedule& schedule() const { return config_.schedule; }
  const StagePartition& partition() const { return config_.partition; }
  // Activation bytes of one micro-batch of `chunk` on this rank: its blocks (plan's
  // activation_bytes_per_layer each), then the head's tensors on the last virtual stage or the
  // (b, T, C) output it sends on, and the token ids on the first; under a split backward
  // (ZB-H1) also the weight-gradient stash (plan's weight_grad_stash_bytes_per_layer a block).
  int64_t chunk_activation_bytes(int chunk) const;
  // All chunks: one micro-batch's activations on this stage.
  int64_t microbatch_activation_bytes() const;

 private:
  struct ChunkInfo {
    model::LayerRange layers;
    bool embedding = false;        // virtual stage 0
    bool head = false;             // virtual stage P*v - 1
    int64_t activation_bytes = 0;  // the GptActivations, plus the stash when split_
  };
  // One message's buffer: fp32 elements, or bf16 ones under bf16_activations.
  struct Message {
    Buffer<float> f32;
    Buffer<bf16> b16;
    bool empty() const { return f32.empty() && b16.empty(); }
    void* data() { return b16.empty() ? static_cast<void*>(f32.data()) : b16.data(); }
    void release() {
      f32.release();
      b16.release();
    }
  };
  struct PendingSend {
    comm::RequestPtr request;
    Message buffer;  // the gradient copy it sends from (empty for activations)
  };
  Message new_message() const;                         // element_count_ elements, zeroed
  Message pack(const float* values) const;             // a message holding `values`
  void unpack(const Message& m, float* values) const;  // into element_count_ floats
  int64_t message_bytes() const;
  int index(int mb, int chunk) const { return chunk * config_.schedule.microbatches + mb; }
  // A micro-batch's activations for `chunk`: one of the chunk's spares if it has one, else new
  // ones; give_back keeps every set with one chunk per rank, none with more.
  std::unique_ptr<model::GptActivations> take_activations(int chunk);
  void give_back(int chunk, std::unique_ptr<model::GptActivations> acts);
  // A forward of chunk `c` on `acts` (its input already in place unless c holds the embedding),
  // with the hooks around each unit; adds the micro-batch's loss to *loss_sum on the head.
  void forward_units(const ChunkInfo& c, model::GptActivations& acts,
                     std::span<const int32_t> tokens, std::span<const int32_t> targets,
                     double* loss_sum);
  void post_group(const std::vector<plan::Action>& list, size_t begin, size_t end,
                  std::vector<MeasuredAction>& out);
  void forward(const plan::Action& a, std::span<const int32_t> tokens,
               std::span<const int32_t> targets);
  void backward(const plan::Action& a);
  void backward_weight(const plan::Action& a);  // W of a split backward
  void reap_sends(bool wait_all);
  void release_activations(int idx);

  comm::Communicator& comm_;
  model::GptModel& model_;
  PipelineExecutorConfig config_;
  MemoryTracker* tracker_;
  UnitHooks no_hooks_;
  UnitHooks* hooks_;
  StageUnits units_;
  int rank_ = 0;
  int tp_ = 1;  // the model's TP size: activations and stash hold this rank's shards
  std::vector<ChunkInfo> chunks_;  // (v)
  model::GptWorkspace workspace_;  // (b, T): shared by every micro-batch's backward
  int64_t element_count_ = 0;      // b * T * C (b * T / N * C under SP): one message
  bool split_ = false;             // the schedule splits backward into B and W (ZB-H1)

  // Per (mb, chunk), index chunk * M + mb; live only during a step.
  std::vector<std::unique_ptr<model::GptActivations>> acts_;
  std::vector<std::vector<std::unique_ptr<model::GptActivations>>> spare_;  // (v) per chunk
  std::vector<int> backwards_done_, weights_done_;                // (v) this step's B and W
  std::vector<std::unique_ptr<model::WeightGradStash>> stashes_;  // split_ only: B until W
  std::vector<comm::RequestPtr> activation_sends_;                // sends from acts_[i]'s output
  std::vector<Message> activation_messages_;  // bf16 only: the rounded output being sent
  std::vector<Message> received_activations_;
  std::vector<Message> received_gradients_;
  std::vector<Message> input_gradients_;  // the backward's output, until its send
  std::vector<PendingSend> pending_sends_;
  int64_t live_bytes_ = 0, peak_bytes_ = 0;
  int64_t groups_posted_ = 0;  // sequence number of the send/receive groups, for error messages
  double loss_sum_ = 0;
  model::MoeCounts moe_;  // this step's, into PipelineStepRecord::moe
};

// The measured step as a generic timeline (one row per rank, time in microseconds from
// `origin_us`): compute spans labelled like the checker's (F3, B3, W3, F3b), sends and
// receives as communication spans. `actions[r]` is rank r's record.
trace::Timeline to_measured_timeline(const plan::PipelineSchedule& schedule,
                                     const std::vector<std::vector<MeasuredAction>>& actions,
                                     double origin_us);

// The bubble of a measured step, defined as the checker's: makespan = last end - first start
// over every rank's actions, busy = a rank's compute time, bubble = mean over ranks of
// (makespan - busy), fraction_of_total = bubble / makespan = 1 - sum(busy) / (P * makespan).
struct MeasuredBubble {
  double makespan_us = 0;
  double bubble_us = 0;
  double fraction_of_total = 0;
  double forward_us = 0;          // mean over ranks of the forward time per micro-batch (F)
  double backward_input_us = 0;   // the same for the (fused or input) backward (B, or B + W)
  double backward_weight_us = 0;  // the same for W (0 when fused)
  std::vector<double> busy_us;    // (P)
};
MeasuredBubble measured_bubble(const plan::PipelineSchedule& schedule,
                               const std::vector<std::vector<MeasuredAction>>& actions);

}  // namespace dtrain::parallel
