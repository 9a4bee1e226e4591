// Pipeline schedules as data, with no communication: per rank, the ordered list of actions
// (forward, backward, input gradient, weight gradient, and the sends and receives they imply).
// They live in plan/ so the clock can simulate the lists the engine runs: the checker
// (parallel/pipeline_checker.h) proves a schedule valid, the executor (parallel/
// pipeline_executor.h) runs it on real ranks, pipeline_simulation.h times it from stage times.
//
// Semantics an executor must follow (and the checker assumes):
//  - Compute actions run in list order on their rank. A model chunk c on rank r is virtual
//    stage c*P + r (Megatron's interleaving); with v = 1 the chunk is 0 and the stage is r.
//  - Each maximal run of consecutive communication actions is one group: the rank posts all of
//    them at once (isend / irecv) and waits for the group's receives before its next compute
//    action; it keeps the send requests and waits for them before reusing their buffers
//    (eager sends). Every generated schedule is deadlock-free this way. Most are also deadlock-free
//    when a group waits for its sends too (rendezvous: a send completes only once its receive
//    is posted): all but interleaved with M > P not a multiple of P. This is Megatron's
//    send_forward_recv_backward: the sends after a compute and the receives before the next
//    one form one group, so blocking point-to-point needs no odd/even ordering.
//  - Messages between two ranks are matched in order per (sender, receiver, payload), the
//    payload being activations or gradients (one message tag each).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/cost/pipeline_model.h"

namespace dtrain::plan {

enum class ActionKind : uint8_t {
  forward,          // F: the chunk's layers forward on micro-batch mb, keeping activations
  backward,         // B+W fused: input and weight gradients in one pass, frees activations
  backward_input,   // B: gradient with respect to the chunk's input, frees activations
  backward_weight,  // W: gradient with respect to the chunk's weights (after its B)
  send_activation,  // F's output to the rank of the next virtual stage
  recv_activation,  // F's input from the rank of the previous virtual stage
  send_gradient,    // B's input gradient to the rank of the previous virtual stage
  recv_gradient,    // B's output gradient from the rank of the next virtual stage
};

// "forward", "backward", "backward_input", "backward_weight", "send_activation", ...
std::string_view name(ActionKind kind);

constexpr bool is_compute(ActionKind k) {
  return k == ActionKind::forward || k == ActionKind::backward || k == ActionKind::backward_input ||
         k == ActionKind::backward_weight;
}
constexpr bool is_send(ActionKind k) {
  return k == ActionKind::send_activation || k == ActionKind::send_gradient;
}
constexpr bool is_recv(ActionKind k) {
  return k == ActionKind::recv_activation || k == ActionKind::recv_gradient;
}
constexpr bool carries_activation(ActionKind k) {
  return k == ActionKind::send_activation || k == ActionKind::recv_activation;
}

struct Action {
  ActionKind kind = ActionKind::forward;
  int microbatch = 0;  // mb, 0..M-1
  int chunk = 0;       // model chunk on this rank, 0..v-1
  int peer = -1;       // communication: the rank on the other end; compute: -1

  friend bool operator==(const Action&, const Action&) = default;
};

// "forward(mb 3, chunk 1)", "send_activation(mb 3, chunk 0) -> rank 1",
// "recv_gradient(mb 0, chunk 0) <- rank 2".
std::string to_string(const Action& action);
// Compact label for timelines and listings: F3, B3 (fused or input gradient), W3,
// with a chunk letter when v > 1 (F3a, F3b); sends and receives: >a3, <a3, >g3, <g3.
std::string short_label(const Action& action, int chunks);

struct PipelineSchedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int stages = 1;                             // P: pipeline ranks
  int microbatches = 1;                       // M
  int chunks = 1;                             // v: model chunks per rank
  std::vector<std::vector<Action>> per_rank;  // (P) each rank's actions, in order

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int rank, int chunk) const { return chunk * stages + rank; }
};

// GPipe: every forward, then every backward (fused B+W), micro-batches in order.
PipelineSchedule make_gpipe(int stages, int microbatches);

// 1F1B (PipeDream-Flush): rank r runs min(P-r-1, M) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. Backward is fused (B+W).
PipelineSchedule make_1f1b(int stages, int microbatches);

// Interleaved 1F1B (Megatron) with v chunks per rank. Forwards follow one table on every rank:
// micro-batches in groups of g, each group through chunk 0, then chunk 1, ...; backwards the
// same with the chunks reversed. Rank r warms up with min((P-r-1)*2 + (v-1)*g, M*v) chunk
// forwards, then runs steps of one forward and one backward (their messages and the next step's
// receives in one group, as Megatron does), then drains. g = P when P divides M (Megatron's
// case, where the closed-form bubble and peak hold); for M > P otherwise, floor(M/P) groups
// share M evenly, larger first (g = the first group's size); for M < P, one group of M and the
// warm-up with g = P. See docs/pipeline.md for where the closed forms hold.
PipelineSchedule make_interleaved_1f1b(int stages, int microbatches, int chunks);

// ZB-H1 (Qi et al. 2023): 1F1B's forward/backward order with the backward split into B (input
// gradient, sent upstream at once) and W (weight gradient). Rank r keeps up to r weight
// gradients pending, running a W after a B only when more than r are pending, and runs the rest
// at the end: W fills the bubble that 1F1B leaves while waiting for gradients.
PipelineSchedule make_zb_h1(int stages, int microbatches);

// Dispatches on kind; `chunks` must be 1 except for the interleaved schedule.
PipelineSchedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks = 1);

// Index one past the run of communication actions starting at `begin` (== begin when
// actions[begin] is a compute action): the group an executor posts together.
size_t communication_group_end(const std::vector<Action>& actions, size_t begin);

}  // namespace dtrain::plan
