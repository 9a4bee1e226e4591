// simulate_pipeline: a dataflow replay. Each rank runs until a group waits on a message not yet
// sent; a pass in which no rank moves while some have actions left means a receive is never
// matched (a generated schedule never does this: the checker proves them deadlock-free).
#include "dtrain/plan/pipeline_simulation.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

constexpr double kNotSent = -1;

class Replay {
 public:
  Replay(const PipelineSchedule& s, const PipelineSimulationInput& in) : s_(s), in_(in) {
    const size_t slots =
        static_cast<size_t>(s.microbatches) * static_cast<size_t>(s.virtual_stages());
    activation_arrival_.assign(slots, kNotSent);
    gradient_arrival_.assign(slots, kNotSent);
    const size_t p = static_cast<size_t>(s.stages);
    pc_.assign(p, 0);
    clock_.assign(p, 0);
    posted_.assign(p, false);
    result_.ranks.resize(p);
  }

  PipelineSimulation run() {
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < s_.stages; ++r) moved = advance(r) || moved;
    }
    for (int r = 0; r < s_.stages; ++r) {
      const size_t ri = static_cast<size_t>(r);
      DTRAIN_CHECK(pc_[ri] == list(r).size(), "pipeline simulation: rank ", r, " waits forever at ",
                   to_string(list(r)[pc_[ri]]), " (a receive that no rank sends)");
      result_.ranks[ri].finish_s = clock_[ri];
      result_.makespan_s = std::max(result_.makespan_s, clock_[ri]);
    }
    for (size_t r = 0; r < result_.ranks.size(); ++r) {
      RankTiming& t = result_.ranks[r];
      t.idle_s = result_.makespan_s - t.busy_s;
      if (t.busy_s > result_.ranks[static_cast<size_t>(result_.critical_rank)].busy_s) {
        result_.critical_rank = static_cast<int>(r);
      }
    }
    return std::move(result_);
  }

 private:
  const std::vector<Action>& list(int r) const { return s_.per_rank[static_cast<size_t>(r)]; }
  size_t slot(int mb, int vs) const {
    return static_cast<size_t>(mb) * static_cast<size_t>(s_.virtual_stages()) +
           static_cast<size_t>(vs);
  }

  double duration(int r, const Action& a) const {
    const StageTimes& t =
        in_.virtual_stage_times[static_cast<size_t>(s_.virtual_stage(r, a.chunk))];
    switch (a.kind) {
      case ActionKind::forward:
        return t.forward;
      case ActionKind::backward:
        return t.backward_input + t.backward_weight;
      case ActionKind::backward_input:
        return t.backward_input;
      case ActionKind::backward_weight:
        return t.backward_weight;
      default:
        return 0;
    }
  }

  // Where a message of action `a` on rank r is recorded: an activation under its sender's
  // virtual stage, a gradient likewise (the receiver looks up its neighbour's slot).
  double& arrival(int r, const Action& a) {
    const int vs = s_.virtual_stage(r, a.chunk);
    switch (a.kind) {
      case ActionKind::send_activation:
        return activation_arrival_[slot(a.microbatch, vs)];
      case ActionKind::recv_activation:
        return activation_arrival_[slot(a.microbatch, vs - 1)];
      case ActionKind::send_gradient:
        return gradient_arrival_[slot(a.microbatch, vs)];
      default:  // recv_gradient
        return gradient_arrival_[slot(a.microbatch, vs + 1)];
    }
  }

  // Runs rank r until it waits on a message; returns whether it did anything.
  bool advance(int r) {
    const size_t ri = static_cast<size_t>(r);
    const std::vector<Action>& actions = list(r);
    bool moved = false;
    while (pc_[ri] < actions.size()) {
      const Action& a = actions[pc_[ri]];
      if (is_compute(a.kind)) {
        const double d = duration(r, a);
        result_.ranks[ri].busy_s += d;
        clock_[ri] += d;
        ++pc_[ri];
        moved = true;
        continue;
      }
      const size_t end = communication_group_end(actions, pc_[ri]);
      bool sends = false;
      for (size_t i = pc_[ri]; i < end; ++i) sends = sends || is_send(actions[i].kind);
      if (!posted_[ri]) {
        for (size_t i = pc_[ri]; i < end; ++i) {
          if (is_send(actions[i].kind)) arrival(r, actions[i]) = clock_[ri] + in_.send_s;
        }
        posted_[ri] = true;
        moved = true;
      }
      double done = clock_[ri];
      const bool held = sends && in_.send_wait == SendWait::sender_waits;
      if (held) done += in_.send_s;
      for (size_t i = pc_[ri]; i < end; ++i) {
        if (!is_recv(actions[i].kind)) continue;
        const double t = arrival(r, actions[i]);
        if (t == kNotSent) return moved;
        done = std::max(done, t);
      }
      if (held) result_.ranks[ri].sending_s += in_.send_s;
      clock_[ri] = done;
      pc_[ri] = end;
      posted_[ri] = false;
    }
    return moved;
  }

  const PipelineSchedule& s_;
  const PipelineSimulationInput& in_;
  PipelineSimulation result_;
  std::vector<double> activation_arrival_, gradient_arrival_;  // (M * P * v)
  std::vector<size_t> pc_;                                     // (P) next action
  std::vector<double> clock_;                                  // (P)
  std::vector<bool> posted_;  // (P) whether the group at pc_ is posted
};

}  // namespace

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
  DTRAIN_CHECK(static_cast<int>(input.virtual_stage_times.size()) == schedule.virtual_stages(),
               "pipeline simulation: ", input.virtual_stage_times.size(),
               " virtual stage times for a schedule of ", schedule.stages, " stages x ",
               schedule.chunks, " chunks");
  DTRAIN_CHECK(static_cast<int>(schedule.per_rank.size()) == schedule.stages,
               "pipeline simulation: ", schedule.per_rank.size(), " rank lists for ",
               schedule.stages, " stages");
  for (size_t vs = 0; vs < input.virtual_stage_times.size(); ++vs) {
    const StageTimes& t = input.virtual_stage_times[vs];
    DTRAIN_CHECK(t.forward >= 0 && t.backward_input >= 0 && t.backward_weight >= 0,
                 "pipeline simulation: virtual stage ", vs, " has a negative time (F ", t.forward,
                 ", B ", t.backward_input, ", W ", t.backward_weight, ")");
  }
  DTRAIN_CHECK(input.send_s >= 0, "pipeline simulation: send time ", input.send_s, " < 0");
  return Replay(schedule, input).run();
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
