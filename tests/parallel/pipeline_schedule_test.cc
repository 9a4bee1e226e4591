// The schedule generators: every schedule on the grid of P, M (M < P included) and v passes the
// checker with eager and rendezvous sends, and each generator's own shape (warm-up length,
// GPipe's all-forwards-first, ZB-H1's deferred weight gradients, the interleaved order) holds.
#include "dtrain/schedule/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/cost/comm_model.h"
#include "dtrain/parallel/pipeline_checker.h"

namespace dtrain::parallel {
namespace {

using plan::ScheduleKind;

constexpr ScheduleKind kKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                   ScheduleKind::interleaved, ScheduleKind::zero_bubble_h1};
constexpr int kStages[] = {1, 2, 3, 4, 8};
constexpr int kMicrobatches[] = {1, 2, 3, 4, 5, 8, 16};

std::vector<int> chunk_counts(ScheduleKind kind) {
  return kind == ScheduleKind::interleaved ? std::vector<int>{1, 2, 3} : std::vector<int>{1};
}

// Rendezvous sends (a send blocks until its receive is posted) need every rank's groups to
// line up. They do for every schedule except interleaved with M > P not a multiple of P,
// whose uneven micro-batch groups break the alignment across the ring's wrap-around link.
bool rendezvous_safe(ScheduleKind kind, int p, int m) {
  return kind != ScheduleKind::interleaved || m < p || m % p == 0;
}

std::vector<plan::Action> computes(const std::vector<plan::Action>& actions) {
  std::vector<plan::Action> out;
  for (const plan::Action& a : actions) {
    if (is_compute(a.kind)) out.push_back(a);
  }
  return out;
}

TEST(PipelineSchedule, EveryScheduleOnTheGridIsValid) {
  for (ScheduleKind kind : kKinds) {
    for (int p : kStages) {
      for (int m : kMicrobatches) {
        for (int v : chunk_counts(kind)) {
          SCOPED_TRACE(testing::Message()
                       << plan::name(kind) << " P " << p << " M " << m << " v " << v);
          const plan::PipelineSchedule s = plan::make_schedule(kind, p, m, v);
          EXPECT_EQ(s.kind, kind);
          ASSERT_EQ(static_cast<int>(s.per_rank.size()), p);
          SimulationOptions eager;
          const CheckResult e = check_schedule(s, eager);
          EXPECT_TRUE(e.ok()) << e.error;
          SimulationOptions rendezvous;
          rendezvous.send_mode = SendMode::rendezvous;
          const CheckResult r = check_schedule(s, rendezvous);
          if (rendezvous_safe(kind, p, m)) {
            EXPECT_TRUE(r.ok()) << r.error;
          }
          // Each rank computes every (mb, chunk) once forward and once backward: 2 actions per
          // pair fused, 3 with the backward split.
          const int per_pair = kind == ScheduleKind::zero_bubble_h1 ? 3 : 2;
          for (const auto& actions : s.per_rank) {
            EXPECT_EQ(static_cast<int>(computes(actions).size()), per_pair * m * v);
          }
          // Each rank's sends are what the planner charges it (plan::pp_sends_per_microbatch).
          for (int rank = 0; rank < p; ++rank) {
            const auto& actions = s.per_rank[static_cast<size_t>(rank)];
            const auto sends = std::count_if(actions.begin(), actions.end(),
                                             [](const plan::Action& a) { return is_send(a.kind); });
            EXPECT_EQ(sends, plan::pp_sends_per_microbatch(p, v, rank) * m) << "rank " << rank;
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedWithUnevenGroupsNeedsEagerSends) {
  // P = 3, M = 8: two groups of 4 micro-batches. Eager sends run it; rendezvous sends deadlock,
  // and the checker names the ranks and actions that wait.
  const plan::PipelineSchedule s = plan::make_interleaved_1f1b(3, 8, 2);
  EXPECT_TRUE(check_schedule(s).ok());
  SimulationOptions rendezvous;
  rendezvous.send_mode = SendMode::rendezvous;
  const CheckResult r = check_schedule(s, rendezvous);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("deadlock with rendezvous sends: rank 0 action #"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("waits for rank"), std::string::npos) << r.error;
}

TEST(PipelineSchedule, GpipeRunsAllForwardsFirst) {
  for (int p : kStages) {
    for (int m : kMicrobatches) {
      const plan::PipelineSchedule s = plan::make_gpipe(p, m);
      for (const auto& actions : s.per_rank) {
        const std::vector<plan::Action> c = computes(actions);
        for (int i = 0; i < 2 * m; ++i) {
          const plan::Action& a = c[static_cast<size_t>(i)];
          EXPECT_EQ(a.kind, i < m ? plan::ActionKind::forward : plan::ActionKind::backward);
          EXPECT_EQ(a.microbatch, i % m);
        }
      }
    }
  }
}

// The number of forwards a rank runs before its first backward.
int forwards_before_first_backward(const std::vector<plan::Action>& actions) {
  int n = 0;
  for (const plan::Action& a : actions) {
    if (a.kind == plan::ActionKind::backward || a.kind == plan::ActionKind::backward_input) break;
    if (a.kind == plan::ActionKind::forward) ++n;
  }
  return n;
}

TEST(PipelineSchedule, OneFOneBWarmsUpThenAlternates) {
  for (int p : kStages) {
    for (int m : kMicrobatches) {
      const plan::PipelineSchedule s = plan::make_1f1b(p, m);
      for (int r = 0; r < p; ++r) {
        const auto& actions = s.per_rank[static_cast<size_t>(r)];
        // min(P-r-1, M) warm-up forwards, then one more before the first backward.
        const int warmup = std::min(p - r - 1, m);
        EXPECT_EQ(forwards_before_first_backward(actions), std::min(warmup + 1, m));
        // Steady state: after the first backward, forwards and backwards alternate until the
        // forwards run out.
        const std::vector<plan::Action> c = computes(actions);
        const size_t first_backward = static_cast<size_t>(std::min(warmup + 1, m));
        const int steady = m - warmup;
        for (int i = 0; i + 1 < steady; ++i) {
          EXPECT_EQ(c[first_backward + 2 * static_cast<size_t>(i) + 1].kind,
                    plan::ActionKind::forward);
        }
      }
    }
  }
}

TEST(PipelineSchedule, ZeroBubbleDefersUpToRankWeightGradients) {
  for (int p : kStages) {
    for (int m : kMicrobatches) {
      const plan::PipelineSchedule s = plan::make_zb_h1(p, m);
      for (int r = 0; r < p; ++r) {
        const auto& actions = s.per_rank[static_cast<size_t>(r)];
        EXPECT_EQ(forwards_before_first_backward(actions), std::min(p - r, m));
        // Weight gradients pending (B done, W not) when a forward starts: at most r.
        int pending = 0, most_at_a_forward = 0;
        for (const plan::Action& a : actions) {
          if (a.kind == plan::ActionKind::forward)
            most_at_a_forward = std::max(most_at_a_forward, pending);
          if (a.kind == plan::ActionKind::backward_input) ++pending;
          if (a.kind == plan::ActionKind::backward_weight) --pending;
        }
        EXPECT_LE(most_at_a_forward, r);
        EXPECT_EQ(pending, 0);
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedFollowsMegatronsTable) {
  // P = 2, M = 4, v = 2: groups of P micro-batches, chunk 0 of the group then chunk 1.
  const plan::PipelineSchedule s = plan::make_interleaved_1f1b(2, 4, 2);
  std::vector<std::pair<int, int>> forwards;  // (mb, chunk) in rank 0's order
  for (const plan::Action& a : s.per_rank[0]) {
    if (a.kind == plan::ActionKind::forward) forwards.emplace_back(a.microbatch, a.chunk);
  }
  const std::vector<std::pair<int, int>> table = {{0, 0}, {1, 0}, {0, 1}, {1, 1},
                                                  {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  EXPECT_EQ(forwards, table);
  // Warm-up: (P-r-1)*2 + (v-1)*P chunk forwards, then one more before the first backward.
  for (int p : {2, 3, 4}) {
    for (int v : {2, 3}) {
      const int m = 2 * p;
      const plan::PipelineSchedule t = plan::make_interleaved_1f1b(p, m, v);
      for (int r = 0; r < p; ++r) {
        const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
        EXPECT_EQ(forwards_before_first_backward(t.per_rank[static_cast<size_t>(r)]),
                  std::min(warmup + 1, m * v));
      }
    }
  }
}

TEST(PipelineSchedule, MessagesGoToTheNeighbouringVirtualStage) {
  const int p = 4, m = 4, v = 2;
  const plan::PipelineSchedule s = plan::make_interleaved_1f1b(p, m, v);
  for (int r = 0; r < p; ++r) {
    for (const plan::Action& a : s.per_rank[static_cast<size_t>(r)]) {
      if (is_compute(a.kind)) {
        EXPECT_EQ(a.peer, -1);
        continue;
      }
      const bool downstream =
          a.kind == plan::ActionKind::send_activation || a.kind == plan::ActionKind::recv_gradient;
      EXPECT_EQ(a.peer, downstream ? (r + 1) % p : (r + p - 1) % p) << to_string(a);
    }
  }
  // A single stage exchanges no messages.
  const plan::PipelineSchedule single = plan::make_interleaved_1f1b(1, 3, 3);
  for (const plan::Action& a : single.per_rank[0]) EXPECT_TRUE(is_compute(a.kind));
}

TEST(PipelineSchedule, CommunicationGroups) {
  // Rank 0 of 1F1B with P = 2, M = 2: F0 >a0 F1 >a1 <g0 B0 <g1 B1.
  const std::vector<plan::Action> actions = plan::make_1f1b(2, 2).per_rank[0];
  ASSERT_EQ(actions.size(), 8u);
  EXPECT_EQ(plan::communication_group_end(actions, 0), 0u);  // a compute action: empty group
  EXPECT_EQ(plan::communication_group_end(actions, 1), 2u);  // >a0
  EXPECT_EQ(plan::communication_group_end(actions, 3), 5u);  // >a1 <g0 posted together
  EXPECT_EQ(plan::short_label(actions[3], 1), ">a1");
  EXPECT_EQ(plan::short_label(actions[4], 1), "<g0");
  EXPECT_EQ(to_string(actions[4]), "recv_gradient(mb 0, chunk 0) <- rank 1");
  EXPECT_EQ(plan::short_label({plan::ActionKind::forward, 3, 1, -1}, 2), "F3b");
}

TEST(PipelineSchedule, BadArguments) {
  EXPECT_THROW(plan::make_schedule(ScheduleKind::one_f_one_b, 4, 8, 2), Error);
  EXPECT_THROW(plan::make_1f1b(0, 8), Error);
  EXPECT_THROW(plan::make_gpipe(4, 0), Error);
  EXPECT_THROW(plan::make_interleaved_1f1b(4, 8, 0), Error);
}

}  // namespace
}  // namespace dtrain::parallel
