// The schedule generators. Each builds every rank's compute order in steps; add_communication
// then puts the receives a step needs before it and the sends it produces after it.
#include "dtrain/schedule/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

void check_arguments(int stages, int microbatches, int chunks) {
  DTRAIN_CHECK(stages >= 1, "pipeline stages must be >= 1, got ", stages);
  DTRAIN_CHECK(microbatches >= 1, "micro-batches must be >= 1, got ", microbatches);
  DTRAIN_CHECK(chunks >= 1, "model chunks per rank must be >= 1, got ", chunks);
}

PipelineSchedule empty_schedule(ScheduleKind kind, int stages, int microbatches, int chunks) {
  check_arguments(stages, microbatches, chunks);
  PipelineSchedule s;
  s.kind = kind;
  s.stages = stages;
  s.microbatches = microbatches;
  s.chunks = chunks;
  s.per_rank.resize(static_cast<size_t>(stages));
  return s;
}

Action compute(ActionKind kind, int mb, int chunk = 0) {
  return {kind, mb, chunk, -1};
}

// A rank's compute order cut into steps: the compute actions of one step run back to back, and
// messages go between steps. Most schedules make every compute action its own step; the
// interleaved schedule pairs its steady-state forward and backward as Megatron does.
using Steps = std::vector<std::vector<Action>>;

// Builds each rank's list from its steps: before a step, the receives its compute actions need
// from other ranks; after it, the sends of what they produced. The sends after one step and the
// receives before the next thus form one group (see the header). With P = 1 neighbouring
// chunks share the rank and there are no messages.
void add_communication(PipelineSchedule& s, const std::vector<Steps>& steps) {
  const int p = s.stages;
  const int last = s.virtual_stages() - 1;
  for (int r = 0; r < p; ++r) {
    const int next = (r + 1) % p;
    const int prev = (r + p - 1) % p;
    std::vector<Action>& out = s.per_rank[static_cast<size_t>(r)];
    for (const std::vector<Action>& step : steps[static_cast<size_t>(r)]) {
      if (p == 1) {
        out.insert(out.end(), step.begin(), step.end());
        continue;
      }
      for (const Action& a : step) {
        const int vs = s.virtual_stage(r, a.chunk);
        if (a.kind == ActionKind::forward && vs > 0) {
          out.push_back({ActionKind::recv_activation, a.microbatch, a.chunk, prev});
        }
        if ((a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) && vs < last) {
          out.push_back({ActionKind::recv_gradient, a.microbatch, a.chunk, next});
        }
      }
      out.insert(out.end(), step.begin(), step.end());
      for (const Action& a : step) {
        const int vs = s.virtual_stage(r, a.chunk);
        if (a.kind == ActionKind::forward && vs < last) {
          out.push_back({ActionKind::send_activation, a.microbatch, a.chunk, next});
        }
        if ((a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) && vs > 0) {
          out.push_back({ActionKind::send_gradient, a.microbatch, a.chunk, prev});
        }
      }
    }
  }
}

}  // namespace

std::string_view name(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward:
      return "forward";
    case ActionKind::backward:
      return "backward";
    case ActionKind::backward_input:
      return "backward_input";
    case ActionKind::backward_weight:
      return "backward_weight";
    case ActionKind::send_activation:
      return "send_activation";
    case ActionKind::recv_activation:
      return "recv_activation";
    case ActionKind::send_gradient:
      return "send_gradient";
    case ActionKind::recv_gradient:
      return "recv_gradient";
  }
  return "?";
}

std::string to_string(const Action& a) {
  std::string s = str(name(a.kind), "(mb ", a.microbatch, ", chunk ", a.chunk, ")");
  if (is_send(a.kind)) s += str(" -> rank ", a.peer);
  if (is_recv(a.kind)) s += str(" <- rank ", a.peer);
  return s;
}

std::string short_label(const Action& a, int chunks) {
  std::string_view prefix = "?";
  switch (a.kind) {
    case ActionKind::forward:
      prefix = "F";
      break;
    case ActionKind::backward:
    case ActionKind::backward_input:
      prefix = "B";
      break;
    case ActionKind::backward_weight:
      prefix = "W";
      break;
    case ActionKind::send_activation:
      prefix = ">a";
      break;
    case ActionKind::recv_activation:
      prefix = "<a";
      break;
    case ActionKind::send_gradient:
      prefix = ">g";
      break;
    case ActionKind::recv_gradient:
      prefix = "<g";
      break;
  }
  if (chunks == 1) return str(prefix, a.microbatch);
  return str(prefix, a.microbatch, static_cast<char>('a' + a.chunk % 26));
}

PipelineSchedule make_gpipe(int stages, int microbatches) {
  PipelineSchedule s = empty_schedule(ScheduleKind::gpipe, stages, microbatches, 1);
  std::vector<Steps> steps(static_cast<size_t>(stages));
  for (Steps& rank : steps) {
    for (int mb = 0; mb < microbatches; ++mb) rank.push_back({compute(ActionKind::forward, mb)});
    for (int mb = 0; mb < microbatches; ++mb) rank.push_back({compute(ActionKind::backward, mb)});
  }
  add_communication(s, steps);
  return s;
}

PipelineSchedule make_1f1b(int stages, int microbatches) {
  PipelineSchedule s = empty_schedule(ScheduleKind::one_f_one_b, stages, microbatches, 1);
  std::vector<Steps> steps(static_cast<size_t>(stages));
  for (int r = 0; r < stages; ++r) {
    Steps& rank = steps[static_cast<size_t>(r)];
    const int warmup = std::min(stages - r - 1, microbatches);
    int f = 0, b = 0;  // next forward, next backward
    while (f < warmup) rank.push_back({compute(ActionKind::forward, f++)});
    while (f < microbatches) {
      rank.push_back({compute(ActionKind::forward, f++)});
      rank.push_back({compute(ActionKind::backward, b++)});
    }
    while (b < microbatches) rank.push_back({compute(ActionKind::backward, b++)});
  }
  add_communication(s, steps);
  return s;
}

namespace {

// The interleaved order of (mb, chunk) work, the same on every rank: micro-batches in groups,
// each group through chunk 0, then chunk 1, ... for forwards, and through the chunks in reverse
// for backwards. Groups hold P micro-batches when P divides M. Otherwise the floor(M / P) groups
// share M as evenly as possible, larger ones first, so that no group is smaller than P (a
// smaller group puts a forward's next chunk fewer than P places later in the order, which is
// what lets a forward wait on a backward that waits on it); with M < P there is one group of M
// (interleaved_group_size is the first group's size).
void interleaved_order(int stages, int microbatches, int chunks, std::vector<Action>& forwards,
                       std::vector<Action>& backwards) {
  const int groups = std::max(1, microbatches / stages);
  const int base = microbatches / groups, larger = microbatches % groups;
  int first = 0;
  for (int g = 0; g < groups; ++g) {
    const int size = base + (g < larger ? 1 : 0);
    for (int c = 0; c < chunks; ++c) {
      for (int mb = first; mb < first + size; ++mb) {
        forwards.push_back(compute(ActionKind::forward, mb, c));
        backwards.push_back(compute(ActionKind::backward, mb, chunks - 1 - c));
      }
    }
    first += size;
  }
}

}  // namespace

PipelineSchedule make_interleaved_1f1b(int stages, int microbatches, int chunks) {
  PipelineSchedule s = empty_schedule(ScheduleKind::interleaved, stages, microbatches, chunks);
  std::vector<Action> forwards, backwards;
  interleaved_order(stages, microbatches, chunks, forwards, backwards);
  const int total = microbatches * chunks;
  std::vector<Steps> steps(static_cast<size_t>(stages));
  for (int r = 0; r < stages; ++r) {
    Steps& rank = steps[static_cast<size_t>(r)];
    // The warm-up is plan/'s formula, so the planner's in-flight count is this schedule's.
    const int warmup = interleaved_warmup_forwards(stages, microbatches, chunks, r);
    int f = 0, b = 0;
    while (f < warmup) rank.push_back({forwards[static_cast<size_t>(f++)]});
    while (f < total) {
      rank.push_back({forwards[static_cast<size_t>(f++)], backwards[static_cast<size_t>(b++)]});
    }
    while (b < total) rank.push_back({backwards[static_cast<size_t>(b++)]});
  }
  add_communication(s, steps);
  return s;
}

PipelineSchedule make_zb_h1(int stages, int microbatches) {
  PipelineSchedule s = empty_schedule(ScheduleKind::zero_bubble_h1, stages, microbatches, 1);
  std::vector<Steps> steps(static_cast<size_t>(stages));
  for (int r = 0; r < stages; ++r) {
    Steps& rank = steps[static_cast<size_t>(r)];
    const int warmup = std::min(stages - r - 1, microbatches);
    const size_t max_pending = static_cast<size_t>(r);  // W's rank r may leave for later
    std::deque<int> pending;                            // micro-batches whose B ran and W did not
    int f = 0, b = 0;
    auto backward = [&] {
      rank.push_back({compute(ActionKind::backward_input, b)});
      pending.push_back(b++);
      if (pending.size() > max_pending) {
        rank.push_back({compute(ActionKind::backward_weight, pending.front())});
        pending.pop_front();
      }
    };
    while (f < warmup) rank.push_back({compute(ActionKind::forward, f++)});
    while (f < microbatches) {
      rank.push_back({compute(ActionKind::forward, f++)});
      backward();
    }
    while (b < microbatches) backward();
    for (int mb : pending) rank.push_back({compute(ActionKind::backward_weight, mb)});
  }
  add_communication(s, steps);
  return s;
}

PipelineSchedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks) {
  if (kind == ScheduleKind::interleaved) {
    return make_interleaved_1f1b(stages, microbatches, chunks);
  }
  DTRAIN_CHECK(chunks == 1, "model chunks per rank (", chunks,
               ") apply only to the interleaved schedule");
  switch (kind) {
    case ScheduleKind::gpipe:
      return make_gpipe(stages, microbatches);
    case ScheduleKind::one_f_one_b:
      return make_1f1b(stages, microbatches);
    case ScheduleKind::zero_bubble_h1:
      return make_zb_h1(stages, microbatches);
    case ScheduleKind::interleaved:
      break;
  }
  DTRAIN_CHECK(false, "unknown schedule kind ", static_cast<int>(kind));
  return {};
}

size_t communication_group_end(const std::vector<Action>& actions, size_t begin) {
  size_t end = begin;
  while (end < actions.size() && !is_compute(actions[end].kind)) ++end;
  return end;
}

}  // namespace dtrain::plan
