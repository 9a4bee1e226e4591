// The clock's simulation (schedule/pipeline_simulation.h) against the checker's
// (pipeline_checker.h): two replays of the same schedules, written apart, agree on every rank's
// busy time and finish for every schedule on a grid of P, M and v, with the sender free and a
// message latency.
#include "dtrain/schedule/pipeline_simulation.h"

#include <gtest/gtest.h>

#include "dtrain/parallel/pipeline_checker.h"

namespace dtrain::parallel {
namespace {

using plan::ScheduleKind;

TEST(PipelineSimulation, AgreesWithTheCheckersSimulation) {
  const plan::StageTimes stage{1.0, 2.0, 0.5};
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                            ScheduleKind::interleaved, ScheduleKind::zero_bubble_h1}) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 2, 3, 4, 5, 8}) {
        const int v = kind == ScheduleKind::interleaved ? 2 : 1;
        for (double latency : {0.0, 0.3}) {
          const plan::PipelineSchedule s = plan::make_schedule(kind, p, m, v);
          SimulationOptions o;
          o.times = stage;
          o.comm_latency = latency;
          const ScheduleReport want = simulate_schedule(s, o);
          plan::PipelineSimulationInput in;
          in.virtual_stage_times = plan::virtual_stage_times(p, v, stage, {0, 0, 0}, {0, 0, 0});
          in.send_s = latency;
          in.send_wait = plan::SendWait::overlapped;
          const plan::PipelineSimulation got = plan::simulate_pipeline(s, in);
          SCOPED_TRACE(testing::Message()
                       << plan::name(kind) << " P " << p << " M " << m << " latency " << latency);
          EXPECT_NEAR(got.makespan_s, want.makespan, 1e-12);
          for (int r = 0; r < p; ++r) {
            EXPECT_NEAR(got.ranks[static_cast<size_t>(r)].busy_s,
                        want.ranks[static_cast<size_t>(r)].busy, 1e-12);
            EXPECT_NEAR(got.ranks[static_cast<size_t>(r)].finish_s,
                        want.ranks[static_cast<size_t>(r)].finish, 1e-12);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
