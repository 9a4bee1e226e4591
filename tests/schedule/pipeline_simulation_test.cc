// The clock's pipeline simulation on hand-worked cases: equal stages give pipeline_model.h's
// closed forms for GPipe and 1F1B; interleaved, ZB-H1, a slow head stage and the send time give
// the step worked out by hand below (each action's [start, end] written out in the comments).
// (tests/parallel/pipeline_simulation_test.cc compares it with the checker's simulation.) The
// makespan's lower bound stays under the replay on random stage times, and is tight on equal ones.
#include "dtrain/schedule/pipeline_simulation.h"

#include <random>

#include <gtest/gtest.h>

#include "dtrain/core/check.h"

namespace dtrain::plan {
namespace {

std::vector<StageTimes> uniform(int virtual_stages, StageTimes t) {
  return std::vector<StageTimes>(static_cast<size_t>(virtual_stages), t);
}

TEST(PipelineSimulation, EqualStagesGiveTheClosedFormsOfGpipeAnd1f1b) {
  const StageTimes t{1.0, 2.0, 0.5};
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    for (int p : {2, 4}) {
      for (int m : {1, 4, 8}) {
        const PipelineSimulation sim =
            simulate_pipeline(make_schedule(kind, p, m), {uniform(p, t)});
        const BubbleEstimate got = sim.bubble();
        const BubbleEstimate want = pipeline_bubble(kind, p, m, 1, t);
        SCOPED_TRACE(testing::Message() << name(kind) << " P " << p << " M " << m);
        EXPECT_DOUBLE_EQ(got.ideal_time, want.ideal_time);
        EXPECT_DOUBLE_EQ(got.bubble_time, want.bubble_time);  // (P-1) * 3.5
        EXPECT_DOUBLE_EQ(got.total_time, want.total_time);
        EXPECT_DOUBLE_EQ(got.fraction_of_total, want.fraction_of_total);  // (P-1)/(M+P-1)
        EXPECT_DOUBLE_EQ(sim.makespan_s, (m + p - 1) * 3.5);
        for (const RankTiming& r : sim.ranks) EXPECT_DOUBLE_EQ(r.busy_s, m * 3.5);
      }
    }
  }
}

TEST(PipelineSimulation, InterleavedByHand) {
  // P = 2, v = 2, M = 2, every chunk F 1, B 1, W 1 (fused: B+W 2). Virtual stages: rank 0 holds
  // 0 (a) and 2 (b), rank 1 holds 1 (a) and 3 (b). Orders (make_interleaved_1f1b):
  //   rank 0: F0a F1a F0b F1b B0b B1b B0a B1a;  rank 1: F0a F1a F0b B0b F1b B1b B0a B1a.
  //   rank 0: F0a [0,1] F1a [1,2] F0b [2,3] (rank 1's F0a ends 2) F1b [3,4] (F1a ends 3)
  //   rank 1: F0a [1,2] F1a [2,3] F0b [3,4] B0b [4,6] F1b [6,7] B1b [7,9]
  //   rank 0: B0b [6,8] (rank 1's B0b ends 6) B1b [9,11] (B1b ends 9)
  //   rank 1: B0a [9,11] (rank 0's B0b ends 8, rank 1 free at 9) B1a [11,13] (B1b ends 11)
  //   rank 0: B0a [11,13] B1a [13,15]
  // Makespan 15, busy 4 * 1 + 4 * 2 = 12 on each rank, bubble 3: the closed form
  // (P-1)(F+B+W)/v = 1 * 6 / 2 = 3 with whole-stage F 2, B 2, W 2.
  const PipelineSimulation sim =
      simulate_pipeline(make_interleaved_1f1b(2, 2, 2), {uniform(4, {1, 1, 1})});
  EXPECT_DOUBLE_EQ(sim.makespan_s, 15);
  EXPECT_DOUBLE_EQ(sim.ranks[0].busy_s, 12);
  EXPECT_DOUBLE_EQ(sim.ranks[1].busy_s, 12);
  EXPECT_DOUBLE_EQ(sim.ranks[0].finish_s, 15);
  EXPECT_DOUBLE_EQ(sim.ranks[1].finish_s, 13);
  EXPECT_DOUBLE_EQ(sim.bubble().bubble_time, 3);
  EXPECT_DOUBLE_EQ(pipeline_bubble(ScheduleKind::interleaved, 2, 2, 2, {2, 2, 2}).bubble_time, 3);
}

TEST(PipelineSimulation, ZeroBubbleH1ByHand) {
  // P = 2, M = 2. Orders (make_zb_h1): rank 0: F0 F1 B0 W0 B1 W1; rank 1: F0 B0 F1 B1 W0 W1.
  // F 1, B 1, W 1:
  //   rank 0: F0 [0,1] F1 [1,2];  rank 1: F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5] W0 [5,6] W1 [6,7]
  //   rank 0: B0 [3,4] W0 [4,5] B1 [5,6] (rank 1's B1 ends 5) W1 [6,7]
  // makespan 7, busy 6, bubble 1 = the closed form (P-1)(F+B-W).
  PipelineSimulation sim = simulate_pipeline(make_zb_h1(2, 2), {uniform(2, {1, 1, 1})});
  EXPECT_DOUBLE_EQ(sim.makespan_s, 7);
  EXPECT_DOUBLE_EQ(sim.bubble().bubble_time, 1);
  EXPECT_DOUBLE_EQ(pipeline_bubble(ScheduleKind::zero_bubble_h1, 2, 2, 1, {1, 1, 1}).bubble_time,
                   1);
  // W 2: rank 1's W0 [5,7] W1 [7,9]; rank 0's B0 [3,4] W0 [4,6] B1 [6,7] W1 [7,9]. Makespan 9,
  // busy 8, bubble 1, where the steady-state closed form says max(0, F+B-W) = 0: with M = 2 no
  // W is pending on rank 1 while it waits 1 for its first forward.
  sim = simulate_pipeline(make_zb_h1(2, 2), {uniform(2, {1, 1, 2})});
  EXPECT_DOUBLE_EQ(sim.makespan_s, 9);
  EXPECT_DOUBLE_EQ(sim.bubble().bubble_time, 1);
  EXPECT_DOUBLE_EQ(pipeline_bubble(ScheduleKind::zero_bubble_h1, 2, 2, 1, {1, 1, 2}).bubble_time,
                   0);
}

TEST(PipelineSimulation, SlowLastStageByHand) {
  // 1F1B, P = 2, M = 2. Stage 0: F 1, B 1, W 1; stage 1 (with the head): F 2, B 2, W 1.
  // Orders (make_1f1b): rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1 (fused B+W: 2 and 3).
  //   rank 0: F0 [0,1] F1 [1,2]
  //   rank 1: F0 [1,3] B0 [3,6] F1 [6,8] (rank 0's F1 ended at 2) B1 [8,11]
  //   rank 0: B0 [6,8] B1 [11,13]
  // Makespan 13; the critical (busiest) rank is 1: busy 2 * (2 + 3) = 10, bubble 3. The closed
  // form on the slowest stage, as the clocks priced it, says (M+P-1) * 5 = 15.
  const PipelineSimulation sim =
      simulate_pipeline(make_1f1b(2, 2), {{StageTimes{1, 1, 1}, StageTimes{2, 2, 1}}});
  EXPECT_DOUBLE_EQ(sim.makespan_s, 13);
  EXPECT_EQ(sim.critical_rank, 1);
  EXPECT_DOUBLE_EQ(sim.ranks[1].busy_s, 10);
  EXPECT_DOUBLE_EQ(sim.ranks[0].busy_s, 6);
  EXPECT_DOUBLE_EQ(sim.ranks[0].idle_s, 7);
  EXPECT_DOUBLE_EQ(sim.bubble().bubble_time, 3);
  EXPECT_DOUBLE_EQ(pipeline_bubble(ScheduleKind::one_f_one_b, 2, 2, 1, {2, 2, 1}).total_time, 15);
}

TEST(PipelineSimulation, SendTimeByHand) {
  // GPipe, P = 2, M = 2, F 1, B 1, W 0; without sends the step is (M+P-1)(F+B) = 6.
  // Lists: rank 0: F0 >a0 F1 [>a1 <g0] B0 <g1 B1; rank 1: <a0 F0 <a1 F1 B0 >g0 B1 >g1.
  const PipelineSchedule s = make_gpipe(2, 2);
  const std::vector<StageTimes> t = uniform(2, {1, 1, 0});
  EXPECT_DOUBLE_EQ(simulate_pipeline(s, {t}).makespan_s, 6);
  // Send 0.5, the sender free (overlapped): a0 arrives 1.5, a1 2.5: rank 1 F0 [1.5,2.5]
  // F1 [2.5,3.5] B0 [3.5,4.5] B1 [4.5,5.5]; g0 arrives 5, g1 6: rank 0 B0 [5,6] B1 [6,7].
  // 7 = 6 + 2 (P-1) sends: only the fill and the drain wait for one.
  EXPECT_DOUBLE_EQ(simulate_pipeline(s, {t, 0.5, SendWait::overlapped}).makespan_s, 7);
  // The sender waits for its send: rank 0 F0 [0,1] >a0 until 1.5, F1 [1.5,2.5], a1 arrives 3;
  // rank 1 F0 [1.5,2.5] F1 [3,4] B0 [4,5] >g0 until 5.5 B1 [5.5,6.5] >g1 until 7; rank 0 B0
  // [5.5,6.5] (g0 arrived 5.5) B1 [7,8]. 8 = 6 + 4 sends; pricing every F and B with a send
  // (F 1.5, B 1.5) would say (M+P-1) * 3 = 9, but the last stage's forwards and the first
  // stage's backwards send nothing.
  const PipelineSimulation sim = simulate_pipeline(s, {t, 0.5, SendWait::sender_waits});
  EXPECT_DOUBLE_EQ(sim.makespan_s, 8);
  EXPECT_DOUBLE_EQ(sim.ranks[1].finish_s, 7);
  EXPECT_DOUBLE_EQ(sim.ranks[0].busy_s, 4);
  // Rank 0 (the first of the equally busy) is held by two send groups (>a0; >a1 <g0): its own
  // work 4 + 1, the bubble 8 - 5 = 3.
  EXPECT_EQ(sim.critical_rank, 0);
  EXPECT_DOUBLE_EQ(sim.ranks[0].sending_s, 1);
  EXPECT_DOUBLE_EQ(sim.bubble().ideal_time, 5);
  EXPECT_DOUBLE_EQ(sim.bubble().bubble_time, 3);
}

TEST(PipelineSimulation, OneStageRunsItsChunksInOrder) {
  // P = 1: no messages, the step is the compute: 2 micro-batches x 2 chunks x (1 + 3).
  const PipelineSimulation sim =
      simulate_pipeline(make_interleaved_1f1b(1, 2, 2), {uniform(2, {1, 2, 1}), 5.0});
  EXPECT_DOUBLE_EQ(sim.makespan_s, 16);
  EXPECT_DOUBLE_EQ(sim.bubble().bubble_time, 0);
}

TEST(PipelineSimulation, VirtualStageTimes) {
  // A stage of F 4, B 6, W 2 in 2 chunks; the embedding on virtual stage 0, the head on 3.
  const std::vector<StageTimes> t = virtual_stage_times(2, 2, {4, 6, 2}, {0.5, 0.25, 0}, {1, 2, 3});
  ASSERT_EQ(t.size(), 4u);
  EXPECT_DOUBLE_EQ(t[0].forward, 2.5);
  EXPECT_DOUBLE_EQ(t[0].backward_input, 3.25);
  EXPECT_DOUBLE_EQ(t[1].forward, 2);
  EXPECT_DOUBLE_EQ(t[2].backward_weight, 1);
  EXPECT_DOUBLE_EQ(t[3].backward_weight, 4);
}

TEST(PipelineSimulation, RefusesTimesThatDoNotFitTheSchedule) {
  EXPECT_THROW(simulate_pipeline(make_1f1b(2, 2), {uniform(3, {1, 1, 1})}), Error);
  EXPECT_THROW(simulate_pipeline(make_1f1b(2, 2), {uniform(2, {1, -1, 1})}), Error);
  EXPECT_THROW(simulate_pipeline(make_1f1b(2, 2), {uniform(2, {1, 1, 1}), -0.5}), Error);
  PipelineSchedule broken = make_1f1b(2, 1);
  broken.per_rank[0].clear();  // rank 1 waits for an activation nobody sends
  EXPECT_THROW(simulate_pipeline(broken, {uniform(2, {1, 1, 1})}), Error);
}

// The bound search ranks by is never above the replay, for every schedule, on stage times drawn
// at random (zeros included), with and without sends, held by them or not.
TEST(PipelineSimulation, LowerBoundNeverExceedsTheReplay) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<double> time(0.0, 2.0);
  auto draw = [&] { return time(rng) < 0.2 ? 0.0 : time(rng); };
  int cases = 0;
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                            ScheduleKind::interleaved, ScheduleKind::zero_bubble_h1}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 5, 8, 12}) {
        for (int v :
             kind == ScheduleKind::interleaved ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
          for (int trial = 0; trial < 6; ++trial) {
            PipelineSimulationInput in;
            for (int vs = 0; vs < p * v; ++vs) {
              in.virtual_stage_times.push_back({draw(), draw(), draw()});
            }
            in.send_s = trial % 3 == 0 ? 0.0 : draw();
            in.send_wait = trial % 2 == 0 ? SendWait::sender_waits : SendWait::overlapped;
            const double makespan = simulate_pipeline(make_schedule(kind, p, m, v), in).makespan_s;
            const double bound = pipeline_makespan_lower_bound(kind, p, m, v, in);
            EXPECT_LE(bound, makespan)
                << name(kind) << " P " << p << " M " << m << " v " << v << " trial " << trial;
            EXPECT_GE(bound, 0);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, (3 * 5 * 7 + 5 * 7 * 3) * 6);
}

// On equal stages the forward chain before the last rank and the gradient chain after it are
// the whole bubble of GPipe and 1F1B, so without sends the bound is the makespan (less its
// rounding slack). (With sends the replay also waits for sends the bound does not count.)
TEST(PipelineSimulation, LowerBoundIsTightOnEqualStages) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    for (int p : {1, 2, 4, 8}) {
      for (int m : {1, 4, 16}) {
        const PipelineSimulationInput in{uniform(p, {1.0, 2.0, 0.5})};
        const double makespan = simulate_pipeline(make_schedule(kind, p, m), in).makespan_s;
        SCOPED_TRACE(testing::Message() << name(kind) << " P " << p << " M " << m);
        EXPECT_NEAR(pipeline_makespan_lower_bound(kind, p, m, 1, in), makespan, 1e-5 * makespan);
      }
    }
  }
  // A fast first stage and a slow last one: rank 1's own work and the forward before it.
  const PipelineSimulationInput in{{StageTimes{1, 1, 0}, StageTimes{3, 3, 0}}, 0};
  const double makespan =
      simulate_pipeline(make_schedule(ScheduleKind::one_f_one_b, 2, 4), in).makespan_s;
  EXPECT_DOUBLE_EQ(makespan, 1 + 4 * 6 + 1);  // rank 1 [1, 25], then rank 0's last B [25, 26]
  EXPECT_NEAR(pipeline_makespan_lower_bound(ScheduleKind::one_f_one_b, 2, 4, 1, in), 26, 1e-4);
}

// The compiled replay, cached per (schedule, P, M, v), gives the replay of a freshly built
// schedule to the last bit, and is built once.
TEST(PipelineSimulation, CachedReplayIsTheFreshOne) {
  PipelineSimulationInput in;
  for (int vs = 0; vs < 8; ++vs) in.virtual_stage_times.push_back({0.1 * vs + 0.3, 0.7, 0.2});
  in.send_s = 0.05;
  const auto replay = cached_pipeline_replay(ScheduleKind::interleaved, 4, 8, 2);
  EXPECT_EQ(replay.get(), cached_pipeline_replay(ScheduleKind::interleaved, 4, 8, 2).get());
  EXPECT_EQ(replay->stages(), 4);
  EXPECT_EQ(replay->microbatches(), 8);
  EXPECT_EQ(replay->chunks(), 2);
  const PipelineSimulation cached = replay->run(in);
  const PipelineSimulation fresh = simulate_pipeline(make_interleaved_1f1b(4, 8, 2), in);
  EXPECT_EQ(cached.makespan_s, fresh.makespan_s);
  EXPECT_EQ(cached.critical_rank, fresh.critical_rank);
  ASSERT_EQ(cached.ranks.size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(cached.ranks[r].busy_s, fresh.ranks[r].busy_s);
    EXPECT_EQ(cached.ranks[r].sending_s, fresh.ranks[r].sending_s);
    EXPECT_EQ(cached.ranks[r].finish_s, fresh.ranks[r].finish_s);
  }
  EXPECT_THROW(replay->run({uniform(7, {1, 1, 1})}), Error);
  EXPECT_THROW(cached_pipeline_replay(ScheduleKind::one_f_one_b, 2, 4, 2), Error);
}

}  // namespace
}  // namespace dtrain::plan
