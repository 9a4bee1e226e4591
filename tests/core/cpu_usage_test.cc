// The other programs' load: /proc/stat's aggregate line parsed by hand, and the arithmetic of
// two readings worked on made-up figures.
#include "dtrain/core/cpu_usage.h"

#include <gtest/gtest.h>

#include <thread>

namespace dtrain {
namespace {

TEST(ProcStatBusy, SumsUserNiceSystemIrqSoftirqAndSteal) {
  // user 100 nice 20 system 30 idle 5000 iowait 7 irq 3 softirq 2 steal 5 guest 40 guest_nice 0:
  // busy = 100 + 20 + 30 + 3 + 2 + 5 = 160 ticks = 1.6 s at 100 ticks a second (idle, iowait and
  // the guest time, already inside user, left out).
  EXPECT_DOUBLE_EQ(proc_stat_busy_seconds("cpu  100 20 30 5000 7 3 2 5 40 0", 100), 1.6);
}

TEST(ProcStatBusy, AnOldKernelsFourFieldsAreEnough) {
  EXPECT_DOUBLE_EQ(proc_stat_busy_seconds("cpu 10 0 10 900", 100), 0.2);
}

TEST(ProcStatBusy, OtherLinesAndShortLinesAreUnknown) {
  EXPECT_EQ(proc_stat_busy_seconds("cpu0 100 20 30 5000", 100), -1);  // one core, not the sum
  EXPECT_EQ(proc_stat_busy_seconds("intr 12345", 100), -1);
  EXPECT_EQ(proc_stat_busy_seconds("cpu 1 2", 100), -1);
  EXPECT_EQ(proc_stat_busy_seconds("cpu 100 20 30 5000", 0), -1);
}

TEST(OtherLoad, MachineTimeLessThisProcessOverTheWall) {
  // Over 2 s of wall time the machine's cores were busy 3.0 s, this process 1.2 s of them: the
  // others kept (3.0 - 1.2) / 2 = 0.9 of a core busy.
  const CpuTimes before{10.0, 4.0, 100.0};
  const CpuTimes after{13.0, 5.2, 102.0};
  EXPECT_NEAR(other_load_cores(before, after), 0.9, 1e-12);
}

TEST(OtherLoad, NeverMoreCoresThanTheMachineHas) {
  // 0.02 s of others' ticks over 5 ms of wall time reads 4 cores; a 2-core machine: 2.
  const CpuTimes before{10.0, 4.0, 100.0};
  const CpuTimes after{10.02, 4.0, 100.005};
  EXPECT_NEAR(other_load_cores(before, after), 4, 1e-9);
  EXPECT_EQ(other_load_cores(before, after, 2), 2);
}

TEST(OtherLoad, TheCountersGrainCannotMakeItNegative) {
  // /proc/stat ticks at 10 ms, getrusage finer: this process can read busier than the machine.
  EXPECT_EQ(other_load_cores({10.0, 4.0, 100.0}, {10.5, 4.52, 100.5}), 0);
}

TEST(OtherLoad, UnknownWithoutTheMachinesFigureOrWithoutTime) {
  EXPECT_EQ(other_load_cores({-1, 0, 0}, {5, 1, 1}), -1);
  EXPECT_EQ(other_load_cores({5, 1, 1}, {-1, 2, 2}), -1);
  EXPECT_EQ(other_load_cores({5, 1, 1}, {6, 1, 1}), -1);
}

TEST(OtherLoad, TheGrainIsATickPerCoreOverTheWindow) {
  // 2 cores, 100 ticks a second, 0.5 s: each core's count may be a tick off, 2 x 0.01 s over
  // 0.5 s = 0.04 of a core.
  EXPECT_DOUBLE_EQ(other_load_grain_cores(2, 0.5, 100), 0.04);
  EXPECT_EQ(other_load_grain_cores(2, 0, 100), 2);  // no window: anything
}

TEST(OtherLoad, ASpinningThreadOfThisProcessIsNotOthersWork) {
  // This process's own busy time is taken out: a reading around 0.2 s of spinning here leaves
  // the others' share, which other tests running at the same time can only raise. Bounded by
  // the machine: never more cores than it has.
  const CpuTimes before = read_cpu_times();
  ASSERT_GE(before.machine_busy_s, 0) << "/proc/stat's aggregate line did not parse";
  volatile double x = 0;
  CpuTimes after = before;
  while (after.wall_s - before.wall_s < 0.2) {
    for (int i = 0; i < 100000; ++i) x = x + 1;
    after = read_cpu_times();
  }
  const double others = other_load_cores(before, after);
  EXPECT_GE(others, 0);
  EXPECT_LE(others, static_cast<double>(std::thread::hardware_concurrency()) + 0.5);
  EXPECT_GT(after.process_s - before.process_s, 0.1);  // the spin was counted as this process's
}

}  // namespace
}  // namespace dtrain
