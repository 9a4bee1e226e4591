// The clock's pipeline: a PipelineSchedule (the lists the executor runs) replayed on per-virtual-
// stage operation times, so the bubble follows from the schedule and from unequal stages (the
// embedding on the first, the head on the last) instead of a closed form that assumes equal ones.
//
// Replay rules (the executor's, pipeline_schedule.h): each rank runs its list in order; a compute
// action takes its virtual stage's F, B + W (fused backward), B or W; a run of communication
// actions is one group, posted when the rank reaches it and left once every receive in it has
// arrived. A message posted at t arrives at t + send_s. With SendWait::sender_waits the group is
// also left no earlier than t + send_s when it holds a send (Megatron's batched send/receive,
// waited for as a whole); with SendWait::overlapped a send costs its rank nothing. So a forward
// of micro-batch m on virtual stage s waits for s-1's forward of m plus the send, a backward for
// s+1's backward of m plus the send, and with one rank (P = 1) the list order alone orders them.
//
// A search replays thousands of layouts on a handful of (schedule, P, M, v): PipelineReplay
// compiles a schedule once into a flat program that replays in one pass, and
// pipeline_makespan_lower_bound bounds the makespan without any schedule, so a search can
// rule out layouts before replaying them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/cost/pipeline_model.h"
#include "dtrain/schedule/pipeline_schedule.h"

namespace dtrain::plan {

enum class SendWait { sender_waits, overlapped };

struct PipelineSimulationInput {
  // (P * v) one micro-batch through virtual stage s = chunk * P + rank: F, B (input gradient,
  // recompute included), W (weight gradient); a fused backward takes B + W.
  std::vector<StageTimes> virtual_stage_times;
  double send_s = 0;  // one point-to-point message between neighbouring virtual stages
  SendWait send_wait = SendWait::sender_waits;
};

struct RankTiming {
  double busy_s = 0;     // compute actions
  double sending_s = 0;  // held by its own sends (send_s per group with a send; 0 overlapped)
  double idle_s = 0;     // makespan - busy: its sends, waits for messages, the schedule's bubble
  double finish_s = 0;   // when its last action ended
};

struct PipelineSimulation {
  std::vector<RankTiming> ranks;  // (P)
  double makespan_s = 0;          // the last rank's finish
  int critical_rank = 0;          // the busiest rank (the first of equals)

  // The bubble seen by the critical rank: ideal = its own work (compute and the sends it is
  // held by), total = the makespan, bubble = the rest (waits for messages and the schedule's
  // fill and drain). Equal stages without sends give pipeline_bubble's closed forms (GPipe,
  // 1F1B), whose F and B carry any send time themselves.
  BubbleEstimate bubble() const;
};

// A schedule compiled for replay. Which rank can advance past which group depends only on which
// messages have been posted, never on the times, so the order in which the replay visits the
// actions is found once (the constructor) and kept as a flat program: compute (the rank's clock
// and busy time grow by one duration), post (a group's sends get their arrival times) and
// complete (the group is left at the latest of its receives, and its own send when held).
// run() walks that program: no allocation per action, and the very additions, maxima and
// their order of the replay described above, so its figures are the same to the last bit.
class PipelineReplay {
 public:
  // Throws Error when the lists cannot finish (a receive that no rank sends).
  explicit PipelineReplay(const PipelineSchedule& schedule);

  // Throws Error when the times do not match the schedule (one entry per virtual stage, every
  // time and send_s >= 0).
  PipelineSimulation run(const PipelineSimulationInput& input) const;

  ScheduleKind kind() const { return kind_; }
  int stages() const { return stages_; }
  int microbatches() const { return microbatches_; }
  int chunks() const { return chunks_; }
  size_t operations() const { return ops_.size(); }

 private:
  enum class OpKind : uint8_t { compute, post, complete };
  struct Op {
    OpKind kind = OpKind::compute;
    bool has_send = false;  // complete: the group holds a send (the rank waits for it)
    int32_t rank = 0;
    // compute: index into the (virtual stage x 4) duration table; post / complete: the range
    // [begin, end) of slots_ holding the group's sends / receives.
    uint32_t begin = 0;
    uint32_t end = 0;
  };
  ScheduleKind kind_ = ScheduleKind::one_f_one_b;
  int stages_ = 1, microbatches_ = 1, chunks_ = 1;
  std::vector<Op> ops_;
  std::vector<uint32_t> slots_;  // message slots: activations (mb, vs), then gradients (mb, vs)
};

// Replays `schedule` (PipelineReplay's errors).
PipelineSimulation simulate_pipeline(const PipelineSchedule& schedule,
                                     const PipelineSimulationInput& input);

// The compiled make_schedule(kind, stages, microbatches, chunks), built once per process and
// shared (thread-safe): a search meets the same few schedules on thousands of layouts, and
// building one at P = 64, M = 512 costs milliseconds.
std::shared_ptr<const PipelineReplay> cached_pipeline_replay(ScheduleKind kind, int stages,
                                                             int microbatches, int chunks = 1);

// A lower bound on simulate_pipeline(make_schedule(kind, stages, microbatches, chunks),
// input).makespan_s, in O(P v) with no schedule built: the largest, over the ranks, of the
// forward chain before the rank's first action, its own compute and the sends it is held by,
// and (fused backward) the gradient chain after its last backward. The proof is beside the
// code; tests/schedule/pipeline_simulation_test.cc checks it on random stage times.
double pipeline_makespan_lower_bound(ScheduleKind kind, int stages, int microbatches, int chunks,
                                     const PipelineSimulationInput& input);

// v chunks of a stage whose layers split evenly: each virtual stage gets 1/v of `stage`, and
// `first` / `last` are added to virtual stage 0 and P*v - 1 (the embedding, the head; pass
// {0, 0, 0} for none: StageTimes defaults to unit times).
std::vector<StageTimes> virtual_stage_times(int stages, int chunks, StageTimes stage,
                                            StageTimes first, StageTimes last);

}  // namespace dtrain::plan
