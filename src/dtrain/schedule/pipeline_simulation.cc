// simulate_pipeline: a dataflow replay, compiled once per schedule (PipelineReplay) and then run
// on times. Compiling runs each rank until a group waits on a message not yet posted; a pass in
// which no rank moves while some have actions left means a receive is never matched (a
// generated schedule never does this: the checker proves them deadlock-free).
#include "dtrain/schedule/pipeline_simulation.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

// The duration table's columns: a virtual stage's F, fused B + W, B, W.
uint32_t duration_column(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward:
      return 0;
    case ActionKind::backward:
      return 1;
    case ActionKind::backward_input:
      return 2;
    default:  // backward_weight
      return 3;
  }
}

void check_times(const PipelineSimulationInput& input, int stages, int chunks) {
  DTRAIN_CHECK(static_cast<int>(input.virtual_stage_times.size()) == stages * chunks,
               "pipeline simulation: ", input.virtual_stage_times.size(),
               " virtual stage times for a schedule of ", stages, " stages x ", chunks, " chunks");
  for (size_t vs = 0; vs < input.virtual_stage_times.size(); ++vs) {
    const StageTimes& t = input.virtual_stage_times[vs];
    DTRAIN_CHECK(t.forward >= 0 && t.backward_input >= 0 && t.backward_weight >= 0,
                 "pipeline simulation: virtual stage ", vs, " has a negative time (F ", t.forward,
                 ", B ", t.backward_input, ", W ", t.backward_weight, ")");
  }
  DTRAIN_CHECK(input.send_s >= 0, "pipeline simulation: send time ", input.send_s, " < 0");
}

}  // namespace

PipelineReplay::PipelineReplay(const PipelineSchedule& s)
    : kind_(s.kind), stages_(s.stages), microbatches_(s.microbatches), chunks_(s.chunks) {
  DTRAIN_CHECK(static_cast<int>(s.per_rank.size()) == s.stages,
               "pipeline simulation: ", s.per_rank.size(), " rank lists for ", s.stages, " stages");
  const int64_t vstages = s.virtual_stages();
  const int64_t per_payload = static_cast<int64_t>(s.microbatches) * vstages;
  // Where a message of action `a` on rank r is recorded: an activation under its sender's
  // virtual stage, a gradient likewise (the receiver looks up its neighbour's slot).
  auto slot = [&](int r, const Action& a) {
    int64_t vs = s.virtual_stage(r, a.chunk);
    int64_t base = 0;
    switch (a.kind) {
      case ActionKind::send_activation:
        break;
      case ActionKind::recv_activation:
        vs -= 1;
        break;
      case ActionKind::send_gradient:
        base = per_payload;
        break;
      default:  // recv_gradient
        base = per_payload;
        vs += 1;
        break;
    }
    DTRAIN_CHECK(vs >= 0 && vs < vstages && a.microbatch >= 0 && a.microbatch < s.microbatches,
                 "pipeline simulation: rank ", r, "'s ", to_string(a),
                 " names no virtual stage or micro-batch of the schedule");
    return static_cast<uint32_t>(base + a.microbatch * vstages + vs);
  };
  std::vector<char> sent(static_cast<size_t>(2 * per_payload), 0);
  const size_t p = static_cast<size_t>(s.stages);
  std::vector<size_t> pc(p, 0);
  std::vector<char> posted(p, 0);

  // Runs rank r until it waits on a message; returns whether it did anything. The order of
  // the ops it records is the order a replay on times must follow.
  auto advance = [&](int r) {
    const size_t ri = static_cast<size_t>(r);
    const std::vector<Action>& actions = s.per_rank[ri];
    bool moved = false;
    while (pc[ri] < actions.size()) {
      const Action& a = actions[pc[ri]];
      if (is_compute(a.kind)) {
        const auto vs = static_cast<uint32_t>(s.virtual_stage(r, a.chunk));
        DTRAIN_CHECK(vs < static_cast<uint32_t>(vstages), "pipeline simulation: rank ", r, "'s ",
                     to_string(a), " names no virtual stage of the schedule");
        ops_.push_back({OpKind::compute, false, r, vs * 4 + duration_column(a.kind), 0});
        ++pc[ri];
        moved = true;
        continue;
      }
      const size_t end = communication_group_end(actions, pc[ri]);
      bool sends = false;
      for (size_t i = pc[ri]; i < end; ++i) sends = sends || is_send(actions[i].kind);
      if (!posted[ri]) {
        if (sends) {
          Op post{OpKind::post, false, r, static_cast<uint32_t>(slots_.size()), 0};
          for (size_t i = pc[ri]; i < end; ++i) {
            if (!is_send(actions[i].kind)) continue;
            const uint32_t to = slot(r, actions[i]);
            sent[to] = 1;
            slots_.push_back(to);
          }
          post.end = static_cast<uint32_t>(slots_.size());
          ops_.push_back(post);
        }
        posted[ri] = 1;
        moved = true;
      }
      for (size_t i = pc[ri]; i < end; ++i) {
        if (is_recv(actions[i].kind) && !sent[slot(r, actions[i])]) return moved;
      }
      Op complete{OpKind::complete, sends, r, static_cast<uint32_t>(slots_.size()), 0};
      for (size_t i = pc[ri]; i < end; ++i) {
        if (is_recv(actions[i].kind)) slots_.push_back(slot(r, actions[i]));
      }
      complete.end = static_cast<uint32_t>(slots_.size());
      ops_.push_back(complete);
      pc[ri] = end;
      posted[ri] = 0;
    }
    return moved;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < s.stages; ++r) moved = advance(r) || moved;
  }
  for (int r = 0; r < s.stages; ++r) {
    const size_t ri = static_cast<size_t>(r);
    const std::vector<Action>& actions = s.per_rank[ri];
    DTRAIN_CHECK(pc[ri] == actions.size(), "pipeline simulation: rank ", r, " waits forever at ",
                 to_string(actions[pc[ri]]), " (a receive that no rank sends)");
  }
  ops_.shrink_to_fit();
  slots_.shrink_to_fit();
}

PipelineSimulation PipelineReplay::run(const PipelineSimulationInput& in) const {
  check_times(in, stages_, chunks_);
  const size_t p = static_cast<size_t>(stages_);
  const size_t vstages = static_cast<size_t>(stages_) * static_cast<size_t>(chunks_);
  // Scratch reused from call to call on this thread: the search replays layout after layout.
  // Every slot a complete reads was written by an earlier post of this run, so the arrival
  // times need no clearing.
  thread_local std::vector<double> durations, arrival, clock;
  durations.resize(4 * vstages);
  for (size_t vs = 0; vs < vstages; ++vs) {
    const StageTimes& t = in.virtual_stage_times[vs];
    durations[4 * vs] = t.forward;
    durations[4 * vs + 1] = t.backward_input + t.backward_weight;
    durations[4 * vs + 2] = t.backward_input;
    durations[4 * vs + 3] = t.backward_weight;
  }
  arrival.resize(2 * vstages * static_cast<size_t>(microbatches_));
  clock.assign(p, 0);
  PipelineSimulation result;
  result.ranks.resize(p);
  const bool held = in.send_wait == SendWait::sender_waits;
  const double send_s = in.send_s;
  const uint32_t* slots = slots_.data();
  double* arrive = arrival.data();
  for (const Op& op : ops_) {
    const size_t r = static_cast<size_t>(op.rank);
    switch (op.kind) {
      case OpKind::compute: {
        const double d = durations[op.begin];
        result.ranks[r].busy_s += d;
        clock[r] += d;
        break;
      }
      case OpKind::post: {
        const double at = clock[r] + send_s;
        for (uint32_t i = op.begin; i < op.end; ++i) arrive[slots[i]] = at;
        break;
      }
      case OpKind::complete: {
        double done = clock[r];
        const bool waits = op.has_send && held;
        if (waits) done += send_s;
        for (uint32_t i = op.begin; i < op.end; ++i) done = std::max(done, arrive[slots[i]]);
        if (waits) result.ranks[r].sending_s += send_s;
        clock[r] = done;
        break;
      }
    }
  }
  for (size_t r = 0; r < p; ++r) {
    result.ranks[r].finish_s = clock[r];
    result.makespan_s = std::max(result.makespan_s, clock[r]);
  }
  for (size_t r = 0; r < p; ++r) {
    RankTiming& t = result.ranks[r];
    t.idle_s = result.makespan_s - t.busy_s;
    if (t.busy_s > result.ranks[static_cast<size_t>(result.critical_rank)].busy_s) {
      result.critical_rank = static_cast<int>(r);
    }
  }
  return result;
}

BubbleEstimate PipelineSimulation::bubble() const {
  BubbleEstimate e;
  if (ranks.empty()) return e;
  const RankTiming& critical = ranks[static_cast<size_t>(critical_rank)];
  e.ideal_time = critical.busy_s + critical.sending_s;
  e.total_time = makespan_s;
  e.bubble_time = makespan_s - e.ideal_time;
  e.fraction_of_total = e.total_time > 0 ? e.bubble_time / e.total_time : 0;
  e.fraction_of_ideal = e.ideal_time > 0 ? e.bubble_time / e.ideal_time : 0;
  return e;
}

PipelineSimulation simulate_pipeline(const PipelineSchedule& schedule,
                                     const PipelineSimulationInput& input) {
  check_times(input, schedule.stages, schedule.chunks);
  return PipelineReplay(schedule).run(input);
}

std::shared_ptr<const PipelineReplay> cached_pipeline_replay(ScheduleKind kind, int stages,
                                                             int microbatches, int chunks) {
  using Key = std::tuple<ScheduleKind, int, int, int>;
  // Bounded: past kMaxOperations cached (16 bytes each, plus their slots), the cache starts
  // over; replays in use stay alive through their shared pointers.
  constexpr size_t kMaxOperations = size_t{1} << 24;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const PipelineReplay>> cache;
  static size_t cached_operations = 0;
  const Key key{kind, stages, microbatches, chunks};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  // Built outside the lock (make_schedule checks the arguments and throws on bad ones).
  auto replay =
      std::make_shared<const PipelineReplay>(make_schedule(kind, stages, microbatches, chunks));
  const std::lock_guard<std::mutex> lock(mutex);
  if (cached_operations + replay->operations() > kMaxOperations) {
    cache.clear();
    cached_operations = 0;
  }
  const auto [it, inserted] = cache.emplace(key, replay);
  if (inserted) cached_operations += replay->operations();
  return it->second;
}

// Why the bound holds (exact arithmetic; Fu, Bu, Wu the times of virtual stage u, s = send_s,
// h = s when a rank waits for its sends, else 0). In the replay a rank's clock only grows: a
// compute action adds its duration, a group sets it to the latest of clock + (h if it holds a
// send) and its receives' arrivals, so at least clock + h. Hence for every rank r:
//  - head: every generator's first compute action on rank r is a forward on chunk 0 (virtual
//    stage r). A forward of micro-batch m on stage u > 0 waits for the activation of m from
//    u - 1, posted once that forward ended and arriving s later, so it ends no earlier than
//    sum_{u' <= u} (Fu') + u s; rank r's first action thus starts no earlier than
//    head_r = sum_{u < r} (Fu + s).
//  - own work: from there its clock grows by all of its compute, work_r = M sum_c (F + B + W)
//    of its virtual stages c P + r, and by h for each of its groups that holds a send. Sends of
//    one step of compute actions go out in one group, and a group holds one step's sends
//    (it is that step's sends and the next step's receives). A step holds one compute action in
//    every schedule but the interleaved one, whose steps pair one forward with one backward; so
//    the groups with sends number at least the sends (one action a step) or the larger of the
//    forward and the backward sends (interleaved). A forward sends unless on the last virtual
//    stage, a backward (B) unless on the first. So finish_r >= head_r + work_r + h groups_r.
//  - tail (fused backward: GPipe, 1F1B, interleaved): rank r's last compute action is a fused
//    backward on chunk 0 (virtual stage r) of some micro-batch m, and after it only one group,
//    which holds its gradient's send when r > 0. If it ends at T, T >= head_r + work_r +
//    h (groups_r - 1); its gradient arrives at r - 1 at T + s, whose backward of m on stage
//    r - 1 ends no earlier than T + s + (B + W)_{r-1}, and so on down to stage 0: the
//    makespan is at least T + tail_r, tail_r = sum_{u < r} (s + Bu + Wu), and tail_r >= s >= h.
// The makespan is the latest finish, so at least the largest of these. Floating point: every
// term is a sum of non-negative numbers, whose rounding errs by under n 2^-53 relative for n
// terms; the bound is lowered by kRoundingSlack (1e-6, so n up to about 4e9) to stay below the
// simulated figure computed in another order.
double pipeline_makespan_lower_bound(ScheduleKind kind, int stages, int microbatches, int chunks,
                                     const PipelineSimulationInput& input) {
  DTRAIN_CHECK(stages >= 1 && microbatches >= 1 && chunks >= 1, "pipeline bound: stages ", stages,
               ", micro-batches ", microbatches, ", chunks ", chunks, " must be >= 1");
  DTRAIN_CHECK(chunks == 1 || kind == ScheduleKind::interleaved, "pipeline bound: model chunks (",
               chunks, ") apply only to the interleaved schedule");
  check_times(input, stages, chunks);
  constexpr double kRoundingSlack = 1e-6;
  const std::vector<StageTimes>& t = input.virtual_stage_times;
  const int vstages = stages * chunks;
  const double m = microbatches;
  const bool messages = stages > 1;
  const double s = messages ? input.send_s : 0;
  const double h = messages && input.send_wait == SendWait::sender_waits ? input.send_s : 0;
  const bool fused = kind != ScheduleKind::zero_bubble_h1;
  double bound = 0, head = 0, tail = 0;
  for (int r = 0; r < stages; ++r) {
    double work = 0;
    int64_t forward_sends = 0, backward_sends = 0;
    for (int c = 0; c < chunks; ++c) {
      const int vs = c * stages + r;
      const StageTimes& x = t[static_cast<size_t>(vs)];
      work += x.forward + x.backward_input + x.backward_weight;
      if (messages && vs < vstages - 1) forward_sends += microbatches;
      if (messages && vs > 0) backward_sends += microbatches;
    }
    const auto groups = static_cast<double>(kind == ScheduleKind::interleaved
                                                ? std::max(forward_sends, backward_sends)
                                                : forward_sends + backward_sends);
    const double own = head + m * work + h * groups;
    bound = std::max(bound, fused && r > 0 ? own - h + tail : own);
    // Stage r's share of the chains the next rank's head and tail wait on.
    const StageTimes& first_chunk = t[static_cast<size_t>(r)];
    head += first_chunk.forward + s;
    tail += s + first_chunk.backward_input + first_chunk.backward_weight;
  }
  return bound * (1 - kRoundingSlack);
}

std::vector<StageTimes> virtual_stage_times(int stages, int chunks, StageTimes stage,
                                            StageTimes first, StageTimes last) {
  DTRAIN_CHECK(stages >= 1 && chunks >= 1, "virtual_stage_times: stages ", stages, ", chunks ",
               chunks, " must be >= 1");
  const double v = chunks;
  const StageTimes chunk{stage.forward / v, stage.backward_input / v, stage.backward_weight / v};
  std::vector<StageTimes> out(static_cast<size_t>(stages * chunks), chunk);
  auto add = [](StageTimes& to, const StageTimes& extra) {
    to.forward += extra.forward;
    to.backward_input += extra.backward_input;
    to.backward_weight += extra.backward_weight;
  };
  add(out.front(), first);
  add(out.back(), last);
  return out;
}

}  // namespace dtrain::plan
