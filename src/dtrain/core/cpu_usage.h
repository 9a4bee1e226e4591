// How much of the machine's cores other programs used while a run was timed. The engine's clock
// prices an idle machine, and a program started beside a run (even the reader of its output)
// takes a core from a 2-core machine, which the run's step times alone cannot tell from a
// slow clock.
#pragma once

#include <string_view>

namespace dtrain {

struct CpuTimes {
  double machine_busy_s = -1;  // every core's non-idle time since boot (/proc/stat); -1: unknown
  double process_s = 0;        // this process's user + system time, every thread (getrusage)
  double wall_s = 0;           // a monotonic clock
};

// The three readings now.
CpuTimes read_cpu_times();

// Non-idle seconds in /proc/stat's aggregate line ("cpu  user nice system idle iowait irq softirq
// steal ..."): user, nice, system, irq, softirq and steal, over `ticks_per_s` (idle and iowait
// left out; guest time is already inside user). -1 when the line is not that line.
double proc_stat_busy_seconds(std::string_view cpu_line, double ticks_per_s);

// The cores other processes kept busy on average between two readings: the machine's non-idle
// time less this process's, over the wall time between them; at least 0 (the two counters tick
// at different grains: /proc/stat in 1/ticks_per_s, getrusage finer) and at most `cores` when
// given (> 0): over a window of a few ticks a tick's rounding alone can read as more cores than
// the machine has. -1 when either reading lacks the machine's figure or no time passed.
double other_load_cores(const CpuTimes& before, const CpuTimes& after, int cores = 0);

// How far other_load_cores can be off from the counters' grain alone over `window_s` of wall
// time on `cores` cores: each core's /proc/stat count is whole ticks, so up to one tick per core
// (cores / (ticks_per_s x window_s)); ticks_per_s 0 reads the system's.
double other_load_grain_cores(int cores, double window_s, double ticks_per_s = 0);

}  // namespace dtrain
