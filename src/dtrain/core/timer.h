// Monotonic time in microseconds, and a stopwatch; every timing in dtrain goes through here.
#pragma once

#include <chrono>
#include <cstdint>

namespace dtrain {

inline double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
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
