// Monotonic time in microseconds, and a stopwatch; every timing in dtrain goes through here.
// Also the calling thread's CPU time: what a single-threaded computation costs whatever else the
// machine's cores are doing (a wall clock on a shared VM counts the others' time too).
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace dtrain {

inline double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// CPU seconds the calling thread has run (CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

class Stopwatch {
 public:
  Stopwatch() : start_us_(now_us()) {}
  void restart() { start_us_ = now_us(); }
  double elapsed_us() const { return now_us() - start_us_; }
  double elapsed_s() const { return elapsed_us() * 1e-6; }

 private:
  double start_us_;
};

}  // namespace dtrain
