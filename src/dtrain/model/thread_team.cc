// ThreadTeam: workers spin briefly on the generation counter (the next op usually follows
// within microseconds), then sleep in std::atomic::wait; the caller waits the same way for
// the finished count.
#include "dtrain/model/thread_team.h"

#include <chrono>

#include "dtrain/core/check.h"

namespace dtrain::model {
namespace {

// Spins up to kSpin on `pred`, then blocks in atomic::wait until it holds.
constexpr auto kSpin = std::chrono::microseconds(100);

template <typename T, typename Pred>
void wait_until(const std::atomic<T>& value, Pred pred) {
  const auto start = std::chrono::steady_clock::now();
  int polls = 0;
  while (true) {
    T seen = value.load(std::memory_order_acquire);
    if (pred(seen)) return;
    if (++polls % 64 == 0 && std::chrono::steady_clock::now() - start > kSpin) {
      value.wait(seen, std::memory_order_acquire);
    }
  }
}

}  // namespace

Range split_range(int64_t n, int member, int members, int64_t align) {
  const int64_t units = (n + align - 1) / align;
  const int64_t base = units / members, extra = units % members;
  const int64_t first = member * base + std::min<int64_t>(member, extra);
  const int64_t count = base + (member < extra ? 1 : 0);
  return {std::min(n, first * align), std::min(n, (first + count) * align)};
}

ThreadTeam::ThreadTeam(int threads) : size_(threads) {
  DTRAIN_CHECK(threads >= 1 && threads <= kMaxTeamSize, "--threads must be in [1, ", kMaxTeamSize,
               "] (got ", threads, ")");
  for (int m = 1; m < threads; ++m) workers_.emplace_back([this, m] { worker(m); });
}

ThreadTeam::~ThreadTeam() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadTeam::worker(int member) {
  uint64_t seen = 0;
  while (true) {
    wait_until(generation_, [&](uint64_t g) { return g != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    try {
      (*task_)(member);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    finished_.fetch_add(1, std::memory_order_acq_rel);
    finished_.notify_one();
  }
}

void ThreadTeam::run(const std::function<void(int)>& fn) {
  if (size_ == 1) {
    fn(0);
    return;
  }
  task_ = &fn;
  finished_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);  // publishes task_ and finished_
  generation_.notify_all();
  try {
    fn(0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  wait_until(finished_, [&](int done) { return done == size_ - 1; });
  task_ = nullptr;
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace dtrain::model
