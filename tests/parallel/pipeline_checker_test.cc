// The checker's simulation against the closed forms of cost/pipeline_model.h: bubble (both
// definitions) and peak in-flight activations for every schedule, including where the
// generated schedule and the closed form part (M < P, uneven interleaved groups, ZB-H1 with
// W > min(F, B)). Hand-broken schedules are rejected with the rank and action named.
#include "dtrain/parallel/pipeline_checker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dtrain/core/check.h"
#include "dtrain/cost/pipeline_model.h"
#include "dtrain/schedule/pipeline_schedule.h"

namespace dtrain::parallel {
namespace {

using plan::ScheduleKind;

constexpr double kTol = 1e-9;
constexpr int kStages[] = {1, 2, 3, 4, 5, 8};

// Stage times: equal, and a few ratios (the fused backward's B+W against F varies).
const plan::StageTimes kTimes[] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 0.5}, {1, 1, 2}};

ScheduleReport simulate(const plan::PipelineSchedule& s, plan::StageTimes t,
                        SendMode mode = SendMode::eager) {
  SimulationOptions o;
  o.times = t;
  o.send_mode = mode;
  return simulate_schedule(s, o);
}

TEST(PipelineChecker, GpipeAndOneFOneBBubbleIsTheClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    for (int p : kStages) {
      for (int m = 1; m <= 16; ++m) {
        for (const plan::StageTimes& t : kTimes) {
          SCOPED_TRACE(testing::Message() << plan::name(kind) << " P " << p << " M " << m);
          const plan::PipelineSchedule s = plan::make_schedule(kind, p, m);
          for (SendMode mode : {SendMode::eager, SendMode::rendezvous}) {
            const ScheduleReport r = simulate(s, t, mode);
            // Issue 6: (P-1)/(M+P-1) of the total, and Megatron's (P-1)/M of the ideal, for
            // any ratio of F to the fused backward B+W.
            EXPECT_NEAR(r.bubble_fraction_of_total, (p - 1.0) / (m + p - 1.0), kTol);
            EXPECT_NEAR(r.bubble_fraction_of_ideal, (p - 1.0) / m, kTol);
            const plan::BubbleEstimate e = plan::pipeline_bubble(kind, p, m, 1, t);
            EXPECT_NEAR(r.bubble_time, e.bubble_time, kTol);
            EXPECT_NEAR(r.makespan, e.total_time, kTol);
            EXPECT_NEAR(r.ideal_time, e.ideal_time, kTol);
            for (const RankReport& rr : r.ranks) EXPECT_NEAR(rr.idle, e.bubble_time, kTol);
          }
        }
      }
    }
  }
}

TEST(PipelineChecker, IssueFigures) {
  // P = 8: 7/15 = 46.7% at M = 8 and 7/71 = 9.9% at M = 64.
  const ScheduleReport m8 = simulate(plan::make_1f1b(8, 8), {});
  EXPECT_NEAR(m8.bubble_fraction_of_total, 7.0 / 15, kTol);
  EXPECT_NEAR(m8.bubble_fraction_of_ideal, 7.0 / 8, kTol);
  const ScheduleReport m64 = simulate(plan::make_1f1b(8, 64), {});
  EXPECT_NEAR(m64.bubble_fraction_of_total, 7.0 / 71, kTol);
  EXPECT_NEAR(m64.bubble_fraction_of_ideal, 7.0 / 64, kTol);
}

TEST(PipelineChecker, InterleavingDividesTheBubbleByV) {
  for (int p : kStages) {
    for (int v : {1, 2, 3, 4}) {
      for (int m = p; m <= 4 * p; ++m) {  // M >= P; P need not divide M
        for (const plan::StageTimes& t : kTimes) {
          SCOPED_TRACE(testing::Message() << "P " << p << " M " << m << " v " << v);
          const ScheduleReport r = simulate(plan::make_interleaved_1f1b(p, m, v), t);
          const ScheduleReport flat = simulate(plan::make_1f1b(p, m), t);
          EXPECT_NEAR(r.bubble_time * v, flat.bubble_time, kTol);
          EXPECT_NEAR(r.bubble_fraction_of_total, (p - 1.0) / (v * m + p - 1.0), kTol);
          const plan::BubbleEstimate e =
              plan::pipeline_bubble(ScheduleKind::interleaved, p, m, v, t);
          EXPECT_NEAR(r.bubble_time, e.bubble_time, kTol);
          EXPECT_NEAR(r.bubble_fraction_of_ideal, e.fraction_of_ideal, kTol);
          if (m % p == 0) {  // Megatron's case: rendezvous sends give the same timing
            EXPECT_NEAR(
                simulate(plan::make_interleaved_1f1b(p, m, v), t, SendMode::rendezvous).bubble_time,
                e.bubble_time, kTol);
          }
        }
      }
    }
  }
}

TEST(PipelineChecker, InterleavedWithFewerMicroBatchesThanStages) {
  // M < P: the closed form assumes every round of P forwards is full, so it is only a lower
  // bound; interleaving still never loses to plain 1F1B.
  for (int p : kStages) {
    for (int m = 1; m < p; ++m) {
      for (int v : {2, 3}) {
        const ScheduleReport r = simulate(plan::make_interleaved_1f1b(p, m, v), {});
        const plan::BubbleEstimate e = plan::pipeline_bubble(ScheduleKind::interleaved, p, m, v);
        EXPECT_GE(r.bubble_time, e.bubble_time - kTol);
        EXPECT_LE(r.bubble_time, simulate(plan::make_1f1b(p, m), {}).bubble_time + kTol);
      }
    }
  }
}

TEST(PipelineChecker, ZeroBubbleH1Bubble) {
  // With W <= min(F, B) the first stage's W's fill every gap but the first: it idles (P-1)(F+B)
  // waiting for micro-batch 0's gradient (F and B of P-1 later stages), and each of the other
  // stages' deferred W's hides one W of it, at most min(M-1, P-1) of them (the first stage's
  // last W always runs after everything else). So bubble = (P-1)(F+B) - min(M-1, P-1) W, which
  // is the closed form (P-1)(F+B-W) once M >= P and exceeds it by (P-M) W below that.
  for (int p : kStages) {
    for (int m = 1; m <= 16; ++m) {
      for (const plan::StageTimes& t : kTimes) {
        SCOPED_TRACE(testing::Message() << "P " << p << " M " << m << " F " << t.forward << " B "
                                        << t.backward_input << " W " << t.backward_weight);
        const ScheduleReport r = simulate(plan::make_zb_h1(p, m), t);
        const plan::BubbleEstimate e =
            plan::pipeline_bubble(ScheduleKind::zero_bubble_h1, p, m, 1, t);
        if (t.backward_weight <= std::min(t.forward, t.backward_input)) {
          const double expected =
              (p - 1) * (t.forward + t.backward_input) - std::min(m - 1, p - 1) * t.backward_weight;
          EXPECT_NEAR(r.bubble_time, expected, kTol);
          if (m >= p) {
            EXPECT_NEAR(r.bubble_time, e.bubble_time, kTol);
          }
        } else {
          EXPECT_GE(r.bubble_time, e.bubble_time - kTol);  // the closed form is a lower bound
        }
      }
    }
  }
}

TEST(PipelineChecker, PeakInflightIsTheClosedForm) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                            ScheduleKind::interleaved, ScheduleKind::zero_bubble_h1}) {
    for (int p : kStages) {
      for (int m = 1; m <= 16; ++m) {
        for (int v :
             kind == ScheduleKind::interleaved ? std::vector<int>{1, 2, 3} : std::vector<int>{1}) {
          SCOPED_TRACE(testing::Message()
                       << plan::name(kind) << " P " << p << " M " << m << " v " << v);
          const ScheduleReport r = simulate(plan::make_schedule(kind, p, m, v), {});
          for (int stage = 0; stage < p; ++stage) {
            const RankReport& rr = r.ranks[static_cast<size_t>(stage)];
            // Every (P, M, v), M % P != 0 included: the plan's count is the measured one.
            const double expected = plan::peak_inflight_microbatches(kind, p, m, v, stage);
            EXPECT_NEAR(rr.peak_inflight, expected, kTol) << "stage " << stage;
            // The weight stash (F until W): the same as the activations when the backward is
            // fused; ZB-H1's deferred W's make it min(P, M) on every stage (stage s holds its
            // P-s in-flight micro-batches plus up to s whose W waits).
            const double stash = kind == ScheduleKind::zero_bubble_h1 ? std::min(p, m) : expected;
            if (kind != ScheduleKind::interleaved) {
              EXPECT_EQ(plan::peak_weight_stash_microbatches(kind, p, m, v, stage), stash);
            }
            EXPECT_NEAR(rr.peak_weight_stash, stash, kTol) << "stage " << stage;
          }
        }
      }
    }
  }
}

TEST(PipelineChecker, CommunicationLatency) {
  // GPipe: the first micro-batch's forward crosses P-1 links, the last one's backward crosses
  // them again; everything else overlaps. makespan = (M+P-1)(F+B+W) + 2(P-1) latency.
  for (int p : kStages) {
    for (int m : {1, 3, 8}) {
      SimulationOptions o;
      o.comm_latency = 0.25;
      const ScheduleReport r = simulate_schedule(plan::make_gpipe(p, m), o);
      EXPECT_NEAR(r.makespan, (m + p - 1) * 3.0 + 2 * (p - 1) * o.comm_latency, kTol);
    }
  }
}

std::string error_of(const plan::PipelineSchedule& s, SendMode mode = SendMode::eager) {
  SimulationOptions o;
  o.send_mode = mode;
  return check_schedule(s, o).error;
}

// Replaces rank r's list with `labels` parsed from short labels: F0 B0 W0 b0 (input
// gradient) >a0 <a0 >g0 <g0, all chunk 0, peers the neighbours.
std::vector<plan::Action> parse(const plan::PipelineSchedule& s, int r,
                                const std::vector<std::string>& labels) {
  std::vector<plan::Action> out;
  for (const std::string& l : labels) {
    plan::Action a;
    const bool message = l[0] == '>' || l[0] == '<';
    a.microbatch = std::stoi(l.substr(message ? 2 : 1));
    const char k = message ? l[1] : l[0];
    if (!message) {
      a.kind = k == 'F'   ? plan::ActionKind::forward
               : k == 'B' ? plan::ActionKind::backward
               : k == 'b' ? plan::ActionKind::backward_input
                          : plan::ActionKind::backward_weight;
    } else if (l[0] == '>') {
      a.kind = k == 'a' ? plan::ActionKind::send_activation : plan::ActionKind::send_gradient;
    } else {
      a.kind = k == 'a' ? plan::ActionKind::recv_activation : plan::ActionKind::recv_gradient;
    }
    if (message) {
      const bool downstream =
          a.kind == plan::ActionKind::send_activation || a.kind == plan::ActionKind::recv_gradient;
      a.peer = downstream ? (r + 1) % s.stages : (r + s.stages - 1) % s.stages;
    }
    out.push_back(a);
  }
  return out;
}

TEST(PipelineChecker, RejectsBackwardBeforeForward) {
  plan::PipelineSchedule s = plan::make_1f1b(2, 2);
  s.per_rank[1] = parse(s, 1, {"<a0", "B0", "F0", ">g0", "<a1", "F1", "B1", ">g1"});
  EXPECT_EQ(error_of(s), "rank 1 action #1 backward(mb 0, chunk 0): runs before its forward");
}

TEST(PipelineChecker, RejectsWeightGradientBeforeItsBackward) {
  plan::PipelineSchedule s = plan::make_zb_h1(1, 2);
  s.per_rank[0] = parse(s, 0, {"F0", "W0", "b0", "F1", "b1", "W1"});
  EXPECT_EQ(error_of(s),
            "rank 0 action #1 backward_weight(mb 0, chunk 0): runs before its backward_input");
}

TEST(PipelineChecker, RejectsUnmatchedSends) {
  // Rank 1 never posts the receive for rank 0's first activation.
  plan::PipelineSchedule s = plan::make_1f1b(2, 2);
  s.per_rank[1] = parse(s, 1, {"F0", "B0", ">g0", "<a1", "F1", "B1", ">g1"});
  EXPECT_EQ(error_of(s),
            "rank 1 action #0 forward(mb 0, chunk 0): runs before its input activation is "
            "received");
  // Rank 0 sends micro-batch 0's activation twice.
  s = plan::make_1f1b(2, 2);
  s.per_rank[0] = parse(s, 0, {"F0", ">a0", ">a0", "F1", ">a1", "<g0", "B0", "<g1", "B1"});
  EXPECT_EQ(error_of(s), "rank 0 action #2 send_activation(mb 0, chunk 0) -> rank 1: sent twice");
  // Rank 0 sends its activations in the other order than rank 1 receives them.
  s = plan::make_1f1b(2, 2);
  s.per_rank[0] = parse(s, 0, {"F0", "F1", ">a1", ">a0", "<g0", "B0", "<g1", "B1"});
  EXPECT_EQ(error_of(s),
            "rank 0 action #2 send_activation(mb 1, chunk 0) -> rank 1: message 0 on this link "
            "is received by rank 1 action #0 recv_activation(mb 0, chunk 0) <- rank 0 - sends "
            "and receives are out of order");
  // A message to a rank that is not the neighbouring stage.
  s = plan::make_1f1b(3, 1);
  s.per_rank[0][1].peer = 2;
  EXPECT_EQ(error_of(s),
            "rank 0 action #1 send_activation(mb 0, chunk 0) -> rank 2: the neighbouring "
            "virtual stage is on rank 1");
}

TEST(PipelineChecker, RejectsMissingWork) {
  plan::PipelineSchedule s = plan::make_gpipe(1, 2);
  s.per_rank[0].pop_back();  // drops B1
  EXPECT_EQ(error_of(s), "rank 0 never runs the backward for forward(mb 1, chunk 0)");
}

TEST(PipelineChecker, RejectsDeadlockingOrders) {
  // Rank 1 waits for activation 1 before sending gradient 0; rank 0 waits for gradient 0 before
  // sending activation 1.
  plan::PipelineSchedule s = plan::make_1f1b(2, 2);
  s.per_rank[0] = parse(s, 0, {"F0", ">a0", "<g0", "B0", "F1", ">a1", "<g1", "B1"});
  s.per_rank[1] = parse(s, 1, {"<a0", "F0", "<a1", "F1", "B0", ">g0", "B1", ">g1"});
  const std::string e = error_of(s);
  EXPECT_EQ(e,
            "deadlock with eager sends: rank 0 action #2 recv_gradient(mb 0, chunk 0) <- rank 1 "
            "waits for rank 1; rank 1 action #2 recv_activation(mb 1, chunk 0) <- rank 0 waits "
            "for rank 0");
  // Under rendezvous the same schedule deadlocks too; simulate_schedule throws the message.
  EXPECT_THROW(simulate_schedule(s), Error);
}

TEST(PipelineChecker, TimelineMirrorsTheSimulation) {
  const plan::PipelineSchedule s = plan::make_interleaved_1f1b(2, 2, 2);
  const ScheduleReport r = simulate(s, {});
  const trace::Timeline t = to_timeline(s, r);
  ASSERT_EQ(t.rows.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank) {
    const auto& spans = t.rows[rank].spans;
    const auto& timed = r.timed[rank];
    ASSERT_EQ(spans.size(), timed.size());
    for (size_t i = 0; i < spans.size(); ++i) {
      EXPECT_EQ(spans[i].start, timed[i].start);
      EXPECT_EQ(spans[i].end, timed[i].end);
      EXPECT_EQ(spans[i].microbatch, timed[i].action.microbatch);
      EXPECT_EQ(trace::is_compute(spans[i].kind), is_compute(timed[i].action.kind));
      if (is_compute(timed[i].action.kind)) {
        EXPECT_EQ(spans[i].label, short_label(timed[i].action, 2));
      }
    }
  }
  EXPECT_EQ(t.end_time(), r.makespan);
}

}  // namespace
}  // namespace dtrain::parallel
