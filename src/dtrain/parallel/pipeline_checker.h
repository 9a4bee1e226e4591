// The schedule checker and simulator: proves a PipelineSchedule valid (dependencies, matched
// messages, no deadlock with blocking point-to-point) and, with unit times for F, B and W,
// computes when every action runs, the makespan, the bubble and the peak activations per rank.
// Its figures are tested against the closed forms of cost/pipeline_model.h.
//
// Timing conventions: plan::StageTimes are per micro-batch for a whole stage, so an action on
// one of v interleaved chunks takes 1/v of them. A fused backward takes B + W; ideal time is
// M * (F + B + W) per rank, the bubble is makespan - ideal. With equal F/B times this makes
// GPipe and 1F1B's bubble (P-1)/(M+P-1) of the makespan, for any ratio of F to B + W.
//
// In-flight accounting: a micro-batch's activations on a rank are held from the start of its
// forward until the end of the action that frees them: the fused backward, or in a split
// backward the input gradient B (B consumes the stored activations; W needs only the layers'
// inputs and output gradients, counted separately as the weight stash, F until W). An
// interleaved chunk's activations count 1/v of a stage's micro-batch.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dtrain/cost/pipeline_model.h"
#include "dtrain/schedule/pipeline_schedule.h"
#include "dtrain/trace/timeline.h"

namespace dtrain::parallel {

// How a blocking send behaves. eager: it completes when posted and the message waits in the
// link's FIFO (isend, or a buffered send). rendezvous: it completes only when the receiver has
// posted the matching receive (MPI's synchronous send, large messages) - the strictest case.
enum class SendMode { eager, rendezvous };
std::string_view name(SendMode mode);

struct SimulationOptions {
  plan::StageTimes times;   // per micro-batch for a whole stage; a chunk's action takes 1/v
  double comm_latency = 0;  // from a message's send (or match, under rendezvous) to its arrival
  SendMode send_mode = SendMode::eager;
};

struct TimedAction {
  plan::Action action;
  double start = 0;  // compute: when it began; communication: when its group was posted
  double end = 0;    // compute: start + duration; communication: when it completed
};

struct RankReport {
  int actions = 0;               // every entry, communication included
  int compute_actions = 0;       // F, B, W entries
  double busy = 0;               // time spent computing
  double idle = 0;               // makespan - busy
  double finish = 0;             // when its last action completed
  double peak_inflight = 0;      // micro-batches of activations held at once (F until B)
  double peak_weight_stash = 0;  // micro-batches whose W is still to run (F until W)
};

struct ScheduleReport {
  std::vector<std::vector<TimedAction>> timed;  // (P) per rank, in schedule order
  std::vector<RankReport> ranks;                // (P)
  double makespan = 0;
  double ideal_time = 0;                // M * (F + B + W): one rank's compute
  double bubble_time = 0;               // mean idle time of a rank
  double bubble_fraction_of_total = 0;  // bubble / makespan: (P-1)/(M+P-1) for GPipe, 1F1B
  double bubble_fraction_of_ideal = 0;  // bubble / ideal: Megatron's (P-1)/M
};

struct CheckResult {
  std::string error;      // empty when valid; else the first problem, naming rank and action
  ScheduleReport report;  // filled when valid

  bool ok() const { return error.empty(); }
};

// Checks, in this order, stopping at the first problem:
//  1. every action's micro-batch and chunk are in range, and a message's peer is the rank of
//     the neighbouring virtual stage;
//  2. per rank: each (mb, chunk) runs one forward and one backward (fused, or B then W), the
//     backward after the forward, W after B; a forward after its activation is received (or,
//     with P = 1, after the previous chunk's forward), a backward after its gradient is
//     received; each activation / gradient sent once after the action producing it;
//  3. messages: on each link and payload, the k-th send is matched by the k-th receive and both
//     name the same micro-batch and adjacent virtual stages;
//  4. no deadlock: ranks step through their lists, posting each communication group and
//     waiting for it, with per-link FIFOs under options.send_mode;
//  5. in the simulated times, every forward starts after the previous virtual stage's forward of
//     its micro-batch ends and every backward after the next virtual stage's backward ends.
// Messages read "rank 1 action #4 backward(mb 0, chunk 0): runs before its forward" (0-based
// index into the rank's list).
CheckResult check_schedule(const plan::PipelineSchedule& schedule,
                           const SimulationOptions& options = {});

// check_schedule, throwing dtrain::Error with the message when the schedule is invalid.
ScheduleReport simulate_schedule(const plan::PipelineSchedule& schedule,
                                 const SimulationOptions& options = {});

// The simulated run as a generic timeline (one row per rank), for the ASCII, SVG and Chrome
// trace renderers: compute spans labelled F3 / B3 / W3 (F3b on chunk 1), messages as send and
// recv spans from posting to completion.
trace::Timeline to_timeline(const plan::PipelineSchedule& schedule, const ScheduleReport& report);

}  // namespace dtrain::parallel
