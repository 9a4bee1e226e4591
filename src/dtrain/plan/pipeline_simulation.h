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
#pragma once

#include <vector>

#include "dtrain/plan/pipeline_model.h"
#include "dtrain/plan/pipeline_schedule.h"

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

// Replays `schedule`; throws Error when the times do not match it (one entry per virtual stage,
// every time and send_s >= 0) or when the lists cannot finish (a receive never sent).
PipelineSimulation simulate_pipeline(const PipelineSchedule& schedule,
                                     const PipelineSimulationInput& input);

// v chunks of a stage whose layers split evenly: each virtual stage gets 1/v of `stage`, and
// `first` / `last` are added to virtual stage 0 and P*v - 1 (the embedding, the head; pass
// {0, 0, 0} for none: StageTimes defaults to unit times).
std::vector<StageTimes> virtual_stage_times(int stages, int chunks, StageTimes stage,
                                            StageTimes first, StageTimes last);

}  // namespace dtrain::plan
