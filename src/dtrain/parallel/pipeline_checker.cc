// check_schedule: the five checks of pipeline_checker.h, each a member of Checker that returns
// the first problem it finds (empty when none), then the report's totals. The simulation is a
// dataflow loop: each rank runs until it waits on a message; a pass in which no rank moves
// while some have actions left is a deadlock.
#include "dtrain/parallel/pipeline_checker.h"

#include <algorithm>

#include "dtrain/core/check.h"

namespace dtrain::parallel {
namespace {

constexpr double kNotPosted = -1;
constexpr double kTolerance = 1e-9;

std::string at(int rank, size_t index, const plan::Action& a) {
  return str("rank ", rank, " action #", index, " ", to_string(a));
}

// What one rank has done so far for one (mb, chunk).
struct WorkState {
  bool recv_activation = false;
  bool forward = false;
  bool send_activation = false;
  bool recv_gradient = false;
  bool backward_input = false;   // fused backward or B
  bool backward_weight = false;  // fused backward or W
  bool send_gradient = false;
};

// A message endpoint: action `index` of `rank`.
struct Endpoint {
  int rank = 0;
  size_t index = 0;
};

class Checker {
 public:
  Checker(const plan::PipelineSchedule& s, const SimulationOptions& o) : s_(s), o_(o) {}

  CheckResult run() {
    CheckResult result;
    result.error = check_shape();
    if (result.error.empty()) result.error = check_actions();
    report_.ranks.resize(result.error.empty() ? static_cast<size_t>(s_.stages) : 0);
    for (int r = 0; r < s_.stages && result.error.empty(); ++r) result.error = check_rank(r);
    if (result.error.empty()) result.error = check_messages();
    if (result.error.empty()) result.error = simulate();
    if (result.error.empty()) result.error = check_times();
    if (result.error.empty()) result.report = totals();
    return result;
  }

 private:
  const std::vector<plan::Action>& actions(int r) const {
    return s_.per_rank[static_cast<size_t>(r)];
  }
  int last_stage() const { return s_.virtual_stages() - 1; }
  int next_rank(int r) const { return (r + 1) % s_.stages; }
  int prev_rank(int r) const { return (r + s_.stages - 1) % s_.stages; }
  size_t work_index(int mb, int chunk) const {
    return static_cast<size_t>(mb) * static_cast<size_t>(s_.chunks) + static_cast<size_t>(chunk);
  }
  int channel(int src, int dst, bool activation) const {
    return (src * s_.stages + dst) * 2 + (activation ? 0 : 1);
  }
  double duration(plan::ActionKind k) const {
    const plan::StageTimes& t = o_.times;
    const double v = s_.chunks;
    switch (k) {
      case plan::ActionKind::forward:
        return t.forward / v;
      case plan::ActionKind::backward:
        return (t.backward_input + t.backward_weight) / v;
      case plan::ActionKind::backward_input:
        return t.backward_input / v;
      case plan::ActionKind::backward_weight:
        return t.backward_weight / v;
      default:
        return 0;
    }
  }

  std::string check_shape() const {
    if (s_.stages < 1 || s_.microbatches < 1 || s_.chunks < 1) {
      return str("schedule needs stages, micro-batches and chunks >= 1, got ", s_.stages, ", ",
                 s_.microbatches, ", ", s_.chunks);
    }
    if (static_cast<int>(s_.per_rank.size()) != s_.stages) {
      return str("schedule has ", s_.per_rank.size(), " rank lists for ", s_.stages, " stages");
    }
    const plan::StageTimes& t = o_.times;
    if (!(t.forward >= 0 && t.backward_input >= 0 && t.backward_weight >= 0) ||
        !(o_.comm_latency >= 0)) {
      return "stage times and communication latency must be >= 0";
    }
    return {};
  }

  // Check 1: ranges and peers.
  std::string check_actions() const {
    for (int r = 0; r < s_.stages; ++r) {
      for (size_t i = 0; i < actions(r).size(); ++i) {
        const plan::Action& a = actions(r)[i];
        if (a.microbatch < 0 || a.microbatch >= s_.microbatches) {
          return str(at(r, i, a), ": micro-batch outside 0..", s_.microbatches - 1);
        }
        if (a.chunk < 0 || a.chunk >= s_.chunks) {
          return str(at(r, i, a), ": chunk outside 0..", s_.chunks - 1);
        }
        if (is_compute(a.kind)) continue;
        const bool to_next = a.kind == plan::ActionKind::send_activation ||
                             a.kind == plan::ActionKind::recv_gradient;
        const int expected = to_next ? next_rank(r) : prev_rank(r);
        if (s_.stages == 1) return str(at(r, i, a), ": a single stage exchanges no messages");
        if (a.peer != expected) {
          return str(at(r, i, a), ": the neighbouring virtual stage is on rank ", expected);
        }
      }
    }
    return {};
  }

  // Check 2: one rank's order, and its peak activations (counted in program order: held from a
  // forward until the action that frees them, see the header).
  std::string check_rank(int r) {
    const int v = s_.chunks;
    std::vector<WorkState> w(static_cast<size_t>(s_.microbatches) * static_cast<size_t>(v));
    int held = 0, stash = 0, peak_held = 0, peak_stash = 0;
    for (size_t i = 0; i < actions(r).size(); ++i) {
      std::string error = order_error(r, i, w);
      if (!error.empty()) return error;
      switch (actions(r)[i].kind) {
        case plan::ActionKind::forward:
          peak_held = std::max(peak_held, ++held);
          peak_stash = std::max(peak_stash, ++stash);
          break;
        case plan::ActionKind::backward:
          --held;
          --stash;
          break;
        case plan::ActionKind::backward_input:
          --held;
          break;
        case plan::ActionKind::backward_weight:
          --stash;
          break;
        default:
          break;
      }
    }
    std::string error = missing_work(r, w);
    if (!error.empty()) return error;
    RankReport& rr = report_.ranks[static_cast<size_t>(r)];
    rr.peak_inflight = static_cast<double>(peak_held) / v;
    rr.peak_weight_stash = static_cast<double>(peak_stash) / v;
    return {};
  }

  // Whether action i of rank r may run after what `w` records, and records it.
  std::string order_error(int r, size_t i, std::vector<WorkState>& w) const {
    const plan::Action& a = actions(r)[i];
    const int vs = s_.virtual_stage(r, a.chunk);
    const bool single = s_.stages == 1;  // neighbouring chunks on this rank, no messages
    WorkState& st = w[work_index(a.microbatch, a.chunk)];
    auto fail = [&](const auto&... why) { return str(at(r, i, a), ": ", why...); };
    switch (a.kind) {
      case plan::ActionKind::recv_activation:
        if (vs == 0) return fail("the first virtual stage receives no activation");
        if (st.recv_activation) return fail("received twice");
        if (st.forward) return fail("arrives after its forward ran");
        st.recv_activation = true;
        break;
      case plan::ActionKind::forward:
        if (st.forward) return fail("runs twice");
        if (vs > 0 && !single && !st.recv_activation) {
          return fail("runs before its input activation is received");
        }
        if (vs > 0 && single && !w[work_index(a.microbatch, a.chunk - 1)].forward) {
          return fail("runs before the forward of chunk ", a.chunk - 1);
        }
        st.forward = true;
        break;
      case plan::ActionKind::send_activation:
        if (vs == last_stage()) return fail("the last virtual stage sends no activation");
        if (!st.forward) return fail("sends the activation before its forward ran");
        if (st.send_activation) return fail("sent twice");
        st.send_activation = true;
        break;
      case plan::ActionKind::recv_gradient:
        if (vs == last_stage()) return fail("the last virtual stage receives no gradient");
        if (st.recv_gradient) return fail("received twice");
        if (st.backward_input) return fail("arrives after its backward ran");
        st.recv_gradient = true;
        break;
      case plan::ActionKind::backward:
      case plan::ActionKind::backward_input:
        if (st.backward_input) return fail("a second backward of the same micro-batch");
        if (!st.forward) return fail("runs before its forward");
        if (vs < last_stage() && !single && !st.recv_gradient) {
          return fail("runs before its output gradient is received");
        }
        if (vs < last_stage() && single &&
            !w[work_index(a.microbatch, a.chunk + 1)].backward_input) {
          return fail("runs before the backward of chunk ", a.chunk + 1);
        }
        st.backward_input = true;
        st.backward_weight = a.kind == plan::ActionKind::backward;
        break;
      case plan::ActionKind::backward_weight:
        if (st.backward_weight) return fail("a second weight gradient of the same micro-batch");
        if (!st.backward_input) return fail("runs before its backward_input");
        st.backward_weight = true;
        break;
      case plan::ActionKind::send_gradient:
        if (vs == 0) return fail("the first virtual stage sends no gradient");
        if (!st.backward_input) return fail("sends the gradient before its backward ran");
        if (st.send_gradient) return fail("sent twice");
        st.send_gradient = true;
        break;
    }
    return {};
  }

  // Every (mb, chunk) of rank r ran forward, backward and weight gradient, and sent what the
  // neighbouring stages need (receives are already required by the computes that use them).
  std::string missing_work(int r, const std::vector<WorkState>& w) const {
    for (int mb = 0; mb < s_.microbatches; ++mb) {
      for (int c = 0; c < s_.chunks; ++c) {
        const WorkState& st = w[work_index(mb, c)];
        const int vs = s_.virtual_stage(r, c);
        auto missing = [&](std::string_view what) {
          return str("rank ", r, " never ", what, " for ",
                     plan::to_string(plan::Action{plan::ActionKind::forward, mb, c}));
        };
        if (!st.forward) return missing("runs the forward");
        if (!st.backward_input) return missing("runs the backward");
        if (!st.backward_weight) return missing("runs the weight gradient (backward_weight)");
        if (s_.stages == 1) continue;
        if (vs > 0 && !st.send_gradient) return missing("sends the input gradient");
        if (vs < last_stage() && !st.send_activation) return missing("sends the activation");
      }
    }
    return {};
  }

  // Check 3: messages pair up in order on every (sender, receiver, payload) channel. (Check 2
  // already makes the counts equal; the count test keeps this check whole on its own.)
  std::string check_messages() {
    const size_t channels = static_cast<size_t>(s_.stages * s_.stages * 2);
    sends_.assign(channels, {});
    recvs_.assign(channels, {});
    seq_.assign(static_cast<size_t>(s_.stages), {});
    chan_.assign(static_cast<size_t>(s_.stages), {});
    for (int r = 0; r < s_.stages; ++r) {
      seq_[static_cast<size_t>(r)].assign(actions(r).size(), -1);
      chan_[static_cast<size_t>(r)].assign(actions(r).size(), -1);
      for (size_t i = 0; i < actions(r).size(); ++i) {
        const plan::Action& a = actions(r)[i];
        if (is_compute(a.kind)) continue;
        const bool act = carries_activation(a.kind);
        const int ch = is_send(a.kind) ? channel(r, a.peer, act) : channel(a.peer, r, act);
        auto& list =
            is_send(a.kind) ? sends_[static_cast<size_t>(ch)] : recvs_[static_cast<size_t>(ch)];
        chan_[static_cast<size_t>(r)][i] = ch;
        seq_[static_cast<size_t>(r)][i] = static_cast<int>(list.size());
        list.push_back({r, i});
      }
    }
    for (size_t ch = 0; ch < channels; ++ch) {
      const auto& snd = sends_[ch];
      const auto& rcv = recvs_[ch];
      for (size_t k = 0; k < std::max(snd.size(), rcv.size()); ++k) {
        if (k >= rcv.size()) {
          const plan::Action& a = actions(snd[k].rank)[snd[k].index];
          return str(at(snd[k].rank, snd[k].index, a), ": never received (rank ", a.peer,
                     " posts only ", rcv.size(), " matching receives)");
        }
        if (k >= snd.size()) {
          const plan::Action& a = actions(rcv[k].rank)[rcv[k].index];
          return str(at(rcv[k].rank, rcv[k].index, a), ": never sent (rank ", a.peer,
                     " posts only ", snd.size(), " matching sends)");
        }
        const plan::Action& a = actions(snd[k].rank)[snd[k].index];
        const plan::Action& b = actions(rcv[k].rank)[rcv[k].index];
        const int from = s_.virtual_stage(snd[k].rank, a.chunk);
        const int to = s_.virtual_stage(rcv[k].rank, b.chunk);
        const int step = carries_activation(a.kind) ? 1 : -1;
        if (a.microbatch != b.microbatch || to != from + step) {
          return str(at(snd[k].rank, snd[k].index, a), ": message ", k,
                     " on this link is received by ", at(rcv[k].rank, rcv[k].index, b),
                     " - sends and receives are out of order");
        }
      }
    }
    return {};
  }

  // Check 4: step every rank through its list; see the header for the send semantics.
  std::string simulate() {
    const size_t channels = sends_.size();
    send_post_.assign(channels, {});
    recv_post_.assign(channels, {});
    for (size_t ch = 0; ch < channels; ++ch) {
      send_post_[ch].assign(sends_[ch].size(), kNotPosted);
      recv_post_[ch].assign(recvs_[ch].size(), kNotPosted);
    }
    const size_t p = static_cast<size_t>(s_.stages);
    pc_.assign(p, 0);
    clock_.assign(p, 0);
    posted_.assign(p, false);
    report_.timed.assign(p, {});
    for (size_t r = 0; r < p; ++r) {
      report_.timed[r].resize(actions(static_cast<int>(r)).size());
    }
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < s_.stages; ++r) moved = advance(r) || moved;
    }
    std::string blocked;
    for (int r = 0; r < s_.stages; ++r) {
      if (pc_[static_cast<size_t>(r)] < actions(r).size()) {
        if (!blocked.empty()) blocked += "; ";
        blocked += waiting_on(r);
      }
    }
    if (!blocked.empty()) return str("deadlock with ", name(o_.send_mode), " sends: ", blocked);
    return {};
  }

  // Runs rank r until it must wait; returns whether it did anything.
  bool advance(int r) {
    const size_t ri = static_cast<size_t>(r);
    const auto& list = actions(r);
    bool moved = false;
    while (pc_[ri] < list.size()) {
      const plan::Action& a = list[pc_[ri]];
      if (is_compute(a.kind)) {
        const double d = duration(a.kind);
        report_.timed[ri][pc_[ri]] = {a, clock_[ri], clock_[ri] + d};
        clock_[ri] += d;
        ++pc_[ri];
        moved = true;
        continue;
      }
      const size_t end = communication_group_end(list, pc_[ri]);
      if (!posted_[ri]) {
        for (size_t i = pc_[ri]; i < end; ++i) post_time(r, i) = clock_[ri];
        posted_[ri] = true;
        moved = true;
      }
      double done = clock_[ri];
      for (size_t i = pc_[ri]; i < end; ++i) {
        const double t = completion(r, i);
        if (t == kNotPosted) return moved;
        report_.timed[ri][i] = {list[i], clock_[ri], t};
        done = std::max(done, t);
      }
      clock_[ri] = done;
      pc_[ri] = end;
      posted_[ri] = false;
    }
    return moved;
  }

  double& post_time(int r, size_t i) {
    const size_t ch = static_cast<size_t>(chan_[static_cast<size_t>(r)][i]);
    const size_t k = static_cast<size_t>(seq_[static_cast<size_t>(r)][i]);
    return is_send(actions(r)[i].kind) ? send_post_[ch][k] : recv_post_[ch][k];
  }

  // When the communication action completes, or kNotPosted while its partner is not posted.
  double completion(int r, size_t i) const {
    const size_t ch = static_cast<size_t>(chan_[static_cast<size_t>(r)][i]);
    const size_t k = static_cast<size_t>(seq_[static_cast<size_t>(r)][i]);
    const double sent = send_post_[ch][k];
    const double received = recv_post_[ch][k];
    const bool send = is_send(actions(r)[i].kind);
    if (o_.send_mode == SendMode::eager) {
      if (send) return sent;
      return sent == kNotPosted ? kNotPosted : std::max(received, sent + o_.comm_latency);
    }
    if (sent == kNotPosted || received == kNotPosted) return kNotPosted;
    return std::max(sent, received) + o_.comm_latency;
  }

  std::string waiting_on(int r) const {
    const size_t ri = static_cast<size_t>(r);
    const auto& list = actions(r);
    const size_t end = communication_group_end(list, pc_[ri]);
    for (size_t i = pc_[ri]; i < end; ++i) {
      if (completion(r, i) == kNotPosted) {
        return str(at(r, i, list[i]), " waits for rank ", list[i].peer);
      }
    }
    return str(at(r, pc_[ri], list[pc_[ri]]), " waits");
  }

  // Check 5: the cross-stage order, read off the simulated times.
  std::string check_times() const {
    const size_t n = static_cast<size_t>(s_.microbatches * s_.virtual_stages());
    std::vector<const TimedAction*> fwd(n, nullptr), bwd(n, nullptr);
    std::vector<int> rank_of(n, 0);
    auto slot = [&](int mb, int vs) {
      return static_cast<size_t>(mb) * static_cast<size_t>(s_.virtual_stages()) +
             static_cast<size_t>(vs);
    };
    for (int r = 0; r < s_.stages; ++r) {
      for (const TimedAction& t : report_.timed[static_cast<size_t>(r)]) {
        const size_t i = slot(t.action.microbatch, s_.virtual_stage(r, t.action.chunk));
        if (t.action.kind == plan::ActionKind::forward) fwd[i] = &t, rank_of[i] = r;
        if (t.action.kind == plan::ActionKind::backward ||
            t.action.kind == plan::ActionKind::backward_input) {
          bwd[i] = &t;
        }
      }
    }
    const double lat = s_.stages > 1 ? o_.comm_latency : 0;
    for (int mb = 0; mb < s_.microbatches; ++mb) {
      for (int vs = 0; vs < s_.virtual_stages(); ++vs) {
        const size_t i = slot(mb, vs);
        const int r = rank_of[i];
        if (vs > 0 && fwd[i]->start + kTolerance < fwd[slot(mb, vs - 1)]->end + lat) {
          return str("rank ", r, " ", to_string(fwd[i]->action), " starts at ", fwd[i]->start,
                     " before the previous stage's forward ends at ", fwd[slot(mb, vs - 1)]->end);
        }
        const double ready = vs < last_stage() ? bwd[slot(mb, vs + 1)]->end + lat : fwd[i]->end;
        if (bwd[i]->start + kTolerance < ready) {
          return str("rank ", r, " ", to_string(bwd[i]->action), " starts at ", bwd[i]->start,
                     " before its output gradient is ready at ", ready);
        }
      }
    }
    return {};
  }

  ScheduleReport totals() {
    ScheduleReport& rep = report_;
    const plan::StageTimes& t = o_.times;
    rep.ideal_time = s_.microbatches * (t.forward + t.backward_input + t.backward_weight);
    for (int r = 0; r < s_.stages; ++r) {
      RankReport& rr = rep.ranks[static_cast<size_t>(r)];
      rr.actions = static_cast<int>(actions(r).size());
      for (const TimedAction& ta : rep.timed[static_cast<size_t>(r)]) {
        rr.finish = std::max(rr.finish, ta.end);
        if (!is_compute(ta.action.kind)) continue;
        ++rr.compute_actions;
        rr.busy += ta.end - ta.start;
      }
      rep.makespan = std::max(rep.makespan, rr.finish);
    }
    double idle = 0;
    for (RankReport& rr : rep.ranks) {
      rr.idle = rep.makespan - rr.busy;
      idle += rr.idle;
    }
    rep.bubble_time = idle / s_.stages;
    rep.bubble_fraction_of_total = rep.makespan > 0 ? rep.bubble_time / rep.makespan : 0;
    rep.bubble_fraction_of_ideal = rep.ideal_time > 0 ? rep.bubble_time / rep.ideal_time : 0;
    return std::move(rep);
  }

  const plan::PipelineSchedule& s_;
  const SimulationOptions& o_;
  ScheduleReport report_;
  std::vector<std::vector<Endpoint>> sends_, recvs_;        // (channels) in program order
  std::vector<std::vector<int>> chan_, seq_;                // (P, actions) channel and place in it
  std::vector<std::vector<double>> send_post_, recv_post_;  // (channels, messages)
  std::vector<size_t> pc_;                                  // (P) next action
  std::vector<double> clock_;                               // (P)
  std::vector<bool> posted_;  // (P) whether the group at pc_ is posted
};

}  // namespace

std::string_view name(SendMode mode) {
  return mode == SendMode::eager ? "eager" : "rendezvous";
}

CheckResult check_schedule(const plan::PipelineSchedule& schedule,
                           const SimulationOptions& options) {
  return Checker(schedule, options).run();
}

ScheduleReport simulate_schedule(const plan::PipelineSchedule& schedule,
                                 const SimulationOptions& options) {
  CheckResult result = check_schedule(schedule, options);
  DTRAIN_CHECK(result.ok(), "invalid pipeline schedule: ", result.error);
  return std::move(result.report);
}

trace::Timeline to_timeline(const plan::PipelineSchedule& schedule, const ScheduleReport& report) {
  trace::Timeline timeline;
  timeline.time_unit = "units";
  for (size_t r = 0; r < report.timed.size(); ++r) {
    trace::TimelineRow row;
    row.name = str("rank ", r);
    for (const TimedAction& t : report.timed[r]) {
      const plan::Action& a = t.action;
      trace::SpanKind kind = trace::SpanKind::other;
      switch (a.kind) {
        case plan::ActionKind::forward:
          kind = trace::SpanKind::forward;
          break;
        case plan::ActionKind::backward:
          kind = trace::SpanKind::backward;
          break;
        case plan::ActionKind::backward_input:
          kind = trace::SpanKind::backward_input;
          break;
        case plan::ActionKind::backward_weight:
          kind = trace::SpanKind::backward_weight;
          break;
        case plan::ActionKind::send_activation:
        case plan::ActionKind::send_gradient:
          kind = trace::SpanKind::send;
          break;
        case plan::ActionKind::recv_activation:
        case plan::ActionKind::recv_gradient:
          kind = trace::SpanKind::recv;
          break;
      }
      const std::string label = is_compute(a.kind) ? short_label(a, schedule.chunks) : to_string(a);
      row.spans.push_back({label, kind, a.microbatch, a.chunk, t.start, t.end});
    }
    timeline.rows.push_back(std::move(row));
  }
  return timeline;
}

}  // namespace dtrain::parallel
