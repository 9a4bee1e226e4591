// read_cpu_times from /proc/stat, getrusage and steady_clock; the parsing and the arithmetic
// apart, so that tests can work them by hand.
#include "dtrain/core/cpu_usage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace dtrain {

double proc_stat_busy_seconds(std::string_view cpu_line, double ticks_per_s) {
  if (ticks_per_s <= 0) return -1;
  std::istringstream in{std::string(cpu_line)};
  std::string name;
  if (!(in >> name) || name != "cpu") return -1;
  // user nice system idle iowait irq softirq steal: the first four are in every kernel since
  // 2.6, the rest read as 0 when absent.
  double field[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int read = 0;
  while (read < 8 && in >> field[read]) ++read;
  if (read < 4) return -1;
  const double busy = field[0] + field[1] + field[2] + field[5] + field[6] + field[7];
  return busy / ticks_per_s;
}

CpuTimes read_cpu_times() {
  CpuTimes t;
  t.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    t.process_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  }
  std::ifstream stat("/proc/stat");
  std::string line;
  if (stat.good() && std::getline(stat, line)) {
    t.machine_busy_s = proc_stat_busy_seconds(line, static_cast<double>(sysconf(_SC_CLK_TCK)));
  }
  return t;
}

double other_load_cores(const CpuTimes& before, const CpuTimes& after, int cores) {
  const double wall = after.wall_s - before.wall_s;
  if (before.machine_busy_s < 0 || after.machine_busy_s < 0 || wall <= 0) return -1;
  const double others =
      (after.machine_busy_s - before.machine_busy_s) - (after.process_s - before.process_s);
  const double load = std::max(0.0, others / wall);
  return cores > 0 ? std::min(load, static_cast<double>(cores)) : load;
}

double other_load_grain_cores(int cores, double window_s, double ticks_per_s) {
  if (ticks_per_s <= 0) ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (window_s <= 0 || ticks_per_s <= 0) return static_cast<double>(cores);
  return static_cast<double>(cores) / (ticks_per_s * window_s);
}

}  // namespace dtrain
